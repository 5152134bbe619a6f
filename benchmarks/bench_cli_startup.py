"""What ``reef check`` costs to start: the quickstart's deployment checked, against importing
Reef and reading the same file.

Each round runs, in fresh interpreters and in alternating order, the **baseline** (``python -c
"import reef"`` plus ``yaml.safe_load`` of the deployment file: what any command that reads
the file pays at the least) and **check** (``python -m reef.cli check`` on it, with
``REEF_QUICKSTART_DIR`` set as ``scripts/quickstart`` sets it). Each child's CPU time (user +
system, from ``os.wait4``) is what the comparison is made on, since this machine is shared and
wall time moves with its load; wall time is printed beside it. Both run from bytecode, as an
installed distribution does (the warm-up rounds write it even where ``PYTHONDONTWRITEBYTECODE``
is set: compiling Reef's sources anew in every run would be measured otherwise). It prints each
one's median and spread (lowest to highest) and the ratio of the medians. Goal: check's CPU
within 1.5x of the baseline's.

    .venv/bin/python benchmarks/bench_cli_startup.py [--rounds 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOAL_RATIO = 1.5
DEPLOYMENT = Path(__file__).parent.parent / "examples" / "quickstart" / "serve" / "deployment.yaml"
BASELINE = (
    "import reef, yaml, sys\n"
    "with open(sys.argv[1], encoding='utf-8') as f:\n"
    "    yaml.safe_load(f)\n"
)
COMMANDS = {
    "baseline": [sys.executable, "-c", BASELINE, str(DEPLOYMENT)],
    "check": [sys.executable, "-m", "reef.cli", "check", str(DEPLOYMENT)],
}


def run(command: list[str], environ: dict[str, str]) -> tuple[float, float]:
    """One run of ``command`` in a fresh interpreter: its CPU seconds (user + system) and its
    wall seconds.

    :raises RuntimeError: when it fails, with what it printed.
    """
    began = time.perf_counter()
    child = subprocess.Popen(
        command, env=environ, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    assert child.stderr is not None
    errors = child.stderr.read()
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - began
    child.returncode = os.waitstatus_to_exitcode(status)
    child.stderr.close()
    if child.returncode != 0:
        raise RuntimeError(f"{command[2:]} failed ({child.returncode}): {errors.decode()}")
    return usage.ru_utime + usage.ru_stime, wall


def spread(values: list[float]) -> str:
    """Median and range of ``values`` (seconds), in milliseconds."""
    low, mid, high = min(values), statistics.median(values), max(values)
    return f"median {mid * 1000:7.1f} ms  (spread {low * 1000:.1f} to {high * 1000:.1f})"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        environ = {**os.environ, "REEF_QUICKSTART_DIR": folder}
        environ.pop("PYTHONDONTWRITEBYTECODE", None)
        cpu: dict[str, list[float]] = {name: [] for name in COMMANDS}
        wall: dict[str, list[float]] = {name: [] for name in COMMANDS}
        for _ in range(2):  # warm the file cache and the bytecode, not measured
            for command in COMMANDS.values():
                run(command, environ)
        for n in range(args.rounds):
            order = list(COMMANDS) if n % 2 == 0 else list(reversed(COMMANDS))
            for name in order:
                seconds, elapsed = run(COMMANDS[name], environ)
                cpu[name].append(seconds)
                wall[name].append(elapsed)
    print(f"{args.rounds} rounds, alternating, each a fresh interpreter ({DEPLOYMENT.name})")
    for name in COMMANDS:
        print(f"{name:<9} cpu  {spread(cpu[name])}")
        print(f"{name:<9} wall {spread(wall[name])}")
    cpu_ratio = statistics.median(cpu["check"]) / statistics.median(cpu["baseline"])
    wall_ratio = statistics.median(wall["check"]) / statistics.median(wall["baseline"])
    print(f"check / baseline: cpu {cpu_ratio:.2f}x, wall {wall_ratio:.2f}x")
    verdict = "met" if cpu_ratio <= GOAL_RATIO else "NOT met"
    print(f"goal (check's cpu within {GOAL_RATIO}x of the baseline's): {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
