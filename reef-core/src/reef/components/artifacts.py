"""Weights on disk: model folders, their content hash, and the store of published artifacts.

An artifact's ``artifact_id`` is a content hash of the weights it names
(docs/decisions.md#artifacts):
``sha256:`` and the digest of the model's configuration and of each tensor's name, dtype,
shape and bytes, in name order. The same weights therefore get the same id in every process and
after a restart, which is what the staleness check compares (P-STALE-4).

A model folder holds ``config.json`` (the model's configuration), ``model.pt`` (its
``state_dict``) and the tokenizer (``tokenizer.json``). Folders are written next to their final
place and renamed into it, so a reader never sees a half-written one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Final

import attrs
import torch

from reef.components.byte_tokenizer import ByteTokenizer
from reef.components.interface import Artifact
from reef.components.tiny_gpt import TinyGPT, TinyGPTConfig

_FORMAT: Final = "reef-tiny-gpt"
_CONFIG: Final = "config.json"
_WEIGHTS: Final = "model.pt"
_LATEST: Final = "LATEST"


class ModelFolderError(ValueError):
    """A folder does not hold a model Reef can load; the message names the folder and why."""


def _config_json(config: TinyGPTConfig) -> str:
    return json.dumps({"format": _FORMAT, "model": attrs.asdict(config)}, sort_keys=True)


def weights_digest(model: TinyGPT) -> str:
    """The artifact id of ``model``'s weights (see the module's documentation)."""
    digest = hashlib.sha256(_config_json(model.config).encode())
    for name, tensor in sorted(model.state_dict().items()):
        data = tensor.detach().to("cpu").contiguous()
        digest.update(f"{name}|{data.dtype}|{tuple(data.shape)}|".encode())
        digest.update(bytes(data.untyped_storage())[: data.numel() * data.element_size()])
    return f"sha256:{digest.hexdigest()}"


def save_model_folder(target: Path, model: TinyGPT, tokenizer: ByteTokenizer) -> None:
    """Save ``model`` and ``tokenizer`` as a model folder at ``target``, replacing any folder
    there, all or nothing."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        (staging / _CONFIG).write_text(_config_json(model.config), encoding="utf-8")
        torch.save(model.state_dict(), staging / _WEIGHTS)
        tokenizer.save(staging)
        if target.exists():
            retired = target.with_name(f".{target.name}.retired")
            shutil.rmtree(retired, ignore_errors=True)
            os.replace(target, retired)
            os.replace(staging, target)
            shutil.rmtree(retired, ignore_errors=True)
        else:
            os.replace(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def load_model_folder(folder: Path) -> tuple[TinyGPT, ByteTokenizer]:
    """Load a model folder written by :func:`save_model_folder`.

    :raises ModelFolderError: when the folder is missing or holds another kind of model.
    """
    try:
        body = json.loads((folder / _CONFIG).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ModelFolderError(f"{folder}: no readable {_CONFIG} ({exc})") from exc
    if not isinstance(body, dict) or body.get("format") != _FORMAT:
        raise ModelFolderError(
            f"{folder}: {_CONFIG} does not describe a {_FORMAT} model (HF transformers folders "
            "need the transformers package, which this installation does not use)"
        )
    try:
        model = TinyGPT(TinyGPTConfig(**body["model"]))
        state = torch.load(folder / _WEIGHTS, map_location="cpu", weights_only=True)
        model.load_state_dict(state)
        tokenizer = ByteTokenizer.load(folder)
    except (OSError, TypeError, KeyError, RuntimeError, ValueError) as exc:
        raise ModelFolderError(f"{folder}: cannot load the model ({exc})") from exc
    return model, tokenizer


class ArtifactStore:
    """Published artifacts under one folder: ``<root>/<hex>/`` per artifact, and ``LATEST``
    naming the one published last, so that an engine in any process can follow it.

    :param root: the folder; made when missing.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def _folder(self, artifact_id: str) -> Path:
        algorithm, _, hexdigest = artifact_id.partition(":")
        if algorithm != "sha256" or len(hexdigest) != 64:
            raise ValueError(f"not an artifact id: {artifact_id!r}")
        return self.root / hexdigest

    def publish(self, model: TinyGPT, tokenizer: ByteTokenizer) -> Artifact:
        """Save ``model``'s weights as an artifact (once: the same weights are the same
        artifact) and make it the latest."""
        artifact_id = weights_digest(model)
        folder = self._folder(artifact_id)
        if not folder.exists():
            save_model_folder(folder, model, tokenizer)
        pointer = self.root / f".{_LATEST}.{os.getpid()}"
        pointer.write_text(artifact_id, encoding="utf-8")
        os.replace(pointer, self.root / _LATEST)
        return Artifact(artifact_id, folder)

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
