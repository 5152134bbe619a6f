"""The ``thumbs`` recipe: names its two stages and the job parameters of its objective."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from reef import PipelineSpec, Recipe


class ThumbsRecipe(Recipe):
    """Thumbs up/down on agent replies, compared per conversation (a weight recipe).

    :cvar job_parameters: what the trainer gives the component with each job: the
        importance-sampling policy gradient, whose advantage is a reward minus its group's mean.
    """

    requires_job_samples: ClassVar[bool] = True
    job_parameters: ClassVar[Mapping[str, Any]] = {"objective": "importance_sampling"}

    @classmethod
    def pipeline_spec(cls) -> PipelineSpec:
        """``ThumbsSamples`` then ``ThumbsJobData`` (P-STG-7)."""
        return PipelineSpec(record2sample="ThumbsSamples", sample2job="ThumbsJobData")
