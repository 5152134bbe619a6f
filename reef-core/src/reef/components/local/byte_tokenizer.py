"""A byte-level tokenizer with a built-in chat template, for the demo model.

No model hub is reachable where Reef's demo runs, so the demo model needs a tokenizer that
lives in the repository: every byte is a token (ids 0-255), and a few special tokens follow.
Its chat template is ChatML with tools, tool calls as JSON blocks, and Qwen3-style thinking
(``enable_thinking``), so that the demo exercises everything a real template does: the engine's
chat template arguments change the prompt, replies carry reasoning and tool calls, and the
template's text after a reply's stop token is context, not a generated token.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

#: The special tokens, in id order after the 256 bytes.
SPECIAL_TOKENS: Final = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
)

#: The demo chat template. A reply is everything after ``<|im_start|>assistant\n`` up to and
#: including ``<|im_end|>``; with ``enable_thinking`` false the generation prompt closes an
#: empty thinking block, as Qwen3's does, and a reply renders the same empty block.
CHAT_TEMPLATE: Final = (
    "{%- set thinking = enable_thinking is not defined or enable_thinking -%}"
    "{%- if messages[0].role == 'system' or tools -%}"
    "<|im_start|>system{{ '\\n' }}"
    "{%- if messages[0].role == 'system' %}{{ messages[0].content }}{% endif -%}"
    "{%- if tools %}{{ '\\n' if messages[0].role == 'system' }}# Tools{{ '\\n' }}"
    "{%- for tool in tools %}{{ tool | tojson }}{{ '\\n' }}{% endfor -%}"
    'Call a tool as <tool_call>{"name": ..., "arguments": {...}}</tool_call>'
    "{%- endif %}<|im_end|>{{ '\\n' }}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if message.role == 'system' and loop.first -%}"
    "{%- elif message.role == 'assistant' -%}"
    "<|im_start|>assistant{{ '\\n' }}"
    "{%- if message.reasoning_content -%}<think>{{ message.reasoning_content }}</think>"
    "{%- elif not thinking -%}<think></think>{%- endif -%}"
    "{{ message.content or '' }}"
    "{%- for call in message.tool_calls or [] -%}"
    "<tool_call>{{ {'name': call.function.name, 'arguments': call.function.arguments} | tojson }}"
    "</tool_call>"
    "{%- endfor -%}"
    "<|im_end|>{{ '\\n' }}"
    "{%- else -%}"
    "<|im_start|>{{ message.role }}{{ '\\n' }}{{ message.content }}<|im_end|>{{ '\\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "<|im_start|>assistant{{ '\\n' }}{%- if not thinking %}<think></think>{% endif -%}"
    "{%- endif -%}"
)

_FORMAT: Final = "reef-byte-tokenizer"
_FILE: Final = "tokenizer.json"


class ByteTokenizer:
    """Bytes as tokens, plus special tokens; implements :class:`reef.core.chat_rendering.Tokenizer`.

    :param chat_template: the template to serve the model with (the demo's by default).
    """

    def __init__(self, chat_template: str = CHAT_TEMPLATE) -> None:
        self._chat_template = chat_template
        self._special_ids = {token: 256 + i for i, token in enumerate(SPECIAL_TOKENS)}
        self._split = re.compile("(" + "|".join(re.escape(t) for t in SPECIAL_TOKENS) + ")")

    @property
    def chat_template(self) -> str:
        """The chat template the model is served with."""
        return self._chat_template

    @property
    def special_tokens(self) -> Mapping[str, str]:
        """``bos_token`` (none) and ``eos_token``, for templates that read them."""
        return {"bos_token": "", "eos_token": "<|endoftext|>"}

    @property
    def stop_token_ids(self) -> tuple[int, ...]:
        """``<|im_end|>`` ends a reply; ``<|endoftext|>`` ends any text."""
        return (self._special_ids["<|im_end|>"], self._special_ids["<|endoftext|>"])

    @property
    def vocab_size(self) -> int:
        """256 bytes and the special tokens."""
        return 256 + len(SPECIAL_TOKENS)

    def encode(self, text: str) -> list[int]:
        """UTF-8 bytes, with each special token's text as its one id."""
        ids: list[int] = []
        for piece in self._split.split(text):
            special = self._special_ids.get(piece)
            if special is not None:
                ids.append(special)
            else:
                ids.extend(piece.encode("utf-8"))
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids``; a byte sequence that is not UTF-8 decodes with replacements."""
        return b"".join(self.token_bytes(i) for i in ids).decode("utf-8", errors="replace")

    def token_bytes(self, token_id: int) -> bytes:
        """A byte's own byte, or a special token's UTF-8 text."""
        if 0 <= token_id < 256:
            return bytes([token_id])
        if 256 <= token_id < self.vocab_size:
            return SPECIAL_TOKENS[token_id - 256].encode("utf-8")
        raise ValueError(f"token id {token_id} is outside the vocabulary of {self.vocab_size}")

    def save(self, folder: Path) -> None:
        """Write the tokenizer into a model folder (``tokenizer.json``)."""
        body = {"format": _FORMAT, "chat_template": self._chat_template}
        (folder / _FILE).write_text(json.dumps(body, indent=1), encoding="utf-8")

    @classmethod
    def load(cls, folder: Path) -> ByteTokenizer:
        """Read the tokenizer that :meth:`save` wrote into ``folder``.

        :raises ValueError: when the folder holds no tokenizer of this kind.
        """
        path = folder / _FILE
        try:
            body = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path}: no readable tokenizer ({exc})") from exc
        if not isinstance(body, dict) or body.get("format") != _FORMAT:
            raise ValueError(f"{path}: not a {_FORMAT} file")
        return cls(chat_template=str(body["chat_template"]))
