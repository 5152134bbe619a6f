"""Opening the container backend that
:class:`~reef.core.container_settings.ContainerSettings` names.

The same settings configure the generator service (the deployment's ``generator`` section)
and a task job's rollouts (``rollout.sandbox``).
"""

from __future__ import annotations

from pathlib import Path

from reef.containers.interface import ContainerBackend
from reef.core.container_settings import ContainerSettings

__all__ = ["open_backend"]


def open_backend(settings: ContainerSettings, runs_root: Path | None = None) -> ContainerBackend:
    """The backend ``settings`` name.

    :param runs_root: the sandbox's folder for its runs (a temporary folder when ``None``).
    :raises reef.containers.interface.ContainerError: when the backend cannot work here.
    """
    if settings.backend == "docker":
        from reef.containers.docker import DockerBackend

        return DockerBackend(settings.docker_url, default_image=settings.default_image)
    from reef.containers.sandbox import SandboxBackend

    return SandboxBackend(runs_root)
