"""Requests to execute a check, and what a backend answers: raw outputs, never verdicts.

A request is identified by what runs and on which patch (contract section 1), so two requests
with one identity are the same execution, executed once per cache. An answer is a
:class:`RawOutput` (the log and run facts), an :class:`InfraFailure` (no verdict can come from
it) or :class:`Pending` (not finished when the deadline came).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, TypeAlias

import attrs

from agent_ecc.digests import digest
from agent_ecc.records import Application

#: Where a check's eval script runs: ``git``, a clone of the git snapshot the content store
#: holds under the check's ``image`` key; ``docker``, a container of the image its ``image``
#: names. A check's execution body names its runtime only when it is not ``git``.
RUNTIMES: Final = ("git", "docker")


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
