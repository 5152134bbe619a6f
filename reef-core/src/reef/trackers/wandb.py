"""The ``wandb`` tracker: each trainer's jobs in a Weights & Biases run (the ``wandb`` extra).

One run per trainer, named ``<scenario>/<trainer>``, grouped by scenario. Each job is one
``run.log`` at the job's step (its figures, and the artifact served after it as ``artifact``);
the run's summary keeps the last artifact. A restart resumes the run by its id
(``resume="allow"``). ``mode: offline`` writes the run under ``dir`` for ``wandb sync`` later.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import attrs

from reef.core.config import config_option
from reef.core.plugins import PluginSettings
from reef.trackers import TrackedJob, Tracker


@attrs.frozen
class WandbSettings(PluginSettings):
    """What a deployment writes under ``trackers.wandb``."""

    project: str = config_option(help="the W&B project of the runs")
    entity: str | None = config_option(None, help="the W&B team or user; your default if unset")
    mode: Literal["online", "offline"] = config_option(
        "online", help="online, or offline: the run is written under dir for wandb sync"
    )
    dir: str | None = config_option(
        None, help="the folder W&B writes its files in (its wandb/ folder); the working one"
    )


class WandbTracker(Tracker):
    """Logs each job to the trainer's W&B run."""

    Settings = WandbSettings

    def __init__(self, settings: PluginSettings, *, scenario: str, trainer: str) -> None:
        super().__init__(settings, scenario=scenario, trainer=trainer)
        self._run: Any = None

    def open(self, run_id: str | None) -> str:
        import wandb

        assert isinstance(self.settings, WandbSettings)
        if self.settings.dir is not None:
            Path(self.settings.dir).mkdir(parents=True, exist_ok=True)
        self._run = wandb.init(
            project=self.settings.project,
            entity=self.settings.entity,
            mode=self.settings.mode,
            dir=self.settings.dir,
            name=self.run_name,
            group=self.scenario,
            id=run_id,
            resume="allow",
            reinit="create_new",
            config={"scenario": self.scenario, "trainer": self.trainer},
            settings=wandb.Settings(console="off", silent=True),
        )
        return str(self._run.id)

    def log_job(self, job: TrackedJob) -> None:
        self._run.log({**job.figures, "artifact": job.artifact_id}, step=job.step)
        self._run.summary["artifact"] = job.artifact_id

    def close(self) -> None:
        if self._run is not None:
            self._run.finish()
            self._run = None
