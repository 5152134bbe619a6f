"""Samples for component tests: one exchange as an ATIF trajectory, and a learnable toy task."""

from __future__ import annotations

from typing import Any

from reef.core.job_data import TrajectorySample


def exchange(
    prompt: str, reply: str, *, temperature: float | None = None, **extra: Any
) -> dict[str, Any]:
    """A trajectory of one user ``prompt`` and the agent's ``reply`` (which trains), with
    ``extra`` as its ``extra.reef`` (``max_tokens``, ``reward``...) and ``temperature``, when
    given, as the reply's sampling temperature (its step's ``extra.reef.temperature``)."""
    answer: dict[str, Any] = {"step_id": 2, "source": "agent", "message": reply}
    if temperature is not None:
        answer["extra"] = {"reef": {"temperature": temperature}}
    body: dict[str, Any] = {
        "schema_version": "ATIF-v1.8",
        "agent": {"name": "toy", "version": "1"},
        "steps": [{"step_id": 1, "source": "user", "message": prompt}, answer],
    }
    if extra:
        body["extra"] = {"reef": extra}
    return body


def colour_samples(count: int = 8) -> list[TrajectorySample]:
    """A learnable task: the colour of each number's parity (``red`` odd, ``blue`` even)."""
    return [
        TrajectorySample(exchange(f"colour {n}", "red" if n % 2 else "blue"), sample_id=f"t{n}")
        for n in range(count)
    ]
