"""A small TTTD runner for a toy discovery task, over Reef's HTTP API.

The task: find a short string with as many vowels as possible (:func:`vowel_score`, the share of
its characters that are vowels; 1 is the best a string can score). It is scripted, so it needs no
sandbox; a real runner scores attempts with the task's verifier in the same place.

Each step of the grid, the runner:

1. reads the artifact the scenario serves (``GET /reef/status``), waiting for the first one;
2. for each comparison group picks a state from its archive, as TTT-Discover's PUCT sampler
   does (:class:`reef_tttd.puct.PUCTArchive`: the empty string at first, then the attempts
   whose score and unexplored promise are highest, one per lineage) and asks the served
   policy for ``rollouts`` attempts to improve it
   (``POST /scenarios/<scenario>/v1/chat/completions``), scores each and reports it
   (``POST /reef/scenarios/<scenario>/reports``) with its cell in ``metadata.tttd`` and the id
   ``<run>-s<step>-g<group>-r<rollout>``;
3. waits until the stage reports the step ready and the job that trained it ended (the sample of
   its first rollout names that job, ``GET /reef/scenarios/<scenario>/samples/<id>``), and, when
   the job moved the weights (its ``optimizer_steps`` metric is not 0), until the scenario
   serves the new ones. A step that trained nothing (every group tied: every advantage 0)
   keeps the weights, so the next step samples from the same artifact. A step the stage
   abandoned or refused as an invariant failure, or whose job failed, stops the run
   (:class:`StepFailed`).

Run it against a ``reef serve`` whose scenario uses the ``tttd`` recipe with the same grid::

    python -m reef_tttd.toy_runner --url http://127.0.0.1:8000 --scenario discover \\
        --steps 8 --groups 2 --rollouts 8

It prints one JSON line per step: the step's mean and best score and the best score found so far.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from reef_tttd.puct import Child, PUCTArchive

VOWELS = frozenset("aeiouAEIOU")

_DEPLOYMENT = """\
storage:
  url: "{url}"
serving:
  engine: local
scenarios:
  {scenario}:
    recipe: {recipe}
    pipeline:
      record2sample:
        config: {{steps: {steps}, groups_per_step: {groups}, rollouts_per_group: {rollouts}}}
      sample2job:
        config: {sample2job}
    training:
      component: local
      options:
        state_dir: "{state_dir}"
        batch_size: {batch}
        learning_rate: {learning_rate}
        d_model: 32
        n_layers: 1
        n_heads: 2
        max_seq_len: 384
{model_path}"""


def toy_deployment(
    url: str,
    state_dir: str,
    *,
    steps: int,
    groups: int,
    rollouts: int,
    recipe: str = "tttd",
    scenario: str = "discover",
    estimator: str = "entropic",
    distillation_weight: float = 0.5,
    learning_rate: float = 0.05,
    model_path: str | None = None,
) -> str:
    """A deployment (YAML) whose scenario runs ``recipe`` (``tttd`` with ``estimator``, or
    ``sdpo`` with ``distillation_weight``; a sibling scoring 0.5 succeeds) on a small TinyGPT,
    trained by the local component and served by the local engine: what the toy runner runs
    against. ``model_path``: a folder the local component saved, of that TinyGPT's shape, to
    start from instead of fresh weights."""
    if recipe == "sdpo":
        recipe = f"{{class: sdpo, config: {{distillation_weight: {distillation_weight}}}}}"
        sample2job = "{success_threshold: 0.5}"
    else:
        sample2job = f"{{advantage: {{estimator: {estimator}}}}}"
    return _DEPLOYMENT.format(
        url=url,
        scenario=scenario,
        recipe=recipe,
        steps=steps,
        groups=groups,
        rollouts=rollouts,
        sample2job=sample2job,
        state_dir=state_dir,
        batch=groups * rollouts,
        learning_rate=learning_rate,
        model_path="" if model_path is None else f'        model_path: "{model_path}"\n',
    )


def vowel_score(text: str) -> float:
    """The share of ``text``'s characters that are vowels (0 for an empty text)."""
    return sum(c in VOWELS for c in text) / len(text) if text else 0.0


def vowel_feedback(text: str) -> str:
    """What the toy environment says of an attempt, for SDPO's teacher."""
    return f"{vowel_score(text):.0%} of your characters are vowels; write only vowels: aeiou."


class StepFailed(RuntimeError):
    """The stage will never train the step: the runner stops waiting for it."""


@attrs.frozen
class StepResult:
    """What one step found."""

    step: int
    scores: tuple[float, ...]
    best_so_far: float
    #: the optimizer steps of the step's job (0: it trained nothing; None: the component
    #: cannot tell)
    optimizer_steps: int | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "mean": sum(self.scores) / len(self.scores),
            "best": max(self.scores),
            "best_so_far": self.best_so_far,
            "optimizer_steps": self.optimizer_steps,
        }


class ToyRunner:
    """The discovery loop (see the module's documentation).

    :param url: the service's base URL.
    :param scenario: a scenario whose recipe is ``tttd``, with this grid.
    :param run: the prefix of every report id, so that two runs never share one.
    :param puct_c: the archive's exploration constant (:class:`PUCTArchive`).
    :param cell_key: the recipe's report metadata key of a cell: ``tttd`` or ``sdpo``.
    :param feedback: gives each report textual feedback on its attempt (SDPO's teacher reads it).
    :param timeout: the longest wait for one step to train, in seconds.
    """

    def __init__(
        self,
        url: str,
        scenario: str,
        *,
        groups: int,
        rollouts: int,
        run: str = "toy",
        max_tokens: int = 8,
        puct_c: float = 1.0,
        timeout: float = 120.0,
        token: str | None = None,
        cell_key: str = "tttd",
        feedback: bool = False,
        seed: int | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.seed = seed
        self.scenario = scenario
        self.groups = groups
        self.rollouts = rollouts
        self.run = run
        self.max_tokens = max_tokens

        self.timeout = timeout
        self.cell_key = cell_key
        self.feedback = feedback
        self.headers = {"content-type": "application/json"}
        if token is not None:
            self.headers["authorization"] = f"Bearer {token}"
        self.archive = PUCTArchive([("", vowel_score(""))], c=puct_c)

    def _request(self, method: str, path: str, body: Any = None) -> tuple[Any, Mapping[str, str]]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.url}{path}", data=data, method=method, headers=self.headers
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return json.loads(response.read()), dict(response.headers)
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            raise RuntimeError(f"{method} {path}: {exc.code} {detail}") from exc

    def trainer_status(self) -> Mapping[str, Any]:
        """The scenario's (first) trainer in ``GET /reef/status``."""
        document, _ = self._request("GET", "/reef/status")
        for scenario in document["scenarios"]:
            if scenario["scenario"] == self.scenario:
                trainer: Mapping[str, Any] = scenario["trainers"][0]
                return trainer
        raise LookupError(f"the service has no scenario {self.scenario!r}")

    def attempt(self, state: str, seed: int | None = None) -> tuple[str, str]:
        """One attempt from ``state``, sampled with ``seed`` when given: (the reply, its
        inference record's id)."""
        prompt = f"Improve: {state}" if state else "Write a string."
        body: dict[str, Any] = {
            "model": "policy",
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": self.max_tokens,
            "temperature": 1.0,
        }
        if seed is not None:
            body["seed"] = seed
        reply, headers = self._request(
            "POST", f"/scenarios/{self.scenario}/v1/chat/completions", body
        )
        record = {k.lower(): v for k, v in headers.items()}["x-reef-record-id"]
        return reply["choices"][0]["message"]["content"] or "", record

    def report_id(self, step: int, group: int, rollout: int) -> str:
        """The id of a rollout's report."""
        return f"{self.run}-s{step}-g{group}-r{rollout}"

    def score(self, reply: str) -> float:
        """The toy verifier's score of ``reply``."""
        return vowel_score(reply)

    def report(self, step: int, group: int, rollout: int, record: str, reply: str) -> float:
        """Score one rollout and report it with its cell (and feedback); returns the score."""
        score = self.score(reply)
        body: dict[str, Any] = {
            "id": self.report_id(step, group, rollout),
            "references": [record],
            "score": score,
            "metadata": {self.cell_key: {"step": step, "group": group, "rollout": rollout}},
        }
        if self.feedback:
            body["feedback"] = vowel_feedback(reply)
        self._request("POST", f"/reef/scenarios/{self.scenario}/reports", body)
        return score

    def step(self, step: int) -> StepResult:
        """Run, report and wait for one step of the grid."""
        served = self.served_artifact()
        states = self.archive.sample(self.groups)
        children: list[Child] = []
        scores: list[float] = []
        for group in range(self.groups):
            state = states[group % len(states)]  # fewer separate lineages than groups
            for rollout in range(self.rollouts):
                seed = None
                if self.seed is not None:  # each rollout its own seed: a run repeats exactly
                    seed = ((self.seed * 1000 + step) * 100 + group) * 1000 + rollout
                reply, record = self.attempt(state.text, seed)
                score = self.report(step, group, rollout, record, reply)
                scores.append(score)
                children.append(Child(state, reply, score))
        self.archive.update(children)
        moved = self.wait_trained(step, served)
        best = max(s.value for s in self.archive.states)
        return StepResult(step, tuple(scores), best, moved)

    def served_artifact(self) -> str:
        """The artifact the scenario serves, once it serves one (the first weights are published
        when the trainer starts).

        :raises TimeoutError: after :attr:`timeout` seconds without one.
        """
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            served = self.trainer_status().get("served_artifact")
            if served is not None:
                return str(served)
            time.sleep(0.2)
        raise TimeoutError(f"scenario {self.scenario!r} served no weights within {self.timeout}s")

    def wait_trained(self, step: int, served: object) -> int | None:
        """Wait until the stage readied ``step``, its job ended, and, when the job moved the
        weights, the scenario serves new ones; returns the job's ``optimizer_steps``.

        :raises StepFailed: the stage abandoned the step or refused it (mixed artifacts), or
            the step's job failed.
        :raises TimeoutError: after :attr:`timeout` seconds.
        """
        deadline = time.monotonic() + self.timeout
        ended: Mapping[str, Any] | None = None
        while time.monotonic() < deadline:
            trainer = self.trainer_status()
            grid = trainer["pipeline"].get(self.cell_key) or {}
            failures = [f for f in grid.get("invariant_failures", ()) if f["step"] == step]
            if failures or step in grid.get("abandoned_steps", ()):
                raise StepFailed(f"step {step} will not train: {failures or 'abandoned'}")
            if ended is None and step in grid.get("ready_steps", ()):
                ended = self.ended_job(self.report_id(step, 0, 0))
            if ended is not None:
                moved = ended["metrics"].get("optimizer_steps")
                if moved == 0 or trainer.get("served_artifact") != served:
                    return None if moved is None else int(moved)
            time.sleep(0.2)
        raise TimeoutError(f"step {step} did not train within {self.timeout}s")

    def ended_job(self, report_id: str) -> Mapping[str, Any] | None:
        """The finished job that trained the sample of ``report_id`` (``GET
        /reef/scenarios/<scenario>/jobs``), or ``None`` while it has none.

        :raises StepFailed: the job failed.
        """
        base = f"/reef/scenarios/{self.scenario}"
        page, _ = self._request("GET", f"{base}/samples?order=desc&limit=200")
        found = [s["id"] for s in page["samples"] if s.get("report_id") == report_id]
        if not found:
            return None
        detail, _ = self._request("GET", f"{base}/samples/{urllib.parse.quote(found[0])}")
        for entry in detail["jobs"]:
            if entry["event"] == "failed":
                raise StepFailed(f"the job {entry['job_id']} that trained {report_id} failed")
            if entry["event"] == "finished":
                jobs, _ = self._request("GET", f"{base}/jobs?trainer={entry['trainer']}")
                for job in jobs["jobs"]:
                    if job["job_id"] == entry["job_id"]:
                        return dict(job, metrics=job["metrics"] or {})
        return None

    def job_metrics(self) -> list[Mapping[str, Any]]:
        """The metrics of the scenario's jobs that ended, oldest first (``GET
        /reef/scenarios/<scenario>/jobs``)."""
        page, _ = self._request("GET", f"/reef/scenarios/{self.scenario}/jobs")
        return [job["metrics"] or {} for job in page["jobs"] if job["event"] == "finished"]

    def run_steps(self, steps: int) -> list[StepResult]:
        """Every step of the run, in order."""
        return [self.step(step) for step in range(steps)]


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (see the module's documentation)."""
    parser = argparse.ArgumentParser(description="A TTTD runner for the toy vowel task")
    parser.add_argument("--url", required=True)
    parser.add_argument("--scenario", required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--groups", type=int, required=True)
    parser.add_argument("--rollouts", type=int, required=True)
    parser.add_argument("--run", default="toy")
    parser.add_argument("--recipe", choices=("tttd", "sdpo"), default="tttd")
    parser.add_argument("--token")
    parser.add_argument("--seed", type=int, help="sample every attempt with a seed from this one")
    args = parser.parse_args(argv)
    runner = ToyRunner(
        args.url,
        args.scenario,
        groups=args.groups,
        rollouts=args.rollouts,
        run=args.run,
        token=args.token,
        cell_key=args.recipe,
        feedback=args.recipe == "sdpo",
        seed=args.seed,
    )
    try:
        for step in range(args.steps):
            print(json.dumps(runner.step(step).as_json()), flush=True)
    except StepFailed as exc:
        print(f"stopped: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
