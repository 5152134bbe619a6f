"""Weights on disk: model folders of every kind Reef loads, and the store of published artifacts.

A model folder is what a :class:`reef.components.local.causal_lm.CausalLM` saves:

- a TinyGPT folder (``config.json`` with ``"format": "reef-tiny-gpt"``, ``model.pt``,
  ``tokenizer.json``; :mod:`reef.components.local.tiny_gpt`);
- a transformers model folder (``config.json``, safetensors weights, tokenizer files), or a
  PEFT adapter folder (``adapter_config.json``, ``adapter_model.safetensors``) on a base model
  folder (:mod:`reef.components.local.hf`, ``reef-core[hf]``).

An artifact's ``artifact_id`` is the content hash of the weights it names
(docs/decisions.md#artifacts, :meth:`CausalLM.digest`): the same weights get the same id in
every process and after a restart, which is what the staleness check compares (P-STALE-4).
Folders are written all or nothing and durably (:mod:`reef.components.durable`).
"""

from __future__ import annotations

import json
from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING, Final

from reef.components.durable import link_folder, replace_folder, write_bytes
from reef.components.interface import Artifact
from reef.components.local.causal_lm import CausalLM, ModelFolderError
from reef.components.local.tiny_gpt import TinyGPTModel

if TYPE_CHECKING:
    from reef.components.local.settings import LoraSettings

__all__ = [
    "ArtifactStore",
    "ModelFolderError",
    "load_model_folder",
    "save_model_folder",
]

_LATEST: Final = "LATEST"
_ADAPTER_CONFIG: Final = "adapter_config.json"


def save_model_folder(target: Path, model: CausalLM) -> None:
    """Save ``model`` as a model folder at ``target``, replacing any folder there, all or
    nothing, durably."""
    replace_folder(target, model.save)


def load_model_folder(
    folder: Path,
    *,
    base_model: Path | None = None,
    lora: LoraSettings | None = None,
    seed: int = 0,
    trainable: bool = True,
) -> CausalLM:
    """Load a model folder of any kind (see the module's documentation), on the CPU.

    :param base_model: the base model folder of a PEFT adapter folder (by default the one its
        ``adapter_config.json`` names).
    :param lora: for a transformers model folder, put a new LoRA adapter of these settings
        on it (initialised from ``seed``).
    :param trainable: whether the adapter of an adapter folder trains.
    :raises ModelFolderError: when the folder is missing, holds no model Reef loads, or
        needs ``reef-core[hf]`` where it is not installed.
    """
    adapter = (folder / _ADAPTER_CONFIG).exists()
    config: object = None
    if not adapter:
        try:
            config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ModelFolderError(f"{folder}: no readable config.json ({exc})") from exc
        if TinyGPTModel.is_folder(config):
            if lora is not None:
                raise ModelFolderError(
                    f"{folder}: LoRA trains Hugging Face models; a TinyGPT trains whole"
                )
            assert isinstance(config, dict)
            return TinyGPTModel.load(folder, config)
    try:
        from reef.components.local.hf import load_hf_folder
    except ImportError as exc:
        raise ModelFolderError(
            f"{folder}: a Hugging Face model folder needs transformers and peft: install "
            f"reef-core[hf] ({exc})"
        ) from exc
    return load_hf_folder(folder, base_model=base_model, lora=lora, seed=seed, trainable=trainable)


class ArtifactStore:
    """Published artifacts under one folder: ``<root>/<hex>/`` per artifact, and ``LATEST``
    naming the one published last, so that an engine in any process can follow it.

    :param root: the folder; made when missing.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def folder(self, artifact_id: str) -> Path:
        """Where the artifact ``artifact_id`` is (whether or not it exists)."""
        return self._folder(artifact_id)

    def _folder(self, artifact_id: str) -> Path:
        algorithm, _, hexdigest = artifact_id.partition(":")
        if algorithm != "sha256" or len(hexdigest) != 64:
            raise ValueError(f"not an artifact id: {artifact_id!r}")
        return self.root / hexdigest

    def publish(self, folder: Path, artifact_id: str, *, skip: Collection[str] = ()) -> Artifact:
        """Publish the model folder ``folder`` (but its files named in ``skip``), whose
        weights' digest is ``artifact_id``, and make it the latest. Its files are linked, not
        copied, so ``folder`` must never be written in place (a folder that
        :mod:`reef.components.durable` wrote is replaced whole). The same weights are the same
        artifact: publishing them again links nothing new.

        The artifact's files are on the disk before ``LATEST`` names it.
        """
        target = self._folder(artifact_id)
        if not target.exists():
            link_folder(folder, target, skip=skip)
        write_bytes(self.root / _LATEST, artifact_id.encode("utf-8"))
        return Artifact(artifact_id, target)

    def latest(self) -> Artifact | None:
        """The artifact published last, or ``None`` before the first publication."""
        try:
            artifact_id = (self.root / _LATEST).read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            return None
        return Artifact(artifact_id, self._folder(artifact_id))

    def get(self, artifact_id: str) -> Artifact:
        """The artifact named ``artifact_id``.

        :raises KeyError: when this store holds no such artifact.
        """
        folder = self._folder(artifact_id)
        if not folder.exists():
            raise KeyError(f"no artifact {artifact_id} in {self.root}")
        return Artifact(artifact_id, folder)
