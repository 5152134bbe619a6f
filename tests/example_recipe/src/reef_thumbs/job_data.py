"""The sample-to-job stage of the thumbs recipe: ``ThumbsJobData``.

It hands the buffer to the training component as it is, each sample with the group the store
gave it, and tells the component what it holds. It computes no advantage and no loss: those
belong to the component's objective (P-STG-15).
"""

from __future__ import annotations

from collections.abc import Sequence

from reef import JobData, Sample, Sample2Job, TrajectorySample
from reef_thumbs.samples import REWARDS


class ThumbsJobData(Sample2Job):
    """The buffer's rated replies as one job; a weight recipe, so the deployment sets
    ``job_samples`` (P-SIZE-2). The base class's settings (``job_samples``, ``buffer_size``)
    are all it takes. It takes no uploads: an uploaded trajectory carries no thumb."""

    def make_job_data(self, samples: Sequence[Sample], data_id: str) -> JobData:
        """Every sample, in store order, keeping its group (P-STG-3, P-REP-6), with counts the
        component can log."""
        rewards = [s.reward for s in samples if isinstance(s, TrajectorySample)]
        groups = {sample.group_id for sample in samples if sample.group_id is not None}
        return JobData(
            data_id,
            tuple(samples),
            metadata={
                "objective": "group_relative",
                "thumbs_up": rewards.count(REWARDS["up"]),
                "thumbs_down": rewards.count(REWARDS["down"]),
                "groups": len(groups),
            },
        )
