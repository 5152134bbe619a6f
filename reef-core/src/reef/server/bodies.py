"""The request and response bodies of the HTTP API, as frozen attrs values, and how the
service reads and writes them.

Every body the service reads is structured with cattrs into one of these classes
(:func:`~reef.server.request_json.read_json` then :func:`structure`: size-limited and bounded,
unknown keys refused, JSON types strict, each problem with its JSON path), and every body it
writes is unstructured from one (:func:`answer`, :func:`error_answer`), so the OpenAPI
document (:mod:`reef.server.openapi`) is generated from the very types the routes use.

Why this module is long: it is the catalogue of the API's bodies, one short frozen class each,
with the one structuring and answering convention they all go through; finding every body in
one place is the point.
"""

from __future__ import annotations

import math
import re
import typing
from collections.abc import Mapping
from typing import Any, Final, Literal, TypeVar

import attrs
import cattrs
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from reef.core.converters import describe, split_described, strict_converter
from reef.pipeline_context import TrainingMode
from reef.server.errors import ApiError, ErrorBody, ErrorDetail
from reef.server.names import valid_name
from reef.storage.browse import ArtifactReward
from reef.storage.evaluations import EvaluatedArtifact
from reef.storage.labels import SampleLabel

JSONObject = dict[str, Any]

_T = TypeVar("_T")


# -- inference ---------------------------------------------------------------------------------


@attrs.frozen
class ChatCompletionRequest:
    """The part of an OpenAI chat-completions request that Reef checks before forwarding.

    Other keys (sampling parameters, ``response_format``, ...) are forwarded as they are.
    """

    messages: tuple[JSONObject, ...] = attrs.field(validator=attrs.validators.min_len(1))
    model: str | None = None
    stream: bool = False
    tools: tuple[JSONObject, ...] | None = None


@attrs.frozen
class ResponsesRequest:
    """The part of an OpenAI Responses request that Reef checks before answering it.

    ``input`` is text or a list of items (checked as it is translated); other keys are
    forwarded or translated (``docs/api-formats.md``).
    """

    input: Any
    model: str | None = None
    stream: bool = False
    store: bool | None = None
    previous_response_id: str | None = None
    instructions: str | None = None
    tools: tuple[JSONObject, ...] | None = None


@attrs.frozen
class MessagesRequest:
    """The part of an Anthropic Messages request that Reef checks before answering it."""

    model: str
    max_tokens: int = attrs.field(validator=attrs.validators.ge(1))
    messages: tuple[JSONObject, ...] = attrs.field(validator=attrs.validators.min_len(1))
    stream: bool = False
    tools: tuple[JSONObject, ...] | None = None


@attrs.frozen
class ModelEntry:
    """A model a scenario serves, in OpenAI's shape (``GET /v1/models``).

    :ivar id: the name to call it by: the model the scenario's serving section names, else the
        scenario's own name (Reef routes every call of a scenario to what it serves, whatever
        model the call names).
    :ivar scenario: the scenario that serves it.
    """

    id: str
    scenario: str
    object: Literal["model"] = "model"
    created: int = 0
    owned_by: str = "reef"


@attrs.frozen
class ModelList:
    """``GET /v1/models``: the models of the scenarios the caller may call."""

    data: tuple[ModelEntry, ...]
    object: Literal["list"] = "list"


# -- reports -----------------------------------------------------------------------------------


@attrs.frozen
class ReportBody:
    """A report as a client posts it (the scenario is the route's).

    :ivar id: the client's report id, a name (:mod:`reef.server.names`); a retry with the same
        id and content is the same report.
    :ivar references: the inference record ids of the last call of each scored trajectory.
    :ivar score: the reward; absent for feedback without a score.
    :ivar feedback: free-text feedback.
    :ivar metadata: the client's metadata (``metadata.training.eligible`` is refused).
    """

    id: str = attrs.field(validator=valid_name)
    references: tuple[str, ...]
    score: float | None = None
    feedback: str | None = None
    metadata: JSONObject = attrs.field(factory=dict)


@attrs.frozen
class ReportReceipt:
    """Proof that a report was admitted; a retry of the same report gets the same receipt.

    :ivar id: the report's id.
    :ivar scenario: its scenario.
    :ivar references: the references it was admitted with.
    :ivar content_hash: the hash of its content (what a retry must match).
    """

    id: str
    scenario: str
    references: tuple[str, ...]
    content_hash: str


# -- data items --------------------------------------------------------------------------------


@attrs.frozen
class ItemUpload:
    """An ATIF trajectory uploaded as a data item.

    :ivar trajectory: the ATIF v1.8 trajectory (JSON object).
    :ivar id: the item's id, a name; by default the trajectory's ``trajectory_id``, else its
        ``session_id`` (which must then be a name).
    """

    trajectory: JSONObject
    id: str | None = attrs.field(default=None, validator=valid_name)


@attrs.frozen
class ItemReceipt:
    """A stored data item and the scenarios it is attached to."""

    id: str
    scenarios: tuple[str, ...] = ()


@attrs.frozen
class ItemDocument:
    """A data item as stored: its trajectory and where it is attached."""

    id: str
    trajectory: JSONObject
    scenarios: tuple[str, ...] = ()


# -- training control --------------------------------------------------------------------------


@attrs.frozen
class ScenarioUpdate:
    """``POST /reef/scenarios/{scenario}/update``: select the training mode."""

    training_mode: str


@attrs.frozen
class ScenarioUpdated:
    """The scenario's stored training mode after an update."""

    scenario: str
    training_mode: TrainingMode


@attrs.frozen
class InstructionBody:
    """A TRAIN instruction for manual mode.

    :ivar request_id: the client's id, a name; the job data's id is
        ``<scenario>:instruction:<id>``.
    :ivar action: only ``TRAIN``.
    :ivar text: what the client asks for, for stages that read it.
    :ivar parameters: the client's parameters.
    """

    request_id: str = attrs.field(validator=valid_name)
    action: Literal["TRAIN"] = "TRAIN"
    text: str | None = None
    parameters: JSONObject = attrs.field(factory=dict)


@attrs.frozen
class InstructionReceipt:
    """A queued instruction; ``queued`` is False when the same one was queued before."""

    scenario: str
    request_id: str
    queued: bool


@attrs.frozen
class BufferEdit:
    """Samples to put into or take out of the manual buffer.

    :ivar sample_ids: the samples, by id.
    :ivar trainer: the trainer whose buffer changes; every trainer of the scenario when absent.
    """

    sample_ids: tuple[str, ...] = attrs.field(validator=attrs.validators.min_len(1))
    trainer: str | None = attrs.field(default=None, validator=valid_name)


@attrs.frozen
class ManualBuffers:
    """The manual buffer of each trainer of a scenario: sample ids in store order."""

    scenario: str
    buffers: Mapping[str, tuple[str, ...]]


# -- status ------------------------------------------------------------------------------------


@attrs.frozen
class TrainerStatus:
    """One trainer of a scenario, as ``GET /reef/status`` shows it.

    Values the trainer alone knows come from its durable status snapshot (``docs/service.md``)
    and are ``None`` until its first snapshot.
    """

    trainer: str
    accepts_trajectories: bool
    supported_training_modes: tuple[str, ...]
    job_samples: int | None
    buffer_size: int | None
    ready_samples: int | None
    pending_instructions: int
    manual_buffer: int
    background_jobs_running: bool | None
    running_job: JSONObject | None
    served_artifact: str | None
    drops: Mapping[str, int]
    last_errors: tuple[JSONObject, ...]
    snapshot_at: float | None
    pipeline: JSONObject
    #: The process whose trainer wrote the snapshot (``host:pid:random``): the lease holder.
    holder: str | None = None
    #: Jobs that ended in the holder's tenure.
    jobs_ended: int | None = None
    #: Sums over those jobs of the metrics a person watches (``retokenized_samples``, ...).
    job_counts: JSONObject = attrs.field(factory=dict)
    #: Why the trainer starts no job now (the engine failed to take its last artifacts).
    paused: str | None = None
    #: What each extension reports of the scenario (``reef_scenario_status``), by extension
    #: name, as of the snapshot: Agent ECC's epoch in force and last seal under ``ecc``.
    extensions: JSONObject = attrs.field(factory=dict)
    #: Its training component, as the deployment names it.
    component: str | None = None
    #: The scenario's engine answers with this trainer's artifacts; a trainer that does not
    #: serve still publishes its own (its ``served_artifact`` is its last), which answer no call.
    serves: bool = False


@attrs.frozen
class ScenarioStatus:
    """One scenario: its mode, its trainers and what it dropped as a whole."""

    scenario: str
    training_mode: TrainingMode
    trainers: tuple[TrainerStatus, ...]
    drops: Mapping[str, int]
    bodies_held: int
    evicted_bodies: int
    #: Publication into the scenario's vLLM or SGLang server, as this process sees it
    #: (``Publisher.status``); ``None`` for any other engine.
    engine: Mapping[str, Any] | None = None
    #: Its eval sets, the newest results per artifact and the eval gate's decisions
    #: (``docs/evals.md``); ``None`` for a scenario without ``evals``.
    evaluations: Mapping[str, Any] | None = None


@attrs.frozen
class StatusDocument:
    """``GET /reef/status``."""

    scenarios: tuple[ScenarioStatus, ...]


# -- browsing: samples and jobs ----------------------------------------------------------------


def _page_size(largest: int) -> Any:
    return [attrs.validators.ge(1), attrs.validators.le(largest)]


def _optional_text(longest: int) -> Any:
    """A validator of an optional text parameter of 1 to ``longest`` characters."""
    return attrs.validators.optional(
        [attrs.validators.min_len(1), attrs.validators.max_len(longest)]
    )


@attrs.frozen
class SampleQuery:
    """The query of ``GET /reef/scenarios/{scenario}/samples``.

    :ivar kind: only samples of this kind (``trajectory`` or ``task``).
    :ivar group: only the samples of this group: the group the client named (a report's
        ``metadata.group``) or the store's own group id.
    :ivar trained: only samples a job trained (``true``) or none did (``false``); a sample a
        failed job consumed was trained by none.
    :ivar stale: only samples a trainer leaves out as stale (``true``) or none does (``false``).
    :ivar chosen: only samples in a manual buffer (``true``) or in none (``false``).
    :ivar trainer: the trainer that ``trained``, ``stale`` and ``chosen`` ask about (default:
        any).
    :ivar text: only samples whose stored body holds this text (messages, tool calls,
        feedback, metadata; ASCII letters in any case).
    :ivar reward_min: only samples of at least this reward.
    :ivar reward_max: only samples of at most this reward.
    :ivar artifact: only samples one of whose calls this artifact answered.
    :ivar since: only samples made from a call received at or after this time (Unix seconds).
    :ivar until: only samples made from a call received before this time.
    :ivar tag: only samples made from calls carrying this tag, ``NAME=VALUE``.
    :ivar sort: ``time`` (store order) or ``reward`` (samples without one last).
    :ivar after: the ``next`` of the previous page.
    :ivar before: the ``previous`` of the next page.
    :ivar last: the last page (instead of the first).
    :ivar count: count the matches (at most 10,000; ``total_exact`` says whether there are
        more): leave it ``false`` when the count is known, for a fast page.
    :ivar limit: the most samples in the page (1 to 200).
    :ivar order: ``asc`` (oldest or lowest first) or ``desc`` (newest or highest first).
    """

    kind: Literal["trajectory", "task"] | None = None
    group: str | None = attrs.field(default=None, validator=_optional_text(400))
    trained: bool | None = None
    stale: bool | None = None
    chosen: bool | None = None
    trainer: str | None = attrs.field(default=None, validator=valid_name)
    text: str | None = attrs.field(default=None, validator=_optional_text(400))
    reward_min: float | None = None
    reward_max: float | None = None
    artifact: str | None = attrs.field(default=None, validator=_optional_text(400))
    since: float | None = None
    until: float | None = None
    tag: str | None = attrs.field(default=None, validator=_optional_text(400))
    sort: Literal["time", "reward"] = "time"
    after: str | None = None
    before: str | None = None
    last: bool = False
    count: bool = True
    limit: int = attrs.field(default=50, validator=_page_size(200))
    order: Literal["asc", "desc"] = "asc"


@attrs.frozen
class ExportQuery:
    """The query of ``GET /reef/scenarios/{scenario}/export`` (``reef export``'s filters).

    :ivar since: samples of calls received at or after this time (Unix seconds).
    :ivar until: samples of calls received before this time.
    :ivar tag: samples of calls carrying this tag, ``NAME=VALUE``.
    :ivar trained: trained samples (``true``) or untrained ones (``false``).
    :ivar trainer: the trainer ``trained`` asks about (default: any).
    :ivar reward_min: a reward at least this.
    :ivar reward_max: a reward at most this.
    """

    since: float | None = None
    until: float | None = None
    tag: str | None = attrs.field(default=None, validator=_optional_text(400))
    trained: bool | None = None
    trainer: str | None = attrs.field(default=None, validator=valid_name)
    reward_min: float | None = None
    reward_max: float | None = None


def tag_condition(tag: str | None) -> dict[str, str]:
    """The tag a query's ``tag`` (``NAME=VALUE``) asks for, by name (empty for none).

    :raises ApiError: 400 at ``query.tag`` for a value without ``=`` or a name.
    """
    if tag is None:
        return {}
    name, equals, value = tag.partition("=")
    if not equals or not name:
        raise ApiError.one(
            400, "invalid_request", f"{QUERY_ROOT}.tag", f"expected NAME=VALUE, got {tag!r}"
        )
    return {name: value}


#: The most samples one selection export holds (the console's "select all matching" bound).
SELECTION_EXPORT_LIMIT: Final = 10_000


@attrs.frozen
class ExportSelection:
    """The body of ``POST /reef/scenarios/{scenario}/export``: samples a person selected.

    :ivar sample_ids: the trajectory samples, by id, in the order the file holds them (1 to
        10,000).
    :ivar format: ``jsonl`` (JSON Lines), ``parquet``, or ``hf`` (a Hugging Face ``datasets``
        folder, zipped); the last two need the ``export`` extra.
    """

    sample_ids: tuple[str, ...] = attrs.field(
        validator=[
            attrs.validators.min_len(1),
            attrs.validators.max_len(SELECTION_EXPORT_LIMIT),
            attrs.validators.deep_iterable(_optional_text(400)),
        ]
    )
    format: Literal["jsonl", "parquet", "hf"] = "jsonl"


@attrs.frozen
class SampleSummary:
    """A sample as the sample list shows it.

    :ivar group: the group its client named (a report's ``metadata.group``), if any.
    :ivar group_id: the store's id of the group it trains with (its first member's id).
    :ivar position: its place in store order.
    :ivar made_by: the trainer whose stage made it; ``None`` for an upload.
    :ivar origin: ``record`` (made from records), ``named`` or ``upload``.
    :ivar reward: the reward it trains with, when it has one.
    :ivar steps: how many steps its trajectory has (``None`` for a task).
    :ivar preview: the start of its first user message, or the task's name.
    :ivar trained_by: how many committed jobs of each trainer trained it (failed ones left
        out).
    :ivar manual_buffer: the trainers whose manual buffer holds it.
    :ivar stale_for: the trainers that leave it out as stale.
    :ivar failed_by: how many failed jobs of each trainer consumed it: sent to the component,
        its training thrown away with the job; it never trains again for that trainer.
    :ivar no_signal_by: of ``trained_by``, how many of those jobs gave it no learning signal:
        its group in the job scored all alike (advantage 0 under a group-relative objective).
    :ivar label: the reward a person labelled it with, which its next job trains with instead
        of ``reward`` (``None``: no label in force).
    """

    id: str
    kind: str
    group_id: str | None
    position: str
    made_by: str | None
    origin: str
    reward: float | None
    report_id: str | None
    steps: int | None
    preview: str | None
    trained_by: Mapping[str, int]
    manual_buffer: tuple[str, ...]
    stale_for: tuple[str, ...]
    failed_by: Mapping[str, int] = attrs.field(factory=dict)
    group: str | None = None
    no_signal_by: Mapping[str, int] = attrs.field(factory=dict)
    label: float | None = None


@attrs.frozen
class SamplePage:
    """One page of a scenario's samples; ``next`` asks for the following page and
    ``previous`` for the one before (``None``: none); ``total`` counts the samples the filters
    let through, at most 10,000 (``total_exact`` false: more), ``None`` when not asked."""

    scenario: str
    samples: tuple[SampleSummary, ...]
    total: int | None
    next: str | None
    previous: str | None = None
    total_exact: bool = True


@attrs.frozen
class RecordSource:
    """A record a sample was made from.

    :ivar stored: whether the store has the record at all.
    :ivar held: whether its body is still held (``False`` once evicted).
    :ivar artifact_id: the artifact that answered an inference record.
    :ivar at: when the call ended, or the report was admitted (Unix seconds).
    """

    id: str
    kind: str | None
    stored: bool
    held: bool
    evicted_reason: str | None = None
    artifact_id: str | None = None
    at: float | None = None


@attrs.frozen
class ReportSource:
    """The report that scored a sample, as stored (its content once its body is evicted is
    gone: ``held`` is then ``False``)."""

    id: str
    held: bool
    score: float | None = None
    feedback: str | None = None
    metadata: JSONObject | None = None
    references: tuple[str, ...] = ()


@attrs.frozen
class UploadSource:
    """The data item an uploaded sample came from; ``stored``: the item is still stored."""

    item_id: str
    stored: bool


@attrs.frozen
class TaskSource:
    """The task a task sample rolls out."""

    name: str
    split: str | None


@attrs.frozen
class SampleInJob:
    """A job that consumed a sample, and the sample's part in it.

    :ivar trained: the job trained it: it went to the component, and the job did not fail.
    :ivar sent: it went to the component (``False``: the job consumed it without training, an
        extension retired it). Sent to a failed job, it was consumed by a failed job: its
        training was thrown away.
    :ivar reward: the reward it trained with.
    :ivar event: how the job ended (``finished``, ``failed``, ``released``); ``None`` while it
        runs.
    :ivar extensions: what each extension said of the sample in this job (Agent ECC under
        ``ecc``: the group's outcome, the verdict, the decision, the rewards).
    :ivar job_extensions: what each extension said of the whole job (Agent ECC: the epoch).
    :ivar signal: whether its group in the job trained with unlike rewards (``False``: all
        alike, its advantage 0 under a group-relative objective; ``None``: not all rewarded).
    :ivar number: the job's number in the scenario's history.
    """

    job_id: str
    trainer: str
    trained: bool
    sent: bool
    reward: float | None
    event: str | None
    submitted_at: float | None
    ended_at: float | None
    extensions: JSONObject
    job_extensions: JSONObject
    signal: bool | None = None
    number: int = 0


@attrs.frozen
class SampleDetail:
    """``GET /reef/scenarios/{scenario}/samples/{sample_id}``: a sample, its body (the
    trajectory or task, reward, feedback, metadata) and where it came from.

    :ivar records: the records it was made from (empty for an upload or a named sample).
    :ivar report: the report that scored it, if any.
    :ivar upload: the data item it was uploaded as, if it was.
    :ivar task: the task it rolls out, for a task sample.
    :ivar jobs: the jobs that consumed it, oldest first.
    :ivar labels: every reward people gave it, oldest first; the newest is in force.
    """

    scenario: str
    sample: SampleSummary
    body: JSONObject
    records: tuple[RecordSource, ...]
    report: ReportSource | None
    upload: UploadSource | None
    task: TaskSource | None
    jobs: tuple[SampleInJob, ...]
    labels: tuple[SampleLabel, ...] = ()


def _finite_or_none(_: object, attribute: attrs.Attribute[Any], value: float | None) -> None:
    if value is not None and not math.isfinite(value):
        raise ValueError(f"'{attribute.name}': must be a finite number or null, got {value}")


@attrs.frozen
class Relabel:
    """The body of ``POST /reef/scenarios/{scenario}/labels``: a person's reward for a
    trajectory sample, kept with who gave it and when.

    :ivar sample_id: the sample.
    :ivar reward: the reward it trains with from its next job on; ``null`` takes the label in
        force back (the sample's own reward counts again).
    :ivar note: why, in the person's words (up to 2,000 characters).
    """

    sample_id: str = attrs.field(
        validator=[attrs.validators.min_len(1), attrs.validators.max_len(400)]
    )
    reward: float | None = attrs.field(validator=_finite_or_none)
    note: str | None = attrs.field(default=None, validator=_optional_text(2000))


@attrs.frozen
class JobQuery:
    """The query of ``GET /reef/scenarios/{scenario}/jobs``.

    :ivar trainer: only this trainer's jobs.
    :ivar before: the ``next`` of the previous page (older jobs).
    :ivar limit: the most jobs in the page (1 to 500).
    """

    trainer: str | None = attrs.field(default=None, validator=valid_name)
    before: str | None = None
    limit: int = attrs.field(default=100, validator=_page_size(500))


@attrs.frozen
class JobSummary:
    """A job of the history.

    :ivar event: ``finished``, ``failed`` or ``released`` (never reached the component);
        ``None`` while it runs.
    :ivar trained: the samples it trained: those it sent to the component, none when it
        failed (they were consumed by a failed job).
    :ivar sent: the samples it sent to the component, trained or thrown away with a failure.
    :ivar consumed: the samples it consumed (sent, or retired by an extension).
    :ivar reward_mean: the mean reward of the samples it sent that have one.
    :ivar metrics: the component's scalar metrics (``loss``, ...).
    :ivar extensions: what each extension said of the job (Agent ECC: its seal's epoch).
    :ivar number: its number in the scenario's history (1: the first job submitted).
    :ivar instruction_text: the note of the TRAIN instruction it answers, if it had one.
    :ivar artifact_id: the artifact its weights were published as (a finished job; ``None``
        before its publication, for a job that did not finish, and for jobs ended before the
        history kept it).
    :ivar signal: whether it had a learning signal: ``False`` when every group of the samples
        it sent trained with one reward (advantage 0 under a group-relative objective: a loss
        of 0, the weights unmoved), ``None`` when its samples carry no reward.
    """

    job_id: str
    trainer: str
    submitted_at: float | None
    ended_at: float | None
    event: str | None
    instruction_id: str | None
    trained: int
    sent: int
    consumed: int
    reward_mean: float | None
    metrics: JSONObject
    error: str | None
    extensions: JSONObject
    number: int = 0
    instruction_text: str | None = None
    signal: bool | None = None
    artifact_id: str | None = None


@attrs.frozen
class JobSampleRow:
    """A sample one job consumed, as the job's page lists it.

    :ivar sent: it went to the component (``False``: consumed without training).
    :ivar reward: the reward it trained with.
    :ivar group: its client's group; ``group_id`` the store's (``None``: not stored now).
    :ivar extensions: what each extension said of it in this job.
    """

    sample_id: str
    sent: bool
    reward: float | None
    group: str | None
    group_id: str | None
    extensions: JSONObject


@attrs.frozen
class JobDetail:
    """One job: its summary and the samples it consumed."""

    scenario: str
    job: JobSummary
    samples: tuple[JobSampleRow, ...]


@attrs.frozen
class JobSeriesQuery:
    """The query of ``GET /reef/scenarios/{scenario}/job_series``.

    :ivar points: the most points of each trainer's series (2 to 2000): a longer history is
        cut into that many runs of consecutive jobs, each drawn by its mean, lowest and
        highest value.
    """

    points: int = attrs.field(
        default=400, validator=[attrs.validators.ge(2), attrs.validators.le(2000)]
    )


@attrs.frozen
class JobPoint:
    """One point of a series: the finished jobs ``first`` to ``last`` (job numbers), their
    mean metrics, the lowest and highest of each, the last one's id and end.

    :ivar jobs: how many finished jobs it stands for.
    :ivar no_signal: how many of them had no learning signal.
    """

    first: int
    last: int
    jobs: int
    job_id: str
    ended_at: float | None
    mean: JSONObject
    low: JSONObject
    high: JSONObject
    no_signal: int


@attrs.frozen
class JobSeries:
    """Every finished job of each trainer, as chart points (``docs/console.md``).

    :ivar jobs: how many finished jobs each trainer has (the points cover them all).
    :ivar no_signal: how many of them had no learning signal (every group scored alike).
    :ivar metrics: every metric name the series hold, sorted.
    """

    scenario: str
    trainers: Mapping[str, tuple[JobPoint, ...]]
    jobs: Mapping[str, int]
    no_signal: Mapping[str, int]
    metrics: tuple[str, ...]


@attrs.frozen
class ArtifactRewardsQuery:
    """The query of ``GET /reef/scenarios/{scenario}/artifact_rewards``.

    :ivar limit: the most artifacts, the last to answer first (1 to 2000).
    """

    limit: int = attrs.field(
        default=500, validator=[attrs.validators.ge(1), attrs.validators.le(2000)]
    )


@attrs.frozen
class ArtifactRewards:
    """The mean reward of the samples each artifact answered a call of, the artifacts in the
    order they first answered (the quickstart's curve): the last ``limit`` of them, and how
    many there are (``total``)."""

    scenario: str
    artifacts: tuple[ArtifactReward, ...]
    total: int


@attrs.frozen
class EvaluationsQuery:
    """The query of ``GET /reef/scenarios/{scenario}/evaluations``.

    :ivar limit: the most artifacts, the last evaluated first (1 to 2000).
    :ivar trainer: one trainer's artifacts (default: every trainer's).
    """

    limit: int = attrs.field(
        default=500, validator=[attrs.validators.ge(1), attrs.validators.le(2000)]
    )
    trainer: str | None = attrs.field(default=None, validator=valid_name)


@attrs.frozen
class EvaluationsExportQuery:
    """The query of ``GET /reef/scenarios/{scenario}/evaluations/export``.

    :ivar trainer: one trainer's results (default: every trainer's).
    """

    trainer: str | None = attrs.field(default=None, validator=valid_name)


@attrs.frozen
class EvaluationCurve:
    """Each evaluated artifact's score on each of the scenario's eval sets (``sets``) and the
    gate's decision on it, in the order the artifacts were first evaluated: the last ``limit``
    of them, and how many there are (``total``)."""

    scenario: str
    sets: tuple[str, ...]
    artifacts: tuple[EvaluatedArtifact, ...]
    total: int


@attrs.frozen
class JobPage:
    """The latest jobs of a scenario, oldest first; ``next`` asks for the older ones."""

    scenario: str
    jobs: tuple[JobSummary, ...]
    next: str | None


# -- reading and answering ---------------------------------------------------------------------


# A number stays as the client sent it: a report's receipt hashes what was sent.
_CONVERTER: Final = strict_converter(ints_stay_ints=True)
# The OpenAI request has many keys Reef forwards without reading them.
_OPEN_CONVERTER: Final = strict_converter(forbid_extra_keys=False, ints_stay_ints=True)


_QUOTED_NAME: Final = re.compile(r"'([A-Za-z_][A-Za-z0-9_]*)'")


def _problems(exc: BaseException, cls: type[Any], root: str = "$") -> list[ErrorDetail]:
    lines = describe(exc) if isinstance(exc, cattrs.BaseValidationError) else [str(exc)]
    names = {field.name for field in attrs.fields(cls)}
    found = []
    for line in lines:
        field, reason = split_described(line)
        if field == "$":
            # An attrs validator's error names its attribute in quotes but has no path.
            named = [n for n in _QUOTED_NAME.findall(reason) if n in names]
            if named:
                field = f"$.{named[0]}"
        found.append(ErrorDetail(root + field[1:] if field.startswith("$") else field, reason))
    return found or [ErrorDetail(root, str(exc))]


def structure(data: Any, cls: type[_T], *, open_keys: bool = False) -> _T:
    """``data`` (parsed JSON) as ``cls``, or a 400 naming every problem with its path.

    :param open_keys: keep keys ``cls`` does not name instead of refusing them (the OpenAI
        request, whose other keys are forwarded unread).
    """
    if not isinstance(data, dict):
        raise ApiError.one(400, "invalid_request", "$", "the body must be a JSON object")
    converter = _OPEN_CONVERTER if open_keys else _CONVERTER
    try:
        return converter.structure(data, cls)
    except (cattrs.BaseValidationError, TypeError, ValueError) as exc:
        raise ApiError(400, "invalid_request", _problems(exc, cls)) from None


#: How a refused query parameter is named in an error: ``query.<name>``.
QUERY_ROOT: Final = "query"


def read_query(request: Request, cls: type[_T]) -> _T:
    """The request's query parameters as ``cls`` (an attrs class, a field per parameter), or a
    400 naming each problem as ``query.<name>``: a parameter ``cls`` does not have, one given
    twice, ``true``/``false`` for a boolean, a decimal for an integer."""
    hints = typing.get_type_hints(cls)
    names = {field.name for field in attrs.fields(typing.cast(Any, cls))}
    problems: list[ErrorDetail] = []
    values: dict[str, Any] = {}
    for name, value in request.query_params.multi_items():
        field = f"{QUERY_ROOT}.{name}"
        if name not in names:
            problems.append(
                ErrorDetail(field, f"no such parameter; known: {', '.join(sorted(names))}")
            )
        elif name in values:
            problems.append(ErrorDetail(field, "given more than once"))
        else:
            values[name] = _query_value(value, hints[name], field, problems)
    if problems:
        raise ApiError(400, "invalid_request", problems)
    try:
        return _CONVERTER.structure(values, cls)
    except (cattrs.BaseValidationError, TypeError, ValueError) as exc:
        raise ApiError(400, "invalid_request", _problems(exc, cls, QUERY_ROOT)) from None


def _query_value(value: str, kind: Any, field: str, problems: list[ErrorDetail]) -> Any:
    """``value`` as the JSON value of its parameter's type (the strict structuring checks the
    rest: a string where a ``Literal`` belongs, say)."""
    kinds = set(typing.get_args(kind)) or {kind}
    if bool in kinds:
        if value in ("true", "false"):
            return value == "true"
        problems.append(ErrorDetail(field, f"expected true or false, got {value!r}"))
    elif int in kinds:
        if re.fullmatch(r"-?[0-9]{1,18}", value):
            return int(value)
        problems.append(ErrorDetail(field, f"expected an integer, got {value!r}"))
    elif float in kinds:
        if re.fullmatch(r"-?[0-9]{1,18}(\.[0-9]{1,18})?([eE][-+]?[0-9]{1,3})?", value):
            return float(value)
        problems.append(ErrorDetail(field, f"expected a number, got {value!r}"))
    return value


def unstructure(value: Any) -> Any:
    """An attrs value as JSON (dicts, lists, scalars)."""
    return _CONVERTER.unstructure(value)


def answer(value: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    """A JSON response of an attrs value."""
    return JSONResponse(unstructure(value), status, headers=dict(headers or {}))


def error_answer(error: ApiError) -> Response:
    """The answer to a refused request: an :class:`ErrorBody` with the error's status."""
    return answer(ErrorBody(error.code, str(error), error.problems), error.status)
