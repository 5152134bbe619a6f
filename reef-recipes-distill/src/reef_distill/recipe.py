"""The ``distill`` recipe: on-policy distillation with the core's shared distilling stages."""

from __future__ import annotations

from typing import ClassVar

from reef import PipelineSpec, Recipe


class DistillRecipe(Recipe):
    """On-policy distillation: the student's calls, scored by a teacher (a weight recipe).

    Its stages are the core's shared ``DistillSamples`` and ``DistillJobData``.
    """

    requires_job_samples: ClassVar[bool] = True

    @classmethod
    def pipeline_spec(cls) -> PipelineSpec:
        """The core's ``DistillSamples`` then ``DistillJobData``."""
        return PipelineSpec(record2sample="DistillSamples", sample2job="DistillJobData")
