"""Grader versions: which spec grades each task in each world, and the checks a spec is made of.

A version is published once and never changes; an epoch is one publication of a version (see
:mod:`agent_ecc.registry`). A spec is one :class:`Check` or an :class:`AllOf` conjunction of
checks, which a producer runs and a scorer evaluates in spec order (:func:`iter_checks`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol, TypeAlias

import attrs

from agent_ecc.digests import digest


class VersionError(ValueError):
    """A grader version or world body is malformed, or a lookup names no spec."""


class IdentityMismatch(VersionError):
    """An identity an epoch body names is not the one derived from what the check runs or grades."""


def execution_identity(adapter: str, execution: Mapping[str, Any]) -> str:
    """The identity of what a check runs: equal bodies run the same thing (contract section 1)."""
    return digest({"adapter": adapter, "execution": dict(execution)})


def grading_identity(adapter: str, rule: str, grading: Mapping[str, Any]) -> str:
    """The identity of what grades a check's output: its rule, parser, suite and corrections,
    and, for a parser of a package, the package's version and what the parser reads of the
    instance (so that upgrading the package changes the identity), and a report type other
    than the default (``eval_type: fail_only``)."""
    body: dict[str, Any] = {
        "adapter": adapter,
        "rule": rule,
        "parser": grading.get("parser"),
        "suite": grading.get("suite"),
        "corrections": sorted(grading.get("corrections", ())),
    }
    for key in ("parser_package", "parser_context", "eval_type"):
        # absent for a built-in parser and a pass_and_fail report: identities unchanged
        if grading.get(key) is not None:
            body[key] = grading[key]
    return digest(body)


@attrs.frozen
class Check:
    """One suite: what runs (``execution``) and what grades its output (``grading``).

    ``execution_identity`` and ``grading_identity`` are the identities the epoch body names;
    :func:`build_version` and the scorer check them against the ones derived.
    """

    check_id: str
    adapter: str
    execution: dict[str, Any]
    grading: dict[str, Any]
    execution_identity: str
    grading_identity: str


@attrs.frozen
class AllOf:
    """A conjunction of checks: the member passes when every check passes."""

    checks: tuple[Check, ...]


Spec: TypeAlias = Check | AllOf


def iter_checks(spec: Spec) -> Iterator[Check]:
    """The checks of ``spec`` in spec order."""
    if isinstance(spec, Check):
        yield spec
    else:
        yield from spec.checks


@attrs.frozen
class Entry:
    """The spec that grades ``task`` in ``world``."""

    task: str
    world: str
    spec: Spec


@attrs.frozen
class GraderVersion:
    """A published grader: one spec per (task, world)."""

    version_id: str
    entries: tuple[Entry, ...]

    def lookup(self, task: str, world: str) -> Entry:
        """The entry for ``task`` in ``world``; :class:`VersionError` when the version has none."""
        for entry in self.entries:
            if entry.task == task and entry.world == world:
                return entry
        raise VersionError(
            f"grader version {self.version_id!r} has no spec for task {task!r} in world {world!r}"
        )

    def covers(self, task: str, world: str) -> bool:
        """Whether the version has a spec for ``task`` in ``world``."""
        return any(e.task == task and e.world == world for e in self.entries)


@attrs.frozen
class World:
    """What sandboxes serve: the tasks of one world (for SWE-bench, the images of their repos)."""

    world_id: str
    tasks: tuple[str, ...]


class IdentityDeriver(Protocol):
    """What derives a check's grading identity: an adapter (it knows its default rule)."""

    @property
    def name(self) -> str:
        """The adapter's name, as checks name it."""
        ...

    def grading_identity(self, check: Check) -> str:
        """The grading identity of ``check`` under this adapter."""
        ...


def verify_check(check: Check, adapters: Mapping[str, IdentityDeriver]) -> None:
    """Refuse ``check`` when an identity it names is not the one derived from it (I1)."""
    adapter = adapters.get(check.adapter)
    if adapter is None:
        raise VersionError(f"check {check.check_id!r} names adapter {check.adapter!r}, not given")
    derived = execution_identity(check.adapter, check.execution)
    if derived != check.execution_identity:
        raise IdentityMismatch(
            f"check {check.check_id!r}: execution identity {check.execution_identity} named, "
            f"{derived} derived"
        )
    derived = adapter.grading_identity(check)
    if derived != check.grading_identity:
        raise IdentityMismatch(
            f"check {check.check_id!r}: grading identity {check.grading_identity} named, "
            f"{derived} derived"
        )


def spec_to_body(spec: Spec) -> dict[str, Any]:
    """The JSON body of a spec."""
    if isinstance(spec, AllOf):
        return {"all_of": [attrs.asdict(c) for c in spec.checks]}
    return {"check": attrs.asdict(spec)}


def _check_from_body(body: Any, where: str) -> Check:
    try:
        return Check(**body)
    except TypeError as error:
        raise VersionError(f"malformed check @ {where}: {error}") from None


def spec_from_body(body: Mapping[str, Any], where: str = "$") -> Spec:
    """A spec from its JSON body."""
    if "all_of" in body:
        return AllOf(
            tuple(_check_from_body(c, f"{where}.all_of[{i}]") for i, c in enumerate(body["all_of"]))
        )
    if "check" in body:
        return _check_from_body(body["check"], f"{where}.check")
    raise VersionError(f"a spec is {{'check': ...}} or {{'all_of': [...]}} @ {where}")


def version_to_body(version: GraderVersion) -> dict[str, Any]:
    """The JSON body of a grader version (what the registry publishes)."""
    return {
        "version_id": version.version_id,
        "entries": [
            {"task": e.task, "world": e.world, "spec": spec_to_body(e.spec)}
            for e in version.entries
        ],
    }


def version_from_body(body: Mapping[str, Any]) -> GraderVersion:
    """A grader version from its JSON body, taking the identities it names as named."""
    try:
        entries = tuple(
            Entry(
                task=e["task"],
                world=e["world"],
                spec=spec_from_body(e["spec"], f"$.entries[{i}].spec"),
            )
            for i, e in enumerate(body["entries"])
        )
        return GraderVersion(version_id=body["version_id"], entries=entries)
    except (KeyError, TypeError) as error:
        raise VersionError(f"malformed grader version body: {error!r}") from None


def build_version(body: Mapping[str, Any], adapters: Sequence[IdentityDeriver]) -> GraderVersion:
    """A grader version from an epoch body, every identity it names checked against the adapters."""
    version = version_from_body(body)
    by_name = {a.name: a for a in adapters}
    for entry in version.entries:
        for check in iter_checks(entry.spec):
            verify_check(check, by_name)
    return version
