"""Distilling objectives in the components: the teacher sequence, the teacher as a scorer of
the student's tokens (a local model, the student itself, an engine answering vLLM's
``prompt_logprobs``), the per-token reverse KL advantage, and the clipped ``ppo`` loss."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, strategies as st

torch = pytest.importorskip("torch")

from reef.components.job_parameters import JobParameters, TeacherSettings  # noqa: E402
from reef.components.job_samples import prepare_job  # noqa: E402
from reef.components.local.artifacts import save_model_folder  # noqa: E402
from reef.components.local.byte_tokenizer import ByteTokenizer  # noqa: E402
from reef.components.local.component import LocalComponent  # noqa: E402
from reef.components.local.objectives import batch_loss  # noqa: E402
from reef.components.local.teacher import ModelTeacher, Teachers  # noqa: E402
from reef.components.local.tiny_gpt import TinyGPT, TinyGPTConfig, TinyGPTModel  # noqa: E402
from reef.components.teacher_scores import (  # noqa: E402
    EngineTeacher,
    TeacherError,
    kl_advantages,
    token_advantages,
)
from reef.core.chat_rendering import ChatRenderer  # noqa: E402
from reef.core.job_data import JobData, TrajectorySample  # noqa: E402
from reef.core.plugins import PluginConfigError  # noqa: E402
from reef.core.teacher_rendering import render_teacher, trained_tokens  # noqa: E402
from reef.testing.components import tiny_local_component  # noqa: E402
from reef.testing.samples import exchange  # noqa: E402

RENDERER = ChatRenderer(ByteTokenizer())
DISTIL: dict[str, Any] = {"objective": "importance_sampling", "distillation": {"kl_coef": 1.0}}


def tiny_model(seed: int = 0) -> TinyGPTModel:
    torch.manual_seed(seed)
    tokenizer = ByteTokenizer()
    config = TinyGPTConfig(
        vocab_size=tokenizer.vocab_size, max_seq_len=128, d_model=32, n_layers=1, n_heads=2
    )
    return TinyGPTModel(TinyGPT(config), tokenizer)


def distil_sample(question: str, reply: str, teacher: dict[str, Any] | None) -> TrajectorySample:
    extra = {"teacher": teacher} if teacher is not None else {}
    return TrajectorySample(exchange(question, reply, **extra), sample_id=question)


def test_prepare_renders_each_teacher_and_counts_one_too_long() -> None:
    # rule: P-REND-4 P-REND-5
    knows = {"messages": [{"role": "user", "content": "2+3? It is 5."}]}
    data = JobData(
        "d:1",
        (
            distil_sample("2+3?", "5", knows),
            distil_sample("2+4?", "6", {**knows, "max_tokens": 4}),  # teacher sequence too long
            distil_sample("2+5?", "7", None),  # no teacher request: the student's own tokens
        ),
    )
    job = JobParameters.parse(DISTIL, plugin_class=LocalComponent)
    prepared = prepare_job(
        data,
        RENDERER,
        job.objective,
        max_seq_len=None,
        component="t",
        distillation=job.distillation,
    )
    assert prepared.unrenderable_samples == 1
    assert [i for i, _ in prepared.rendered] == [0, 2]
    assert prepared.advantages == {0: 0.0, 2: 0.0}  # reward_coef 0: no reward needed
    assert prepared.samples_without_reward == 0
    student = prepared.rendered[0][1]
    assert prepared.teachers[0] == render_teacher(RENDERER, knows, student)
    assert prepared.teachers[2] == prepared.rendered[1][1]


def test_the_reward_trains_beside_the_teacher_only_with_a_reward_coefficient() -> None:
    samples = (
        TrajectorySample(exchange("a", "x"), reward=1.0),
        TrajectorySample(exchange("b", "y"), reward=0.0),
        TrajectorySample(exchange("c", "z")),
    )
    job = JobParameters.parse(
        {**DISTIL, "distillation": {"reward_coef": 0.5}}, plugin_class=LocalComponent
    )
    prepared = prepare_job(
        JobData("d:1", samples),
        RENDERER,
        job.objective,
        max_seq_len=None,
        component="t",
        distillation=job.distillation,
    )
    assert prepared.advantages == {0: 0.25, 1: -0.25}
    assert prepared.samples_without_reward == 1


def test_a_model_teacher_scores_exactly_the_students_trained_tokens() -> None:
    model = tiny_model()
    student = RENDERER.render_sample(exchange("2+3?", "5"))
    teacher_sequence = render_teacher(
        RENDERER, {"messages": [{"role": "user", "content": "It is 5. 2+3?"}]}, student
    )
    (values,) = ModelTeacher(model, torch.device("cpu")).logprobs([teacher_sequence])
    assert len(values) == len(trained_tokens(student))
    # each value is the log probability of the marked token after everything before it
    (sequence,) = teacher_sequence.sequences
    ids = torch.tensor([sequence.token_ids])
    with torch.no_grad():
        logits = model.logits(ids, None)[0].log_softmax(-1)
    marked = [j for j, m in enumerate(sequence.loss_mask) if m]
    expected = [float(logits[j - 1, sequence.token_ids[j]]) for j in marked]
    assert values == pytest.approx(expected, abs=1e-5)


@given(
    st.lists(st.tuples(st.floats(-20, 0), st.floats(-20, 0)), max_size=8),
    st.just(0.0) | st.floats(0.01, 4),
)
def test_the_advantage_is_the_negative_reverse_kl(
    pairs: list[tuple[float, float]], coef: float
) -> None:
    student = [s for s, _ in pairs]
    teacher = [t for _, t in pairs]
    advantages = kl_advantages(student, teacher, kl_coef=coef)
    for a, s, t in zip(advantages, student, teacher, strict=True):
        assert a == pytest.approx(-coef * (s - t))
        # a token the teacher finds likelier than the student is pushed up, and back
        if abs(t - s) > 1e-6:
            assert (a > 0) == (coef > 0 and t > s)


class _FixedTeacher:
    """A teacher whose log probability of every token is ``value``."""

    def __init__(self, value: float) -> None:
        self.value = value

    def logprobs(self, samples: Any) -> list[list[float]]:
        return [[self.value] * len(trained_tokens(sample)) for sample in samples]


@pytest.mark.parametrize("gamma", [0.0, 0.5, 0.9, 1.0])
def test_the_kl_discount_factor_is_the_cookbooks(gamma: float) -> None:
    # tinker_cookbook/distillation/train_on_policy.py: kl_advantages = -coef * mask * (log p -
    # log q), then discounted_future_sum_vectorized(kl_advantages, gamma) when gamma > 0.
    data = JobData("d:k", (distil_sample("2+3?", "five", None),))
    job = JobParameters.parse(DISTIL, plugin_class=LocalComponent)
    prepared = prepare_job(
        data, RENDERER, job.objective, max_seq_len=None, component="t",
        distillation=job.distillation,
    )  # fmt: skip
    (sequence,) = prepared.rendered[0][1].sequences
    student = [-0.1 * (j % 7) - 0.2 for j in range(len(sequence.token_ids) - 1)]
    rows, _ = token_advantages(
        prepared, {(0, 0): student}, _FixedTeacher(-1.0), kl_coef=0.7, kl_discount=gamma
    )
    mask = torch.tensor(sequence.loss_mask[1:], dtype=torch.float64)
    kl = -0.7 * mask * (torch.tensor(student, dtype=torch.float64) + 1.0)
    expected = torch.empty_like(kl)
    running = torch.zeros((), dtype=torch.float64)
    for t in range(len(kl) - 1, -1, -1):
        running = kl[t] + gamma * running if gamma > 0 else kl[t]
        expected[t] = running
    assert rows[(0, 0)] == pytest.approx(expected.tolist(), abs=1e-6)


def test_the_centred_kl_is_ttt_discovers_kl_penalty() -> None:
    # tinker_cookbook/rl/metrics.py (test-time-training/discover), incorporate_kl_penalty:
    # diff = logp - logp_base; avg = mean diff over the batch's trained tokens;
    # advantages += kl_penalty_coef * mask * (avg - diff).
    data = JobData("d:c", (distil_sample("2+3?", "five", None), distil_sample("1+1?", "2", None)))
    job = JobParameters.parse(DISTIL, plugin_class=LocalComponent)
    prepared = prepare_job(
        data, RENDERER, job.objective, max_seq_len=None, component="t",
        distillation=job.distillation,
    )  # fmt: skip
    start = {}
    for position, (_, sample) in enumerate(prepared.rendered):
        (sequence,) = sample.sequences
        start[(position, 0)] = [
            -0.3 * (j % 5) - 0.1 * position for j in range(len(sequence.token_ids) - 1)
        ]
    rows, kl = token_advantages(prepared, start, _FixedTeacher(-0.5), kl_coef=0.4, kl_centred=True)
    masks = [
        torch.tensor(prepared.rendered[p][1].sequences[0].loss_mask[1:], dtype=torch.float64)
        for p in range(2)
    ]
    diffs = [(torch.tensor(start[(p, 0)], dtype=torch.float64) + 0.5) * masks[p] for p in range(2)]
    avg = sum(float(d.sum()) for d in diffs) / sum(float(m.sum()) for m in masks)
    assert kl == pytest.approx(avg, abs=1e-9)
    for p in range(2):
        expected = 0.4 * masks[p] * (avg - diffs[p])
        assert rows[(p, 0)] == pytest.approx(expected.tolist(), abs=1e-6)


def test_a_teacher_that_scores_another_number_of_tokens_is_refused() -> None:
    with pytest.raises(TeacherError, match="does not hold the student's reply"):
        kl_advantages([-1.0, -2.0], [-1.0], kl_coef=1.0)


@given(
    ratio=st.floats(0.2, 3.0),
    advantage=st.floats(-2.0, 2.0).filter(lambda a: abs(a) > 1e-3),
)
def test_ppo_clips_the_ratio_as_openclaw_rl_trains(ratio: float, advantage: float) -> None:
    start = torch.zeros(1, 1)
    logprobs = torch.full((1, 1), float(torch.log(torch.tensor(ratio))), requires_grad=True)
    mask = torch.ones(1, 1)
    loss = batch_loss(
        "ppo",
        logprobs,
        mask,
        start_logprobs=start,
        advantages=torch.tensor([advantage]),
        clip=(0.2, 0.28),
    )
    clipped = min(ratio * advantage, max(min(ratio, 1.28), 0.8) * advantage)
    assert float(loss.detach()) == pytest.approx(-clipped, rel=1e-4, abs=1e-5)
    loss.backward()
    # outside the clip range, on the side the advantage pushes toward, no gradient flows
    beyond = (advantage > 0 and ratio > 1.28) or (advantage < 0 and ratio < 0.8)
    assert (float(logprobs.grad.abs().sum()) == 0.0) == beyond


@given(
    ratios=st.lists(st.floats(0.05, 6.0), min_size=1, max_size=6),
    advantages=st.lists(st.floats(-2.0, 2.0), min_size=6, max_size=6),
    is_clip=st.floats(0.5, 4.0),
)
def test_a_truncated_ratio_weighs_the_gradient_as_sdpos_is_clip(
    ratios: list[float], advantages: list[float], is_clip: float
) -> None:
    """lasgroup/SDPO compute_self_distillation_loss: per-token loss times exp(log p - log q)
    clamped at is_clip, the weight detached; so d loss / d log p = -min(ratio, is_clip) * A,
    written here from that, not from Reef's code. Under the clip it is the plain loss's."""
    n = len(ratios)
    start = torch.zeros(1, n, dtype=torch.float64)
    values = torch.log(torch.tensor([ratios], dtype=torch.float64))
    per_token = torch.tensor([advantages[:n]], dtype=torch.float64)
    mask = torch.ones(1, n, dtype=torch.float64)

    def gradient(clip: float | None) -> list[float]:
        logprobs = values.clone().requires_grad_(True)
        loss = batch_loss(
            "importance_sampling",
            logprobs,
            mask,
            start_logprobs=start,
            advantages=per_token,
            is_clip=clip,
        )
        loss.backward()
        assert logprobs.grad is not None
        return logprobs.grad[0].tolist()

    expected = [-min(r, is_clip) * a for r, a in zip(ratios, advantages, strict=False)]
    assert gradient(is_clip) == pytest.approx(expected, rel=1e-9, abs=1e-12)
    plain = [-r * a for r, a in zip(ratios, advantages, strict=False)]
    assert gradient(1e9) == pytest.approx(plain, rel=1e-9, abs=1e-12)
    assert gradient(None) == pytest.approx(plain, rel=1e-9, abs=1e-12)


def test_per_token_advantages_weight_each_token() -> None:
    logprobs = torch.zeros(1, 3, requires_grad=True)
    mask = torch.tensor([[0.0, 1.0, 1.0]])
    loss = batch_loss(
        "importance_sampling",
        logprobs,
        mask,
        start_logprobs=torch.zeros(1, 3),
        advantages=torch.tensor([[9.0, 2.0, -1.0]]),
    )
    loss.backward()
    assert logprobs.grad.tolist() == [[0.0, -2.0, 1.0]]


@pytest.mark.parametrize(
    ("parameters", "key"),
    [
        ({"objective": "cross_entropy", "distillation": {}}, "distillation trains a per-token"),
        ({"distillation": {"teacher": {"model_path": "a", "base_url": "http://b"}}}, "not both"),
        ({"distillation": {"teacher": {"model": "m"}}}, "set base_url"),
        ({"distillation": {"teacher": {"api": "sglang"}}}, "set base_url"),
        ({"distillation": {"teacher": {"base_url": "http://e", "api": "tgi"}}}, "api"),
        ({"distillation": {"teacher": {"update_rate": 1.5}}}, "update_rate"),
        ({"distillation": {"teacher": {"update_rate": -0.1}}}, "update_rate"),
        ({"distillation": {"teacher": {"update_rate": 0.1, "model_path": "m"}}}, "leave out"),
        ({"distillation": {"kl_coef": -1}}, "0 or more"),
        ({"reward_baseline": "median"}, "reward_baseline must be one of"),
        ({"is_clip": 0}, "is_clip"),
        ({"objective": "ppo", "is_clip": 2.0}, "clip_low and clip_high"),
        ({"distillation": {"full_logit": {"topk": 0}}}, "topk"),
        ({"distillation": {"full_logit": {"alpha": 1.5}}}, "alpha"),
        (
            {"distillation": {"full_logit": {}, "teacher": {"base_url": "http://e/v1"}}},
            "an engine does not return",
        ),
        ({"distillation": {"full_logit": {}, "kl_discount_factor": 0.9}}, "leave them out"),
    ],
)
def test_bad_distillation_parameters_are_refused(parameters: dict[str, Any], key: str) -> None:
    with pytest.raises(PluginConfigError, match=key):
        JobParameters.parse(
            {"objective": "importance_sampling", **parameters}, plugin_class=LocalComponent
        )


# -- the engine teacher, against a stand-in ----------------------------------------------------


class _JsonHandler(BaseHTTPRequestHandler):
    """A loopback server's handler that answers JSON and logs nothing."""

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        del args


class _PromptLogprobsEngine(_JsonHandler):
    """A stand-in for vLLM's OpenAI-compatible server, implementing exactly one documented
    endpoint: ``POST /v1/completions`` with ``prompt`` as token ids and ``prompt_logprobs: 0``,
    answering ``choices[0].prompt_logprobs`` (``null`` first, then ``{token id: {logprob,
    rank, decoded_token}}`` per position) computed by a TinyGPT. ``failures`` answers that
    many requests with 503 first; ``silent`` never answers."""

    model: TinyGPTModel
    failures: int = 0
    silent: bool = False
    calls: int = 0

    def do_POST(self) -> None:
        server = type(self)
        server.calls += 1
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        assert self.path == "/v1/completions"
        assert body["prompt_logprobs"] == 0
        if server.silent:
            threading.Event().wait(2)
            return
        if server.failures:
            server.failures -= 1
            self.send_response(503)
            self.end_headers()
            return
        ids = body["prompt"]
        with torch.no_grad():
            logits = server.model.logits(torch.tensor([ids]), None)[0].log_softmax(-1)
        entries: list[Any] = [None] + [
            {
                str(ids[j]): {
                    "logprob": float(logits[j - 1, ids[j]]),
                    "rank": 1,
                    "decoded_token": "x",
                }
            }
            for j in range(1, len(ids))
        ]
        self._answer(200, {"choices": [{"text": "", "prompt_logprobs": entries}]})


@pytest.fixture
def engine() -> Iterator[tuple[str, type[_PromptLogprobsEngine]]]:
    handler = type("Engine", (_PromptLogprobsEngine,), {"model": tiny_model(3)})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", handler
    finally:
        server.shutdown()
        server.server_close()


def _teacher_sequence() -> Any:
    student = RENDERER.render_sample(exchange("2+3?", "5"))
    return render_teacher(RENDERER, {"messages": [{"role": "user", "content": "5! 2+3?"}]}, student)


def test_an_engine_teacher_reads_prompt_logprobs(
    engine: tuple[str, type[_PromptLogprobsEngine]],
) -> None:
    url, handler = engine
    handler.failures = 1  # one failed call is tried again
    settings = TeacherSettings(base_url=url, model="teacher", timeout_seconds=5, attempts=2)
    sequence = _teacher_sequence()
    (values,) = EngineTeacher(settings).logprobs([sequence])
    (local,) = ModelTeacher(handler.model, torch.device("cpu")).logprobs([sequence])
    assert values == pytest.approx(local, abs=1e-5)
    assert handler.calls == 2


def test_an_engine_teacher_that_never_answers_fails_the_job_in_bounded_time(
    engine: tuple[str, type[_PromptLogprobsEngine]],
) -> None:
    url, handler = engine
    handler.silent = True
    settings = TeacherSettings(base_url=url, timeout_seconds=0.2, attempts=2)
    with pytest.raises(TeacherError, match="after 2 attempt"):
        EngineTeacher(settings).logprobs([_teacher_sequence()])


# -- training --------------------------------------------------------------------------------


def test_distillation_moves_the_student_toward_a_teacher(tmp_path: Path) -> None:
    teacher_folder = tmp_path / "teacher"
    save_model_folder(teacher_folder, tiny_model(7))
    local = tiny_local_component(tmp_path / "student")
    samples = [distil_sample(f"q{n}", "blue red", None) for n in range(4)]
    parameters = {
        "objective": "importance_sampling",
        "distillation": {"teacher": {"model_path": str(teacher_folder)}, "kl_coef": 1.0},
    }
    kls = []
    for job in range(6):
        outcome = local.wait(local.submit(JobData(f"d:{job}", samples), parameters), timeout=120)
        assert outcome.event == "finished", outcome.error
        kls.append(outcome.metrics["teacher_kl"])
    assert abs(kls[-1]) < abs(kls[0])


def test_the_student_is_its_own_teacher_only_through_more_context(tmp_path: Path) -> None:
    # The self teacher (no model_path, no base_url: SDPO, OpenClaw-RL's hindsight default):
    # without more context its KL is exactly 0, with a hint it is not.
    local = tiny_local_component(tmp_path)
    hinted = {"messages": [{"role": "user", "content": "q? The answer is blue red."}]}
    parameters = {"objective": "ppo", "distillation": {"teacher": {}}}
    plain = local.wait(
        local.submit(JobData("d:0", [distil_sample("q?", "blue red", None)]), parameters)
    )
    assert plain.event == "finished", plain.error
    assert plain.metrics["teacher_kl"] == 0.0
    assert plain.metrics["samples_without_teacher"] == 1  # visible: it learned nothing
    taught = local.wait(
        local.submit(JobData("d:1", [distil_sample("q?", "blue red", hinted)]), parameters)
    )
    assert taught.event == "finished", taught.error
    assert taught.metrics["teacher_kl"] != 0.0
    assert taught.metrics["samples_without_teacher"] == 0


def test_the_moving_average_teacher_moves_as_sdpos_ema_update() -> None:
    """lasgroup/SDPO (verl/workers/actor/dp_actor.py, _update_teacher): after a training step
    that moved the weights, teacher = (1 - rate) * teacher + rate * student; a step that moved
    none leaves it; the copy is the student's weights when first asked for."""
    student = tiny_model(3)
    teachers = Teachers(torch.device("cpu"))
    settings = TeacherSettings(update_rate=0.25)
    teacher = teachers.scorer(settings, student)
    assert isinstance(teacher, ModelTeacher)
    assert teacher.model is not student
    expected = [p.detach().clone() for p in student.module.parameters()]
    for step in range(3):
        with torch.no_grad():
            for p in student.module.parameters():
                p.add_(torch.randn_like(p) * 0.1)
        teachers.after_job(settings, student, stepped=True)
        expected = [
            0.75 * e + 0.25 * s.detach()
            for e, s in zip(expected, student.module.parameters(), strict=True)
        ]
        teachers.after_job(settings, student, stepped=False)  # moved nothing: nothing moves
        for mine, want in zip(teacher.model.module.parameters(), expected, strict=True):
            assert torch.allclose(mine, want, atol=1e-6), step
    assert teachers.scorer(settings, student) is teacher  # one average, kept across jobs


def test_a_frozen_teacher_is_the_initial_weights_and_the_live_one_the_start_weights(
    tmp_path: Path,
) -> None:
    """With update_rate 0 the teacher stays the weights of the first job (SDPO's frozen base);
    unset, it is each job's start weights: after a job moved the student, a sample without
    teacher context has a KL of exactly 0 under the live teacher and not under the frozen
    one."""
    hinted = {"messages": [{"role": "user", "content": "q? The answer is blue red."}]}
    kls: dict[str, float] = {}
    for name, teacher in (("live", {}), ("frozen", {"update_rate": 0.0})):
        local = tiny_local_component(tmp_path / name)
        parameters = {"objective": "ppo", "distillation": {"teacher": teacher}}
        first = JobData("d:0", [distil_sample("q?", "blue red", hinted)])
        moved = local.wait(local.submit(first, parameters))
        assert moved.event == "finished", moved.error
        assert moved.metrics["optimizer_steps"] > 0
        plain = JobData("d:1", [distil_sample("q?", "blue red", None)])
        outcome = local.wait(local.submit(plain, parameters))
        assert outcome.event == "finished", outcome.error
        kls[name] = outcome.metrics["teacher_kl"]
    assert kls["live"] == 0.0
    assert kls["frozen"] != 0.0


def test_a_truncated_ratio_trains_in_the_local_component(tmp_path: Path) -> None:
    local = tiny_local_component(tmp_path)
    hinted = {"messages": [{"role": "user", "content": "q? The answer is blue red."}]}
    parameters = {
        "objective": "importance_sampling",
        "is_clip": 2.0,
        "distillation": {"teacher": {}},
    }
    outcome = local.wait(
        local.submit(JobData("d:0", [distil_sample("q?", "blue red", hinted)]), parameters)
    )
    assert outcome.event == "finished", outcome.error
    assert outcome.metrics["optimizer_steps"] > 0


def test_a_teacher_with_another_tokenizer_fails_the_job(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    from reef.testing.hf_model import make_hf_model_folder

    folder = make_hf_model_folder(tmp_path / "llama")  # a byte-level BPE of its own
    local = tiny_local_component(tmp_path / "student")
    parameters = {"objective": "ppo", "distillation": {"teacher": {"model_path": str(folder)}}}
    outcome = local.wait(local.submit(JobData("d:0", [distil_sample("q", "a", None)]), parameters))
    assert outcome.event == "failed"
    assert "student's tokenizer" in (outcome.error or "")


class _SGLangGenerate(_JsonHandler):
    """A stand-in for SGLang's native ``POST /generate`` (sgl-project/sglang
    ``python/sglang/srt/entrypoints/http_server.py`` ``generate_request``, fields of
    ``managers/io_struct.py`` ``GenerateReqInput``), with ``return_logprob`` and
    ``logprob_start_len``: ``meta_info.input_token_logprobs`` is one ``[logprob, token id,
    text]`` per prompt position from ``logprob_start_len`` on, the first padded with ``None``
    (``managers/scheduler_output_processor_mixin.py``: ``[None] + input_token_logprobs[:-1]``),
    the text ``None`` without ``return_text_in_logprobs``
    (``tokenizer_manager.py`` ``detokenize_logprob_tokens``); computed by a TinyGPT. A body
    without ``input_ids`` or ``text`` gets SGLang's 400 (``GenerateReqInput._validate_inputs``'s
    ValueError, answered by ``http_server.py`` ``_create_error_response``)."""

    model: TinyGPTModel

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        assert self.path == "/generate"
        ids = body.get("input_ids")
        if ids is None and body.get("text") is None:
            problem = "Either text, input_ids or input_embeds should be provided."
            self._answer(400, {"error": {"message": problem}})  # http_server._create_error_response
            return
        start = body.get("logprob_start_len", -1)
        with torch.no_grad():
            logits = type(self).model.logits(torch.tensor([ids]), None)[0].log_softmax(-1)
        values: list[Any] = [None] + [float(logits[j - 1, ids[j]]) for j in range(1, len(ids))]
        entries = [[values[j], ids[j], None] for j in range(max(start, 0), len(ids))]
        meta: dict[str, Any] = {"prompt_tokens": len(ids), "completion_tokens": 1}
        if body.get("return_logprob"):
            meta["input_token_logprobs"] = entries
            meta["output_token_logprobs"] = [[-0.1, 0, None]]
        self._answer(200, {"text": "x", "output_ids": [0], "meta_info": meta})


def test_an_sglang_teacher_reads_input_token_logprobs() -> None:
    """The engine teacher over SGLang's native API scores the student's tokens as the same
    model run locally does; a base_url ending in /v1 (a chat client's) names the same server."""
    handler = type("SGLang", (_SGLangGenerate,), {"model": tiny_model(5)})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        sequence = _teacher_sequence()
        (local,) = ModelTeacher(handler.model, torch.device("cpu")).logprobs([sequence])
        for base in ("", "/v1"):
            url = f"http://127.0.0.1:{server.server_address[1]}{base}"
            settings = TeacherSettings(base_url=url, api="sglang", timeout_seconds=5)
            (values,) = EngineTeacher(settings).logprobs([sequence])
            assert values == pytest.approx(local, abs=1e-5)
        refused = urllib.request.Request(
            f"http://127.0.0.1:{server.server_address[1]}/generate",
            data=b'{"sampling_params": {}}',
            headers={"content-type": "application/json"},
        )
        with pytest.raises(urllib.error.HTTPError) as answer:
            urllib.request.urlopen(refused, timeout=5)
        assert answer.value.code == 400
    finally:
        server.shutdown()
        server.server_close()
