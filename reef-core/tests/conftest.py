"""Fixtures shared by reef-core's tests."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# Reef's storage fixtures (storage_url, storage_database, postgres_url).
pytest_plugins = ["reef.testing"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files marked ``slow`` (the SIGKILL suites) run first: the test script spreads whole
    files over pytest-xdist workers in collection order, and a long file that starts last keeps
    one worker busy after the others are done, with a core idle."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(scope="session")
def hf_model_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Hugging Face model folder (a Llama with a trained BPE tokenizer and a ChatML
    template with tools), built once per session; tests only read it."""
    pytest.importorskip("transformers")
    pytest.importorskip("peft")
    from reef.testing.hf_model import make_hf_model_folder

    return make_hf_model_folder(tmp_path_factory.mktemp("hf") / "model")


@pytest.fixture
def one_torch_thread() -> Iterator[None]:
    """PyTorch on one thread for the test, as in the child processes it compares against: a
    float sum's bits depend on how many threads add it up. The count is restored after."""
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@pytest.fixture
def without_modules(tmp_path: Path) -> Callable[..., dict[str, str]]:
    """An environment in which the given modules are not installed, as far as Python can tell:
    a ``sitecustomize`` on PYTHONPATH marks them absent before anything runs, so importing one
    fails as a missing package does and ``importlib.util.find_spec`` finds none."""

    def environ(*modules: str) -> dict[str, str]:
        folder = tmp_path / "without-modules"
        folder.mkdir(exist_ok=True)
        (folder / "sitecustomize.py").write_text(
            f"import sys\nsys.modules.update(dict.fromkeys({sorted(modules)!r}))\n"
        )
        return {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), *sys.path])}

    return environ
