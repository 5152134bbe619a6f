"""The full-logit distillation (``distillation.full_logit``): the divergence over the student's
top-k tokens with a tail bucket and the Jensen-Shannon mix of lasgroup/SDPO's
``compute_self_distillation_loss`` (``verl/trainer/ppo/core_algos.py``), checked against an
implementation written here from the equations, and trained by the local component."""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

torch = pytest.importorskip("torch")

from reef.components.job_parameters import JobParameters  # noqa: E402
from reef.components.job_samples import prepare_job  # noqa: E402
from reef.components.local.artifacts import load_model_folder, save_model_folder  # noqa: E402
from reef.components.local.byte_tokenizer import ByteTokenizer  # noqa: E402
from reef.components.local.component import LocalComponent  # noqa: E402
from reef.components.local.objectives import distillation_loss, topk_divergence  # noqa: E402
from reef.components.local.tiny_gpt import TinyGPT, TinyGPTConfig, TinyGPTModel  # noqa: E402
from reef.core.job_data import JobData, TrajectorySample  # noqa: E402
from reef.testing.components import tiny_local_component  # noqa: E402
from reef.testing.samples import exchange  # noqa: E402


def reference_divergence(
    student: list[float], teacher: list[float], *, add_tail: bool, alpha: float
) -> float:
    """One position's divergence, from the equations: the two distributions over the k tokens
    (with the rest as one more outcome, or renormalised), then KL(T || S) at alpha 0, KL(S || T)
    at 1, else (1 - alpha) KL(S || M) + alpha KL(T || M) with M the alpha-mix."""

    def support(log_p: list[float]) -> list[float]:
        p = [math.exp(v) for v in log_p]
        if add_tail:
            return [*p, max(1.0 - sum(p), 1.0 - math.exp(-1e-7))]
        return [v / sum(p) for v in p]

    s, t = support(student), support(teacher)

    def kl(p: list[float], q: list[float]) -> float:
        return sum(a * (math.log(a) - math.log(b)) for a, b in zip(p, q, strict=True))

    if alpha == 0.0:
        return kl(t, s)
    if alpha == 1.0:
        return kl(s, t)
    m = [(1 - alpha) * a + alpha * b for a, b in zip(s, t, strict=True)]
    return (1 - alpha) * kl(s, m) + alpha * kl(t, m)


def log_distribution(logits: list[float]) -> list[float]:
    top = max(logits)
    total = math.log(sum(math.exp(v - top) for v in logits)) + top
    return [v - total for v in logits]


def top_indices(values: list[float], k: int) -> list[int]:
    return sorted(range(len(values)), key=lambda i: -values[i])[:k]


@settings(max_examples=200, deadline=None)
@given(
    st.integers(2, 12).flatmap(
        lambda n: st.tuples(
            st.lists(st.floats(-8, 8), min_size=n, max_size=n),
            st.lists(st.floats(-8, 8), min_size=n, max_size=n),
            st.integers(1, n),
        )
    ),
    st.booleans(),
    st.sampled_from([0.0, 1.0, 0.5]) | st.floats(0.01, 0.99),
)
def test_the_divergence_is_the_authors_generalised_jensen_shannon(
    case: tuple[list[float], list[float], int], add_tail: bool, alpha: float
) -> None:
    student_logits, teacher_logits, k = case
    student, teacher = log_distribution(student_logits), log_distribution(teacher_logits)
    top = top_indices(student, k)
    got = topk_divergence(
        torch.tensor([[student[i] for i in top]], dtype=torch.float64),
        torch.tensor([[teacher[i] for i in top]], dtype=torch.float64),
        add_tail=add_tail,
        alpha=alpha,
    )
    expected = reference_divergence(
        [student[i] for i in top], [teacher[i] for i in top], add_tail=add_tail, alpha=alpha
    )
    assert float(got[0]) == pytest.approx(expected, abs=1e-6)


def test_the_divergence_is_exactly_zero_where_the_teacher_is_the_student() -> None:
    values = torch.randn(5, 7).log_softmax(-1).topk(4, dim=-1).values
    for alpha in (0.0, 0.3, 0.5, 1.0):
        for add_tail in (True, False):
            divergence = topk_divergence(values, values.clone(), add_tail=add_tail, alpha=alpha)
            assert torch.equal(divergence, torch.zeros(5))


def test_the_truncated_ratio_weighs_each_tokens_divergence() -> None:
    divergence = torch.tensor([[1.0, 2.0, 3.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    logprobs = torch.log(torch.tensor([[3.0, 0.5, 9.0]]))  # ratios 3, 0.5 (and 9, untrained)
    start = torch.zeros(1, 3)
    weights = torch.tensor([0.5])
    plain = distillation_loss(
        divergence, mask, row_weights=weights, logprobs=logprobs, start_logprobs=start, is_clip=None
    )
    clipped = distillation_loss(
        divergence, mask, row_weights=weights, logprobs=logprobs, start_logprobs=start, is_clip=2.0
    )
    assert float(plain) == pytest.approx(0.5 * (1.0 + 2.0))
    assert float(clipped) == pytest.approx(0.5 * (2.0 * 1.0 + 0.5 * 2.0))


# -- trained by the local component --------------------------------------------------------------


def tiny_teacher(folder: Path) -> Path:
    torch.manual_seed(7)
    tokenizer = ByteTokenizer()
    config = TinyGPTConfig(
        vocab_size=tokenizer.vocab_size, max_seq_len=96, d_model=32, n_layers=1, n_heads=2
    )
    save_model_folder(folder, TinyGPTModel(TinyGPT(config), tokenizer))
    return folder


def full_logit_parameters(teacher: Path, **full: Any) -> dict[str, Any]:
    return {
        "objective": "importance_sampling",
        "distillation": {"teacher": {"model_path": str(teacher)}, "full_logit": full},
    }


PAIRS = [("2+3?", "5"), ("name a colour", "blue red"), ("hi", "hello"), ("x", "y z")]
SAMPLES = [TrajectorySample(exchange(q, reply), sample_id=q) for q, reply in PAIRS]


@pytest.mark.parametrize(("topk", "add_tail", "alpha"), [(100, True, 0.5), (5, False, 1.0)])
def test_the_first_step_trains_the_divergence_computed_from_the_equations(
    tmp_path: Path, topk: int, add_tail: bool, alpha: float
) -> None:
    """One step of four samples (the batch size, so the loss is the token mean): its loss and
    the job's ``teacher_divergence`` are the mean over the trained tokens of the divergence
    between the student's start distribution over its top-k and the teacher's, each read from
    a plain forward pass of the two models here."""
    teacher_folder = tiny_teacher(tmp_path / "teacher")
    local = tiny_local_component(tmp_path / "student")
    parameters = full_logit_parameters(teacher_folder, topk=topk, add_tail=add_tail, alpha=alpha)
    job = JobParameters.parse(parameters, plugin_class=LocalComponent)
    data = JobData("d:0", tuple(SAMPLES))
    prepared = prepare_job(
        data,
        local.renderer,
        job.objective,
        max_seq_len=local.model.max_seq_len,
        component="local",
        distillation=job.distillation,
    )
    teacher = load_model_folder(teacher_folder, trainable=False)
    expected: list[float] = []
    sampled_kl: list[float] = []
    with torch.no_grad():
        for index, rendered in prepared.rendered:
            (student_sequence,) = rendered.sequences
            (teacher_sequence,) = prepared.teachers[index].sequences
            student = local.model.logits(torch.tensor([student_sequence.token_ids]), None)[0]
            taught = teacher.logits(torch.tensor([teacher_sequence.token_ids]), None)[0]
            student_marks = [j for j, m in enumerate(student_sequence.loss_mask) if m]
            teacher_marks = [j for j, m in enumerate(teacher_sequence.loss_mask) if m]
            assert len(student_marks) == len(teacher_marks)
            for j, i in zip(student_marks, teacher_marks, strict=True):
                s = log_distribution(student[j - 1].tolist())
                t = log_distribution(taught[i - 1].tolist())
                top = top_indices(s, topk)
                expected.append(
                    reference_divergence(
                        [s[n] for n in top], [t[n] for n in top], add_tail=add_tail, alpha=alpha
                    )
                )
                token = student_sequence.token_ids[j]
                sampled_kl.append(float(s[token] - t[token]))
    outcome = local.wait(local.submit(data, parameters), timeout=120)
    assert outcome.event == "finished", outcome.error
    assert outcome.metrics["steps"] == 1
    mean = sum(expected) / len(expected)
    assert outcome.metrics["teacher_divergence"] == pytest.approx(mean, rel=1e-4, abs=1e-6)
    assert outcome.metrics["step_losses"][0] == pytest.approx(mean, rel=1e-4, abs=1e-6)
    assert outcome.metrics["teacher_kl"] == pytest.approx(
        sum(sampled_kl) / len(sampled_kl), rel=1e-4, abs=1e-6
    )
    assert outcome.metrics["optimizer_steps"] == 1


def test_full_logit_distillation_moves_the_student_toward_the_teacher(tmp_path: Path) -> None:
    teacher_folder = tiny_teacher(tmp_path / "teacher")
    local = tiny_local_component(tmp_path / "student")
    parameters = full_logit_parameters(teacher_folder)
    divergences = []
    for number in range(6):
        data = JobData(f"d:{number}", tuple(SAMPLES))
        outcome = local.wait(local.submit(data, parameters), timeout=120)
        assert outcome.event == "finished", outcome.error
        divergences.append(outcome.metrics["teacher_divergence"])
    assert divergences[-1] < 0.8 * divergences[0]
    assert all(b < a for a, b in itertools.pairwise(divergences))


def test_a_student_its_own_teacher_without_context_takes_no_step(tmp_path: Path) -> None:
    """The self teacher in the student's own prompt: its divergence is exactly 0 at every
    token, and with no reward advantage the step has no signal and moves no weight."""
    local = tiny_local_component(tmp_path)
    parameters = {"objective": "importance_sampling", "distillation": {"full_logit": {}}}
    outcome = local.wait(local.submit(JobData("d:0", tuple(SAMPLES[:1])), parameters), timeout=120)
    assert outcome.event == "finished", outcome.error
    assert outcome.metrics["teacher_divergence"] == 0.0
    assert outcome.metrics["optimizer_steps"] == 0
    hinted = {"messages": [{"role": "user", "content": "2+3? It is 5."}]}
    taught = TrajectorySample(exchange("2+3?", "5", teacher=hinted), sample_id="t")
    outcome = local.wait(local.submit(JobData("d:1", (taught,)), parameters), timeout=120)
    assert outcome.event == "finished", outcome.error
    assert outcome.metrics["teacher_divergence"] > 0.0
    assert outcome.metrics["optimizer_steps"] == 1
