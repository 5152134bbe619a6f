"""Registry, epochs, pins and the content store."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import pytest

from agent_ecc import ContentStore, DirectoryRegistry, RegistryError, World
from agent_ecc.store import StoreError, get_json, get_text, is_blank, put_json, put_text
from agent_ecc.synthetic import SyntheticWorld
from agent_ecc.versions import IdentityMismatch, build_version, version_to_body


def test_grader_first_then_world(tmp_path: Path, world: SyntheticWorld) -> None:
    """rule: E-REG-1: the grader is published before the world it covers."""
    registry = DirectoryRegistry(tmp_path / "r")
    with pytest.raises(RegistryError, match="no publication"):
        registry.publish_world(world.world(), source="startup")
    registry.publish_grader(world.version(0), source="startup")
    with pytest.raises(RegistryError, match="not covered"):
        registry.publish_world(World("other-world", ("t1",)), source="startup")
    registry.publish_world(world.world(), source="startup")
    assert [(p.kind, p.source) for p in registry.publications()] == [
        ("grader", "startup"),
        ("world", "startup"),
    ]


def test_pin_and_epoch_at(tmp_path: Path, world: SyntheticWorld) -> None:
    """rule: E-REG-2, E-REG-3, E-REG-4: a fix published later is the next pin's epoch."""
    now = [100.0]
    registry = DirectoryRegistry(tmp_path / "r", clock=lambda: now[0])
    registry.publish_grader(world.version(0), source="startup")
    registry.publish_world(world.world(), source="startup")
    pin = registry.resolve_start()
    assert (pin.world, pin.epoch.index, pin.epoch.version_id) == (world.world().world_id, 0, "g0")
    now[0] = 200.0
    registry.publish_grader(world.version(1), source="fix")
    assert registry.resolve_start().epoch.version_id == "g1"
    assert registry.epoch_at(150.0).index == 0  # type: ignore[union-attr]
    assert registry.epoch_at(200.0).index == 1  # type: ignore[union-attr]
    assert registry.epoch_at(50.0) is None
    assert registry.grader("g1").lookup("t1", world.world().world_id).spec is not None


def test_republishing_a_version_id_with_another_body_is_refused(
    registry: DirectoryRegistry, world: SyntheticWorld
) -> None:
    """A version is immutable once published."""
    wrong = world.version(1)
    with pytest.raises(RegistryError, match="another body"):
        registry.publish_grader(type(wrong)(version_id="g0", entries=wrong.entries), source="fix")


_PUBLISHER = """
import sys
from pathlib import Path
from agent_ecc import ContentStore, DirectoryRegistry
from agent_ecc.synthetic import SyntheticWorld
path, index = Path(sys.argv[1]), int(sys.argv[2])
world = SyntheticWorld(ContentStore(path / "store"), ("t1", "t2"))
registry = DirectoryRegistry(path / "registry")
for _ in range(5):
    registry.publish_grader(world.version(index), source=f"proc{index}")
"""


def test_concurrent_publishers_take_distinct_sequence_numbers(tmp_path: Path) -> None:
    """rule: E-REG-1: several processes share one registry; the log stays gapless and ordered."""
    # separate interpreters (not multiprocessing): nothing to import from this test module
    procs = [
        subprocess.Popen([sys.executable, "-c", _PUBLISHER, str(tmp_path), str(i)]) for i in (0, 1)
    ]
    assert [p.wait(60) for p in procs] == [0, 0]
    log = DirectoryRegistry(tmp_path / "registry").publications()
    assert [p.seq for p in log] == list(range(10))
    assert [p.epoch.index for p in log] == list(range(10))
    assert all(a.published_at <= b.published_at for a, b in itertools.pairwise(log))


def test_build_version_checks_identities(world: SyntheticWorld) -> None:
    """rule: E-REPLAY-2: every identity derived from a body equals the one it names."""
    from agent_ecc.adapters.swebench import SWEBenchAdapter

    body = version_to_body(world.version(2))
    assert build_version(body, [SWEBenchAdapter()]).version_id == "g2"
    body["entries"][0]["spec"]["all_of"][0]["grading"]["rule"] = "official"
    with pytest.raises(IdentityMismatch, match="grading identity"):
        build_version(body, [SWEBenchAdapter()])


def test_store_is_content_addressed(store: ContentStore) -> None:
    key = put_text(store, "hello")
    assert key == put_text(store, "hello")
    assert get_text(store, key) == "hello"
    assert get_json(store, put_json(store, {"b": 1, "a": [2]})) == {"a": [2], "b": 1}
    path = store.root / "objects" / key[7:9] / key[9:]
    path.chmod(0o644)
    path.write_text("tampered")
    with pytest.raises(StoreError, match="does not match"):
        get_text(store, key)
    with pytest.raises(StoreError, match="malformed"):
        get_text(store, "md5:abc")


def _tamper(store: ContentStore, key: str, content: str) -> None:
    path = store.root / "objects" / key[7:9] / key[9:]
    path.chmod(0o644)
    path.write_text(content)


def test_a_patch_is_blank_only_when_its_checked_content_is_whitespace(store: ContentStore) -> None:
    """An empty patch fails its member, so blankness is decided on checked content; a patch
    that shows a byte of content in its first bytes is not blank, read no further (a "no"
    decides no verdict: the member is graded the next way)."""
    assert is_blank(store, put_text(store, ""))
    assert is_blank(store, put_text(store, " \n\t\n"))
    assert not is_blank(store, put_text(store, "diff --git a/x b/x\n"))
    assert not is_blank(store, put_text(store, " " * 100 + "x"))  # content after the first bytes
    assert not is_blank(store, put_text(store, " " * 5000))  # no patch anyone sends
    # A patch is not read whole to say it is not blank: a tampered one is not looked at...
    patch = put_text(store, "diff --git a/y b/y\n")
    _tamper(store, patch, "--- tampered, but not blank")
    assert not is_blank(store, patch)
    # ...but one that looks blank is checked against its key before it can fail a member.
    looks_blank = put_text(store, "\n\n")
    _tamper(store, looks_blank, "   ")
    with pytest.raises(StoreError, match="does not match"):
        is_blank(store, looks_blank)
    with pytest.raises(StoreError, match="no blob"):
        is_blank(store, "sha256:" + "0" * 64)
