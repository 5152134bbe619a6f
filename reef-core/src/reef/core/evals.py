"""Evaluation sets of a scenario, their results per artifact, and the eval gate's rule.

A deployment names a scenario's evaluation sets under ``evals:`` (:class:`EvalSetSection`):
a JSONL file of items, each a chat request's ``messages`` (or a ``prompt``, one user turn)
with what the verifier needs (``expected``, ``pattern``), scored by ``exact`` (the reply equals
``expected``, stripped), ``regex`` (the reply matches the item's ``pattern``, else the set's) or a
Python function named ``module:name`` (``function(reply, item) -> bool | float`` in [0, 1]).
``serve_if:`` (:class:`ServeIfSection`) makes one of them the gate of what the engine serves:
:func:`gate_verdict` is its rule.

Values and rules only: reading the file, importing a verifier and running an engine are a floor
up (:mod:`reef.evals`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

import attrs

from reef.core.config import config_option
from reef.core.container_settings import ContainerSettings
from reef.core.harbor import answer_file_name
from reef.core.plugins import PluginSettings
from reef.core.records import JSON
from reef.errors import ReefError

__all__ = [
    "BUILTIN_VERIFIERS",
    "EvalItem",
    "EvalItemError",
    "EvalResult",
    "EvalSamplingSection",
    "EvalSetSection",
    "GateVerdict",
    "ItemOutcome",
    "JudgeSection",
    "ServeIfSection",
    "gate_problems",
    "gate_verdict",
    "judged_score",
    "mean_score",
    "parse_eval_lines",
    "verify_builtin",
]

#: The verifiers Reef has built in; any other value is a Python function's ``module:name``.
BUILTIN_VERIFIERS: Final = ("exact", "regex", "judge")
#: The judge's default instruction: ``{prompt}``, ``{reply}`` and ``{expected}`` are filled in.
JUDGE_PROMPT: Final = (
    "You grade an assistant's reply. The request was:\n{prompt}\n\nThe reference answer"
    " is:\n{expected}\n\nThe reply is:\n{reply}\n\nAnswer with one number from 0 (wrong) to"
    " 1 (right), and nothing else."
)
_FUNCTION_REFERENCE = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")
_ITEM_KEYS: Final = frozenset({"id", "messages", "prompt", "expected", "pattern", "metadata"})


def _verifier(_: object, attribute: attrs.Attribute[Any], value: str) -> None:
    if value not in BUILTIN_VERIFIERS and not _FUNCTION_REFERENCE.fullmatch(value):
        raise ValueError(
            f"{attribute.name} {value!r} is neither {' nor '.join(BUILTIN_VERIFIERS)} nor a"
            " Python function as module:name (such as my_evals.checks:score)"
        )


def _pattern(_: object, attribute: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(
                f"{attribute.name} {value!r} is not a regular expression: {exc}"
            ) from exc


@attrs.frozen
class EvalSamplingSection(PluginSettings):
    """How an evaluation samples each reply (sent with every item's request, stored with the
    results)."""

    temperature: float = config_option(
        0.0, help="0 is greedy (the default: a score that does not move by chance)",
        validator=[attrs.validators.ge(0.0), attrs.validators.le(2.0)],
    )  # fmt: skip
    max_tokens: int = config_option(256, help="the longest reply", validator=attrs.validators.gt(0))
    top_p: float = config_option(
        1.0, help="nucleus sampling", validator=[attrs.validators.gt(0.0), attrs.validators.le(1.0)]
    )
    seed: int | None = config_option(0, help="the sampling seed of every item's request")

    def request_fields(self) -> JSON:
        """The fields of a chat-completions request these settings set."""
        fields: JSON = {
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "top_p": self.top_p,
        }
        if self.seed is not None:
            fields["seed"] = self.seed
        return fields


def _judge_prompt(_: object, attribute: attrs.Attribute[Any], value: str) -> None:
    try:
        value.format(prompt="", reply="", expected="")
    except (KeyError, IndexError, ValueError) as exc:
        raise ValueError(
            f"{attribute.name} may name {{prompt}}, {{reply}} and {{expected}} only"
            f" (double other braces): {exc!r}"
        ) from exc


@attrs.frozen
class JudgeSection(PluginSettings):
    """The judge model of a ``judge`` verifier: any OpenAI-compatible server."""

    url: str = config_option(help="the judge's base URL (http://host:port/v1)")
    model: str = config_option(help="the judge's model name")
    api_key: str | None = config_option(None, help="its API key; a ${ENV} reference")
    prompt: str = config_option(
        JUDGE_PROMPT, help="the instruction, with {prompt}, {reply}, {expected}",
        validator=_judge_prompt,
    )  # fmt: skip

    def request(self, item: EvalItem, reply: str) -> JSON:
        """The judge's chat request about ``reply`` to ``item`` (greedy, short)."""
        asked = "\n".join(str(m.get("content")) for m in item.messages)
        text = self.prompt.format(
            prompt=asked, reply=reply, expected=item.fields.get("expected", "")
        )
        return {
            "model": self.model,
            "messages": [{"role": "user", "content": text}],
            "temperature": 0,
            "max_tokens": 8,
        }


_JUDGED = re.compile(r"\b(0(?:\.\d+)?|1(?:\.0+)?)\b")


def judged_score(text: str) -> float:
    """The score a judge's answer gives: its first number in [0, 1].

    :raises ValueError: when the answer holds none.
    """
    found = _JUDGED.search(text)
    if found is None:
        raise ValueError(f"the judge answered no score in [0, 1]: {text[:80]!r}")
    return float(found.group(1))


@attrs.frozen
class EvalSetSection(PluginSettings):
    """One evaluation set of a scenario (``evals.<name>``): the items of a JSONL file
    (``data``) scored by ``verifier``, or the Harbor tasks of a folder (``tasks``), each played
    once and scored by its own verifier."""

    data: str | None = config_option(
        None, help="a JSONL file of items: messages or prompt, and expected"
    )
    tasks: str | None = config_option(
        None,
        help="a folder of Harbor tasks (task.toml, instruction.md, tests/test.sh each), scored"
        " by their own verifiers",
    )
    verifier: str | None = config_option(
        None,
        help="data: exact (the default), regex, judge, or a Python function module:name",
        validator=attrs.validators.optional(_verifier),
    )
    pattern: str | None = config_option(
        None, help="regex: the pattern of an item that sets none", validator=_pattern
    )
    sampling: EvalSamplingSection = config_option(
        factory=EvalSamplingSection, help="temperature, max_tokens, top_p, seed"
    )
    judge: JudgeSection | None = config_option(
        None, help="judge: the model that grades each reply (url, model, api_key, prompt)"
    )
    answer_file: str = config_option(
        "answer.txt",
        help="tasks: the file in /app the reply is written to, where the verifier reads it",
        validator=answer_file_name,
    )
    sandbox: ContainerSettings = config_option(
        factory=ContainerSettings,
        help="tasks: where each verifier runs (backend sandbox or docker) and its limits",
    )

    def __attrs_post_init__(self) -> None:
        if (self.data is None) == (self.tasks is None):
            raise ValueError(
                "give data (a JSONL file of items) or tasks (a folder of Harbor tasks): one"
            )
        if self.tasks is not None and (self.verifier, self.judge, self.pattern) != (None,) * 3:
            raise ValueError(
                "tasks are scored by their own verifiers (tests/test.sh): leave verifier,"
                " judge and pattern out"
            )
        if (self.verifier == "judge") != (self.judge is not None):
            raise ValueError("verifier judge and a judge section go together: give both or neither")

    @property
    def scored_by(self) -> str:
        """The verifier of a ``data`` set: ``verifier``, ``exact`` when unset."""
        return self.verifier or "exact"


@attrs.frozen
class ServeIfSection(PluginSettings):
    """The eval gate: the engine serves a new artifact only when its score on ``eval`` is not
    below the served artifact's by more than ``not_worse_than``."""

    eval: str = config_option(help="the name of one of the scenario's evals")
    not_worse_than: float = config_option(
        0.0, help="the margin, in score points", validator=attrs.validators.ge(0.0)
    )
    resume_from: Literal["trained", "served"] = config_option(
        "trained",
        help="after a refusal the trainer goes on from its trained weights, or the served ones",
    )


class EvalItemError(ReefError, ValueError):
    """An evaluation item that cannot be used; the message names its line and key."""


@attrs.frozen
class EvalItem:
    """One item: its id (``line-<n>`` when it has none), the chat request's ``messages``, and
    the fields the verifier reads."""

    item_id: str
    messages: tuple[JSON, ...]
    fields: JSON

    def request(self, sampling: EvalSamplingSection) -> JSON:
        """The chat-completions request of this item (without ``model``). With a seed, the
        item is sampled with its own, drawn from the set's seed and its id: one seed for every
        item would draw the same random numbers for each, and items sampled at a temperature
        would then fail or pass together instead of each by its own chance."""
        fields = sampling.request_fields()
        if "seed" in fields:
            digest = hashlib.sha256(f"{fields['seed']}:{self.item_id}".encode()).digest()
            fields["seed"] = int.from_bytes(digest[:4], "big") >> 1
        return {"messages": [dict(m) for m in self.messages], **fields}


def _item(line: int, body: Any, section: EvalSetSection) -> EvalItem:
    where = f"line {line}"
    if not isinstance(body, dict):
        raise EvalItemError(f"{where}: an item is a JSON object, got {type(body).__name__}")
    unknown = sorted(set(body) - _ITEM_KEYS)
    if unknown:
        raise EvalItemError(
            f"{where}: unknown key(s) {', '.join(unknown)}; an item has"
            f" {', '.join(sorted(_ITEM_KEYS))}"
        )
    messages = body.get("messages")
    prompt = body.get("prompt")
    if (messages is None) == (prompt is None):
        raise EvalItemError(f"{where}: give messages (a chat) or prompt (one user turn), one")
    if prompt is not None:
        if not isinstance(prompt, str):
            raise EvalItemError(f"{where}: prompt is a string")
        messages = [{"role": "user", "content": prompt}]
    if (
        not isinstance(messages, list)
        or not messages
        or not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages)
    ):
        raise EvalItemError(f"{where}: messages is a non-empty list of {{role, content}} objects")
    if section.scored_by == "exact" and not isinstance(body.get("expected"), str):
        raise EvalItemError(f"{where}: the exact verifier compares with expected, a string")
    if section.scored_by == "regex":
        pattern = body.get("pattern", section.pattern)
        if not isinstance(pattern, str):
            raise EvalItemError(
                f"{where}: the regex verifier needs pattern, on the item or on the eval set"
            )
        try:
            re.compile(pattern)
        except re.error as exc:
            raise EvalItemError(f"{where}: pattern {pattern!r} is not a regex: {exc}") from exc
    item_id = body.get("id", f"line-{line}")
    if not isinstance(item_id, str) or not item_id:
        raise EvalItemError(f"{where}: id is a non-empty string")
    fields = {k: v for k, v in body.items() if k not in ("id", "messages", "prompt")}
    return EvalItem(item_id, tuple(messages), fields)


def parse_eval_lines(text: str, section: EvalSetSection) -> tuple[EvalItem, ...]:
    """The items of a JSONL eval file's ``text`` (blank lines skipped).

    :raises EvalItemError: naming the first line that is not a usable item, a repeated id, or
        a file without items.
    """
    items: list[EvalItem] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            body = json.loads(line)
        except json.JSONDecodeError as exc:
            raise EvalItemError(f"line {number}: not JSON: {exc.msg}") from exc
        item = _item(number, body, section)
        first = seen.setdefault(item.item_id, number)
        if first != number:
            raise EvalItemError(f"line {number}: id {item.item_id!r} is line {first}'s too")
        items.append(item)
    if not items:
        raise EvalItemError("the file holds no item: one JSON object per line")
    return tuple(items)


def verify_builtin(section: EvalSetSection, item: EvalItem, reply: str) -> float:
    """The score in [0, 1] of ``reply`` by the ``exact`` or ``regex`` verifier."""
    if section.scored_by == "exact":
        return 1.0 if reply.strip() == str(item.fields["expected"]).strip() else 0.0
    pattern = item.fields.get("pattern", section.pattern)
    assert isinstance(pattern, str)  # parse_eval_lines checked it
    return 1.0 if re.search(pattern, reply) else 0.0


@attrs.frozen
class ItemOutcome:
    """One item's outcome: the reply, its score, and the error when there was no reply."""

    item_id: str
    score: float
    reply: str | None
    error: str | None = None

    def to_json(self) -> JSON:
        return attrs.asdict(self)


@attrs.frozen
class EvalResult:
    """An artifact's result on one eval set: what a tracker or a console reads.

    :ivar score: the mean of the items' scores (an item without a reply scores 0).
    :ivar items: each item's outcome, in the file's order.
    :ivar sampling: the request fields every item was sampled with.
    :ivar at: when it was measured (seconds since the epoch).
    """

    scenario: str
    trainer: str
    artifact_id: str
    eval: str
    score: float
    items: tuple[ItemOutcome, ...]
    sampling: JSON
    at: float

    @property
    def errors(self) -> int:
        """How many items got no reply (an engine error)."""
        return sum(1 for item in self.items if item.error is not None)

    def summary(self) -> JSON:
        """The result without its items (status, trackers)."""
        return {
            "scenario": self.scenario,
            "trainer": self.trainer,
            "artifact_id": self.artifact_id,
            "eval": self.eval,
            "score": self.score,
            "items": len(self.items),
            "errors": self.errors,
            "sampling": dict(self.sampling),
            "at": self.at,
        }


def mean_score(outcomes: Sequence[ItemOutcome]) -> float:
    """The score of a set of outcomes: their mean (0 for none)."""
    return sum(o.score for o in outcomes) / len(outcomes) if outcomes else 0.0


@attrs.frozen
class GateVerdict:
    """Whether a new artifact is served, and why, in words a person reads in the status."""

    serve: bool
    reason: str


def gate_verdict(
    gate: ServeIfSection, candidate: float, served: float | None, served_id: str | None
) -> GateVerdict:
    """The gate's rule: serve ``candidate``'s artifact when nothing is served yet, or when its
    score is at least the served artifact's minus the margin."""
    if served is None or served_id is None:
        return GateVerdict(True, f"{gate.eval}: {candidate:.4f}; nothing was served before it")
    floor = served - gate.not_worse_than
    # A float margin: 0.8 - 0.02 must admit 0.78.
    passes = candidate >= floor - 1e-12
    comparison = ">=" if passes else "<"
    reason = (
        f"{gate.eval}: {candidate:.4f} {comparison} {floor:.4f} (the served {served_id[:23]}"
        f" scored {served:.4f}, margin {gate.not_worse_than})"
    )
    return GateVerdict(passes, reason)


def gate_problems(evals: Mapping[str, EvalSetSection], gate: ServeIfSection | None) -> list[str]:
    """What is wrong with a scenario's ``serve_if`` given its ``evals`` (``[]``: nothing)."""
    if gate is not None and gate.eval not in evals:
        known = ", ".join(sorted(evals)) or "none"
        return [f"serve_if.eval {gate.eval!r} names no eval of the scenario (its evals: {known})"]
    return []
