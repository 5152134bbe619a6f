"""reef-core builds a wheel, installs alone in a fresh venv with only its declared dependencies
(and the test tools), has no `sft` in `reef plugins` there and passes its own suite; its wheel
ships the console's files and nothing of them names another site."""

from __future__ import annotations

import json
import re
import sys
import zipfile
from pathlib import Path

import pytest
from fresh_venvs import ROOT, TEST_TOOLS, fresh_venv, plugin_names, run, run_tests, with_test_extra

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def core_venv(tmp_path_factory: pytest.TempPathFactory, wheels: Path) -> Path:
    return fresh_venv(
        tmp_path_factory.mktemp("core") / "venv",
        wheels,
        with_test_extra("reef-core"),
        *TEST_TOOLS,
        "pytest-xdist",
    )


def test_core_alone_has_no_sft_and_passes_its_tests(core_venv: Path, tmp_path: Path) -> None:
    assert "sft" not in plugin_names(core_venv, tmp_path)
    run_tests(core_venv, ROOT / "reef-core" / "tests", tmp_path, marks="not slow and not postgres",
              workers=2)  # fmt: skip


#: A reference to another site: a scheme or a protocol-relative "//host.tld".
OTHER_SITE = re.compile(r"(?:[a-z][a-z0-9+.-]*:)?//[a-z0-9-]+(?:\.[a-z0-9-]+)+", re.IGNORECASE)
#: The one such text the console holds: the SVG namespace, a name that is never fetched.
SVG_NAMESPACE = "http://www.w3.org/2000/svg"


def test_the_core_wheel_ships_the_console_page(wheels: Path, tmp_path: Path) -> None:
    """The console's files are package data of reef-core's wheel, byte for byte, and name no
    other site (no CDN); the package read from the wheel finds every one of them, as `reef
    serve` does, with nothing built at install time."""
    [wheel] = wheels.glob("reef_core-*.whl")
    folder = ROOT / "reef-core" / "src" / "reef" / "server" / "console"
    files = {path.name: path.read_bytes() for path in folder.iterdir()}
    assert {"index.html", "app.js", "console.css"} <= set(files)
    with zipfile.ZipFile(wheel) as archive:
        shipped = {
            name: archive.read(f"reef/server/console/{name}")
            for name in files
            if f"reef/server/console/{name}" in archive.namelist()
        }
        archive.extractall(tmp_path / "wheel")
    assert shipped == files
    for name, content in files.items():
        found = OTHER_SITE.findall(content.decode("utf-8").replace(SVG_NAMESPACE, ""))
        assert not found, (name, found)
    served = run(
        sys.executable,
        "-c",
        "import json, sys; sys.path.insert(0, sys.argv[1]); import reef.server.console as c;"
        " print(json.dumps([c.__file__, sorted(c.console_files())]))",
        tmp_path / "wheel",
    )
    module, names = json.loads(served)
    assert Path(module).is_relative_to(tmp_path / "wheel"), module
    assert names == sorted(files), names
