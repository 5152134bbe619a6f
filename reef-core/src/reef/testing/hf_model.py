"""A tiny Hugging Face model folder made on disk, for tests, benchmarks and the examples.

No model hub is reachable where Reef is tested, so :func:`make_hf_model_folder` builds a whole
model folder from a configuration: a byte-level BPE tokenizer trained by the ``tokenizers``
package on a few kilobytes of text written here, with ChatML special tokens and a chat
template that has tools, tool calls and thinking (as Qwen's do), and a causal LM of the given
architecture (a small Llama by default) with seeded random weights. transformers loads the
folder as it loads a downloaded one (``AutoModelForCausalLM``, ``AutoTokenizer``), and so would
vLLM or SGLang.

Needs ``reef-core[hf]``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig, PreTrainedTokenizerFast

#: The special tokens, ``<|endoftext|>`` first (the padding token).
SPECIAL_TOKENS: Final = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
#: Tokens of the template's markup that are not special (a reply generates them as text).
MARKUP_TOKENS: Final = ("<think>", "</think>", "<tool_call>", "</tool_call>")

#: A ChatML template with tools (``<tool_call>`` JSON blocks, tool results as
#: ``<tool_response>`` blocks of a user turn) and thinking: a reply's ``reasoning_content``
#: renders as a ``<think>`` block; with ``enable_thinking`` false every reply, and the
#: generation prompt, has an empty one.
CHAT_TEMPLATE: Final = """\
{%- set thinking = enable_thinking is not defined or enable_thinking -%}
{%- if tools or messages[0].role == 'system' -%}
<|im_start|>system
{% if messages[0].role == 'system' %}{{ messages[0].content }}{% endif %}
{%- if tools %}

# Tools
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}Call a tool as <tool_call>
{"name": <name>, "arguments": <object>}
</tool_call>
{%- endif %}<|im_end|>
{% endif -%}
{%- for message in messages -%}
{%- if message.role == 'system' and loop.first -%}
{%- elif message.role == 'assistant' -%}
<|im_start|>assistant
{% generation -%}
{%- if not thinking -%}
<think></think>
{% elif message.reasoning_content is defined -%}
<think>{{ message.reasoning_content }}</think>
{% endif -%}
{%- if message.content is defined %}{{ message.content }}{% endif -%}
{%- for call in message.tool_calls | default([]) -%}
{%- if loop.first and message.content is defined and message.content %}
{% endif -%}
<tool_call>
{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments | tojson }}}
</tool_call>
{%- endfor -%}
<|im_end|>
{%- endgeneration %}

{% elif message.role == 'tool' -%}
{%- if loop.previtem is not defined or loop.previtem.role != 'tool' -%}
<|im_start|>user
{% endif -%}
<tool_response>
{{ message.content }}
</tool_response>
{% if loop.nextitem is not defined or loop.nextitem.role != 'tool' -%}
<|im_end|>
{% endif -%}
{%- else -%}
<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
<|im_start|>assistant
{% if not thinking %}<think></think>
{% endif -%}
{%- endif -%}
"""

#: The default architecture: a two-layer Llama with grouped-query attention, tied embeddings.
LLAMA_CONFIG: Final[Mapping[str, Any]] = {
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 1024,
    "tie_word_embeddings": True,
}

_VOCABULARY: Final = (
    "the a an agent tool call result answer question user assistant system weather city "
    "temperature today tomorrow is was will be find look search add sum number value list "
    "file read write open close run test pass fail error fix code python function return "
    "yes no ok sure thanks please red blue green magic word reef coral fish sea water warm "
    "cold sunny rain cloud paris london tokyo berlin one two three four five six seven eight "
    "nine ten hello world it this that what when where why how can could should would"
)
_WORDS: Final = _VOCABULARY.split()


def corpus(size: int = 6000) -> str:
    """A few kilobytes of text in the shapes chats take: prose, JSON tool calls, numbers, and
    the template's markup. Deterministic: the same text in every process."""
    lines: list[str] = []
    index = 0
    while sum(len(line) + 1 for line in lines) < size:
        words = [_WORDS[(index * 7 + k * 13) % len(_WORDS)] for k in range(3 + index % 9)]
        sentence = " ".join(words).capitalize() + ("?" if index % 4 == 0 else ".")
        lines.append(sentence)
        if index % 5 == 0:
            call = {"name": words[0], "arguments": {words[1]: index, words[2]: words[-1]}}
            lines.append(f"<tool_call>\n{json.dumps(call)}\n</tool_call>")
        if index % 7 == 0:
            lines.append(f"<tool_response>\n{index * 31 % 997}\n</tool_response>")
        index += 1
    return "\n".join(lines)


def make_tokenizer(vocab_size: int = 512, *, text: str | None = None) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained on ``text`` (:func:`corpus` by default), with the
    ChatML template."""
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator([corpus() if text is None else text], trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHAT_TEMPLATE,
        model_max_length=int(LLAMA_CONFIG["max_position_embeddings"]),
    )
    tokenizer.add_tokens(list(MARKUP_TOKENS))
    return tokenizer


def make_hf_model_folder(
    target: Path,
    *,
    config: Mapping[str, Any] | None = None,
    seed: int = 0,
    text: str | None = None,
    vocab_size: int = 512,
) -> Path:
    """Write a model folder at ``target`` (made if missing): the tokenizer of
    :func:`make_tokenizer` (``vocab_size`` tokens trained on ``text``, :func:`corpus` by
    default), and a causal LM built from ``config`` (a transformers configuration as
    ``config.json`` holds it, :data:`LLAMA_CONFIG` by default) with weights seeded by ``seed``,
    saved as safetensors. Returns ``target``."""
    tokenizer = make_tokenizer(vocab_size, text=text)
    settings = dict(config or LLAMA_CONFIG)
    model_type = str(settings.pop("model_type"))
    model_config = AutoConfig.for_model(
        model_type,
        vocab_size=len(tokenizer),
        bos_token_id=None,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.pad_token_id,
        **settings,
    )
    generator_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(model_config)  # type: ignore[no-untyped-call]
    finally:
        torch.random.set_rng_state(generator_state)
    model.generation_config = GenerationConfig(  # type: ignore[no-untyped-call]
        eos_token_id=[tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")],
        pad_token_id=tokenizer.pad_token_id,
    )
    target.mkdir(parents=True, exist_ok=True)
    transformers.utils.logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)
    return target
