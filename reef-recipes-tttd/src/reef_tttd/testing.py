"""The toy discovery task served for tests and benchmarks: :func:`serve_toy` runs ``reef serve``
on :func:`reef_tttd.toy_runner.toy_deployment`, its store, state and log in one folder.

Needs the server extra (``reef.testing.serve`` starts the service and talks to it over httpx)
and the torch extra (the local component trains the toy's TinyGPT).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from reef.testing.serve import ServeProcess
from reef_tttd.toy_runner import toy_deployment

__all__ = ["serve_toy"]


@contextlib.contextmanager
def serve_toy(folder: Path, **options: Any) -> Iterator[ServeProcess]:
    """``reef serve`` of the toy deployment, stopped when the block ends: its database is
    ``folder/reef.db``, its component's state ``folder/state`` (made here), its deployment
    ``folder/deployment.yaml`` and its log ``folder/serve.log``.

    :param options: :func:`toy_deployment`'s keywords (``steps``, ``groups``, ``rollouts``...).
    """
    (folder / "state").mkdir()
    deployment = folder / "deployment.yaml"
    text = toy_deployment(f"sqlite:///{folder / 'reef.db'}", str(folder / "state"), **options)
    deployment.write_text(text, encoding="utf-8")
    serve = ServeProcess(deployment, folder / "serve.log")
    try:
        yield serve
    finally:
        serve.stop()
