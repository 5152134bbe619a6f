"""Publication: the trainer's newest artifact put into a vLLM or SGLang server, and the
scenario's calls routed to it.

A :class:`Publisher` follows a scenario's artifact store (the ``LATEST`` its trainer writes, in
this process or another) on its own thread. When a new artifact appears it loads it into the
engine through the engine's documented endpoints (:class:`EngineAdmin`); once the engine took
it, the scenario's calls go to it (:meth:`Publisher.route`). A publication that fails (the
engine is down, it refuses the adapter) is tried again with a growing pause and shows in
:meth:`Publisher.status`; until it succeeds the calls go, and are labelled, as before.

How each engine takes weights is its admin's business (:mod:`reef.engines.vllm`,
:mod:`reef.engines.sglang`; the contract is :class:`reef.engines.admin.EngineAdmin`).

An adapter's name is ``reef-<scenario>-<first 16 hex digits of the artifact id>``: the same
weights get the same name in every process, so two processes that publish the same artifact
load one adapter (an engine's "already loaded" answer is a success). Adapters older than the
``keep`` newest (``max_staleness`` + 1: no trainer trains their data any more) are unloaded.

What an earlier process loaded: on its first look a publisher takes the scenario's own adapters
the engine lists (:meth:`reef.engines.admin.EngineAdmin.adapters`) as loaded, oldest first, so
that those beyond ``keep`` are unloaded after a restart too; adapters of other scenarios and
adapters Reef did not name are left alone.

Every answer is labelled with the artifact Reef routed it to only when the engine's answer
agrees (:meth:`Publisher.answered`); otherwise the record says ``null`` and the reason is
counted in the status (``unlabelled_answers``).

Every ``reef serve`` process of a deployment runs its own publisher per scenario, and each
routes its own calls. So that any process's ``GET /reef/status`` says what every process
serves, each publisher writes its status to the scenario's settings under
``publisher_status:<process>`` (:meth:`Publisher.report`) when it changes and every
:data:`STATUS_INTERVAL` seconds, and forgets it when it stops.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import attrs
import httpx

from reef.components.interface import Artifact, ArtifactSource
from reef.core.records import JSON
from reef.engines.admin import EngineAdmin, PublicationError
from reef.storage import ScenarioSettings

__all__ = [
    "PUBLISHER_STATUS_PREFIX",
    "STATUS_INTERVAL",
    "ArtifactSource",
    "EngineRoute",
    "Publisher",
    "adapter_name",
    "publisher_statuses",
]

logger = logging.getLogger(__name__)

#: The longest pause between two tries of a failed publication, in seconds.
MAX_BACKOFF: Final = 30.0
#: The first pause after a failed publication, in seconds (doubled at each failure).
FIRST_BACKOFF: Final = 0.5
#: The scenario setting prefix under which each process's publisher writes its status.
PUBLISHER_STATUS_PREFIX: Final = "publisher_status:"
#: Seconds between two writes of a publisher's status that did not change; a process silent
#: for three times as long counts as gone.
STATUS_INTERVAL: Final = 10.0


def _backoff(failures: int) -> float:
    """The pause, in seconds, after the ``failures``-th failure in a row."""
    return min(FIRST_BACKOFF * 2.0 ** (failures - 1), MAX_BACKOFF)


def adapter_name(scenario: str, artifact_id: str) -> str:
    """The engine's name for the adapter ``artifact_id`` of ``scenario``."""
    return f"reef-{scenario}-{artifact_id.partition(':')[2][:16]}"


def _is_adapter_of(scenario: str, name: str) -> bool:
    """Whether ``name`` is an :func:`adapter_name` of ``scenario`` (not of a scenario whose name
    merely starts the same)."""
    return re.fullmatch(f"reef-{re.escape(scenario)}-[0-9a-f]{{16}}", name) is not None


@attrs.frozen
class EngineRoute:
    """Where a call goes: the artifact that serves the scenario and the request's ``model``
    that reaches it; ``switch`` is the publisher's count of weight swaps when the route was
    taken (odd while a full-weight swap runs)."""

    artifact_id: str
    model: str
    switch: int


class Publisher:
    """One scenario's publication into its engine (see the module documentation).

    :param scenario: the scenario's name.
    :param admin: how the engine takes weights.
    :param base_model: the base model's name as the engine serves it (calls go to it before
        the first publication).
    :param url: the engine's address (``http://host:port``).
    :param source: the artifact store the trainer publishes to.
    :param engine_path: the artifacts' folder as the engine sees it (``None``: the store's own).
    :param api_key: sent as a bearer token to the weight-loading endpoints.
    :param keep: how many of the newest adapters stay loaded (``max_staleness`` + 1).
    :param poll_interval: seconds between two looks at the store.
    :param timeout: seconds one engine call may take.
    :param process: this process's name in the status (the runtime's, which its trainers
        hold their leases by).
    :param settings: the scenario's settings, where :meth:`report` writes the status (``None``:
        it is not written).
    """

    def __init__(
        self,
        scenario: str,
        admin: EngineAdmin,
        base_model: str,
        *,
        url: str,
        source: ArtifactSource,
        engine_path: str | None = None,
        api_key: str | None = None,
        keep: int = 1,
        poll_interval: float = 0.2,
        timeout: float = 600.0,
        process: str | None = None,
        settings: ScenarioSettings | None = None,
    ) -> None:
        if keep < 1:
            raise ValueError(f"keep must be at least 1, got {keep}")
        self.scenario = scenario
        self.admin = admin
        self.base_model = base_model
        self.url = url
        self._source = source
        self._engine_path = engine_path
        self._keep = keep
        self._poll_interval = poll_interval
        self.process = process
        self._settings = settings
        self._reported: JSON | None = None  # the status written last, but its countdown
        self._reported_at = 0.0
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(base_url=url, headers=headers, timeout=timeout)
        self._changed = threading.Condition()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # What serves, under ``_changed``.
        self._served: Artifact | None = None
        self._route: EngineRoute | None = None
        self._switch = 0
        self._loaded: list[str] = []  # adapter names, oldest first
        self._published: set[str] = set()
        self._unload_failed: list[str] = []
        self._adopted = False  # the engine's adapters of this scenario are in ``_loaded``
        self._adopt_failures = 0
        self._adopt_at = 0.0  # monotonic time of the next try after a failure
        # Failures and counts, for the status.
        self._attempts = 0
        self._retry_at: float | None = None
        self._failed_artifact: str | None = None
        self._last_error: JSON | None = None
        self._publications = 0
        self._failures = 0
        self._last_publication: JSON | None = None
        self._unlabelled: dict[str, int] = {}
        self._lost = 0
        #: Told the seconds of each publication that succeeded (the service's metrics).
        self.on_published: Callable[[float], None] | None = None

    # -- the thread ------------------------------------------------------------------------

    def start(self) -> None:
        """Start following the store (publishing what it finds there)."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name=f"reef-publish-{self.scenario}", daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        """Stop following the store and close the connections; what is loaded stays loaded.
        This process's status leaves the scenario's settings."""
        self._stop.set()
        self._wake.set()
        with self._changed:
            self._changed.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._client.close()
        if self._settings is not None and self._reported is not None:
            try:
                self._settings.delete(self._status_key())
            except Exception:  # the store is gone: the entry shows as gone instead
                logger.exception("scenario %r: publication status not removed", self.scenario)
            self._reported = None

    def wake(self) -> None:
        """Look at the store now (a trainer of this process published)."""
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.step()
            except Exception:  # never ends the thread: the next look tries again
                logger.exception("scenario %r: publication step failed", self.scenario)
            try:
                self.report()
            except Exception:  # the store is away: written again at the next change or interval
                logger.exception("scenario %r: publication status not written", self.scenario)
                self._reported_at = time.monotonic()
            self._wake.wait(self._poll_interval)
            self._wake.clear()

    def _status_key(self) -> str:
        return f"{PUBLISHER_STATUS_PREFIX}{self.process}"

    def report(self) -> None:
        """Write this process's status to the scenario's settings when it changed, or
        :data:`STATUS_INTERVAL` seconds after the last write; the first write also forgets the
        statuses of processes gone silent (three intervals without a write)."""
        if self._settings is None:
            return
        status = self.status()
        steady = {key: value for key, value in status.items() if key != "retry_in_seconds"}
        now = time.monotonic()
        if steady == self._reported and now - self._reported_at < STATUS_INTERVAL:
            return
        if self._reported is None:
            for key, value in self._settings.items().items():
                if key.startswith(PUBLISHER_STATUS_PREFIX) and _gone(_silent_for(value)):
                    self._settings.delete(key)
        self._settings.set(self._status_key(), {**status, "updated_at": time.time()})
        self._reported, self._reported_at = steady, now

    def step(self) -> None:
        """One look at the store: publish its newest artifact when it is new (and no pause after
        a failure is running), then unload what is past ``keep``. The first look that reaches the
        engine also takes the scenario's adapters it holds as loaded (an earlier process loaded
        them)."""
        if not self._adopted and time.monotonic() >= self._adopt_at:
            self._adopt()
        latest = self._source.latest()
        served = None if self._served is None else self._served.artifact_id
        if latest is not None and latest.artifact_id != served:
            retry_at = self._retry_at
            if (
                latest.artifact_id != self._failed_artifact
                or retry_at is None
                or (time.monotonic() >= retry_at)
            ):
                self._publish(latest)
        self._unload_old()

    # -- publishing ------------------------------------------------------------------------

    def _engine_folder(self, artifact: Artifact) -> str:
        if self._engine_path is None:
            return str(artifact.path)
        return str(Path(self._engine_path) / artifact.path.name)

    def _publish(self, artifact: Artifact) -> None:
        name = adapter_name(self.scenario, artifact.artifact_id)
        full = self.admin.weights == "full"
        started = time.monotonic()
        if full:
            with self._changed:
                self._switch += 1  # odd: a swap runs; streamed answers cannot be labelled
                # The engine may answer with these weights before its reply to the load
                # arrives: from now on their version is one Reef gave it.
                self._published.add(artifact.artifact_id)
        try:
            self.admin.load(self._client, name, self._engine_folder(artifact), artifact.artifact_id)
        except PublicationError as exc:
            with self._changed:
                if full:
                    self._switch += 1
                self._note_failure(artifact.artifact_id, exc)
                self._changed.notify_all()
            return
        seconds = time.monotonic() - started
        with self._changed:
            if full:
                self._switch += 1
            self._served = artifact
            self._route = EngineRoute(artifact.artifact_id, self.admin.model(name), self._switch)
            if not full:
                if name in self._loaded:
                    self._loaded.remove(name)
                self._loaded.append(name)
            self._publications += 1
            self._attempts = 0
            self._retry_at = None
            self._failed_artifact = None
            self._last_publication = {
                "artifact_id": artifact.artifact_id,
                "at": time.time(),
                "seconds": seconds,
            }
            self._changed.notify_all()
        if self.on_published is not None:
            self.on_published(seconds)
        logger.info(
            "scenario %s: %s serves %s (%.3f s)",
            self.scenario,
            self.admin.kind,
            artifact.artifact_id,
            seconds,
        )

    def _note_failure(self, artifact_id: str, exc: PublicationError) -> None:
        if artifact_id != self._failed_artifact:
            self._attempts = 0
        self._attempts += 1
        self._failures += 1
        self._failed_artifact = artifact_id
        pause = _backoff(self._attempts)
        self._retry_at = time.monotonic() + pause
        self._last_error = {"at": time.time(), "artifact_id": artifact_id, "error": str(exc)}
        logger.warning(
            "scenario %s: publication of %s failed (attempt %d, next in %.1f s): %s",
            self.scenario,
            artifact_id,
            self._attempts,
            pause,
            exc,
        )

    def _adopt(self) -> None:
        try:
            listed = self.admin.adapters(self._client)
        except PublicationError as exc:
            self._adopt_failures += 1
            pause = _backoff(self._adopt_failures)
            self._adopt_at = time.monotonic() + pause
            logger.warning(
                "scenario %s: the engine's adapters are unknown (asked again in %.1f s): %s",
                self.scenario,
                pause,
                exc,
            )
            with self._changed:
                self._last_error = {"at": time.time(), "error": str(exc)}
            return
        found = [name for name in listed if _is_adapter_of(self.scenario, name)]
        with self._changed:
            self._loaded = [name for name in found if name not in self._loaded] + self._loaded
            self._adopted = True
        if found:
            logger.info(
                "scenario %s: %s holds %d of its adapters: %s",
                self.scenario,
                self.admin.kind,
                len(found),
                ", ".join(found),
            )

    def _unload_old(self) -> None:
        with self._changed:
            excess = max(0, len(self._loaded) - self._keep)
            old = self._unload_failed + self._loaded[:excess]
            self._loaded = self._loaded[excess:]
            self._unload_failed = []
        for name in old:
            try:
                self.admin.unload(self._client, name)
            except PublicationError as exc:
                logger.warning("scenario %s: %s", self.scenario, exc)
                with self._changed:
                    self._unload_failed.append(name)
                    self._last_error = {"at": time.time(), "error": str(exc)}

    # -- an artifact under evaluation ------------------------------------------------------

    def load_hidden(self, artifact: Artifact) -> str:
        """Load ``artifact`` as an adapter beside what serves, without routing any call to it
        (an evaluation reaches it by the name returned: the request's ``model``).

        :raises PublicationError: when the engine does not take it, or takes full weights only
            (loading them would serve them).
        """
        if self.admin.weights != "adapter":
            raise PublicationError(
                f"{self.admin.kind} takes full weights: an artifact cannot be loaded for an"
                " evaluation without serving it"
            )
        name = adapter_name(self.scenario, artifact.artifact_id)
        self.admin.load(self._client, name, self._engine_folder(artifact), artifact.artifact_id)
        return self.admin.model(name)

    def unload_hidden(self, artifact: Artifact) -> None:
        """Let an artifact that :meth:`load_hidden` loaded go, unless it serves now.

        :raises PublicationError: when the engine refuses.
        """
        name = adapter_name(self.scenario, artifact.artifact_id)
        with self._changed:
            if name in self._loaded:
                return
        self.admin.unload(self._client, name)

    # -- what the trainer and the service ask --------------------------------------------------

    def serve(self, artifact: Artifact, timeout: float) -> Artifact | None:
        """Wait up to ``timeout`` seconds for the engine to serve ``artifact`` (the trainer
        just published it); the artifact that serves then (``None`` before any)."""
        self.wake()
        deadline = time.monotonic() + timeout
        with self._changed:
            while not self._stop.is_set() and (
                self._served is None or self._served.artifact_id != artifact.artifact_id
            ):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(left)
            return self._served

    def route(self) -> EngineRoute | None:
        """Where a call goes now; ``None`` before the first publication (to
        :attr:`base_model`)."""
        with self._changed:
            return None if self._route is None else attrs.evolve(self._route, switch=self._switch)

    def answered(self, route: EngineRoute | None, body: JSON) -> str | None:
        """The artifact that answered a call sent by ``route``, as far as the engine's answer
        ``body`` confirms it; ``None`` (and the reason counted) otherwise."""
        answered, reason = self._confirmed(route, body)
        if reason is not None:
            with self._changed:
                self._unlabelled[reason] = self._unlabelled.get(reason, 0) + 1
        if reason == "unknown_weight_version" and route is not None and route.switch % 2 == 0:
            # Answered with weights Reef never published, no swap running: the engine
            # restarted on its own weights.
            self.lost(route)
        return answered

    def call_failed(self, route: EngineRoute, status: int, body: JSON | None) -> None:
        """The engine refused a call sent by ``route``; when its answer says it does not hold
        what the route names (:meth:`EngineAdmin.lost`), it restarted without it: see
        :meth:`lost`."""
        if self.admin.lost(status, body):
            self.lost(route)

    def lost(self, route: EngineRoute) -> None:
        """The engine no longer has what ``route`` names (it restarted): calls go to the base
        model until the artifact is published again, which starts now."""
        with self._changed:
            if self._route is None or self._route.artifact_id != route.artifact_id:
                return  # already published again, or something newer serves
            logger.warning(
                "scenario %s: %s lost %s; publishing it again",
                self.scenario,
                self.admin.kind,
                route.artifact_id,
            )
            self._served = None
            self._route = None
            name = adapter_name(self.scenario, route.artifact_id)
            if name in self._loaded:
                self._loaded.remove(name)
            self._lost += 1
        self.wake()

    def _confirmed(self, route: EngineRoute | None, body: JSON) -> tuple[str | None, str | None]:
        """The artifact the answer confirms, or ``None`` and why not."""
        if self.admin.weights == "adapter":
            if route is None:
                return None, "base_model_answered"
            if body.get("model") == route.model:
                return route.artifact_id, None
            return None, "model_differs"
        metadata = body.get("metadata")
        version = metadata.get("weight_version") if isinstance(metadata, dict) else None
        with self._changed:
            if isinstance(version, str) and version in self._published:
                return version, None  # the answer names weights Reef gave the engine
            if route is None:
                return None, "base_model_answered"
            if isinstance(version, str):
                return None, "unknown_weight_version"
            steady = route.switch % 2 == 0 and route.switch == self._switch
        return (route.artifact_id, None) if steady else (None, "weights_swapped")

    def status(self) -> JSON:
        """What the engine serves and how publication goes (``GET /reef/status``)."""
        latest = self._source.latest()
        with self._changed:
            served = None if self._served is None else self._served.artifact_id
            pending = None if latest is None or latest.artifact_id == served else latest.artifact_id
            retry_in = None if self._retry_at is None else self._retry_at - time.monotonic()
            return {
                "process": self.process,
                "engine": self.admin.kind,
                "url": self.url,
                "weights": self.admin.weights,
                "served_artifact": served,
                "served_model": None if self._route is None else self._route.model,
                "loaded_adapters": list(self._loaded),
                "pending_artifact": pending,
                "attempts": self._attempts,
                "retry_in_seconds": None if pending is None else retry_in,
                "publications": self._publications,
                "failures": self._failures,
                "lost": self._lost,
                "last_publication": self._last_publication,
                "last_error": self._last_error,
                "unlabelled_answers": dict(self._unlabelled),
            }


def _silent_for(status: Any) -> float:
    """Seconds since a written publisher status was written (infinite when it says no time)."""
    updated = status.get("updated_at") if isinstance(status, dict) else None
    if not isinstance(updated, int | float) or isinstance(updated, bool):
        return float("inf")
    return max(0.0, time.time() - updated)


def _gone(silent: float) -> bool:
    """Whether a process whose status was written ``silent`` seconds ago is gone."""
    return silent > 3 * STATUS_INTERVAL


def publisher_statuses(settings: dict[str, Any]) -> list[JSON]:
    """Every process's publication status among a scenario's ``settings`` (as
    :meth:`ScenarioSettings.items` gives them), by process name, each with ``silent_seconds``
    (since it was written) and ``gone`` (silent for more than three :data:`STATUS_INTERVAL`:
    the process ended without a clean stop)."""
    statuses = []
    for key, value in sorted(settings.items()):
        if not key.startswith(PUBLISHER_STATUS_PREFIX) or not isinstance(value, dict):
            continue
        silent = _silent_for(value)
        statuses.append(
            {
                **value,
                "process": key.removeprefix(PUBLISHER_STATUS_PREFIX),
                "silent_seconds": None if silent == float("inf") else round(silent, 1),
                "gone": _gone(silent),
            }
        )
    return statuses
