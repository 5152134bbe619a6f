"""The ``spade`` recipe: trains on generated tasks, with the core's generated-task stages."""

from __future__ import annotations

from reef import PipelineSpec, Recipe


class SpadeRecipe(Recipe):
    """Generated-task training, whose ``pipeline.record2sample.config.generator`` names SPADE.

    Its stages are the core's ``GeneratedTaskSamples`` and ``GeneratedTaskJobData``
    (``job_samples`` defaults to 1 there, so this is not a weight recipe).
    """

    @classmethod
    def pipeline_spec(cls) -> PipelineSpec:
        """The core's ``GeneratedTaskSamples`` then ``GeneratedTaskJobData``."""
        return PipelineSpec(record2sample="GeneratedTaskSamples", sample2job="GeneratedTaskJobData")
