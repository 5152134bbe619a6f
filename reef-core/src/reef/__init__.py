"""Reef: record agent traffic, link it into trajectories, and turn feedback into training jobs."""

from reef.version import __version__

__all__ = ["__version__"]
