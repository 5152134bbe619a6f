"""reef-core's own plugin: the built-in stages, registered through the same entry point group
(``reef.plugins``, as ``core``) as any distribution's, so ``reef plugins`` lists them alike."""

from __future__ import annotations

from reef.core.plugins import PluginRegistrar
from reef.hookspecs import hookimpl


@hookimpl
def reef_register_record2sample(registry: PluginRegistrar) -> None:
    """The core's record-to-sample stages."""
    # Imported when the hook runs, not when the entry point loads: the stages pull in the
    # pipeline's modules, which listing plugins does not need until it registers them.
    from reef.record2sample.no_samples import NoSamples

    registry.register("NoSamples", NoSamples)
