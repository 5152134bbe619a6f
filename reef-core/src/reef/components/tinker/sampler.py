"""Tinker's sampler, serving the weights the ``tinker`` component published last: the sampler
side of an engine that answers a scenario's calls with the artifact Reef trained.

:class:`TinkerSampler` follows the component's ``artifacts/LATEST`` (the same ``state_dir``),
opens a ``SamplingClient`` on that artifact's sampler weights (once per artifact), samples a
prompt's tokens, and says which artifact answered, so the record of the call can name it
(staleness needs it). The prompt is the request rendered with the component's renderer
(:meth:`reef.core.chat_rendering.ChatRenderer.prompt_ids`), so what trains is what was served.

What is left for the service's engine work: a ``serving.engine: tinker`` kind that builds a
:class:`TinkerSampler` from the scenario's ``tinker`` component settings and turns an OpenAI
chat request into :meth:`TinkerSampler.sample` and its result into a ``chat.completion`` body
(decoding, tool-call parsing, ``system_fingerprint`` = the answering artifact), as the local
engine does for its own weights.

:func:`start_sampler` samples a task job's rollouts on a sampling client at the job's start
weights (:mod:`reef.components.task_rollouts`).
"""

from __future__ import annotations

import json
import os
import secrets
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs
from tinker import types

from reef.components.task_rollouts import Sampled as TaskReply, Sampler, reply_text
from reef.components.tinker.connection import Connect, SamplingClientLike, TinkerConnection
from reef.components.tinker.settings import COMPONENT_CLASS, TinkerComponentSettings
from reef.core.chat_rendering import ChatRenderer
from reef.core.records import JSON
from reef.errors import ReefError


@attrs.frozen
class Completion:
    """One sampled completion: its tokens, their log probabilities (when the sampler gave them)
    and why it stopped."""

    tokens: tuple[int, ...]
    logprobs: tuple[float, ...] | None
    stop_reason: str


@attrs.frozen
class Sampled:
    """What :meth:`TinkerSampler.sample` returns: the artifact that answered and the
    completions."""

    artifact_id: str
    completions: tuple[Completion, ...]


class NothingPublished(ReefError, LookupError):
    """The component has published no artifact yet (its trainer has not started)."""


class TinkerSampler:
    """Samples from the artifact the ``tinker`` component published last.

    :param state_dir: the component's ``state_dir``.
    :param connection: the connection to Tinker (its API key, timeout and service).
    """

    def __init__(self, state_dir: Path, connection: TinkerConnection) -> None:
        self.state_dir = state_dir
        self.tinker = connection
        self._lock = threading.Lock()
        self._current: tuple[str, SamplingClientLike] | None = None

    @classmethod
    def from_settings(
        cls,
        settings: TinkerComponentSettings,
        *,
        connect: Connect | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> TinkerSampler:
        """The sampler of a ``tinker`` component configured with ``settings`` (its
        :class:`~reef.components.tinker.settings.TinkerComponentSettings`)."""
        connection = TinkerConnection(
            COMPONENT_CLASS,
            api_key_env=settings.api_key_env,
            base_url=settings.base_url,
            request_timeout=settings.request_timeout,
            connect=connect,
            environ=os.environ if environ is None else environ,
        )
        return cls(Path(settings.state_dir), connection)

    def _client(self) -> tuple[str, SamplingClientLike]:
        artifacts = self.state_dir / "artifacts"
        try:
            artifact_id = (artifacts / "LATEST").read_text(encoding="utf-8").strip()
        except FileNotFoundError as exc:
            raise NothingPublished(
                f"{artifacts}: the tinker component published nothing yet"
            ) from exc
        with self._lock:
            if self._current is None or self._current[0] != artifact_id:
                body = json.loads(
                    (artifacts / artifact_id.partition(":")[2] / "artifact.json").read_text()
                )
                client = self.tinker.wait(
                    self.tinker.service.create_sampling_client(body["sampler_path"]),
                    f"the sampling client of {artifact_id}",
                )
                self._current = (artifact_id, client)
            return self._current

    def sample(
        self,
        prompt_ids: Sequence[int],
        *,
        num_samples: int = 1,
        max_tokens: int | None = None,
        temperature: float = 1.0,
        top_p: float = 1.0,
        stop: Sequence[int] | None = None,
        seed: int | None = None,
    ) -> Sampled:
        """Sample ``num_samples`` completions of ``prompt_ids`` from the latest artifact.

        :raises NothingPublished: before the component published anything.
        :raises TimeoutError: when Tinker does not answer within ``request_timeout``.
        """
        artifact_id, client = self._client()
        params = types.SamplingParams(
            max_tokens=max_tokens,
            temperature=temperature,
            top_p=top_p,
            stop=None if stop is None else list(stop),
            seed=seed,
        )
        response = self.tinker.wait(
            client.sample(types.ModelInput.from_ints(list(prompt_ids)), num_samples, params),
            f"a sample from {artifact_id}",
        )
        return Sampled(
            artifact_id,
            tuple(
                Completion(
                    tuple(s.tokens),
                    None if s.logprobs is None else tuple(s.logprobs),
                    str(s.stop_reason),
                )
                for s in response.sequences
            ),
        )


def start_sampler(
    connection: TinkerConnection,
    client: SamplingClientLike,
    renderer: ChatRenderer,
    *,
    max_seq_len: int | None,
) -> Sampler:
    """The :data:`~reef.components.task_rollouts.Sampler` of a task job: ``client`` samples at
    the job's start weights, and each reply keeps its exact tokens and the log probability
    Tinker's sampler gave each (P-REND-6).

    :param max_seq_len: the longest sequence that trains: a reply is cut to fit after its
        prompt (``None``: the request's ``max_tokens`` alone).
    :raises ValueError: (from the sampler) for a prompt with no room for a reply, or a reply
        without log probabilities.
    """

    def sample(request: JSON, count: int) -> tuple[tuple[int, ...], list[TaskReply]]:
        prompt = tuple(renderer.prompt_ids(request))
        max_tokens = int(request["max_tokens"])
        if max_seq_len is not None:
            if len(prompt) >= max_seq_len:
                raise ValueError(
                    f"the task's prompt is {len(prompt)} tokens; max_seq_len is {max_seq_len}"
                )
            max_tokens = min(max_tokens, max_seq_len - len(prompt))
        params = types.SamplingParams(
            max_tokens=max_tokens,
            temperature=float(request["temperature"]),
            stop=list(renderer.tokenizer.stop_token_ids),
            seed=secrets.randbits(31),
        )
        response = connection.wait(
            client.sample(types.ModelInput.from_ints(list(prompt)), count, params),
            "a task's rollouts",
        )
        replies = []
        for sequence in response.sequences:
            if sequence.logprobs is None:
                raise ValueError("Tinker's sampler returned a reply without log probabilities")
            tokens = tuple(sequence.tokens)
            text = reply_text(renderer.tokenizer, tokens)
            replies.append(TaskReply(tokens, tuple(sequence.logprobs), text))
        return prompt, replies

    return sample
