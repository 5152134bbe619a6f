"""The ``sft`` recipe: names its two stages."""

from __future__ import annotations

from typing import ClassVar

from reef import PipelineSpec, Recipe


class SFTRecipe(Recipe):
    """Supervised fine-tuning on the agent turns of recorded trajectories (a weight recipe)."""

    requires_job_samples: ClassVar[bool] = True

    @classmethod
    def pipeline_spec(cls) -> PipelineSpec:
        """``SFTSamples`` then ``SFTJobData``."""
        return PipelineSpec(record2sample="SFTSamples", sample2job="SFTJobData")
