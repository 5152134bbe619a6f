"""Container operations: running a task's solution and verifier, isolated and limited.

- :mod:`reef.containers.interface`: one run (:class:`RunSpec` → :class:`RunResult`) behind
  :class:`ContainerBackend`;
- :mod:`reef.containers.sandbox`: the backend that runs here, in Linux namespaces (bubblewrap);
- :mod:`reef.containers.docker`: the backend for production, on a Docker daemon;
- :mod:`reef.containers.backends`: :func:`open_backend`, from
  :class:`~reef.core.container_settings.ContainerSettings`;
- :mod:`reef.containers.staging`: tasks staged by name under a tasks root;
- :mod:`reef.containers.verify`: a task's verifier on an attempt, and its oracle solution.
"""

from reef.containers.backends import open_backend
from reef.containers.interface import ContainerBackend, ContainerError, RunResult, RunSpec
from reef.containers.staging import StagedTask, StagingError, TaskConfig, TaskStaging
from reef.containers.verify import Verdict, run_oracle, run_verifier

__all__ = [
    "ContainerBackend",
    "ContainerError",
    "RunResult",
    "RunSpec",
    "StagedTask",
    "StagingError",
    "TaskConfig",
    "TaskStaging",
    "Verdict",
    "open_backend",
    "run_oracle",
    "run_verifier",
]
