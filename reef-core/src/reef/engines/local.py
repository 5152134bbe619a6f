"""The built-in local engine: chat completions from the local component's published weights.

It serves every kind of model the local component trains (:mod:`reef.components.local.causal_lm`): a
TinyGPT, sampled token by token, or a Hugging Face model, whole or with its LoRA adapter
applied, sampled by transformers' ``generate``.

:meth:`LocalEngine.complete` takes an OpenAI chat-completions request and returns an OpenAI
``chat.completion`` body. The prompt is the request rendered by
:meth:`reef.core.chat_rendering.ChatRenderer.prompt_ids`, the very renderer the component
trains with, so a sample renders to the prompts its calls saw. Sampling is real: temperature
(0 is greedy), ``top_p``, ``max_tokens`` (or ``max_completion_tokens``), ``n``, ``stop`` and
``seed`` (the same seed and request give the same completion). ``logprobs`` and
``top_logprobs`` report the model's own log probabilities (before temperature and ``top_p``),
as vLLM does, so a trainer can compare them with its own. ``return_token_ids`` (vLLM's field)
adds the prompt's token ids (``prompt_token_ids``) and each choice's sampled ids (``token_ids``,
its stop token included), which the inference service asks for on every call so that the
component trains exactly what was sampled. Before the first artifact is published it raises
:class:`~reef.engines.interface.EngineUnavailable` (a 503 with ``Retry-After``).

The engine serves the artifact its store published last, and loads a newly published one at
the next request (an adapter on its base model, loaded whole again); ``system_fingerprint``
names the artifact that answered, which the inference service records. The demo templates'
tool calls are ``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` blocks; the engine
parses them into ``tool_calls`` (a block that is not such JSON stays in the content, as vLLM's
tool parsers leave it).
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import torch

from reef.components.interface import ArtifactSource
from reef.components.local.artifacts import load_model_folder
from reef.components.local.causal_lm import CausalLM, Generation, SamplingRequest
from reef.core.chat_rendering import ChatRenderer, RenderError, Tokenizer
from reef.core.records import JSON
from reef.engines.interface import EngineUnavailable
from reef.errors import ReefError

_TOOL_CALL: Final = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_THINK: Final = re.compile(r"^<think>(.*?)</think>", re.DOTALL)


class EngineRequestError(ReefError, ValueError):
    """A request the engine cannot serve; the message names the field and why."""


def parse_reply(text: str) -> JSON:
    """The assistant message of a completion's text: reasoning, content and tool calls.

    Tool call ids derive from the text, so the same reply has the same ids.
    """
    message: JSON = {"role": "assistant"}
    think = _THINK.match(text)
    if think:
        message["reasoning_content"] = think.group(1)
        text = text[think.end() :]
    calls: list[JSON] = []

    def take(match: re.Match[str]) -> str:
        try:
            body = json.loads(match.group(1))
        except json.JSONDecodeError:
            return match.group(0)
        if not isinstance(body, dict) or not isinstance(body.get("name"), str):
            return match.group(0)
        arguments = body.get("arguments", {})
        digest = hashlib.sha256(f"{len(calls)}|{match.group(0)}".encode()).hexdigest()
        calls.append(
            {
                "id": f"call_{digest[:24]}",
                "type": "function",
                "function": {
                    "name": body["name"],
                    "arguments": json.dumps(arguments, ensure_ascii=False),
                },
            }
        )
        return ""

    content = _TOOL_CALL.sub(take, text)
    message["content"] = content if content or not calls else None
    if calls:
        message["tool_calls"] = calls
    return message


def _number(request: Mapping[str, Any], key: str, default: float, low: float, high: float) -> float:
    value = request.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise EngineRequestError(f"{key} must be a number in [{low}, {high}], got {value!r}")
    return float(value)


def _count(request: Mapping[str, Any], key: str, default: int | None, high: int) -> int | None:
    value = request.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high:
        raise EngineRequestError(f"{key} must be an int in [0, {high}], got {value!r}")
    return value


def _logprob_entry(tokenizer: Tokenizer, token_id: int, logprob: float) -> JSON:
    data = tokenizer.token_bytes(token_id)
    return {
        "token": data.decode("utf-8", errors="replace"),
        "logprob": logprob,
        "bytes": list(data),
    }


class LocalEngine:
    """Serves chat completions from the latest artifact of an
    :class:`~reef.components.local.artifacts.ArtifactStore`.

    :param artifacts: the store the local component publishes into (or any source of the
        artifact to serve: the eval gate's, one artifact evaluated).
    :param chat_template_args: the engine's chat template arguments; the component must train
        with the same (its ``chat_template_args`` setting).
    :param default_max_tokens: the completion length of a request that sets none.
    :param base_model: the base model folder of LoRA adapter artifacts (the component's
        ``model_path``); by default the folder each adapter's configuration names.
    """

    def __init__(
        self,
        artifacts: ArtifactSource,
        *,
        chat_template_args: Mapping[str, Any] | None = None,
        default_max_tokens: int = 256,
        device: str = "cpu",
        base_model: Path | None = None,
    ) -> None:
        self.artifacts = artifacts
        self.chat_template_args = dict(chat_template_args or {})
        self.default_max_tokens = default_max_tokens
        self.device = torch.device(device)
        self.base_model = base_model
        self._lock = threading.Lock()
        self._loaded: tuple[str, CausalLM, ChatRenderer] | None = None

    def _current(self) -> tuple[str, CausalLM, ChatRenderer]:
        """The artifact to answer with, loading the latest one when it changed."""
        latest = self.artifacts.latest()
        if latest is None:
            raise EngineUnavailable(
                "no artifact is published yet: the engine has no weights until the trainer"
                " publishes its first"
            )
        with self._lock:
            if self._loaded is None or self._loaded[0] != latest.artifact_id:
                model = load_model_folder(latest.path, base_model=self.base_model, trainable=False)
                model.module.to(self.device).eval()
                renderer = ChatRenderer(model.tokenizer, self.chat_template_args)
                self._loaded = (latest.artifact_id, model, renderer)
            return self._loaded

    @property
    def artifact_id(self) -> str | None:
        """The artifact that answers the next request (``None`` before any publication)."""
        latest = self.artifacts.latest()
        return None if latest is None else latest.artifact_id

    def prompt_ids(self, request: Mapping[str, Any]) -> list[int]:
        """The prompt tokens the engine feeds the model for ``request``."""
        _, _, renderer = self._current()
        try:
            return renderer.prompt_ids(request)
        except RenderError as exc:
            raise EngineRequestError(str(exc)) from exc

    def complete(self, request: Mapping[str, Any]) -> JSON:
        """Answer an OpenAI chat-completions request with a ``chat.completion`` body.

        :raises EngineRequestError: for a request it cannot serve (naming the field).
        """
        artifact_id, model, renderer = self._current()
        tokenizer = renderer.tokenizer
        try:
            prompt = renderer.prompt_ids(request)
        except RenderError as exc:
            raise EngineRequestError(str(exc)) from exc
        temperature = _number(request, "temperature", 1.0, 0.0, 2.0)
        top_p = _number(request, "top_p", 1.0, 0.0, 1.0)
        limit = _count(request, "max_completion_tokens", None, 1 << 20)
        limit = _count(request, "max_tokens", limit or self.default_max_tokens, 1 << 20)
        assert limit is not None
        choices_wanted = _count(request, "n", 1, 16) or 1
        top_logprobs = _count(request, "top_logprobs", 0, 20) or 0
        want_logprobs = bool(request.get("logprobs")) or top_logprobs > 0
        stop = request.get("stop") or []
        stops = [stop] if isinstance(stop, str) else list(stop)
        if not all(isinstance(s, str) and s for s in stops):
            raise EngineRequestError(f"stop must be a string or a list of strings, got {stop!r}")
        seed = request.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise EngineRequestError(f"seed must be an int, got {seed!r}")
        context = model.max_seq_len
        if len(prompt) >= context:
            raise EngineRequestError(
                f"messages: the prompt is {len(prompt)} tokens, the model reads at most {context}"
            )
        sampling = SamplingRequest(
            prompt=tuple(prompt),
            choices=choices_wanted,
            temperature=temperature,
            top_p=top_p,
            max_new_tokens=min(limit, context - len(prompt)),
            stops=tuple(stops),
            seed=seed if seed is not None else secrets.randbits(63),
            top_logprobs=top_logprobs,
        )
        generations = model.generate(sampling)
        choices = [
            _choice(index, generation, tokenizer, stops, want_logprobs)
            for index, generation in enumerate(generations)
        ]
        completion_tokens = sum(len(g.token_ids) for g in generations)
        body: JSON = {
            "id": f"chatcmpl-{secrets.token_hex(12)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": str(request.get("model") or "reef-local"),
            "system_fingerprint": artifact_id,
            "choices": choices,
            "usage": {
                "prompt_tokens": len(prompt),
                "completion_tokens": completion_tokens,
                "total_tokens": len(prompt) + completion_tokens,
            },
        }
        if request.get("return_token_ids") is True:
            # As vLLM answers it: the prompt's ids beside the choices, each reply's in its choice.
            body["prompt_token_ids"] = prompt
            for choice, generation in zip(choices, generations, strict=True):
                choice["token_ids"] = list(generation.token_ids)
        return body


def _choice(
    index: int,
    generation: Generation,
    tokenizer: Tokenizer,
    stops: list[str],
    want_logprobs: bool,
) -> JSON:
    """One ``choices[]`` entry of a completion."""
    ids = list(generation.token_ids)
    text_ids = ids[:-1] if ids and ids[-1] in set(tokenizer.stop_token_ids) else ids
    text = tokenizer.decode(text_ids)
    finish = generation.finish
    if finish == "stop_string":
        text = text[: min(text.find(s) for s in stops if s in text)]
        finish = "stop"
    message = parse_reply(text)
    if finish == "stop" and message.get("tool_calls"):
        finish = "tool_calls"
    entries: list[JSON] = []
    if want_logprobs:
        for token, logprob, top in zip(
            ids, generation.logprobs, generation.top_logprobs, strict=True
        ):
            entry = _logprob_entry(tokenizer, token, logprob)
            entry["top_logprobs"] = [_logprob_entry(tokenizer, t, v) for t, v in top]
            entries.append(entry)
    return {
        "index": index,
        "message": message,
        "finish_reason": finish,
        "logprobs": {"content": entries} if want_logprobs else None,
    }
