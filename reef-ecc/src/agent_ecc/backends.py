"""Backends answer execution requests with raw outputs, never verdicts.

Every backend has one method, ``submit(request) -> Future[Outcome]``, so that a seal can wait for
several executions until its deadline and a later seal can wait for one still running.

- :class:`LocalBackend` runs a callable (an executor) in a bounded thread pool.
- :class:`NoBackend` executes nothing: every request is an infrastructure failure.
- :class:`RecordingBackend` records each answer of another backend, for a later replay.
- :class:`RecordedBackend` serves recorded answers; an unrecorded request is an infrastructure
  error, never a verdict (E-REPLAY-2).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

import attrs

from agent_ecc.codec import from_json, to_json
from agent_ecc.execution import ExecRequest, InfraFailure, Outcome, RawOutput


class Backend(Protocol):
    """Something that executes requests."""

    def submit(self, request: ExecRequest) -> Future[Outcome]:
        """Start executing ``request``; the future gives its outcome."""
        ...


def _done(outcome: Outcome) -> Future[Outcome]:
    future: Future[Outcome] = Future()
    future.set_result(outcome)
    return future


class NoBackend:
    """Answers every request with an infrastructure failure (reason ``no_backend``): a seal
    without a re-verification service decides what it can and leaves the rest undeterminable."""

    def submit(self, request: ExecRequest) -> Future[Outcome]:
        """An infrastructure failure, at once."""
        return _done(InfraFailure(request.request_id, reason="no_backend"))


class LocalBackend:
    """Runs ``run(request)`` in at most ``capacity`` threads; an exception is an infra failure."""

    def __init__(self, run: Callable[[ExecRequest], RawOutput], *, capacity: int = 4) -> None:
        self._run = run
        self._pool = ThreadPoolExecutor(max_workers=capacity, thread_name_prefix="agent-ecc-exec")

    def _execute(self, request: ExecRequest) -> Outcome:
        try:
            return self._run(request)
        except Exception as error:  # an executor crash is infrastructure, never a verdict (I2)
            return InfraFailure(request.request_id, reason="executor", detail=repr(error))

    def submit(self, request: ExecRequest) -> Future[Outcome]:
        """Queue ``request`` on the pool."""
        return self._pool.submit(self._execute, request)

    def close(self) -> None:
        """Stop the pool after the queued work."""
        self._pool.shutdown(wait=True)


@attrs.frozen
class Recording:
    """One recorded answer: the request and its outcome."""

    request: ExecRequest
    outcome: RawOutput | InfraFailure


class RecordingBackend:
    """Passes requests to ``inner`` and appends each finished answer to the JSON-lines ``path``."""

    def __init__(self, inner: Backend, path: str | Path) -> None:
        self.inner = inner
        self.path = Path(path)
        self._lock = threading.Lock()

    def submit(self, request: ExecRequest) -> Future[Outcome]:
        """Submit to the inner backend; record the answer when it comes."""
        future = self.inner.submit(request)

        def record(done: Future[Outcome]) -> None:
            outcome = done.result()
            if isinstance(outcome, RawOutput | InfraFailure):
                line = json.dumps(to_json(Recording(request, outcome)), sort_keys=True)
                with self._lock, open(self.path, "a", encoding="utf-8") as handle:
                    handle.write(line + "\n")

        future.add_done_callback(record)
        return future


def load_recordings(path: str | Path) -> list[Recording]:
    """The recordings of a :class:`RecordingBackend` file (a torn last line is ignored)."""
    found = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            body = json.loads(line)
        except json.JSONDecodeError:
            continue
        found.append(from_json(Recording, body))
    return found


class RecordedBackend:
    """Serves recorded raw outputs by request identity (E-REPLAY-2).

    A request with no recorded output is answered with an :class:`InfraFailure` of reason
    ``unrecorded`` and counted in :attr:`unserved`. Recordings given first win: pass a seal's own
    recording before those of earlier seals.
    """

    def __init__(self, recordings: Iterable[Recording]) -> None:
        self._outputs: dict[str, RawOutput | InfraFailure] = {}
        for recording in recordings:
            self._outputs.setdefault(recording.request.request_id, recording.outcome)
        self.unserved: list[str] = []
        self.served: list[str] = []

    def submit(self, request: ExecRequest) -> Future[Outcome]:
        """The recorded outcome of ``request``, or an infrastructure failure."""
        outcome = self._outputs.get(request.request_id)
        if outcome is None:
            self.unserved.append(request.request_id)
            return _done(InfraFailure(request.request_id, reason="unrecorded"))
        self.served.append(request.request_id)
        return _done(outcome)
