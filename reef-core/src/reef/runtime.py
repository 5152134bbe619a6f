"""What a ``reef serve`` process runs beside the HTTP service: each scenario's trainers, their
components, and the built-in local engine.

:class:`ReefRuntime` builds, from a deployment, one :class:`~reef.train.trainer.Trainer` per
scenario and entry of its ``training`` section (a scenario without one records and admits, but
trains nothing). Each trainer builds its pipeline and component when it takes its lease, so
a process that waits as a standby holds no stale weights. A scenario whose ``serving.engine``
is ``local`` is answered by a :class:`~reef.engines.local.LocalEngine` over the
artifacts of its served ``local`` component (``Deployment.served_training``; shared through the
component's ``state_dir``, so every process serves what the trainer published last, wherever
the trainer runs). The other trainers of a scenario of several publish into their own folders
only.

A scenario served by ``vllm`` or ``sglang`` gets a :class:`~reef.engines.publisher.Publisher`
that follows the same artifacts and puts each new one into the engine, in every process (an
adapter already loaded by another process is loaded once). A trainer's publication waits for
the engine to serve its new artifact (``serving.publish_timeout``), and the trainer then
treats as served the artifact the engine really serves (P-STALE-5): the one every record of
the scenario names.

The runtime is also the HTTP service's :class:`~reef.server.service_runtime.ServiceRuntime`:
it gives the service the local engines and the publishers, and wakes a trainer when the
service stored a change for it.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from reef.components.interface import (
    Artifact,
    ArtifactSource,
    PublicationState,
    TrainingComponent,
    WrappedComponent,
)
from reef.core.deployment import (
    LOCAL_ENGINE,
    Deployment,
    ScenarioSection,
    ServiceSection,
    ServingSection,
    TrainingSection,
)
from reef.engines.admin import EngineAdmin
from reef.engines.interface import CompletionFunction
from reef.engines.publisher import Publisher
from reef.engines.sglang import SglangAdapters, SglangFullWeights
from reef.engines.vllm import VllmAdapters
from reef.evals.gate import GatedArtifacts, GatedComponent
from reef.evals.sets import EvalSet, load_eval_set
from reef.evals.targets import EvalTarget, LocalTarget, PublisherTarget
from reef.pipeline_context import TrainingMode
from reef.plugins import Plugins
from reef.plugins.registrar import PluginKind
from reef.plugins.scenarios import deployment_trackers, recipe_job_parameters, scenario_classes
from reef.record2sample.generator.client import GENERATOR_URL
from reef.server.connections import GuardedConfig
from reef.server.service import engine_address
from reef.server.service_runtime import ServiceRuntime
from reef.storage import ArtifactEvaluations, Database, ScenarioSettings
from reef.train.stages import build_pipeline
from reef.train.trainer import (
    PartsFactory,
    Trainer,
    TrainerObserver,
    TrainerParts,
    TrainerSettings,
    process_holder,
)

if TYPE_CHECKING:
    from reef.components.local.artifacts import ArtifactStore

__all__ = ["PublishedComponent", "ReefRuntime"]

logger = logging.getLogger(__name__)


class ReefRuntime(ServiceRuntime):
    """The trainers and local engines of one process (see the module's documentation).

    :param deployment: the loaded deployment.
    :param plugins: the loaded plugins (stage classes, components, event hooks).
    :param databases: the opened databases by storage URL.
    :param environ: what stages read ``${ENV}``-like settings from; the process's by default.
    :param trainer_settings: pacing and lease settings of every trainer.
    :param run_trainers: False for a process that only serves (its trainers run elsewhere).
    """

    def __init__(
        self,
        deployment: Deployment,
        *,
        plugins: Plugins,
        databases: Mapping[str, Database],
        environ: Mapping[str, str] | None = None,
        trainer_settings: TrainerSettings | None = None,
        run_trainers: bool = True,
    ) -> None:
        self.deployment = deployment
        self._plugins = plugins
        self._databases = databases
        self._environ = dict(os.environ if environ is None else environ)
        self.holder = process_holder()
        self.trainers: dict[tuple[str, str], Trainer] = {}
        self._engines: dict[str, CompletionFunction] = {}
        self.publishers: dict[str, Publisher] = {}
        self._eval_sets: dict[str, dict[str, EvalSet]] = {}
        trackers = deployment_trackers(deployment, plugins)
        for name, section in deployment.scenarios.items():
            classes = scenario_classes(name, section, plugins)
            assert classes is not None  # scenario_classes raises instead
            serving = deployment.serving_of(name)
            served = deployment.served_training(name)
            self._eval_sets[name] = self._evals_of(name, section, served, classes.components)
            if serving is not None and serving.engine == LOCAL_ENGINE:
                self._engines[name] = self._local_engine(name, served, classes.components)
            elif serving is not None and served is not None:
                self.publishers[name] = self._publisher(
                    name, section, served, serving, classes.components[served.trainer]
                )
            if not run_trainers or not classes.components:
                continue
            # Before any trainer of the scenario can build a job: an extension (Agent ECC)
            # sets up what its event hooks need for this scenario.
            plugins.scenario_started(name, classes.extensions)
            job_parameters = recipe_job_parameters(classes.recipe, section)
            for entry in section.trainings:
                self.trainers[(name, entry.trainer)] = Trainer(
                    name,
                    entry.trainer,
                    database=self._database(name),
                    build=self._parts_factory(
                        name,
                        section,
                        entry,
                        classes.components[entry.trainer],
                        serves=entry is served,
                    ),
                    plugins=plugins,
                    job_parameters=job_parameters,
                    holder=self.holder,
                    settings=trainer_settings,
                    trackers=[
                        (
                            tracker,
                            plugins.resolve(PluginKind.TRACKER, tracker)(
                                settings, scenario=name, trainer=entry.trainer
                            ),
                        )
                        for tracker, settings in trackers.items()
                    ],
                )

    def process(self) -> str:
        return self.holder

    def observe_trainers(self, observer: TrainerObserver) -> None:
        for trainer in self.trainers.values():
            trainer.observer = observer

    def _database(self, scenario: str) -> Database:
        return self._databases[self.deployment.storage_of(scenario).url]

    def _evals_of(
        self,
        scenario: str,
        section: ScenarioSection,
        served: TrainingSection | None,
        components: Mapping[str, type[Any]],
    ) -> dict[str, EvalSet]:
        """The scenario's eval sets, read; checked against what can evaluate them."""
        if not section.evals:
            return {}
        if served is None:
            raise ValueError(
                f"scenario {scenario!r}: evals score the artifacts its engine serves, and its"
                " engine serves none: serve the scenario with engine local, vllm or sglang"
            )
        if (
            section.serve_if is not None
            and section.serve_if.resume_from == "served"
            and not callable(getattr(components[served.trainer], "restore", None))
        ):
            raise ValueError(
                f"scenario {scenario!r}: serve_if.resume_from served needs a component that"
                f" goes back to an artifact's weights (local); {served.component} does not:"
                " set resume_from: trained"
            )
        return {name: load_eval_set(name, entry) for name, entry in section.evals.items()}

    def _served_source(
        self, scenario: str, store: ArtifactStore, served: TrainingSection
    ) -> ArtifactSource:
        """What the scenario's engine serves: under a gate, the artifact the gate let serve
        last; else the one published last."""
        if self.deployment.scenarios[scenario].serve_if is None:
            return store
        evaluations = ArtifactEvaluations(self._database(scenario), scenario)
        return GatedArtifacts(store, evaluations, served.trainer)

    def _local_engine(
        self,
        scenario: str,
        served: TrainingSection | None,
        components: Mapping[str, type[Any]],
    ) -> CompletionFunction:
        """The local engine over the artifacts of the scenario's served ``local`` component."""
        # Imported here: torch is an extra, needed only by a deployment that serves locally.
        from reef.components.local.artifacts import ArtifactStore
        from reef.components.local.component import LocalComponent
        from reef.components.local.settings import LocalComponentSettings
        from reef.engines.local import LocalEngine

        component = None if served is None else components[served.trainer]
        if served is None or component is None or not issubclass(component, LocalComponent):
            raise ValueError(
                f"scenario {scenario!r}: serving.engine {LOCAL_ENGINE!r} serves the weights of"
                " the scenario's local training component; set training.component to local"
                " (with several components, on the entry that sets serves: true)"
            )
        settings = LocalComponentSettings.parse(served.options, plugin_class=component)
        store = ArtifactStore(Path(settings.state_dir) / "artifacts")
        return LocalEngine(
            self._served_source(scenario, store, served),
            chat_template_args=settings.chat_template_args,
            # A LoRA artifact is an adapter folder: the engine puts it on the base model.
            base_model=None if settings.lora is None else Path(str(settings.model_path)),
        )

    def _publisher(
        self,
        scenario: str,
        section: ScenarioSection,
        served: TrainingSection,
        serving: ServingSection,
        component: type[Any],
    ) -> Publisher:
        """The publisher of the artifacts of the scenario's served ``local`` component into its
        vLLM or SGLang server."""
        from reef.components.local.artifacts import ArtifactStore
        from reef.components.local.component import LocalComponent
        from reef.components.local.settings import LocalComponentSettings

        assert serving.url is not None
        assert serving.model is not None  # ServingSection requires both for these engines
        if not issubclass(component, LocalComponent):
            raise ValueError(
                f"scenario {scenario!r}: serving.engine {serving.engine!r} is given the weights"
                " of the scenario's local training component; set training.component to local"
                " (with several components, on the entry that sets serves: true), or serve the"
                " scenario by the engine's URL, without publication"
            )
        settings = LocalComponentSettings.parse(served.options, plugin_class=component)
        admin: EngineAdmin
        if settings.lora is not None:
            admin = VllmAdapters() if serving.engine == "vllm" else SglangAdapters(serving.model)
        elif serving.engine == "vllm":
            raise ValueError(
                f"scenario {scenario!r}: vLLM takes trained weights at run time as LoRA adapters"
                " only: no route of its server loads full weights from a folder (its full-weight"
                " updates come over NCCL or CUDA IPC from the trainer's own GPU process); set"
                " training.options.lora to train a LoRA adapter, or serve the scenario with"
                " engine sglang, which loads full weights from disk"
            )
        else:
            admin = SglangFullWeights(serving.model)
            if section.evals:
                raise ValueError(
                    f"scenario {scenario!r}: evals reach a new artifact beside the served one"
                    " under a name the agents do not see, and SGLang takes full weights only by"
                    " swapping what serves; set training.options.lora to train an adapter"
                )
        staleness = (section.pipeline.record2sample.config or {}).get("max_staleness", 0)
        keep = staleness + 1 if isinstance(staleness, int) and staleness >= 0 else 1
        return Publisher(
            scenario,
            admin,
            serving.model,
            url=engine_address(serving.url),
            source=self._served_source(
                scenario, ArtifactStore(Path(settings.state_dir) / "artifacts"), served
            ),
            engine_path=serving.artifacts_path,
            api_key=serving.admin_api_key or serving.api_key,
            keep=keep,
            process=self.holder,
            settings=ScenarioSettings(self._database(scenario), scenario),
        )

    def _parts_factory(
        self,
        scenario: str,
        section: ScenarioSection,
        entry: TrainingSection,
        component_class: type[Any],
        *,
        serves: bool,
    ) -> PartsFactory:
        # Only the trainer whose artifacts the engine serves publishes into it, and only its
        # samples can go stale: another trainer's artifacts answer no call (docs/decisions.md).
        publisher = self.publishers.get(scenario) if serves else None
        loader = serves and (scenario in self._engines or publisher is not None)
        serving = self.deployment.serving_of(scenario)
        trainer = entry.trainer
        eval_sets = self._eval_sets.get(scenario, {})

        def build(database: Database) -> TrainerParts:
            pipeline = build_pipeline(
                scenario,
                section,
                trainer,
                plugins=self._plugins,
                database=database,
                has_runtime_loader=loader,
                environ=self._environ,
                replay_last_outcome=False,  # the trainer replays it once it knows no job runs
            )
            component: TrainingComponent = component_class.from_config(entry.options, name=trainer)
            if serves and eval_sets:
                component = self._gated(scenario, section, entry, component, database)
            if publisher is not None and serving is not None:
                component = PublishedComponent(
                    component,
                    publisher,
                    serving.publish_timeout,
                    max_failed=serving.max_failed_publications,
                )
            return TrainerParts(pipeline, component)

        return build

    def _gated(
        self,
        scenario: str,
        section: ScenarioSection,
        entry: TrainingSection,
        component: TrainingComponent,
        database: Database,
    ) -> GatedComponent:
        """The served component, its publications evaluated (and gated, with serve_if)."""
        from reef.components.local.artifacts import ArtifactStore
        from reef.components.local.settings import LocalComponentSettings

        settings = LocalComponentSettings.parse(entry.options, plugin_class=type(component))
        target: EvalTarget
        publisher = self.publishers.get(scenario)
        serving = self.deployment.serving_of(scenario)
        if publisher is not None and serving is not None:
            target = PublisherTarget(
                publisher, api_key=serving.api_key, timeout=serving.publish_timeout
            )
        else:
            target = LocalTarget(
                chat_template_args=settings.chat_template_args,
                base_model=None if settings.lora is None else Path(str(settings.model_path)),
            )
        return GatedComponent(
            component,
            scenario=scenario,
            trainer=entry.trainer,
            evals=self._eval_sets[scenario],
            gate=section.serve_if,
            target=target,
            artifacts=ArtifactStore(Path(settings.state_dir) / "artifacts"),
            evaluations=ArtifactEvaluations(database, scenario),
            settings=ScenarioSettings(database, scenario),
        )

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Start every publisher, then every trainer's thread (each waits for its lease)."""
        for publisher in self.publishers.values():
            publisher.start()
        for trainer in self.trainers.values():
            trainer.start()

    def stop(self, timeout: float | None = None) -> None:
        """Stop every trainer (running jobs end and commit, reserved data is released, leases
        are given up), then every publisher."""
        for trainer in self.trainers.values():
            trainer.stop(timeout)
        for publisher in self.publishers.values():
            publisher.stop()

    # -- the service's hooks ---------------------------------------------------------------

    def local_engine(self, scenario: str) -> CompletionFunction | None:
        """The local engine of ``scenario``, if it is served by one."""
        return self._engines.get(scenario)

    def publisher(self, scenario: str) -> Publisher | None:
        """The publisher into the vLLM or SGLang server of ``scenario``, if it has one."""
        return self.publishers.get(scenario)

    def _wake(self, scenario: str) -> None:
        for (name, _), trainer in self.trainers.items():
            if name == scenario:
                trainer.wake()

    def training_mode_changed(self, scenario: str, mode: TrainingMode) -> None:
        """Wake the scenario's trainers: they apply the stored mode at once."""
        del mode
        self._wake(scenario)

    def instructions_queued(self, scenario: str) -> None:
        """Wake the scenario's trainers: they queue the stored instruction at once."""
        self._wake(scenario)

    def manual_buffer_changed(self, scenario: str) -> None:
        """Wake the scenario's trainers: they read the manual buffer at once."""
        self._wake(scenario)


class PublishedComponent(WrappedComponent):
    """A training component whose :meth:`publish` waits (up to ``timeout`` seconds) for the
    scenario's engine to serve the new artifact, and returns the artifact the engine serves
    then: what the trainer hands its pipeline as served (P-STALE-5). Before the engine serves
    any, it returns the component's own. Everything else is the component's.

    It counts the publications the engine did not take in a row (the newest artifact not served
    when :meth:`publish` returns, and not since): with ``max_failed`` of them the trainer pauses
    (:class:`reef.components.interface.PublicationWatch`) until the engine takes one.
    """

    def __init__(
        self,
        component: TrainingComponent,
        publisher: Publisher,
        timeout: float,
        *,
        max_failed: int = 3,
    ) -> None:
        super().__init__(component)
        self.publisher = publisher
        self.timeout = timeout
        self.max_failed = max_failed
        self._failed = 0
        self._pending: str | None = None

    def publish(self) -> Artifact:
        artifact = self.component.publish()
        served = self.publisher.serve(artifact, self.timeout)
        if served is not None and served.artifact_id == artifact.artifact_id:
            self._failed, self._pending = 0, None
        elif artifact.artifact_id != self._pending:
            self._failed += 1
            self._pending = artifact.artifact_id
        return artifact if served is None else served

    def publication(self) -> PublicationState:
        route = self.publisher.route()
        served = None if route is None else route.artifact_id
        if self._pending is not None and served == self._pending:
            self._failed, self._pending = 0, None  # the engine took it since
        return PublicationState(self._failed, self.max_failed, served)


def _client_host(host: str) -> str:
    """The address a client of this process uses for a service bound to ``host``."""
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


@attrs.frozen
class ServeOptions:
    """How ``reef serve`` runs a deployment's process (one, or each of ``--workers``).

    :ivar host: the address it listens on.
    :ivar port: the port it listens on.
    :ivar allow_unauthenticated: run without tokens (loopback only).
    :ivar run_trainers: run the trainers (each waits for its lease), or serve only.
    :ivar trainer_settings: the trainers' lease timing.
    :ivar log_level: uvicorn's and Reef's log level.
    """

    host: str = "127.0.0.1"
    port: int = 8000
    allow_unauthenticated: bool = False
    run_trainers: bool = True
    trainer_settings: TrainerSettings | None = None
    log_level: str = "info"


def _check_auth_mode(deployment: Deployment, options: ServeOptions) -> None:
    """:raises reef.server.auth.UnauthenticatedServiceError: when ``deployment`` may not be
    served with ``options`` (no tokens, and not allowed to run so or beyond loopback)."""
    from reef.server.auth import check_auth_mode

    check_auth_mode(
        authenticated=bool(deployment.auth.tokens),
        allow_unauthenticated=options.allow_unauthenticated,
        host=options.host,
    )


def _serving(
    deployment: Deployment, plugins: Plugins, options: ServeOptions
) -> tuple[Any, ReefRuntime, dict[str, Database]]:
    """This process's service of ``deployment``: its application, its runtime (not started)
    and the databases both use.

    :raises reef.server.auth.UnauthenticatedServiceError: for a service without tokens that was
        not allowed to run so, or that would listen beyond loopback.
    """
    from reef.server import ServerOptions, create_app, open_databases
    from reef.server.connections import raise_open_file_limit

    # Before any work: nothing is opened, migrated or created for a service that may not run.
    _check_auth_mode(deployment, options)
    databases = open_databases(deployment)
    environ = dict(os.environ)
    if deployment.generator is not None:
        # Task generators reach the generator service that this process serves.
        environ.setdefault(GENERATOR_URL, f"http://{_client_host(options.host)}:{options.port}")
    runtime = ReefRuntime(
        deployment,
        plugins=plugins,
        databases=databases,
        environ=environ,
        trainer_settings=options.trainer_settings,
        run_trainers=options.run_trainers,
    )
    app = create_app(
        deployment,
        databases=databases,
        plugins=plugins,
        runtime=runtime,
        options=ServerOptions(allow_unauthenticated=options.allow_unauthenticated),
        environ=environ,
    )
    raise_open_file_limit(deployment.service)
    return app, runtime, databases


def serve(deployment: Deployment, *, plugins: Plugins, options: ServeOptions) -> None:
    """Serve ``deployment``: its trainers on their threads and the HTTP service on uvicorn,
    until SIGTERM or SIGINT; then the service stops taking requests and every trainer stops
    cleanly (its running job ends and commits, reserved data is released, leases are given up).

    :raises reef.server.ServiceConfigError: for an engine the service cannot use as configured.
    :raises reef.server.auth.UnauthenticatedServiceError: for a service without tokens that was
        not allowed to run so, or that would listen beyond loopback.
    """
    import uvicorn

    from reef.server.access_log import redact_request_lines

    app, runtime, databases = _serving(deployment, plugins, options)
    config = GuardedConfig(
        app,
        limits=deployment.service,
        host=options.host,
        port=options.port,
        log_level=options.log_level,
    )
    # Once uvicorn configured its loggers: no request line logs a credential.
    redact_request_lines(section.token for section in deployment.auth.tokens.values())
    server = uvicorn.Server(config)
    # uvicorn re-raises the stop signal once the service shut down, to the handlers that were
    # there before it; these take it, so the trainers below still stop cleanly.
    stop_signals: list[int] = []
    for stop_signal in (signal.SIGTERM, signal.SIGINT):
        signal.signal(stop_signal, lambda number, _frame: stop_signals.append(number))
    runtime.start()
    try:
        server.run()  # returns after SIGTERM/SIGINT, once the service shut down
    finally:
        runtime.stop()
        for database in databases.values():
            database.dispose()


def serve_workers(
    deployment: Deployment, deployment_file: Path, *, options: ServeOptions, workers: int
) -> None:
    """Serve ``deployment`` (read from ``deployment_file``) in ``workers`` processes that share
    one listening socket, each a whole ``reef serve`` process (its own ledgers, publishers and
    trainers, a trainer running in the one process that holds its lease), under uvicorn's
    process supervisor: it restarts a worker that dies, and SIGTERM or SIGINT stops every
    worker cleanly (``docs/service.md#several-processes``).

    Each worker reads ``deployment_file`` again (its ``${ENV}`` references from the same
    environment) and opens its own connections: nothing of this process crosses to it but the
    file's path, ``options`` and the socket.

    :raises reef.server.auth.UnauthenticatedServiceError: for a service without tokens that was
        not allowed to run so, or that would listen beyond loopback.
    """
    import uvicorn.supervisors

    _check_auth_mode(deployment, options)  # before any worker starts
    config = WorkerConfig(deployment_file, options, deployment.service, workers)
    uvicorn.supervisors.Multiprocess(config, sockets=[config.bind_socket()]).run()


class WorkerConfig(GuardedConfig):
    """The uvicorn configuration of one ``reef serve --workers`` process. It crosses to each
    spawned worker as it is (pickled), and builds the worker's service there when uvicorn
    loads it: the deployment read again, the databases opened, the trainers started with the
    application's lifespan and stopped with it."""

    def __init__(
        self, deployment_file: Path, options: ServeOptions, limits: ServiceSection, workers: int
    ) -> None:
        super().__init__(
            _NOT_BUILT,
            limits=limits,
            host=options.host,
            port=options.port,
            log_level=options.log_level,
            workers=workers,
        )
        self.deployment_file = deployment_file
        self.options = options

    def __getstate__(self) -> dict[str, Any]:
        # The connection guard is the worker's own, made with its service's metrics.
        return {key: value for key, value in self.__dict__.items() if key != "guard"}

    def load(self) -> None:
        if not self.loaded:
            self.app = self._build()
        super().load()

    def _build(self) -> Any:
        """The worker's application, its runtime tied to the application's lifespan."""
        import contextlib

        import anyio.to_thread

        from reef.plugins.scenarios import load_deployment
        from reef.server.access_log import redact_request_lines

        plugins = Plugins()
        plugins.load()
        deployment = load_deployment(self.deployment_file, plugins=plugins)
        app, runtime, databases = _serving(deployment, plugins, self.options)
        self.guard_connections_of(app)
        redact_request_lines(section.token for section in deployment.auth.tokens.values())
        served = app.router.lifespan_context

        @contextlib.asynccontextmanager
        async def lifespan(application: Any) -> Any:
            async with served(application):
                runtime.start()
                try:
                    yield
                finally:
                    await anyio.to_thread.run_sync(runtime.stop)
                    for database in databases.values():
                        database.dispose()

        app.router.lifespan_context = lifespan
        return app


#: What a worker's configuration holds for its application until the worker builds it.
_NOT_BUILT = "reef:not-built-here"
