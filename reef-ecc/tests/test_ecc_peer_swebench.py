"""Peer check: the SWE-bench adapter grades as the public swebench package does, on the same logs.

The logs are real (every calc attempt through the original and the hardened eval scripts),
plus the synthetic world's, a few edge cases, and logs of Django's test runner graded through
the package's own ``django`` parser. The peer is swebench's end-to-end report
(``get_eval_report``: ``get_logs_eval``, ``get_eval_tests_report``, ``get_resolution_status``),
called in this process: ``scripts/setup`` installs reef-ecc's ``swebench`` extra into the
workspace's venv (the pinned peer version is in requirements-dev.txt). Where the extra is not
installed (reef-ecc's tests run alone), these tests skip, saying so.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from agent_ecc.adapters import parsers
from agent_ecc.adapters.parsers import ParserError
from agent_ecc.adapters.swebench import SWEBenchAdapter, conjunction_version
from agent_ecc.execution import PATCH_RESET, PATCH_STRATEGIES, REVERSE_CHECK
from agent_ecc.grading import grade_recorded
from agent_ecc.recompute.executor import Executor
from agent_ecc.records import Run
from agent_ecc.store import ContentStore, put_text
from agent_ecc.synthetic import BEHAVIOURS, SyntheticExecutor
from agent_ecc.versions import Check, iter_checks, verify_check

grading = pytest.importorskip(
    "swebench.harness.grading", reason="the swebench extra is not installed: reef-ecc[swebench]"
)
swebench_types = pytest.importorskip("swebench.types")

fixture_script = sys.modules["agent_ecc_test_fixtures"]


def _peer(
    logs: Sequence[str],
    suite: Mapping[str, Sequence[str]],
    parser: str,
    tmp_path: Path,
    version: str = "0",
    eval_type: str = "pass_and_fail",
) -> list[str]:
    """swebench's own verdict on each log: resolved (FULL) or not, by its end-to-end report."""
    out = []
    for index, log in enumerate(logs):
        spec = swebench_types.TestSpec(
            instance_id="peer__peer-1",
            image="",
            eval_script_list=[],
            repo="peer/peer",
            version=version,
            FAIL_TO_PASS=list(suite["FAIL_TO_PASS"]),
            PASS_TO_PASS=list(suite["PASS_TO_PASS"]),
            log_parser=parser,
            eval_type=eval_type,
        )
        path = tmp_path / f"peer-{index}.log"
        path.write_text(log)
        prediction = {
            "instance_id": "peer__peer-1",
            "model_patch": "diff",
            "model_name_or_path": "m",
        }
        report = grading.get_eval_report(spec, prediction, str(path), False)
        out.append("pass" if report["peer__peer-1"]["resolved"] else "fail")
    return out


def _ours(
    adapter: SWEBenchAdapter, check: Check, store: ContentStore, logs: Sequence[str]
) -> list[str]:
    return [
        adapter.grade(
            check,
            Run(
                check.check_id,
                check.execution,
                check.execution_identity,
                put_text(store, log),
                True,
            ),
            store,
        )
        for log in logs
    ]


def _edge_logs() -> list[str]:
    header = ">>>>> Start Test Output\n"
    footer = ">>>>> End Test Output\n"
    return [
        header + "PASSED tests/test_clamp.py::test_clamp_high\n" + footer,  # P2P absent
        header + "XFAIL tests/test_clamp.py::test_clamp_high - known\n" + footer,
        header + "ERROR tests/test_clamp.py::test_clamp_high - boom\n" + footer,
        "no markers at all\nPASSED tests/test_clamp.py::test_clamp_high\n",
        header + ">>>>> Tests Errored\n" + footer,
        header + "collected 0 items\n" + footer + ">>>>> Test Exit Code: 5\n",
    ]


def test_official_verdict_agrees_with_the_swebench_package(
    swe: Any, executor: Executor, reference: list[str], tmp_path: Path
) -> None:
    """rule: E-REPLAY-5: on every log, SWEBenchAdapter(verdict="official") decides as the
    public swebench package's end-to-end grading does (resolved only when FULL)."""
    store: ContentStore = swe.store
    adapter = SWEBenchAdapter(verdict="official")
    suite = {
        "FAIL_TO_PASS": list(fixture_script.FAIL_TO_PASS),
        "PASS_TO_PASS": list(fixture_script.PASS_TO_PASS),
    }
    logs: list[tuple[str, str]] = []
    g2 = swe.version(2, reference=reference)
    for variant, patch in swe.patches.items():
        record = swe.adapter.record(
            store=store, task_id="calc-1", trajectory_id=variant, image="w", patch=patch, runs=[]
        )
        for check in iter_checks(g2.lookup(fixture_script.TASK, fixture_script.WORLD).spec):
            out = executor.run(swe.adapter.request(check, record, store))
            if out.log is not None:
                logs.append((f"{variant}:{check.check_id}", out.log))
    for behaviour in BEHAVIOURS:
        out = SyntheticExecutor.output(
            "r", behaviour, {"fix": list(suite["FAIL_TO_PASS"]), "keep": suite["PASS_TO_PASS"]}
        )
        if out.log is not None:
            logs.append((f"synthetic:{behaviour}", out.log))
    logs += [(f"edge:{i}", log) for i, log in enumerate(_edge_logs())]
    check = adapter.check(
        "peer", image=swe.image, eval_script=swe.row["eval_script"], suite=suite, rule="official"
    )
    ours = _ours(adapter, check, store, [log for _, log in logs])
    theirs = _peer([log for _, log in logs], suite, "parse_log_pytest", tmp_path)
    disagreements = [
        (name, mine, peer)
        for (name, _), mine, peer in zip(logs, ours, theirs, strict=True)
        if mine != peer
    ]
    assert disagreements == []
    assert {"pass", "fail"} <= set(ours)
    verdicts = dict(zip((name for name, _ in logs), ours, strict=True))
    # the two 4.1 bugs are graded as the package grades them today
    assert verdicts["skip:calc-1:original"] == "fail"
    assert verdicts["forge:calc-1:original"] == "fail"
    assert verdicts["gold:calc-1:original"] == "pass"


def test_the_built_in_pytest_parser_reads_every_line_as_the_packages_does() -> None:
    """rule: E-REPLAY-5: installs without the extra grade pytest logs with the built-in parser,
    and installs with it keep the same grading identities: so the two parsers must agree, line
    for line, on pytest's summary in all its forms."""
    log_parsers = pytest.importorskip("swebench.harness.log_parsers")
    summary = "\n".join(
        [
            "PASSED tests/test_ops.py::test_add",
            "PASSED [100%]",
            "FAILED tests/test_ops.py::test_div - ZeroDivisionError: division by zero",
            "FAILED - tests/test_ops.py::test_dash",
            "FAILED tests/test_ops.py::test_p[a - b] - AssertionError",
            "ERROR tests/test_ops.py::test_fixture - RuntimeError: boom",
            "SKIPPED [2] tests/test_ops.py:40: needs numpy",
            "SKIPPED tests/test_ops.py::test_skip",
            "XFAIL tests/test_ops.py::test_known - reason",
            "XPASS tests/test_ops.py::test_lucky",
            "FAILED",
            "PASSEDtests/test_ops.py::test_glued",
        ]
    )
    logs = [summary, *_edge_logs()]
    for behaviour in BEHAVIOURS:
        out = SyntheticExecutor.output("r", behaviour, {"fix": ["t.py::a"], "keep": ["t.py::b"]})
        if out.log is not None:
            logs.append(out.log)
    theirs = log_parsers.PARSER_REGISTRY["parse_log_pytest"]
    for log in logs:
        assert parsers.parse_log_pytest(log) == theirs(log, None), log
    statuses = parsers.parse_log_pytest(summary)
    assert "[2]" not in statuses  # a skip summary's count is no test
    assert statuses["tests/test_ops.py::test_dash"] == "FAILED"


DJANGO_F2P = fixture_script.DJANGO_F2P
DJANGO_P2P = fixture_script.DJANGO_P2P
_django_log = fixture_script.django_log


def _django_logs() -> dict[str, str]:
    everything = [*DJANGO_F2P, *DJANGO_P2P]
    ok = dict.fromkeys(everything, "ok")
    (f2p,) = DJANGO_F2P
    return {
        "gold": _django_log(ok, exit_code=0),
        "fail": _django_log({**ok, f2p: "FAIL"}, exit_code=1),
        "error": _django_log({**ok, f2p: "ERROR"}, exit_code=1),
        "skipped_f2p": _django_log({**ok, f2p: "skipped"}, exit_code=0),
        "skipped_p2p": _django_log({**ok, DJANGO_P2P[0]: "skipped"}, exit_code=0),
        "broken_p2p": _django_log({**ok, DJANGO_P2P[1]: "FAIL"}, exit_code=1),
        "multiline_ok": _django_log({**ok, f2p: "multiline-ok"}, exit_code=0),
        "missing_f2p": _django_log(dict.fromkeys(DJANGO_P2P, "ok"), exit_code=0),
        "spoofed": _django_log(ok, exit_code=1),  # all "ok" printed, the runner exited 1
        "tests_errored": _django_log(ok, exit_code=0, tail=">>>>> Tests Errored"),
        "no_markers": _django_log(ok, exit_code=0).replace(">>>>> Start Test Output\n", ""),
        "nothing_ran": "\n".join(
            [">>>>> Start Test Output", "ImportError: boom", ">>>>> End Test Output"]
        ),
    }


def _django_row(store: ContentStore) -> dict[str, Any]:
    """A Django row of SWE-bench's older shape: no log_parser, no eval_type."""
    return {
        "instance_id": "django__django-11099",
        "repo": "django/django",
        "version": "3.0",
        "image": "swebench/sweb.eval.x86_64.django_1776_django-11099:latest",
        "eval_script": put_text(store, "#!/bin/bash\n./tests/runtests.py auth_tests\n"),
        "FAIL_TO_PASS": list(DJANGO_F2P),
        "PASS_TO_PASS": list(DJANGO_P2P),
    }


def test_django_logs_grade_through_the_swebench_parser_as_swebench_does(
    store: ContentStore, tmp_path: Path
) -> None:
    """rule: E-REPLAY-5: a check built from a SWE-bench row whose log parser is Django's grades
    every Django runner log as swebench's end-to-end report does, through the package's own
    parser, from the row to the recorded verdict."""
    adapter = SWEBenchAdapter()  # the one default rule: official
    row = {
        **_django_row(store),
        "FAIL_TO_PASS": '["' + DJANGO_F2P[0] + '"]',  # as SWE-bench publishes them: JSON text
        "log_parser": "parse_log_django",
        "eval_type": "pass_and_fail",
    }
    version = conjunction_version(
        [row], [], version_id="g0", world="w", store=store, adapter=adapter, runtime="docker"
    )
    (check,) = iter_checks(version.lookup(row["instance_id"], "w").spec)
    assert check.grading["parser"] == "django"
    assert check.grading["parser_package"] == f"swebench=={parsers.installed().version}"  # type: ignore[union-attr]
    assert check.grading["rule"] == "official"
    logs = _django_logs()
    ours = {}
    for name, log in logs.items():
        run = adapter.run(check, store=store, log=log, applied=True)
        record = adapter.record(
            store=store,
            task_id=row["instance_id"],
            trajectory_id=name,
            image="w",
            patch="p",
            runs=[run],
        )
        ours[name] = grade_recorded(adapter, record, check, store, grader_version="g0").verdict
    suite = {"FAIL_TO_PASS": DJANGO_F2P, "PASS_TO_PASS": DJANGO_P2P}
    theirs = dict(
        zip(logs, _peer(list(logs.values()), suite, "parse_log_django", tmp_path), strict=True)
    )
    assert ours == theirs
    # the cases are not all alike: the package's own parser decided each of them
    assert ours["gold"] == ours["multiline_ok"] == ours["skipped_p2p"] == "pass"
    assert ours["fail"] == ours["skipped_f2p"] == ours["spoofed"] == ours["nothing_ran"] == "fail"
    # the built-in pytest parser reads none of these lines: the verdict is the parser's
    pytest_check = adapter.check("p", image="i", eval_script=row["eval_script"], suite=suite)
    assert _ours(adapter, pytest_check, store, [logs["gold"]]) == ["fail"]


def test_the_parser_package_version_is_part_of_the_grading_identity(store: ContentStore) -> None:
    """rule: E-REPLAY-5: grading with the package's parser names its version: another version
    is another grading identity (a new epoch), and a check that names a version not installed
    is refused at grading with what to do, never graded by the installed one."""
    adapter = SWEBenchAdapter()
    suite = {"FAIL_TO_PASS": list(DJANGO_F2P), "PASS_TO_PASS": list(DJANGO_P2P)}
    check = adapter.check("d", image="i", eval_script="e", suite=suite, parser="django")
    installed = parsers.installed()
    assert installed is not None
    assert check.grading["parser_package"] == installed.pin
    other = {**check.grading, "parser_package": "swebench==4.0.4"}
    moved = Check(
        check.check_id, check.adapter, check.execution, other, check.execution_identity, ""
    )
    assert adapter.grading_identity(moved) != check.grading_identity
    moved = Check(
        check.check_id,
        check.adapter,
        check.execution,
        other,
        check.execution_identity,
        adapter.grading_identity(moved),
    )
    verify_check(moved, {"swebench": adapter})  # its identity is its own: a valid epoch body
    run = Run(
        "d",
        check.execution,
        check.execution_identity,
        put_text(store, _django_logs()["gold"]),
        True,
    )
    with pytest.raises(
        ParserError, match=r"swebench==4\.0\.4.*swebench==5|install swebench==4\.0\.4"
    ):
        adapter.grade(moved, run, store)
    assert adapter.grade(check, run, store) == "pass"


def test_a_parser_that_reads_the_instance_gets_the_rows_repo_and_version(
    store: ContentStore, tmp_path: Path
) -> None:
    """rule: E-REPLAY-5: some of the package's parsers read the instance (lighthouse's picks its
    runner by the row's version): the check carries what they read, so the same log grades
    as swebench grades it for each version, and the two versions grade it differently."""
    adapter = SWEBenchAdapter()
    suite = {"FAIL_TO_PASS": ["reports the score"], "PASS_TO_PASS": []}
    log = "\n".join(
        [
            ">>>>> Start Test Output",
            "running 1 test files",
            "  audits",
            "    \u2714 reports the score (5ms)",
            "",
            "  1 passing (6ms)",
            ">>>>> End Test Output",
            ">>>>> Test Exit Code: 0",
        ]
    )
    verdicts = {}
    instance = "GoogleChrome__lighthouse-1"
    for version in ("10.0", "2.0"):  # mocha's output is read under 10.0, not under 2.0
        row = {
            "instance_id": instance,
            "repo": "GoogleChrome/lighthouse",
            "version": version,
            "image": "i",
            "eval_script": put_text(store, "#!/bin/bash\nyarn mocha\n"),
            "log_parser": "parse_log_lighthouse",
            "eval_type": "pass_and_fail",
            **suite,
        }
        built = conjunction_version(
            [row], [], version_id="g", world="w", store=store, adapter=adapter
        )
        (check,) = iter_checks(built.lookup(instance, "w").spec)
        assert check.grading["parser_context"]["version"] == version
        (ours,) = _ours(adapter, check, store, [log])
        (theirs,) = _peer([log], suite, "parse_log_lighthouse", tmp_path, version=version)
        assert ours == theirs, version
        verdicts[version] = ours
    assert verdicts == {"10.0": "pass", "2.0": "fail"}


def test_a_row_without_a_log_parser_takes_its_repositorys_parser_as_swebench_does(
    store: ContentStore, tmp_path: Path
) -> None:
    """rule: E-REPLAY-5: a row of SWE-bench's older shape (repo and version, no log_parser) is
    graded by its repository's parser from the package's own tables, never by pytest's: a
    Django gold run passes, as swebench grades it."""
    adapter = SWEBenchAdapter()
    row = _django_row(store)
    version = conjunction_version(
        [row], [], version_id="g0", world="w", store=store, adapter=adapter, runtime="docker"
    )
    (check,) = iter_checks(version.lookup(row["instance_id"], "w").spec)
    assert check.grading["parser"] == "django"
    assert check.grading["parser_context"] == {
        "instance_id": row["instance_id"], "repo": "django/django", "version": "3.0"
    }  # fmt: skip
    assert "eval_type" not in check.grading  # pass_and_fail: the body is as it always was
    logs = _django_logs()
    suite = {"FAIL_TO_PASS": DJANGO_F2P, "PASS_TO_PASS": DJANGO_P2P}
    theirs = _peer(list(logs.values()), suite, "parse_log_django", tmp_path)
    assert _ours(adapter, check, store, list(logs.values())) == theirs
    assert _ours(adapter, check, store, [logs["gold"]]) == ["pass"]
    # Their repository's parser is pytest's for some: the same check a log_parser row makes.
    older = {**row, "instance_id": "pallets__flask-1", "repo": "pallets/flask", "version": "2.0"}
    named = {**older, "log_parser": "parse_log_pytest", "eval_type": "pass_and_fail"}
    built = [
        next(iter_checks(
            conjunction_version([r], [], version_id="g", world="w", store=store, adapter=adapter)
            .lookup("pallets__flask-1", "w").spec
        ))
        for r in (older, named)
    ]  # fmt: skip
    assert built[0].grading == built[1].grading
    assert built[0].grading_identity == built[1].grading_identity


@pytest.mark.parametrize(
    ("change", "refused"),
    [
        ({"repo": "someone/unknown"}, r"has no parser for repo 'someone/unknown'"),
        ({"repo": "cypress-io/cypress"}, r"not in its PARSER_REGISTRY"),
        ({"version": None}, r"has no version: swebench's make_test_spec needs"),
        ({"log_parser": "parse_log_django"}, r"names log_parser 'parse_log_django' but no eval"),
        ({"log_parser": "parse_log_djang", "eval_type": "pass_and_fail"}, r"'parse_log_djang'"),
        ({"eval_type": "pass_or_fail"}, r"eval_type 'pass_or_fail' is not SWE-bench's"),
    ],
)
def test_a_row_swebench_refuses_is_refused_naming_why(
    store: ContentStore, change: Mapping[str, Any], refused: str
) -> None:
    row = {
        "instance_id": "x__x-1",
        "repo": "django/django",
        "version": "3.0",
        "image": "i",
        "eval_script": "e",
        "FAIL_TO_PASS": ["a"],
        "PASS_TO_PASS": [],
        **change,
    }
    with pytest.raises(ValueError, match=refused):  # ParserError is a ValueError too
        conjunction_version(
            [row], [], version_id="g", world="w", store=store, adapter=SWEBenchAdapter()
        )


def _marked_logs() -> dict[str, str]:
    def log(body: str, exit_code: int) -> str:
        return (
            f">>>>> Start Test Output\n{body}\n>>>>> End Test Output\n"
            f">>>>> Test Exit Code: {exit_code}\n"
        )

    return {
        "clean": log("Started\n..........\n\n10 specs, 0 failures", 0),
        "f2p_fails": log("1) Marked Code should render fences\n10 specs, 1 failure", 1),
        "p2p_fails": log("1) Marked Lexer should lex tables\n10 specs, 1 failure", 1),
        "other_fails": log("1) Marked Misc should not matter\n10 specs, 1 failure", 1),
        "never_ran": log("Executed 0 of 0", 1),
        "errored": log("Error: Cannot find module 'marked'", 1),
    }


def test_a_fail_only_repository_is_graded_as_swebench_grades_it(
    store: ContentStore, tmp_path: Path
) -> None:
    """rule: E-REPLAY-5: a repository whose parser records only failures (SWE-bench's
    FAIL_ONLY_REPOS) is graded by swebench's fail-only report, whether the row names its
    eval_type or, of the older shape, takes it from the package's list."""
    adapter = SWEBenchAdapter()
    suite = {
        "FAIL_TO_PASS": ["Marked Code should render fences"],
        "PASS_TO_PASS": ["Marked Lexer should lex tables"],
    }
    base = {"instance_id": "markedjs__marked-1", "version": "1.2", "image": "i",
            "eval_script": put_text(store, "npm test\n"), **suite}  # fmt: skip
    rows = [
        {**base, "repo": "markedjs/marked"},  # older: parser and eval_type by repo
        {**base, "repo": "markedjs/marked", "log_parser": "parse_log_marked"}
        | {"eval_type": "fail_only"},
    ]
    logs = _marked_logs()
    theirs = _peer(list(logs.values()), suite, "parse_log_marked", tmp_path,
                   eval_type="fail_only")  # fmt: skip
    for row in rows:
        built = conjunction_version(
            [row], [], version_id="g", world="w", store=store, adapter=adapter
        )
        (check,) = iter_checks(built.lookup("markedjs__marked-1", "w").spec)
        assert check.grading["eval_type"] == "fail_only"
        assert check.grading["parser"] == "marked"
        assert _ours(adapter, check, store, list(logs.values())) == theirs
    assert dict(zip(logs, theirs, strict=True)) == {
        "clean": "pass", "f2p_fails": "fail", "p2p_fails": "fail", "other_fails": "pass",
        "never_ran": "fail", "errored": "fail",
    }  # fmt: skip
    # The report type is part of the grading identity: the same suite graded pass_and_fail
    # is another grader.
    both = adapter.check("c", image="i", eval_script="e", suite=suite, parser="marked")
    assert both.grading_identity != check.grading_identity


def test_patches_are_applied_with_swebenchs_own_strategies_in_its_order() -> None:
    """The executors' strategies are the harness's (``run_evaluation.GIT_APPLY_CMDS``), its
    reset between them and its check that a patch is applied already."""
    run_evaluation = pytest.importorskip("swebench.harness.run_evaluation")
    assert [" ".join(s) for s in PATCH_STRATEGIES] == run_evaluation.GIT_APPLY_CMDS
    source = Path(run_evaluation.__file__).read_text()
    assert " ; ".join(" ".join(c) for c in PATCH_RESET) in source
    assert " ".join(REVERSE_CHECK) in source
