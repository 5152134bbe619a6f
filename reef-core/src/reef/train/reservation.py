"""``JobReservation``: job data the pipeline handed out, held until committed or released.

:meth:`TrainingPipeline.reserve <reef.train.pipeline.TrainingPipeline.reserve>` returns one. It
carries the job data, the samples it reserved and the instruction it answers (manual mode), so
its holder never passes a data id back to the pipeline: it checks the data against its stage's
``output_schema`` (:meth:`JobReservation.validate`), takes a replacement from a
``reef_before_submit`` hook (:meth:`JobReservation.with_data`), asks what its commit consumes
(:attr:`JobReservation.consumed_sample_ids`), and ends it once, by :meth:`JobReservation.commit`
after a submission or :meth:`JobReservation.release` when nothing was submitted.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

import attrs

from reef.core.job_data import JobData, TrainingInstruction

__all__ = ["JobReservation"]


class _Reserver(Protocol):
    """What a reservation asks of the pipeline that made it."""

    def consumed_sample_ids(
        self, data_id: str, given_back: Iterable[str] = ()
    ) -> tuple[str, ...]: ...

    def acknowledge(
        self,
        data_id: str,
        *,
        released_record_ids: Iterable[str] = (),
        given_back: Iterable[str] = (),
    ) -> tuple[str, ...]: ...

    def release_job_data(self, data_id: str) -> None: ...

    def validate_job_data(self, data: JobData) -> None: ...


@attrs.frozen
class JobReservation:
    """Reserved job data (P-PIPE-7): its samples stay out of the buffer until it ends.

    :ivar data: the job data; after a ``reef_before_submit`` hook, the data the hook returned
        (same id), which may give part of the reservation back (``JobData.given_back``).
    :ivar sample_ids: the reserved samples' ids, in store order.
    :ivar instruction: the training instruction the data answers (manual mode), else ``None``.
    """

    data: JobData
    sample_ids: tuple[str, ...]
    instruction: TrainingInstruction | None
    _pipeline: _Reserver = attrs.field(alias="pipeline", repr=False, eq=False)

    @property
    def data_id(self) -> str:
        """The job data's id: the job's id at the component, the submission's id in the store."""
        return self.data.id

    @property
    def instruction_id(self) -> str | None:
        """The request id of the instruction the data answers, ``None`` in auto mode."""
        return None if self.instruction is None else self.instruction.request_id

    @property
    def consumed_sample_ids(self) -> tuple[str, ...]:
        """The samples the commit consumes, in store order: every reserved sample, submitted
        or removed by the recipe (P-REP-6), except those the data gives back.

        :raises GivenBackError: when the data gives back a sample it did not reserve, or part
            of a group whose other members the commit consumes.
        """
        return self._pipeline.consumed_sample_ids(self.data.id, self.data.given_back)

    def validate(self) -> None:
        """Check the data against its sample-to-job stage's ``output_schema`` (P-PIPE-7).

        :raises JobDataError: naming the data, the stage, the path and the reason.
        """
        self._pipeline.validate_job_data(self.data)

    def with_data(self, data: JobData) -> JobReservation:
        """The same reservation carrying ``data`` (what a ``reef_before_submit`` hook returned).

        :raises ValueError: when ``data`` has another id than the reserved data.
        """
        if data.id != self.data.id:
            raise ValueError(
                f"job data {self.data.id!r} was replaced by data of another id, {data.id!r}:"
                " a replacement keeps the reserved data's id"
            )
        return attrs.evolve(self, data=data)

    def commit(self, *, released_record_ids: Iterable[str] = ()) -> tuple[str, ...]:
        """The data was submitted: commit it (P-PIPE-9), consuming
        :attr:`consumed_sample_ids` and ``released_record_ids`` (the records the stage ended,
        P-STALE-1); the samples given back return to the buffer.

        :returns: ``sample:<id>`` per consumed sample, then ``instruction:<request id>`` in
            manual mode.
        :raises KeyError: when the reservation ended already.
        """
        return self._pipeline.acknowledge(
            self.data.id, released_record_ids=released_record_ids, given_back=self.data.given_back
        )

    def release(self) -> None:
        """Nothing was submitted: every reserved sample goes back to the buffer (P-PIPE-8)."""
        self._pipeline.release_job_data(self.data.id)
