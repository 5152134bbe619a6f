"""The core's default weight recipe, ``grouped``: reported feedback in comparison groups,
trained GRPO-style.

Clients post reports naming their comparison group in ``metadata.group``; a group trains once it
holds ``group_size`` reports (:class:`~reef.recipe.grouped.processor.GroupedReportSamples`), and
each job's data keeps every sample's group
(:class:`~reef.recipe.grouped.processor.GroupedJobData`), so the component centres each reward
on its group's mean. A weight recipe: the deployment sets
``pipeline.sample2job.config.job_samples``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from reef.recipe import PipelineSpec, Recipe


class GroupedRecipe(Recipe):
    """Grouped reported feedback (see the module's documentation).

    :cvar job_parameters: what the trainer gives the component with each job: the
        importance-sampling policy gradient, whose advantages are group-centred rewards.
    """

    requires_job_samples: ClassVar[bool] = True
    job_parameters: ClassVar[Mapping[str, Any]] = {"objective": "importance_sampling"}

    @classmethod
    def pipeline_spec(cls) -> PipelineSpec:
        """``GroupedReportSamples`` then ``GroupedJobData``."""
        return PipelineSpec(record2sample="GroupedReportSamples", sample2job="GroupedJobData")
