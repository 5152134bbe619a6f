"""SPADE for Reef: a task generator whose designer model writes tasks at the policy's frontier.

Select it with ``pipeline.record2sample.config.generator: spade`` in a scenario of the
generated-task recipe (``docs/recipes/spade.md``).
"""

from reef_spade.generator import DesignerSettings, SpadeGenerator, SpadeSettings
from reef_spade.version import __version__

__all__ = ["DesignerSettings", "SpadeGenerator", "SpadeSettings", "__version__"]
