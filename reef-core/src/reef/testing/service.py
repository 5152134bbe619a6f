"""Testing against a running service: uvicorn on loopback, and stages for test deployments.

- :func:`serve_on_loopback` runs an ASGI application with uvicorn on a free loopback port in a
  thread of the test process and yields its base URL; it returns once the server stopped. Serve
  :func:`reef.testing.engines.scripted_engine` with it for an engine that answers.
- :class:`ServiceToken` is a token of a test deployment: :func:`auth_section` declares tokens in
  the deployment's YAML and :attr:`ServiceToken.headers` presents one, from one definition;
  :func:`served_scenario` writes a deployment of one scenario answered by an engine URL, and
  :func:`service_app` builds the service of a test deployment on an opened database.
- :class:`UploadingJobData` and :class:`AgentTurnSamples` are minimal stages for a scenario
  that takes uploads in both modes; :class:`AutoOnlyJobData` one that supports ``auto`` only
  and takes no uploads; :class:`ServiceTestRecipe` names them, and :func:`service_test_plugins`
  registers it (``recipe: servicetest``) with a component that never trains (``noop``).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import attrs
import uvicorn

from reef.core.deployment import ServiceSection
from reef.core.job_data import JobData, Sample, TrajectorySample
from reef.core.records import JSON
from reef.pipeline_context import TrainingMode
from reef.plugins import Plugins
from reef.plugins.scenarios import load_deployment
from reef.recipe import PipelineSpec, Recipe
from reef.record2sample.stage import Record2Sample
from reef.sample2job.stage import Sample2Job
from reef.server import ServerOptions, create_app
from reef.server.connections import GuardedConfig
from reef.server.service_runtime import ServiceRuntime
from reef.storage import Database
from reef.testing import inline_plugin

__all__ = [
    "AgentTurnSamples",
    "AutoOnlyJobData",
    "NullComponent",
    "ServiceTestRecipe",
    "ServiceToken",
    "UploadingJobData",
    "auth_section",
    "free_port",
    "grouped_deployment",
    "serve_on_loopback",
    "served_scenario",
    "service_app",
    "service_test_plugins",
]


@attrs.frozen
class ServiceToken:
    """A token of a test deployment: its name under ``auth.tokens``, its scopes and the
    scenarios it is limited to (every scenario when ``None``). Its secret is
    ``<name>-secret-for-tests``."""

    name: str
    scopes: tuple[str, ...]
    scenarios: tuple[str, ...] | None = None

    @property
    def secret(self) -> str:
        return f"{self.name}-secret-for-tests"

    @property
    def headers(self) -> dict[str, str]:
        """The request headers that present the token."""
        return {"authorization": f"Bearer {self.secret}"}

    def entry(self) -> str:
        """The token's line under ``auth.tokens`` (YAML, indented, ending in a newline)."""
        scopes = ", ".join(self.scopes)
        limited = "" if self.scenarios is None else f", scenarios: [{', '.join(self.scenarios)}]"
        return f"    {self.name}: {{token: {self.secret}, scopes: [{scopes}]{limited}}}\n"


def served_scenario(storage_url: str, engine_url: str, auth: str, scenario: str = "support") -> str:
    """A deployment (YAML) of one scenario of the service-test recipe (``servicetest``, with the
    ``noop`` component) on the store at ``storage_url``, answered by the OpenAI-compatible
    engine at ``engine_url``; ``auth`` is its auth section (:func:`auth_section`, or ``""``)."""
    return (
        f'storage: {{url: "{storage_url}"}}\nserving: {{engine: "{engine_url}"}}\n{auth}\n'
        f"scenarios:\n  {scenario}:\n    recipe: servicetest\n    training: {{component: noop}}\n"
    )


def grouped_deployment(folder: Path, name: str) -> Path:
    """A deployment file ``<folder>/<name>.yaml`` of one scenario ``name`` of the built-in
    ``grouped`` recipe, storing in ``<folder>/<name>.db`` (SQLite): what a CLI test opens."""
    path = folder / f"{name}.yaml"
    path.write_text(
        f'storage: {{url: "sqlite:///{folder}/{name}.db"}}\n'
        f"scenarios:\n  {name}: {{recipe: grouped}}\n",
        encoding="utf-8",
    )
    return path


def auth_section(*tokens: ServiceToken) -> str:
    """The ``auth`` section of a deployment that declares ``tokens`` (YAML, ending in a
    newline)."""
    return "auth:\n  tokens:\n" + "".join(token.entry() for token in tokens)


def service_app(
    text: str,
    url: str,
    database: Database,
    *,
    options: ServerOptions | None = None,
    runtime: ServiceRuntime | None = None,
) -> Any:
    """The service of the deployment ``text`` (its stages from :func:`service_test_plugins`),
    storing in ``database``, the storage its ``storage.url`` names as ``url``."""
    plugins = service_test_plugins()
    deployment = load_deployment(text, plugins=plugins)
    return create_app(
        deployment, databases={url: database}, plugins=plugins, runtime=runtime, options=options
    )


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextlib.contextmanager
def serve_on_loopback(
    app: Any, *, log_level: str = "warning", limits: ServiceSection | None = None
) -> Iterator[str]:
    """Run ``app`` with uvicorn on ``127.0.0.1`` in a thread; yield ``http://127.0.0.1:<port>``.

    Waits for uvicorn's own ``started`` flag (no sleep guesses), and on exit asks it to stop
    and joins its thread, so the lifespan's shutdown has run when the block ends.

    :param limits: serve with ``reef serve``'s connection guard and these limits
        (:mod:`reef.server.connections`); plain uvicorn without.
    """
    port = free_port()
    options: dict[str, Any] = {"host": "127.0.0.1", "port": port, "log_level": log_level}
    config = (
        uvicorn.Config(app, lifespan="on", **options)
        if limits is None
        else GuardedConfig(app, limits=limits, lifespan="on", **options)
    )
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
    plugins = Plugins(blocked=())
    plugins.register(
        inline_plugin(
            recipes={"servicetest": ServiceTestRecipe}, components={"noop": NullComponent}
        ),
        "servicetest",
    )
    return plugins
