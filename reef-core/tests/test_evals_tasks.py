"""Harbor tasks as an eval set (issue 26): a folder of task folders read when the deployment is
checked, each task asked as the task jobs' agent asks it and scored by its own verifier in the
sandbox; a verifier that cannot run leaves the evaluation unfinished, one that times out or
writes no reward scores its item 0 and says why. The gate on such a set, with the local engine,
is in ``test_evals_gate.py``."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from reef.core.container_settings import ContainerSettings
from reef.core.deployment import DeploymentError
from reef.core.evals import EvalSetSection
from reef.core.records import JSON
from reef.evals.sets import EvalIncomplete, EvalSetError, load_eval_set
from reef.plugins.scenarios import load_deployment
from reef.testing.tasks import arithmetic_task

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap is not installed (scripts/setup does)"
)


def task_folder(root: Path, *tasks: JSON) -> Path:
    """``tasks`` (a Harbor task's JSON form each) written as a folder of task folders."""
    for task in tasks:
        for path, text in task["files"].items():
            target = root / task["name"] / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
    return root


def replies(answers: dict[str, str], asked: list[JSON]) -> Callable[[JSON], JSON]:
    """A completion function answering each instruction from ``answers``; keeps what it was
    asked in ``asked``."""

    def complete(request: JSON) -> JSON:
        asked.append(request)
        text = answers[request["messages"][-1]["content"]]
        return {"choices": [{"message": {"role": "assistant", "content": text}}]}

    return complete


def test_each_task_is_an_item_asked_by_its_instruction(tmp_path: Path) -> None:
    folder = task_folder(
        tmp_path / "tasks", arithmetic_task("b-sum", 2, 2), arithmetic_task("a-sum", 3, 4)
    )
    (folder / ".git").mkdir()  # hidden folders are no tasks
    eval_set = load_eval_set("sums", EvalSetSection(tasks=str(folder)))
    assert [item.item_id for item in eval_set.items] == ["a-sum", "b-sum"]
    request = eval_set.items[0].request(eval_set.section.sampling)
    assert request["messages"] == [
        {"role": "user", "content": "What is 3 + 4? Answer with the number only."}
    ]
    assert request["temperature"] == 0.0


@needs_bwrap
def test_each_reply_is_scored_by_its_tasks_own_verifier(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = tmp_path / "tmp"
    runs.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(runs))
    slow = arithmetic_task("slow", 1, 1)
    slow["files"]["task.toml"] = 'version = "1.0"\n\n[verifier]\ntimeout_sec = 1.0\n'
    slow["files"]["tests/test.sh"] = "sleep 30\n"
    silent = arithmetic_task("silent", 1, 2)
    silent["files"]["tests/test.sh"] = "exit 3\n"
    folder = task_folder(
        tmp_path / "tasks",
        arithmetic_task("right", 2, 2),
        arithmetic_task("wrong", 3, 4),
        slow,
        silent,
    )
    eval_set = load_eval_set("sums", EvalSetSection(tasks=str(folder)))
    answers = {
        "What is 2 + 2? Answer with the number only.": " 4\n",
        "What is 3 + 4? Answer with the number only.": "8",
        "What is 1 + 1? Answer with the number only.": "2",
        "What is 1 + 2? Answer with the number only.": "3",
    }
    asked: list[JSON] = []
    result = eval_set.evaluate(replies(answers, asked), scenario="s", trainer="t", artifact_id="a")
    outcomes = {o.item_id: o for o in result.items}
    assert (outcomes["right"].score, outcomes["right"].error) == (1.0, None)
    assert (outcomes["wrong"].score, outcomes["wrong"].error) == (0.0, None)
    assert outcomes["slow"].score == 0.0
    assert "ran past its timeout" in str(outcomes["slow"].error)
    assert outcomes["silent"].score == 0.0
    assert "wrote no reward (exit 3" in str(outcomes["silent"].error)
    assert result.score == 0.25
    assert len(asked) == 4
    assert list(runs.iterdir()) == []  # each run's folder is gone


def test_a_verifier_that_cannot_run_leaves_the_evaluation_unfinished(tmp_path: Path) -> None:
    folder = task_folder(tmp_path / "tasks", arithmetic_task("right", 2, 2))
    away = ContainerSettings(backend="docker", docker_url="http://127.0.0.1:9")
    eval_set = load_eval_set("sums", EvalSetSection(tasks=str(folder), sandbox=away))
    with pytest.raises(EvalIncomplete, match="task right: its verifier could not run"):
        eval_set.evaluate(
            replies({"What is 2 + 2? Answer with the number only.": "4"}, []),
            scenario="s",
            trainer="t",
            artifact_id="a",
        )


def test_a_folder_that_is_not_a_set_of_tasks_is_named(tmp_path: Path) -> None:
    def problem(folder: Path) -> str:
        with pytest.raises(EvalSetError) as caught:
            load_eval_set("sums", EvalSetSection(tasks=str(folder)))
        return str(caught.value)

    assert "is not a folder of Harbor tasks" in problem(tmp_path / "none")
    (tmp_path / "empty").mkdir()
    assert "holds no task folder" in problem(tmp_path / "empty")
    loose = task_folder(tmp_path / "loose", arithmetic_task("t", 1, 1))
    (loose / "README.md").write_text("tasks")
    assert "is not a task folder" in problem(loose)
    incomplete = task_folder(tmp_path / "incomplete", arithmetic_task("t", 1, 1))
    (incomplete / "t" / "tests" / "test.sh").unlink()
    assert "has no tests/test.sh" in problem(incomplete)
    binary = task_folder(tmp_path / "binary", arithmetic_task("t", 1, 1))
    (binary / "t" / "data.bin").write_bytes(b"\xff\xfe")
    assert "cannot read" in problem(binary)
    linked = task_folder(tmp_path / "linked", arithmetic_task("t", 1, 1))
    (linked / "t" / "secret").symlink_to("/etc/hostname")
    assert "is a link" in problem(linked)


DEPLOYMENT = """
storage: {url: "sqlite:///%(db)s"}
serving: {engine: local}
scenarios:
  support:
    recipe: servicetest
    training: {component: "reef.components.local.component:LocalComponent", name: local,
               options: {state_dir: "%(state)s"}}
    evals:
%(evals)s
"""


def test_a_deployment_names_what_is_wrong_with_a_task_set(tmp_path: Path) -> None:
    pytest.importorskip("uvicorn", reason="the service-test recipe is the service's (server extra)")
    from reef.testing.service import service_test_plugins

    folder = task_folder(tmp_path / "tasks", arithmetic_task("right", 2, 2))
    data = tmp_path / "items.jsonl"
    data.write_text(json.dumps({"prompt": "a", "expected": "b"}) + "\n")
    evals = "\n".join(
        [
            f"      both: {{data: {data}, tasks: {folder}}}",
            "      neither: {sampling: {max_tokens: 4}}",
            f"      judged: {{tasks: {folder}, verifier: exact}}",
            f"      odd_file: {{tasks: {folder}, answer_file: ../x}}",
        ]
    )

    def problems(evals: str) -> str:
        text = DEPLOYMENT % {
            "db": tmp_path / "reef.db",
            "state": tmp_path / "state",
            "evals": evals,
        }
        with pytest.raises(DeploymentError) as caught:
            load_deployment(text, plugins=service_test_plugins())
        return "\n".join(caught.value.problems)

    found = problems(evals)
    assert found.count("give data (a JSONL file of items) or tasks") == 2, found
    assert "tasks are scored by their own verifiers" in found
    assert "answer_file '../x' must be a plain file name" in found
    # A folder is read once the sections are sound: its problem is named at the set.
    away = problems(f"      away: {{tasks: {tmp_path / 'gone'}}}")
    assert "eval away:" in away
    assert "is not a folder of Harbor tasks" in away
    assert away.endswith("@ $.scenarios.support.evals.away"), away
    good = DEPLOYMENT % {
        "db": tmp_path / "reef.db",
        "state": tmp_path / "state",
        "evals": f"      sums: {{tasks: {folder}, sandbox: {{timeout_seconds: 30}}}}",
    }
    deployment = load_deployment(good, plugins=service_test_plugins())
    section = deployment.scenarios["support"].evals["sums"]
    assert section.sandbox.timeout_seconds == 30
