"""OpenClaw-RL's stages: every agent turn judged from its next state (computed feedback).

:class:`OpenClawJudging` links each call to the conversation it continues
(:class:`reef.TrajectoryIndex`): when a call arrives whose request extends an earlier call's
request and reply, the messages after that reply are the earlier call's *next state* (the
user's answer, the tools' results), and the earlier call goes to the judge. A call that no
later call continues within ``next_state_timeout_seconds`` is the conversation's last turn:
OpenClaw-RL leaves it out of training, and so does this stage (it ends as ``expired``).

:class:`OpenClawRLSamples` runs the judge (:mod:`reef_distill.openclaw.judge`) on its
background worker (P-SLOW-2) and makes each judged turn a sample of the call (its earlier
turns copied context, only the reply trains):

- binary: the majority vote (+1 or -1) is the reward; a turn judged 0 does not train, as in
  OpenClaw-RL (``no_sample``);
- with ``hints``: each good vote's hint becomes one teacher request, the call's request with
  the hint added to its last user message (``extra.reef.teacher_candidates``, longest first),
  and the best one is the teacher (``extra.reef.teacher``); a turn without a hint does not
  train.

A judge that fails or never answers ends the turn untrained and counted (``judge_failed``).
:class:`OpenClawRLJobData` reads the judging from the record-to-sample stage (P-STG-9).

A Responses call chained by ``previous_response_id`` holds only its new turn, so the judging
keeps each Responses call's chain (:class:`ResponseChains`): the next state, the sample and
the teacher requests of a chained turn are those of its whole conversation, as for a call that
resends it. A chained call whose chain reaches a call no longer kept ends untrained
(``not_judged``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Final, Self

import attrs

from reef import (
    InferenceRecord,
    JobData,
    JobStageBuild,
    JudgedSamples,
    Judgment,
    PipelineContext,
    PluginConfigError,
    PluginSettings,
    Record,
    Record2SampleSettings,
    RecordJudging,
    ResponseChains,
    Sample,
    Sample2Job,
    Sample2JobSettings,
    SampleAssembly,
    TrajectoryIndex,
    compose_teacher_request,
    config_option,
    with_teacher,
)
from reef_distill.openclaw.judge import Judge, JudgeSettings, Verdict, Vote

#: The line OpenClaw-RL's hinted teacher reads before the hint
#: (``openclaw-opd/openclaw_opd_api_server.py``, ``_append_hint_to_messages``).
HINT_MARKER: Final = "[user's hint / instruction]"


@attrs.frozen
class OpenClawRLSamplesSettings(Record2SampleSettings):
    """The judging of OpenClaw-RL (``pipeline.record2sample.config``)."""

    judge: JudgeSettings = config_option(
        help="the judge model (base_url, model, api_key) and its votes, timeouts and retries"
    )
    hints: bool = config_option(
        False,
        help="ask the judge for hindsight hints (the hindsight objective); false: the binary "
        "+1/-1/0 judgment",
    )
    next_state_timeout_seconds: float = config_option(
        600.0,
        help="a turn no later call continues within this time is the last one: it does not train",
        validator=attrs.validators.gt(0),
    )
    min_hint_chars: int = config_option(
        10,
        help="a hint of at most this many characters is no hint",
        validator=attrs.validators.ge(0),
    )


class OpenClawJudging(RecordJudging):
    """Each turn, judged from its next state (see the module's documentation).

    :param settings: the judging: the judge, its votes, hints, the last turn's timeout.
    """

    def __init__(self, settings: OpenClawRLSamplesSettings) -> None:
        self.settings = settings
        self.judge_model = Judge(settings.judge, hints=settings.hints)
        self.index = TrajectoryIndex()
        self.chains = ResponseChains()
        self._next_states: dict[str, list[Any]] = {}

    def observe(self, record: Record, now: float, stage: JudgedSamples) -> None:
        """Track each call until its next state arrives; then send the earlier call to the
        judge. Reports and other records are not this method's feedback."""
        del now
        if not isinstance(record, InferenceRecord) or record.id in self.index:
            return
        self.index.add(record)
        if self.chains.add(record) is None:
            return  # a chained call whose conversation is no longer kept: not judged
        parent_id = self.index.parent(record.id)
        parent = stage.tracked_record(parent_id) if parent_id is not None else None
        if parent is not None:
            # The child's conversation is the parent's, its reply, then the next state.
            before = self.chains.conversation(parent)
            self._next_states[parent.id] = self.chains.conversation(record)[len(before) + 1 :]
            stage.dispatch(parent)
        if record.reply_messages:
            stage.track(record)

    async def judge(self, record: InferenceRecord) -> Judgment:
        """The turn's verdict, on the stage's worker."""
        next_state = self._next_states.pop(record.id)
        try:
            verdict = await self.judge_model.verdict(record.reply_messages[0], next_state)
        finally:
            self.chains.end(record.id)
        return Judgment(
            score=float(verdict.score),
            metadata={
                "votes": [v.score for v in verdict.votes],
                "hints": [v.hint for v in verdict.votes],
            },
        )

    def expire(self, record: InferenceRecord, now: float) -> bool:
        """The last turn: nothing continued it in ``next_state_timeout_seconds``."""
        expired = now - record.ended_at > self.settings.next_state_timeout_seconds
        if expired:
            self.chains.end(record.id)
        return expired

    async def aclose(self) -> None:
        """Close the judge's HTTP client, on the stage's worker as the stage closes."""
        await self.judge_model.aclose()


class OpenClawRLSamples(JudgedSamples[OpenClawRLSamplesSettings]):
    """OpenClaw-RL's record-to-sample stage (see the module's documentation)."""

    Settings: ClassVar[type[PluginSettings]] = OpenClawRLSamplesSettings

    judging: OpenClawJudging

    @classmethod
    def make_judging(
        cls, settings: OpenClawRLSamplesSettings, *, environ: Mapping[str, str]
    ) -> RecordJudging:
        """The judging of the settings (the API key comes in them, from a ${ENV} reference)."""
        del environ
        return OpenClawJudging(settings)

    def make_sample(self, record: InferenceRecord, judgment: Judgment) -> Sample | None:
        """The judged turn's sample, or ``None`` for a turn that does not train."""
        score = judgment.score or 0.0
        chain = self.judging.chains.chain(record)
        sample = SampleAssembly().trajectory_sample(chain, trajectory_id=record.id)
        sample = attrs.evolve(sample, reward=score, metadata={"judgment": judgment.metadata})
        settings = self.judging.settings
        if not settings.hints:
            return sample if score != 0 else None
        votes = zip(judgment.metadata["votes"], judgment.metadata["hints"], strict=True)
        verdict = Verdict(int(score), tuple(Vote(vote, hint) for vote, hint in votes))
        hints = verdict.hints(settings.min_hint_chars)
        if not hints:
            return None
        candidates = [
            compose_teacher_request(record, context=hint_context(h), calls=chain) for h in hints
        ]
        return with_teacher(sample, teacher=candidates[0], candidates=candidates)


def hint_context(hint: str) -> str:
    """The text a hint adds to the teacher's last user message, as OpenClaw-RL's
    ``_append_hint_to_messages`` writes it (after a blank line): :data:`HINT_MARKER`, a
    newline, the hint."""
    return f"{HINT_MARKER}\n{hint.strip()}"


class OpenClawRLJobData(Sample2Job):
    """OpenClaw-RL's sample-to-job stage: the buffer's judged turns, each job saying how they
    were judged, from the judging of :class:`OpenClawRLSamples` (configured once, P-STG-9).

    :param judging: the record-to-sample stage's settings.
    """

    def __init__(
        self,
        context: PipelineContext,
        *,
        judging: OpenClawRLSamplesSettings,
        job_samples: int,
        buffer_size: int | None = None,
    ) -> None:
        super().__init__(context, job_samples=job_samples, buffer_size=buffer_size)
        self.judging = judging

    @classmethod
    def from_settings(cls, settings: Sample2JobSettings, build: JobStageBuild) -> Self:
        """The stage with the judging of the record-to-sample stage, an
        :class:`OpenClawRLSamples`.

        :raises PluginConfigError: for another record-to-sample stage, which judges nothing.
        """
        record2sample = build.record2sample
        if not isinstance(record2sample, OpenClawRLSamples):
            raise PluginConfigError(
                cls.__name__,
                "$.pipeline.record2sample.class",
                f"reads the judging of OpenClawRLSamples, not {type(record2sample).__name__}",
            )
        return cls(
            build.context,
            judging=record2sample.judging.settings,
            job_samples=cls.resolve_job_samples(settings),
            buffer_size=settings.buffer_size,
        )

    def make_job_data(self, samples: Sequence[Sample], data_id: str) -> JobData:
        """Every judged turn of the buffer, with the judging that scored them."""
        judge = self.judging.judge
        return JobData(
            data_id,
            tuple(samples),
            metadata={
                "objective": "openclaw_hindsight" if self.judging.hints else "openclaw_binary",
                "judge": {"model": judge.model, "votes": judge.votes},
            },
        )
