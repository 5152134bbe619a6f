"""Harness evolution's sample-to-job stages: :class:`TraceJobData` and :class:`TrainTaskJobData`.

A harness job is one proposal: the proposer reads the job's traces (or tasks) and the TRAIN
instruction that asked for it. So both stages default ``job_samples`` to 1 (P-SIZE-3), and both
read instructions: in manual mode an instruction runs at once, also with an empty manual buffer,
because the proposer can work from the instruction alone (P-MODE-6).

- :class:`TraceJobData`: the buffer's traces (trajectory samples), and uploaded trajectories.
- :class:`TrainTaskJobData`: the buffer's train tasks, imported ones included, for a proposer
  that tries its harness on tasks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from reef.core.job_data import JobData, Sample, SampleKind
from reef.sample2job.stage import Sample2Job

__all__ = ["TraceJobData", "TrainTaskJobData"]


class _HarnessJobData(Sample2Job):
    """What both harness stages share: one sample a job by default, instructions read."""

    default_job_samples: ClassVar[int | None] = 1
    reads_instructions: ClassVar[bool] = True
    #: The kind of sample the stage shapes; another kind is refused.
    kind: ClassVar[SampleKind]

    def make_job_data(self, samples: Sequence[Sample], data_id: str) -> JobData:
        """The samples as they are, in buffer order; the pipeline attaches the instruction.

        :raises ValueError: for a sample of another kind.
        """
        others = [s.sample_id for s in samples if s.kind != self.kind]
        if others:
            raise ValueError(f"{type(self).__name__} takes {self.kind} samples; not {others}")
        return JobData(data_id, tuple(samples), metadata={"harness": self.kind})


class TraceJobData(_HarnessJobData):
    """Harness jobs of traces: the buffer's trajectory samples and uploaded trajectories."""

    kind: ClassVar[SampleKind] = "trajectory"
    accepts_trajectories: ClassVar[bool] = True
    job_parameter_kinds: ClassVar[frozenset[SampleKind]] = frozenset({"trajectory"})


class TrainTaskJobData(_HarnessJobData):
    """Harness jobs of train tasks, imported train tasks included."""

    kind: ClassVar[SampleKind] = "task"
    accepts_imported_tasks: ClassVar[bool] = True
    job_parameter_kinds: ClassVar[frozenset[SampleKind]] = frozenset({"task"})
