"""Admission builds each trainer's stages once, keeps what it asks until the service stops (the
record-to-sample stage of a trainer that takes uploads, for ``uploaded_sample``, P-UP-5) and
closes every other stage at once, so no stage's background work outlives the build.
``scripts/mutation`` found no test that noticed a stage left open."""

from __future__ import annotations

import pytest

pytest.importorskip("starlette")  # admission is the service's (the server extra)

from reef.plugins.scenarios import load_deployment
from reef.record2sample.stage import Record2Sample
from reef.sample2job.stage import Sample2Job
from reef.server.admission import ScenarioAdmission
from reef.testing.service import AgentTurnSamples, service_test_plugins

DEPLOYMENT = """
storage: {url: "sqlite:///unused.db"}
serving: {engine: "http://127.0.0.1:9/v1"}
scenarios:
  uploads:
    recipe: servicetest
    training: {component: noop}
  no_uploads:
    recipe: servicetest
    pipeline: {sample2job: {class: "reef.testing.service:AutoOnlyJobData"}}
    training: {component: noop}
"""


def test_admission_keeps_only_the_stage_it_asks_and_closes_it_at_the_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    closed: list[object] = []
    monkeypatch.setattr(Record2Sample, "close", lambda self, timeout=None: closed.append(self))
    monkeypatch.setattr(Sample2Job, "close", lambda self, timeout=None: closed.append(self))
    plugins = service_test_plugins()
    deployment = load_deployment(DEPLOYMENT, plugins=plugins, environ={})

    def build(name: str) -> ScenarioAdmission:
        return ScenarioAdmission.build(name, deployment.scenarios[name], plugins=plugins)

    uploads = build("uploads")
    # Its sample-to-job stage is closed; its record-to-sample stage answers uploads.
    [kept] = [t.uploads for t in uploads.trainers.values()]
    assert isinstance(kept, AgentTurnSamples)
    assert [type(s).__name__ for s in closed] == ["UploadingJobData"]
    closed.clear()
    no_uploads = build("no_uploads")  # nothing to keep: both stages closed
    assert [t.uploads for t in no_uploads.trainers.values()] == [None]
    assert sorted(type(s).__name__ for s in closed) == ["AgentTurnSamples", "AutoOnlyJobData"]
    closed.clear()
    uploads.close()
    no_uploads.close()
    assert closed == [kept]
