"""The trainer and its plugins: a submission that gives part of its reservation back, and what
extensions report of a scenario in the trainer's status snapshot and ``GET /reef/status``
(issue 5, "Into Reef"). Runs a real :class:`Trainer` thread on SQLite (and PostgreSQL with
REEF_TEST_DATABASE_URL)."""

from __future__ import annotations

import importlib.util
from typing import Any

import attrs
import pytest

from reef.core.job_data import JobData
from reef.hookspecs import hookimpl
from reef.plugins import Plugins
from reef.storage import (
    Database,
    RecordStore,
    ScenarioSettings,
    TrainerSamples,
    TrainerState,
)
from reef.storage.scenario_settings import snapshot_key
from reef.testing.components import RecordingComponent, store_groups, train_until_submitted


class GiveBackOnce:
    """An extension that gives the first group of the first job back (as Agent ECC gives back
    a group its seal left undecided) and reports how many jobs it saw."""

    def __init__(self) -> None:
        self.seen = 0

    @hookimpl
    def reef_before_submit(self, job_data: JobData) -> JobData | None:
        self.seen += 1
        if self.seen > 1:
            return None
        first = job_data.samples[0].group_id
        back = tuple(str(s.sample_id) for s in job_data.samples if s.group_id == first)
        kept = tuple(s for s in job_data.samples if s.group_id != first)
        return attrs.evolve(job_data, samples=kept, given_back=back)

    @hookimpl
    def reef_scenario_status(self, scenario: str) -> dict[str, Any] | None:
        return {"giveback": {"scenario": scenario, "jobs_seen": self.seen}}


class Quiet:
    """A second plugin that reports nothing: its ``None`` is left out of the merge."""

    @hookimpl
    def reef_scenario_status(self, scenario: str) -> dict[str, Any] | None:
        return None


def test_given_back_samples_train_in_the_next_job_and_extensions_show_in_status(
    storage_database: Database,
) -> None:
    """rule: P-PIPE-9 P-REP-6 P-BUF-5 P-BUF-8 the trainer commits what the (replaced) job data
    does not give back; the given-back group trains in the next job, under a new id; the
    extensions' reports reach the durable snapshot and the status route."""
    samples = TrainerSamples(storage_database, "s")
    store_groups(samples)
    component = RecordingComponent(expected_jobs=2)
    plugins = Plugins(blocked=())
    plugins.register(GiveBackOnce(), "giveback")
    plugins.register(Quiet(), "quiet")

    train_until_submitted(storage_database, component, plugins=plugins)
    first, second = component.submitted
    assert [s.sample_id for s in first.samples] == ["g2-0", "g2-1"]
    assert [s.sample_id for s in second.samples] == ["g1-0", "g1-1"]
    assert second.id == f"{first.id}.1"  # the given-back group starts the next job
    counts = samples.train_counts("c", ["g1-0", "g1-1", "g2-0", "g2-1"])
    assert counts == {"g1-0": 1, "g1-1": 1, "g2-0": 1, "g2-1": 1}

    snapshot = ScenarioSettings(storage_database, "s").get(snapshot_key("c"))
    assert snapshot["extensions"] == {"giveback": {"scenario": "s", "jobs_seen": 2}}
    # GET /reef/status is the service's (the server extra): checked where it is installed.
    if importlib.util.find_spec("starlette") is None:
        return
    from reef.server.admission import TrainerAdmission
    from reef.server.status import scenario_status

    status = scenario_status(
        "s",
        records=RecordStore(storage_database, "s"),
        samples=samples,
        settings=ScenarioSettings(storage_database, "s"),
        trainers={"c": TrainerAdmission("GroupedJobData", False, ("auto", "manual"), 2, 10)},
    )
    (shown,) = status.trainers
    assert shown.extensions == {"giveback": {"scenario": "s", "jobs_seen": 2}}


def test_two_plugins_reporting_under_one_name_is_an_error() -> None:
    """The merge of ``reef_scenario_status`` keeps each extension's name to one plugin."""
    plugins = Plugins(blocked=())
    plugins.register(GiveBackOnce(), "one")
    plugins.register(GiveBackOnce(), "two")
    with pytest.raises(ValueError, match=r"two plugins report status under \['giveback'\]"):
        plugins.scenario_status("s")


def test_recovery_commits_what_the_crashed_submission_consumed(
    storage_database: Database,
) -> None:
    """rule: P-PIPE-9 P-PIPE-13 Recovery: a crash between submission and commit of a job that
    gave a group back: the component finished it, so the new tenure commits the samples the job
    consumed (the recorded ``sample_ids``) and nothing else; the given-back group trains next."""
    samples = TrainerSamples(storage_database, "s")
    store_groups(samples)
    first_id = "s:data:1"
    TrainerState(storage_database, "s").set_running_job(
        "c",
        {
            "job_id": first_id,
            "sample_ids": ["g2-0", "g2-1"],
            "instruction_id": None,
            "released_record_ids": [],
        },
    )
    component = RecordingComponent(expected_jobs=1)

    train_until_submitted(storage_database, component)
    (resubmitted,) = component.submitted
    assert [s.sample_id for s in resubmitted.samples] == ["g1-0", "g1-1"]
    assert samples.submitted_among("c", [first_id, resubmitted.id]) == {first_id, resubmitted.id}
    counts = samples.train_counts("c", ["g1-0", "g1-1", "g2-0", "g2-1"])
    assert counts == {"g1-0": 1, "g1-1": 1, "g2-0": 1, "g2-1": 1}
