"""OpenClaw-RL's judge: an agent turn scored from its next state by m votes of a judge model.

Each vote asks the judge model, through an OpenAI-compatible ``/chat/completions`` endpoint,
whether the assistant's output at a turn did what was wanted, with the turn's *next state*
(the user's reply, or the tools' results, that followed it) as the evidence. The vote ends
with ``\\boxed{1}`` (good), ``\\boxed{-1}`` (bad) or, in the binary prompt, ``\\boxed{0}``
(cannot tell). With ``hints`` the judge writes, for a good vote, a short hindsight hint between
``[HINT_START]`` and ``[HINT_END]``: what the next state revealed that would have made the
reply better. The verdict is the majority of the valid votes; no valid vote, or a tie for the
most votes, is 0 (as OpenClaw-RL's ``_majority_vote`` decides).

A vote's call is bounded by ``timeout_seconds`` and tried again, up to ``attempts``, when it
fails or its answer holds no decision; a vote that never succeeds does not count. A turn whose
votes all fail raises :class:`JudgeUnavailable`, and the whole turn is bounded by
``deadline_seconds``: the stage then ends the turn untrained and counts it (``judge_failed``).
Every call of a judge goes through one HTTP client, closed when the stage closes.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs
import httpx

from reef import JSON, PluginSettings, ReefError, config_option

_DECISION: Final = re.compile(r"\\boxed\{\s*([-+]?\d+)\s*\}")
_HINT: Final = re.compile(r"\[HINT_START\](.*?)\[HINT_END\]", re.DOTALL)

_ROLES: Final = (
    "The next state is the message that followed the assistant's output: a user message is "
    "the user's reply; a tool message is what a tool the assistant called returned, which "
    "exists because the assistant acted (a successful result means the action worked)."
)

_BINARY: Final = (
    "You grade one step of an AI assistant's work. You see the assistant's output and the "
    "next state that followed it. " + _ROLES + "\n\n"
    "Decide whether the output did what was wanted at that step, reading the next state as "
    "the evidence:\n"
    "- \\boxed{1}: it did: the user moves on or is satisfied, or a tool reports success.\n"
    "- \\boxed{-1}: it did not: the user asks again, corrects, rephrases or asks for a "
    "change, or a tool reports an error the output caused.\n"
    "- \\boxed{0}: the next state does not tell (an unrelated follow-up).\n"
    "Reason briefly, then end with exactly one of \\boxed{1}, \\boxed{-1}, \\boxed{0}."
)

_HINTS: Final = (
    "You read one step of an AI assistant's work in hindsight. You see the assistant's output "
    "and the next state that followed it. " + _ROLES + "\n\n"
    "Decide whether the next state reveals something that would have made the output better.\n"
    "- \\boxed{1}: it does. Then write that knowledge as a hint of one to three concrete "
    "sentences between [HINT_START] and [HINT_END].\n"
    "- \\boxed{-1}: it does not; write no hint.\n"
    "End with exactly one of \\boxed{1} or \\boxed{-1}."
)


class JudgeUnavailable(ReefError, RuntimeError):
    """No vote of a turn's judgment succeeded: the turn cannot be judged."""


@attrs.frozen
class JudgeSettings(PluginSettings):
    """The judge model behind an OpenAI-compatible endpoint, and how a turn is voted on."""

    base_url: str = config_option(help="the endpoint's base URL, ending in /v1")
    model: str = config_option(help="the judge model's name at the endpoint")
    api_key: str | None = config_option(None, help="its API key (a ${ENV} reference)")
    votes: int = config_option(
        3, help="m: votes per turn, decided by majority", validator=attrs.validators.ge(1)
    )
    temperature: float = config_option(
        0.6, help="the judge's sampling temperature", validator=attrs.validators.ge(0)
    )
    max_tokens: int = config_option(
        1024, help="the longest answer of one vote", validator=attrs.validators.ge(1)
    )
    timeout_seconds: float = config_option(
        60.0, help="how long one call may take", validator=attrs.validators.gt(0)
    )
    attempts: int = config_option(
        3, help="calls per vote before it counts as failed", validator=attrs.validators.ge(1)
    )
    deadline_seconds: float = config_option(
        300.0,
        help="how long a turn's whole judgment may take; past it the turn ends untrained",
        validator=attrs.validators.gt(0),
    )


@attrs.frozen
class Vote:
    """One vote: its decision (``None`` when it failed) and its hint (empty without one)."""

    score: int | None
    hint: str = ""


@attrs.frozen
class Verdict:
    """A turn's judgment: the majority ``score`` (+1, -1 or 0) and every vote."""

    score: int
    votes: tuple[Vote, ...]

    def hints(self, min_chars: int) -> list[str]:
        """The hints of the good votes longer than ``min_chars``, longest (the best) first."""
        found = [v.hint for v in self.votes if v.score == 1 and len(v.hint) > min_chars]
        return sorted(found, key=len, reverse=True)


def parse_vote(text: str, *, hints: bool) -> Vote:
    """The decision (the last ``\\boxed{}``) and hint of a judge's answer; a decision outside
    the prompt's choices is no decision."""
    decisions = _DECISION.findall(text)
    score = int(decisions[-1]) if decisions else None
    if score not in ((1, -1) if hints else (1, -1, 0)):
        return Vote(None)
    found = _HINT.findall(text) if hints else []
    return Vote(score, found[-1].strip() if found else "")


def majority(scores: Sequence[int | None]) -> int:
    """The most frequent valid score; 0 without one, or when several tie for the most."""
    counts = Counter(s for s in scores if s is not None).most_common()
    if not counts or (len(counts) > 1 and counts[0][1] == counts[1][1]):
        return 0
    return counts[0][0]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return "" if content is None else str(content)


def judge_messages(
    output: Mapping[str, Any], next_state: Sequence[Mapping[str, Any]], *, hints: bool
) -> list[JSON]:
    """The judge's chat messages for one turn: the assistant's ``output`` (its reply message)
    and the ``next_state`` messages that followed it."""
    said = _text(output.get("content"))
    calls = [
        f"[calls {c.get('function', {}).get('name')}({c.get('function', {}).get('arguments')})]"
        for c in output.get("tool_calls") or []
    ]
    state = "\n\n".join(f"[role: {m.get('role')}]\n{_text(m.get('content'))}" for m in next_state)
    user = (
        f"## The assistant's output\n{' '.join([said, *calls]).strip()}\n\n"
        f"## The next state\n{state}\n\n"
        + ("Decide, and write a hint if the decision is 1." if hints else "Decide.")
    )
    return [
        {"role": "system", "content": _HINTS if hints else _BINARY},
        {"role": "user", "content": user},
    ]


class Judge:
    """Votes on turns through the judge endpoint (see the module's documentation).

    :param settings: the endpoint and the voting.
    :param hints: ask for hindsight hints (the hint prompt) instead of the binary prompt.
    """

    def __init__(self, settings: JudgeSettings, *, hints: bool) -> None:
        self.settings = settings
        self.hints = hints
        self.url = settings.base_url.rstrip("/") + "/chat/completions"
        self._client: httpx.AsyncClient | None = None

    def _http(self) -> httpx.AsyncClient:
        # One client for every vote of every turn, made on the loop that runs the judgments
        # (the stage's worker) and closed there by aclose. No connection limit: turns judged
        # at once never wait for each other's connections.
        if self._client is None:
            self._client = httpx.AsyncClient(
                limits=httpx.Limits(max_connections=None, max_keepalive_connections=20)
            )
        return self._client

    async def aclose(self) -> None:
        """Close the judge's HTTP client (the stage does when it closes); a later verdict
        opens another."""
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    async def _vote(self, client: httpx.AsyncClient, messages: list[JSON]) -> Vote:
        body = {
            "model": self.settings.model,
            "messages": messages,
            "temperature": self.settings.temperature,
            "max_tokens": self.settings.max_tokens,
        }
        headers = {}
        if self.settings.api_key:
            headers["authorization"] = f"Bearer {self.settings.api_key}"
        for attempt in range(self.settings.attempts):
            if attempt:
                await asyncio.sleep(min(0.1 * 2**attempt, 2.0))
            try:
                answer = await client.post(
                    self.url, json=body, headers=headers, timeout=self.settings.timeout_seconds
                )
                answer.raise_for_status()
                text = _text(answer.json()["choices"][0]["message"].get("content"))
            except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError):
                continue  # a failed call: try the vote again
            vote = parse_vote(text, hints=self.hints)
            if vote.score is not None:
                return vote
        return Vote(None)

    async def verdict(
        self, output: Mapping[str, Any], next_state: Sequence[Mapping[str, Any]]
    ) -> Verdict:
        """The majority of ``votes`` votes on one turn, within ``deadline_seconds``.

        :raises JudgeUnavailable: when no vote succeeded.
        :raises TimeoutError: past the deadline.
        """
        messages = judge_messages(output, next_state, hints=self.hints)
        client = self._http()
        votes = await asyncio.wait_for(
            asyncio.gather(*(self._vote(client, messages) for _ in range(self.settings.votes))),
            timeout=self.settings.deadline_seconds,
        )
        if all(v.score is None for v in votes):
            raise JudgeUnavailable(
                f"none of the {len(votes)} votes of the judge at {self.url} succeeded"
            )
        return Verdict(majority([v.score for v in votes]), tuple(votes))
