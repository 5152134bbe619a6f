"""Supervised fine-tuning on agent traffic: the ``sft`` recipe and its two stages."""

from reef_sft.version import __version__

__all__ = ["__version__"]
