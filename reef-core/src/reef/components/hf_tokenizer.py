"""A model's Hugging Face tokenizer as a :class:`reef.core.chat_rendering.Tokenizer`, so the
hosted components (Tinker's ``TrainingClient.get_tokenizer``; the tokenizer folder slime reads)
render with the model's own chat template exactly as every component does."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from reef.core.chat_rendering import Tokenizer


class HFTokenizer:
    """Adapts a ``transformers`` tokenizer to :class:`reef.core.chat_rendering.Tokenizer`.

    :param tokenizer: a ``PreTrainedTokenizer`` (or fast one) with a chat template.
    :raises ValueError: when the tokenizer has no chat template.
    """

    def __init__(self, tokenizer: Any) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError(
                f"the tokenizer of {getattr(tokenizer, 'name_or_path', 'the model')} has no chat"
                " template, so samples cannot render as the engine renders them"
            )
        self._tokenizer = tokenizer

    @property
    def chat_template(self) -> str:
        """The model's Jinja chat template."""
        return str(self._tokenizer.chat_template)

    @property
    def special_tokens(self) -> Mapping[str, str]:
        """``bos_token`` and ``eos_token``, where the tokenizer has them."""
        names = ("bos_token", "eos_token")
        return {n: str(v) for n in names if (v := getattr(self._tokenizer, n, None)) is not None}

    @property
    def stop_token_ids(self) -> tuple[int, ...]:
        """The end-of-sequence token (and the generation config's, when the tokenizer knows
        more): a reply trains through the last of them."""
        eos = self._tokenizer.eos_token_id
        ids = eos if isinstance(eos, list) else [eos]
        return tuple(int(i) for i in ids if i is not None)

    @property
    def vocab_size(self) -> int:
        """Every token id, added tokens included, is below it."""
        return len(self._tokenizer)

    def encode(self, text: str) -> list[int]:
        """The token ids of ``text``; the template writes the special tokens itself."""
        return list(self._tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids``."""
        return str(self._tokenizer.decode(list(ids)))

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes one token stands for."""
        return self.decode([token_id]).encode("utf-8")


#: The tokenizer name that selects Reef's byte-level demo tokenizer instead of a folder.
BYTE_TOKENIZER = "byte"


def load_tokenizer(name: str) -> Tokenizer:
    """The tokenizer a component's ``tokenizer`` setting names: :data:`BYTE_TOKENIZER`, or a
    Hugging Face tokenizer folder (``transformers`` reads it).

    :raises ValueError: for a folder without a chat template.
    """
    if name == BYTE_TOKENIZER:
        from reef.components.byte_tokenizer import ByteTokenizer

        return ByteTokenizer()
    from transformers import AutoTokenizer

    return HFTokenizer(AutoTokenizer.from_pretrained(name))
