"""Reef: record agent traffic, link it into trajectories, and turn feedback into training jobs.

A plugin marks its hook implementations with :data:`reef.hookimpl` (see :mod:`reef.hookspecs`).
"""

from reef.hookspecs import hookimpl
from reef.version import __version__

__all__ = ["__version__", "hookimpl"]
