"""Prepared re-execution: run, while groups wait in the buffer, what their seal will execute.

The coordinator gives every admitted group to :meth:`Preparer.admit`. The preparer plans its
members under the epoch in force (the scorer's :meth:`~agent_ecc.scorer.Scorer.plan`: the
executions a seal would ask for), nothing under the startup epoch, and runs them with the
scorer's backend, at most ``capacity`` at once. At each publication it drops the work of the
old epoch not yet started and plans every admitted group not yet decided again (E-PREP-1).
It decides no label: the seal does, taking a prepared result only for exactly the same request
under exactly its epoch (I8), and only when the result is an output a rule can grade (no
infrastructure failure); it waits for a job still running, takes over one not started, and
executes everything else itself (E-PREP-2). Groups a seal decided, or that the trainer retires,
are not prepared again (E-PREP-3).

With ``threads=False`` nothing runs in the background: :meth:`refresh` reads the pointer and
:meth:`run_pending` runs the queued jobs in the calling thread (tests, replays, benchmarks).
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from collections.abc import Iterable
from concurrent.futures import Future
from typing import Literal

import attrs

from agent_ecc.candidates import Candidate, Member
from agent_ecc.execution import ExecRequest, InfraFailure, Outcome, RawOutput
from agent_ecc.registry import DirectoryRegistry
from agent_ecc.scorer import Scorer, ScorerError
from agent_ecc.store import StoreError
from agent_ecc.versions import Check, GraderVersion, VersionError

JobState = Literal["queued", "running", "done", "taken", "dropped"]


def usable(outcome: Outcome) -> bool:
    """Whether a prepared outcome can decide a check: an output, not an infrastructure failure."""
    if not isinstance(outcome, RawOutput) or outcome.error is not None:
        return False
    return outcome.application is None or not outcome.application.stopped


@attrs.define
class _Job:
    epoch_index: int
    request: ExecRequest
    check: Check
    later: list[tuple[Check, ExecRequest]]  # the member's next checks, run if this one passes
    future: Future[Outcome] = attrs.field(factory=Future)
    state: JobState = "queued"


class Preparer:
    """Prepares the executions of admitted groups (see the module docstring).

    :param registry: the run's registry (its pointer is read at admission and each refresh).
    :param scorer: the scorer the seal uses: its plan, policy and backend.
    :param capacity: jobs running at once (the backend's sandboxes).
    :param threads: run jobs and watch publications in background threads.
    :param poll_s: how often the watcher reads the pointer.
    """

    def __init__(
        self,
        registry: DirectoryRegistry,
        scorer: Scorer,
        capacity: int = 16,
        threads: bool = True,
        *,
        poll_s: float = 0.2,
    ) -> None:
        if scorer.backend is None:
            raise ScorerError("a Preparer needs a scorer with a backend to execute with")
        self.registry = registry
        self.scorer = scorer
        self.capacity = capacity
        self.threads = threads
        self.poll_s = poll_s
        self.stats: Counter[str] = Counter()
        self._groups: dict[str, Candidate] = {}
        self._jobs: dict[tuple[int, str], _Job] = {}
        self._queue: deque[_Job] = deque()
        self._lock = threading.Condition()
        self._epoch_index = -1
        self._version: GraderVersion | None = None
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.refresh()
        if threads:
            for i in range(capacity):
                self._start(self._work, f"agent-ecc-prepare-{i}")
            self._start(self._watch, "agent-ecc-prepare-watch")

    def _start(self, target: object, name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)  # type: ignore[arg-type]
        thread.start()
        self._threads.append(thread)

    # -- what the coordinator and the trainer call ------------------------------------------

    def admit(self, candidate: Candidate) -> None:
        """Note an admitted group and plan its members under the current epoch."""
        with self._lock:
            self._groups[candidate.group_id] = candidate
            self._plan(candidate)

    def retire(self, groups: Iterable[Candidate | str]) -> None:
        """Groups retired without a seal: never prepared again (E-PREP-3)."""
        self.settled(g if isinstance(g, str) else g.group_id for g in groups)

    def settled(self, group_ids: Iterable[str]) -> None:
        """Groups a seal decided (called by :meth:`SealSession.finish`): not prepared again."""
        with self._lock:
            for group_id in group_ids:
                self._groups.pop(group_id, None)

    def refresh(self) -> bool:
        """Read the pointer; at a new epoch drop the old queued work and plan every admitted
        group again. True when the epoch changed."""
        pointer = self.registry.read_pointer()
        with self._lock:
            if pointer.epoch.index == self._epoch_index:
                return False
            self._epoch_index = pointer.epoch.index
            self._version = self.registry.grader(pointer.epoch.version_id)
            for job in self._queue:
                job.state = "dropped"
            self.stats["dropped"] += len(self._queue)
            self._queue.clear()
            self._jobs = {k: j for k, j in self._jobs.items() if k[0] == self._epoch_index}
            for candidate in self._groups.values():
                self._plan(candidate)
            self.stats["replanned"] += 1
            return True

    def claim(self, request: ExecRequest, epoch_index: int) -> tuple[str, Future[Outcome] | None]:
        """How a seal under ``epoch_index`` gets ``request`` (see the module docstring)."""
        with self._lock:
            self.stats["claims"] += 1
            job = self._jobs.get((epoch_index, request.request_id))
            if job is None or job.state == "dropped":
                return "absent", None
            if job.state in ("queued", "taken"):
                if job.state == "queued":
                    self._queue.remove(job)
                    job.state = "taken"
                return "taken_over", None
            if job.state == "done":
                if usable(job.future.result()):
                    return "ready", job.future
                return "fallback", None
            return "waited", self._or_own(job)

    def jobs(self) -> dict[str, JobState]:
        """The state of each job of the current epoch, by request identity."""
        with self._lock:
            return {k[1]: j.state for k, j in self._jobs.items() if k[0] == self._epoch_index}

    def run_pending(self) -> int:
        """Run every queued job in the calling thread (``threads=False``); how many ran."""
        ran = 0
        while True:
            with self._lock:
                if not self._queue:
                    return ran
                job = self._queue.popleft()
                job.state = "running"
            self._run(job)
            ran += 1

    def close(self) -> None:
        """Stop the background threads (running jobs finish)."""
        self._stop.set()
        with self._lock:
            self._lock.notify_all()
        for thread in self._threads:
            thread.join()

    # -- inside ------------------------------------------------------------------------------

    def _plan(self, candidate: Candidate) -> None:
        # under self._lock
        if self._epoch_index <= 0 or self._version is None:
            return  # the startup epoch: recorded verdicts hold, nothing to prepare
        for member in candidate.members:
            self._plan_member(member, self._version)

    def _plan_member(self, member: Member, version: GraderVersion) -> None:
        try:
            needed = self.scorer.plan(member, version)
        except (VersionError, StoreError):  # the seal will find it undeterminable: nothing to run
            self.stats["unplannable"] += 1
            return
        if self.scorer.short_circuit:
            if needed:
                self._enqueue(needed[0], needed[1:])
        else:
            for item in needed:
                self._enqueue(item, [])

    def _enqueue(
        self, item: tuple[Check, ExecRequest], later: list[tuple[Check, ExecRequest]]
    ) -> None:
        check, request = item
        key = (self._epoch_index, request.request_id)
        if key in self._jobs:
            return  # one job per request under an epoch: identical attempts share it
        job = _Job(self._epoch_index, request, check, later)
        self._jobs[key] = job
        self._queue.append(job)
        self.stats["planned"] += 1
        self._lock.notify()

    def _run(self, job: _Job) -> None:
        assert self.scorer.backend is not None
        try:
            outcome = self.scorer.backend.submit(job.request).result()
        except Exception as error:  # a backend that raised: infrastructure, never a verdict
            outcome = InfraFailure(job.request.request_id, reason="executor", detail=repr(error))
        self.stats["executed"] += 1
        with self._lock:
            job.state = "done"
            follow = (
                job.later
                and job.epoch_index == self._epoch_index
                and usable(outcome)
                and isinstance(outcome, RawOutput)
                and self.scorer.verdict_of(job.check, outcome) == "pass"
            )
            if follow:
                self._enqueue(job.later[0], job.later[1:])
        job.future.set_result(outcome)

    def _or_own(self, job: _Job) -> Future[Outcome]:
        """The running job's outcome if usable, else the seal's own execution of the request."""
        answer: Future[Outcome] = Future()

        def done(finished: Future[Outcome]) -> None:
            outcome = finished.result()
            if usable(outcome):
                answer.set_result(outcome)
                return
            assert self.scorer.backend is not None
            own = self.scorer.backend.submit(job.request)
            own.add_done_callback(lambda f: answer.set_result(f.result()))

        job.future.add_done_callback(done)
        return answer

    def _work(self) -> None:
        while True:
            with self._lock:
                while not self._queue and not self._stop.is_set():
                    self._lock.wait()
                if self._stop.is_set():
                    return
                job = self._queue.popleft()
                job.state = "running"
            self._run(job)

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_s):
            self.refresh()
