"""The record-to-sample stage: :class:`Record2Sample`, the base of every such stage.

A stage decides which records train and in which record sets and units, and turns each set into
samples (P-STG-1). It never calls the pipeline (P-STG-5): the pipeline pushes records in, asks
for the units that became ready, stores their samples and tells the stage to consume them.

The base class owns what every stage shares, so that a recipe writes only its decisions. Its
methods come in three kinds, and a recipe meets two of them:

- **what a recipe writes**, marked "Extension point": ``push`` (and ``advance``),
  ``make_samples``, ``uploaded_sample``, ``made_samples``, ``job_ended``, ``is_stale``,
  ``status``, ``metrics``, ``background_jobs_running``, ``close`` and ``from_settings``;
- **what a recipe calls** from them: ``hold``, ``held_record``, ``is_taken``, ``form``,
  ``form_unit``, ``end``, ``discard`` and ``make_unit_ready``;
- **what the pipeline calls** (the record lifecycle and staleness of the contract):
  ``ready_units``, ``unit_samples``, ``consume``, ``replay_consumed``,
  ``releasable_record_ids``, ``ended_records``, ``release_records``,
  ``observe_serving_artifact_id`` and ``context_changed``. A stage overrides these only when
  it keeps its own record lifecycle.

The books behind them are not the author's: the record lifecycle (records held, sets formed, a
record in at most one set ever, P-SET-5, units waiting to be stored, records ended without
training until ``release_records`` frees them) is a :class:`~reef.record2sample.record_book.
RecordBook`, and the artifacts the scenario served (P-STALE-*) a
:class:`~reef.record2sample.record_book.ServedArtifacts`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar, Generic, Self

from typing_extensions import TypeVar

from reef.core.job_data import JobOutcome, Sample, TrajectorySample
from reef.core.plugins import PluginSettings, Record2SampleSettings
from reef.core.records import JSON, Record
from reef.pipeline_context import PipelineContext, StageBuild
from reef.record2sample.record_book import RecordBook, ServedArtifacts
from reef.record2sample.record_sets import RecordSet, RecordSetUnit, SampleResult, SampleStatus

logger = logging.getLogger(__name__)

#: The reason an engine abort rejects a whole set (P-SET-10).
ENGINE_ABORT = "engine_abort"


#: A stage's settings class: what its :meth:`Record2Sample.from_settings` receives, typed (a
#: stage declares ``class MySamples(ReportSamples[MySettings])``).
SettingsT = TypeVar("SettingsT", bound=PluginSettings, default=PluginSettings)
#: The settings of a stage that holds units: :class:`Record2SampleSettings` or an extension.
UnitSettingsT = TypeVar("UnitSettingsT", bound=Record2SampleSettings, default=Record2SampleSettings)


def sample_artifact_id(sample: Sample) -> str | None:
    """The artifact that produced ``sample``'s data (P-STALE-4).

    A trajectory reads its last call's artifact; a task rollout names it in
    ``metadata.training.artifact_id``.
    """
    if isinstance(sample, TrajectorySample):
        return sample.artifact_id
    training = sample.metadata.get("training")
    artifact = training.get("artifact_id") if isinstance(training, Mapping) else None
    return artifact if isinstance(artifact, str) else None


class Record2Sample(Generic[SettingsT]):
    """The base of a record-to-sample stage; see the module docstring.

    A subclass implements :meth:`push` (and :meth:`make_samples` when it forms sets). The
    trainer's thread calls every method, under the trainer's lock: none may block (P-SLOW-1).

    :ivar context: the pipeline's context; replaced by :meth:`context_changed`.
    :ivar max_staleness: how many served artifacts behind the current one a sample's data may
        be and still train (P-STALE-3).
    :ivar records: the record lifecycle's books (:class:`RecordBook`).
    :ivar served: the artifacts the scenario served (:class:`ServedArtifacts`).
    """

    #: Extension point: the settings class that declares this stage's keys. The deployment
    #: loader checks the config against it and :meth:`from_config` parses it.
    Settings: ClassVar[type[PluginSettings]] = Record2SampleSettings

    def __init__(self, context: PipelineContext, *, max_staleness: int = 0) -> None:
        if max_staleness < 0:
            raise ValueError(f"max_staleness must be a non-negative int, got {max_staleness}")
        self.context = context
        self.max_staleness = max_staleness
        self.records = RecordBook()
        self.served = ServedArtifacts()
        self._warned_no_artifact: set[str] = set()

    @classmethod
    def from_config(
        cls,
        config: Mapping[str, Any] | None,
        *,
        context: PipelineContext,
        environ: Mapping[str, str],
    ) -> Self:
        """Build the stage from its deployment config (P-STG-8, P-STG-10).

        Parses ``config`` with the stage's :attr:`Settings` class (refusing what it does not
        take) and builds the stage with :meth:`from_settings`. A stage declares its keys by
        setting ``Settings``; it does not override this method.

        :raises reef.core.plugins.PluginConfigError: naming every problem of ``config``.
        """
        settings: Any = cls.Settings.parse(config, plugin_class=cls)  # an instance of Settings
        return cls.from_settings(settings, StageBuild(context, environ))

    @classmethod
    def from_settings(cls, settings: SettingsT, build: StageBuild) -> Self:
        """Extension point: build the stage from its parsed settings (an instance of
        :attr:`Settings`, typed by the class's parameter: ``ReportSamples[MySettings]``).

        The default calls ``cls(build.context, **settings.as_keywords())``: each settings field
        is a keyword argument of the constructor (``max_staleness`` for
        :class:`Record2SampleSettings`, P-STG-12). Override it when the constructor takes
        something built from the settings (a grouping, a judge) or reads ``build.environ`` (a
        judge's API key).
        """
        return cls(build.context, **settings.as_keywords())

    # -- records in ------------------------------------------------------------------------

    def push(self, record: Record) -> None:
        """Extension point: one record arrives, in store order. Form the sets it completes
        (P-PIPE-3)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement push")

    def advance(self, now: float) -> None:
        """Extension point: take in background work that ended and form the sets due at ``now``
        (P-STG-6).

        The default does nothing: a stage that forms every set in ``push`` needs no clock.
        """
        del now

    def replay_consumed(self, record: Record) -> None:
        """Extension point: a record that this trainer's stored samples consumed before a restart
        (P-SET-20).

        It never trains again, and a later set that holds it is refused, as before the
        restart. A stage that indexes records (trajectories) overrides this to index it too,
        then calls the base.
        """
        self.records.taken.add(record.id)

    # -- sets and units --------------------------------------------------------------------

    def hold(self, record: Record) -> None:
        """Keep ``record`` until a set takes it or the stage ends it."""
        self.records.held[record.id] = record

    def held_record(self, record_id: str) -> Record | None:
        """A record the stage holds and no set took yet, or ``None``."""
        return self.records.held.get(record_id)

    def is_taken(self, record_id: str) -> bool:
        """True when a set of this stage took the record, now or before (P-SET-5)."""
        return record_id in self.records.taken

    def form(self, record_set: RecordSet) -> SampleResult:
        """Form ``record_set`` and make its samples at once (P-SET-7).

        The set takes its records (a set holding a record of another set is refused). An
        engine abort in any of its inference responses rejects the whole set, its report and
        every referenced inference included, without touching the stored responses (P-SET-10,
        P-SET-11). Otherwise :meth:`make_samples` makes the samples. :meth:`settle` then
        settles every record of the set by the result.

        :raises RecordSetOverlap: when another set holds one of its records; nothing changes.
        :raises Exception: whatever ``make_samples`` raises (training data errors propagate,
            P-REP-14); the set is undone and its records stay held, unprocessed.
        """
        self.records.check_new(record_set)
        if record_set.engine_aborted:
            result = SampleResult.skipped(ENGINE_ABORT)
        else:
            made = self.make_samples(record_set)
            result = made if isinstance(made, SampleResult) else SampleResult.ready(made)
        self.records.formed(record_set)
        self.settle(record_set, result)
        return result

    def form_unit(self, record_set: RecordSet) -> SampleResult:
        """Form ``record_set`` (:meth:`form`) and, when it has samples, make it a unit of its
        own ready: its samples, however many, train together in one job (P-SET-14, P-SET-15).

        What a stage does with a set that trains by itself (a trajectory, a judged record, a
        report outside any group); a grid of n samples made from one set is such a unit.

        :returns: :meth:`form`'s result.
        :raises: what :meth:`form` raises.
        """
        result = self.form(record_set)
        if result.status is SampleStatus.READY:
            self.make_unit_ready(RecordSetUnit.of(record_set))
        return result

    def make_samples(self, record_set: RecordSet) -> SampleResult | Sequence[Sample]:
        """Extension point: the samples of ``record_set`` (no sample: SKIPPED). Must not block
        (P-SLOW-1)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement make_samples")

    def settle(self, record_set: RecordSet, result: SampleResult) -> None:
        """Settle every record of a formed set by its result (P-SET-8, P-SET-9).

        READY: the stage holds the samples by set id until their unit is stored. SKIPPED: the
        stage ends the set's records with the result's reason.
        """
        if result.status is SampleStatus.READY:
            self.records.set_samples[record_set.id] = result.samples
        else:
            self.discard(record_set, result.reason or "skipped")

    def discard(self, record_set: RecordSet, reason: str) -> None:
        """End a formed set without training: forget its samples, end its records."""
        self.records.discard(record_set, reason)

    def end(self, records: Iterable[Record], reason: str) -> None:
        """End records that no set took, without training (counted under ``reason``).

        The records stay taken: no later set can hold them. They appear in
        :meth:`releasable_record_ids` until released (P-STALE-1).
        """
        ids = [record.id for record in records]
        self.records.take(ids)
        self.records.end(ids, reason)

    def make_unit_ready(self, unit: RecordSetUnit) -> None:
        """The samples of every set of ``unit`` are made: the pipeline may store it (P-SET-15).

        :raises RecordSetError: when a set of the unit has no samples held.
        """
        self.records.unit_ready(unit)

    # -- the pipeline's side: the record lifecycle ------------------------------------------

    def ready_units(self) -> tuple[RecordSetUnit, ...]:
        """The units whose samples wait to be stored, in the order they became ready."""
        return tuple(self.records.ready_units.values())

    def unit_samples(self, unit: RecordSetUnit) -> tuple[tuple[str, tuple[Sample, ...]], ...]:
        """The samples of ``unit``: (set id, the set's samples) for each of its sets."""
        return tuple((s.id, self.records.set_samples[s.id]) for s in unit.record_sets)

    def consume(self, unit: RecordSetUnit) -> None:
        """The unit's samples are stored with its records: end it and forget its samples
        (P-SET-17)."""
        self.records.consumed(unit)

    def releasable_record_ids(self) -> tuple[str, ...]:
        """Records that are done (stored or ended) and that no held set references.

        The next commit names the ended ones, so they never train after a restart (P-STALE-1).
        """
        return self.records.releasable()

    def ended_records(self) -> Mapping[str, str]:
        """The releasable records that ended without training, with their reasons."""
        return self.records.ended()

    def release_records(self, record_ids: Iterable[str]) -> None:
        """Free the memory of done records after a successful commit (P-PIPE-16)."""
        self.records.release(record_ids)

    # -- staleness -------------------------------------------------------------------------

    def observe_serving_artifact_id(self, artifact_id: str) -> None:
        """The scenario serves ``artifact_id`` now (P-STALE-5); artifacts are kept oldest first.

        Serving the same artifact again does not age any data.
        """
        self.served.observe(artifact_id)

    def is_stale(self, sample: Sample) -> bool:
        """Extension point: true when ``sample``'s data is more than ``max_staleness`` served
        artifacts behind the current one (P-STALE-6..11).

        No check runs without a runtime loader or before the first served artifact; a sample
        naming no artifact, or one the stage did not see, is stale.

        The pipeline keeps the verdict: it asks again only after a new artifact is served or
        the context changed, so an override depends on nothing else.
        """
        if not self.context.has_runtime_loader or not self.served:
            return False
        artifact = sample_artifact_id(sample)
        if artifact is None:
            self._warn_no_artifact(sample)
            return True
        lag = self.served.lag(artifact)
        return lag is None or lag > self.max_staleness

    def _warn_no_artifact(self, sample: Sample) -> None:
        # A sample that names no artifact never trains once one is served: almost always a
        # stage that builds its samples without their records' artifact. Said once per sample,
        # not at every buffer computation.
        key = sample.sample_id
        if key is not None and key in self._warned_no_artifact:
            return
        if key is not None:
            self._warned_no_artifact.add(key)
        logger.warning(
            "scenario %r, trainer %r: sample %s names no artifact, so it is stale and will not"
            " train (P-STALE-8); a trajectory sample names it in extra.reef.records (SampleAssembly"
            " writes it), a task sample in metadata.training.artifact_id",
            self.context.scenario,
            self.context.trainer,
            key or "(not stored yet)",
        )

    # -- samples from no record set, uploads, job ends -------------------------------------

    def uploaded_sample(self, trajectory: JSON) -> Sample:
        """Extension point: the training sample of an uploaded ATIF trajectory; the default takes it
        as uploaded.

        Must be pure: admission calls it on the request thread and the pipeline again when it
        reads the upload (P-UP-4). Raise :class:`ValueError` naming the trajectory to refuse it.
        """
        return TrajectorySample(trajectory)

    def made_samples(self) -> tuple[tuple[str, Sample], ...]:
        """Extension point: samples made from no record set since the last call, as (name, sample)
        pairs (P-PIPE-11). The default makes none."""
        return ()

    def job_ended(self, outcome: JobOutcome) -> None:
        """Extension point: a training job ended and the commit of its end is durable
        (P-PIPE-12)."""
        del outcome

    def context_changed(self, context: PipelineContext) -> None:
        """The scenario changed what the stage reads (P-PIPE-20): take the new context."""
        self.context = context

    # -- observation and shutdown ----------------------------------------------------------

    def status(self) -> JSON:
        """Extension point: the stage's status entries; the base reports what it holds and what
        ended, by reason (nothing that will never train is silent)."""
        return {
            "held_records": len(self.records.held),
            "ready_units": len(self.records.ready_units),
            "ended_records": dict(sorted(self.records.ended_counts.items())),
        }

    def metrics(self) -> dict[str, float]:
        """Extension point: the stage's metrics, by name."""
        ended = self.records.ended_counts
        return {f"records_ended.{reason}": float(n) for reason, n in ended.items()}

    def background_jobs_running(self) -> bool:
        """Extension point: true while the stage runs background work (P-SLOW-2); the default runs
        none."""
        return False

    def close(self, timeout: float | None = None) -> None:
        """Extension point: stop the stage's background work (P-SLOW-3); the default has none."""
        del timeout
