"""Queued training instructions (``POST`` by a client, run in manual mode, P-MODE-10).

Durable and idempotent by the client's request id; each trainer consumes each instruction once
(:func:`consume_instruction`, in the transaction of the commit that answers it).
"""

from __future__ import annotations

import attrs
from sqlalchemy import Connection, literal, select

from reef.storage import json_values
from reef.storage.errors import ConflictError
from reef.storage.samples.sample_rows import JSON, SampleRows
from reef.storage.tables import instruction_reads, instructions
from reef.storage.upserts import insert_or_ignore

__all__ = ["Instruction", "Instructions", "consume_instruction"]


@attrs.frozen
class Instruction:
    """A queued training instruction (``POST`` by a client, run in manual mode).

    :ivar request_id: the client's request id; the instruction's id in the store.
    :ivar body: the instruction as the client gave it.
    """

    request_id: str
    body: JSON


def consume_instruction(
    connection: Connection, scenario: str, trainer: str, request_id: str
) -> None:
    """Mark an instruction consumed by ``trainer``, in the caller's transaction (idempotent)."""
    insert_or_ignore(
        connection,
        instruction_reads,
        [{"scenario": scenario, "trainer": trainer, "request_id": request_id}],
    )


class Instructions(SampleRows):
    """The training instructions of one scenario."""

    def enqueue_instruction(self, request_id: str, body: JSON) -> bool:
        """Queue a training instruction under the client's request id (P-MODE-10).

        :returns: True when queued now; False when the same instruction was queued already.
        :raises ConflictError: when the request id was queued with another body.
        """
        text = json_values.dump(body)
        with self._database.write() as connection:
            stored = connection.execute(
                select(instructions.c.body).where(
                    instructions.c.scenario == self.scenario,
                    instructions.c.request_id == request_id,
                )
            ).scalar_one_or_none()
            if stored is not None:
                if stored != text:
                    raise ConflictError("instruction", request_id, self.scenario)
                return False
            connection.execute(
                instructions.insert().values(
                    scenario=self.scenario, request_id=request_id, body=text
                )
            )
        return True

    def unread_instructions(self, trainer: str) -> list[Instruction]:
        """The instructions ``trainer`` has not consumed, oldest first (P-MODE-3)."""
        read = select(literal(1)).where(
            instruction_reads.c.scenario == self.scenario,
            instruction_reads.c.trainer == trainer,
            instruction_reads.c.request_id == instructions.c.request_id,
        )
        query = (
            select(instructions.c.request_id, instructions.c.body)
            .where(instructions.c.scenario == self.scenario, ~read.exists())
            .order_by(instructions.c.seq)
        )
        with self._database.read() as connection:
            return [
                Instruction(request_id, json_values.load(body))
                for request_id, body in connection.execute(query)
            ]

    def consume_instruction(self, trainer: str, request_id: str) -> None:
        """Mark an instruction consumed by ``trainer`` without a job (idempotent)."""
        with self._database.write() as connection:
            consume_instruction(connection, self.scenario, trainer, request_id)
