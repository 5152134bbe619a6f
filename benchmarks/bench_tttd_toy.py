"""TTTD and SDPO on the toy discovery task: the curves over the steps.

Each arm runs ``reef serve`` (the local engine and the local component, a TinyGPT) with the
``tttd`` recipe and drives it with the shipped toy runner (``reef_tttd.toy_runner``: find a
string with as many vowels as possible). The arms differ only in the advantage estimator:
``entropic`` (TTT-Discover's, beta chosen per group by the ln 2 rule) and ``group_mean`` (the
GRPO baseline, measured in the same run). Printed per step: the step's mean and best score and
the best found so far; then each arm's best found and the entropic / group_mean ratio of the
last step's mean score. A third arm runs the ``sdpo`` recipe (distillation weight 0.5, each
report with feedback on its vowels) and prints, beside the scores, each job's ``teacher_kl``: the
sampled reverse KL from the student to its feedback-conditioned teacher (the exact one is
measured by ``tests/test_recipe_sdpo_toy.py``).

    .venv/bin/python benchmarks/bench_tttd_toy.py [--steps 10] [--groups 2] [--rollouts 8]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from reef_tttd.testing import serve_toy
from reef_tttd.toy_runner import StepResult, ToyRunner


def run_arm(
    estimator: str, steps: int, groups: int, rollouts: int
) -> tuple[list[StepResult], list[float | None]]:
    """One run of ``steps`` steps with ``estimator`` (``sdpo``: the sdpo recipe), on a fresh
    store and model: each step's result and each job's ``teacher_kl``."""
    recipe = "sdpo" if estimator == "sdpo" else "tttd"
    with (
        tempfile.TemporaryDirectory() as folder,
        serve_toy(
            Path(folder),
            steps=steps,
            groups=groups,
            rollouts=rollouts,
            recipe=recipe,
            estimator=estimator if recipe == "tttd" else "entropic",
        ) as serve,
    ):
        runner = ToyRunner(
            serve.base_url,
            "discover",
            groups=groups,
            rollouts=rollouts,
            cell_key=recipe,
            feedback=recipe == "sdpo",
        )
        results = runner.run_steps(steps)
        return results, [metrics.get("teacher_kl") for metrics in runner.job_metrics()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--groups", type=int, default=2)
    parser.add_argument("--rollouts", type=int, default=8)
    args = parser.parse_args()
    finals: dict[str, StepResult] = {}
    for estimator in ("entropic", "group_mean", "sdpo"):
        results, kls = run_arm(estimator, args.steps, args.groups, args.rollouts)
        print(f"{estimator}: step  mean   best   best found  teacher_kl")
        for result, kl in zip(results, kls, strict=False):
            line = result.as_json()
            shown = "-" if kl is None else f"{kl:.4f}"
            print(
                f"{estimator}: {line['step']:4d}  {line['mean']:.3f}  {line['best']:.3f}"
                f"  {line['best_so_far']:.3f}       {shown}"
            )
        finals[estimator] = results[-1]
    entropic, baseline = finals["entropic"], finals["group_mean"]
    mean = {name: sum(r.scores) / len(r.scores) for name, r in finals.items()}
    print(f"sdpo: last step's mean score {mean['sdpo']:.3f}")
    ratio = mean["entropic"] / mean["group_mean"] if mean["group_mean"] else float("inf")
    print(
        f"best found: entropic {entropic.best_so_far:.3f}, group_mean {baseline.best_so_far:.3f};"
        f" last step's mean score, entropic / group_mean: {ratio:.2f}"
    )


if __name__ == "__main__":
    main()
