"""The agent that plays a task: one chat turn, its reply left as the attempt.

:class:`AnswerAgent` asks the policy the task's instruction (with a hint, for a generator's
hint play) in one user message and writes the reply, stripped, to ``answer_file`` in ``/app``,
where the task's verifier reads it. A training component plays its tasks this way
(``rollout.agent``), and so does the generator service for a generator's plays, so both see a
task the same way.
"""

from __future__ import annotations

import attrs

from reef.core.config import config_option
from reef.core.container_settings import positive
from reef.core.harbor import answer_file_name
from reef.core.plugins import PluginSettings
from reef.core.records import JSON

__all__ = ["AnswerAgent"]


@attrs.frozen
class AnswerAgent(PluginSettings):
    """A single-turn agent (see the module's documentation)."""

    answer_file: str = config_option(
        "answer.txt", help="the file in /app the reply is written to", validator=answer_file_name
    )
    max_tokens: int = config_option(64, help="the longest reply, in tokens", validator=positive)
    temperature: float = config_option(
        1.0,
        help="the policy's sampling temperature (0 is greedy)",
        validator=attrs.validators.ge(0),
    )

    def messages(self, instruction: str, hint: str | None = None) -> list[JSON]:
        """The chat messages that ask the policy to do the task."""
        text = instruction if hint is None else f"{instruction}\n\nHint: {hint}"
        return [{"role": "user", "content": text}]

    def request(self, instruction: str, hint: str | None = None) -> JSON:
        """The OpenAI chat-completions request of one play."""
        return {
            "messages": self.messages(instruction, hint),
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
        }

    def attempt(self, reply: str) -> dict[str, str]:
        """The files the reply leaves in ``/app``, by path relative to it."""
        return {self.answer_file: reply.strip()}
