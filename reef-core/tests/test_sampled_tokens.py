"""The component trains exactly the tokens the engine sampled (docs/decisions.md, "Trained
tokens are the sampled tokens").

On the tiny Hugging Face model (a byte-level BPE tokenizer with ChatML special tokens), the
local engine answers as the inference service asks it to (``return_token_ids``, ``logprobs``);
the call is recorded, built into an ATIF sample as the record-to-sample stages build it, and
rendered as the component renders it. Its trained tokens are the sampled ones on 100 random
completions, which include bytes that are not UTF-8, special tokens and tool calls; rendered
from the text, most of them would not be.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import attrs
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from reef.components.job_samples import job_metrics, prepare_job  # noqa: E402
from reef.components.local.causal_lm import Generation, SamplingRequest  # noqa: E402
from reef.components.local.component import LocalComponent  # noqa: E402
from reef.components.scheduling import StepPlan  # noqa: E402
from reef.core.atif import trajectory_to_json  # noqa: E402
from reef.core.atif_build import trajectory_from_records  # noqa: E402
from reef.core.chat_rendering import ChatRenderer, RenderedSample  # noqa: E402
from reef.core.job_data import JobData, TrajectorySample  # noqa: E402
from reef.core.records import InferenceRecord  # noqa: E402
from reef.engines.interface import as_asked, asking_for_tokens  # noqa: E402
from reef.engines.local import LocalEngine  # noqa: E402

ARGS = {"enable_thinking": False}
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
WORDS = ["anemone", "colour", "naïve", "東京", "tool", "a", "ne", "<think>", "🙂", "x y"]


@pytest.fixture(scope="module")
def served(hf_model_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> LocalEngine:
    local = LocalComponent.from_config(
        {
            "state_dir": str(tmp_path_factory.mktemp("state")),
            "model_path": str(hf_model_folder),
            "chat_template_args": ARGS,
        }
    )
    local.publish()
    return LocalEngine(local.artifacts, chat_template_args=ARGS, default_max_tokens=16)


def recorded(request: dict[str, Any], body: dict[str, Any], number: int) -> TrajectorySample:
    """The sample of one recorded call, as the stages build it from the record."""
    record = InferenceRecord(
        id=f"inf-{number}",
        scenario="demo",
        request=request,
        response=body,
        artifact_id=body["system_fingerprint"],
        ended_at=time.time(),
    )
    trajectory = trajectory_from_records([record], trajectory_id=record.id, keep_tokens=True)
    return TrajectorySample(trajectory_to_json(trajectory), reward=float(number % 2))


def trained(sample: RenderedSample) -> list[int]:
    return [t for s in sample.sequences for t, m in zip(s.token_ids, s.loss_mask, strict=True) if m]


def random_request(rng: random.Random) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": " ".join(rng.choices(WORDS, k=rng.randint(1, 6)))}
    ]
    if rng.random() < 0.3:
        # An earlier tool call and its result: the prompt renders them too.
        messages += [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "lookup", "arguments": '{"q": "naïve"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": rng.choice(WORDS)},
        ]
    return {
        "model": "m",
        "messages": messages,
        "tools": TOOLS,
        "temperature": 1.5,
        "max_tokens": rng.randint(2, 16),
        "seed": rng.randrange(1 << 30),
    }


def scripted(engine: LocalEngine, ids: list[int]) -> Any:
    """Make the served model "sample" ``ids`` once (for a reply an untrained model would take
    too long to produce: a tool call)."""
    model = engine._current()[1]
    real = model.generate

    def generate(request: SamplingRequest) -> list[Generation]:
        model.generate = real  # type: ignore[method-assign]
        logprobs = tuple(-0.5 for _ in ids)
        return [Generation(tuple(ids), logprobs, tuple(() for _ in ids), "stop")]

    model.generate = generate  # type: ignore[method-assign]


def test_trained_tokens_are_the_sampled_tokens_on_100_random_completions(
    served: LocalEngine,
) -> None:
    """rule: P-REND-3 (the prompt rendered is the engine's, which the check compares)."""
    renderer: ChatRenderer = served._current()[2]
    tokenizer = renderer.tokenizer
    # Special tokens other than the template's own end of turn (which a re-encoding gets back).
    special = {tokenizer.encode(t)[0] for t in ("<|im_start|>", "<|endoftext|>")}
    stop = tokenizer.encode("<|im_end|>")[0]
    byte_ff = next(i for i in range(tokenizer.vocab_size) if tokenizer.token_bytes(i) == b"\xff")
    tool_call = tokenizer.encode('<tool_call>\n{"name": "lookup", "arguments": {"q": "x"}}\n')
    rng = random.Random(24)
    samples: list[TrajectorySample] = []
    sampled: list[tuple[list[int], list[int], list[float]]] = []
    for number in range(100):
        request = random_request(rng)
        if number % 10 == 0:
            # A tool call, a byte that is no UTF-8 and a special token, then the stop token.
            closing = tokenizer.encode("</tool_call>")
            scripted(served, [*tool_call, *closing, byte_ff, *special, stop])
        body = served.complete(asking_for_tokens(request))
        (choice,) = body["choices"]
        if number % 10 == 0:
            assert choice["finish_reason"] == "tool_calls"
        logprobs = [e["logprob"] for e in choice["logprobs"]["content"]]
        sampled.append((body["prompt_token_ids"], choice["token_ids"], logprobs))
        samples.append(recorded(request, body, number))

    rendered = [renderer.render_sample(s.trajectory) for s in samples]
    retokenized_differs = 0
    invalid_utf8 = with_special = with_tools = truncated = 0
    for sample, one, (prompt, reply, logprobs) in zip(samples, rendered, sampled, strict=True):
        (sequence,) = one.sequences
        assert trained(one) == reply  # token for token what was sampled
        assert list(sequence.token_ids) == [*prompt, *reply]
        assert sequence.engine_logprobs is not None
        assert list(sequence.engine_logprobs[len(prompt) :]) == logprobs
        assert (one.retokenized_replies, one.prompt_mismatches) == (0, 0)
        # What rendering the recorded text would have trained instead.
        steps = sample.trajectory["steps"]
        steps[-1].pop("metrics", None)
        again = renderer.render_sample(sample.trajectory)
        retokenized_differs += trained(again) != reply
        try:
            b"".join(tokenizer.token_bytes(i) for i in reply).decode()
        except UnicodeDecodeError:
            invalid_utf8 += 1
        with_special += any(i in special for i in reply)
        with_tools += bool(steps[-1].get("tool_calls"))
        truncated += one.truncated_replies
    assert invalid_utf8 >= 10
    assert with_special >= 10
    assert with_tools >= 10
    assert truncated > 0
    assert retokenized_differs >= 50


def test_the_component_counts_what_it_had_to_render_from_text(served: LocalEngine) -> None:
    """A reply without engine tokens (an engine that gives none) renders from its text and is
    counted in ``retokenized_samples``; a prompt that differs from the engine's is counted and
    the engine's trains."""
    renderer: ChatRenderer = served._current()[2]
    rng = random.Random(1)
    request = random_request(rng)
    body = served.complete(asking_for_tokens(request))
    with_ids = recorded(request, body, 0)
    shown, trimmed = as_asked(body, request)
    assert trimmed
    assert "prompt_token_ids" not in shown
    assert "token_ids" not in shown["choices"][0]
    assert shown["choices"][0]["logprobs"] is None
    without = recorded(request, shown, 1)
    trajectory = with_ids.trajectory
    metrics = trajectory["steps"][-1]["metrics"]
    other_prompt = {**metrics, "prompt_token_ids": [metrics["prompt_token_ids"][0]]}
    last = {**trajectory["steps"][-1], "metrics": other_prompt}
    mismatched = attrs.evolve(
        with_ids, trajectory={**trajectory, "steps": [*trajectory["steps"][:-1], last]}
    )
    samples = [
        attrs.evolve(s, sample_id=f"s{i}") for i, s in enumerate([with_ids, without, mismatched])
    ]
    job = prepare_job(
        JobData("demo:data:0", tuple(samples)),
        renderer,
        "cross_entropy",
        max_seq_len=None,
        component="local",
    )
    metrics = job_metrics(
        job, StepPlan((), 0), losses=[], trained_tokens=0, step_tokens=[], optimizer_steps=0
    )
    assert metrics["retokenized_samples"] == 1
    assert metrics["prompt_mismatch_samples"] == 1
    assert trained(job.rendered[2][1]) == body["choices"][0]["token_ids"]
    assert job.rendered[2][1].sequences[0].token_ids[0] == metrics_prompt_first(with_ids)


def metrics_prompt_first(sample: TrajectorySample) -> int:
    return int(sample.trajectory["steps"][-1]["metrics"]["prompt_token_ids"][0])


def test_a_truncated_reply_trains_no_stop_token_and_can_be_masked_out(
    served: LocalEngine,
) -> None:
    """A reply cut at ``max_tokens`` never produced a stop token: neither its sampled ids nor
    its rendering from text train one; ``mask_truncated`` trains none of its tokens."""
    renderer: ChatRenderer = served._current()[2]
    stops = set(renderer.tokenizer.stop_token_ids)
    request = {**random_request(random.Random(3)), "max_tokens": 3, "temperature": 0}
    body = served.complete(asking_for_tokens(request))
    assert body["choices"][0]["finish_reason"] == "length"
    with_ids = recorded(request, body, 0)
    without = recorded(request, as_asked(body, request)[0], 1)
    for sample in (with_ids, without):
        rendered = renderer.render_sample(sample.trajectory)
        assert rendered.truncated_replies == 1
        assert not stops & set(trained(rendered))
    assert trained(renderer.render_sample(with_ids.trajectory)) == body["choices"][0]["token_ids"]
    # Rendered from text, the reply trains its text and not the template's closing stop token.
    assert len(trained(renderer.render_sample(without.trajectory))) >= 1
    data = JobData("demo:data:1", (attrs.evolve(with_ids, sample_id="a"),))
    kept = prepare_job(data, renderer, "cross_entropy", max_seq_len=None, component="local")
    masked = prepare_job(
        data, renderer, "cross_entropy", max_seq_len=None, component="local", mask_truncated=True
    )
    assert trained(kept.rendered[0][1]) == body["choices"][0]["token_ids"]
    assert trained(masked.rendered[0][1]) == []
    plan = StepPlan((), 0)
    assert (
        job_metrics(masked, plan, losses=[], trained_tokens=0, step_tokens=[], optimizer_steps=0)[
            "truncated_samples"
        ]
        == 1
    )
