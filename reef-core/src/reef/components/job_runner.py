"""Running a component's jobs one at a time, and keeping how each ended.

:class:`JobRunner` is the part of :class:`reef.components.interface.TrainingComponent` that is
the same for every component that trains in its own process: jobs run in submission order on
one thread of their own (the trainer never waits on them), each job's outcome is written under
a folder, whole, and a job id that ended there, in this process or an earlier one, is never run
again (:meth:`JobRunner.submit` returns its handle).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, TimeoutError as FutureTimeout
from pathlib import Path

import attrs

from reef.components.interface import JobHandle
from reef.components.json_files import read_json, write_json
from reef.core.job_data import JobOutcome

#: What :meth:`JobRunner.poll` says of a job it neither runs nor has an outcome of.
UNKNOWN_JOB = (
    "the job is unknown to this component: it was not submitted, or it was running when the "
    "process that ran it stopped"
)


class JobRunner:
    """Runs ``component``'s jobs and keeps their outcomes in ``folder`` (made when missing)."""

    def __init__(self, component: str, folder: Path) -> None:
        self.component = component
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"reef-{component}")
        self._jobs: dict[str, Future[JobOutcome]] = {}

    def path(self, job_id: str, suffix: str = ".json") -> Path:
        """The file of ``job_id`` in the folder (its outcome, or another record with
        ``suffix``)."""
        return self.folder / f"{hashlib.sha256(job_id.encode()).hexdigest()}{suffix}"

    def stored(self, job_id: str) -> JobOutcome | None:
        """The recorded outcome of ``job_id``, if it ended."""
        body = read_json(self.path(job_id))
        return None if body is None else JobOutcome(**body)

    def record(self, outcome: JobOutcome) -> None:
        """Write ``outcome`` whole (a reader sees no outcome or all of it)."""
        write_json(self.path(outcome.job_id), attrs.asdict(outcome))

    def submit(self, job_id: str, run: Callable[[], JobOutcome]) -> JobHandle:
        """Queue ``run`` for ``job_id`` unless that job runs or ended; return its handle."""
        if job_id not in self._jobs and self.stored(job_id) is None:
            self._jobs[job_id] = self._executor.submit(self._run, run)
        return JobHandle(job_id, self.component)

    def _run(self, run: Callable[[], JobOutcome]) -> JobOutcome:
        outcome = run()
        self.record(outcome)
        return outcome

    def poll(
        self, handle: JobHandle, unknown: Callable[[str], JobOutcome | None] | None = None
    ) -> JobOutcome | None:
        """The job's outcome once it ended, else ``None``.

        :param unknown: asked for the outcome of a job this runner neither runs nor recorded;
            without it, or when it returns ``None``, such a job failed (:data:`UNKNOWN_JOB`).
        """
        future = self._jobs.get(handle.job_id)
        if future is not None:
            return future.result() if future.done() else None
        outcome = self.stored(handle.job_id)
        if outcome is None and unknown is not None:
            outcome = unknown(handle.job_id)
        if outcome is None:
            outcome = JobOutcome(handle.job_id, self.component, "failed", error=UNKNOWN_JOB)
        return outcome

    def wait(
        self,
        handle: JobHandle,
        timeout: float | None = None,
        unknown: Callable[[str], JobOutcome | None] | None = None,
    ) -> JobOutcome:
        """Block until the job ends and return its outcome (see :meth:`poll` for ``unknown``).

        :raises TimeoutError: when it did not end within ``timeout`` seconds.
        """
        future = self._jobs.get(handle.job_id)
        if future is None:
            outcome = self.poll(handle, unknown)
            assert outcome is not None  # without a future, poll always knows the outcome
            return outcome
        try:
            return future.result(timeout=timeout)
        except FutureTimeout as exc:
            raise TimeoutError(f"job {handle.job_id!r} did not end in {timeout} s") from exc

    def close(self) -> None:
        """Take no more jobs; wait for the running one."""
        self._executor.shutdown(wait=True)
