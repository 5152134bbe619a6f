"""TTTD and SDPO for Reef, on a runner's step grid; the ``tttd`` plugin."""

from reef_tttd.version import __version__

__all__ = ["__version__"]
