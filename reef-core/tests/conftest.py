"""Fixtures shared by reef-core's tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def hf_model_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Hugging Face model folder (a Llama with a trained BPE tokenizer and a ChatML
    template with tools), built once per session; tests only read it."""
    pytest.importorskip("transformers")
    pytest.importorskip("peft")
    from reef.testing.hf_model import make_hf_model_folder

    return make_hf_model_folder(tmp_path_factory.mktemp("hf") / "model")
