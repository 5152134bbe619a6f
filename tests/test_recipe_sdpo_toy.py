"""SDPO end to end on the toy discovery task, in one process: the local engine samples each
step's rollouts from the local component's published weights, the runner's reports (score and
feedback) go through the SDPO stages on a real sample store, the component trains each step's
job with the recipe's job parameters and publishes, and the next step samples the new weights.
The same loop then runs over ``reef serve``: the toy runner asks the served policy and reports
each attempt over HTTP, and the served student's score rises.

The model first learns (a few supervised jobs) what the feedback means: given the prompt alone
it writes consonants, given the prompt with the feedback it writes vowels; so the teacher knows
something the student does not. What SDPO minimises is then measured exactly: the reverse KL
from the student (the prompt alone) to its feedback-conditioned teacher (the same weights, the
prompt with the attempt's feedback), summed over the whole vocabulary at every reply position of
fresh student samples. It falls, and the student's score rises.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import random  # noqa: E402

from reef import (  # noqa: E402
    InferenceRecord,
    JobData,
    Report,
    TrajectorySample,
    compose_teacher_request,
)
from reef.components.local.component import LocalComponent  # noqa: E402
from reef.engines.local import LocalEngine  # noqa: E402
from reef.testing import Database, pipeline_context, training_pipeline  # noqa: E402
from reef.testing.samples import exchange  # noqa: E402
from reef_tttd.processor import SDPOJobData, SDPOSamples, teacher_context  # noqa: E402
from reef_tttd.recipe import SDPORecipe, SDPORecipeSettings  # noqa: E402
from reef_tttd.testing import serve_toy  # noqa: E402
from reef_tttd.toy_runner import (  # noqa: E402
    ToyRunner,
    vowel_feedback,
    vowel_score,
)

STEPS, GROUPS, ROLLOUTS, EVAL = 6, 2, 8, 24
PROMPT = "Write a string."
CONSONANTS, VOWELS = "bcdfghjklmnpqrstvwxz", "aeiou"


def request(seed: int) -> dict[str, Any]:
    return {
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": 8,
        "temperature": 1.0,
        "seed": seed,
    }


def teacher_prompt(reply: str) -> str:
    """The user message the teacher sees for an attempt ``reply``."""
    context = teacher_context(vowel_feedback(reply), None)
    composed = compose_teacher_request(request(0), context=context)
    return str(composed["messages"][-1]["content"])


def warm_up(local: LocalComponent) -> None:
    """Supervised jobs: consonants for the prompt alone, vowels once the feedback is given."""
    rng = random.Random(0)
    samples = []
    for n in range(32):
        consonants = "".join(rng.choice(CONSONANTS) for _ in range(8))
        vowels = "".join(rng.choice(VOWELS) for _ in range(8))
        samples.append(TrajectorySample(exchange(PROMPT, consonants), sample_id=f"w{n}s"))
        samples.append(
            TrajectorySample(exchange(teacher_prompt(consonants), vowels), sample_id=f"w{n}t")
        )
    for epoch in range(3):
        data = JobData(f"warm-up-{epoch}", tuple(samples))
        outcome = local.wait(local.submit(data, {"objective": "cross_entropy"}), timeout=300)
        assert outcome.event == "finished", outcome.error


def reverse_kl(local: LocalComponent, engine: LocalEngine, seeds: range) -> float:
    """The mean over fresh student samples and their reply positions of
    KL(student(. | prompt, reply so far) || teacher(. | prompt + feedback, reply so far))."""
    model, renderer = local.model, local.renderer
    total, positions = 0.0, 0
    with torch.no_grad():
        for seed in seeds:
            student = request(seed)
            reply = engine.complete(student)["choices"][0]["message"]["content"] or ""
            tokens = model.tokenizer.encode(reply)
            if not tokens:
                continue
            teacher = {**student, "messages": [{"role": "user", "content": teacher_prompt(reply)}]}
            rows = []
            for prompt in (renderer.prompt_ids(student), renderer.prompt_ids(teacher)):
                ids = torch.tensor([prompt + tokens], device=local.device)
                logits = model.logits(ids, None)[0, len(prompt) - 1 : -1].float()
                rows.append(torch.log_softmax(logits, dim=-1))
            log_s, log_t = rows
            total += float((log_s.exp() * (log_s - log_t)).sum())
            positions += len(tokens)
    return total / positions


OPTIONS = {"d_model": 32, "n_layers": 1, "n_heads": 2, "max_seq_len": 384}


def test_sdpo_lowers_the_reverse_kl_to_its_feedback_conditioned_teacher(
    tmp_path: Path, storage_database: Database
) -> None:
    options = OPTIONS
    local = LocalComponent.from_config(
        {"state_dir": str(tmp_path), **options, "batch_size": 16, "learning_rate": 0.05}
    )
    engine = LocalEngine(local.artifacts)
    context = pipeline_context("s", "local", has_runtime_loader=False)
    grid = {"steps": STEPS, "groups_per_step": GROUPS, "rollouts_per_group": ROLLOUTS}
    r2s = SDPOSamples.from_config(grid, context=context, environ={})
    s2j = SDPOJobData.from_config(
        {"success_threshold": 0.5}, context=context, record2sample=r2s, environ={}
    )
    sdpo = training_pipeline(r2s, s2j, storage_database)
    settings = SDPORecipeSettings(distillation_weight=1.0)
    parameters = {**SDPORecipe.job_parameters_of(settings), "learning_rate": 0.01}
    try:
        warm_up(local)
        local.publish()
        before = reverse_kl(local, engine, range(1000, 1000 + EVAL))
        teacher_kls, scores = [], []
        for step in range(STEPS):
            for group in range(GROUPS):
                for rollout in range(ROLLOUTS):
                    name = f"s{step}g{group}r{rollout}"
                    body = engine.complete(request(step * 1000 + group * 100 + rollout))
                    reply = body["choices"][0]["message"]["content"] or ""
                    scores.append(vowel_score(reply))
                    sent = request(0)
                    del sent["seed"]
                    call = InferenceRecord(f"c-{name}", "s", sent, body, artifact_id="a")
                    sdpo.push(call)
                    cell = {"step": step, "group": group, "rollout": rollout}
                    sdpo.push(
                        Report(
                            f"r-{name}",
                            "s",
                            (call.id,),
                            score=vowel_score(reply),
                            feedback=vowel_feedback(reply),
                            metadata={"sdpo": cell},
                        )
                    )
            data = sdpo.build_job_data(s2j.job_samples)
            assert data is not None
            outcome = local.wait(local.submit(data, parameters), timeout=300)
            assert outcome.event == "finished", outcome.error
            teacher_kls.append(outcome.metrics["teacher_kl"])
            sdpo.acknowledge(data.id)
            local.publish()
        after = reverse_kl(local, engine, range(1000, 1000 + EVAL))
    finally:
        local.close()
    assert after < before, (before, after, teacher_kls)
    first, last = scores[: GROUPS * ROLLOUTS], scores[-GROUPS * ROLLOUTS :]
    assert sum(last) > sum(first), (first, last)


class _PromptRunner(ToyRunner):
    """The toy runner asking every attempt from the task's prompt (no archive state), the
    prompt the warm-up taught the feedback's meaning for."""

    def attempt(self, state: str, seed: int | None = None) -> tuple[str, str]:
        del state
        return super().attempt("", seed)


def test_sdpo_over_reef_serve_moves_the_served_policy_toward_the_better_score(
    tmp_path: Path,
) -> None:
    """The same loop through ``reef serve`` (the toy runner's chat calls and reports over HTTP,
    the local engine serving each step's weights): pure self-distillation
    (``distillation_weight: 1``) from the warmed-up weights raises the served student's score."""
    pytest.importorskip("starlette")
    local = LocalComponent.from_config(
        {"state_dir": str(tmp_path / "warm-up"), **OPTIONS, "batch_size": 16, "learning_rate": 0.05}
    )
    try:
        warm_up(local)
        start = local.publish().path
    finally:
        local.close()
    with serve_toy(
        tmp_path,
        steps=STEPS,
        groups=GROUPS,
        rollouts=ROLLOUTS,
        recipe="sdpo",
        distillation_weight=1.0,
        learning_rate=0.01,
        model_path=str(start),
    ) as serve:
        runner = _PromptRunner(
            serve.base_url,
            "discover",
            groups=GROUPS,
            rollouts=ROLLOUTS,
            cell_key="sdpo",
            feedback=True,
        )
        results = runner.run_steps(STEPS)
        kls = [m["teacher_kl"] for m in runner.job_metrics()]
        assert serve.terminate() == 0
    means = [r.as_json()["mean"] for r in results]
    assert means[-1] > means[0], (means, kls)
    # Each job trained on the teacher: its teacher_kl, the reverse KL of the sampled replies to
    # the feedback-conditioned teacher, is reported. It is no trend to assert over six steps of
    # fresh samples (one CI run: 2.63, 2.59, 4.10, 2.49, 2.39, 3.50, rising with each burst of
    # exploration); the KL on fixed replies falling is asserted in-process above.
    assert len(kls) == STEPS, (means, kls)
    assert all(math.isfinite(kl) and kl > 0 for kl in kls), (means, kls)
