"""Testing against a running service: uvicorn on loopback, and a scripted engine.

- :func:`serve_on_loopback` runs an ASGI application with uvicorn on a free loopback port in a
  thread of the test process and yields its base URL; it returns once the server stopped.
- :func:`scripted_engine` is a small OpenAI-compatible engine: asked with a user message last,
  it calls the ``lookup`` tool with that text; asked with a tool result last, it answers with
  the result. It streams too (tool-call arguments split across chunks, as real engines do), names
  the artifact that answered in ``x-reef-artifact-id``, and breaks a stream off when the user
  asks it to (``BREAK`` in the message), so tests can see an engine abort.
- :class:`UploadingJobData` and :class:`AgentTurnSamples` are minimal stages for a scenario
  that takes uploads in both modes; :class:`AutoOnlyJobData` one that supports ``auto`` only
  and takes no uploads; :class:`ServiceTestRecipe` names them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any, ClassVar, Final

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from reef.core.job_data import JobData, Sample, TrajectorySample
from reef.core.plugins import Plugins
from reef.core.records import JSON
from reef.pipeline_context import TrainingMode
from reef.recipe import PipelineSpec, Recipe
from reef.record2sample.stage import Record2Sample
from reef.sample2job.stage import Sample2Job

__all__ = [
    "SCRIPTED_ARTIFACT",
    "AgentTurnSamples",
    "AutoOnlyJobData",
    "NullComponent",
    "ServiceTestRecipe",
    "UploadingJobData",
    "free_port",
    "scripted_engine",
    "scripted_reply",
    "serve_on_loopback",
    "service_test_plugins",
]

#: The artifact the scripted engine says answered, unless told otherwise.
SCRIPTED_ARTIFACT: Final = "artifact-scripted-1"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextlib.contextmanager
def serve_on_loopback(app: Any, *, log_level: str = "warning") -> Iterator[str]:
    """Run ``app`` with uvicorn on ``127.0.0.1`` in a thread; yield ``http://127.0.0.1:<port>``.

    Waits for uvicorn's own ``started`` flag (no sleep guesses), and on exit asks it to stop
    and joins its thread, so the lifespan's shutdown has run when the block ends.
    """
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level=log_level, lifespan="on")
    server = uvicorn.Server(config)
    ready = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        loop = asyncio.new_event_loop()
        try:

            async def main() -> None:
                task = asyncio.ensure_future(server.serve())
                while not server.started and not task.done():
                    await asyncio.sleep(0.005)
                ready.set()
                await task

            loop.run_until_complete(main())
        except BaseException as exc:
            failure.append(exc)
        finally:
            ready.set()
            loop.close()

    thread = threading.Thread(target=run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    ready.wait()
    if not server.started:
        thread.join()
        raise RuntimeError(f"uvicorn did not start: {failure!r}")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join()


# -- the scripted engine -----------------------------------------------------------------------


def scripted_reply(messages: Sequence[Any]) -> JSON:
    """The scripted engine's reply to ``messages``: a ``lookup`` call for a user message, the
    tool's result as the answer after a tool message."""
    last = messages[-1] if messages else {}
    if isinstance(last, dict) and last.get("role") == "tool":
        return {"role": "assistant", "content": f"answer: {last.get('content')}"}
    text = str(last.get("content") if isinstance(last, dict) else "")
    turn = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"call_{turn}_{abs(hash(text)) % 10**8}",
                "type": "function",
                "function": {"name": "lookup", "arguments": json.dumps({"query": text})},
            }
        ],
    }


def scripted_engine(artifact_id: str = SCRIPTED_ARTIFACT) -> Starlette:
    """The scripted OpenAI-compatible engine (see the module docstring) at ``/v1``."""

    async def complete(request: Request) -> Response:
        body = await request.json()
        messages = body.get("messages") or []
        if not isinstance(messages, list) or not messages:
            return JSONResponse({"error": {"message": "messages is required"}}, 400)
        message = scripted_reply(messages)
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        head = {
            "id": f"chatcmpl-{len(messages)}",
            "created": 1,
            "model": body.get("model") or "scripted",
            "system_fingerprint": artifact_id,
        }
        headers = {"x-reef-artifact-id": artifact_id}
        if not body.get("stream"):
            completion = {
                **head,
                "object": "chat.completion",
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
            }
            return JSONResponse(completion, headers=headers)
        text = json.dumps(messages[-1])

        async def chunks() -> AsyncIterator[bytes]:
            def event(delta: JSON, reason: str | None = None) -> bytes:
                chunk = {
                    **head,
                    "object": "chat.completion.chunk",
                    "choices": [{"index": 0, "delta": delta, "finish_reason": reason}],
                }
                return f"data: {json.dumps(chunk)}\n\n".encode()

            yield event({"role": "assistant", "content": ""})
            if "BREAK" in text:
                raise ConnectionAbortedError("the scripted engine breaks off, as asked")
            for position, call in enumerate(message.get("tool_calls") or []):
                arguments = call["function"]["arguments"]
                half = len(arguments) // 2
                first = {"name": call["function"]["name"], "arguments": arguments[:half]}
                start = {"index": position, "id": call["id"], "type": "function"}
                yield event({"tool_calls": [{**start, "function": first}]})
                rest = {"index": position, "function": {"arguments": arguments[half:]}}
                yield event({"tool_calls": [rest]})
            content = message.get("content")
            if content:
                for piece in (content[: len(content) // 2], content[len(content) // 2 :]):
                    yield event({"content": piece})
            yield event({}, finish)
            yield b"data: [DONE]\n\n"

        return StreamingResponse(chunks(), media_type="text/event-stream", headers=headers)

    return Starlette(routes=[Route("/v1/chat/completions", complete, methods=["POST"])])


# -- minimal stages ----------------------------------------------------------------------------


class AgentTurnSamples(Record2Sample):
    """Makes no samples from records; takes an upload only when it has an agent step."""

    def push(self, record: Any) -> None:
        """Records are kept by nobody: this stage trains uploads only."""
        del record

    def uploaded_sample(self, trajectory: JSON) -> Sample:
        """The upload as it is, refused when no step of it is the agent's."""
        steps = trajectory.get("steps") or []
        if not any(isinstance(s, dict) and s.get("source") == "agent" for s in steps):
            name = trajectory.get("trajectory_id") or trajectory.get("session_id")
            raise ValueError(f"trajectory {name!r} has no agent step to train")
        return TrajectorySample(trajectory)


class UploadingJobData(Sample2Job):
    """Takes uploads, in auto and manual; the job data is the samples as they are."""

    accepts_trajectories: ClassVar[bool] = True
    default_job_samples: ClassVar[int | None] = 1

    def make_job_data(self, samples: Sequence[Sample], data_id: str) -> JobData:
        """The samples, as one job."""
        return JobData(data_id, tuple(samples))


class AutoOnlyJobData(UploadingJobData):
    """Supports ``auto`` only and takes no uploads."""

    accepts_trajectories: ClassVar[bool] = False
    supported_training_modes: ClassVar[frozenset[TrainingMode]] = frozenset({"auto"})


class ServiceTestRecipe(Recipe):
    """Names :class:`AgentTurnSamples` and :class:`UploadingJobData`."""

    @classmethod
    def pipeline_spec(cls) -> PipelineSpec:
        """The two stages of this module."""
        return PipelineSpec(
            record2sample=f"{__name__}:AgentTurnSamples",
            sample2job=f"{__name__}:UploadingJobData",
        )


class NullComponent:
    """A training component name for test deployments; it never trains (the service never
    calls a component)."""


def service_test_plugins() -> Plugins:
    """Plugins that know :class:`ServiceTestRecipe` as ``servicetest`` and
    :class:`NullComponent` as ``noop``, for test deployments."""
    from reef.testing import inline_plugin

    plugins = Plugins(blocked=())
    plugins.register(
        inline_plugin(
            recipes={"servicetest": ServiceTestRecipe}, components={"noop": NullComponent}
        ),
        "servicetest",
    )
    return plugins
