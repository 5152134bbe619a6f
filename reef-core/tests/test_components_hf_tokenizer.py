"""A Hugging Face tokenizer folder (what slime reads, what Tinker gives for its base model) renders
samples exactly as ``transformers``' own ``apply_chat_template`` does. The tokenizer is trained
here on a few lines of text (nothing loads from a hub)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("jinja2")
tokenizers = pytest.importorskip("tokenizers")
transformers = pytest.importorskip("transformers")

from reef.components.tokenizers import BYTE_TOKENIZER, HFTokenizer, load_tokenizer  # noqa: E402
from reef.core.chat_rendering import ChatRenderer  # noqa: E402

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    raw = Tokenizer(models.BPE(unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<unk>", "<|im_start|>", "<|im_end|>"]
    )
    raw.train_from_iterator(["colour red blue user assistant system question answer"] * 20, trainer)
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=raw, eos_token="<|im_end|>", unk_token="<unk>"
    )
    fast.chat_template = CHATML
    path = tmp_path_factory.mktemp("tokenizer")
    fast.save_pretrained(path)
    return path


def test_a_tokenizer_folder_renders_as_transformers_does(folder: Path) -> None:
    tokenizer = load_tokenizer(str(folder))
    assert isinstance(tokenizer, HFTokenizer)
    reference = transformers.AutoTokenizer.from_pretrained(folder)
    messages = [
        {"role": "user", "content": "colour red"},
        {"role": "assistant", "content": "blue"},
    ]
    renderer = ChatRenderer(tokenizer)
    expected = reference.apply_chat_template(
        messages[:1], add_generation_prompt=True, tokenize=True, return_dict=False
    )
    assert renderer.prompt_ids({"messages": messages[:1]}) == list(expected)
    trajectory = {
        "steps": [
            {"step_id": 1, "source": "user", "message": "colour red"},
            {"step_id": 2, "source": "agent", "message": "blue"},
        ]
    }
    (sequence,) = renderer.render_sample(trajectory).sequences
    trained = [t for t, m in zip(sequence.token_ids, sequence.loss_mask, strict=True) if m]
    assert tokenizer.decode(trained) == "blue<|im_end|>"  # the reply through its stop token
    assert tokenizer.stop_token_ids == (reference.eos_token_id,)


def test_byte_names_the_demo_tokenizer() -> None:
    assert type(load_tokenizer(BYTE_TOKENIZER)).__name__ == "ByteTokenizer"
