"""SPADE's designer: the model that writes tasks, asked through an OpenAI-compatible engine.

:func:`design_prompt` asks it for tasks as one JSON object, :func:`tasks_from_reply` turns its
reply into Harbor tasks (each with its instruction, verifier, oracle solution, and the hint the
hint plays use, kept in ``task.toml`` under ``[metadata.spade]``), and :class:`Designer` makes
the call. The designer's calls carry the header ``x-reef-tag-spade: designer``, so that where
Reef itself serves the designer its calls are recorded as SPADE's own and never taken for a
source session.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs
import httpx

from reef import HarborTask, HarborTaskError, ReefError

__all__ = [
    "Designer",
    "DesignerCall",
    "DesignerError",
    "DesignerReply",
    "call_of",
    "design_prompt",
    "hint_of",
    "tasks_from_reply",
]

#: The header that marks the designer's calls, where Reef records them.
DESIGNER_TAG: Final = {"x-reef-tag-spade": "designer"}

_KEYS: Final = ("slug", "instruction", "test_sh", "solve_sh", "hint")

_GUIDE: Final = """\
You design tasks for training an AI agent. Write {count} new {tasks}: {description}

Each task is checked by a bash verifier, tests/test.sh, that runs in /app after the agent and
writes its reward (1 for success, 0 otherwise) to /logs/verifier/reward.txt. The agent answers
in one reply, which is saved as /app/{answer_file}; the verifier reads that file. Give each task
an oracle solution, solution/solve.sh, that writes a correct /app/{answer_file} (the oracle must
pass the verifier), and a hint that helps without giving the whole answer away.

Aim at the frontier of the agent: tasks it fails alone but solves with the hint.
{feedback}
Answer with one JSON object and nothing else:
{{"tasks": [{{"slug": "short-name", "instruction": "...", "test_sh": "...", "solve_sh": "...",
"hint": "..."}}]}}
"""


class DesignerError(ReefError):
    """The designer did not answer, or its answer is not the JSON object asked for; the
    generation is tried again."""


def design_prompt(
    description: str,
    *,
    count: int,
    answer_file: str,
    feedback: Sequence[str],
    sources: Sequence[str],
) -> str:
    """The designer's request text: the kind of tasks, how they are checked, and what the
    policy did with recent tasks (``feedback``), and the recorded sessions to start from."""
    lines = []
    if feedback:
        lines.append("How the agent did on recent tasks (mean reward of its training rollouts):")
        lines += [f"- {line}" for line in feedback]
    if sources:
        lines.append("Base the tasks on what the agent met in these recorded sessions:")
        lines += [f"- {line}" for line in sources]
    return _GUIDE.format(
        count=count,
        tasks="task" if count == 1 else "tasks",
        description=description or "short, self-contained tasks with one checkable answer.",
        answer_file=answer_file,
        feedback="\n".join(lines) + ("\n" if lines else ""),
    )


def _json_object(reply: str) -> Any:
    start, end = reply.find("{"), reply.rfind("}")
    if start < 0 or end < start:
        raise DesignerError(f"the designer's reply holds no JSON object: {reply[:200]!r}")
    try:
        return json.loads(reply[start : end + 1])
    except json.JSONDecodeError as exc:
        raise DesignerError(f"the designer's reply is not valid JSON: {exc}") from exc


def _toml_string(text: str) -> str:
    # A JSON string is a TOML basic string: the same quotes and escapes.
    return json.dumps(text, ensure_ascii=False)


@attrs.frozen
class DesignerCall:
    """The designer call a task came from, where the designer is trained on its regret: the
    call's record id in the Reef scenario that serves the designer, and the comparison group of
    the generation's calls (kept in ``task.toml`` under ``[metadata.spade]``)."""

    record_id: str
    group: str


def tasks_from_reply(
    reply: str,
    *,
    generation: int,
    sources: tuple[str, ...],
    verifier_timeout_seconds: float,
    first_index: int = 0,
    call: DesignerCall | None = None,
) -> tuple[HarborTask, ...]:
    """The tasks of the designer's ``reply``, named ``spade-<generation>-<n>-<digest>`` (``n``
    from ``first_index``), each naming the designer ``call`` it came from when given.

    :raises DesignerError: when the reply is not the JSON asked for, or a task is not a valid
        Harbor task.
    """
    document = _json_object(reply)
    entries = document.get("tasks") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise DesignerError("the designer's JSON has no tasks list")
    tasks = []
    for index, entry in enumerate(entries, start=first_index):
        if not isinstance(entry, dict) or any(not isinstance(entry.get(k), str) for k in _KEYS):
            raise DesignerError(f"task {index} of the designer's reply needs {', '.join(_KEYS)}")
        origin = (
            ""
            if call is None
            else f"designer_record = {_toml_string(call.record_id)}\n"
            f"designer_group = {_toml_string(call.group)}\n"
        )
        toml = (
            'version = "1.0"\n\n[metadata]\nauthor_name = "spade"\n'
            f"generation = {generation}\n\n[metadata.spade]\n"
            f"hint = {_toml_string(entry['hint'])}\n{origin}\n"
            f"[verifier]\ntimeout_sec = {float(verifier_timeout_seconds)}\n"
        )
        files = {
            "task.toml": toml,
            "instruction.md": entry["instruction"],
            "tests/test.sh": entry["test_sh"],
            "solution/solve.sh": entry["solve_sh"],
        }
        digest = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:10]
        try:
            tasks.append(
                HarborTask(
                    name=f"spade-{generation}-{index}-{digest}",
                    files=files,
                    source_agent_record_ids=sources,
                )
            )
        except ReefError as exc:
            raise DesignerError(f"task {index} of the designer's reply: {exc}") from exc
    return tuple(tasks)


def _spade_metadata(task: HarborTask) -> Mapping[str, Any]:
    """The task's ``[metadata.spade]`` table (empty when it has none or no readable toml)."""
    try:
        document = task.toml()
    except HarborTaskError:
        return {}
    metadata = document.get("metadata")
    spade = metadata.get("spade") if isinstance(metadata, dict) else None
    return spade if isinstance(spade, dict) else {}


def hint_of(task: HarborTask) -> str | None:
    """The hint SPADE kept in the task's ``task.toml``, if any."""
    hint = _spade_metadata(task).get("hint")
    return hint if isinstance(hint, str) and hint else None


def call_of(task: HarborTask) -> DesignerCall | None:
    """The designer call SPADE kept in the task's ``task.toml``, if any."""
    spade = _spade_metadata(task)
    record, group = spade.get("designer_record"), spade.get("designer_group")
    if isinstance(record, str) and isinstance(group, str):
        return DesignerCall(record, group)
    return None


@attrs.frozen
class DesignerReply:
    """The designer's reply text, and the id Reef recorded its call under (the
    ``x-reef-record-id`` header; ``None`` where Reef does not serve the designer)."""

    text: str
    record_id: str | None


class Designer:
    """Asks the designer model, an OpenAI-compatible engine at ``url`` (``.../v1``)."""

    def __init__(
        self,
        url: str,
        *,
        model: str | None,
        api_key: str | None,
        temperature: float,
        max_tokens: int,
        timeout: float = 600.0,
    ) -> None:
        headers = dict(DESIGNER_TAG)
        if api_key:
            headers["authorization"] = f"Bearer {api_key}"
        self._url = f"{url.rstrip('/')}/chat/completions"
        self._headers = headers
        self._timeout = timeout
        self._body: Mapping[str, Any] = {
            **({"model": model} if model else {}),
            "temperature": temperature,
            "max_tokens": max_tokens,
        }

    async def ask(self, prompt: str) -> DesignerReply:
        """The designer's reply to ``prompt``. :raises DesignerError: when it does not answer."""
        body = {**self._body, "messages": [{"role": "user", "content": prompt}]}
        # A client per call: the generator's calls may run on different event loops.
        try:
            async with httpx.AsyncClient(headers=self._headers, timeout=self._timeout) as client:
                response = await client.post(self._url, json=body)
        except httpx.HTTPError as exc:
            raise DesignerError(f"the designer did not answer: {exc}") from exc
        if response.status_code != 200:
            raise DesignerError(
                f"the designer answered {response.status_code}: {response.text[:500]}"
            )
        try:
            content = response.json()["choices"][0]["message"]["content"]
        except (ValueError, LookupError, TypeError) as exc:
            raise DesignerError("the designer's answer is not a chat completion") from exc
        if not isinstance(content, str):
            raise DesignerError("the designer's answer has no text")
        return DesignerReply(content, response.headers.get("x-reef-record-id"))
