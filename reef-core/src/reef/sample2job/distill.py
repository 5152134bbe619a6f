"""``DistillJobData``: the shared sample-to-job stage of the distilling recipes.

The job data is the buffer's samples as they are: each a student's call with its teacher
request (``extra.reef.teacher``, :mod:`reef.record2sample.distill`). The teacher, the
coefficient of the reverse KL and the weight of the task reward belong to the step objective,
the job parameters the recipe gives the training component (P-STG-15).
"""

from __future__ import annotations

from collections.abc import Sequence

from reef.core.job_data import JobData, Sample
from reef.sample2job.stage import Sample2Job


class DistillJobData(Sample2Job):
    """The distilling recipes' sample-to-job stage: every sample of the buffer, with its group.

    A weight recipe: the deployment sets ``job_samples`` (P-SIZE-2).
    """

    def make_job_data(self, samples: Sequence[Sample], data_id: str) -> JobData:
        """Every sample, each with its teacher request; the objective reads the teacher."""
        return JobData(data_id, tuple(samples), metadata={"objective": "distillation"})
