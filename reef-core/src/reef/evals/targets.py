"""An artifact under evaluation, reached through the scenario's engine under a name the agents
do not see: what :class:`reef.evals.gate.GatedComponent` sends each eval item to.

- :class:`LocalTarget`: the built-in local engine over that one artifact (a second
  :class:`~reef.engines.local.LocalEngine`, which no route of the service reaches);
- :class:`PublisherTarget`: a vLLM or SGLang server that takes LoRA adapters: the artifact is
  loaded as an adapter beside what serves (:meth:`Publisher.load_hidden`), the items are sent
  to it by its adapter name, and it is let go unless the gate serves it;
- :class:`TinkerTarget`: Tinker's sampler on the artifact's sampler weights, prompts rendered
  with the component's renderer (what ``scripts/tinker-check`` and a deployment that serves
  Tinker's weights through an endpoint of its own use).

Eval calls go to the engine directly, never through Reef's inference routes, so none is
recorded and none becomes training data.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import httpx

from reef.components.interface import Artifact
from reef.core.records import JSON
from reef.engines.publisher import Publisher

if TYPE_CHECKING:
    from reef.components.tinker.component import TinkerComponent

__all__ = ["EvalTarget", "LocalTarget", "PinnedArtifact", "PublisherTarget", "TinkerTarget"]


class EvalTarget(Protocol):
    """How an evaluation reaches an artifact."""

    def open(self, artifact: Artifact) -> Callable[[JSON], JSON]:
        """A function that answers a chat-completions request with ``artifact``."""
        ...

    def close(self, artifact: Artifact, *, served: bool) -> None:
        """The evaluation of ``artifact`` is over (``served``: the gate serves it now)."""
        ...


class PinnedArtifact:
    """An artifact source that always names one artifact."""

    def __init__(self, artifact: Artifact) -> None:
        self.artifact = artifact

    def latest(self) -> Artifact:
        return self.artifact


class LocalTarget:
    """The local engine over one artifact (the engine's settings are the served engine's)."""

    def __init__(
        self, *, chat_template_args: Mapping[str, Any] | None, base_model: Path | None
    ) -> None:
        self._chat_template_args = chat_template_args
        self._base_model = base_model

    def open(self, artifact: Artifact) -> Callable[[JSON], JSON]:
        # Imported here: torch is an extra, needed only by a deployment that serves locally.
        from reef.engines.local import LocalEngine

        engine = LocalEngine(
            PinnedArtifact(artifact),
            chat_template_args=self._chat_template_args,
            base_model=self._base_model,
        )
        return engine.complete

    def close(self, artifact: Artifact, *, served: bool) -> None:
        del artifact, served  # the engine and its weights go with the function


class PublisherTarget:
    """A vLLM or SGLang server that takes adapters, through the scenario's publisher."""

    def __init__(self, publisher: Publisher, *, api_key: str | None, timeout: float) -> None:
        self._publisher = publisher
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self._headers = headers
        self._timeout = timeout

    def open(self, artifact: Artifact) -> Callable[[JSON], JSON]:
        model = self._publisher.load_hidden(artifact)
        url = f"{self._publisher.url}/v1/chat/completions"

        def complete(request: JSON) -> JSON:
            response = httpx.post(
                url, json={**request, "model": model}, headers=self._headers,
                timeout=self._timeout,
            )  # fmt: skip
            if response.status_code != 200:
                raise RuntimeError(f"{url}: {response.status_code} {response.text[:300]}")
            body: JSON = response.json()
            return body

        return complete

    def close(self, artifact: Artifact, *, served: bool) -> None:
        if not served:
            self._publisher.unload_hidden(artifact)


class TinkerTarget:
    """Tinker's sampler on one artifact of a ``tinker`` component (its ``artifact.json`` names
    the sampler weights)."""

    def __init__(self, component: TinkerComponent) -> None:
        self._component = component

    def open(self, artifact: Artifact) -> Callable[[JSON], JSON]:
        # Imported here: the Tinker SDK is an extra.
        from reef.components.tinker.sampler import start_sampler

        body = json.loads((artifact.path / "artifact.json").read_text(encoding="utf-8"))
        tinker = self._component.tinker
        client = tinker.wait(
            tinker.service.create_sampling_client(body["sampler_path"]),
            f"the sampling client of {artifact.artifact_id}",
        )
        sample = start_sampler(tinker, client, self._component.renderer, max_seq_len=None)

        def complete(request: JSON) -> JSON:
            _, replies = sample(request, 1)
            message = {"role": "assistant", "content": replies[0].text}
            return {"object": "chat.completion", "choices": [{"index": 0, "message": message}]}

        return complete

    def close(self, artifact: Artifact, *, served: bool) -> None:
        del artifact, served  # a sampling client holds nothing on Tinker's side
