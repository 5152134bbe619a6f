"""A job's end, killed in the middle: a trainer process is SIGKILLed while it publishes a
finished job's weights (its end durable, the new weights not served yet), or while a job runs
(the job dies with it). The trainer that starts next, in this process, replays the ended job
first and once, or finds the job failed and shows its samples as consumed by a failed job,
never as trained, and never trains them again. Real :class:`Trainer` threads and processes on
SQLite (and PostgreSQL with REEF_TEST_DATABASE_URL)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from reef.components.interface import JobHandle
from reef.core.job_data import JobOutcome
from reef.hookspecs import hookimpl
from reef.plugins import Plugins
from reef.record2sample.no_samples import NoSamples
from reef.storage import (
    Database,
    DropCounters,
    JobHistory,
    SampleBrowser,
    SampleFilter,
    TrainerSamples,
    TrainerState,
    open_database,
)
from reef.testing.components import RecordingComponent, grouped_parts, store_groups
from reef.train.trainer import Trainer, TrainerSettings

#: A trainer process (scenario ``s``, trainer ``c``, jobs of one group of two) whose component
#: finishes each job at once. ``publish`` says so and hangs after a job ended (``publish``
#: mode), or ``poll`` says so and the job never ends (``run`` mode: its submission is
#: committed): the test SIGKILLs it there.
DYING = """
import sys, threading
from pathlib import Path
from reef.components.interface import Artifact
from reef.storage import open_database
from reef.testing.components import RecordingComponent, grouped_parts
from reef.train.trainer import Trainer, TrainerSettings

mode = sys.argv[3]

class Dying(RecordingComponent):
    published = 0

    def poll(self, handle):
        if mode == "run":  # polled once its submission committed
            print("running", handle.job_id, flush=True)
            return None  # the job runs until the process dies
        return super().poll(handle)

    def publish(self):
        self.published += 1
        if self.published > 1:  # the weights of the job that just ended
            print("publishing", flush=True)
            threading.Event().wait()
        return Artifact("art-0", Path("."))

build = grouped_parts(Dying(), buffer_size=2, replay_last_outcome=False)
settings = TrainerSettings(poll_interval=0.05, lease_ttl=float(sys.argv[2]))
Trainer("s", "c", database=open_database(sys.argv[1]), build=build, holder="dying",
        settings=settings).run()
"""

TTL = 1.0


class CallsOfTheStage(NoSamples):
    """A stage that keeps, in :attr:`calls` (of the class: the trainer builds it), the calls
    it gets that a restarted trainer must not make before ``job_ended``."""

    calls: list[tuple[str, Any]] = []

    def job_ended(self, outcome: JobOutcome) -> None:
        self.calls.append(("job_ended", outcome.job_id))

    def observe_serving_artifact_id(self, artifact_id: str) -> None:
        self.calls.append(("observe_serving_artifact_id", artifact_id))
        super().observe_serving_artifact_id(artifact_id)

    def advance(self, now: float) -> None:
        self.calls.append(("advance", None))
        super().advance(now)

    def made_samples(self) -> tuple[Any, ...]:
        self.calls.append(("made_samples", None))
        return ()


class EndsHeard:
    """A plugin that keeps the job ends it hears of (``reef_job_ended``)."""

    def __init__(self) -> None:
        self.ended: list[str] = []

    @hookimpl
    def reef_job_ended(self, scenario: str, trainer: str, outcome: JobOutcome) -> None:
        self.ended.append(outcome.job_id)


class LostWithItsProcess(RecordingComponent):
    """A component in a new process: a job it was not given here died with the process that
    ran it (as the local component answers)."""

    def poll(self, handle: JobHandle) -> JobOutcome | None:
        if handle.job_id not in {d.id for d in self.submitted}:
            return JobOutcome(handle.job_id, self.name, "failed", error="lost with its process")
        return super().poll(handle)


def kill_at(storage_url: str, mode: str, line: str) -> None:
    """Run :data:`DYING` in ``mode`` and SIGKILL it once it printed ``line``."""
    process = subprocess.Popen(
        [sys.executable, "-c", DYING, storage_url, str(TTL), mode],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().startswith(line)
    finally:
        process.kill()
        process.wait(30)
        if process.stdout is not None:
            process.stdout.close()


def restarted(database: Database, component: RecordingComponent, plugins: Plugins) -> None:
    """A trainer in this process, built as the runtime builds it (the last outcome is the
    trainer's to replay), run until ``component`` got its job, then stopped."""

    build = grouped_parts(
        component, buffer_size=2, record2sample=CallsOfTheStage, replay_last_outcome=False
    )
    settings = TrainerSettings(poll_interval=0.05, lease_ttl=TTL)
    trainer = Trainer("s", "c", database=database, build=build, plugins=plugins, settings=settings)
    trainer.start()
    try:
        assert component.all_submitted.wait(30)
    finally:
        trainer.stop(30)


@pytest.fixture
def database(storage_url: str) -> Iterator[Database]:
    opened = open_database(storage_url)
    store_groups(TrainerSamples(opened, "s"))  # g1 then g2, two samples each
    CallsOfTheStage.calls = []
    yield opened
    opened.dispose()


def test_a_crash_while_publishing_replays_the_ended_job_first_and_once(
    storage_url: str, database: Database
) -> None:
    """rule: P-PIPE-12 P-PIPE-13 -- the end of a job (its outcome, its end in the history)
    and the clearing of the running job are one durable step. Killed while it publishes the
    weights after that step, the next trainer finds no running job: it hands the ended job to
    its fresh stage before any other call (not observe_serving_artifact_id, advance or
    made_samples first), and to the plugins, once each; the end is not recorded again."""
    kill_at(storage_url, "publish", "publishing")
    history = JobHistory(database, "s")
    [ended] = history.read()
    assert ended.event == "finished"

    plugin = EndsHeard()
    plugins = Plugins(blocked=())
    plugins.register(plugin, "ends")
    restarted(database, RecordingComponent(1), plugins)

    assert TrainerState(database, "s").running_job("c") is None
    calls = CallsOfTheStage.calls
    assert calls[0] == ("job_ended", ended.job_id), calls[:3]
    assert calls.count(("job_ended", ended.job_id)) == 1
    assert plugin.ended.count(ended.job_id) == 1
    first, second = history.read()
    assert first == ended  # its end recorded once, not again after the restart
    assert second.event == "finished"
    counts = TrainerSamples(database, "s").train_counts("c", ["g1-0", "g1-1", "g2-0", "g2-1"])
    assert counts == {"g1-0": 1, "g1-1": 1, "g2-0": 1, "g2-1": 1}


def test_the_samples_of_a_job_killed_with_its_holder_are_consumed_by_a_failed_job(
    storage_url: str, database: Database
) -> None:
    """rule: P-PIPE-10 -- a job that dies with its process fails, and its samples never train
    again for that trainer; the history, the sample browser and the drop counts (status) say
    they were consumed by a failed job, not trained."""
    kill_at(storage_url, "run", "running")
    restarted(database, LostWithItsProcess(1), Plugins(blocked=()))

    killed, next_job = JobHistory(database, "s").read()
    assert (killed.event, killed.error) == ("failed", "lost with its process")
    assert (killed.trained, killed.consumed) == (2, 2)  # sent, then thrown away
    assert next_job.event == "finished"
    samples = TrainerSamples(database, "s")
    # Consumed once each, never trained again: the next job took g2.
    assert samples.train_counts("c", ["g1-0", "g1-1", "g2-0"]) == {
        "g1-0": 1, "g1-1": 1, "g2-0": 1
    }  # fmt: skip
    assert DropCounters(database, "s").counts()["c"] == {"failed_job": 2}

    browser = SampleBrowser(database, "s")
    failed = browser.one("g1-0")
    assert failed is not None
    assert (dict(failed.train_counts), dict(failed.failed_counts)) == ({}, {"c": 1})
    trained = browser.one("g2-0")
    assert trained is not None
    assert (dict(trained.train_counts), dict(trained.failed_counts)) == ({"c": 1}, {})
    untrained = browser.page(SampleFilter(trained=False))
    assert [s.stored.id for s in untrained] == ["g1-0", "g1-1"]
    trained_page = browser.page(SampleFilter(trained=True, trainer="c"))
    assert [s.stored.id for s in trained_page] == ["g2-0", "g2-1"]


class CountingComponent(RecordingComponent):
    """Each job's outcome reports samples it rendered from text (no engine token ids)."""

    def poll(self, handle: JobHandle) -> JobOutcome | None:
        metrics = {"retokenized_samples": 3, "truncated_samples": 0, "prompt_mismatch_samples": 1}
        return JobOutcome(handle.job_id, self.name, "finished", metrics)


def test_the_trainer_sums_what_its_jobs_could_not_train_from_the_engines_tokens(
    storage_database: Any,
) -> None:
    """``retokenized_samples`` (and its kin) summed over the tenure's jobs, for status."""
    from reef.storage import TrainerSamples

    store_groups(TrainerSamples(storage_database, "s"))
    component = CountingComponent(expected_jobs=1)
    trainer = Trainer(
        "s",
        "c",
        database=storage_database,
        build=grouped_parts(component),
        settings=TrainerSettings(poll_interval=0.05),
    )
    trainer.start()
    try:
        assert component.all_submitted.wait(30)
    finally:
        trainer.stop(30)
    assert trainer.jobs_ended == 1
    # Only what is above 0; a second tenure would start again from 0 (status says "in N jobs").
    assert trainer.job_counts == {"retokenized_samples": 3, "prompt_mismatch_samples": 1}
