"""Computed feedback: ``JudgedSamples`` and the recipe's ``RecordJudging`` (P-JUDGE-*).

The recipe's judging correlates records as they arrive (``observe``) using the stage's
operations: ``dispatch`` a record to be judged, ``track`` one to decide about later,
``tracked_record`` to look one up, ``retire`` one that will not train. Judging is slow (a model
call), so the stage runs ``judge`` on a :class:`BackgroundJobWorker` it owns; at each
``advance(now)`` it retires tracked records that ``expire``, takes the judgments that ended,
and forms one judged set of each: the :class:`JudgedRecord` and the inference it judged. Its
sample comes from the recipe's ``make_sample(record, judgment)`` (P-JUDGE-3).
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Mapping
from typing import Any, ClassVar, Self

from reef.core.job_data import Sample
from reef.core.plugins import PluginSettings, Record2SampleSettings
from reef.core.records import InferenceRecord, JudgedRecord, Judgment, Record
from reef.pipeline_context import PipelineContext, StageBuild
from reef.record2sample.record_sets import RecordSet, SampleResult
from reef.record2sample.stage import Record2Sample, UnitSettingsT
from reef.record2sample.worker import BackgroundJobWorker

logger = logging.getLogger(__name__)

#: Reasons a record ends without training on the computed-feedback path.
RETIRED = "retired"
EXPIRED = "expired"
JUDGE_FAILED = "judge_failed"
NOT_JUDGED = "not_judged"


class RecordJudging(abc.ABC):
    """A computed-feedback recipe's correlation and judge."""

    def observe(self, record: Record, now: float, stage: JudgedSamples[Any]) -> None:
        """Extension point: a record arrived at ``now``: dispatch, track or retire it with
        ``stage``'s operations. The default dispatches every inference and ignores other records."""
        del now
        if isinstance(record, InferenceRecord):
            stage.dispatch(record)

    @abc.abstractmethod
    async def judge(self, record: InferenceRecord) -> Judgment:
        """Extension point: judge one record. Runs on the stage's worker, never on the trainer
        thread."""

    def expire(self, record: InferenceRecord, now: float) -> bool:
        """Extension point: true when a tracked ``record`` timed out at ``now`` (the stage retires
        it)."""
        del record, now
        return False

    async def aclose(self) -> None:
        """Extension point: release what the judgments share (an HTTP client). The stage's
        ``close`` runs it on its worker once every judgment ended (not at all when no judgment
        ran); the default holds nothing."""
        return


class JudgedSamples(Record2Sample[UnitSettingsT]):
    """The record-to-sample stage of a computed-feedback recipe (P-JUDGE-2).

    :param judging: the recipe's judging.
    :param worker: the worker that runs ``judge``; the stage owns and closes it.
    :param context: the pipeline's context (keyword: the stage's signature starts with the
        judging, P-JUDGE-2).
    :param max_staleness: see :class:`Record2Sample`.
    """

    Settings: ClassVar[type[PluginSettings]] = Record2SampleSettings

    def __init__(
        self,
        judging: RecordJudging,
        worker: BackgroundJobWorker,
        *,
        context: PipelineContext,
        max_staleness: int = 0,
    ) -> None:
        super().__init__(context, max_staleness=max_staleness)
        self.judging = judging
        self.worker = worker
        self._tracked: dict[str, InferenceRecord] = {}
        self._dispatched: dict[str, InferenceRecord] = {}
        self._now = 0.0
        self._judgments: dict[str, Judgment] = {}

    @classmethod
    def from_settings(cls, settings: UnitSettingsT, build: StageBuild) -> Self:
        """The stage with the recipe's judging (:meth:`make_judging`) and a new worker."""
        context = build.context
        return cls(
            cls.make_judging(settings, environ=build.environ),
            BackgroundJobWorker(f"reef-judge-{context.scenario}-{context.component}"),
            context=context,
            max_staleness=settings.max_staleness,
        )

    @classmethod
    def make_judging(cls, settings: UnitSettingsT, *, environ: Mapping[str, str]) -> RecordJudging:
        """Extension point: the recipe's judging, from its settings; a recipe's subclass implements
        it."""
        raise NotImplementedError(f"{cls.__name__} does not implement make_judging")

    # -- the judging's operations ----------------------------------------------------------

    def dispatch(self, record: InferenceRecord) -> None:
        """Judge ``record`` on the worker; hold it until its judgment arrives."""
        self._tracked.pop(record.id, None)
        self._dispatched[record.id] = record
        self.hold(record)
        self.worker.submit(record.id, lambda: self.judging.judge(record))

    def track(self, record: InferenceRecord) -> None:
        """Hold ``record`` for a later decision of the judging."""
        self._tracked[record.id] = record
        self.hold(record)

    def tracked_record(self, record_id: str) -> InferenceRecord | None:
        """A record that the judging tracks, or ``None``."""
        return self._tracked.get(record_id)

    def retire(self, record_id: str, reason: str = RETIRED) -> None:
        """End a tracked record without training."""
        record = self._tracked.pop(record_id, None)
        if record is not None:
            self.end((record,), reason)

    # -- the stage -------------------------------------------------------------------------

    def push(self, record: Record) -> None:
        """Hand ``record`` to the judging's ``observe``; a record it neither dispatches nor
        tracks ends at once."""
        self.judging.observe(record, self._now, self)
        if record.id not in self._dispatched and record.id not in self._tracked:
            self.end((record,), NOT_JUDGED)

    def advance(self, now: float) -> None:
        """Retire expired tracked records, then form a judged set of each judgment."""
        self._now = now
        for tracked in list(self._tracked.values()):
            if self.judging.expire(tracked, now):
                self.retire(tracked.id, EXPIRED)
        for job in self.worker.finished():
            record = self._dispatched.pop(str(job.key), None)
            if record is None:
                continue
            if job.error is not None:
                logger.warning("judging record %r failed: %s", record.id, job.error)
                self.end((record,), JUDGE_FAILED)
                continue
            judged = JudgedRecord(f"{record.id}:judged", record.scenario, record.id, job.result)
            record_set = RecordSet(judged.id, (record, judged))
            self._judgments[judged.id] = job.result
            try:
                self.form_unit(record_set)
            finally:
                del self._judgments[judged.id]

    def make_samples(self, record_set: RecordSet) -> SampleResult:
        """The judged record's sample from :meth:`make_sample` (``None``: SKIPPED)."""
        record = record_set.inferences[0]
        sample = self.make_sample(record, self._judgments[record_set.id])
        if sample is None:
            return SampleResult.skipped("no_sample")
        return SampleResult.ready((sample,))

    def make_sample(self, record: InferenceRecord, judgment: Judgment) -> Sample | None:
        """Extension point: one sample of a judged record, or ``None`` for one that cannot train."""
        raise NotImplementedError(f"{type(self).__name__} does not implement make_sample")

    def background_jobs_running(self) -> bool:
        """True while a judgment runs or waits to be taken in."""
        return self.worker.running()

    def close(self, timeout: float | None = None) -> None:
        """Stop the worker, then close the judging (:meth:`RecordJudging.aclose`) on it;
        :class:`TimeoutError` when its cleanup overruns (P-SLOW-3)."""
        self.worker.close(timeout, cleanup=self.judging.aclose)
