"""SPADE for Reef: a task generator whose designer model writes tasks at the policy's frontier.

Select it with ``pipeline.record2sample.config.generator: spade`` in a scenario of the
generated-task recipe (``docs/recipes/spade.md``). The generator and its settings live in
``reef_spade.generator``; this package imports none of it, so loading the plugin stays cheap.
"""

from reef_spade.version import __version__

__all__ = ["__version__"]
