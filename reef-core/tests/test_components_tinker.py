"""The ``tinker`` component: its ``Datum`` values checked with the SDK's own types, and its whole
loop against the stand-in service (:mod:`doubles.tinker_service`), with failures mid-job,
timeouts and restarts. The component's share of the trainer's contract runs in
``test_components_contract.py``."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tinker")

import numpy as np  # noqa: E402
from doubles.tinker_service import ProcessKilled, TinkerStandIn  # noqa: E402
from tinker import types  # noqa: E402

from reef.components.interface import JobHandle  # noqa: E402
from reef.components.local.causal_lm import torch_generator  # noqa: E402
from reef.components.local.tiny_gpt import TinyGPT  # noqa: E402
from reef.components.scheduling import PlannedStep  # noqa: E402
from reef.components.tinker.component import (  # noqa: E402
    TinkerComponent,
    checkpoint_artifact_id,
)
from reef.components.tinker.datums import cross_entropy_datum, policy_datum  # noqa: E402
from reef.components.tinker.settings import TinkerComponentSettings  # noqa: E402
from reef.core.chat_rendering import RenderedSequence  # noqa: E402
from reef.core.job_data import JobData, TrajectorySample  # noqa: E402
from reef.core.plugins import PluginConfigError  # noqa: E402
from reef.testing.samples import exchange  # noqa: E402
from reef.testing.task_engines import coin_task, task_rollout  # noqa: E402

KEY = "tml-secret-key-123"

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap is not installed (scripts/setup does)"
)


def samples(count: int = 6) -> tuple[TrajectorySample, ...]:
    return tuple(
        TrajectorySample(exchange(f"colour {n}", "red" if n % 2 else "blue"), sample_id=f"s{n}")
        for n in range(count)
    )


def component(state_dir: Path, service: TinkerStandIn, **settings: Any) -> TinkerComponent:
    config = {
        "state_dir": str(state_dir),
        "base_model": "stand-in/tiny",
        "tokenizer": "byte",
        "batch_size": 2,
        "learning_rate": 3e-3,
        "max_seq_len": 96,
        "request_timeout": 30,
        **settings,
    }
    return TinkerComponent(
        TinkerComponentSettings.parse(config, plugin_class=TinkerComponent),
        connect=lambda _settings, key: service if key == KEY else None,  # type: ignore[arg-type,return-value]
        environ={"TINKER_API_KEY": KEY},
    )


@pytest.fixture
def service() -> Any:
    stand_in = TinkerStandIn()
    yield stand_in
    stand_in.close()


def weights(service: TinkerStandIn, artifact_path: Path) -> dict[str, Any]:
    import json

    body = json.loads((artifact_path / "artifact.json").read_text())
    return service.sampler_weights[body["sampler_path"]]


def same_weights(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# --------------------------------------------------------------------------- Datum values


def test_a_cross_entropy_datum_predicts_the_next_token_and_sums_to_the_mean() -> None:
    """Position i predicts token i+1; the weights are the loss mask from position 1 on, divided
    by the step's trained tokens, so Tinker's summed loss is the local component's mean."""
    sequence = RenderedSequence((5, 6, 7, 8, 9), (0, 0, 1, 1, 1))
    datum = cross_entropy_datum(sequence, PlannedStep(((),), 1).loss_divisor(3, batch_size=2))
    assert isinstance(datum, types.Datum)
    assert datum.model_input.to_ints() == [5, 6, 7, 8]
    targets = datum.loss_fn_inputs["target_tokens"]
    weights = datum.loss_fn_inputs["weights"]
    assert isinstance(targets, types.TensorData)
    assert targets.dtype == "int64"
    assert weights.dtype == "float32"
    assert targets.tolist() == [6, 7, 8, 9]
    assert np.allclose(weights.to_numpy(), [0, 1 / 3, 1 / 3, 1 / 3])
    assert weights.to_numpy().sum() == pytest.approx(1.0)


def test_a_padded_steps_weights_count_as_its_share_of_a_full_step() -> None:
    """remainder: pad: a step of 1 unit at batch size 4 weighs a quarter (P-SIZE-6)."""
    padded = PlannedStep(((),), 4)
    datum = cross_entropy_datum(RenderedSequence((1, 2, 3), (0, 1, 1)), padded.loss_divisor(2, 4))
    assert datum.loss_fn_inputs["weights"].to_numpy().sum() == pytest.approx(0.25)


def test_an_importance_sampling_datum_carries_start_logprobs_and_masked_advantages() -> None:
    sequence = RenderedSequence((1, 2, 3, 4), (0, 0, 1, 1))
    datum = policy_datum(sequence, [-1.0, -2.0, -3.0], advantage=0.5, divisor=2.0)
    assert set(datum.loss_fn_inputs) == {"target_tokens", "logprobs", "advantages"}
    assert datum.loss_fn_inputs["target_tokens"].tolist() == [2, 3, 4]
    assert datum.loss_fn_inputs["logprobs"].tolist() == [-1.0, -2.0, -3.0]
    assert np.allclose(datum.loss_fn_inputs["advantages"].to_numpy(), [0.0, 0.25, 0.25])
    with pytest.raises(ValueError, match="start log probabilities"):
        policy_datum(sequence, [-1.0], advantage=0.5, divisor=2.0)
    # A distilling objective's advantage is per token; only the trained tokens keep theirs.
    per_token = policy_datum(sequence, [-1.0, -2.0, -3.0], [4.0, 2.0, -6.0], divisor=2.0)
    assert np.allclose(per_token.loss_fn_inputs["advantages"].to_numpy(), [0.0, 1.0, -3.0])
    with pytest.raises(ValueError, match="advantages"):
        policy_datum(sequence, [-1.0, -2.0, -3.0], [1.0], divisor=2.0)


# --------------------------------------------------------------------------- the loop


def test_one_forward_backward_and_one_optim_step_per_batch(
    tmp_path: Path, service: TinkerStandIn
) -> None:
    """rule: P-SIZE-6: 5 samples at batch size 2 are 3 steps, each one forward_backward then
    one optim_step; importance_sampling reads the start weights once, with forward."""
    tinker = component(tmp_path, service)
    service.calls.clear()
    rewarded = tuple(
        TrajectorySample(s.trajectory, reward=float(i % 2), sample_id=s.sample_id, group_id="g")
        for i, s in enumerate(samples(5))
    )
    parameters = {"objective": "importance_sampling"}
    outcome = tinker.wait(tinker.submit(JobData("j:data:1", rewarded), parameters), timeout=60)
    assert outcome.event == "finished", outcome.error
    assert outcome.metrics["steps"] == 3
    training = [c for c in service.calls if c in {"forward", "forward_backward", "optim_step"}]
    assert training == ["forward"] + ["forward_backward", "optim_step"] * 3


def test_samples_sampled_at_another_temperature_are_counted_as_trained_at_one(
    tmp_path: Path, service: TinkerStandIn
) -> None:
    """Tinker's losses take the policy's log probabilities at temperature 1: a job's samples
    sampled at another are counted (untempered_samples), for status to show."""
    tinker = component(tmp_path, service)
    rewarded = tuple(
        TrajectorySample(
            exchange(f"colour {i}", "red", temperature=0.6 if i < 3 else None),
            reward=float(i % 2),
            sample_id=f"s{i}",
            group_id="g",
        )
        for i in range(4)
    )
    for objective, counted in (("importance_sampling", 3), ("cross_entropy", 0)):
        outcome = tinker.wait(
            tinker.submit(JobData(f"j:data:{objective}", rewarded), {"objective": objective}),
            timeout=60,
        )
        assert outcome.event == "finished", outcome.error
        assert outcome.metrics["untempered_samples"] == counted


def scored(rewards: list[float], group: str, first: int = 0) -> tuple[TrajectorySample, ...]:
    """Samples with ``rewards``, all in ``group``, numbered from ``first``."""
    return tuple(
        TrajectorySample(s.trajectory, reward=r, sample_id=s.sample_id, group_id=group)
        for s, r in zip(samples(first + len(rewards))[first:], rewards, strict=True)
    )


def optimizer_steps(tinker: TinkerComponent, service: TinkerStandIn) -> list[int]:
    """Each parameter's Adam step count in the checkpoint of the last finished job."""
    import json

    checkpoint = json.loads((tinker.state_dir / "state.json").read_text())["checkpoint"]
    state = service.checkpoints[checkpoint]["optimizer"]["state"]
    return [int(entry["step"]) for entry in state.values()]


def test_a_step_whose_advantages_are_all_zero_sends_no_step_to_tinker(
    tmp_path: Path, service: TinkerStandIn
) -> None:
    """As on the local component: a step whose every advantage is 0 has no gradient, and Adam
    would still move every weight by its momentum. Such a step counts (loss 0, its samples
    consumed) but sends neither forward_backward nor optim_step; a job none of whose steps
    moved the weights saves no checkpoint, so its artifact is the last job's."""
    tinker = component(tmp_path, service)
    parameters = {"objective": "importance_sampling"}
    learnt = tinker.wait(
        tinker.submit(JobData("z:data:1", scored([1.0, 0.0] * 2, "g1")), parameters), timeout=60
    )
    assert learnt.event == "finished", learnt.error
    before, steps = tinker.publish(), optimizer_steps(tinker, service)
    assert steps
    assert min(steps) == 2  # 4 samples in steps of 2

    calls = len(service.calls)
    flat = tinker.wait(
        tinker.submit(JobData("z:data:2", scored([0.5] * 6, "g2")), parameters), timeout=60
    )
    assert flat.event == "finished", flat.error
    assert flat.metrics["steps"] == 3
    assert flat.metrics["step_losses"] == [0.0, 0.0, 0.0]
    assert flat.metrics["trained_tokens"] > 0
    assert [line["advantage"] for line in flat.metrics["consumed"]] == [0.0] * 6
    sent = service.calls[calls:]
    assert not {"forward_backward", "optim_step", "save_state"} & set(sent)
    assert tinker.publish() == before
    assert optimizer_steps(tinker, service) == steps

    # A flat group's step, then a step with a signal: only the second reaches Tinker.
    calls = len(service.calls)
    mixed = scored([0.5] * 2, "g3") + scored([1.0, 0.0], "g4", first=2)
    outcome = tinker.wait(tinker.submit(JobData("z:data:3", mixed), parameters), timeout=60)
    assert outcome.event == "finished", outcome.error
    assert outcome.metrics["steps"] == 2
    assert outcome.metrics["step_losses"][0] == 0.0
    assert service.calls[calls:].count("forward_backward") == 1
    assert service.calls[calls:].count("optim_step") == 1
    assert tinker.publish().artifact_id != before.artifact_id
    assert optimizer_steps(tinker, service) == [step + 1 for step in steps]


def test_a_failure_mid_job_fails_the_job_and_keeps_the_last_finished_weights(
    tmp_path: Path, service: TinkerStandIn
) -> None:
    tinker = component(tmp_path, service)
    tinker.wait(tinker.submit(JobData("j:data:1", samples())), timeout=60)
    before = tinker.publish()
    service.fail("forward_backward", ConnectionError(f"connection reset (key {KEY})"), after=1)
    failed = tinker.wait(tinker.submit(JobData("j:data:2", samples())), timeout=60)
    assert failed.event == "failed"
    assert "connection reset" in (failed.error or "")
    assert KEY not in (failed.error or "")  # API keys are never written anywhere
    assert tinker.publish() == before  # the weights of the last finished job
    again = tinker.wait(tinker.submit(JobData("j:data:3", samples())), timeout=60)
    assert again.event == "finished", again.error
    assert tinker.publish().artifact_id != before.artifact_id


def test_a_service_that_does_not_answer_fails_the_job_and_never_hangs(
    tmp_path: Path, service: TinkerStandIn
) -> None:
    """Every request waits at most request_timeout; the hung one is the only one timed."""
    component(tmp_path, service).publish()  # the initial checkpoint, without a deadline
    tinker = component(tmp_path, service, request_timeout=0.2)
    release = service.hang("create_training_client_from_state_with_optimizer")
    outcome = tinker.wait(tinker.submit(JobData("j:data:1", samples())), timeout=30)
    release.set()
    assert outcome.event == "failed"
    assert "did not answer the load of checkpoint tinker://" in (outcome.error or "")
    assert "within 0.2 s" in (outcome.error or "")
    tinker.close()  # returns: nothing waits on the hung request


def test_the_api_key_comes_from_the_environment_and_is_never_logged(
    tmp_path: Path, service: TinkerStandIn, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(PluginConfigError, match="TINKER_API_KEY"):
        TinkerComponent(
            TinkerComponentSettings.parse(
                {"state_dir": str(tmp_path), "base_model": "m"}, plugin_class=TinkerComponent
            ),
            environ={},
        )
    caplog.set_level(logging.DEBUG)
    tinker = component(tmp_path, service)
    service.fail("optim_step", RuntimeError(f"401 for Authorization: Bearer {KEY}"))
    outcome = tinker.wait(tinker.submit(JobData("j:data:1", samples())), timeout=60)
    assert outcome.event == "failed"
    assert KEY not in caplog.text
    assert KEY not in "".join(p.read_text() for p in tmp_path.rglob("*.json"))


# --------------------------------------------------------------------------- restarts


def test_a_job_that_reached_its_checkpoint_before_a_crash_is_finished_after_it(
    tmp_path: Path, service: TinkerStandIn
) -> None:
    """The process dies after Tinker saved the job's checkpoint and before the outcome was
    written: the restarted component asks Tinker, finds the checkpoint, reports the job
    finished with its metrics, and serves its weights; resubmitting trains nothing."""
    first = component(tmp_path, service)
    first.publish()
    service.kill_process("save_state", applied=True)
    handle = first.submit(JobData("j:data:1", samples()))
    with pytest.raises(ProcessKilled):
        first.wait(handle, timeout=60)

    restarted = component(tmp_path, service)
    outcome = restarted.poll(JobHandle("j:data:1", "tinker"))
    assert outcome is not None
    assert outcome.event == "finished"
    assert outcome.metrics["steps"] == 3
    (checkpoint,) = [p for p in service.checkpoints if "/weights/reef-" in p and "initial" not in p]
    artifact = restarted.publish()
    assert artifact.artifact_id == checkpoint_artifact_id(checkpoint)
    calls = len(service.calls)
    restarted.wait(restarted.submit(JobData("j:data:1", samples())), timeout=60)
    assert "forward_backward" not in service.calls[calls:]


def test_a_job_cut_by_a_crash_mid_job_is_trained_once_from_the_last_checkpoint(
    tmp_path: Path, service: TinkerStandIn
) -> None:
    """The process dies after the job's first optimizer step: the step is on the service but
    not in any checkpoint. After the restart the job polls failed; submitted again (the trainer
    releases and resubmits uncommitted data under the same id) it trains from the last
    checkpoint, so its weights equal those of a run that trained it once without a crash."""
    first = component(tmp_path / "crashed", service)
    first.wait(first.submit(JobData("j:data:0", samples())), timeout=60)
    service.kill_process("optim_step", after=1, applied=True)
    with pytest.raises(ProcessKilled):
        first.wait(first.submit(JobData("j:data:1", samples())), timeout=60)

    restarted = component(tmp_path / "crashed", service)
    lost = restarted.poll(JobHandle("j:data:1", "tinker"))
    assert lost is not None
    assert lost.event == "failed"
    assert restarted.wait(restarted.submit(JobData("j:data:1", samples())), timeout=60).event == (
        "finished"
    )
    crashed = weights(service, restarted.publish().path)

    clean = component(tmp_path / "clean", service)
    for job in ("j:data:0", "j:data:1"):
        clean.wait(clean.submit(JobData(job, samples())), timeout=60)
    assert same_weights(crashed, weights(service, clean.publish().path))


def test_an_artifact_keeps_its_id_after_a_restart_and_is_saved_for_the_sampler_once(
    tmp_path: Path, service: TinkerStandIn
) -> None:
    """The same weights, the same artifact id, after a restart too (docs/decisions.md#artifacts)."""
    tinker = component(tmp_path, service)
    tinker.wait(tinker.submit(JobData("j:data:1", samples())), timeout=60)
    artifact = tinker.publish()
    assert artifact.artifact_id.startswith("sha256:")
    assert tinker.publish() == artifact
    tinker.close()
    saves = service.calls.count("save_weights_for_sampler")
    restarted = component(tmp_path, service)
    assert restarted.publish() == artifact
    assert service.calls.count("save_weights_for_sampler") == saves
    assert (tmp_path / "artifacts" / "LATEST").read_text() == artifact.artifact_id


# --------------------------------------------------------------------------- the sampler


def test_the_sampler_serves_the_latest_artifact_and_names_it(
    tmp_path: Path, service: TinkerStandIn
) -> None:
    """Tinker's sampler answers from the weights published last, rendered with the renderer
    the component trains with, and says which artifact answered (what a record names)."""
    from reef.components.tinker.sampler import NothingPublished, TinkerSampler

    tinker = component(tmp_path, service)
    sampler = TinkerSampler.from_settings(
        tinker.settings,
        connect=lambda _url, key: service if key == KEY else None,  # type: ignore[arg-type,return-value]
        environ={"TINKER_API_KEY": KEY},
    )
    with pytest.raises(NothingPublished):
        sampler.sample([1, 2, 3])
    request = {"messages": [{"role": "user", "content": "colour 3"}]}
    prompt = tinker.renderer.prompt_ids(request)
    first = tinker.publish()
    answered = sampler.sample(prompt, max_tokens=4, temperature=0)
    assert answered.artifact_id == first.artifact_id
    (completion,) = answered.completions
    assert 0 < len(completion.tokens) <= 4
    assert completion.logprobs is not None
    assert len(completion.logprobs) == len(completion.tokens)
    for job in range(4):  # SFT until the greedy reply is the trained one
        tinker.wait(tinker.submit(JobData(f"j:data:{job}", samples())), timeout=60)
    trained = tinker.publish()
    again = sampler.sample(prompt, max_tokens=8, temperature=0)
    assert again.artifact_id == trained.artifact_id != first.artifact_id
    reply = tinker.renderer.tokenizer.decode(again.completions[0].tokens)
    assert reply.startswith("red")


# --------------------------------------------------------------------------- ppo, distillation


def test_ppo_trains_with_tinkers_ppo_loss_and_the_jobs_clip_range(
    tmp_path: Path, service: TinkerStandIn
) -> None:
    """The ``ppo`` objective is Tinker's built-in ``ppo`` loss, its thresholds the job's
    ``1 - clip_low`` and ``1 + clip_high`` (OpenClaw-RL's 0.2 and 0.28 by default)."""
    tinker = component(tmp_path, service)
    rewarded = tuple(
        TrajectorySample(s.trajectory, reward=float(i % 2), sample_id=s.sample_id, group_id="g")
        for i, s in enumerate(samples(4))
    )
    runs: list[tuple[dict[str, Any], tuple[float, float]]] = [
        ({"objective": "ppo"}, (0.8, 1.28)),
        ({"objective": "ppo", "clip_low": 0.1, "clip_high": 0.5}, (0.9, 1.5)),
    ]
    for number, (parameters, clip) in enumerate(runs):
        service.losses.clear()
        data = JobData(f"j:data:{number}", rewarded)
        outcome = tinker.wait(tinker.submit(data, parameters), timeout=60)
        assert outcome.event == "finished", outcome.error
        assert outcome.metrics["objective"] == "ppo"
        expected = {"clip_low_threshold": clip[0], "clip_high_threshold": clip[1]}
        assert len(service.losses) == outcome.metrics["steps"] == 2
        for loss_fn, config in service.losses:
            assert loss_fn == "ppo"
            assert config is not None
            assert config == pytest.approx(expected)


def test_the_stand_ins_ppo_clips_the_ratio_as_tinker_documents(service: TinkerStandIn) -> None:
    """-sum(min(r * A, clip(r, low, high) * A)): a ratio outside the thresholds stops counting
    where it would gain more than the clip allows."""
    client = service.create_lora_training_client("stand-in/tiny").result()
    sequence = RenderedSequence((1, 2, 3), (0, 1, 1))
    now = target_logprobs_of(client, sequence)
    # The start weights gave each token half the probability: the ratio is 2.
    start = [v - float(np.log(2.0)) for v in now]
    datum = policy_datum(sequence, start, 1.0, divisor=1.0)
    config = {"clip_low_threshold": 0.8, "clip_high_threshold": 1.28}
    plain = client.forward([datum], "importance_sampling").result()
    assert plain.metrics["loss:sum"] == pytest.approx(-4.0, rel=1e-5)  # 2 tokens, ratio 2
    clipped = client.forward_backward([datum], "ppo", config).result()
    assert clipped.metrics["loss:sum"] == pytest.approx(-2 * 1.28, rel=1e-5)
    default = client.forward_backward([datum], "ppo").result()
    assert default.metrics["loss:sum"] == pytest.approx(-2 * 1.2, rel=1e-5)


def target_logprobs_of(client: Any, sequence: RenderedSequence) -> list[float]:
    output = client.forward([cross_entropy_datum(sequence, 1.0)], "cross_entropy").result()
    return [float(v) for v in output.loss_fn_outputs[0]["logprobs"].to_numpy()]


def test_the_student_is_its_own_teacher_at_the_jobs_start_weights(
    tmp_path: Path, service: TinkerStandIn
) -> None:
    """Distillation with the self teacher: each trained token's ``log p_student - log
    p_teacher`` is read at the job's start weights, the teacher's in the teacher sequence (the
    hinted prompt and the student's reply); ``teacher_kl`` is their mean."""
    tinker = component(tmp_path, service)
    start_checkpoint = json_of(tinker.publish().path)["checkpoint"]
    hinted = {"messages": [{"role": "user", "content": "q? The answer is blue red."}]}
    sample = TrajectorySample(exchange("q?", "blue red", teacher=hinted), sample_id="s")
    parameters = {"objective": "importance_sampling", "distillation": {"teacher": {}}}
    outcome = tinker.wait(tinker.submit(JobData("d:0", (sample,)), parameters), timeout=60)
    assert outcome.event == "finished", outcome.error
    renderer = tinker.renderer
    (student,) = renderer.render_sample(sample.trajectory).sequences
    from reef.core.teacher_rendering import render_teacher

    (teacher,) = render_teacher(
        renderer, hinted, renderer.render_sample(sample.trajectory)
    ).sequences
    model = service.model_of(start_checkpoint)

    def marked(sequence: RenderedSequence) -> list[float]:
        with torch.no_grad():
            row = torch.log_softmax(model(torch.tensor([list(sequence.token_ids)]))[0], -1)
        ids = sequence.token_ids
        return [float(row[j - 1, ids[j]]) for j in range(1, len(ids)) if sequence.loss_mask[j]]

    differences = [s - t for s, t in zip(marked(student), marked(teacher), strict=True)]
    assert outcome.metrics["teacher_kl"] == pytest.approx(
        sum(differences) / len(differences), abs=1e-5
    )
    assert outcome.metrics["teacher_kl"] != 0.0
    assert outcome.metrics["samples_without_teacher"] == 0
    # Without more context the self teacher is the student: its KL is exactly 0.
    plain = TrajectorySample(exchange("q?", "blue red"), sample_id="p")
    same = tinker.wait(tinker.submit(JobData("d:1", (plain,)), parameters), timeout=60)
    assert same.event == "finished", same.error
    assert same.metrics["teacher_kl"] == 0.0
    assert same.metrics["samples_without_teacher"] == 1


def test_a_teacher_tinker_hosts_scores_with_compute_logprobs(
    tmp_path: Path, service: TinkerStandIn
) -> None:
    """tinker-cookbook's on-policy distillation: the teacher is a sampling client on a base
    model Tinker hosts, and each teacher sequence is scored with its ``compute_logprobs``;
    ``teacher_kl`` is the mean of the student's start log probability less the teacher's over
    the trained tokens. The sampling client is made once, for every job."""
    with torch_generator(7):
        teacher_model = TinyGPT(service.config)
    service.host("stand-in/teacher", teacher_model)
    tinker = component(tmp_path, service)
    start_checkpoint = json_of(tinker.publish().path)["checkpoint"]
    sample = TrajectorySample(exchange("q?", "blue red"), sample_id="s")
    parameters = {
        "objective": "importance_sampling",
        "distillation": {"teacher": {"tinker_model": "stand-in/teacher"}},
    }
    outcome = tinker.wait(tinker.submit(JobData("d:0", (sample,)), parameters), timeout=60)
    assert outcome.event == "finished", outcome.error
    (sequence,) = tinker.renderer.render_sample(sample.trajectory).sequences

    def marked(model: Any) -> list[float]:
        with torch.no_grad():
            row = torch.log_softmax(model(torch.tensor([list(sequence.token_ids)]))[0], -1)
        ids = sequence.token_ids
        return [float(row[j - 1, ids[j]]) for j in range(1, len(ids)) if sequence.loss_mask[j]]

    student = marked(service.model_of(start_checkpoint))
    differences = [s - t for s, t in zip(student, marked(teacher_model), strict=True)]
    assert outcome.metrics["teacher_kl"] == pytest.approx(
        sum(differences) / len(differences), abs=1e-5
    )
    again = tinker.wait(tinker.submit(JobData("d:1", (sample,)), parameters), timeout=60)
    assert again.event == "finished", again.error
    assert service.calls.count("create_sampling_client") == 1
    # A base model the service does not host fails the job, naming it.
    unknown = {**parameters, "distillation": {"teacher": {"tinker_model": "stand-in/absent"}}}
    failed = tinker.wait(tinker.submit(JobData("d:2", (sample,)), unknown), timeout=60)
    assert failed.event == "failed"
    assert "stand-in/absent" in (failed.error or "")


def test_a_teacher_tinker_hosts_is_refused_by_the_local_component(tmp_path: Path) -> None:
    from reef.testing.components import tiny_local_component

    local = tiny_local_component(tmp_path)
    parameters = {
        "objective": "importance_sampling",
        "distillation": {"teacher": {"tinker_model": "Qwen/Qwen3-8B"}},
    }
    data = JobData("d:0", (TrajectorySample(exchange("q?", "a"), sample_id="s"),))
    with pytest.raises(PluginConfigError, match="scored by the tinker component") as refused:
        local.submit(data, parameters)
    assert refused.value.errors[0].key == "$.parameters.distillation.teacher"
    with pytest.raises(PluginConfigError, match="leave out model_path"):
        local.submit(
            data,
            {**parameters, "distillation": {"teacher": {"tinker_model": "m", "model_path": "p"}}},
        )


def json_of(folder: Path) -> dict[str, Any]:
    import json

    body: dict[str, Any] = json.loads((folder / "artifact.json").read_text())
    return body


def test_an_engine_teacher_is_asked_and_a_local_model_folder_is_refused(
    tmp_path: Path, service: TinkerStandIn
) -> None:
    tinker = component(tmp_path, service)
    data = JobData("d:0", (TrajectorySample(exchange("q?", "blue"), sample_id="s"),))
    folder = {"objective": "ppo", "distillation": {"teacher": {"model_path": str(tmp_path)}}}
    with pytest.raises(PluginConfigError, match="base_url") as refused:
        tinker.submit(data, folder)
    assert refused.value.errors[0].key == "$.parameters.distillation.teacher.model_path"
    average = {"objective": "ppo", "distillation": {"teacher": {"update_rate": 0.05}}}
    with pytest.raises(PluginConfigError, match="moving average") as refused:
        tinker.submit(data, average)
    assert refused.value.errors[0].key == "$.parameters.distillation.teacher.update_rate"
    truncated = {"objective": "importance_sampling", "is_clip": 2.0}
    with pytest.raises(PluginConfigError, match="truncated importance ratio") as refused:
        tinker.submit(data, truncated)
    assert refused.value.errors[0].key == "$.parameters.is_clip"
    full = {"objective": "ppo", "distillation": {"full_logit": {}}}
    with pytest.raises(PluginConfigError, match="top-k tokens is not trained here") as refused:
        tinker.submit(data, full)
    assert refused.value.errors[0].key == "$.parameters.distillation.full_logit"
    # An engine no one answers at: the job fails naming it, in bounded time.
    engine = {"base_url": "http://127.0.0.1:9/v1", "timeout_seconds": 0.5, "attempts": 1}
    outcome = tinker.wait(
        tinker.submit(data, {"objective": "ppo", "distillation": {"teacher": engine}}), timeout=60
    )
    assert outcome.event == "failed"
    assert "http://127.0.0.1:9/v1/completions" in (outcome.error or "")


# --------------------------------------------------------------------------- task jobs


#: A verifier whose reward is a checksum of the reply, scaled to [0, 1): a small random model's
#: rollouts of a task are distinct, so their rewards differ and each group trains.
CHECKSUM = """\
cksum < /app/answer.txt | awk '{print ($1 % 1000) / 1000}' > /logs/verifier/reward.txt
"""


def task_job(
    tinker: TinkerComponent,
    names: tuple[str, ...],
    test: str = CHECKSUM,
    **rollout_settings: Any,
) -> Any:
    job = JobData("tasks:data:0", tuple(coin_task(name, test) for name in names))
    parameters = {"objective": "task_group", "rollout": task_rollout(**rollout_settings)}
    handle = tinker.submit(job, parameters)
    return tinker.wait(handle, timeout=300)


@pytest.fixture
def recorded(service: TinkerStandIn, monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Any]]:
    """What the stand-in's samplers answered and what each ``forward_backward`` trained."""
    from doubles.tinker_service import StandInSamplingClient, StandInTrainingClient

    seen: dict[str, list[Any]] = {"sampled": [], "trained": []}
    sample, forward_backward = StandInSamplingClient.sample, StandInTrainingClient.forward_backward

    def sampled(self: Any, prompt: Any, num_samples: int, params: Any) -> Any:
        answer = sample(self, prompt, num_samples, params)
        seen["sampled"] += [(prompt.to_ints(), s) for s in answer.result().sequences]
        return answer

    def trained(self: Any, data: Any, loss_fn: Any, config: Any = None) -> Any:
        seen["trained"] += data
        return forward_backward(self, data, loss_fn, config)

    monkeypatch.setattr(StandInSamplingClient, "sample", sampled)
    monkeypatch.setattr(StandInTrainingClient, "forward_backward", trained)
    return seen


@needs_bwrap
def test_a_task_job_samples_on_tinker_at_its_start_weights_scores_and_trains(
    tmp_path: Path, service: TinkerStandIn
) -> None:
    # rule: P-TASK-14 — rolled out at the job's start weights, groups of at least two,
    # rollout_rewards in the metrics; rule: P-STALE-4 — each rollout names its artifact.
    tinker = component(tmp_path, service, batch_size=8)
    start = tinker.publish()
    outcome = task_job(tinker, ("first", "second"))
    assert outcome.event == "finished", outcome.error
    metrics = outcome.metrics
    assert metrics["objective"] == "task_group"
    assert set(metrics["rollout_rewards"]) == {"first", "second"}
    assert all(len(r) == 4 for r in metrics["rollout_rewards"].values())
    assert all(0 <= v <= 1 for r in metrics["rollout_rewards"].values() for v in r)
    assert all(len(set(r)) > 1 for r in metrics["rollout_rewards"].values())  # groups train
    assert metrics["rollout_failures"] == {}
    assert {r["training"]["artifact_id"] for r in metrics["rollouts"]} == {start.artifact_id}
    assert metrics["samples"] == 8
    assert metrics["trained_tokens"] > 0
    # Sampled by Tinker's sampler on the start weights' sampler path, before any step; trained
    # with Tinker's importance_sampling loss; the job's checkpoint makes new weights.
    assert service.calls.index("create_sampling_client") < service.calls.index("forward_backward")
    assert {loss for loss, _ in service.losses} == {"importance_sampling"}
    after = tinker.publish()
    assert after.artifact_id != start.artifact_id
    assert not same_weights(weights(service, start.path), weights(service, after.path))


@needs_bwrap
def test_a_task_rollout_trains_its_exact_tokens_and_sampler_logprobs(
    tmp_path: Path, service: TinkerStandIn, recorded: dict[str, list[Any]]
) -> None:
    # rule: P-REND-6 — each trained Datum is a rollout's prompt and reply exactly as Tinker's
    # sampler gave them, with the sampler's log probabilities on the reply's positions.
    tinker = component(tmp_path, service, batch_size=8)
    outcome = task_job(tinker, ("only",), rollouts_per_task=3)
    assert outcome.event == "finished", outcome.error
    assert len(recorded["sampled"]) == 3
    assert len(recorded["trained"]) == 3
    for datum, (prompt, reply) in zip(recorded["trained"], recorded["sampled"], strict=True):
        ids = [*datum.model_input.to_ints(), datum.loss_fn_inputs["target_tokens"].tolist()[-1]]
        assert ids == [*prompt, *reply.tokens]
        start = datum.loss_fn_inputs["logprobs"].tolist()
        assert start[len(prompt) - 1 :] == pytest.approx(list(reply.logprobs))
        assert not any(datum.loss_fn_inputs["advantages"].tolist()[: len(prompt) - 1])


def test_a_task_job_whose_sandbox_fails_reports_an_infrastructure_failure(
    tmp_path: Path, service: TinkerStandIn
) -> None:
    nowhere = {"backend": "docker", "docker_url": f"unix://{tmp_path}/no-daemon.sock"}
    tinker = component(tmp_path, service)
    start = tinker.publish().artifact_id
    outcome = task_job(tinker, ("lost",), sandbox=nowhere)
    assert outcome.event == "finished", outcome.error
    assert outcome.metrics["rollout_rewards"] == {}
    failure = outcome.metrics["rollout_failures"]["lost"]
    assert failure["infrastructure_failure"] is True
    assert "Docker daemon" in failure["error"]
    assert "forward_backward" not in service.calls  # nothing trained: the weights stay
    assert tinker.publish().artifact_id == start


def test_a_task_job_needs_its_rollout_parameter(tmp_path: Path, service: TinkerStandIn) -> None:
    tinker = component(tmp_path, service)
    with pytest.raises(PluginConfigError, match="rollout"):
        tinker.submit(JobData("tasks:data:0", (coin_task("a"),)), {"objective": "task_group"})


@needs_bwrap
def test_a_task_job_that_reached_its_checkpoint_before_a_crash_keeps_its_rollout_rewards(
    tmp_path: Path, service: TinkerStandIn
) -> None:
    """The process dies after Tinker saved the task job's checkpoint: the restarted component
    reports it finished with the rewards its rollouts had, so each task keeps one result."""
    first = component(tmp_path, service, batch_size=8)
    start = first.publish().artifact_id
    service.kill_process("save_state", applied=True)
    with pytest.raises(ProcessKilled):
        task_job(first, ("only",))

    restarted = component(tmp_path, service, batch_size=8)
    outcome = restarted.poll(JobHandle("tasks:data:0", "tinker"))
    assert outcome is not None
    assert outcome.event == "finished", outcome.error
    assert len(outcome.metrics["rollout_rewards"]["only"]) == 4
    assert {r["training"]["artifact_id"] for r in outcome.metrics["rollouts"]} == {start}
    assert restarted.publish().artifact_id != start


def test_a_task_job_whose_sampler_fails_fails_and_keeps_the_weights(
    tmp_path: Path, service: TinkerStandIn
) -> None:
    tinker = component(tmp_path, service)
    before = tinker.publish()
    service.fail("create_sampling_client", ConnectionError("sampler unavailable"))
    failed = task_job(tinker, ("only",))
    assert failed.event == "failed"
    assert "sampler unavailable" in (failed.error or "")
    assert "forward_backward" not in service.calls
    assert tinker.publish() == before
