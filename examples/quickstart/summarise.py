"""The bundled example: load recorded traffic into a fresh store and show what Reef makes of it.

``bash scripts/example`` runs it. It reads the deployment (validating every scenario), opens a
fresh SQLite store (in ``--dir``, kept; by default in a temporary folder, removed at the end),
stores each recorded call and report of ``records.jsonl`` with its trajectory link, and prints,
per scenario, the calls, trajectories and reports, then the ATIF form of one trajectory. Only
the public API of reef-core is used.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from reef.core.atif import trajectory_to_json
from reef.core.atif_build import trajectory_from_records
from reef.core.records import InferenceRecord, Record, Report, loads
from reef.plugins import Plugins
from reef.plugins.scenarios import load_deployment
from reef.storage import RecordStore, open_database

HERE = Path(__file__).parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=Path, default=HERE / "records.jsonl")
    parser.add_argument("--deployment", type=Path, default=HERE / "deployment.yaml")
    parser.add_argument(
        "--dir", type=Path, help="where to keep the store (default: a temporary folder, removed)"
    )
    args = parser.parse_args(argv)
    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
        return summarise(args.records, args.deployment, args.dir)
    with tempfile.TemporaryDirectory(prefix="reef-example-") as workdir:
        return summarise(args.records, args.deployment, Path(workdir))


def summarise(records_file: Path, deployment_file: Path, workdir: Path) -> int:
    """Load ``records_file`` into a fresh store in ``workdir`` and print the summary."""
    plugins = Plugins()
    plugins.load()
    deployment = load_deployment(
        deployment_file, plugins=plugins, environ={**os.environ, "REEF_EXAMPLE_DIR": str(workdir)}
    )
    database = open_database(deployment.storage.url)

    records: dict[str, list[Record]] = defaultdict(list)
    for line in records_file.read_text(encoding="utf-8").splitlines():
        record = loads(line)
        if record.scenario not in deployment.scenarios:
            print(f"skipping {record.id}: scenario {record.scenario!r} is not deployed")
            continue
        records[record.scenario].append(record)

    print(f"store: {deployment.storage.url}")
    longest: tuple[int, str, list[InferenceRecord]] | None = None
    for scenario in deployment.scenarios:
        store = RecordStore(database, scenario)
        index = store.trajectory_index()
        for record in records[scenario]:
            link = index.add(record) if isinstance(record, InferenceRecord) else None
            store.append(record, link=link)
        calls = {r.id: r for r in records[scenario] if isinstance(r, InferenceRecord)}
        reports = [r for r in records[scenario] if isinstance(r, Report)]
        ends = [c for c in calls if index.is_last_call(c)]
        aborted = [c for c in calls.values() if c.is_engine_abort]
        recipe = deployment.scenarios[scenario].recipe
        print(f"\nscenario {scenario} (recipe {recipe.class_})")
        print(f"  calls: {len(calls)} ({len(aborted)} aborted by the engine)")
        print(f"  trajectories: {len(ends)}")
        for end in ends:
            path = index.trajectory(end)
            scored = [r.id for r in reports if end in r.references]
            print(f"    {' -> '.join(path)}  reports: {', '.join(scored) or '-'}")
        print(f"  reports: {len(reports)}")
        for report in reports:
            print(f"    {report.id} score={report.score} references={list(report.references)}")
        for end in ends:
            path = index.trajectory(end)
            if longest is None or len(path) > longest[0]:
                longest = (len(path), end, [calls[c] for c in path])
    if longest is not None:
        _, end, path_records = longest
        trajectory = trajectory_from_records(path_records, trajectory_id=end)
        print(f"\nATIF of the longest trajectory (ending at {end}):")
        print(json.dumps(trajectory_to_json(trajectory), indent=2))
    database.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
