"""SPADE for Reef: generated tasks; the ``spade`` recipe."""

from reef_spade.version import __version__

__all__ = ["__version__"]
