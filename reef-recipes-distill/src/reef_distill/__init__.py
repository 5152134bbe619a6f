"""On-policy distillation and OpenClaw-RL for Reef: the ``distill`` and ``openclaw-rl`` recipes."""

from reef_distill.version import __version__

__all__ = ["__version__"]
