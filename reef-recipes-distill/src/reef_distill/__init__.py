"""On-policy distillation for Reef: the ``distill`` recipe."""

from reef_distill.version import __version__

__all__ = ["__version__"]
