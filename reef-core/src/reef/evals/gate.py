"""Each new artifact evaluated, and the eval gate between the trainer and the engine.

:class:`GatedComponent` wraps a scenario's served training component. Each time the trainer
asks it to publish (after every job, and once when a tenure starts) it publishes the component's
weights, scores the artifact on every eval set of the scenario through the engine
(:mod:`reef.evals.targets`) and keeps the results (:class:`reef.storage.ArtifactEvaluations`).
With a gate (``serve_if``) it then decides, once and durably, whether the engine serves the
artifact (:func:`reef.core.evals.gate_verdict`), and returns the artifact the engine serves: the
new one, or the one served before. The trainer takes what it returns as served, so staleness
counts only artifacts that were served (P-STALE-5). After a refusal, with ``resume_from:
served``, the component goes back to the served weights (its ``restore``).

The engine follows the gate through :class:`GatedArtifacts`, the artifact the gate let serve
last, read from the store: every process serves the same one, before and after a restart.

An evaluation the engine could not finish (an item got no answer) keeps no result and takes no
decision: the served artifact stays, the error is written to the scenario's settings under
``eval_error:<trainer>`` (the status shows it), and the next publication tries again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Final, Protocol

from reef.components.interface import Artifact, TrainingComponent, WrappedComponent
from reef.core.evals import ServeIfSection, gate_verdict
from reef.core.records import JSON
from reef.evals.sets import EvalIncomplete, EvalSet
from reef.evals.targets import EvalTarget
from reef.storage import ArtifactEvaluations, ScenarioSettings

__all__ = ["EVAL_ERROR_PREFIX", "ArtifactLookup", "GatedArtifacts", "GatedComponent"]

logger = logging.getLogger(__name__)

#: The scenario setting prefix under which a trainer's last unfinished evaluation is written.
EVAL_ERROR_PREFIX: Final = "eval_error:"


class ArtifactLookup(Protocol):
    """Where an artifact is found by its id
    (:class:`~reef.components.local.artifacts.ArtifactStore`)."""

    def get(self, artifact_id: str) -> Artifact:
        """The artifact ``artifact_id``. :raises KeyError: when there is none."""
        ...


class GatedArtifacts:
    """The artifact source an engine serves from under a gate: of ``trainer``'s artifacts, the
    one the gate let serve last (``None`` before the first decision)."""

    def __init__(
        self, artifacts: ArtifactLookup, evaluations: ArtifactEvaluations, trainer: str
    ) -> None:
        self._artifacts = artifacts
        self._evaluations = evaluations
        self._trainer = trainer

    def latest(self) -> Artifact | None:
        served = self._evaluations.served_artifact(self._trainer)
        if served is None:
            return None
        try:
            return self._artifacts.get(served)
        except KeyError:
            return None


class GatedComponent(WrappedComponent):
    """A training component whose publications are evaluated and, with a gate, served only
    when the gate passes them (see the module's documentation). Everything else is the
    component's."""

    def __init__(
        self,
        component: TrainingComponent,
        *,
        scenario: str,
        trainer: str,
        evals: Mapping[str, EvalSet],
        gate: ServeIfSection | None,
        target: EvalTarget,
        artifacts: ArtifactLookup,
        evaluations: ArtifactEvaluations,
        settings: ScenarioSettings,
    ) -> None:
        super().__init__(component)
        self.scenario = scenario
        self.trainer = trainer
        self.evals = dict(evals)
        self.gate = gate
        self.target = target
        self.artifacts = artifacts
        self.evaluations = evaluations
        self.settings = settings

    def publish(self) -> Artifact:
        """Publish, evaluate and (with a gate) decide; the artifact the engine serves."""
        artifact = self.component.publish()
        if self.gate is None:
            self._attempt(lambda: self._measure(artifact), artifact, served=True)
            return artifact
        gate = self.gate
        if self.evaluations.decision(self.trainer, artifact.artifact_id) is None:
            self._attempt(lambda: self._decide(artifact, gate), artifact, served=None)
        served_id = self.evaluations.served_artifact(self.trainer)
        if served_id is None or served_id == artifact.artifact_id:
            return artifact
        served = self.artifacts.get(served_id)
        if gate.resume_from == "served":
            # The runtime refuses resume_from: served for a component without restore.
            restore: Callable[[Artifact], None] = self.component.restore  # type: ignore[attr-defined]
            restore(served)
            logger.info(
                "scenario %s, trainer %s: back to the served weights %s",
                self.scenario,
                self.trainer,
                served_id,
            )
        return served

    def _attempt(
        self, work: Callable[[], object], artifact: Artifact, *, served: bool | None
    ) -> None:
        """Run an evaluation (and decision); an unfinished one is noted, not raised."""
        try:
            work()
        except EvalIncomplete as exc:
            logger.warning("scenario %s, trainer %s: %s", self.scenario, self.trainer, exc)
            self.settings.set(
                f"{EVAL_ERROR_PREFIX}{self.trainer}",
                {"artifact_id": artifact.artifact_id, "error": str(exc), "at": time.time()},
            )
            self.target.close(artifact, served=bool(served))
            return
        self.settings.delete(f"{EVAL_ERROR_PREFIX}{self.trainer}")
        if served is not None:
            self.target.close(artifact, served=served)

    def _measure(self, artifact: Artifact) -> dict[str, float]:
        """The artifact's score on every eval set, measured for those not kept yet."""
        scores: dict[str, float] = {}
        complete: Callable[[JSON], JSON] | None = None
        for name, eval_set in self.evals.items():
            kept = self.evaluations.result(self.trainer, artifact.artifact_id, name)
            if kept is None:
                complete = complete or self.target.open(artifact)
                kept = eval_set.evaluate(
                    complete,
                    scenario=self.scenario,
                    trainer=self.trainer,
                    artifact_id=artifact.artifact_id,
                )
                self.evaluations.save(kept)
                logger.info(
                    "scenario %s, trainer %s: %s scores %.4f on %s",
                    self.scenario,
                    self.trainer,
                    artifact.artifact_id,
                    kept.score,
                    name,
                )
            scores[name] = kept.score
        return scores

    def _decide(self, artifact: Artifact, gate: ServeIfSection) -> None:
        candidate = self._measure(artifact)[gate.eval]
        served_id = self.evaluations.served_artifact(self.trainer)
        served_score = None
        if served_id is not None:
            kept = self.evaluations.result(self.trainer, served_id, gate.eval)
            if kept is None:  # the eval set is newer than the served artifact
                served = self.artifacts.get(served_id)
                try:
                    served_score = self._measure(served)[gate.eval]
                finally:
                    self.target.close(served, served=True)
            else:
                served_score = kept.score
        verdict = gate_verdict(gate, candidate, served_score, served_id)
        decision = self.evaluations.decide(
            self.trainer, artifact.artifact_id, served=verdict.serve, reason=verdict.reason
        )
        logger.info(
            "scenario %s, trainer %s: %s %s: %s",
            self.scenario,
            self.trainer,
            artifact.artifact_id,
            "served" if decision.served else "held back",
            decision.reason,
        )
        self.target.close(artifact, served=decision.served)
