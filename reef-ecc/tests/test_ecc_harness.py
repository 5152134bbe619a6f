"""Reading SWE-bench harness folders (agent_ecc.adapters.swebench_harness): each way an instance
folder can end reads as the run it was, so that only an evaluation that never happened is an
infrastructure failure (counted under official, neutralised under logical)."""

from __future__ import annotations

from pathlib import Path

from agent_ecc.adapters.swebench import SWEBenchAdapter
from agent_ecc.adapters.swebench_harness import harness_resolved, harness_run, instance_dir
from agent_ecc.store import ContentStore

SUITE = {"FAIL_TO_PASS": ["t.py::test_a"], "PASS_TO_PASS": []}
PASSING = (
    ">>>>> Start Test Output\nPASSED t.py::test_a\n>>>>> End Test Output\n>>>>> Test Exit Code: 0\n"
)


def _folder(tmp_path: Path, name: str, **files: str) -> Path:
    folder = instance_dir(tmp_path / "logs" / "run_evaluation" / name, "org/model", "x__x-1")
    folder.mkdir(parents=True)
    for file, text in files.items():
        (folder / file).write_text(text)
    return folder


def test_each_way_a_harness_folder_ends_reads_as_its_run(
    tmp_path: Path, store: ContentStore
) -> None:
    """rule: E-GRADE-4: test output is a log (timed out when the harness says so); a patch the
    harness could not apply is a fail of the patch's own; anything else is the harness stopping,
    a fail under official and undeterminable under logical."""
    official, logical = SWEBenchAdapter(), SWEBenchAdapter("logical")
    check = official.check("c", image="i", eval_script="e", suite=SUITE)
    ran = _folder(
        tmp_path,
        "ran",
        **{"test_output.txt": PASSING, "report.json": '{"x__x-1": {"resolved": true}}'},
    )
    assert ran.parent.name == "org__model"  # the harness writes a / in a model's name as __
    run = harness_run(official, check, store, ran)
    assert (run.applied, run.timed_out, run.stopped) == (True, False, False)
    assert official.grade(check, run, store) == "pass"
    assert harness_resolved(ran, "x__x-1") is True

    timeout = PASSING + "\n\nTimeout error: 1800 seconds exceeded."
    slow = _folder(tmp_path, "slow", **{"test_output.txt": timeout})
    run = harness_run(official, check, store, slow)
    assert (run.applied, run.timed_out, run.stopped) == (True, True, False)
    assert logical.grade(check, run, store) == "fail"  # the patch's doing, under every rule
    assert harness_resolved(slow, "x__x-1") is None

    log = "Container for x__x-1 started\n>>>>> Patch Apply Failed:\nerror: patch failed: a.py:1\n"
    rejected = _folder(tmp_path, "rejected", **{"run_instance.log": log})
    run = harness_run(official, check, store, rejected)
    assert (run.applied, run.stopped, run.usable) == (False, False, True)
    assert logical.grade(check, run, store) == "fail"

    missing = "Error in evaluating model for x__x-1: 404 Client Error: No such image: x\n"
    for folder in (
        _folder(tmp_path, "no-image", **{"run_instance.log": missing}),
        tmp_path / "never-evaluated",
    ):
        run = harness_run(official, check, store, folder)
        assert run.stopped, folder
        assert run.error is not None
        assert official.grade(check, run, store) == "fail"
        assert logical.grade(check, run, store) == "undeterminable"
    assert run.error is not None
    assert "no evaluation of this prediction" in run.error
