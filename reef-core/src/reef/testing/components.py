"""A training component for tests of the trainer loop: it trains nothing and finishes each job
at once, keeping every job's data so that a test can read what was submitted."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from reef.components.interface import Artifact, JobHandle
from reef.core.job_data import JobData, JobOutcome


class RecordingComponent:
    """Keeps what it is given in :attr:`submitted`, and sets :attr:`all_submitted` once
    ``expected_jobs`` jobs were submitted, so a test waits on an event instead of sleeping.

    :param expected_jobs: how many submissions set :attr:`all_submitted`.
    :param name: the component's (and so the trainer's) name.
    """

    def __init__(self, expected_jobs: int = 1, *, name: str = "c") -> None:
        self.name = name
        self.expected_jobs = expected_jobs
        self.submitted: list[JobData] = []
        self.all_submitted = threading.Event()

    def submit(self, data: JobData, parameters: Mapping[str, Any] | None = None) -> JobHandle:
        self.submitted.append(data)
        if len(self.submitted) >= self.expected_jobs:
            self.all_submitted.set()
        return JobHandle(data.id, self.name)

    def poll(self, handle: JobHandle) -> JobOutcome | None:
        return JobOutcome(handle.job_id, self.name, "finished")

    def wait(self, handle: JobHandle, timeout: float | None = None) -> JobOutcome:
        return JobOutcome(handle.job_id, self.name, "finished")

    def publish(self) -> Artifact:
        return Artifact("art-0", Path("."))

    def close(self) -> None:
        pass
