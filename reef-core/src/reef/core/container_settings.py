"""Where a task's solution and verifier run, and their limits: the settings every user of
:mod:`reef.containers` takes (the generator service, a task job's rollouts, a Harbor eval set).
"""

from __future__ import annotations

from typing import Any, Literal

import attrs

from reef.core.config import config_option
from reef.core.plugins import PluginSettings

__all__ = ["ContainerSettings", "positive"]


def positive(_: object, attribute: attrs.Attribute[Any], value: float) -> None:
    """An attrs validator: ``value`` is above 0."""
    if value <= 0:
        raise ValueError(f"{attribute.name} must be positive, got {value!r}")


@attrs.frozen
class ContainerSettings(PluginSettings):
    """Where a task's solution and verifier run (:mod:`reef.containers`), and their limits:
    the generator section's ``containers`` and a task job's ``rollout.sandbox``."""

    backend: Literal["sandbox", "docker"] = config_option(
        "sandbox",
        help="sandbox (bubblewrap namespaces on this machine) or docker (a Docker daemon)",
    )
    docker_url: str = config_option(
        "unix:///var/run/docker.sock", help="the Docker daemon's socket or http://host:port"
    )
    default_image: str = config_option(
        "python:3.12-slim", help="docker: the image of a task whose task.toml names none"
    )
    timeout_seconds: float = config_option(
        120.0,
        help="the longest a solution or a verifier may run (a task's own lower limit wins)",
        validator=positive,
    )
    memory_mb: int = config_option(
        1024,
        help="the memory a run may take, /tmp (RAM) included (a task's own lower limit wins)",
        validator=positive,
    )
    disk_mb: int = config_option(
        256,
        help="the disk a run may write: /app and /logs each, sandbox; the container's layer, "
        "docker (a task's own lower [environment].storage_mb wins)",
        validator=positive,
    )
