"""The state behind the routes, and the steps every route takes.

:class:`Service` holds what the application serves: each scenario of the deployment with its
stores, its admission facts (:class:`~reef.server.admission.ScenarioAdmission`), its engine and,
while the application runs, its ledger; the authenticator; the data-item store; the runtime
hooks. A route finds it with :func:`service_of`, then asks it who calls (:meth:`Service.caller`),
which scenario (:meth:`Service.scenario`, :meth:`Service.authorised`) and that scenario's
ledger (:meth:`Service.ledger`). The routes themselves live one module per resource
(``docs/service.md``).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import anyio.to_thread
import attrs
from starlette.requests import Request

from reef.containers.interface import ContainerError
from reef.core.deployment import LOCAL_ENGINE, PUBLISHING_ENGINES, Deployment, ServingSection
from reef.core.evals import ServeIfSection
from reef.engines.http import HttpEngine
from reef.engines.interface import ChatEngine, FunctionEngine
from reef.plugins import Plugins
from reef.recipe.generated_tasks.processor import saved_scenario_task
from reef.record2sample.generator.service import GeneratorService
from reef.server.admission import ScenarioAdmission
from reef.server.auth import Authenticator, Caller, Scope
from reef.server.errors import ApiError, ServiceConfigError
from reef.server.ledger import ScenarioLedger
from reef.server.response_chains import ResponseChains
from reef.server.service_runtime import ServiceRuntime
from reef.server.store_health import StoreHealth
from reef.storage import (
    ArtifactEvaluations,
    Database,
    JobHistory,
    RecordStore,
    SampleBrowser,
    SampleLabels,
    ScenarioSettings,
    TaskStorage,
    TrainerSamples,
)
from reef.train.stages import scenario_trainers

if TYPE_CHECKING:
    from reef.server.metrics import ServiceMetrics

__all__ = [
    "ITEMS_STORE",
    "LOCAL_ENGINE",
    "ServedScenario",
    "ServerOptions",
    "Service",
    "check_trainer",
    "engine_address",
    "service_of",
]

#: The task store (of the deployment's own storage, scenario ``""``) that holds data items.
ITEMS_STORE: Final = "reef.data-items"


def engine_address(url: str) -> str:
    """A vLLM or SGLang server's address (``serving.url``) without a trailing ``/`` or
    ``/v1``: its chat calls go to ``<address>/v1``, its weight-loading calls beside."""
    address = url.rstrip("/")
    return address.removesuffix("/v1")


@attrs.frozen
class ServerOptions:
    """How the service runs.

    :ivar allow_unauthenticated: run without tokens; the service then answers loopback clients
        only (and ``reef serve`` binds to loopback only).
    :ivar max_body_bytes: the largest request body (413 beyond).
    :ivar max_item_bytes: the largest data-item upload (413 beyond).
    :ivar engine_timeout: seconds to wait for an engine.
    :ivar tracer_provider: the OpenTelemetry tracer provider of the service's and trainers'
        spans (``None``: OpenTelemetry's global one; ``docs/observe.md``).
    """

    allow_unauthenticated: bool = False
    max_body_bytes: int = 8 << 20
    max_item_bytes: int = 32 << 20
    engine_timeout: float = 600.0
    tracer_provider: Any = None


@attrs.define
class ServedScenario:
    """One scenario as the routes see it.

    :ivar ledger: the scenario's ledger while the application runs (``None`` before its
        lifespan starts and after it ends).
    :ivar engine: the engine that answers its chat calls; ``None`` without ``serving``.
    :ivar browser: its samples, as people browse them.
    :ivar history: its trainers' jobs, as people read them.
    :ivar labels: the rewards people gave its samples.
    :ivar health: whether its store can write.
    :ivar served_trainer: the trainer whose artifacts its engine answers with; ``None`` when
        the engine takes no trained weights (``Deployment.served_training``).
    :ivar serving_model: the model its serving section names, if any (``GET /v1/models``).
    :ivar text_only: its engine takes no image (the local engine renders text alone).
    :ivar evaluations: its artifacts' evaluation results and gate decisions, when it has
        ``evals`` (``eval_sets`` their names); ``gate`` its ``serve_if``.
    :ivar response_chains: what resolves its Responses calls' ``previous_response_id``
        (:class:`~reef.server.response_chains.ResponseChains`), made at its first such call.
    """

    name: str
    records: RecordStore
    samples: TrainerSamples
    settings: ScenarioSettings
    admission: ScenarioAdmission
    browser: SampleBrowser
    history: JobHistory
    labels: SampleLabels
    health: StoreHealth
    ledger: ScenarioLedger | None = None
    engine: ChatEngine | None = None
    served_trainer: str | None = None
    serving_model: str | None = None
    response_chains: ResponseChains | None = None
    text_only: bool = False
    evaluations: ArtifactEvaluations | None = None
    eval_sets: tuple[str, ...] = ()
    gate: ServeIfSection | None = None


class Service:
    """The state behind the routes (see the module docstring).

    Made by :func:`reef.server.create_app`, which builds every scenario's admission and engine
    now, so a bad config, engine URL or proxy setting fails before the service listens.
    """

    def __init__(
        self,
        deployment: Deployment,
        *,
        databases: Mapping[str, Database],
        plugins: Plugins,
        runtime: ServiceRuntime,
        options: ServerOptions,
        environ: Mapping[str, str] | None,
    ) -> None:
        self.runtime = runtime
        self.options = options
        #: The application's metrics; ``None`` without the ``metrics`` extra.
        self.metrics: ServiceMetrics | None = None
        self.auth = Authenticator(
            deployment.auth, allow_unauthenticated=options.allow_unauthenticated
        )
        self.items = TaskStorage(_database(databases, deployment.storage.url), "").open(ITEMS_STORE)
        #: Whether each database can write, by storage URL.
        self.health = {url: StoreHealth(database) for url, database in databases.items()}
        self.scenarios: dict[str, ServedScenario] = {}
        tasks: dict[str, TaskStorage] = {}
        trainers: dict[str, tuple[str, ...]] = {}
        for name, section in deployment.scenarios.items():
            url = deployment.storage_of(name).url
            database = _database(databases, url)
            tasks[name] = TaskStorage(database, name)
            trainers[name] = scenario_trainers(section)
            serving = deployment.serving_of(name)
            served = deployment.served_training(name)
            self.scenarios[name] = ServedScenario(
                name=name,
                records=RecordStore(database, name),
                samples=TrainerSamples(database, name),
                settings=ScenarioSettings(database, name),
                admission=ScenarioAdmission.build(name, section, plugins=plugins, environ=environ),
                browser=SampleBrowser(database, name),
                history=JobHistory(database, name),
                labels=SampleLabels(database, name),
                health=self.health[url],
                served_trainer=None if served is None else served.trainer,
                serving_model=None if serving is None else serving.model,
                evaluations=ArtifactEvaluations(database, name) if section.evals else None,
                eval_sets=tuple(section.evals),
                gate=section.serve_if,
                text_only=serving is not None and serving.engine == LOCAL_ENGINE,
            )
            if serving is not None:
                self.scenarios[name].engine = self._engine(name, serving)
        #: The generator service, where the deployment has a ``generator`` section.
        self.generator: GeneratorService | None = None
        if deployment.generator is not None:
            try:
                self.generator = GeneratorService(
                    deployment.generator,
                    task_source=lambda scenario, name: saved_scenario_task(
                        tasks[scenario], scenario, trainers[scenario], name
                    ),
                )
            except ContainerError as exc:
                raise ServiceConfigError(f"the generator section: {exc}") from None

    def _engine(self, scenario: str, serving: ServingSection) -> ChatEngine:
        """The scenario's engine, made when the application is (so a bad engine URL or proxy
        setting stops ``reef serve`` before it listens). :raises ServiceConfigError: where
        :class:`HttpEngine` refuses its URL or proxy, or for a local engine the runtime does
        not have."""
        if serving.engine == LOCAL_ENGINE:
            local = self.runtime.local_engine(scenario)
            if local is None:
                raise ServiceConfigError(
                    f"scenario {scenario!r} is served by the local engine, and the runtime has"
                    " none for it"
                )
            return FunctionEngine(local)
        base_url = serving.engine
        if serving.engine in PUBLISHING_ENGINES:
            assert serving.url is not None  # ServingSection requires it for these engines
            base_url = f"{engine_address(serving.url)}/v1"
        try:
            return HttpEngine(
                base_url,
                api_key=serving.api_key,
                model=serving.model,
                timeout=self.options.engine_timeout,
                # vLLM and SGLang return the tokens they sampled; a server by URL may not.
                returns_tokens=serving.engine in PUBLISHING_ENGINES,
                native_formats=frozenset(serving.native_formats),
            )
        except ValueError as exc:
            raise ServiceConfigError(f"scenario {scenario!r}: {exc}") from None

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        """Start each scenario's ledger (the application's lifespan begins)."""
        stores = [s.records for s in self.scenarios.values()]
        for scenario in self.scenarios.values():
            others = [store for store in stores if store is not scenario.records]
            scenario.ledger = ScenarioLedger(
                scenario.records,
                others,
                on_store_failure=scenario.health.failed,
                on_write=None
                if self.metrics is None
                else functools.partial(self.metrics.store_write, scenario.name),
            )

    async def stop(self) -> None:
        """Stop the ledgers, close the engines' idle connections and the stages admission
        kept (the application's lifespan ends)."""
        for scenario in self.scenarios.values():
            if scenario.ledger is not None:
                await anyio.to_thread.run_sync(scenario.ledger.close)
                scenario.ledger = None
            if scenario.engine is not None:
                await scenario.engine.aclose()  # its idle connections; usable again after
        for scenario in self.scenarios.values():
            scenario.admission.close()

    def store_failed(self, exc: BaseException, size: int = 0) -> None:
        """A write of about ``size`` bytes failed for a reason of the database (which one the
        error does not say): every store is probed before its next chat call is forwarded."""
        for health in self.health.values():
            health.failed(exc, size)

    # -- what every route asks ------------------------------------------------------------------

    def caller(self, request: Request, *, api_key_header: bool = False) -> Caller:
        """Who sent ``request``. :raises ApiError: 401 for a missing or unknown token.

        :param api_key_header: take the token from ``x-api-key`` when no ``authorization``
            header is sent, as Anthropic's clients send it.
        """
        client = request.client.host if request.client else None
        authorization = request.headers.get("authorization")
        if authorization is None and api_key_header and request.headers.get("x-api-key"):
            authorization = f"Bearer {request.headers['x-api-key']}"
        return self.auth.caller(authorization, client)

    def scenario(self, name: str, caller: Caller, field: str = "scenario") -> ServedScenario:
        """The scenario ``name``. :raises ApiError: 404 naming ``field`` and the scenarios
        ``caller`` may see (never the others: their names are not the caller's to know)."""
        found = self.scenarios.get(name)
        if found is None:
            visible = sorted(n for n in self.scenarios if caller.sees(n))
            raise ApiError.one(
                404,
                "not_found",
                field,
                f"no scenario {name!r}; yours: {', '.join(visible) or 'none'}",
            )
        return found

    def authorised(self, request: Request, scope: Scope) -> tuple[Caller, ServedScenario]:
        """The caller and the scenario of the route's ``{scenario}``, once the caller is
        allowed ``scope`` in it. :raises ApiError: 401, 403 or 404."""
        caller = self.caller(request)
        scenario = self.scenario(request.path_params["scenario"], caller)
        caller.require(scope, scenario.name)
        return caller, scenario

    @staticmethod
    def ledger(scenario: ServedScenario) -> ScenarioLedger:
        """The scenario's ledger. :raises ApiError: 409 when the service is not running."""
        if scenario.ledger is None:
            raise ApiError.one(409, "not_running", "scenario", "the service is not running")
        return scenario.ledger


def check_trainer(scenario: ServedScenario, trainer: str | None, field: str) -> None:
    """:raises ApiError: 400 naming ``field`` when ``scenario`` has no trainer ``trainer`` (none
    named is every trainer: nothing to check)."""
    if trainer is not None and trainer not in scenario.admission.trainers:
        raise ApiError.one(
            400,
            "invalid_request",
            field,
            f"scenario {scenario.name!r} has no trainer {trainer!r}"
            f" (it has: {', '.join(scenario.admission.trainers) or 'none'})",
        )


def service_of(request: Request) -> Service:
    """The :class:`Service` of the application that received ``request``."""
    service = request.app.state.service
    assert isinstance(service, Service)
    return service


def _database(databases: Mapping[str, Database], url: str) -> Database:
    try:
        return databases[url]
    except KeyError:
        raise ValueError(f"no opened database for storage {url!r}") from None
