"""An eval set read from its JSONL file, its verifier imported, and an artifact scored on it.

:func:`load_eval_set` is what ``reef check`` and ``reef serve`` call for each of a scenario's
``evals`` (a file that does not read, an item that is not usable, a verifier that does not import
is a problem of the deployment); :meth:`EvalSet.evaluate` runs every item through a completion
function (the artifact under evaluation, :mod:`reef.evals.targets`) and scores the replies. A
``judge`` verifier asks the judge model to grade each reply; a judge that does not answer leaves
the evaluation unfinished. A set of Harbor tasks (``tasks``) asks each task's instruction as
the task jobs' agent does and scores the reply with the task's own verifier, in the sandbox
or the Docker backend its ``sandbox`` names (:mod:`reef.containers`).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from reef.containers.agent import AnswerAgent
from reef.containers.backends import open_backend
from reef.containers.interface import ContainerBackend, ContainerError
from reef.containers.staging import StagingError, TaskStaging
from reef.containers.verify import run_verifier
from reef.core.evals import (
    BUILTIN_VERIFIERS,
    EvalItem,
    EvalItemError,
    EvalResult,
    EvalSetSection,
    ItemOutcome,
    JudgeSection,
    judged_score,
    mean_score,
    parse_eval_lines,
    verify_builtin,
)
from reef.core.harbor import HarborTask, HarborTaskError
from reef.core.records import JSON
from reef.errors import ReefError

__all__ = [
    "EvalIncomplete",
    "EvalSet",
    "EvalSetError",
    "Verifier",
    "load_eval_set",
    "read_task_folder",
]

#: A verifier: the score in [0, 1] of a reply to an item.
Verifier = Callable[[str, EvalItem], float]


class EvalSetError(ReefError, ValueError):
    """An eval set cannot be used: its file, an item, or its verifier; the message says which."""


class EvalIncomplete(ReefError, RuntimeError):
    """The engine did not answer every item: the score would be a guess, so none is kept."""


@attrs.frozen
class EvalSet:
    """One eval set of a scenario: its name, settings, items and verifier."""

    name: str
    section: EvalSetSection
    items: tuple[EvalItem, ...]
    verify: Verifier

    def evaluate(
        self,
        complete: Callable[[JSON], JSON],
        *,
        scenario: str,
        trainer: str,
        artifact_id: str,
    ) -> EvalResult:
        """Every item's reply from ``complete`` (a chat-completions request to a
        ``chat.completion`` body), scored.

        :raises EvalIncomplete: when ``complete`` raised for an item (the engine is away).
        """
        outcomes = []
        for item in self.items:
            try:
                body = complete(item.request(self.section.sampling))
            except Exception as exc:
                raise EvalIncomplete(
                    f"eval {self.name}: item {item.item_id} got no answer: {exc}"
                ) from exc
            reply = _reply_text(body)
            try:
                score = float(self.verify(reply, item))
                if not 0.0 <= score <= 1.0:
                    raise ValueError(f"a score is in [0, 1], the verifier gave {score}")
            except EvalIncomplete:
                raise  # the judge did not answer: no score at all
            except Exception as exc:  # the user's verifier: its failure is the item's outcome
                outcomes.append(ItemOutcome(item.item_id, 0.0, reply, f"verifier: {exc!r}"))
                continue
            outcomes.append(ItemOutcome(item.item_id, score, reply))
        return EvalResult(
            scenario=scenario,
            trainer=trainer,
            artifact_id=artifact_id,
            eval=self.name,
            score=mean_score(outcomes),
            items=tuple(outcomes),
            sampling=self.section.sampling.request_fields(),
            at=time.time(),
        )


def _reply_text(body: Mapping[str, Any]) -> str:
    """What a verifier reads of a ``chat.completion`` body: its first choice's content, then a
    line per tool call it made, ``{"name": ..., "arguments": ...}`` as JSON (the arguments
    parsed when they are JSON, else their text), so a tool-calling reply is not scored as
    empty."""
    choices = body.get("choices")
    message = choices[0].get("message") if isinstance(choices, list) and choices else None
    if not isinstance(message, dict):
        return ""
    content = message.get("content")
    lines = [content] if isinstance(content, str) and content else []
    for call in message.get("tool_calls") or ():
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            continue
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            with contextlib.suppress(json.JSONDecodeError):
                arguments = json.loads(arguments)
        lines.append(
            json.dumps({"name": function.get("name"), "arguments": arguments}, ensure_ascii=False)
        )
    return "\n".join(lines)


def _function_verifier(reference: str) -> Verifier:
    module_name, _, name = reference.partition(":")
    try:
        function = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as exc:
        raise EvalSetError(
            f"verifier {reference}: cannot import it ({exc}); is its module on the Python path"
            " reef runs with?"
        ) from exc
    if not callable(function):
        raise EvalSetError(f"verifier {reference} is not a function")

    def verify(reply: str, item: EvalItem) -> float:
        return float(function(reply, {"id": item.item_id, **item.fields}))

    return verify


def _judge_verifier(name: str, judge: JudgeSection) -> Verifier:
    url = f"{judge.url.rstrip('/')}/chat/completions"
    headers = {"authorization": f"Bearer {judge.api_key}"} if judge.api_key else {}

    def verify(reply: str, item: EvalItem) -> float:
        import httpx  # here: reef check reads eval sets and imports no HTTP library

        try:
            response = httpx.post(
                url, json=judge.request(item, reply), headers=headers, timeout=120
            )
        except httpx.HTTPError as exc:
            raise EvalIncomplete(f"eval {name}: the judge at {url} did not answer: {exc}") from exc
        if response.status_code != 200:
            raise EvalIncomplete(
                f"eval {name}: the judge at {url} answered {response.status_code}:"
                f" {response.text[:200]}"
            )
        return judged_score(_reply_text(response.json()))

    return verify


def read_task_folder(name: str, folder: Path) -> list[HarborTask]:
    """The Harbor tasks of ``folder``: each folder in it (but hidden ones) is one task, named
    after its folder, holding every file under it as text.

    :raises EvalSetError: naming the task and what is wrong: a folder that is no task, a link,
        a file that is not UTF-8 text, a task Reef cannot use, or a folder without tasks.
    """
    if not folder.is_dir():
        raise EvalSetError(f"eval {name}: tasks {folder} is not a folder of Harbor tasks")
    tasks: list[HarborTask] = []
    for task_folder in sorted(p for p in folder.iterdir() if not p.name.startswith(".")):
        if task_folder.is_symlink() or not task_folder.is_dir():
            raise EvalSetError(
                f"eval {name}: {task_folder} is not a task folder: every entry of {folder} is"
                " one task's folder (task.toml, instruction.md, tests/test.sh)"
            )
        files: dict[str, str] = {}
        for path in sorted(task_folder.rglob("*")):
            if path.is_symlink():
                raise EvalSetError(f"eval {name}: {path} is a link: a task holds its own files")
            if not path.is_file():
                continue
            try:
                files[path.relative_to(task_folder).as_posix()] = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise EvalSetError(f"eval {name}: cannot read {path} as text ({exc})") from exc
        try:
            task = HarborTask(task_folder.name, files)
            task.toml()
        except HarborTaskError as exc:
            raise EvalSetError(f"eval {name}: {task_folder}: {exc}") from exc
        tasks.append(task)
    if not tasks:
        raise EvalSetError(f"eval {name}: {folder} holds no task folder")
    return tasks


def _task_verifier(
    name: str, section: EvalSetSection, tasks: Mapping[str, HarborTask], agent: AnswerAgent
) -> Verifier:
    """A task's own verifier run on the reply, left in ``/app`` as the task jobs' agent leaves
    it, in a folder of its own that is removed after the run. The backend is opened at the
    first item and kept (opening the sandbox asks bubblewrap what it can do). A verifier that
    cannot run (the sandbox or the Docker daemon is away) leaves the evaluation unfinished; one
    that timed out or wrote no reward gives the item no score, said in its outcome."""
    backend: ContainerBackend | None = None

    def verify(reply: str, item: EvalItem) -> float:
        nonlocal backend
        with tempfile.TemporaryDirectory(prefix="reef-eval-") as work:
            try:
                staged = TaskStaging(Path(work)).stage(tasks[item.item_id])
                backend = backend or open_backend(section.sandbox)
                verdict = run_verifier(backend, staged, agent.attempt(reply), section.sandbox)
            except (ContainerError, StagingError) as exc:
                raise EvalIncomplete(
                    f"eval {name}: task {item.item_id}: its verifier could not run: {exc}"
                ) from exc
        if verdict.timed_out:
            raise ValueError("the task's verifier ran past its timeout")
        if verdict.reward is None:
            reason = verdict.limit or f"exit {verdict.exit_code}: {verdict.output[-200:]}"
            raise ValueError(f"the task's verifier wrote no reward ({reason})")
        return verdict.reward

    return verify


def _task_set(name: str, section: EvalSetSection) -> EvalSet:
    assert section.tasks is not None
    tasks = read_task_folder(name, Path(section.tasks))
    agent = AnswerAgent(answer_file=section.answer_file)
    items = tuple(EvalItem(t.name, tuple(agent.messages(t.instruction)), {}) for t in tasks)
    verify = _task_verifier(name, section, {t.name: t for t in tasks}, agent)
    return EvalSet(name, section, items, verify)


def load_eval_set(name: str, section: EvalSetSection) -> EvalSet:
    """The eval set ``name`` of ``section``: its file read, its items checked, its verifier
    imported; or, for ``tasks``, every task of its folder read.

    :raises EvalSetError: naming the file and the line or the verifier that is wrong.
    """
    if section.tasks is not None:
        return _task_set(name, section)
    assert section.data is not None
    path = Path(section.data)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise EvalSetError(f"eval {name}: cannot read {path} ({reason})") from exc
    try:
        items = parse_eval_lines(text, section)
    except EvalItemError as exc:
        raise EvalSetError(f"eval {name}: {path}: {exc}") from exc
    if section.judge is not None:
        return EvalSet(name, section, items, _judge_verifier(name, section.judge))
    if section.scored_by in BUILTIN_VERIFIERS:

        def verify(reply: str, item: EvalItem) -> float:
            return verify_builtin(section, item, reply)

        return EvalSet(name, section, items, verify)
    return EvalSet(name, section, items, _function_verifier(section.scored_by))
