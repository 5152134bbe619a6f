"""Prints the slowest tests of a run from its pytest JUnit reports: ``slowest.py REPORT.xml...``.

``scripts/test`` calls it at the end of every run, so a test that grew slow shows where it is.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

SHOWN = 20


def timings(report: Path) -> list[tuple[float, str]]:
    """Each test case of ``report``: its seconds and its ``file::name``."""
    suite = report.stem
    cases = ElementTree.parse(report).getroot().iter("testcase")
    return [
        (float(case.get("time", 0)), f"{suite}: {case.get('classname')}::{case.get('name')}")
        for case in cases
    ]


def main(reports: list[str]) -> int:
    found = [
        timing for report in reports if Path(report).is_file() for timing in timings(Path(report))
    ]
    for seconds, name in sorted(found, reverse=True)[:SHOWN]:
        print(f"{seconds:8.1f} s  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
