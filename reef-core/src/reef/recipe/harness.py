"""The core's harness evolution recipe, ``harness``: a proposer improves the agent's harness
from its traces.

Each report is a trace (:class:`reef.record2sample.traces.TraceSamples`, no ``max_score``, no
report filtered by its score, P-LAYOUT-6); each job is one trace and the TRAIN instruction that
asked for it (:class:`reef.sample2job.traces.TraceJobData`, ``job_samples`` 1, instructions read
at once). The training component that runs the proposer is the deployment's; the recipe gives
it no objective of its own.
"""

from __future__ import annotations

from reef.recipe import PipelineSpec, Recipe


class HarnessRecipe(Recipe):
    """Harness evolution (see the module's documentation). It has no settings: a deployment
    that sets ``max_score`` is refused, as every unknown key is."""

    @classmethod
    def pipeline_spec(cls) -> PipelineSpec:
        """``TraceSamples`` then ``TraceJobData``."""
        return PipelineSpec(record2sample="TraceSamples", sample2job="TraceJobData")
