"""``NoSamples``: the default record-to-sample stage, which makes no sample (P-STG-14)."""

from __future__ import annotations

from typing import ClassVar

from reef.core.plugins import NoSettings, PluginSettings
from reef.core.records import Record
from reef.record2sample.stage import Record2Sample

#: The reason every record pushed to :class:`NoSamples` ends with.
NO_RECIPE_SAMPLES = "no_samples"


class NoSamples(Record2Sample):
    """Ends every record it is given: the scenario records traffic but trains nothing.

    It holds no unit, so it takes no ``max_staleness`` and refuses every key (P-STALE-12).
    """

    Settings: ClassVar[type[PluginSettings]] = NoSettings

    def push(self, record: Record) -> None:
        """End ``record`` at once: it will never train here."""
        self.end((record,), NO_RECIPE_SAMPLES)
