"""The test-log parsers a SWE-bench check can name.

``pytest`` is built in (SWE-bench's pytest parser: the ``-rA`` summary lines), so the library
grades pytest suites with nothing else installed. Every other parser (django, sympy, astropy,
sphinx, matplotlib, the JavaScript, Go, Java, Rust, ... ones) is the public ``swebench``
package's own, used as it is: install ``reef-ecc[swebench]``. Names are SWE-bench's, with or
without its ``parse_log_`` prefix (``django`` and ``parse_log_django`` are the same parser).

A check that grades with the package's parser names the package's version in its grading body
(``parser_package``, e.g. ``swebench==5.0.2``), so the version is part of its grading identity:
upgrading the package is a new grader, published as a new epoch, never a silent change of the
verdicts of the epoch in force. Grading such a check with another version installed (or none)
is refused with :class:`ParserError`.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import re
from collections.abc import Callable, Mapping
from typing import Any, Final

import attrs

PACKAGE: Final = "swebench"
PREFIX: Final = "parse_log_"
INSTALL_HINT: Final = "pip install 'reef-ecc[swebench]'"

_STATUSES: Final = ("FAILED", "PASSED", "SKIPPED", "ERROR", "XFAIL")
_SKIP_SUMMARY = re.compile(r"^\[\d+\]$")
#: The keys of a SWE-bench test spec that some of the package's parsers read.
CONTEXT_KEYS: Final = ("instance_id", "repo", "version")


class ParserError(ValueError):
    """A check names a parser that cannot grade here: unknown, or from a package that is not
    installed at the version the check names."""


def parse_log_pytest(log: str) -> dict[str, str]:
    """Test statuses from pytest's ``-rA`` summary lines (SWE-bench's pytest parser)."""
    statuses: dict[str, str] = {}
    for line in log.split("\n"):
        if not line.startswith(_STATUSES):
            continue
        if line.startswith("FAILED"):
            line = line.replace(" - ", " ")
        words = line.split()
        if len(words) <= 1:
            continue
        # pytest's "SKIPPED [N] file:line: reason" summary: [N] is a count, not a test
        if words[0] == "SKIPPED" and _SKIP_SUMMARY.match(words[1]):
            continue
        statuses[words[1]] = words[0]
    return statuses


BUILTIN: Final[Mapping[str, Callable[[str], dict[str, str]]]] = {"pytest": parse_log_pytest}


def canonical(name: str) -> str:
    """The parser's name without SWE-bench's ``parse_log_`` prefix."""
    return name[len(PREFIX) :] if name.startswith(PREFIX) else name


#: The modules of the package whose ``MAP_REPO_TO_PARSER_*`` table names each repository's
#: parser: how SWE-bench resolved the parser of a row that names none (before rows carried
#: ``log_parser``).
_LANGUAGES: Final = ("python", "javascript", "c", "go", "java", "php", "ruby", "rust")


@attrs.frozen
class Installed:
    """The ``swebench`` package found in this interpreter: its version, its parsers (by
    canonical name), the parser of each repository its tables name (a name of ``parsers``, or
    ``None`` for a parser its registry does not hold, which it cannot grade by name), and the
    repositories it grades ``fail_only``."""

    version: str
    parsers: Mapping[str, Callable[..., dict[str, str]]]
    test_spec: Callable[..., Any]
    repo_parsers: Mapping[str, str | None] = attrs.field(factory=dict)
    fail_only_repos: frozenset[str] = frozenset()

    @property
    def pin(self) -> str:
        """The requirement a check names: ``swebench==<version>``."""
        return f"{PACKAGE}=={self.version}"


def installed() -> Installed | None:
    """The installed ``swebench`` package, or None when it is not importable.

    Importing its parsers imports its harness (and so docker, modal and datasets): about a
    second, once per process, and only for a check that names one of its parsers.
    """
    try:
        parsers = importlib.import_module("swebench.harness.log_parsers")
        types = importlib.import_module("swebench.types")
        constants = importlib.import_module("swebench.harness.constants")
        tables = [importlib.import_module(f"{parsers.__name__}.{m}") for m in _LANGUAGES]
        version = importlib.metadata.version(PACKAGE)
    except ImportError:
        return None
    registry = {canonical(k): v for k, v in parsers.PARSER_REGISTRY.items()}
    # A repository's parser is a function; its name is the registry's first name for it
    # (several names share one function: parse_log_flask is parse_log_pytest).
    names: dict[int, str] = {}
    for name, function in registry.items():
        names.setdefault(id(function), name)
    repo_parsers: dict[str, str | None] = {}
    for module in tables:
        for key, table in sorted(vars(module).items()):
            if key.startswith("MAP_REPO_TO_PARSER"):
                repo_parsers.update({r: names.get(id(f)) for r, f in table.items()})
    return Installed(
        version=version,
        parsers=registry,
        test_spec=types.TestSpec,
        repo_parsers=repo_parsers,
        fail_only_repos=frozenset(getattr(constants, "FAIL_ONLY_REPOS", ())),
    )


@attrs.frozen
class ParserRef:
    """A parser as a check's grading body names it: ``name``, and ``package`` (``None`` for a
    built-in parser, else the ``swebench==<version>`` whose parser it is)."""

    name: str
    package: str | None


def resolve(name: str) -> ParserRef:
    """The parser ``name`` names here, for a check being built.

    :raises ParserError: naming the known parsers (and how to get the package's, when it is
        not installed).
    """
    short = canonical(name)
    if short in BUILTIN:
        return ParserRef(short, None)
    found = installed()
    if found is None:
        raise ParserError(
            f"unknown log parser {name!r}: built in: {', '.join(BUILTIN)}; the swebench "
            f"package's parsers (django, sympy, astropy, ...) need it installed: {INSTALL_HINT}"
        )
    if short not in found.parsers:
        known = ", ".join([*BUILTIN, *sorted(k for k in found.parsers if k not in BUILTIN)])
        raise ParserError(f"unknown log parser {name!r}; known ({found.pin}): {known}")
    return ParserRef(short, found.pin)


def check_named(grading: Mapping[str, Any]) -> ParserRef:
    """The parser a check's grading body names (``parser`` and ``parser_package``), checked for
    shape only: a built-in parser names no package; any other names the one it comes from."""
    name = str(grading.get("parser", "pytest"))
    package = grading.get("parser_package")
    if package is None and name not in BUILTIN:
        raise ParserError(
            f"log parser {name!r} is not built in ({', '.join(BUILTIN)}) and the check names "
            f"no parser_package; build the check with SWEBenchAdapter.check(parser=...)"
        )
    if package is not None and (not isinstance(package, str) or not package.startswith(PACKAGE)):
        raise ParserError(f"parser_package {package!r} is not a {PACKAGE}==<version> pin")
    return ParserRef(name, package)


def parse(grading: Mapping[str, Any], log: str) -> dict[str, str]:
    """The test statuses of ``log`` by the parser ``grading`` names.

    :raises ParserError: when the parser's package is not installed at the version named.
    """
    ref = check_named(grading)
    if ref.package is None:
        return BUILTIN[ref.name](log)
    found = installed()
    if found is None or found.pin != ref.package:
        have = "not installed" if found is None else f"{found.pin} is installed"
        raise ParserError(
            f"the check grades with {ref.package}'s {ref.name!r} parser and {have}: install "
            f"{ref.package} where checks are graded, or publish a new epoch whose checks are "
            f"built with the installed version (a parser change is a grader change)"
        )
    parser = found.parsers.get(ref.name)
    if parser is None:
        raise ParserError(f"{found.pin} has no log parser {ref.name!r}")
    context = grading.get("parser_context") or {}
    spec = found.test_spec(
        instance_id=str(context.get("instance_id", "")),
        image="",
        eval_script_list=[],
        repo=str(context.get("repo", "")),
        version=str(context.get("version", "")),
        FAIL_TO_PASS=[],
        PASS_TO_PASS=[],
        log_parser=PREFIX + ref.name,
    )
    return dict(parser(log, spec))
