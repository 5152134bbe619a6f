"""Requests to execute a check, and what a backend answers: raw outputs, never verdicts.

A request is identified by what runs and on which patch (contract section 1), so two requests
with one identity are the same execution, executed once per cache. An answer is a
:class:`RawOutput` (the log and run facts), an :class:`InfraFailure` (no verdict can come from
it) or :class:`Pending` (not finished when the deadline came).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, TypeAlias

import attrs

from agent_ecc.digests import digest
from agent_ecc.records import Application

#: Where a check's eval script runs: ``git``, a clone of the git snapshot the content store
#: holds under the check's ``image`` key; ``docker``, a container of the image its ``image``
#: names. A check's execution body names its runtime only when it is not ``git``.
RUNTIMES: Final = ("git", "docker")


#: How an executor applies a patch: swebench 5.0.2's harness's commands (``run_evaluation``'s
#: ``GIT_APPLY_CMDS``), in its order, each followed by the patch file's path. The first that
#: exits 0 applies the patch; before every attempt after the first, :data:`PATCH_RESET` puts
#: the tree back as it was.
PATCH_STRATEGIES: Final = (
    ("git", "apply", "--verbose"),
    ("git", "apply", "--verbose", "--3way"),
    ("git", "apply", "--verbose", "--reject"),
    ("patch", "--batch", "--forward", "--fuzz=5", "-p1", "-i"),
)
#: What the harness runs between two attempts (``git checkout -- . ; git clean -fd``): a failed
#: attempt, notably ``--reject``, leaves part of the patch behind.
PATCH_RESET: Final = (("git", "checkout", "--", "."), ("git", "clean", "-fd"))
#: Run after every strategy failed, on the tree the last one left: exiting 0, the patch is
#: applied all the same (the harness's "verified already applied"). After a strategy applied
#: the patch it says whether the reverse applies (:attr:`Application.reverse_check`).
REVERSE_CHECK: Final = ("git", "apply", "--check", "--reverse")
#: The attempts of an application that tried every strategy, as its record names them.
STRATEGY_NAMES: Final = tuple(" ".join(strategy) for strategy in PATCH_STRATEGIES)
#: The attempt of a run that SWE-bench's harness itself recorded (it tried its own strategies).
HARNESS_ATTEMPT: Final = "swebench harness"

#: Runs one command in the repository's working tree: its exit code, or ``None`` when it did
#: not finish (killed, or past its time).
Command: TypeAlias = Callable[[Sequence[str]], int | None]


def apply_patch(run: Command, patch_file: str) -> Application:
    """Apply the patch at ``patch_file`` as swebench's harness does (:data:`PATCH_STRATEGIES`,
    :data:`PATCH_RESET`, :data:`REVERSE_CHECK`), each command run by ``run`` in the working
    tree, and record every attempt: its command and exit code in ``steps``.

    Any sandbox can apply patches with it: ``run`` is its way to execute a command in the
    repository (a subprocess, a container's exec, a SWE-ReX session). A command that does not
    finish stops the application: no verdict (``executor_error``).
    """
    attempts: list[str] = []
    steps: list[str] = []

    def stopped(name: str) -> Application:
        return Application(
            applied=False,
            attempts=tuple(attempts),
            steps=(*steps, f"{name}: stopped"),
            executor_error=f"{name} did not finish",
        )

    for index, (strategy, name) in enumerate(zip(PATCH_STRATEGIES, STRATEGY_NAMES, strict=True)):
        if index:
            for reset in PATCH_RESET:
                run(reset)  # as the harness: its outcome is not checked
        attempts.append(name)
        code = run([*strategy, patch_file])
        if code is None or code < 0:
            return stopped(name)
        steps.append(f"{name}: exit {code}")
        if code == 0:
            reverse = run([*REVERSE_CHECK, patch_file])
            return Application(
                applied=True,
                attempts=tuple(attempts),
                steps=tuple(steps),
                reverse_check=reverse == 0,
            )
    check = " ".join(REVERSE_CHECK)
    reverse = run([*REVERSE_CHECK, patch_file])
    if reverse is None or reverse < 0:
        return stopped(check)
    steps.append(f"{check}: exit {reverse}")
    return Application(
        applied=reverse == 0,
        attempts=tuple(attempts),
        steps=tuple(steps),
        reverse_check=True if reverse == 0 else None,
    )


def tried_as_swebench(application: Application) -> bool:
    """Whether ``application`` tried what swebench's harness tries: every strategy of
    :data:`PATCH_STRATEGIES`, or the harness itself. Only such a record's "does not apply" is
    evidence that the harness would not apply the patch either."""
    return application.attempts in (STRATEGY_NAMES, (HARNESS_ATTEMPT,))


def runtime_of(execution: Mapping[str, Any]) -> str:
    """The runtime an execution body runs in."""
    return str(execution.get("runtime", "git"))


def request_identity(execution_identity: str, patch: str) -> str:
    """The identity of executing a check (by execution identity) on a patch (by store key)."""
    return digest({"execution": execution_identity, "patch": patch})


@attrs.frozen
class ExecRequest:
    """Execute ``execution`` (image, eval script, timeout) on the patch stored under ``patch``."""

    request_id: str
    adapter: str
    check_id: str
    execution: dict[str, Any]
    execution_identity: str
    patch: str


@attrs.frozen
class RawOutput:
    """What an execution produced: the log text and the run facts.

    ``attempts`` and ``failures`` (one reason per failed attempt) are the transport's account of
    how the output was obtained, for ``decision.stats["transport"]``.
    """

    request_id: str
    log: str | None
    applied: bool
    exit_code: int | None = None
    timed_out: bool = False
    error: str | None = None
    application: Application | None = None
    duration_s: float = 0.0
    attempts: int = 1
    failures: tuple[str, ...] = ()


def stopped_output(
    request_id: str, detail: str, *, infra: bool = True, duration_s: float = 0.0
) -> RawOutput:
    """The output of a run whose executor stopped before the patch could be judged: no log,
    ``error`` set, and the application record naming it an infrastructure error (``infra``: a
    snapshot, image or daemon missing) or the executor's own."""
    application = (
        Application(applied=False, infra_error=detail)
        if infra
        else Application(applied=False, executor_error=detail)
    )
    return RawOutput(
        request_id,
        log=None,
        applied=False,
        error=detail,
        application=application,
        duration_s=duration_s,
    )


@attrs.frozen
class InfraFailure:
    """No output could be had for a request (transport, executor, unrecorded): never a verdict."""

    request_id: str
    reason: str
    detail: str = ""
    attempts: int = 1
    failures: tuple[str, ...] = ()


@attrs.frozen
class Pending:
    """The request had not finished when the deadline came."""

    request_id: str


Outcome: TypeAlias = RawOutput | InfraFailure | Pending
