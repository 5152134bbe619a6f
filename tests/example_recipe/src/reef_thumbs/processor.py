"""The stages of the thumbs recipe: ``ThumbsSamples`` (record-to-sample) with its grouping,
and ``ThumbsJobData`` (sample-to-job). A recipe package keeps its own stages here, in its
``processor`` module, and names them in its ``recipe`` module (P-LAYOUT-4).

A user rates an agent's reply with a thumb; the client reports it on the reply's call with
``metadata.thumbs`` set to ``"up"`` or ``"down"`` (and, optionally, ``metadata.rater``). Each
such report becomes one trajectory sample that trains the rated reply, with reward +1 for up and
-1 for down. Replies in the same conversation (the ``conversation`` tag of the rated call, which
the agent sets with the ``x-reef-tag-conversation`` header) are compared with each other: once
``group_size`` of them are rated they train together as one group, so the training component can
centre each reward on its group's mean. A group whose thumbs all agree has nothing to compare
and is discarded. A reply outside any conversation trains by itself.

Everything else (which calls a report covers, one set per record, groups kept whole, what ends
without training and why) is ``ReportSamples``' work, not the recipe's.

``ThumbsJobData`` hands the buffer to the training component as it is, each sample with the
group the store gave it, and tells the component what it holds. It computes no advantage and
no loss: those belong to the component's objective (P-STG-15).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import ClassVar, Final, Self

import attrs

from reef import (
    GroupDecision,
    JobData,
    PluginSettings,
    Record2SampleSettings,
    Report,
    ReportContext,
    ReportGrouping,
    ReportSamples,
    Sample,
    Sample2Job,
    SampleAssembly,
    SkippedReport,
    StageBuild,
    TrajectorySample,
    config_option,
)

#: The report metadata key that carries the thumb.
THUMBS_KEY: Final = "thumbs"
#: The report metadata key that names who rated; one rater counts once per group.
RATER_KEY: Final = "rater"
#: The reward of each thumb.
REWARDS: Final[Mapping[str, float]] = {"up": 1.0, "down": -1.0}
#: Why a report whose thumb is neither "up" nor "down" ends without training.
UNREADABLE_THUMB: Final = "unreadable_thumb"


def thumb_reward(report: Report) -> float | None:
    """The reward of ``report``'s thumb; ``None`` when it carries none, or not "up"/"down"."""
    thumb = report.metadata.get(THUMBS_KEY)
    return REWARDS.get(thumb) if isinstance(thumb, str) else None


@attrs.frozen
class ThumbsSamplesSettings(Record2SampleSettings):
    """``ThumbsSamples``' keys, beside ``max_staleness`` (a thumb rates tokens the served model
    sampled, so old replies go stale)."""

    group_size: int = config_option(
        default=2,
        help="how many rated replies of one conversation train together",
        validator=attrs.validators.gt(0),
    )
    conversation_tag: str = config_option(
        default="conversation",
        help="the call tag (x-reef-tag-<name> header) that names a reply's conversation",
    )
    discard_unanimous: bool = config_option(
        default=True,
        help="discard a full group whose thumbs all agree: it has no contrast to learn from",
    )


class ThumbsGrouping(ReportGrouping):
    """The recipe's decisions about reports (see the module docstring).

    :param group_size: members of a complete group.
    :param conversation_tag: the call tag that keys a group.
    :param discard_unanimous: discard a complete group whose thumbs all agree.
    """

    def __init__(self, *, group_size: int, conversation_tag: str, discard_unanimous: bool) -> None:
        self.group_size = group_size
        self.conversation_tag = conversation_tag
        self.discard_unanimous = discard_unanimous

    def is_training_report(self, report: Report) -> bool:
        """Only a report that carries a thumb is this recipe's data (P-REP-8)."""
        return THUMBS_KEY in report.metadata

    def placement(self, context: ReportContext) -> tuple[Hashable | None, str | None]:
        """The rated call's conversation, and the rater as the slot (P-REP-9): a rater's second
        thumb in one group loses to the first."""
        conversation = context.ends[-1].tags.get(self.conversation_tag)
        if conversation is None:
            return None, None
        rater = context.report.metadata.get(RATER_KEY)
        return conversation, None if rater is None else str(rater)

    def decide(self, key: Hashable, members: tuple[ReportContext, ...]) -> GroupDecision:
        """INCOMPLETE below ``group_size``; then READY, or DISCARD when every thumb agrees
        (P-REP-10). Members are reports whose sample was made, so every thumb is readable."""
        del key
        if len(members) < self.group_size:
            return GroupDecision.INCOMPLETE
        rewards = {thumb_reward(member.report) for member in members}
        if self.discard_unanimous and len(rewards) == 1:
            return GroupDecision.DISCARD
        return GroupDecision.READY


class ThumbsSamples(ReportSamples[ThumbsSamplesSettings]):
    """The record-to-sample stage of the thumbs recipe: one sample per readable thumb."""

    Settings: ClassVar[type[PluginSettings]] = ThumbsSamplesSettings

    @classmethod
    def from_settings(cls, settings: ThumbsSamplesSettings, build: StageBuild) -> Self:
        """The stage with its grouping, built from :class:`ThumbsSamplesSettings` (P-STG-10),
        and ``max_staleness`` (P-STG-12)."""
        grouping = ThumbsGrouping(
            group_size=settings.group_size,
            conversation_tag=settings.conversation_tag,
            discard_unanimous=settings.discard_unanimous,
        )
        return cls(build.context, grouping, max_staleness=settings.max_staleness)

    def make_sample(self, context: ReportContext) -> Sample | SkippedReport:
        """The rated reply (the earlier turns are its context) with the thumb's reward (P-REP-5);
        a thumb that is neither "up" nor "down" skips the report (P-REP-11)."""
        reward = thumb_reward(context.report)
        if reward is None:
            return SkippedReport(UNREADABLE_THUMB)
        sample: TrajectorySample = SampleAssembly().build(context)
        return attrs.evolve(sample, reward=reward)


class ThumbsJobData(Sample2Job):
    """The buffer's rated replies as one job; a weight recipe, so the deployment sets
    ``job_samples`` (P-SIZE-2). The base class's settings (``job_samples``, ``buffer_size``)
    are all it takes. It takes no uploads: an uploaded trajectory carries no thumb."""

    def make_job_data(self, samples: Sequence[Sample], data_id: str) -> JobData:
        """Every sample, in store order, keeping its group (P-STG-3, P-REP-6), with counts the
        component can log."""
        rewards = [s.reward for s in samples if isinstance(s, TrajectorySample)]
        groups = {sample.group_id for sample in samples if sample.group_id is not None}
        return JobData(
            data_id,
            tuple(samples),
            metadata={
                "objective": "group_relative",
                "thumbs_up": rewards.count(REWARDS["up"]),
                "thumbs_down": rewards.count(REWARDS["down"]),
                "groups": len(groups),
            },
        )
