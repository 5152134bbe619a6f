"""Evaluations of each artifact and the eval gate (``docs/evals.md``).

Real pieces throughout: a TinyGPT trained by the ``local`` component, the local engine, the
stores on SQLite and PostgreSQL, a verifier imported by ``module:name``, and the vLLM stand-in
(``doubles.engine_standins``) on loopback HTTP behind a real publisher.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from doubles.engine_standins import sglang_standin, vllm_standin

from reef.components.interface import Artifact
from reef.components.local.artifacts import ArtifactStore
from reef.core.deployment import DeploymentError
from reef.core.evals import EvalSamplingSection, EvalSetSection, ServeIfSection
from reef.core.job_data import JobData, TrajectorySample
from reef.core.records import JSON
from reef.engines.local import LocalEngine
from reef.engines.publisher import Publisher, adapter_name
from reef.engines.sglang import SglangAdapters
from reef.engines.vllm import VllmAdapters
from reef.evals import evaluation_results
from reef.evals.gate import GatedArtifacts, GatedComponent
from reef.evals.sets import EvalSet, load_eval_set
from reef.evals.targets import LocalTarget, PublisherTarget
from reef.plugins.scenarios import load_deployment
from reef.server.status import evaluation_status, status_table
from reef.storage import ArtifactEvaluations, Database, ScenarioSettings
from reef.testing.components import tiny_local_component
from reef.testing.samples import exchange
from reef.testing.service import serve_on_loopback, service_test_plugins

SCENARIO = "support"
TRAINER = "local"
PROMPTS = [f"letter {k}?" for k in range(4)]


def letter_set(tmp_path: Path, letter: str = "r") -> EvalSet:
    """An exact-match eval set: each prompt's answer is ``letter`` (one token, greedy)."""
    data = tmp_path / "letters.jsonl"
    data.write_text("".join(json.dumps({"prompt": p, "expected": letter}) + "\n" for p in PROMPTS))
    section = EvalSetSection(data=str(data), sampling=EvalSamplingSection(max_tokens=1))
    return load_eval_set("letters", section)


def letter_tasks(tmp_path: Path, letter: str = "r") -> EvalSet:
    """The same prompts as Harbor tasks in a folder: each task's verifier rewards the answer
    file holding ``letter``, run in the bubblewrap sandbox."""
    folder = tmp_path / "letter-tasks"
    test = (
        f'if [ "$(cat /app/answer.txt)" = "{letter}" ]; then echo 1; else echo 0; fi'
        " > /logs/verifier/reward.txt\n"
    )
    for k, prompt in enumerate(PROMPTS):
        task = folder / f"letter-{k}"
        (task / "tests").mkdir(parents=True)
        (task / "task.toml").write_text('version = "1.0"\n\n[verifier]\ntimeout_sec = 10.0\n')
        (task / "instruction.md").write_text(prompt)
        (task / "tests" / "test.sh").write_text(test)
    section = EvalSetSection(tasks=str(folder), sampling=EvalSamplingSection(max_tokens=1))
    return load_eval_set("letters", section)


class CountingTarget(LocalTarget):
    """The local target, counting the artifacts it was opened on."""

    def __init__(self) -> None:
        super().__init__(chat_template_args=None, base_model=None)
        self.opened: list[str] = []

    def open(self, artifact: Artifact) -> Callable[[JSON], JSON]:
        self.opened.append(artifact.artifact_id)
        return super().open(artifact)


def gated(
    state_dir: Path,
    database: Database,
    eval_set: EvalSet,
    gate: ServeIfSection | None,
) -> tuple[GatedComponent, CountingTarget]:
    """The local component at ``state_dir`` behind the gate, as the runtime builds it."""
    component = tiny_local_component(state_dir, learning_rate=3e-2)
    target = CountingTarget()
    return (
        GatedComponent(
            component,
            scenario=SCENARIO,
            trainer=TRAINER,
            evals={eval_set.name: eval_set},
            gate=gate,
            target=target,
            artifacts=ArtifactStore(state_dir / "artifacts"),
            evaluations=ArtifactEvaluations(database, SCENARIO),
            settings=ScenarioSettings(database, SCENARIO),
        ),
        target,
    )


def train(component: GatedComponent, job: str, letter: str) -> None:
    """Two SFT jobs that teach the component to answer every prompt with ``letter``."""
    for step in range(2):
        samples = tuple(
            TrajectorySample(exchange(f"letter {k}?", letter), sample_id=f"{job}-{step}-{k}")
            for k in range(16)
        )
        outcome = component.wait(component.submit(JobData(f"{job}-{step}", samples)), 120)
        assert outcome.event == "finished", outcome.error


def served_reply(state_dir: Path, database: Database) -> str:
    """What the local engine behind the gate answers an agent now."""
    engine = LocalEngine(
        GatedArtifacts(
            ArtifactStore(state_dir / "artifacts"), ArtifactEvaluations(database, SCENARIO), TRAINER
        )
    )
    body = engine.complete(
        {"messages": [{"role": "user", "content": PROMPTS[0]}], "temperature": 0, "max_tokens": 1}
    )
    return str(body["choices"][0]["message"]["content"])


def test_a_worse_artifact_is_never_served_and_a_better_one_is_across_a_restart(
    storage_database: Database, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    eval_set = letter_set(tmp_path)
    gate = ServeIfSection(eval="letters", not_worse_than=0.02)
    component, target = gated(state, storage_database, eval_set, gate)
    evaluations = ArtifactEvaluations(storage_database, SCENARIO)

    first = component.publish()  # the untrained weights: nothing served before them
    assert evaluations.served_artifact(TRAINER) == first.artifact_id
    assert evaluations.result(TRAINER, first.artifact_id, "letters").score == 0.0

    train(component, "better", "r")
    better = component.publish()
    assert better.artifact_id != first.artifact_id
    assert evaluations.result(TRAINER, better.artifact_id, "letters").score == 1.0
    assert evaluations.served_artifact(TRAINER) == better.artifact_id
    assert served_reply(state, storage_database) == "r"

    train(component, "worse", "x")  # made worse on purpose
    trained = component.component.publish()
    returned = component.publish()
    assert returned.artifact_id == better.artifact_id  # what the trainer takes as served
    decision = evaluations.decision(TRAINER, trained.artifact_id)
    assert decision is not None
    assert not decision.served
    assert "0.0000 < 0.9800" in decision.reason
    assert served_reply(state, storage_database) == "r"
    opened = list(target.opened)
    component.close()

    # A restart: a new component on the same folder (its trained weights are the worse ones)
    # and a new gate on the same store. The decision stands; nothing is evaluated again.
    restarted, restarted_target = gated(state, storage_database, eval_set, gate)
    assert restarted.publish().artifact_id == better.artifact_id
    assert restarted_target.opened == []
    assert served_reply(state, storage_database) == "r"
    assert evaluations.served_artifact(TRAINER) == better.artifact_id
    assert opened == [first.artifact_id, better.artifact_id, trained.artifact_id]
    # The resume_from default: the trainer goes on from its trained (worse) weights.
    assert restarted.component.publish().artifact_id == trained.artifact_id
    restarted.close()


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_harbor_tasks_gate_what_is_served_scored_by_their_own_verifiers(
    storage_database: Database, tmp_path: Path
) -> None:
    """The same run with the eval set a folder of Harbor tasks: each reply is left in the
    task's /app and its tests/test.sh scores it in the sandbox."""
    state = tmp_path / "state"
    eval_set = letter_tasks(tmp_path)
    gate = ServeIfSection(eval="letters", not_worse_than=0.02)
    component, _ = gated(state, storage_database, eval_set, gate)
    evaluations = ArtifactEvaluations(storage_database, SCENARIO)
    first = component.publish()
    train(component, "better", "r")
    better = component.publish()
    result = evaluations.result(TRAINER, better.artifact_id, "letters")
    assert result is not None
    assert [(i.item_id, i.score, i.reply) for i in result.items] == [
        (f"letter-{k}", 1.0, "r") for k in range(len(PROMPTS))
    ]
    assert evaluations.result(TRAINER, first.artifact_id, "letters").score == 0.0
    train(component, "worse", "x")
    assert component.publish().artifact_id == better.artifact_id
    assert served_reply(state, storage_database) == "r"
    assert [d.served for d in evaluations.decisions(TRAINER)] == [True, True, False]
    component.close()


def test_resume_from_served_puts_the_served_weights_back(
    storage_database: Database, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    gate = ServeIfSection(eval="letters", resume_from="served")
    component, _ = gated(state, storage_database, letter_set(tmp_path), gate)
    component.publish()
    train(component, "better", "r")
    better = component.publish()
    train(component, "worse", "x")
    assert component.publish().artifact_id == better.artifact_id
    # The component trains on from the served weights: publishing them again is the served
    # artifact, and its replies are the served ones.
    assert component.component.publish().artifact_id == better.artifact_id
    component.close()


def test_without_a_gate_every_artifact_is_evaluated_and_served(
    storage_database: Database, tmp_path: Path
) -> None:
    component, _ = gated(tmp_path / "state", storage_database, letter_set(tmp_path), None)
    first = component.publish()
    train(component, "worse", "x")
    second = component.publish()
    assert second.artifact_id != first.artifact_id
    results = evaluation_results(storage_database, SCENARIO)
    assert [(r.artifact_id, r.score) for r in results] == [
        (first.artifact_id, 0.0),
        (second.artifact_id, 0.0),
    ]
    assert [item.reply for item in results[1].items] == ["x"] * 4
    assert results[1].sampling == {"temperature": 0.0, "max_tokens": 1, "top_p": 1.0, "seed": 0}
    assert ArtifactEvaluations(storage_database, SCENARIO).decisions(TRAINER) == []
    component.close()


# -- the vLLM stand-in -----------------------------------------------------------------------

BASE = "tiny-llama"


class Published:
    """A component that publishes the adapter folders it is given, one per publication."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.number = 0
        self.name = "noop"

    def publish(self) -> Artifact:
        artifact_id = f"sha256:{hashlib.sha256(str(self.number).encode()).hexdigest()}"
        path = self.folder / artifact_id.partition(":")[2]
        path.mkdir(parents=True, exist_ok=True)
        (path / "adapter_config.json").write_text("{}")
        return Artifact(artifact_id, path)

    def close(self) -> None:
        return None


@pytest.fixture(params=["vllm", "sglang"])
def adapter_engine(request: pytest.FixtureRequest) -> Iterator[tuple[str, Any, Any]]:
    """A vLLM or SGLang stand-in that takes adapters, on loopback; its admin."""
    if request.param == "vllm":
        app, state = vllm_standin(BASE)
        admin: Any = VllmAdapters()
    else:
        app, state = sglang_standin(BASE)
        admin = SglangAdapters(BASE)
    with serve_on_loopback(app) as url:
        yield url, state, admin


def test_the_gate_holds_a_worse_adapter_back_from_vllm_and_sglang(
    storage_database: Database,
    tmp_path: Path,
    adapter_engine: tuple[str, Any, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, engine, admin = adapter_engine
    source = Published(tmp_path / "artifacts")
    store = ArtifactStore(tmp_path / "artifacts")
    evaluations = ArtifactEvaluations(storage_database, SCENARIO)
    publisher = Publisher(
        SCENARIO,
        admin,
        BASE,
        url=url,
        source=GatedArtifacts(store, evaluations, TRAINER),
        poll_interval=0.05,
    )
    publisher.start()
    # A verifier imported by module:name: it scores the adapters named in GOOD (the stand-in
    # answers with the name of the model the call reached).
    good = {adapter_name(SCENARIO, source.publish().artifact_id)}
    source.number = 2
    good.add(adapter_name(SCENARIO, source.publish().artifact_id))
    (tmp_path / "verifiers").mkdir()
    (tmp_path / "verifiers" / "named_adapters.py").write_text(
        f"GOOD = {sorted(good)!r}\n"
        "def score(reply, item):\n"
        # SGLang names an adapter <base>:<adapter>.
        "    return 1.0 if reply.split()[0].rpartition(':')[2] in GOOD else 0.0\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path / "verifiers"))
    data = tmp_path / "items.jsonl"
    data.write_text('{"prompt": "hi"}\n{"prompt": "there"}\n')
    eval_set = load_eval_set(
        "named", EvalSetSection(data=str(data), verifier="named_adapters:score")
    )
    component = GatedComponent(
        source,  # type: ignore[arg-type]
        scenario=SCENARIO,
        trainer=TRAINER,
        evals={"named": eval_set},
        gate=ServeIfSection(eval="named"),
        target=PublisherTarget(publisher, api_key=None, timeout=10),
        artifacts=store,
        evaluations=evaluations,
        settings=ScenarioSettings(storage_database, SCENARIO),
    )
    try:
        artifacts = []
        for number in range(3):  # good, worse, good again
            source.number = number
            artifacts.append(component.publish())
            assert publisher.serve(artifacts[-1], 10) == artifacts[-1]
        first, worse, last = artifacts
        assert worse == first  # the worse adapter was never served
        assert last.artifact_id != first.artifact_id
        held = evaluations.decisions(TRAINER)
        assert [d.served for d in held] == [True, False, True]
        route = publisher.route()
        assert route is not None
        assert route.artifact_id == last.artifact_id
        # The worse adapter was loaded for its evaluation under its own name, then let go.
        bad = adapter_name(SCENARIO, held[1].artifact_id)
        assert bad not in engine.adapters
        unloads = engine.calls.get("/v1/unload_lora_adapter", 0)
        assert unloads + engine.calls.get("/unload_lora_adapter", 0) >= 1
        assert engine.calls["/v1/chat/completions"] == 6  # two items, three artifacts
    finally:
        publisher.stop()


# -- configuration ---------------------------------------------------------------------------

DEPLOYMENT = """
storage: {url: "sqlite:///%(db)s"}
serving: {engine: vllm, url: "http://127.0.0.1:9", model: tiny}
scenarios:
  support:
    recipe: servicetest
    training: {component: noop}
%(evals)s
"""


def problems_of(tmp_path: Path, evals: str) -> list[str]:
    text = DEPLOYMENT % {"db": tmp_path / "reef.db", "evals": evals}
    with pytest.raises(DeploymentError) as caught:
        load_deployment(text, plugins=service_test_plugins())
    return list(caught.value.problems)


def test_a_deployment_names_what_is_wrong_with_its_evals(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "a", "expected": "b"}\n{"prompt": 3}\n')
    good = tmp_path / "good.jsonl"
    good.write_text('{"prompt": "a", "expected": "b"}\n')
    sets = f"""    evals:
      missing: {{data: {tmp_path / "none.jsonl"}}}
      broken: {{data: {bad}}}
      unknown: {{data: {good}, verifier: "no_such_module_here:score"}}"""
    text = "\n".join(
        problems_of(
            tmp_path,
            sets
            + """
      odd: {data: x, verifier: "maybe"}
    serve_if: {eval: missing, not_worse_than: -1}""",
        )
    )
    assert "verifier 'maybe' is neither exact nor regex" in text
    assert "not_worse_than" in text
    text = "\n".join(problems_of(tmp_path, sets + "\n    serve_if: {eval: other}"))
    assert "serve_if.eval 'other' names no eval of the scenario" in text
    problems = problems_of(tmp_path, sets)
    assert any("eval missing: cannot read" in p and p.endswith(".evals.missing") for p in problems)
    assert any("line 2: prompt is a string" in p for p in problems)
    assert any("no_such_module_here:score: cannot import it" in p for p in problems)


def test_status_shows_the_scores_and_why_an_artifact_was_held_back(
    storage_database: Database, tmp_path: Path
) -> None:
    evaluations = ArtifactEvaluations(storage_database, SCENARIO)
    gate = ServeIfSection(eval="letters", not_worse_than=0.02)
    component, _ = gated(tmp_path / "state", storage_database, letter_set(tmp_path), gate)
    component.publish()
    train(component, "better", "r")
    component.publish()
    train(component, "worse", "x")
    component.publish()
    document = {
        "scenarios": [
            {
                "scenario": SCENARIO,
                "training_mode": "auto",
                "trainers": [],
                "evaluations": evaluation_status(
                    evaluations, gate, TRAINER, ScenarioSettings(storage_database, SCENARIO).items()
                ),
            }
        ]
    }
    status = document["scenarios"][0]["evaluations"]
    assert [r["score"] for r in status["results"]] == [0.0, 1.0, 0.0]
    assert status["gate"]["served_artifact"] == status["results"][1]["artifact_id"]
    assert [d["served"] for d in status["gate"]["decisions"]] == [True, True, False]
    assert status["gate"]["held_back"] == 1
    table = status_table(document)
    assert "letters=1.0000" in table
    assert "gate letters (not worse than 0.02): serves" in table
    assert "held back: letters: 0.0000 < 0.9800" in table
    assert time.time() - status["results"][0]["at"] < 600
    component.close()


# -- a deployment --------------------------------------------------------------------------

SERVED = """
storage: {url: "%(url)s"}
serving: {engine: local}
scenarios:
  support:
    recipe: servicetest
    training:
      component: "reef.components.local.component:LocalComponent"
      name: local
      options: {state_dir: "%(state)s", d_model: 32, n_layers: 1, n_heads: 2, max_seq_len: 96,
                batch_size: 4, learning_rate: 0.03}
    evals:
      letters: {data: "%(data)s", sampling: {max_tokens: 1}}
    serve_if: {eval: letters, not_worse_than: 0.02}
"""


def test_a_deployment_gates_what_its_local_engine_serves_and_status_says_why(
    storage_url: str, storage_database: Database, tmp_path: Path
) -> None:
    from starlette.testclient import TestClient

    from reef.runtime import ReefRuntime
    from reef.server import ServerOptions, create_app

    eval_set = letter_set(tmp_path)
    text = SERVED % {"url": storage_url, "state": tmp_path / "state", "data": eval_set.section.data}
    plugins = service_test_plugins()
    deployment = load_deployment(text, plugins=plugins)
    runtime = ReefRuntime(deployment, plugins=plugins, databases={storage_url: storage_database})
    parts = runtime.trainers[(SCENARIO, TRAINER)]._build(storage_database)
    component = parts.component
    assert isinstance(component, GatedComponent)
    engine = runtime.local_engine(SCENARIO)
    assert engine is not None
    first = component.publish()
    assert engine.artifact_id == first.artifact_id  # type: ignore[attr-defined]
    train(component, "better", "r")
    better = component.publish()
    train(component, "worse", "x")
    assert component.publish() == better
    assert engine.artifact_id == better.artifact_id  # type: ignore[attr-defined]
    app = create_app(
        deployment,
        databases={storage_url: storage_database},
        plugins=plugins,
        runtime=runtime,
        options=ServerOptions(allow_unauthenticated=True),
    )
    with TestClient(app, base_url="http://127.0.0.1", client=("127.0.0.1", 50000)) as client:
        document = client.get("/reef/status").json()
        curve = client.get(f"/reef/scenarios/{SCENARIO}/evaluations").json()
        exported = client.get(f"/reef/scenarios/{SCENARIO}/evaluations/export")
        unknown = client.get(f"/reef/scenarios/{SCENARIO}/evaluations", params={"trainer": "x"})
    status = document["scenarios"][0]["evaluations"]
    assert status["gate"]["served_artifact"] == better.artifact_id
    assert [d["served"] for d in status["gate"]["decisions"]] == [True, True, False]
    assert "0.0000 < 0.9800" in status["gate"]["decisions"][-1]["reason"]
    assert [r["score"] for r in status["results"]] == [0.0, 1.0, 0.0]
    # The console's curve: each artifact in the order evaluated, with the gate's decision.
    assert curve["sets"] == ["letters"]
    assert curve["total"] == 3
    points = [(a["number"], a["scores"], a["served"]) for a in curve["artifacts"]]
    assert points == [
        (1, {"letters": 0.0}, True),
        (2, {"letters": 1.0}, True),
        (3, {"letters": 0.0}, False),
    ]
    assert curve["artifacts"][1]["artifact_id"] == better.artifact_id
    assert "0.0000 < 0.9800" in curve["artifacts"][2]["reason"]
    # The export: every result with its items and the decision.
    assert exported.status_code == 200
    rows = [json.loads(line) for line in exported.text.splitlines()]
    assert [(r["artifact_id"], r["score"], r["served"]) for r in rows] == [
        (a["artifact_id"], a["scores"]["letters"], a["served"]) for a in curve["artifacts"]
    ]
    assert [item["reply"] for item in rows[1]["items"]] == ["r"] * len(PROMPTS)
    assert rows[1]["sampling"]["max_tokens"] == 1
    assert unknown.status_code == 400
    assert "no trainer 'x'" in unknown.text
    component.close()


# -- Tinker ----------------------------------------------------------------------------------


def test_the_gate_with_tinker_holds_back_a_worse_checkpoint(
    storage_database: Database, tmp_path: Path
) -> None:
    pytest.importorskip("tinker")
    from doubles.tinker_service import TinkerStandIn

    from reef.components.tinker.component import TinkerComponent
    from reef.components.tinker.settings import TinkerComponentSettings
    from reef.evals.targets import TinkerTarget

    service = TinkerStandIn()
    settings = TinkerComponentSettings.parse(
        {
            "state_dir": str(tmp_path / "tinker"),
            "base_model": "stand-in/tiny",
            "tokenizer": "byte",
            "batch_size": 4,
            "learning_rate": 3e-2,
            "max_seq_len": 96,
            "request_timeout": 30,
        },
        plugin_class=TinkerComponent,
    )
    tinker = TinkerComponent(
        settings,
        connect=lambda _settings, key: service,  # type: ignore[arg-type,return-value]
        environ={"TINKER_API_KEY": "tml-stand-in-key"},
    )
    evaluations = ArtifactEvaluations(storage_database, SCENARIO)
    component = GatedComponent(
        tinker,
        scenario=SCENARIO,
        trainer=TRAINER,
        evals={"letters": letter_set(tmp_path)},
        gate=ServeIfSection(eval="letters", not_worse_than=0.02),
        target=TinkerTarget(tinker),
        artifacts=ArtifactStore(tmp_path / "tinker" / "artifacts"),
        evaluations=evaluations,
        settings=ScenarioSettings(storage_database, SCENARIO),
    )
    try:
        component.publish()
        train(component, "better", "r")
        better = component.publish()
        assert evaluations.result(TRAINER, better.artifact_id, "letters").score == 1.0
        train(component, "worse", "x")
        assert component.publish() == better
        assert [d.served for d in evaluations.decisions(TRAINER)] == [True, True, False]
    finally:
        component.close()
        service.close()


# -- the trainer -----------------------------------------------------------------------------


class Replies:
    """An eval target whose artifacts answer as a test says: ``good`` or ``bad``."""

    def __init__(self, replies: dict[str, str]) -> None:
        self.replies = replies

    def open(self, artifact: Artifact) -> Callable[[JSON], JSON]:
        reply = self.replies[artifact.artifact_id]
        return lambda request: {"choices": [{"message": {"content": reply}}]}

    def close(self, artifact: Artifact, *, served: bool) -> None:
        del artifact, served


def test_the_trainer_counts_as_served_only_what_the_gate_served(
    storage_database: Database, tmp_path: Path
) -> None:
    """rule: P-STALE-5 -- groups g1 and g2 were made under the served artifact a0; g1 trains,
    and the job's end publishes a1, which the gate holds back. a0 still serves, so g2 is not
    stale (max_staleness 0) and trains; the trainer's served artifacts never name a1."""
    from reef.core.job_data import sample_body
    from reef.pipeline_context import PipelineContext
    from reef.recipe.grouped.processor import GroupedJobData
    from reef.record2sample.no_samples import NoSamples
    from reef.storage import NewSample, TrainerSamples
    from reef.storage.scenario_settings import snapshot_key
    from reef.testing.components import RecordingComponent, train_until_submitted
    from reef.train.pipeline import TrainingPipeline
    from reef.train.trainer import TrainerParts

    store = ArtifactStore(tmp_path / "artifacts")
    ids = [f"sha256:{hashlib.sha256(str(n).encode()).hexdigest()}" for n in range(3)]
    for artifact_id in ids:
        store.folder(artifact_id).mkdir(parents=True)

    class Publishing(RecordingComponent):
        """Publishes artifact n after its n-th job."""

        def publish(self) -> Artifact:
            return store.get(ids[len(self.submitted)])

    samples = TrainerSamples(storage_database, "s")
    samples.register_trainer("c", reads_uploads=False)
    for group in ("g1", "g2"):
        made = {"steps": [], "extra": {"reef": {"records": [{"id": "c", "artifact_id": ids[0]}]}}}
        unit = [
            NewSample(f"{group}-{i}", "trajectory", sample_body(TrajectorySample(made, reward=i)))
            for i in range(2)
        ]
        samples.add_record_samples("c", unit, [f"record-{group}"])
    component = Publishing(expected_jobs=2)
    data = tmp_path / "items.jsonl"
    data.write_text('{"prompt": "p", "expected": "good"}\n')
    gated_component = GatedComponent(
        component,
        scenario="s",
        trainer="c",
        evals={"e": load_eval_set("e", EvalSetSection(data=str(data)))},
        gate=ServeIfSection(eval="e"),
        target=Replies({ids[0]: "good", ids[1]: "bad", ids[2]: "good"}),
        artifacts=store,
        evaluations=ArtifactEvaluations(storage_database, "s"),
        settings=ScenarioSettings(storage_database, "s"),
    )

    def build(database: Database) -> TrainerParts:
        context = PipelineContext("s", "c", has_runtime_loader=True)
        pipeline = TrainingPipeline(
            NoSamples(context, max_staleness=0),
            GroupedJobData(context, job_samples=2, buffer_size=2),
            samples=TrainerSamples(database, "s"),
            context=context,
        )
        return TrainerParts(pipeline, gated_component)

    train_until_submitted(storage_database, component, build)
    jobs = [[str(s.sample_id) for s in data.samples] for data in component.submitted]
    assert jobs == [["g1-0", "g1-1"], ["g2-0", "g2-1"]]
    snapshot = ScenarioSettings(storage_database, "s").get(snapshot_key("c"))
    assert snapshot["served_artifacts"] == [ids[0], ids[2]]
    decisions = ArtifactEvaluations(storage_database, "s").decisions("c")
    assert [(d.artifact_id, d.served) for d in decisions] == [
        (ids[0], True),
        (ids[1], False),
        (ids[2], True),
    ]


# -- a judge model ---------------------------------------------------------------------------


def judge_app(asked: list[JSON]) -> Any:
    """An OpenAI-compatible judge: it answers 1 when the reply it is shown is the reference
    answer, else 0 (a chat.completion as vLLM's)."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def complete(request: Request) -> JSONResponse:
        body = await request.json()
        asked.append(body)
        text = body["messages"][0]["content"]
        reference = text.split("reference answer is:\n")[1].split("\n")[0]
        reply = text.split("The reply is:\n")[1].split("\n")[0]
        message = {"role": "assistant", "content": "1" if reply == reference else "0"}
        return JSONResponse(
            {"object": "chat.completion", "model": body["model"],
             "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
        )  # fmt: skip

    return Starlette(routes=[Route("/v1/chat/completions", complete, methods=["POST"])])


def test_a_judge_model_grades_each_reply(storage_database: Database, tmp_path: Path) -> None:
    from reef.core.evals import JudgeSection

    asked: list[JSON] = []
    data = tmp_path / "letters.jsonl"
    data.write_text("".join(json.dumps({"prompt": p, "expected": "r"}) + "\n" for p in PROMPTS))
    with serve_on_loopback(judge_app(asked)) as url:
        judged = load_eval_set(
            "letters",
            EvalSetSection(
                data=str(data),
                verifier="judge",
                judge=JudgeSection(url=f"{url}/v1", model="grader"),
                sampling=EvalSamplingSection(max_tokens=1),
            ),
        )
        gate = ServeIfSection(eval="letters", not_worse_than=0.02)
        component, _ = gated(tmp_path / "state", storage_database, judged, gate)
        component.publish()
        train(component, "better", "r")
        better = component.publish()
        train(component, "worse", "x")
        assert component.publish() == better
    evaluations = ArtifactEvaluations(storage_database, SCENARIO)
    assert [r.score for r in evaluations.results(TRAINER)] == [0.0, 1.0, 0.0]
    assert len(asked) == 3 * len(PROMPTS)
    assert {body["model"] for body in asked} == {"grader"}
    # The judge is away: the evaluation is unfinished, nothing is decided, the status says so.
    train(component, "again", "r")
    assert component.publish() == better
    error = ScenarioSettings(storage_database, SCENARIO).get(f"eval_error:{TRAINER}")
    assert "the judge at" in error["error"]
    assert len(evaluations.decisions(TRAINER)) == 3
    component.close()


def test_a_judge_section_goes_with_the_judge_verifier(tmp_path: Path) -> None:
    problems = problems_of(tmp_path, "    evals:\n      j: {data: x.jsonl, verifier: judge}")
    assert any("verifier judge and a judge section go together" in p for p in problems)


def test_a_verifier_reads_the_tool_calls_of_a_reply(tmp_path: Path) -> None:
    """A reply that calls a tool is scored on its calls (a line of JSON each, after the
    content), not as an empty reply: the local engine parses a ``<tool_call>`` block out of the
    content into ``tool_calls``, as vLLM's tool parsers do."""
    call = {"name": "weather", "arguments": {"city": "oslo", "day": "today"}}
    data = tmp_path / "calls.jsonl"
    data.write_text(json.dumps({"prompt": "Rain in oslo today?", "expected": json.dumps(call)}))
    calls = load_eval_set("calls", EvalSetSection(data=str(data)))

    def answer(message: JSON) -> Callable[[JSON], JSON]:
        return lambda request: {"choices": [{"message": message}]}

    tool_call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "weather", "arguments": json.dumps(call["arguments"])},
    }
    right = {"role": "assistant", "content": None, "tool_calls": [tool_call]}
    scored = calls.evaluate(answer(right), scenario=SCENARIO, trainer=TRAINER, artifact_id="a")
    assert scored.score == 1.0
    assert scored.items[0].reply == json.dumps(call)
    wrong_day = json.dumps({**call["arguments"], "day": "monday"})
    function = {**tool_call["function"], "arguments": wrong_day}
    wrong = {**right, "tool_calls": [{**tool_call, "function": function}]}
    scored = calls.evaluate(answer(wrong), scenario=SCENARIO, trainer=TRAINER, artifact_id="b")
    assert scored.score == 0.0
    said = {"role": "assistant", "content": "Let me look.", "tool_calls": [tool_call]}
    scored = calls.evaluate(answer(said), scenario=SCENARIO, trainer=TRAINER, artifact_id="c")
    assert scored.items[0].reply == "Let me look.\n" + json.dumps(call)


def test_each_item_is_sampled_with_a_seed_of_its_own(tmp_path: Path) -> None:
    """One seed for every item would draw the same random numbers for each: at a temperature,
    items would pass or fail together. Each item's seed comes from the set's seed and its id,
    the same in every run; the result keeps the set's settings."""
    data = tmp_path / "items.jsonl"
    data.write_text("".join(json.dumps({"prompt": p, "expected": "r"}) + "\n" for p in PROMPTS))
    sampling = EvalSamplingSection(temperature=1.0, seed=7)
    items = load_eval_set("letters", EvalSetSection(data=str(data), sampling=sampling)).items
    seeds = [item.request(sampling)["seed"] for item in items]
    assert len(set(seeds)) == len(items)
    assert all(isinstance(seed, int) and 0 <= seed < 2**31 for seed in seeds)
    assert seeds == [item.request(sampling)["seed"] for item in items]
    other = EvalSamplingSection(temperature=1.0, seed=8)
    assert not set(seeds) & {item.request(other)["seed"] for item in items}
    unseeded = EvalSamplingSection(temperature=1.0, seed=None)
    assert all("seed" not in item.request(unseeded) for item in items)
