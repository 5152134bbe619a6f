"""The ``mlflow`` tracker: each trainer's jobs in an MLflow run (the ``mlflow`` extra, which
installs ``mlflow-skinny``: the tracking client, enough for a tracking server or a local store).

One run per trainer, named ``<scenario>/<trainer>``, in ``experiment``. Each job is one
``log_batch`` call: its figures as metrics at the job's step, and the artifact served after it
as the tag ``reef.artifact``; the job's whole account (id, event, figures, artifact) is also
written as the run's artifact ``reef-jobs/<step>.json``, so every artifact a run published
stays listed.
"""

from __future__ import annotations

import time
from typing import Any

import attrs

from reef.core.config import config_option
from reef.core.plugins import PluginSettings
from reef.trackers import TrackedJob, Tracker


@attrs.frozen
class MlflowSettings(PluginSettings):
    """What a deployment writes under ``trackers.mlflow``."""

    tracking_uri: str = config_option(
        help="the MLflow tracking URI: http://host:5000, sqlite:///mlflow.db, databricks..."
    )
    experiment: str = config_option("reef", help="the experiment the runs are in (made if absent)")


class MlflowTracker(Tracker):
    """Logs each job to the trainer's MLflow run."""

    Settings = MlflowSettings

    def __init__(self, settings: PluginSettings, *, scenario: str, trainer: str) -> None:
        super().__init__(settings, scenario=scenario, trainer=trainer)
        self._client: Any = None
        self._run_id: str | None = None

    def open(self, run_id: str | None) -> str:
        from mlflow.tracking import MlflowClient

        assert isinstance(self.settings, MlflowSettings)
        self._client = MlflowClient(tracking_uri=self.settings.tracking_uri)
        if run_id is not None:
            self._client.update_run(run_id, status="RUNNING")
            self._run_id = run_id
            return run_id
        experiment = self._client.get_experiment_by_name(self.settings.experiment)
        experiment_id = (
            self._client.create_experiment(self.settings.experiment)
            if experiment is None
            else experiment.experiment_id
        )
        run = self._client.create_run(
            experiment_id,
            run_name=self.run_name,
            tags={"reef.scenario": self.scenario, "reef.trainer": self.trainer},
        )
        self._run_id = str(run.info.run_id)
        return self._run_id

    def log_job(self, job: TrackedJob) -> None:
        from mlflow.entities import Metric, RunTag

        now = int(time.time() * 1000)
        self._client.log_batch(
            self._run_id,
            metrics=[
                Metric(name, value, now, job.step) for name, value in sorted(job.figures.items())
            ],
            tags=[RunTag("reef.artifact", job.artifact_id)],
        )
        self._client.log_dict(
            self._run_id,
            {
                "step": job.step,
                "job_id": job.job_id,
                "event": job.event,
                "error": job.error,
                "artifact_id": job.artifact_id,
                "figures": dict(job.figures),
            },
            f"reef-jobs/{job.step:08d}.json",
        )

    def close(self) -> None:
        if self._client is not None and self._run_id is not None:
            self._client.set_terminated(self._run_id, status="KILLED")
        self._client = None
