"""TTTD and SDPO for Reef (the step grid); the ``tttd`` plugin."""

from reef_tttd.version import __version__

__all__ = ["__version__"]
