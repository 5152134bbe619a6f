"""Stand-ins of OpenAI-compatible engines for the tests of generated tasks.

Each is a stand-in for an inference engine (vLLM, SGLang, a hosted API): it implements only
``POST /v1/chat/completions``, the one endpoint Reef and SPADE call, and answers with a
``chat.completion`` body. Serve them with :func:`reef.testing.service.serve_on_loopback`.

- :func:`hint_policy`: a policy that cannot do arithmetic: it answers with the number a hint
  gives (``Hint: ... N``), else with ``0``. A task at its frontier is one it solves only with
  the hint.
- :func:`scripted_designer`: a designer model that answers every request with the next of the
  replies it was given (the last one again when they run out), and keeps the requests it got;
  :func:`designed_sum_task` is a task as SPADE's designer writes one, for those replies.

:func:`coin_task` and :func:`task_rollout` are a task job's data and rollout parameters for the
components' task-job tests.

:func:`generator_service` serves a real generator service (the Reef service of a one-scenario
deployment with a ``generator`` section, on SQLite, without tokens, on loopback) whose scenario
``tasks`` is answered by a given engine, for a generator's tests.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Final

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from reef.core.job_data import TaskSample
from reef.core.records import JSON
from reef.plugins.scenarios import load_deployment
from reef.server import ServerOptions, create_app, open_databases
from reef.testing.service import serve_on_loopback, service_test_plugins
from reef.testing.tasks import arithmetic_task

__all__ = [
    "COIN_VERIFIER",
    "coin_task",
    "designed_sum_task",
    "generator_service",
    "hint_policy",
    "scripted_designer",
    "task_rollout",
]

_HINT: Final = re.compile(r"Hint:.*?(-?\d+)\s*$", re.DOTALL)


def _completion(text: str) -> JSON:
    return {
        "id": f"chatcmpl-standin-{time.monotonic_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": "standin",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
        ],
    }


def _app(answer: Any) -> Starlette:
    async def complete(request: Request) -> Response:
        body = await request.json()
        messages = body.get("messages") if isinstance(body, dict) else None
        if not isinstance(messages, list) or not messages:
            return JSONResponse({"error": {"message": "messages is required"}}, 400)
        return JSONResponse(_completion(answer(body, messages)))

    return Starlette(routes=[Route("/v1/chat/completions", complete, methods=["POST"])])


def hint_policy() -> Starlette:
    """The policy that answers with a hint's number, else ``0`` (see the module docstring)."""

    def answer(body: JSON, messages: list[Any]) -> str:
        found = _HINT.search(str(messages[-1].get("content", "")))
        return found.group(1) if found else "0"

    return _app(answer)


def scripted_designer(replies: Sequence[str], requests: list[JSON] | None = None) -> Starlette:
    """The designer that answers with ``replies`` in turn; each request body is appended to
    ``requests`` when given."""
    served = [0]

    def answer(body: JSON, messages: list[Any]) -> str:
        if requests is not None:
            requests.append(body)
        reply = replies[min(served[0], len(replies) - 1)]
        served[0] += 1
        return reply

    return _app(answer)


def designed_sum_task(
    slug: str, a: int, b: int, *, oracle: int | None = None, hint: str = ""
) -> dict[str, str]:
    """A task that asks for ``a + b``, in the fields SPADE's designer writes: its verifier
    rewards the sum, its oracle writes the sum (or ``oracle``, to make it wrong) and its hint
    gives the answer (or is ``hint``)."""
    return {
        "slug": slug,
        "instruction": f"What is {a} + {b}? Answer with the number only.",
        "test_sh": (
            f'if [ "$(tr -d "[:space:]" < /app/answer.txt)" = "{a + b}" ]; then '
            "echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n"
        ),
        "solve_sh": f"echo {a + b if oracle is None else oracle} > /app/answer.txt\n",
        "hint": hint or f"carry the digits: {a + b}",
    }


#: A verifier that rewards a reply starting with a letter from a to m: about half of a random
#: model's replies, so a group's rewards differ and its advantages are not all 0.
COIN_VERIFIER: Final = """\
case "$(head -c 1 /app/answer.txt)" in
  [a-m]) echo 1 > /logs/verifier/reward.txt ;;
  *) echo 0 > /logs/verifier/reward.txt ;;
esac
"""


def coin_task(name: str, test: str = COIN_VERIFIER, toml: str = "") -> TaskSample:
    """A task sample whose verifier is ``test`` (:data:`COIN_VERIFIER` by default) and whose
    ``task.toml`` is ``toml`` when given (the arithmetic task's otherwise)."""
    value = arithmetic_task(name, 2, 3)
    value["files"]["tests/test.sh"] = test
    if toml:
        value["files"]["task.toml"] = toml
    return TaskSample(name, value)


def task_rollout(**overrides: Any) -> JSON:
    """A task job's ``rollout`` parameter for a small model: 4 short rollouts of each task, in
    a sandbox of 256 MB and 20 seconds; ``overrides`` replace its keys."""
    return {
        "rollouts_per_task": 4,
        "agent": {"max_tokens": 8},
        "sandbox": {"timeout_seconds": 20, "memory_mb": 256},
        **overrides,
    }


_GENERATOR_DEPLOYMENT: Final = """
storage: {{url: "sqlite:///{folder}/reef.db"}}
serving: {{engine: "{engine}/v1"}}
generator:
  tasks_root: "{folder}/tasks"
  containers: {{timeout_seconds: 30, memory_mb: 256}}
scenarios:
  tasks:
    recipe: servicetest
"""


@contextlib.contextmanager
def generator_service(folder: Path, engine_url: str) -> Iterator[str]:
    """Serve the generator service of scenario ``tasks`` (see the module docstring), its state
    in ``folder``, its policy the engine at ``engine_url``; yield the service's base URL."""
    plugins = service_test_plugins()
    text = _GENERATOR_DEPLOYMENT.format(folder=folder, engine=engine_url)
    deployment = load_deployment(text, plugins=plugins)
    databases = open_databases(deployment)
    app = create_app(
        deployment,
        databases=databases,
        plugins=plugins,
        options=ServerOptions(allow_unauthenticated=True),
    )
    try:
        with serve_on_loopback(app) as url:
            yield url
    finally:
        for database in databases.values():
            database.dispose()
