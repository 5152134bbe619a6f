"""The tttd plugin loads through its entry point and can be blocked by name."""

from __future__ import annotations

import importlib.metadata

from reef import Plugins
from reef.testing import ENTRY_POINT_GROUP


def test_entry_point_is_declared_by_this_distribution() -> None:
    (entry_point,) = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP, name="tttd")
    assert entry_point.value == "reef_tttd.plugin"
    assert entry_point.dist is not None
    assert entry_point.dist.metadata["Name"] == "reef-recipes-tttd"


def test_loading_it_records_no_failure_and_blocking_skips_it() -> None:
    plugins = Plugins(blocked=())
    plugins.load()
    assert "tttd" not in {f.name for f in plugins.failures}
    blocked = Plugins(blocked={"tttd"})
    blocked.load()
    assert blocked.failures == ()
