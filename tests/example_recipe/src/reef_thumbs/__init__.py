"""Thumbs up/down on agent replies, compared per conversation: the ``thumbs`` recipe.

A worked example of a recipe package; ``docs/recipe-authoring.md`` walks through it.
"""

from reef_thumbs.version import __version__

__all__ = ["__version__"]
