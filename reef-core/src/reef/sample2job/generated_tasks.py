"""The generated-task recipe's job data: :class:`GeneratedTaskJobData` (P-TASK-13).

A task job's data is the buffer's train tasks, as :class:`~reef.core.job_data.TaskSample`
values: Reef runs no rollout of them. The training component rolls each task out on its own
sampler at the job's start weights, as the job parameters' ``rollout`` says, trains on the
rollouts, and reports each task's rewards in the job's metrics (``rollout_rewards``).

The stage tells the record-to-sample stage which tasks each job holds, so that the job's end
(``job_ended``) gives each of them its result, also when the job runs across a restart.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar, Final, Self

from reef.core.job_data import JobData, Sample, SampleKind, TaskSample
from reef.pipeline_context import PipelineContext
from reef.record2sample.generated_tasks import GeneratedTaskSamples
from reef.record2sample.stage import Record2Sample
from reef.sample2job.stage import Sample2Job, Sample2JobSettings

__all__ = ["GeneratedTaskJobData"]

#: ``buffer_size`` when the config sets none: a job takes at most this many tasks (or
#: ``job_samples``, when larger).
DEFAULT_BUFFER_SIZE: Final = 4


class GeneratedTaskJobData(Sample2Job):
    """Task jobs of the buffer's train tasks: at least ``job_samples`` (1 by default), at most
    ``buffer_size`` (4 by default).

    :param record2sample: the recipe's record-to-sample stage, told each job's tasks; ``None``
        for tasks that no such stage made (imported tasks in a manual job).
    """

    default_job_samples: ClassVar[int | None] = 1
    #: In auto mode the buffer's tasks train: the recipe gives task jobs their parameters.
    job_parameter_kinds: ClassVar[frozenset[SampleKind]] = frozenset({"task"})

    def __init__(
        self,
        context: PipelineContext,
        *,
        job_samples: int = 1,
        buffer_size: int | None = None,
        record2sample: GeneratedTaskSamples | None = None,
    ) -> None:
        if buffer_size is None:
            buffer_size = max(DEFAULT_BUFFER_SIZE, job_samples)
        super().__init__(context, job_samples=job_samples, buffer_size=buffer_size)
        self.record2sample = record2sample

    @classmethod
    def from_settings(
        cls,
        settings: Sample2JobSettings,
        *,
        context: PipelineContext,
        record2sample: Record2Sample,
        environ: Mapping[str, str],
    ) -> Self:
        """The job size keys, and the record-to-sample stage when it makes generated tasks."""
        del environ
        return cls(
            context,
            job_samples=cls.resolve_job_samples(settings),
            buffer_size=settings.buffer_size,
            record2sample=(
                record2sample if isinstance(record2sample, GeneratedTaskSamples) else None
            ),
        )

    def make_job_data(self, samples: Sequence[Sample], data_id: str) -> JobData:
        """The tasks, in buffer order; the record-to-sample stage learns which they are.

        :raises ValueError: for a sample that is not a task.
        """
        others = [s.sample_id for s in samples if not isinstance(s, TaskSample)]
        if others:
            raise ValueError(f"GeneratedTaskJobData trains tasks; {others} are not tasks")
        if self.record2sample is not None:
            names = tuple(s.name for s in samples if isinstance(s, TaskSample))
            self.record2sample.task_job_built(data_id, names)
        return JobData(data_id, tuple(samples))
