"""The quickstart (docs/ecc/quickstart.md), runnable: from a SWE-bench run folder to an audit.

Input: a folder in the layout of SWE-bench's harness (``instances.jsonl``,
``predictions/<run_id>.jsonl``, ``logs/run_evaluation/<run_id>/<model>/<instance_id>/``); the
shipped one is ``swebench-run/`` beside this file. Each run id is one rollout round: a group is
the attempts at one instance across the rounds.

1. checks: one grader version (g0) from the instances' rows, published with the world;
2. records: one execution record per prediction from the harness's logs, graded under g0,
   checked against the harness's own ``report.json``;
3. a grader fix (g1: a stale PASS_TO_PASS label dropped), published;
4. an audit seal (what g1 changes, nothing trained), then the seal of the batch under g1: stored
   logs re-parsed, nothing re-executed (with ``--docker-url``, what must be re-executed runs in
   the instances' images);
5. the audits: every seal under the epoch in force, no request with both verdicts.

Run: ``python examples/quickstart/run.py [RUN_FOLDER] [OUT_FOLDER] [--docker-url URL]``; prints
what each step found, then a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import attrs

from agent_ecc import (
    Candidate,
    ContentStore,
    DirectoryRegistry,
    LocalBackend,
    Member,
    Scorer,
    SealJournal,
    SealSession,
    World,
    audit_epochs,
    grade_recorded,
    verdict_conflicts,
)
from agent_ecc.adapters.swebench import SWEBenchAdapter, conjunction_version
from agent_ecc.adapters.swebench_harness import (
    harness_resolved,
    harness_run,
    instance_dir,
    read_jsonl,
    version_rows,
)
from agent_ecc.backends import Backend, NoBackend
from agent_ecc.records import ExecutionRecord, RecordedScore, dump_jsonl
from agent_ecc.versions import iter_checks

HERE = Path(__file__).resolve().parent
WORLD = "swebench-images"


def say(text: str) -> None:
    """One line of the walkthrough (stderr: stdout is the summary)."""
    print(text, file=sys.stderr)


def run(run_folder: Path, out: Path, docker_url: str | None = None) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    store = ContentStore(out / "store")
    adapter = SWEBenchAdapter()  # the official rule: SWE-bench's own report

    # 1. Checks: one spec per instance, graded with the instance's own log parser, run (when a
    # re-execution is needed) in the instance's image.
    instances = read_jsonl(run_folder / "instances.jsonl")
    rows = version_rows(instances, store)
    g0 = conjunction_version(
        rows, [], version_id="g0", world=WORLD, store=store, adapter=adapter, runtime="docker"
    )
    registry = DirectoryRegistry(out / "registry")
    registry.publish_grader(g0, source="swebench rows")
    registry.publish_world(World(WORLD, tuple(r["instance_id"] for r in rows)), source="images")
    for entry in g0.entries:
        for check in iter_checks(entry.spec):
            parser = check.grading["parser"]
            package = check.grading.get("parser_package", "built in")
            say(
                f"check {check.check_id}: parser {parser} ({package}), rule {check.grading['rule']}"
            )

    # 2. Records: what each attempt did, graded under the epoch it was produced under (g0).
    records: dict[str, ExecutionRecord] = {}
    scores: dict[str, RecordedScore] = {}
    agree = disagree = 0
    groups: dict[str, list[str]] = {}
    for predictions in sorted((run_folder / "predictions").glob("*.jsonl")):
        run_id = predictions.stem
        for prediction in read_jsonl(predictions):
            task = prediction["instance_id"]
            attempt = f"{task}@{run_id}"
            check = next(iter_checks(g0.lookup(task, WORLD).spec))
            folder = instance_dir(
                run_folder / "logs" / "run_evaluation" / run_id,
                prediction["model_name_or_path"],
                task,
            )
            record = adapter.record(
                store=store,
                task_id=task,
                trajectory_id=attempt,
                image=WORLD,
                patch=prediction["model_patch"] or "",
                runs=[harness_run(adapter, check, store, folder)],
            )
            score = grade_recorded(
                adapter, record, g0.lookup(task, WORLD).spec, store, grader_version="g0"
            )
            records[attempt], scores[attempt] = record, score
            dump_jsonl(out / "records.jsonl", [record])
            dump_jsonl(out / "scores.jsonl", [score])
            groups.setdefault(task, []).append(attempt)
            resolved = harness_resolved(folder, task)
            if resolved is not None:
                agree += resolved == score.passed
                disagree += resolved != score.passed
            say(f"record {attempt}: {score.verdict} (harness report: {resolved})")
    say(f"first grading: {agree} verdicts as the harness's report.json, {disagree} otherwise")

    # 3. A grader fix: calc's PASS_TO_PASS names a test its eval script never runs, so every
    # attempt failed, the gold patch too. g1 drops the stale label.
    fixed_rows = [
        {**r, "PASS_TO_PASS": [t for t in json.loads(r["PASS_TO_PASS"]) if t != STALE]}
        for r in rows
    ]
    g1 = conjunction_version(
        fixed_rows,
        [],
        version_id="g1",
        world=WORLD,
        store=store,
        adapter=adapter,
        runtime="docker",
    )
    registry.publish_grader(g1, source="fix: stale PASS_TO_PASS label")
    say("published g1 (fix: stale PASS_TO_PASS label)")

    # 4. Seals: the trainer's unit is a group (one instance's attempts); each member carries its
    # record, its recorded score and the reward its sample got under g0.
    def candidates() -> list[Candidate]:
        return [
            Candidate(
                task,
                handle=attempts,
                members=tuple(
                    Member(a, records[a], scores[a], 1.0 if scores[a].passed else 0.0)
                    for a in attempts
                ),
            )
            for task, attempts in groups.items()
        ]

    backend: Backend = NoBackend()
    if docker_url is not None:
        from agent_ecc.recompute.container import ContainerExecutor

        backend = LocalBackend(ContainerExecutor(store, base_url=docker_url).run, capacity=2)
    scorer = Scorer([adapter], store, backend=backend)
    journal = SealJournal(out / "seals.jsonl")
    audit = SealSession(registry, scorer, "audit-1", mode="audit")
    preview = audit.finish(audit.assemble(candidates()))
    say(f"audit under g1: {preview.stats['changed']} label(s) would change")
    session = SealSession(registry, scorer, "step-1")
    decision = session.finish(session.assemble(candidates(), deadline_s=600.0), journal=journal)
    rewards = decision.rewards()
    say(
        f"seal under epoch {decision.epoch.index} ({decision.epoch.version_id}): "
        f"{decision.stats['decisions']}, executions {decision.stats['executions']}, "
        f"infra_fails {decision.stats['infra_fails']}"
    )
    for member in decision.members:
        reward = rewards.get(member.member_id)
        say(f"  {member.member_id}: {member.type} -> {member.label}, reward {reward}")

    # 5. Audits.
    epochs = audit_epochs(journal.read(), registry)
    conflicts = verdict_conflicts(
        list(records.values()), list(scores.values()), [g0, g1], [adapter], store
    )
    say(f"audit: seals under the epoch in force: {epochs.ok}; conflicts: {len(conflicts)}")
    return {
        "checks": {
            c.check_id: attrs.asdict(c)["grading"] for e in g0.entries for c in iter_checks(e.spec)
        },
        "recorded": {a: s.verdict for a, s in scores.items()},
        "report_agreement": {"agree": agree, "disagree": disagree},
        "audit_changed": preview.stats["changed"],
        "decisions": {m.member_id: [m.type, m.label] for m in decision.members},
        "groups": {g.group_id: g.outcome for g in decision.groups},
        "rewards": rewards,
        "stats": {k: decision.stats[k] for k in ("decisions", "executions", "infra_fails")},
        "epochs_ok": epochs.ok,
        "conflicts": len(conflicts),
    }


STALE = "tests/test_ops.py::test_mean_empty"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("run_folder", nargs="?", type=Path, default=HERE / "swebench-run")
    parser.add_argument("out", nargs="?", type=Path, default=None)
    parser.add_argument("--docker-url", help="re-execute in the instances' images on this daemon")
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="ecc-quickstart-"))
    print(json.dumps(run(args.run_folder, out, args.docker_url), indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
