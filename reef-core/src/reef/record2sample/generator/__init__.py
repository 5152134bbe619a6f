"""What the generated-task recipe asks a task generator for: :class:`TaskGenerationRequest`.

The record-to-sample stage of the generated-task recipe
(:class:`reef.recipe.generated_tasks.processor.GeneratedTaskSamples`) calls its
:class:`reef.recipe.generated_tasks.TaskGenerator` with one request per generation (P-TASK-3).
This package also holds the generator service, which runs a task's container operations for a
generator that plays tasks (P-TASK-26).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs

from reef.core.records import InferenceRecord, Record, Report

__all__ = ["TaskGenerationRequest"]


def _records(values: Iterable[Record]) -> tuple[Record, ...]:
    return tuple(values)


def _source_records(_: object, __: attrs.Attribute[Any], records: tuple[Record, ...]) -> None:
    for record in records:
        if not isinstance(record, InferenceRecord | Report):
            raise TypeError(
                f"a source record is an inference record or a report, got {type(record).__name__}"
            )


@attrs.frozen
class TaskGenerationRequest:
    """One generation's request to a task generator.

    :ivar generation: numbers the generate call: 1, 2, ... in the scenario, continued after a
        restart; a retry of a generation asks with the same number (P-TASK-3, P-TASK-24).
    :ivar description: the kind of tasks to make, as the deployment describes it
        (``pipeline.record2sample.config.description``).
    :ivar source_records: the round's source sessions: each session's inference records, in
        store order, then its report (P-TASK-20); empty for a round without sessions.
    """

    generation: int = attrs.field(validator=attrs.validators.ge(1))
    description: str = ""
    source_records: tuple[Record, ...] = attrs.field(
        default=(), converter=_records, validator=_source_records
    )

    @property
    def source_record_ids(self) -> tuple[str, ...]:
        """The ids of :attr:`source_records`, in order: what each generated task keeps in its
        ``source_agent_record_ids`` (P-TASK-3)."""
        return tuple(record.id for record in self.source_records)
