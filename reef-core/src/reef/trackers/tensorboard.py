"""The ``tensorboard`` tracker: each trainer's jobs as TensorBoard event files (the
``tensorboard`` extra), in ``<log_dir>/<scenario>/<trainer>``.

Each figure is a scalar at the job's step; the artifact served after the job is a text summary
(``artifact``) at the same step. A restart appends a new event file to the same folder, which
TensorBoard reads as one run: the run's id is that folder.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import attrs

from reef.core.config import config_option
from reef.core.plugins import PluginSettings
from reef.trackers import TrackedJob, Tracker


@attrs.frozen
class TensorBoardSettings(PluginSettings):
    """What a deployment writes under ``trackers.tensorboard``."""

    log_dir: str = config_option(
        help="the folder TensorBoard reads (tensorboard --logdir); each trainer writes in"
        " <log_dir>/<scenario>/<trainer>"
    )


class TensorBoardTracker(Tracker):
    """Writes each job's figures and artifact as TensorBoard summaries."""

    Settings = TensorBoardSettings

    def __init__(self, settings: PluginSettings, *, scenario: str, trainer: str) -> None:
        super().__init__(settings, scenario=scenario, trainer=trainer)
        self._writer: Any = None

    def open(self, run_id: str | None) -> str:
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        assert isinstance(self.settings, TensorBoardSettings)
        folder = Path(self.settings.log_dir) / self.scenario / self.trainer
        folder.mkdir(parents=True, exist_ok=True)
        self._writer = EventFileWriter(str(folder))
        return str(folder)

    def log_job(self, job: TrackedJob) -> None:
        import numpy as np
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.plugins.scalar import metadata as scalar_metadata
        from tensorboard.plugins.text import metadata as text_metadata
        from tensorboard.util import tensor_util

        scalar = scalar_metadata.create_summary_metadata(display_name=None, description=None)
        text = text_metadata.create_summary_metadata(display_name=None, description=None)
        values = [
            summary_pb2.Summary.Value(
                tag=name,
                metadata=scalar,
                tensor=tensor_util.make_tensor_proto(np.float32(value)),
            )
            for name, value in sorted(job.figures.items())
        ]
        values.append(
            summary_pb2.Summary.Value(
                tag="artifact",
                metadata=text,
                tensor=tensor_util.make_tensor_proto(np.array([job.artifact_id], dtype=object)),
            )
        )
        event = event_pb2.Event(
            wall_time=time.time(), step=job.step, summary=summary_pb2.Summary(value=values)
        )
        self._writer.add_event(event)
        self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
