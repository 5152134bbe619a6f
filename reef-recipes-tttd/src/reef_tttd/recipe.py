"""The ``tttd`` recipe: test-time training to discover (TTT-Discover) on a runner's reports."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from reef import PipelineSpec, Recipe


class TTTDRecipe(Recipe):
    """TTT-Discover: an external runner reports each step's rollouts in a grid; each complete
    step trains as one job with entropic advantages and the importance-sampling loss.

    Its ``job_samples`` defaults to one step of the grid, so it is not required.
    """

    job_parameters: ClassVar[Mapping[str, Any]] = {"objective": "importance_sampling"}

    @classmethod
    def pipeline_spec(cls) -> PipelineSpec:
        """``TTTDSamples`` then ``TTTDJobData``."""
        return PipelineSpec(record2sample="TTTDSamples", sample2job="TTTDJobData")
