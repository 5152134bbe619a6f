"""Training log probabilities at the temperature each reply was sampled at: the request's
``temperature`` kept in the trajectory, carried per token by the rendering, and the logits
divided by it (as slime, TRL and verl divide by the rollout temperature)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from reef.components.local.byte_tokenizer import ByteTokenizer  # noqa: E402
from reef.components.local.objectives import batch_logprobs, token_batch  # noqa: E402
from reef.components.local.tiny_gpt import TinyGPT, TinyGPTConfig, TinyGPTModel  # noqa: E402
from reef.core.atif_build import trajectory_from_records  # noqa: E402
from reef.core.chat_rendering import ChatRenderer, RenderError  # noqa: E402
from reef.core.job_data import JobData, TrajectorySample  # noqa: E402
from reef.core.records import InferenceRecord  # noqa: E402
from reef.testing.components import tiny_local_component  # noqa: E402
from reef.testing.samples import exchange  # noqa: E402


def _sampled_at(temperature: float | None, reply: str = "blue red") -> dict[str, Any]:
    trajectory = exchange("colour?", reply)
    trajectory["steps"][1]["extra"] = {"reef": {"temperature": temperature}}
    return trajectory


def test_the_trajectory_keeps_the_requests_temperature() -> None:
    record = InferenceRecord(
        id="r1",
        scenario="demo",
        request={"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0.6},
        response={"choices": [{"index": 0, "message": {"role": "assistant", "content": "yo"}}]},
    )
    trajectory = trajectory_from_records([record], trajectory_id="t1")
    assert trajectory.steps[-1].extra["reef"]["temperature"] == 0.6  # type: ignore[index]


def test_the_rendering_gives_each_reply_token_its_temperature() -> None:
    renderer = ChatRenderer(ByteTokenizer())
    (sequence,) = renderer.render_sample(_sampled_at(0.6)).sequences
    assert sequence.temperatures is not None
    trained = {t for t, m in zip(sequence.temperatures, sequence.loss_mask, strict=True) if m}
    assert trained == {0.6}
    # None, greedy (0) and 1 are all the unscaled logits.
    for plain in (None, 0, 1.0):
        (sequence,) = renderer.render_sample(_sampled_at(plain)).sequences
        assert sequence.temperatures is None
    with pytest.raises(RenderError, match=r"steps\[1\].extra.reef.temperature"):
        renderer.render_sample(_sampled_at(-1.0))


def test_log_probabilities_divide_each_rows_logits_by_its_temperature() -> None:
    torch.manual_seed(0)
    tokenizer = ByteTokenizer()
    config = TinyGPTConfig(vocab_size=tokenizer.vocab_size, max_seq_len=32, d_model=16,
                           n_layers=1, n_heads=2)  # fmt: skip
    model = TinyGPTModel(TinyGPT(config), tokenizer)
    sequences = [[5, 9, 11, 40, 41], [7, 8, 60]]
    temperatures = [[1.0, 1.0, 0.6, 0.6, 0.6], None]
    batch = token_batch(sequences, None, torch.device("cpu"), temperatures)
    with torch.no_grad():
        values = batch_logprobs(model, batch)
        for row, (ids, scale) in enumerate(zip(sequences, temperatures, strict=True)):
            # Independently: log_softmax(logits / T) of each next token, T that token's.
            logits = model.logits(torch.tensor([ids]), None)[0]
            for position in range(len(ids) - 1):
                t = 1.0 if scale is None else scale[position + 1]
                expected = torch.log_softmax(logits[position] / t, dim=-1)[ids[position + 1]]
                assert float(values[row, position]) == pytest.approx(float(expected), abs=1e-6)


def _teacher_kl(local: Any, job_id: str, trajectory: dict[str, Any], teacher: Any) -> float:
    parameters = {"objective": "importance_sampling", "distillation": {"teacher": teacher}}
    data = JobData(job_id, (TrajectorySample(trajectory, sample_id=job_id),))
    outcome = local.wait(local.submit(data, parameters), timeout=120)
    assert outcome.event == "finished", outcome.error
    return float(outcome.metrics["teacher_kl"])


def test_the_student_scores_its_tokens_at_their_sampling_temperature(tmp_path: Path) -> None:
    local = tiny_local_component(tmp_path / "student", learning_rate=1e-9)
    try:
        # A teacher with the student's start weights, scoring at temperature 1: the student's
        # own log probabilities differ from it exactly when they are at another temperature.
        teacher = tmp_path / "teacher"
        shutil.copytree(tmp_path / "student" / "current", teacher)
        at_one = _teacher_kl(local, "one", _sampled_at(1.0), {"model_path": str(teacher)})
        at_cold = _teacher_kl(local, "cold", _sampled_at(0.5), {"model_path": str(teacher)})
        assert at_one == pytest.approx(0.0, abs=1e-4)
        assert abs(at_cold) > 1e-2
        # The student as its own teacher scores at the reply's temperature: no context, no KL.
        assert _teacher_kl(local, "self", _sampled_at(0.5), {}) == 0.0
    finally:
        local.close()


def test_the_local_component_trains_every_sample_at_its_own_temperature(tmp_path: Path) -> None:
    local = tiny_local_component(tmp_path)
    samples = tuple(
        TrajectorySample(
            exchange("colour?", "blue red", temperature=t),
            reward=float(i),
            sample_id=f"s{i}",
            group_id="g",
        )
        for i, t in enumerate((0.6, 1.3))
    )
    outcome = local.wait(local.submit(JobData("d:0", samples), {"objective": "ppo"}), timeout=120)
    assert outcome.event == "finished", outcome.error
    assert outcome.metrics["untempered_samples"] == 0
