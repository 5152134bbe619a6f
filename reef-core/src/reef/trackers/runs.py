"""A trainer's runs in its experiment trackers: the figures of a job (:func:`job_figures`) and
:class:`TrainerTrackers`, which opens each tracker's run when the trainer takes its lease, resumes
it by the id the scenario's settings keep, and logs each job that ended once (see
:mod:`reef.trackers`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from reef.core.evals import EvalResult
from reef.core.job_data import JobOutcome
from reef.core.records import JSON
from reef.storage import ArtifactEvaluations, JobHistory, ScenarioSettings
from reef.storage.job_history import JobEntry, SampleOfJob
from reef.storage.scenario_settings import tracker_run_key
from reef.trackers import TrackedJob, Tracker

__all__ = ["TrainerTrackers", "job_figures"]


def job_figures(
    entry: JobEntry, samples: Sequence[SampleOfJob], evaluations: Sequence[EvalResult] = ()
) -> dict[str, float]:
    """The numbers a tracker logs of a job: the component's metrics (``train/<name>``: loss,
    tokens, unrenderable samples, KL...), the rewards the trained samples trained with
    (``reward/mean``, ``reward/std``, ``reward/min``, ``reward/max``, ``reward/count``), the
    samples (``samples/trained``, ``samples/consumed``), the job (``job/failed``,
    ``job/seconds``), and each number an extension said of the job (Agent ECC's seal:
    ``ecc/<key>``, nested keys joined by ``/``), and the evaluations of the artifact the job
    made (``eval/<set>/score``, ``eval/<set>/errors``). Booleans count as 0 or 1; text and
    numbers that are not finite are left out."""
    figures: dict[str, float] = {}
    _add_numbers(figures, "train", entry.metrics)
    rewards = [s.reward for s in samples if s.trained and s.reward is not None]
    if rewards:
        mean = sum(rewards) / len(rewards)
        figures["reward/mean"] = mean
        figures["reward/std"] = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards))
        figures["reward/min"] = min(rewards)
        figures["reward/max"] = max(rewards)
    figures["reward/count"] = float(len(rewards))
    figures["samples/trained"] = float(entry.trained)
    figures["samples/consumed"] = float(entry.consumed)
    figures["job/failed"] = 1.0 if entry.event == "failed" else 0.0
    if entry.submitted_at is not None and entry.ended_at is not None:
        figures["job/seconds"] = entry.ended_at - entry.submitted_at
    for extension, said in sorted(entry.extensions.items()):
        if isinstance(said, Mapping):
            _add_numbers(figures, str(extension), said)
    for result in evaluations:
        figures[f"eval/{result.eval}/score"] = result.score
        figures[f"eval/{result.eval}/errors"] = float(result.errors)
    return figures


def _add_numbers(figures: dict[str, float], prefix: str, values: Mapping[str, Any]) -> None:
    for name, value in values.items():
        key = f"{prefix}/{name}"
        if isinstance(value, Mapping):
            _add_numbers(figures, key, value)
        elif isinstance(value, bool):
            figures[key] = 1.0 if value else 0.0
        elif isinstance(value, int | float) and math.isfinite(value):
            figures[key] = float(value)


#: The most evaluation results read for one job (a scenario has a few eval sets).
_EVALS_READ = 100

#: What a trainer does with a tracker's error: ``note_error(where, exc)``.
ErrorSink = Callable[[str, BaseException], None]


class TrainerTrackers:
    """One trainer's runs in the deployment's trackers, for one tenure (see the module's
    documentation).

    :param trackers: each tracker by its name in the deployment.
    :param settings: the scenario's settings (on the tenure's fenced database), where each
        run's id and last step are kept.
    :param history: the scenario's job history, which gives each job's step and figures.
    :param evaluations: the scenario's evaluation results: those measured after a job ended
        (of the artifact the job made) are logged with it.
    :param note_error: where a tracker's errors go (the trainer's ``last_errors``).
    """

    def __init__(
        self,
        trackers: Sequence[tuple[str, Tracker]],
        *,
        trainer: str,
        settings: ScenarioSettings,
        history: JobHistory,
        evaluations: ArtifactEvaluations,
        note_error: ErrorSink,
    ) -> None:
        self._trackers = list(trackers)
        self._evaluations = evaluations
        self._trainer = trainer
        self._settings = settings
        self._history = history
        self._note_error = note_error
        self._runs: dict[str, JSON] = {}
        #: Jobs each tracker did not get (it failed to open, or to log them), by tracker.
        self.missed: dict[str, int] = {name: 0 for name, _ in self._trackers}

    def open(self) -> None:
        """Start or resume each tracker's run; a tracker that fails to open misses this
        tenure's jobs (counted), and is tried again by the next tenure."""
        for name, tracker in self._trackers:
            key = tracker_run_key(self._trainer, name)
            stored = self._settings.get(key)
            run: JSON = dict(stored) if isinstance(stored, Mapping) else {}
            previous = run.get("run_id")
            try:
                run["run_id"] = tracker.open(previous if isinstance(previous, str) else None)
            except Exception as exc:
                self._note_error(f"tracker {name}", exc)
                continue
            run.setdefault("step", None)
            self._settings.set(key, run)
            self._runs[name] = run

    def job_ended(self, outcome: JobOutcome, artifact_id: str) -> None:
        """Log a job whose end is durable to every run that has not logged it yet."""
        found = self._history.job(self._trainer, outcome.job_id)
        if found is None:  # the end's commit writes the job's history row: never here
            return
        entry, samples = found
        ended = entry.ended_at or 0.0
        evaluated = [
            r for r in self._evaluations.results(self._trainer, limit=_EVALS_READ) if r.at >= ended
        ]
        job = TrackedJob(
            step=entry.seq,
            job_id=outcome.job_id,
            event=outcome.event,
            figures=job_figures(entry, samples, evaluated),
            artifact_id=artifact_id,
            error=outcome.error,
        )
        for name, tracker in self._trackers:
            run = self._runs.get(name)
            if run is None:
                self.missed[name] += 1
                continue
            last = run.get("step")
            if isinstance(last, int) and last >= job.step:
                continue  # logged before a restart (the trainer replays its last outcome)
            try:
                tracker.log_job(job)
            except Exception as exc:
                self.missed[name] += 1
                self._note_error(f"tracker {name}", exc)
                continue
            run["step"] = job.step
            self._settings.set(tracker_run_key(self._trainer, name), run)

    def status(self) -> JSON:
        """Each tracker's run id, last step logged and jobs missed, for the status snapshot."""
        return {
            name: {
                "run_id": self._runs.get(name, {}).get("run_id"),
                "step": self._runs.get(name, {}).get("step"),
                "missed_jobs": self.missed[name],
            }
            for name, _ in self._trackers
        }

    def close(self) -> None:
        """End each run in this process (errors noted)."""
        for name, tracker in self._trackers:
            if name in self._runs:
                try:
                    tracker.close()
                except Exception as exc:
                    self._note_error(f"tracker {name}", exc)
        self._runs.clear()
