"""The contract of a training component, and the values it exchanges with the trainer.

The trainer hands a component one job's data with the recipe's job parameters
(:meth:`TrainingComponent.submit`), polls until the job ends (:meth:`TrainingComponent.poll`),
commits the end, and then asks for the new weights as an artifact
(:meth:`TrainingComponent.publish`). A component renders the samples itself (P-REND-3), cuts
the job into optimizer steps by its own batch size (P-SIZE-6) and reports its metrics in the
job's :class:`reef.core.job_data.JobOutcome`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Protocol, runtime_checkable

import attrs

from reef.core.config import config_option
from reef.core.job_data import JobData, JobOutcome
from reef.core.plugins import PluginSettings

#: The values of :attr:`Scheduling.remainder`.
REMAINDERS: Final = ("train", "drop", "pad")


def _positive_or_none(_: object, attribute: attrs.Attribute[Any], value: int | None) -> None:
    if value is not None and value <= 0:
        raise ValueError(f"{attribute.name} must be a positive int, got {value!r}")


def _known_remainder(_: object, __: attrs.Attribute[Any], value: str) -> None:
    if value not in REMAINDERS:
        raise ValueError(f"remainder must be one of {', '.join(REMAINDERS)}, got {value!r}")


@attrs.frozen
class Scheduling(PluginSettings):
    """The job's optional scheduling parameter (P-SIZE-6).

    :ivar remainder: what a last step shorter than the batch size does: ``train`` it as a
        partial step; ``drop`` its samples (counted in the ``dropped_samples`` metric); ``pad``
        it with empty entries, so it trains with the weight of a full step's share (its loss
        is divided as if the step were full). A job of less than one batch always trains its
        one partial step.
    :ivar packing_length: when set, a step trains batch-size *packs* of at most this many
        tokens, each pack the next rendered sequences that fit, instead of batch-size samples.
    """

    remainder: str = config_option(
        "train", help="a shorter last step: train, drop or pad", validator=_known_remainder
    )
    packing_length: int | None = config_option(
        None, help="tokens per pack; steps then train batch-size packs",
        validator=_positive_or_none,
    )  # fmt: skip


@attrs.frozen
class JobHandle:
    """What :meth:`TrainingComponent.submit` returns: the job's id and its component."""

    job_id: str
    component: str


@attrs.frozen
class Artifact:
    """Published weights.

    :ivar artifact_id: a content hash of the weights (docs/decisions.md#artifacts): the same
        weights have
        the same id in every process and after a restart.
    :ivar path: where the weights are (a model folder).
    """

    artifact_id: str
    path: Path


class ArtifactSource(Protocol):
    """What an engine serves from: :class:`reef.components.local.artifacts.ArtifactStore` (the
    artifact published last), or the eval gate's choice among them
    (:class:`reef.evals.gate.GatedArtifacts`)."""

    def latest(self) -> Artifact | None:
        """The artifact to serve (``None`` before there is one)."""
        ...


@attrs.frozen
class PublicationState:
    """How publication into the engine goes, as a component that publishes into one says it
    (:class:`PublicationWatch`).

    :ivar failed_in_a_row: the publications since the engine last took one that it did not
        take (0: it serves the component's newest artifact).
    :ivar limit: how many the trainer lets fail in a row before it pauses.
    :ivar served: the artifact the engine serves now (``None`` before the first).
    """

    failed_in_a_row: int
    limit: int
    served: str | None

    @property
    def paused(self) -> str | None:
        """Why the trainer must not start another job (``None``: it may)."""
        if self.failed_in_a_row < self.limit:
            return None
        return (
            f"the engine did not take the last {self.failed_in_a_row} published artifacts (it"
            f" serves {self.served or 'its base model'}): training waits until it takes one,"
            " so that the data it trains is not ever further off-policy; see the engine's"
            " publication status"
        )


@runtime_checkable
class PublicationWatch(Protocol):
    """A component whose artifacts are published into an engine, which can fail
    (:class:`reef.runtime.PublishedComponent`)."""

    def publication(self) -> PublicationState:
        """Where publication stands now."""
        ...


class TrainingComponent(Protocol):
    """A training component, as the trainer drives it.

    Jobs run one at a time, in submission order; a job id that the component already ran
    is not trained again (:meth:`submit` returns its handle), so a trainer that resubmits after
    a restart trains nothing twice.
    """

    @property
    def name(self) -> str:
        """The component's name (the ``component`` of its job outcomes)."""
        ...

    def submit(self, data: JobData, parameters: Mapping[str, Any] | None = None) -> JobHandle:
        """Start training ``data`` with the recipe's job ``parameters``; return at once.

        :raises reef.core.plugins.PluginConfigError: when ``parameters`` are not ones this
            component takes (nothing starts).
        """
        ...

    def poll(self, handle: JobHandle) -> JobOutcome | None:
        """The job's outcome once it ended (``finished`` or ``failed``), else ``None``."""
        ...

    def wait(self, handle: JobHandle, timeout: float | None = None) -> JobOutcome:
        """Block until the job ends and return its outcome.

        :raises TimeoutError: when it did not end within ``timeout`` seconds.
        """
        ...

    def publish(self) -> Artifact:
        """Publish the current weights (those of the last job that finished) as an artifact."""
        ...

    def close(self) -> None:
        """Stop taking jobs and wait for the running one to end."""
        ...


class WrappedComponent:
    """A training component that hands every call to ``component`` but :meth:`publish`, which
    a subclass changes (the runtime's publication into an engine, the eval gate)."""

    def __init__(self, component: TrainingComponent) -> None:
        self.component = component

    @property
    def name(self) -> str:
        return self.component.name

    def submit(self, data: JobData, parameters: Mapping[str, Any] | None = None) -> JobHandle:
        return self.component.submit(data, parameters)

    def poll(self, handle: JobHandle) -> JobOutcome | None:
        return self.component.poll(handle)

    def wait(self, handle: JobHandle, timeout: float | None = None) -> JobOutcome:
        return self.component.wait(handle, timeout)

    def publish(self) -> Artifact:
        return self.component.publish()

    def close(self) -> None:
        self.component.close()
