"""A model's Hugging Face tokenizer as a :class:`reef.core.chat_rendering.Tokenizer`, so every
component renders with the model's own tokenizer and chat template exactly as the engine does:
the local component with a model folder (:mod:`reef.components.local.hf`), Tinker's
``TrainingClient.get_tokenizer``, the tokenizer folder slime reads.

The template is the tokenizer's (``chat_template.jinja``, or ``chat_template`` in
``tokenizer_config.json``); its variables are the special tokens transformers passes to it; text
is encoded without added special tokens (the template writes its own), as
``apply_chat_template`` does; the stop tokens are the end-of-sequence tokens of the model's
generation config and of the tokenizer, where vLLM stops.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from reef.core.chat_rendering import Tokenizer


def _bytes_of_byte_level() -> dict[str, int]:
    """The inverse of the byte-to-character map of byte-level BPE (GPT-2's): printable bytes
    stand for themselves, the others for characters from U+0100 on."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    characters = list(printable)
    shift = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            characters.append(256 + shift)
            shift += 1
    return {chr(c): b for b, c in zip(printable, characters, strict=True)}


_BYTE_LEVEL: Final = _bytes_of_byte_level()


class HFTokenizer:
    """Adapts a ``transformers`` tokenizer to :class:`reef.core.chat_rendering.Tokenizer`.

    :param tokenizer: a ``PreTrainedTokenizer`` (or fast one) with a chat template.
    :param stop_token_ids: the tokens that end a reply; the tokenizer's end-of-sequence token
        when ``None``.
    :raises ValueError: when the tokenizer has no chat template.
    """

    def __init__(self, tokenizer: Any, stop_token_ids: Sequence[int] | None = None) -> None:
        template = getattr(tokenizer, "chat_template", None)
        if isinstance(template, dict):
            # Several named templates: engines render with the default one.
            template = template.get("default")
        if not isinstance(template, str) or not template:
            raise ValueError(
                f"the tokenizer of {getattr(tokenizer, 'name_or_path', 'the model')} has no chat"
                " template (chat_template.jinja, or chat_template in tokenizer_config.json), so"
                " samples cannot render as the engine renders them"
            )
        self.hf = tokenizer
        self._chat_template = template
        if stop_token_ids is None:
            eos = tokenizer.eos_token_id
            stop_token_ids = eos if isinstance(eos, list) else [] if eos is None else [eos]
        self._stop_token_ids = tuple(dict.fromkeys(int(i) for i in stop_token_ids))
        added = getattr(tokenizer, "added_tokens_decoder", {})
        self._added = {int(index): str(token.content) for index, token in added.items()}
        backend = getattr(tokenizer, "backend_tokenizer", None)
        decoder = None if backend is None else backend.decoder
        self._byte_level = decoder is not None and type(decoder).__name__ == "ByteLevel"

    @property
    def chat_template(self) -> str:
        """The model's Jinja chat template."""
        return self._chat_template

    @property
    def special_tokens(self) -> Mapping[str, str]:
        """The tokenizer's named special tokens (``bos_token``, ``eos_token``, ``pad_token``...),
        as transformers gives them to templates."""
        return {str(k): str(v) for k, v in self.hf.special_tokens_map.items() if v is not None}

    @property
    def stop_token_ids(self) -> tuple[int, ...]:
        """The tokens that end a reply: a reply trains through the last of them."""
        return self._stop_token_ids

    @property
    def vocab_size(self) -> int:
        """Every token id, added tokens included, is below it."""
        return len(self.hf)

    def encode(self, text: str) -> list[int]:
        """The ids of rendered chat text, as ``apply_chat_template`` tokenizes it (no special
        tokens added: the template writes its own)."""
        return [int(i) for i in self.hf.encode(text, add_special_tokens=False)]

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids``, special tokens kept, so the text encodes back to them."""
        return str(self.hf.decode(list(ids), skip_special_tokens=False))

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes a token stands for: an added token's text, a byte-level token's bytes,
        a ``<0xNN>`` byte-fallback token's byte, else the token's decoded text."""
        added = self._added.get(token_id)
        if added is not None:
            return added.encode("utf-8")
        token = self.hf.convert_ids_to_tokens(token_id)
        if not isinstance(token, str):
            raise ValueError(f"token id {token_id} is outside the vocabulary of {len(self.hf)}")
        if self._byte_level and all(c in _BYTE_LEVEL for c in token):
            return bytes(_BYTE_LEVEL[c] for c in token)
        if len(token) == 6 and token.startswith("<0x") and token.endswith(">"):
            return bytes([int(token[3:5], 16)])
        return self.decode([token_id]).encode("utf-8")


def folder_stop_token_ids(folder: Path, tokenizer: Any) -> list[int]:
    """The end-of-sequence tokens of the model folder's ``generation_config.json`` and of its
    tokenizer: where an engine serving the folder stops a reply.

    :raises ValueError: when neither names one (no reply could end).
    """
    ids: list[int] = []
    if (folder / "generation_config.json").exists():
        from transformers import GenerationConfig

        eos = GenerationConfig.from_pretrained(folder).eos_token_id
        ids.extend(eos if isinstance(eos, list) else [] if eos is None else [eos])
    if tokenizer.eos_token_id is not None:
        ids.append(int(tokenizer.eos_token_id))
    if not ids:
        raise ValueError(
            f"{folder}: neither the generation config nor the tokenizer names an "
            "end-of-sequence token, so no reply could end"
        )
    return ids


#: The tokenizer name that selects Reef's byte-level demo tokenizer instead of a folder.
BYTE_TOKENIZER = "byte"


def load_tokenizer(name: str) -> Tokenizer:
    """The tokenizer a component's ``tokenizer`` setting names: :data:`BYTE_TOKENIZER`, or a
    Hugging Face tokenizer folder (``transformers`` reads it), with the stop tokens of its
    generation config where the folder has one.

    :raises ValueError: for a folder without a chat template.
    """
    if name == BYTE_TOKENIZER:
        from reef.components.local.byte_tokenizer import ByteTokenizer

        return ByteTokenizer()
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(name)
    folder = Path(name)
    stops = folder_stop_token_ids(folder, tokenizer) if folder.is_dir() else None
    return HFTokenizer(tokenizer, stops)
