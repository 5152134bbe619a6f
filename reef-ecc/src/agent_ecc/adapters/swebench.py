"""The SWE-bench adapter: checks that apply a patch, run an eval script and grade its test log.

Rules (contract section 3), each named in a check's grading and in its grading identity;
:data:`DEFAULT_RULE` (``official``) is the rule of a check built without one, here and in
:func:`conjunction_version`:

- ``official``: the public ``swebench`` package's end-to-end report (5.0.2): markers, the
  recorded exit code, PASS_AND_FAIL statuses; an infrastructure error is a fail (the scorer
  counts such fails apart: ``decision.stats["infra_fails"]``).
- ``logical``: ``official`` with infrastructure errors kept out of the verdict.
- ``swebench_4_1``: the report as 4.1 made it: a skipped FAIL_TO_PASS test is no failure and a
  log whose exit code is non-zero with no failed test passes (what epoch 0 of the lifecycle
  grades with, so that a grader fix has something to fix).
- ``reference_set``: every test of the reference set G passes (SWE-ABS hardened suites).

The log parser a check names is built in (``pytest``) or the ``swebench`` package's own, its
version part of the grading identity (:mod:`agent_ecc.adapters.parsers`). A SWE-bench row's
parser and report type are resolved as swebench resolves them (:func:`row_grading`): the row's
``log_parser`` and ``eval_type``, or, for a row of SWE-bench's older shape that names no parser,
its repository's parser and report type from the package's own tables; a row swebench would
refuse is refused. A check of a ``fail_only`` repository is graded by swebench's fail-only
report (a test fails only when the log says it failed). A check runs in a git snapshot from the
content store (runtime ``git``) or in a container image (runtime ``docker``, see
:mod:`agent_ecc.recompute.container`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from agent_ecc.adapters import parsers
from agent_ecc.adapters.rules import DEFAULT_RULE, RULES
from agent_ecc.execution import (
    RUNTIMES,
    ExecRequest,
    RawOutput,
    request_identity,
    tried_as_swebench,
)
from agent_ecc.grading import grade_recorded
from agent_ecc.records import Application, ExecutionRecord, Run, Verdict
from agent_ecc.store import ContentStore, get_json, get_text, is_blank, put_json, put_text
from agent_ecc.versions import (
    AllOf,
    Check,
    Entry,
    GraderVersion,
    execution_identity,
    grading_identity,
)

__all__ = [
    "DEFAULT_RULE",
    "EVAL_TYPES",
    "ROW_KEYS",
    "RULES",
    "RowGrading",
    "SWEBenchAdapter",
    "conjunction_version",
    "filter_patch",
    "grade_recorded",
    "reference_set",
    "row_grading",
]

#: The repository folder in SWE-bench's images, where a container check applies the patch.
CONTAINER_WORKDIR: Final = "/testbed"

APPLY_PATCH_FAIL: Final = ">>>>> Patch Apply Failed"
RESET_FAILED: Final = ">>>>> Reset Failed"
TESTS_ERROR: Final = ">>>>> Tests Errored"
TESTS_TIMEOUT: Final = ">>>>> Tests Timed Out"
START_TEST_OUTPUT: Final = ">>>>> Start Test Output"
END_TEST_OUTPUT: Final = ">>>>> End Test Output"
TEST_EXIT_CODE: Final = ">>>>> Test Exit Code"

#: SWE-bench's report types (its ``EvalType``): every test must pass (``pass_and_fail``), or
#: must not fail (``fail_only``, for parsers that record failures only).
EVAL_TYPES: Final = ("pass_and_fail", "fail_only")
#: What swebench 5.0.2's ``make_test_spec`` reads of every row, besides ``log_parser`` and
#: ``eval_type`` (a row without one of them is refused there: a ``KeyError``).
ROW_KEYS: Final = (
    "instance_id",
    "image",
    "eval_script",
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
    "repo",
    "version",
)

_PASSING: Final = ("PASSED", "XFAIL")
_EXIT_CODE = re.compile(rf"{re.escape(TEST_EXIT_CODE)}:\s*(-?\d+)")
# Evidence that a runner ran although no status was parsed (swebench 5.0.2's list, verbatim).
_SUITE_RAN = re.compile(
    r"Executed [1-9]\d* of \d+"
    r"|TOTAL: [1-9]\d* (?:SUCCESS|FAILED)"
    r"|[1-9]\d* passing"
    r"|Tests:\s+[1-9]\d*"
    r"|Test Suites:\s+(?:\d+ \w+, )*[1-9]\d* total"
    r"|^# tests [1-9]\d*"
    r"|[1-9]\d* specs?, \d+ failures?"
    r"|': ok$",
    re.M,
)


def _resolve(case: str, statuses: Mapping[str, str]) -> str | None:
    # Truncated parametrized ids match by prefix when the candidates agree (as swebench does).
    if case in statuses:
        return case
    if case.count("[") > case.count("]"):
        matches = [k for k in statuses if k.startswith(case)]
        if matches and len({statuses[k] in _PASSING for k in matches}) == 1:
            return matches[0]
    return None


def _passed(case: str, statuses: Mapping[str, str]) -> bool:
    key = _resolve(case, statuses)
    return key is not None and statuses[key] in _PASSING


def _status(case: str, statuses: Mapping[str, str]) -> str | None:
    key = _resolve(case, statuses)
    return None if key is None else statuses[key]


def _log_statuses(
    log: str, grading: Mapping[str, Any], *, check_exit_code: bool
) -> dict[str, str] | None:
    """The statuses of a log by the parser ``grading`` names, or None when the log describes no
    valid test run."""
    if any(code in log for code in (APPLY_PATCH_FAIL, RESET_FAILED, TESTS_ERROR, TESTS_TIMEOUT)):
        return None
    if START_TEST_OUTPUT not in log or END_TEST_OUTPUT not in log:
        return None
    inside = log.split(START_TEST_OUTPUT)[1].split(END_TEST_OUTPUT)[0]
    statuses = parsers.parse(grading, inside) or parsers.parse(grading, log)
    if not statuses and not _SUITE_RAN.search(log):
        return None
    match = _EXIT_CODE.search(log)
    exit_code = int(match.group(1)) if match else None
    if (
        check_exit_code
        and exit_code not in (None, 0)
        and statuses
        and not any(s in ("FAILED", "ERROR") for s in statuses.values())
    ):
        return None
    return statuses


def _fail_only_verdict(statuses: Mapping[str, str], suite: Mapping[str, Any]) -> Verdict:
    """SWE-bench's FAIL_ONLY report and resolution: a test of either list fails only when the
    log names it exactly as FAILED (an absent, skipped or erroring test is a success); resolved
    only when none fails."""
    for key in ("FAIL_TO_PASS", "PASS_TO_PASS"):
        if any(statuses.get(case) == "FAILED" for case in suite.get(key, ())):
            return "fail"
    return "pass"


def _report_verdict(
    statuses: Mapping[str, str], suite: Mapping[str, Any], *, skipped_f2p_fails: bool
) -> Verdict:
    """SWE-bench's PASS_AND_FAIL report and resolution: resolved only when FULL."""
    failing = ("FAILED", "ERROR", "SKIPPED") if skipped_f2p_fails else ("FAILED", "ERROR")
    for case in suite.get("FAIL_TO_PASS", ()):
        status = _status(case, statuses)
        if not _passed(case, statuses) and (status is None or status in failing):
            return "fail"
    for case in suite.get("PASS_TO_PASS", ()):
        status = _status(case, statuses)
        maintained = _passed(case, statuses) or status == "SKIPPED"
        if not maintained and (status is None or status in ("FAILED", "ERROR")):
            return "fail"
    return "pass"


class SWEBenchAdapter:
    """Checks of SWE-bench tasks; ``verdict`` is the rule of a check that names none."""

    name: Final = "swebench"

    def __init__(self, verdict: str = DEFAULT_RULE) -> None:
        if verdict not in RULES:
            raise ValueError(
                f"unknown SWE-bench verdict rule {verdict!r}; known: {', '.join(RULES)}"
            )
        self.verdict = verdict

    def rule(self, check: Check) -> str:
        """The rule grading ``check``: its own, else this adapter's default."""
        rule = check.grading.get("rule") or self.verdict
        if rule not in RULES:
            raise ValueError(f"check {check.check_id!r} names unknown rule {rule!r}")
        return str(rule)

    def check(
        self,
        check_id: str,
        *,
        image: str,
        eval_script: str,
        suite: Mapping[str, Any],
        rule: str | None = None,
        parser: str = "pytest",
        parser_context: Mapping[str, str] | None = None,
        eval_type: str = "pass_and_fail",
        patch_exclude: str | None = None,
        timeout_s: float = 60.0,
        runtime: str = "git",
        workdir: str = CONTAINER_WORKDIR,
    ) -> Check:
        """A check with its identities derived.

        :param image: runtime ``git``: the store key of the repository snapshot (a git
            bundle); runtime ``docker``: the container image reference (pin it by digest,
            ``name@sha256:...``, so that the execution identity names one image).
        :param eval_script: the store key of the eval script.
        :param parser: ``pytest`` (built in) or a parser of the ``swebench`` package, by its
            SWE-bench name (``django`` or ``parse_log_django``); refused when unknown.
        :param parser_context: what some of the package's parsers read of the instance
            (``instance_id``, ``repo``, ``version``).
        :param eval_type: SWE-bench's report type (:data:`EVAL_TYPES`); ``fail_only`` is
            written into the grading body (and so its identity), ``pass_and_fail`` is not.
        :param workdir: runtime ``docker``: the repository folder in the image.
        :raises ParserError: for an unknown parser (naming the known ones).
        :raises ValueError: for an unknown rule, report type or runtime.
        """
        if rule is not None and rule not in RULES:
            raise ValueError(f"unknown SWE-bench rule {rule!r}; known: {', '.join(RULES)}")
        if eval_type not in EVAL_TYPES:
            raise ValueError(
                f"unknown SWE-bench eval_type {eval_type!r}; known: {', '.join(EVAL_TYPES)}"
            )
        if runtime not in RUNTIMES:
            raise ValueError(f"unknown runtime {runtime!r}; known: {', '.join(RUNTIMES)}")
        execution: dict[str, Any] = {
            "image": image,
            "eval_script": eval_script,
            "timeout_s": timeout_s,
        }
        if runtime != "git":  # a git check's body (and identity) is as it always was
            execution["runtime"] = runtime
            execution["workdir"] = workdir
        if patch_exclude is not None:
            execution["patch_exclude"] = patch_exclude
        ref = parsers.resolve(parser)
        grading: dict[str, Any] = {"parser": ref.name, "suite": dict(suite)}
        if ref.package is not None:
            grading["parser_package"] = ref.package
            context = {k: str(v) for k, v in (parser_context or {}).items() if v is not None}
            unknown = set(context) - set(parsers.CONTEXT_KEYS)
            if unknown:
                raise ValueError(
                    f"parser_context keys {sorted(unknown)} unknown; known: "
                    f"{', '.join(parsers.CONTEXT_KEYS)}"
                )
            if context:
                grading["parser_context"] = context
        if rule is not None:
            grading["rule"] = rule
        if eval_type != "pass_and_fail":  # a pass_and_fail check's body is as it always was
            grading["eval_type"] = eval_type
        partial = Check(
            check_id, self.name, execution, grading, execution_identity(self.name, execution), ""
        )
        return Check(
            check_id,
            self.name,
            execution,
            grading,
            partial.execution_identity,
            self.grading_identity(partial),
        )

    def grading_identity(self, check: Check) -> str:
        """The identity of the rule, parser (and its package's version) and suite grading
        ``check``."""
        parsers.check_named(check.grading)
        return grading_identity(self.name, self.rule(check), check.grading)

    def grade(self, check: Check, run: Run, store: ContentStore) -> Verdict:
        """The verdict of ``check``'s rule on ``run`` (contract section 3).

        :raises ParserError: when the check's parser cannot run here (its package missing or at
            another version than the one the check names).
        """
        rule = self.rule(check)
        if run.stopped:
            return "fail" if rule in ("official", "swebench_4_1") else "undeterminable"
        if not run.applied or run.timed_out or run.log is None:
            return "fail"
        log = get_text(store, run.log)
        statuses = _log_statuses(log, check.grading, check_exit_code=rule != "swebench_4_1")
        if statuses is None:
            return "fail"
        suite = check.grading["suite"]
        if rule == "reference_set":
            return "pass" if all(_passed(t, statuses) for t in suite["reference_set"]) else "fail"
        if check.grading.get("eval_type") == "fail_only":
            return _fail_only_verdict(statuses, suite)
        return _report_verdict(statuses, suite, skipped_f2p_fails=rule != "swebench_4_1")

    def _patch_for(self, check: Check, record: ExecutionRecord, store: ContentStore) -> str:
        exclude = check.execution.get("patch_exclude")
        if not exclude:
            return record.patch
        filtered, _ = filter_patch(get_text(store, record.patch), get_json(store, exclude))
        return put_text(store, filtered)

    def request(self, check: Check, record: ExecutionRecord, store: ContentStore) -> ExecRequest:
        """The request executing ``check`` on ``record``'s patch, filtered as the check says."""
        patch = self._patch_for(check, record, store)
        return ExecRequest(
            request_id=request_identity(check.execution_identity, patch),
            adapter=self.name,
            check_id=check.check_id,
            execution=dict(check.execution),
            execution_identity=check.execution_identity,
            patch=patch,
        )

    def evidence(
        self, check: Check, record: ExecutionRecord, store: ContentStore
    ) -> Verdict | None:
        """An empty patch fails; so does one that genuinely did not apply on the same image,
        trying everything swebench's harness tries (a record of fewer strategies, an earlier
        executor's, is no evidence: the harness might have applied it)."""
        if is_blank(store, record.patch):
            return "fail"
        if check.execution.get("patch_exclude"):
            return None
        for run in record.runs:
            if (
                not run.applied
                and run.usable
                and run.application is not None
                and tried_as_swebench(run.application)
                and run.execution.get("image") == check.execution.get("image")
                and not run.execution.get("patch_exclude")
            ):
                return "fail"
        return None

    def run(
        self,
        check: Check,
        *,
        store: ContentStore,
        log: str | None,
        applied: bool,
        timed_out: bool = False,
        error: str | None = None,
        application: Application | None = None,
        exit_code: int | None = None,
    ) -> Run:
        """One run of ``check`` from what the executor reported (the log goes to ``store``)."""
        return Run(
            check_id=check.check_id,
            execution=dict(check.execution),
            execution_identity=check.execution_identity,
            log=None if log is None else put_text(store, log),
            applied=applied,
            exit_code=exit_code,
            timed_out=timed_out,
            error=error,
            application=application,
        )

    def run_from_output(self, check: Check, output: RawOutput, store: ContentStore) -> Run:
        """One run of ``check`` from a backend's raw output."""
        return self.run(
            check,
            store=store,
            log=output.log,
            applied=output.applied,
            timed_out=output.timed_out,
            error=output.error,
            application=output.application,
            exit_code=output.exit_code,
        )

    def record(
        self,
        *,
        store: ContentStore,
        task_id: str,
        trajectory_id: str,
        image: str,
        patch: str,
        runs: Sequence[Run],
    ) -> ExecutionRecord:
        """The record of one attempt (``patch``: its text, put in ``store``)."""
        return ExecutionRecord(
            record_id=trajectory_id,
            task_id=task_id,
            world=image,
            patch=put_text(store, patch),
            runs=tuple(runs),
        )


_DIFF_HEADER = re.compile(r"^diff --git a/(\S+) b/(\S+)", re.M)


def filter_patch(patch: str, paths: Sequence[str]) -> tuple[str, list[str]]:
    """``patch`` without its diffs of ``paths``; also the paths removed (E-GRADE-3)."""
    excluded = set(paths)
    starts = [m.start() for m in _DIFF_HEADER.finditer(patch)]
    if not starts:
        return patch, []
    kept = [patch[: starts[0]]]
    removed: list[str] = []
    for start, end in zip(starts, [*starts[1:], len(patch)], strict=True):
        block = patch[start:end]
        match = _DIFF_HEADER.match(block)
        assert match is not None
        if match.group(1) in excluded or match.group(2) in excluded:
            removed.append(match.group(2))
        else:
            kept.append(block)
    return "".join(kept), removed


def patch_paths(patch: str) -> list[str]:
    """The paths a patch changes."""
    return [m.group(2) for m in _DIFF_HEADER.finditer(patch)]


def reference_set(*gold_logs: str, parser: str = "pytest") -> list[str]:
    """The tests passing in every gold run (E-GRADE-5: two runs make G; a flaky test drops out).

    ``parser``: as :meth:`SWEBenchAdapter.check` takes it.
    """
    if len(gold_logs) < 2:
        raise ValueError("a reference set needs at least two gold runs")
    ref = parsers.resolve(parser)
    grading = {"parser": ref.name, "parser_package": ref.package}
    sets = []
    for log in gold_logs:
        statuses = _log_statuses(log, grading, check_exit_code=True)
        if statuses is None:
            raise ValueError("a gold run has no valid test output; its reference set is undefined")
        sets.append({t for t, s in statuses.items() if s in _PASSING})
    return sorted(set.intersection(*sets))


def _tests(row: Mapping[str, Any], key: str) -> list[str]:
    # SWE-bench's published rows keep the lists as JSON text; rows built by hand as lists.
    value = row[key]
    return list(json.loads(value) if isinstance(value, str) else value)


@attrs.frozen
class RowGrading:
    """How a SWE-bench row is graded: its parser (as :meth:`SWEBenchAdapter.check` takes it),
    its report type, and what the package's parsers read of the instance."""

    parser: str
    eval_type: str
    context: dict[str, str]


def _missing(row: Mapping[str, Any], keys: Sequence[str]) -> list[str]:
    return [key for key in keys if row.get(key) is None or row.get(key) == ""]


def row_grading(row: Mapping[str, Any]) -> RowGrading:
    """The parser and report type of ``row``, resolved as swebench resolves them.

    A row of SWE-bench 5's shape names both: ``log_parser`` (a parser the package knows, or
    ``parse_log_pytest``, built in) and ``eval_type`` (:data:`EVAL_TYPES`), and swebench 5.0.2
    refuses a row without ``eval_type``. A row of the older shape names no ``log_parser``:
    swebench then took the parser by the row's ``repo`` (and its specs by ``repo`` and
    ``version``), and graded ``fail_only`` the repositories it lists in ``FAIL_ONLY_REPOS``;
    the installed package's own tables say both here. Every row needs the keys of
    :data:`ROW_KEYS`, as swebench's ``make_test_spec`` does; a parser is never guessed.

    :raises ParserError: for a parser neither we nor the package know, an older row whose
        repository has no parser in the package's tables, or an older row graded without the
        package installed.
    :raises ValueError: naming the row and what is missing or wrong.
    """
    instance = row.get("instance_id")
    missing = _missing(row, ROW_KEYS)
    if missing:
        raise ValueError(
            f"row {instance!r} has no {', '.join(missing)}: swebench's make_test_spec needs "
            f"every one of {', '.join(ROW_KEYS)}"
        )
    repo = str(row["repo"])
    context = {key: str(row[key]) for key in parsers.CONTEXT_KEYS}
    named = row.get("log_parser")
    eval_type = row.get("eval_type")
    if named:
        if not eval_type:
            raise ValueError(
                f"row {instance!r} names log_parser {named!r} but no eval_type: swebench 5 "
                f"refuses such a row (give {' or '.join(EVAL_TYPES)})"
            )
        parser = str(named)
    else:
        found = parsers.installed()
        if found is None:
            raise parsers.ParserError(
                f"row {instance!r} names no log_parser: swebench takes the parser of repo "
                f"{repo!r} from its own tables, which need the package: {parsers.INSTALL_HINT} "
                "(or give the row its log_parser)"
            )
        if repo not in found.repo_parsers:
            raise parsers.ParserError(
                f"row {instance!r} names no log_parser and {found.pin} has no parser for repo "
                f"{repo!r} (its MAP_REPO_TO_PARSER tables): give the row its log_parser"
            )
        resolved = found.repo_parsers[repo]
        if resolved is None:
            raise parsers.ParserError(
                f"row {instance!r}: {found.pin}'s parser for repo {repo!r} is not in its "
                "PARSER_REGISTRY, so swebench cannot grade it by name: give the row a "
                "log_parser the registry holds"
            )
        parser = resolved
        if not eval_type:
            eval_type = "fail_only" if repo in found.fail_only_repos else "pass_and_fail"
    if eval_type not in EVAL_TYPES:
        raise ValueError(
            f"row {instance!r}: eval_type {eval_type!r} is not SWE-bench's; known: "
            f"{', '.join(EVAL_TYPES)}"
        )
    return RowGrading(parser, str(eval_type), context)


def conjunction_version(
    rows: Sequence[Mapping[str, Any]],
    hardened: Sequence[Mapping[str, Any]],
    *,
    version_id: str,
    world: str,
    store: ContentStore,
    adapter: SWEBenchAdapter,
    rule: str | None = None,
    timeout_s: float = 60.0,
    runtime: str = "git",
) -> GraderVersion:
    """A version whose spec per row is its original suite, AND its hardened suite where
    ``hardened`` has one (SWE-ABS).

    ``rows``: SWE-bench rows (``instance_id``, ``image``, ``eval_script``, ``FAIL_TO_PASS``,
    ``PASS_TO_PASS``, lists or JSON text; store keys for the eval scripts, and for the images
    under runtime ``git``; image references under runtime ``docker``; ``repo`` and
    ``version``), with their ``log_parser`` and ``eval_type`` resolved as swebench resolves
    them (:func:`row_grading`: a row it would refuse is refused here).
    ``hardened``: per instance the hardened ``eval_script`` key, its ``test_patch`` text and its
    ``reference_set`` G; the hardened suite is graded under the ``reference_set`` rule and
    filters the patch of the test patch's paths. ``rule``: the original suites' rule, by
    default the adapter's (:data:`DEFAULT_RULE` unless it was built with another), written into
    every check so that the version's identities do not depend on who grades it.
    """
    rule = adapter.verdict if rule is None else rule
    by_id = {h["instance_id"]: h for h in hardened}
    entries = []
    for row in rows:
        resolved = row_grading(row)
        parser, context = resolved.parser, resolved.context
        original = adapter.check(
            f"{row['instance_id']}:original",
            image=row["image"],
            eval_script=row["eval_script"],
            suite={
                "FAIL_TO_PASS": _tests(row, "FAIL_TO_PASS"),
                "PASS_TO_PASS": _tests(row, "PASS_TO_PASS"),
            },
            rule=rule,
            parser=parser,
            parser_context=context,
            eval_type=resolved.eval_type,
            timeout_s=timeout_s,
            runtime=runtime,
        )
        spec: Check | AllOf = original
        extra = by_id.get(row["instance_id"])
        if extra is not None:
            exclude = put_json(store, sorted(patch_paths(extra["test_patch"])))
            hardened_check = adapter.check(
                f"{row['instance_id']}:hardened",
                image=row["image"],
                eval_script=extra["eval_script"],
                suite={"reference_set": sorted(extra["reference_set"])},
                rule="reference_set",
                parser=parser,
                parser_context=context,
                patch_exclude=exclude,
                timeout_s=timeout_s,
                runtime=runtime,
            )
            spec = AllOf((original, hardened_check))
        entries.append(Entry(task=row["instance_id"], world=world, spec=spec))
    return GraderVersion(version_id=version_id, entries=tuple(entries))
