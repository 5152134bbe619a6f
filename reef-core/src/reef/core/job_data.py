"""What a training job trains: samples, the job data that holds them, and how a job ended.

A *sample* is one of two kinds (P-STG-2):

- :class:`TrajectorySample`: an ATIF trajectory with its reward, feedback and metadata. It holds
  no tokens and no log probabilities; the training component renders it (P-REND-1).
- :class:`TaskSample`: a Harbor task that the training component rolls out on its own sampler.

:class:`JobData` is the data of one training job: the samples the sample-to-job stage shaped,
in store order, with the instruction that asked for it in manual mode. :class:`JobOutcome` is
what the trainer hands the record-to-sample stage when a job's end is durable (P-PIPE-12).

Every value here is frozen and has a stable JSON form, so that samples go into the sample store
as ``(kind, body)`` and job data goes to a component as one JSON document that
:func:`job_data_schema` describes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal, TypeAlias

import attrs

from reef.core.records import JSON
from reef.errors import ReefError

SampleKind: TypeAlias = Literal["trajectory", "task"]

#: Both kinds, in the order the JSON form names them.
SAMPLE_KINDS: Final[tuple[SampleKind, ...]] = ("trajectory", "task")


class SampleFormatError(ReefError, ValueError):
    """A stored or submitted sample body does not have the shape of its kind."""


def _finite_or_none(_: object, attribute: attrs.Attribute[Any], value: float | None) -> None:
    if value is not None and not math.isfinite(value):
        raise ValueError(f"{attribute.name} must be a finite number, got {value!r}")


def _reef_extra(holder: Mapping[str, Any]) -> Mapping[str, Any]:
    extra = holder.get("extra")
    reef = extra.get("reef") if isinstance(extra, Mapping) else None
    return reef if isinstance(reef, Mapping) else {}


@attrs.frozen(eq=True)
class TrajectorySample:
    """A sample that trains directly: an ATIF trajectory and the feedback that scores it.

    :ivar trajectory: the ATIF trajectory as its JSON object (``schema_version``, ``steps``,
        ...). Its ``extra.reef.records`` lists the recorded calls it was made from, each with
        its artifact, so the sample knows which artifact produced it.
    :ivar reward: the reward the objective trains on; ``None`` for a method that needs none
        (SFT), or when the reward lives in the trajectory's ``extra.reef.reward`` (uploads).
    :ivar feedback: free-text feedback of the report or judgment, if any.
    :ivar metadata: the stage's metadata (JSON).
    :ivar source_record_ids: the records the sample was made from (empty for an upload).
    :ivar report_id: the report that scored it, if any.
    :ivar sample_id: the sample's id in the sample store; set when the pipeline reads it back,
        ``None`` before it is stored. Not part of the stored body.
    :ivar group_id: the group the sample trains with (set by the pipeline from the store, or by
        a grouped recipe on each member of its job data). Not part of the stored body.
    """

    trajectory: JSON
    reward: float | None = attrs.field(default=None, validator=_finite_or_none)
    feedback: str | None = None
    metadata: JSON = attrs.field(factory=dict)
    source_record_ids: tuple[str, ...] = ()
    report_id: str | None = None
    sample_id: str | None = None
    group_id: str | None = None

    kind: SampleKind = attrs.field(default="trajectory", init=False)

    @property
    def artifact_id(self) -> str | None:
        """The artifact that answered the trajectory's last recorded call (P-STALE-4).

        Read from the last entry of the trajectory's ``extra.reef.records`` (each call's id and
        artifact, in order, as :func:`reef.core.atif_build.trajectory_from_records` writes them);
        ``None`` when it names none, which makes a sample made from records stale wherever a
        staleness check runs (P-STALE-8).
        """
        records = _reef_extra(self.trajectory).get("records")
        if not isinstance(records, list) or not records or not isinstance(records[-1], Mapping):
            return None
        artifact = records[-1].get("artifact_id")
        return artifact if isinstance(artifact, str) else None


@attrs.frozen(eq=True)
class TaskSample:
    """A sample that an algorithm rolls out: one Harbor task.

    :ivar name: the task's name (unique in its task store).
    :ivar task: the Harbor task as its JSON object.
    :ivar split: ``train`` or ``eval``; an eval task never enters a buffer (P-BUF-2).
    :ivar metadata: the stage's metadata (JSON).
    :ivar sample_id: as for :class:`TrajectorySample`.
    :ivar group_id: as for :class:`TrajectorySample`.
    """

    name: str
    task: JSON
    split: Literal["train", "eval"] = "train"
    metadata: JSON = attrs.field(factory=dict)
    sample_id: str | None = None
    group_id: str | None = None

    kind: SampleKind = attrs.field(default="task", init=False)


Sample: TypeAlias = TrajectorySample | TaskSample


def sample_reward(sample: Sample) -> float | None:
    """The reward ``sample`` trains with: a trajectory's ``reward``, else its trajectory's
    finite ``extra.reef.reward`` (an upload's); ``None`` for a trajectory with neither, and for
    a task (its rollouts are scored by its verifier)."""
    if not isinstance(sample, TrajectorySample):
        return None
    if sample.reward is not None:
        return sample.reward
    value = _reef_extra(sample.trajectory).get("reward")
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


# Fields that the sample store keeps in its own columns, never in a sample's body.
_STORE_FIELDS: Final = frozenset({"sample_id", "group_id", "kind"})


def sample_body(sample: Sample) -> JSON:
    """The JSON body the sample store keeps for ``sample`` (its kind is stored beside it)."""
    body = attrs.asdict(sample, recurse=False, filter=lambda a, _: a.name not in _STORE_FIELDS)
    if isinstance(sample, TrajectorySample):
        body["source_record_ids"] = list(sample.source_record_ids)
    return body


def sample_from_body(
    kind: str, body: Mapping[str, Any], *, sample_id: str | None = None, group_id: str | None = None
) -> Sample:
    """Read a sample back from its stored kind and body.

    :raises SampleFormatError: naming the sample and what is wrong.
    """
    cls: type[TrajectorySample] | type[TaskSample]
    if kind == "trajectory":
        cls = TrajectorySample
    elif kind == "task":
        cls = TaskSample
    else:
        raise SampleFormatError(f"sample {sample_id!r}: unknown kind {kind!r}")
    values = dict(body)
    if "source_record_ids" in values:
        values["source_record_ids"] = tuple(values["source_record_ids"])
    try:
        return cls(**values, sample_id=sample_id, group_id=group_id)
    except (TypeError, ValueError) as exc:
        raise SampleFormatError(f"sample {sample_id!r}: {exc}") from exc


@attrs.frozen(eq=True)
class TrainingInstruction:
    """A client's TRAIN instruction for a scenario in manual mode (P-MODE-5).

    Instructions are not records: the scenario queues them in the pipeline, which runs the
    oldest first, one per step, and attaches it to the job data as :attr:`JobData.request`.

    :ivar request_id: the client's request id; the job data's id is
        ``<scenario>:instruction:<request_id>``.
    :ivar text: what the client asked for, for stages that read it (harness evolution).
    :ivar parameters: the client's parameters (JSON).
    """

    request_id: str
    text: str | None = None
    parameters: JSON = attrs.field(factory=dict)


@attrs.frozen(eq=True)
class JobData:
    """The data of one training job (P-STG-3).

    :ivar id: ``<scenario>:data:<number>`` in auto, ``<scenario>:instruction:<request id>`` for
        an instruction.
    :ivar samples: the job's samples, all of one kind, in store order. A grouped recipe sets
        ``group_id`` on each member.
    :ivar request: the instruction the data answers, in manual mode.
    :ivar metadata: the sample-to-job stage's metadata for the component (JSON).
    :ivar given_back: ids of reserved samples that this submission gives back to the buffer
        untrained, for a later job (a plugin sets it in ``reef_before_submit``: Agent ECC gives
        back the groups its seal left undecided). Every other reserved sample is consumed by
        the commit, submitted or not (P-REP-6). Whole groups only; never a submitted sample.
        Not part of the document the component receives.
    """

    id: str
    samples: tuple[Sample, ...] = attrs.field()
    request: TrainingInstruction | None = None
    metadata: JSON = attrs.field(factory=dict)
    given_back: tuple[str, ...] = attrs.field(default=())

    @samples.validator
    def _one_kind(self, _: attrs.Attribute[Any], samples: tuple[Sample, ...]) -> None:
        kinds = {sample.kind for sample in samples}
        if len(kinds) > 1:
            raise ValueError(f"job data {self.id!r} mixes sample kinds {sorted(kinds)}")

    @given_back.validator
    def _not_submitted(self, _: attrs.Attribute[Any], given_back: tuple[str, ...]) -> None:
        # A sample either trains in this job or waits for a later one, never both.
        submitted = {sample.sample_id for sample in self.samples}
        both = sorted(sample_id for sample_id in given_back if sample_id in submitted)
        if both:
            raise ValueError(f"job data {self.id!r} both submits and gives back {both}")

    @property
    def kind(self) -> SampleKind | None:
        """The kind of the job's samples; ``None`` for job data without samples."""
        return self.samples[0].kind if self.samples else None

    @property
    def group_ids(self) -> tuple[str | None, ...]:
        """The group of each sample, in sample order (``None``: the sample trains alone)."""
        return tuple(sample.group_id for sample in self.samples)


JobEvent: TypeAlias = Literal["finished", "failed"]


@attrs.frozen(eq=True)
class JobOutcome:
    """How a training job ended, once the commit of its end is durable (P-PIPE-12).

    :ivar job_id: the job's id.
    :ivar component: the training component that ran it.
    :ivar event: ``finished`` or ``failed``.
    :ivar metrics: the job's metrics as the component reported them (JSON).
    :ivar error: why the job failed; set exactly when ``event`` is ``failed``.
    """

    job_id: str
    component: str
    event: JobEvent
    metrics: JSON = attrs.field(factory=dict)
    error: str | None = None

    def __attrs_post_init__(self) -> None:
        if self.event not in ("finished", "failed"):
            raise ValueError(f"job {self.job_id!r}: unknown event {self.event!r}")
        if (self.event == "failed") != (self.error is not None):
            raise ValueError(
                f"job {self.job_id!r}: error must be set exactly when the job failed"
                f" (event {self.event!r}, error {self.error!r})"
            )


def job_data_to_json(data: JobData) -> JSON:
    """The JSON document a training component receives for ``data`` (see
    :func:`job_data_schema`)."""
    return {
        "id": data.id,
        "kind": data.kind,
        "samples": [
            {
                "kind": sample.kind,
                "sample_id": sample.sample_id,
                "group_id": sample.group_id,
                "body": sample_body(sample),
            }
            for sample in data.samples
        ],
        "request": None if data.request is None else attrs.asdict(data.request),
        "metadata": data.metadata,
    }


_TRAJECTORY_BODY: Final[JSON] = {
    "type": "object",
    "required": ["trajectory"],
    "properties": {
        "trajectory": {"type": "object", "required": ["steps"]},
        "reward": {"type": ["number", "null"]},
        "feedback": {"type": ["string", "null"]},
        "metadata": {"type": "object"},
        "source_record_ids": {"type": "array", "items": {"type": "string"}},
        "report_id": {"type": ["string", "null"]},
    },
}

_TASK_BODY: Final[JSON] = {
    "type": "object",
    "required": ["name", "task"],
    "properties": {
        "name": {"type": "string"},
        "task": {"type": "object"},
        "split": {"enum": ["train", "eval"]},
        "metadata": {"type": "object"},
    },
}


def job_data_schema(kinds: Sequence[SampleKind] = SAMPLE_KINDS) -> JSON:
    """The JSON Schema of :func:`job_data_to_json` for job data of the sample ``kinds``.

    A sample-to-job stage's ``output_schema`` is this schema unless the stage adds its own
    constraints; the trainer validates each job's data against it before it submits the job.
    """
    bodies = {"trajectory": _TRAJECTORY_BODY, "task": _TASK_BODY}
    sample_schemas = [
        {
            "type": "object",
            "required": ["kind", "sample_id", "body"],
            "properties": {
                "kind": {"const": kind},
                "sample_id": {"type": "string"},
                "group_id": {"type": ["string", "null"]},
                "body": bodies[kind],
            },
        }
        for kind in kinds
    ]
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "Reef job data",
        "type": "object",
        "required": ["id", "samples"],
        "properties": {
            "id": {"type": "string"},
            "kind": {"enum": [*kinds, None]},
            "samples": {"type": "array", "items": {"oneOf": sample_schemas}},
            "request": {
                "oneOf": [
                    {"type": "null"},
                    {
                        "type": "object",
                        "required": ["request_id"],
                        "properties": {
                            "request_id": {"type": "string"},
                            "text": {"type": ["string", "null"]},
                            "parameters": {"type": "object"},
                        },
                    },
                ]
            },
            "metadata": {"type": "object"},
        },
    }
