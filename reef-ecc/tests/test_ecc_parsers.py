"""Log parsers: the built-in pytest parser everywhere, the swebench package's with its extra, and
an unknown parser refused when the check is built (not at grading, with a bare KeyError)."""

from __future__ import annotations

import sys

import pytest

from agent_ecc.adapters import parsers
from agent_ecc.adapters.parsers import ParserError
from agent_ecc.adapters.swebench import SWEBenchAdapter, conjunction_version
from agent_ecc.digests import digest
from agent_ecc.records import Run
from agent_ecc.store import ContentStore, put_text
from agent_ecc.versions import Check, verify_check

SUITE = {"FAIL_TO_PASS": ["t.py::test_a"], "PASS_TO_PASS": ["t.py::test_b"]}
PYTEST_LOG = (
    ">>>>> Start Test Output\nPASSED t.py::test_a\nPASSED t.py::test_b\n"
    ">>>>> End Test Output\n>>>>> Test Exit Code: 0\n"
)


@pytest.fixture
def without_swebench(monkeypatch: pytest.MonkeyPatch) -> None:
    """This interpreter as if reef-ecc were installed without its swebench extra."""
    monkeypatch.setitem(sys.modules, "swebench.harness.log_parsers", None)


@pytest.mark.usefixtures("without_swebench")
def test_without_the_extra_pytest_grades_and_other_parsers_are_refused_when_built(
    store: ContentStore,
) -> None:
    adapter = SWEBenchAdapter()
    check = adapter.check("c", image="i", eval_script="e", suite=SUITE, parser="parse_log_pytest")
    assert check.grading["parser"] == "pytest"
    assert "parser_package" not in check.grading
    run = Run("c", check.execution, check.execution_identity, put_text(store, PYTEST_LOG), True)
    assert adapter.grade(check, run, store) == "pass"
    with pytest.raises(ParserError, match=r"'django'.*built in: pytest.*reef-ecc\[swebench\]"):
        adapter.check("c", image="i", eval_script="e", suite=SUITE, parser="django")
    row = {
        "instance_id": "x",
        "repo": "sympy/sympy",
        "version": "1.1",
        "image": "i",
        "eval_script": "e",
        "log_parser": "parse_log_sympy",
        "eval_type": "pass_and_fail",
    }
    with pytest.raises(ParserError, match="parse_log_sympy"):
        conjunction_version(
            [{**row, **SUITE}], [], version_id="g", world="w", store=store, adapter=adapter
        )


def test_an_unknown_parser_is_refused_when_the_check_is_built_naming_the_known_ones() -> None:
    adapter = SWEBenchAdapter()
    with pytest.raises(ParserError) as refused:
        adapter.check("c", image="i", eval_script="e", suite=SUITE, parser="djnago")
    message = str(refused.value)
    assert "'djnago'" in message
    assert "pytest" in message
    if parsers.installed() is not None:  # with the extra, the package's parsers are listed
        assert "django" in message
        assert "sympy" in message


def test_a_body_naming_a_parser_that_is_not_built_in_and_no_package_is_refused() -> None:
    adapter = SWEBenchAdapter()
    check = adapter.check("c", image="i", eval_script="e", suite=SUITE)
    handwritten = Check(
        "c",
        "swebench",
        check.execution,
        {**check.grading, "parser": "django"},
        check.execution_identity,
        check.grading_identity,
    )
    with pytest.raises(ParserError, match="names no parser_package"):
        verify_check(handwritten, {"swebench": adapter})


def test_a_pytest_check_keeps_the_grading_identity_it_had_before_package_parsers() -> None:
    """Epoch bodies published before the swebench parsers came still verify (I1)."""
    adapter = SWEBenchAdapter()
    check = adapter.check("c", image="i", eval_script="e", suite=SUITE, rule="logical")
    before = digest(
        {
            "adapter": "swebench",
            "rule": "logical",
            "parser": "pytest",
            "suite": SUITE,
            "corrections": [],
        }
    )
    assert check.grading_identity == before


def test_unknown_rule_and_runtime_are_refused_when_the_check_is_built() -> None:
    adapter = SWEBenchAdapter()
    with pytest.raises(ValueError, match="unknown SWE-bench rule 'oficial'"):
        adapter.check("c", image="i", eval_script="e", suite=SUITE, rule="oficial")
    with pytest.raises(ValueError, match="unknown runtime 'podman'; known: git, docker"):
        adapter.check("c", image="i", eval_script="e", suite=SUITE, runtime="podman")


@pytest.mark.usefixtures("without_swebench")
def test_without_the_extra_a_row_naming_no_parser_is_refused_not_graded_by_pytest(
    store: ContentStore,
) -> None:
    row = {
        "instance_id": "django__django-1",
        "repo": "django/django",
        "version": "3.0",
        "image": "i",
        "eval_script": "e",
        **SUITE,
    }
    with pytest.raises(ParserError, match=r"names no log_parser.*reef-ecc\[swebench\]"):
        conjunction_version(
            [row], [], version_id="g", world="w", store=store, adapter=SWEBenchAdapter()
        )
    named = {**row, "log_parser": "parse_log_pytest", "eval_type": "pass_and_fail"}
    built = conjunction_version(
        [named], [], version_id="g", world="w", store=store, adapter=SWEBenchAdapter()
    )
    assert built.entries[0].spec.grading["parser"] == "pytest"  # type: ignore[union-attr]
