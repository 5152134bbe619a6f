"""The deployment file: scenarios, their recipes and stages, storage, serving and auth.

The file is YAML, read with ``yaml.safe_load`` only (no tag builds a Python object). A string
may hold ``${NAME}`` references, replaced from the environment it is read with (secrets stay out
of the file). Every section is a settings class, so the file is checked key by key like a
stage's config: unknown keys (with the closest valid one), wrong types, bad values.

This module reads text it is given and does no I/O; resolving the classes a scenario names
(plugins) and reading the file are :func:`reef.plugins.scenarios.load_deployment`'s, a floor up.
"""

from __future__ import annotations

import functools
import re
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

import attrs
import yaml

from reef.core.config import config_option
from reef.core.container_settings import ContainerSettings, positive
from reef.core.evals import EvalSetSection, ServeIfSection, gate_problems
from reef.core.plugins import PluginConfigError, PluginSettings
from reef.errors import ReefError

_ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")

#: The storage a deployment uses when it names none: a SQLite file beside the process.
DEFAULT_STORAGE_URL = "sqlite:///reef.db"


class DeploymentError(ReefError, ValueError):
    """A deployment file cannot be used. ``problems`` holds every problem of the file, each as
    ``<reason> @ <path>`` (a stage's problem starts with the stage's class name).

    When a stage, a recipe or another plugin refused its config, the error raised is also of
    that refusal's own type (:meth:`of`): a weight recipe without ``job_samples`` is a
    ``DeploymentError`` and a :class:`~reef.core.plugins.RecipeConfigError` (P-SIZE-2), a
    ``job_samples`` a fixed-unit stage refuses a ``DeploymentError`` and a
    :class:`~reef.core.plugins.PluginConfigError` (P-SIZE-4), so code that embeds Reef catches
    either. ``causes`` holds those refusals (``plugin``, ``key``, ``reason`` and ``errors`` are
    then the first's, and every problem of them all).
    """

    def __init__(
        self,
        source: str,
        problems: tuple[str, ...],
        *,
        causes: Sequence[PluginConfigError] = (),
    ) -> None:
        self.source = source
        self.problems = problems
        self.causes = tuple(causes)
        listed = "\n".join(f"  {p}" for p in problems)
        # Not super().__init__: in a class that is also a stage's error, the next __init__ in
        # the order is that error's, which takes other arguments.
        ValueError.__init__(self, f"{source}: {len(problems)} problem(s)\n{listed}")
        if self.causes:
            first = self.causes[0]
            self.plugin, self.key, self.reason = first.plugin, first.key, first.reason
            self.errors = tuple(e for cause in self.causes for e in cause.errors)

    @classmethod
    def of(
        cls, source: str, problems: tuple[str, ...], causes: Sequence[PluginConfigError] = ()
    ) -> DeploymentError:
        """The error of ``problems``: a ``DeploymentError`` that is also of each type in
        ``causes`` (the most specific ones), or a plain one without causes."""
        kinds = tuple(dict.fromkeys(type(c) for c in causes))
        kinds = tuple(k for k in kinds if not any(o is not k and issubclass(o, k) for o in kinds))
        if not kinds:
            return cls(source, problems)
        return _deployment_error_of(kinds)(source, problems, causes=causes)


@functools.cache
def _deployment_error_of(kinds: tuple[type[PluginConfigError], ...]) -> type[DeploymentError]:
    """The class of a deployment error that is also each of ``kinds`` (made once per kinds)."""
    name = "Deployment" + "".join(kind.__name__ for kind in kinds)
    doc = f"A deployment error that is also a {' and a '.join(k.__name__ for k in kinds)}."
    made = type(name, (DeploymentError, *kinds), {"__module__": __name__, "__doc__": doc})
    return typing.cast(type[DeploymentError], made)


# --------------------------------------------------------------------------------------------
# the sections
# --------------------------------------------------------------------------------------------


@attrs.frozen
class StorageSection(PluginSettings):
    """Where a deployment (or one scenario) keeps its records, samples and tasks."""

    url: str = config_option(
        help="SQLAlchemy URL: sqlite:///path.db (default) or postgresql+psycopg://..."
    )


#: ``serving.engine`` value for the built-in local engine (given by the runtime).
LOCAL_ENGINE: Final = "local"
#: The engine kinds Reef puts trained weights into at run time (``serving.engine``), beside
#: ``local`` and a plain OpenAI-compatible base URL.
PUBLISHING_ENGINES: Final = ("vllm", "sglang")


@attrs.frozen
class ServingSection(PluginSettings):
    """The inference engine that answers the agents' calls (OpenAI-compatible).

    ``engine`` is ``local`` (the built-in engine), ``vllm`` or ``sglang`` (a server at ``url``
    that Reef publishes each trained artifact into and routes the calls to), or the base URL
    of any other OpenAI-compatible server (forwarded to, nothing published).
    """

    engine: str = config_option(
        help="local, vllm, sglang, or any OpenAI-compatible base URL (http://host:port/v1)"
    )
    url: str | None = config_option(
        default=None, help="the vllm or sglang server's address (http://host:port)"
    )
    model: str | None = config_option(
        default=None, help="the model name the engine serves (vllm, sglang: the base model's)"
    )
    api_key: str | None = config_option(
        default=None, help="the engine's API key; write it as a ${ENV} reference"
    )
    admin_api_key: str | None = config_option(
        default=None,
        help="the key of the engine's weight-loading endpoints when it differs (SGLang's"
        " --admin-api-key); a ${ENV} reference",
    )
    artifacts_path: str | None = config_option(
        default=None,
        help="the trained artifacts' folder as the engine's machine sees it (vllm, sglang);"
        " by default the component's own folder, on a filesystem both share",
    )
    publish_timeout: float = config_option(
        60.0,
        help="seconds a trainer waits for the engine to serve new weights before it goes on",
        validator=attrs.validators.gt(0),
    )
    native_formats: tuple[Literal["openai.responses", "anthropic.messages"], ...] = config_option(
        factory=tuple,
        help="the API formats the engine is asked in their own form (its /v1/responses,"
        " /v1/messages) instead of through chat completions: it then renders their prompts by"
        " its own rules and returns no token ids (docs/api-formats.md#native-forwarding)",
    )
    max_failed_publications: int = config_option(
        3,
        help="publications in a row the engine may fail to take before the trainer pauses "
        "(until the engine takes an artifact): its data would come ever further off-policy",
        validator=attrs.validators.ge(1),
    )

    def __attrs_post_init__(self) -> None:
        if self.engine in PUBLISHING_ENGINES:
            if not self.url:
                raise ValueError(
                    f"engine {self.engine} needs url: the server's address (http://host:port)"
                )
            if not self.model:
                raise ValueError(
                    f"engine {self.engine} needs model: the base model's name as the server"
                    " serves it (its --served-model-name, else its model path)"
                )
        elif self.url is not None or self.artifacts_path is not None:
            raise ValueError(
                "url and artifacts_path are for engine vllm or sglang; engine"
                f" {self.engine!r} is reached at its own address"
            )
        if self.engine == LOCAL_ENGINE and self.native_formats:
            raise ValueError(
                "native_formats: the local engine answers chat completions only; Reef"
                " translates the other formats for it"
            )


# A Host header's value as the service compares it: a host name, an IPv4 address or a bracketed
# IPv6 one, with an optional port.
_HOST = re.compile(r"(?:[A-Za-z0-9_.-]+|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?")
_ORIGIN = re.compile(r"https?://" + _HOST.pattern)


def _host_name(_: object, attribute: attrs.Attribute[Any], value: str) -> None:
    if not _HOST.fullmatch(value):
        raise ValueError(
            f"{attribute.name}: {value!r} is not a host name or host:port (such as"
            " reef.example.com or reef.example.com:8000)"
        )


def _origin(_: object, attribute: attrs.Attribute[Any], value: str) -> None:
    if not _ORIGIN.fullmatch(value):
        raise ValueError(
            f"{attribute.name}: {value!r} is not an origin: scheme://host[:port], such as"
            " https://console.example.com, without a path"
        )


@attrs.frozen
class GeneratorSection(PluginSettings):
    """The generator service that ``reef serve`` starts: it stages tasks and runs their
    verifiers and hint plays for task generators (``docs/generator-service.md``)."""

    tasks_root: str = config_option(help="the folder that holds the staged copies of tasks")
    containers: ContainerSettings = config_option(
        factory=ContainerSettings, help="where runs happen (backend) and their limits"
    )
    max_parallel_runs: int = config_option(
        2, help="runs (verifiers, plays) at the same time", validator=positive
    )


#: The shortest secret a token may have: a shorter one (or one whose ``${ENV}`` reference
#: expanded to nothing) is refused when the deployment is read.
MIN_TOKEN_LENGTH = 16


def _long_enough(instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    del instance, attribute
    if _ENV_REFERENCE.fullmatch(value):
        return  # its variable is not set: that problem is reported already
    if len(value) < MIN_TOKEN_LENGTH:
        raise ValueError(
            f"a token's secret needs at least {MIN_TOKEN_LENGTH} characters, this one has"
            f" {len(value)} (is its ${{ENV}} variable empty?)"
        )


def _distinct_secrets(
    instance: object, attribute: attrs.Attribute[Mapping[str, TokenSection]], value: Any
) -> None:
    del instance, attribute
    owners: dict[str, str] = {}
    for name, section in value.items():
        first = owners.setdefault(section.token, name)
        if first != name:
            raise ValueError(
                f"tokens {first!r} and {name!r} have the same secret; give each its own"
            )


@attrs.frozen
class TokenSection(PluginSettings):
    """One bearer token of the service and what it may do."""

    token: str = config_option(
        help=f"the secret, at least {MIN_TOKEN_LENGTH} characters; write it as ${{ENV}}",
        validator=_long_enough,
    )
    scopes: tuple[Literal["infer", "feedback", "admin", "metrics"], ...] = config_option(
        help="infer (inference), feedback (reports, uploads), admin (modes, instructions),"
        " metrics (GET /metrics)",
        validator=attrs.validators.min_len(1),
    )
    scenarios: tuple[str, ...] | None = config_option(
        default=None, help="the scenarios the token is limited to; all when absent"
    )


@attrs.frozen
class AuthSection(PluginSettings):
    """The tokens the service accepts, by name."""

    tokens: Mapping[str, TokenSection] = config_option(
        factory=dict,
        help="tokens by name (the name shows in logs, never the secret); each its own secret",
        validator=_distinct_secrets,
    )


@attrs.frozen
class ServiceSection(PluginSettings):
    """How the HTTP service treats its connections (``reef serve``)."""

    header_timeout: float = config_option(
        default=10.0,
        help="seconds a connection may take to send a request's head (408 and closed after)",
        validator=positive,
    )
    body_timeout: float = config_option(
        default=30.0,
        help="seconds a request's body may take to arrive after its head (closed after)",
        validator=positive,
    )
    max_connections: int = config_option(
        default=1000,
        help="connections open at once; beyond, the longest-idle one is closed",
        validator=positive,
    )
    allowed_hosts: tuple[str, ...] | None = config_option(
        default=None,
        help="the Host names (host or host:port) requests may name besides loopback ones;"
        " with auth and no list, every name",
        validator=attrs.validators.optional(attrs.validators.deep_iterable(_host_name)),
    )
    allowed_origins: tuple[str, ...] = config_option(
        factory=tuple,
        help="origins (scheme://host[:port]) besides the service's own that may change state:"
        " a browser page served elsewhere, such as behind a proxy",
        validator=attrs.validators.deep_iterable(_origin),
    )


@attrs.frozen
class StageSection(PluginSettings):
    """One stage of a scenario's pipeline: the class (else the recipe's default) and its
    config, which the stage's own settings class checks."""

    class_: str | None = config_option(
        default=None, key="class", help="a registered stage name or module:Class"
    )
    config: Mapping[str, Any] | None = config_option(default=None, help="the stage's own settings")


@attrs.frozen
class PipelineSection(PluginSettings):
    """The two stages of a scenario's pipeline."""

    record2sample: StageSection = config_option(
        factory=StageSection, help="the record-to-sample stage"
    )
    sample2job: StageSection = config_option(factory=StageSection, help="the sample-to-job stage")


@attrs.frozen
class RecipeSection(PluginSettings):
    """The recipe of a scenario and its own config (``recipe: sft`` is short for
    ``recipe: {class: sft}``)."""

    class_: str = config_option(key="class", help="a registered recipe name or module:Class")
    config: Mapping[str, Any] | None = config_option(default=None, help="the recipe's own settings")


#: A trainer's name: it prefixes the ids of the samples its trainer makes in a scenario of
#: several components, and shows in the status.
_TRAINER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def _trainer_name(_: object, attribute: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None and not _TRAINER_NAME.fullmatch(value):
        raise ValueError(
            f"{attribute.name} {value!r} must start with a letter or digit and hold only"
            " letters, digits, '_', '.' and '-' (it prefixes the ids of its trainer's samples)"
        )


@attrs.frozen
class TrainingSection(PluginSettings):
    """One training component of a scenario and its options: one trainer, named by
    ``name`` (the component's name by default)."""

    component: str = config_option(help="a registered component name or module:Class")
    options: Mapping[str, Any] | None = config_option(
        default=None, help="the component's own settings"
    )
    name: str | None = config_option(
        default=None,
        help="the trainer's name, by default the component's; two entries of one component"
        " need one each",
        validator=_trainer_name,
    )
    serves: bool | None = config_option(
        default=None,
        help="the scenario's engine (local, vllm, sglang) serves this component's artifacts;"
        " by default the scenario's only component's",
    )

    @property
    def trainer(self) -> str:
        """The trainer's name: ``name``, else the component as the deployment names it."""
        return self.name or self.component


def _one_trainer_each(
    _: object, attribute: attrs.Attribute[Any], value: TrainingSection | tuple[Any, ...] | None
) -> None:
    """A list of training components names each trainer once and has one that serves at
    most."""
    del attribute
    if not isinstance(value, tuple):
        return
    if not value:
        raise ValueError(
            "an empty list trains nothing: give one entry per training component, or remove"
            " the training section"
        )
    first: dict[str, int] = {}
    for index, entry in enumerate(value):
        seen = first.setdefault(entry.trainer, index)
        if seen != index:
            raise ValueError(
                f"entries {seen} and {index} are both trainer {entry.trainer!r}: a scenario has"
                " one trainer per component; give each entry of the same component its own name"
            )
    serving = [entry.trainer for entry in value if entry.serves]
    if len(serving) > 1:
        raise ValueError(
            f"trainers {serving} all set serves: true; the engine serves one component's"
            " artifacts, so set it on one entry only"
        )


@attrs.frozen
class ScenarioSection(PluginSettings):
    """One scenario: what it records, how its records become jobs, and who trains them."""

    recipe: RecipeSection = config_option(help="the recipe: its name, or {class, config}")
    pipeline: PipelineSection = config_option(
        factory=PipelineSection, help="each stage's class (optional) and config"
    )
    training: TrainingSection | tuple[TrainingSection, ...] | None = config_option(
        default=None,
        help="the training component and its options, or a list of them (one trainer each)",
        validator=_one_trainer_each,
    )
    storage: StorageSection | None = config_option(
        default=None, help="this scenario's storage, instead of the deployment's"
    )
    serving: ServingSection | None = config_option(
        default=None, help="this scenario's engine, instead of the deployment's"
    )
    extensions: Mapping[str, Mapping[str, Any] | None] = config_option(
        factory=dict, help="each extension's config for this scenario, by extension name"
    )
    evals: Mapping[str, EvalSetSection] = config_option(
        factory=dict,
        help="evaluation sets, by name: every new artifact is scored on each (docs/evals.md)",
    )
    serve_if: ServeIfSection | None = config_option(
        default=None,
        help="the eval gate: {eval, not_worse_than, resume_from}; serve a new artifact only"
        " when it scores no worse than the served one by more than the margin",
    )

    def __attrs_post_init__(self) -> None:
        for problem in gate_problems(self.evals, self.serve_if):
            raise ValueError(problem)

    @property
    def trainings(self) -> tuple[TrainingSection, ...]:
        """The scenario's training components, one per trainer, in the file's order; none
        without a ``training`` section (the scenario records and admits, nothing trains)."""
        if self.training is None:
            return ()
        return (self.training,) if isinstance(self.training, TrainingSection) else self.training


@attrs.frozen
class Deployment(PluginSettings):
    """A whole deployment file."""

    scenarios: Mapping[str, ScenarioSection] = config_option(help="the scenarios, by name")
    storage: StorageSection = config_option(
        factory=lambda: StorageSection(url=DEFAULT_STORAGE_URL),
        help=f"where records and samples are kept; {DEFAULT_STORAGE_URL} when absent",
    )
    serving: ServingSection | None = config_option(
        default=None, help="the inference engine of every scenario that names none"
    )
    auth: AuthSection = config_option(factory=AuthSection, help="the service's tokens")
    generator: GeneratorSection | None = config_option(
        default=None, help="the generator service (staging, verifiers, hint plays) to start"
    )
    service: ServiceSection = config_option(
        factory=ServiceSection, help="the HTTP service's timeouts and connection cap"
    )
    trackers: Mapping[str, Mapping[str, Any] | None] = config_option(
        factory=dict,
        help="the experiment trackers every trainer logs its jobs to: each tracker's settings,"
        " by its name (tensorboard, mlflow, wandb, or a plugin's)",
    )

    def storage_of(self, scenario: str) -> StorageSection:
        """The storage of ``scenario``: its own, else the deployment's."""
        return self.scenarios[scenario].storage or self.storage

    def serving_of(self, scenario: str) -> ServingSection | None:
        """The engine of ``scenario``: its own, else the deployment's."""
        return self.scenarios[scenario].serving or self.serving

    def served_training(self, scenario: str) -> TrainingSection | None:
        """The training component of ``scenario`` whose artifacts its engine serves: the entry
        that sets ``serves: true``, else the scenario's only one unless it sets ``serves:
        false``; ``None`` when the engine takes no trained weights (a plain URL, no engine) or
        no entry serves.

        :raises ValueError: when the choice is not the file's to leave open: several
            components and an engine that takes weights, with none marked; or ``serves: true``
            with an engine that takes none.
        """
        entries = self.scenarios[scenario].trainings
        serving = self.serving_of(scenario)
        marked = [entry for entry in entries if entry.serves]
        if serving is None or serving.engine not in (LOCAL_ENGINE, *PUBLISHING_ENGINES):
            if marked:
                engine = "no engine" if serving is None else f"engine {serving.engine!r}"
                raise ValueError(
                    f"trainer {marked[0].trainer!r} sets serves: true, and the scenario has"
                    f" {engine}, which takes no trained weights: remove serves, or serve the"
                    f" scenario with engine {LOCAL_ENGINE}, vllm or sglang"
                )
            return None
        if marked:
            return marked[0]
        if len(entries) > 1:
            raise ValueError(
                f"engine {serving.engine} serves the artifacts of one training component, and"
                f" the scenario has {len(entries)} ({', '.join(e.trainer for e in entries)}):"
                " set serves: true on the one it serves"
            )
        if entries and entries[0].serves is None:
            return entries[0]
        return None


# --------------------------------------------------------------------------------------------
# loading
# --------------------------------------------------------------------------------------------


def _substitute(value: Any, environ: Mapping[str, str], path: str, problems: list[str]) -> Any:
    if isinstance(value, str):

        def replace(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in environ:
                problems.append(
                    f"environment variable {name} is not set: the file reads it as ${{{name}}};"
                    " set it in the environment reef runs in"
                    f" (e.g. {name}=... reef check FILE) @ {path}"
                )
                return match.group(0)
            return environ[name]

        return _ENV_REFERENCE.sub(replace, value)
    if isinstance(value, Mapping):
        return {k: _substitute(v, environ, f"{path}.{k}", problems) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, environ, f"{path}[{i}]", problems) for i, v in enumerate(value)]
    return value


def _expand_recipe_shorthand(document: Any) -> Any:
    """``recipe: sft`` reads as ``recipe: {class: sft}``."""
    if not isinstance(document, Mapping) or not isinstance(document.get("scenarios"), Mapping):
        return document
    scenarios = {
        name: (
            {**scenario, "recipe": {"class": scenario["recipe"]}}
            if isinstance(scenario, Mapping) and isinstance(scenario.get("recipe"), str)
            else scenario
        )
        for name, scenario in document["scenarios"].items()
    }
    return {**document, "scenarios": scenarios}


def deployment_document(
    text: str, *, origin: str, environ: Mapping[str, str], problems: list[str]
) -> Any:
    """The YAML document of a deployment's ``text``: ``${NAME}`` references replaced from
    ``environ`` and ``recipe: name`` read as ``recipe: {class: name}``. An unset variable is
    appended to ``problems`` (``<reason> @ <path>``); the document is not structured yet.

    :raises DeploymentError: when ``text`` is not valid YAML (``origin`` names it).
    """
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise DeploymentError(origin, (_yaml_problem(exc, origin),)) from exc
    return _expand_recipe_shorthand(_substitute(document, environ, "$", problems))


def auth_of(text: str, *, environ: Mapping[str, str]) -> AuthSection | None:
    """The ``auth`` section of a deployment's ``text``, read alone and cheaply (no plugin is
    needed): what ``reef serve`` decides first whether it may run at all. ``None`` when the
    text or the section does not read (reading the whole file then says why)."""
    try:
        document = deployment_document(text, origin="<deployment>", environ=environ, problems=[])
    except DeploymentError:
        return None
    if not isinstance(document, Mapping):
        return None
    return AuthSection.structure_at(document.get("auth"), "$.auth", [])


def _yaml_problem(error: yaml.YAMLError, origin: str) -> str:
    """What is wrong with the YAML and where, in ``origin`` (the file) rather than the
    ``<unicode string>`` PyYAML names by default."""
    if not isinstance(error, yaml.MarkedYAMLError) or error.problem_mark is None:
        return f"not valid YAML: {error}; fix the file's syntax"
    mark = error.problem_mark
    context = f"{error.context} " if error.context else ""
    return (
        f"not valid YAML at {origin} line {mark.line + 1}, column {mark.column + 1}:"
        f" {context}{error.problem}; fix the syntax there (indentation, a missing ':' or quote)"
    )
