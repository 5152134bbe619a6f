"""HarborTask: the value every generated task travels as (docs/decisions.md, Harbor tasks)."""

from __future__ import annotations

import pytest

from reef.core.harbor import MAX_FILE_BYTES, HarborTask, HarborTaskError

FILES = {
    "task.toml": 'version = "1.0"\n[verifier]\ntimeout_sec = 30.0\n',
    "instruction.md": "Print the sum of 2 and 3.\n",
    "tests/test.sh": "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
    "solution/solve.sh": "#!/bin/bash\necho 5\n",
}


def test_a_task_round_trips_through_its_json_form() -> None:
    task = HarborTask("add-2-3", FILES, source_agent_record_ids=["r1", "r2"])
    again = HarborTask.from_json(task.to_json())
    assert again == task
    assert again.source_agent_record_ids == ("r1", "r2")
    assert again.instruction == FILES["instruction.md"]


def test_the_digest_names_the_files_not_the_name_or_sources() -> None:
    one = HarborTask("a", FILES, source_agent_record_ids=["r1"])
    other = HarborTask("b", dict(reversed(list(FILES.items()))))
    assert one.digest() == other.digest()
    changed = HarborTask("a", {**FILES, "instruction.md": "Print 6.\n"})
    assert changed.digest() != one.digest()


def test_the_task_keeps_its_own_copy_of_the_files() -> None:
    files = dict(FILES)
    task = HarborTask("a", files)
    files["tests/test.sh"] = "rm -rf /\n"
    assert task.files["tests/test.sh"] == FILES["tests/test.sh"]
    with pytest.raises(TypeError):
        task.files["x"] = "y"  # type: ignore[index]


@pytest.mark.parametrize(
    "path",
    ["../x.sh", "/etc/passwd", "tests/../../x", "tests//x", ".hidden/x", "tests\\x", "a/./b", ""],
)
def test_a_path_that_could_leave_the_task_folder_is_refused(path: str) -> None:
    with pytest.raises(HarborTaskError, match=r"file path|non-empty"):
        HarborTask("a", {**FILES, path: "x"})


@pytest.mark.parametrize("name", ["", "../x", "A", "a/b", ".a", "a" * 129])
def test_a_name_that_is_not_one_folder_name_is_refused(name: str) -> None:
    with pytest.raises(HarborTaskError, match="task name"):
        HarborTask(name, FILES)


def test_missing_required_files_are_named() -> None:
    files = {k: v for k, v in FILES.items() if k != "tests/test.sh"}
    with pytest.raises(HarborTaskError, match=r"tests/test\.sh"):
        HarborTask("a", files)


def test_sizes_are_bounded() -> None:
    with pytest.raises(HarborTaskError, match="at most"):
        HarborTask("a", {**FILES, "environment/big": "x" * (MAX_FILE_BYTES + 1)})


def test_text_only_and_no_file_that_is_also_a_folder() -> None:
    with pytest.raises(HarborTaskError, match="UTF-8"):
        HarborTask("a", {**FILES, "tests/data": "\ud800"})
    with pytest.raises(HarborTaskError, match="both a file and a folder"):
        HarborTask("a", {**FILES, "tests": "x"})


def test_from_json_names_what_is_wrong() -> None:
    with pytest.raises(HarborTaskError, match="JSON object"):
        HarborTask.from_json([])
    with pytest.raises(HarborTaskError, match="no key extra"):
        HarborTask.from_json({**HarborTask("a", FILES).to_json(), "extra": 1})


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("a = " + "[" * 50_000, "nested too deeply"),
        ("a = " + "{b = " * 50_000, "nested too deeply"),
        ("[verifier\ntimeout_sec = 1\n", "not valid TOML"),
    ],
)
def test_a_task_toml_that_cannot_be_read_is_an_error_naming_the_file(
    text: str, reason: str
) -> None:
    task = HarborTask("deep", {**FILES, "task.toml": text})
    with pytest.raises(HarborTaskError, match=rf"task 'deep': task\.toml .*{reason}"):
        task.toml()


def test_a_task_toml_is_read_as_a_table() -> None:
    assert HarborTask("a", FILES).toml() == {"version": "1.0", "verifier": {"timeout_sec": 30.0}}
