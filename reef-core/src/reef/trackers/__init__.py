"""Experiment trackers: each trainer's jobs, as figures, in the trackers a team already runs.

A deployment's ``trackers:`` section names trackers (TensorBoard, MLflow, Weights & Biases are
built in, each in an extra; a plugin adds others through ``reef_register_trackers``), each with
its settings. This module is the contract a tracker extends (:class:`Tracker`, what it gets:
:class:`TrackedJob`), free of storage. Every trainer keeps one run in each:
:class:`reef.trackers.runs.TrainerTrackers` opens it when the
trainer takes its lease, resuming the run whose id the scenario's settings keep
(:func:`reef.storage.scenario_settings.tracker_run_key`), and logs each job that ended, at the
job's place in the history (its step), with the artifact the trainer published after it and the
evaluations of the artifact the job made (:mod:`reef.evals`), when the scenario has any. The
last step logged is kept beside the run id, so the outcome a restarted trainer replays is
logged once.

A tracker that fails (to open, or to log a job) never stops training: the error is the
trainer's (``last_errors``), and the trainer's status counts the jobs each tracker missed.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import ClassVar

import attrs

from reef.core.plugins import NoSettings, PluginSettings

__all__ = ["TrackedJob", "Tracker"]


@attrs.frozen
class TrackedJob:
    """One job as a tracker logs it.

    :ivar step: the job's place in the scenario's job history (grows across restarts).
    :ivar job_id: the job's id.
    :ivar event: ``finished`` or ``failed``.
    :ivar figures: the job's numbers by name (:func:`reef.trackers.runs.job_figures`).
    :ivar artifact_id: the artifact the trainer served after the job.
    :ivar error: why the job failed, when it did.
    """

    step: int
    job_id: str
    event: str
    figures: Mapping[str, float]
    artifact_id: str
    error: str | None = None


class Tracker(abc.ABC):
    """An experiment tracker: one run per trainer, resumed across restarts.

    A subclass declares its settings as ``Settings`` (a :class:`reef.PluginSettings`: what a
    deployment writes under ``trackers.<name>``) and implements :meth:`open` and
    :meth:`log_job`. Its library is imported in :meth:`open`, not at module level, so reading a
    deployment imports no tracker. Its calls run on the trainer's thread, under its lock: a
    tracker that talks to a server sends one request per job at most.
    """

    Settings: ClassVar[type[PluginSettings]] = NoSettings

    def __init__(self, settings: PluginSettings, *, scenario: str, trainer: str) -> None:
        self.settings = settings
        self.scenario = scenario
        self.trainer = trainer

    @property
    def run_name(self) -> str:
        """The run's display name: ``<scenario>/<trainer>``."""
        return f"{self.scenario}/{self.trainer}"

    @abc.abstractmethod
    def open(self, run_id: str | None) -> str:
        """Start the trainer's run, or resume ``run_id`` (the id :meth:`open` returned before,
        kept in the store); return the run's id."""

    @abc.abstractmethod
    def log_job(self, job: TrackedJob) -> None:
        """Log one job: its figures at ``job.step``, and the artifact served after it."""

    def close(self) -> None:  # noqa: B027 - a tracker with nothing to flush keeps this
        """Flush and end the run in this process (it is resumed by the next :meth:`open`)."""
