"""The stages of both recipes, on the step grid of :mod:`reef_tttd.grid` (P-LAYOUT-4).

**TTTD.** :class:`TTTDSamples` collects the runner's reports (cells in ``metadata.tttd``) into
steps; :class:`TTTDJobData` makes each step one job's data, each sample in its comparison group,
and names the advantage estimator in the job data's metadata (:class:`reef.AdvantageSettings`,
TTT-Discover's entropic weights by default): the component computes the advantages (nothing
numeric happens here).

**SDPO**: self-distillation with feedback as the teacher's context. The runner reports each
rollout like TTTD's, its cell in ``metadata.sdpo``, with its score and, when the environment
gives one, its textual ``feedback``. The teacher is the current policy itself, given what the
student did not see when it answered: its rollout's feedback, or the reply of a successful
sibling (another rollout of its comparison group that scored at least ``success_threshold``),
or both. :class:`SDPOSamples` keeps the rollout's prompt (the recorded request's messages, tools
and chat template arguments); :class:`SDPOJobData`, which sees the whole step, composes each
sample's teacher request with the core's :func:`reef.compose_teacher_request` and writes it into
``extra.reef.teacher`` (:func:`reef.with_teacher`), exactly as distillation does, so the training
component renders the teacher sequence: the teacher prompt followed by the student's reply
tokens. A sample with neither feedback nor a successful sibling gets no teacher request: its
teacher sequence is its own, so its distillation term is 0 and it trains the policy-gradient
term alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import attrs

from reef import (
    JSON,
    AdvantageSettings,
    JobData,
    PipelineContext,
    ReportContext,
    Sample,
    Sample2JobSettings,
    TrajectorySample,
    compose_teacher_request,
    config_option,
    with_teacher,
)
from reef_tttd.grid import StepGridJobData, StepGridJobSettings, StepGridSamples


class TTTDSamples(StepGridSamples):
    """TTTD's record-to-sample stage: the runner's rollouts, cells in ``metadata.tttd``."""

    cell_key: ClassVar[str] = "tttd"


@attrs.frozen
class TTTDJobDataSettings(StepGridJobSettings):
    """The job size keys and the advantage estimator."""

    advantage: AdvantageSettings = config_option(
        factory=lambda: AdvantageSettings(estimator="entropic"),
        help="the estimator the component computes advantages with: entropic (beta null: chosen"
        " per group so the reweighting is kl_target nats from uniform) or group_mean",
    )


class TTTDJobData(StepGridJobData):
    """TTTD's sample-to-job stage: one step per job, entropic advantages.

    :param advantage: written into each job data's metadata for the component.
    """

    Settings: ClassVar[type[Sample2JobSettings]] = TTTDJobDataSettings
    samples_class: ClassVar[type[StepGridSamples]] = TTTDSamples

    def __init__(
        self,
        context: PipelineContext,
        *,
        job_samples: int,
        max_job_samples: int,
        buffer_size: int | None = None,
        advantage: AdvantageSettings | None = None,
    ) -> None:
        super().__init__(
            context,
            job_samples=job_samples,
            max_job_samples=max_job_samples,
            buffer_size=buffer_size,
        )
        self.advantage = advantage or AdvantageSettings(estimator="entropic")

    def make_job_data(self, samples: Sequence[Sample], data_id: str) -> JobData:
        """The step's samples, each in its comparison group, with the advantage estimator."""
        metadata: dict[str, Any] = {"advantage": self.advantage.as_keywords()}
        return JobData(data_id, tuple(self.in_comparison_groups(samples)), metadata=metadata)


#: The sample metadata key (beside the cell) of the rollout's prompt.
REQUEST_KEY = "request"


class SDPOSamples(StepGridSamples):
    """SDPO's record-to-sample stage: the runner's rollouts, cells in ``metadata.sdpo``, each
    sample keeping its prompt for the teacher."""

    cell_key: ClassVar[str] = "sdpo"

    def cell_metadata(self, context: ReportContext) -> JSON:
        """The prompt of the rollout's last call: what its teacher request is composed from."""
        return {REQUEST_KEY: compose_teacher_request(context.ends[-1], calls=context.inferences)}


def _reply(sample: Sample) -> str | None:
    """The text of the last agent reply of ``sample``'s trajectory."""
    if not isinstance(sample, TrajectorySample):
        return None
    steps = sample.trajectory.get("steps") or []
    replies = [
        s.get("message") for s in steps if isinstance(s, Mapping) and s.get("source") == "agent"
    ]
    return replies[-1] if replies and isinstance(replies[-1], str) else None


def teacher_context(feedback: str | None, solution: str | None) -> str | None:
    """The text only the teacher sees: a successful attempt and the feedback on this one."""
    parts = []
    if solution is not None:
        parts.append(f"A successful attempt at this request:\n{solution}")
    if feedback:
        parts.append(f"Feedback on your attempt:\n{feedback}")
    if not parts:
        return None
    return "\n\n" + "\n\n".join(parts) + "\n\nWith this in mind, answer the request."


@attrs.frozen
class SDPOJobDataSettings(StepGridJobSettings):
    """The job size keys, when a sibling counts as successful, and the teacher's length."""

    success_threshold: float = config_option(
        1.0, help="a sibling whose score is at least this is a successful attempt for the teacher"
    )
    teacher_max_tokens: int | None = config_option(
        None,
        help="the longest teacher sequence (prompt and reply); a longer one is left out of the job",
        validator=attrs.validators.optional(attrs.validators.gt(0)),
    )


class SDPOJobData(StepGridJobData):
    """SDPO's sample-to-job stage: one step per job, each sample with its teacher request.

    :param success_threshold: see :class:`SDPOJobDataSettings`; so is ``teacher_max_tokens``.
    """

    Settings: ClassVar[type[Sample2JobSettings]] = SDPOJobDataSettings
    samples_class: ClassVar[type[StepGridSamples]] = SDPOSamples

    def __init__(
        self,
        context: PipelineContext,
        *,
        job_samples: int,
        max_job_samples: int,
        buffer_size: int | None = None,
        success_threshold: float = 1.0,
        teacher_max_tokens: int | None = None,
    ) -> None:
        super().__init__(
            context,
            job_samples=job_samples,
            max_job_samples=max_job_samples,
            buffer_size=buffer_size,
        )
        self.success_threshold = success_threshold
        self.teacher_max_tokens = teacher_max_tokens

    def solution_for(self, sample: Sample, group: Sequence[Sample]) -> str | None:
        """The reply of the best-scored other rollout of ``sample``'s group that succeeded
        (the first of them on a tie), or ``None``."""
        best: tuple[float, str] | None = None
        for sibling in group:
            if sibling is sample or not isinstance(sibling, TrajectorySample):
                continue
            reward, reply = sibling.reward, _reply(sibling)
            if reward is None or reward < self.success_threshold or reply is None:
                continue
            if best is None or reward > best[0]:
                best = (reward, reply)
        return None if best is None else best[1]

    def make_job_data(self, samples: Sequence[Sample], data_id: str) -> JobData:
        """The step's samples, each in its comparison group, with its teacher request."""
        grouped = self.in_comparison_groups(samples)
        groups: dict[str | None, list[Sample]] = {}
        for sample in grouped:
            groups.setdefault(sample.group_id, []).append(sample)
        taught: list[Sample] = []
        teachers = 0
        for sample in grouped:
            feedback = sample.feedback if isinstance(sample, TrajectorySample) else None
            context = teacher_context(feedback, self.solution_for(sample, groups[sample.group_id]))
            if context is None or not isinstance(sample, TrajectorySample):
                taught.append(sample)
                continue
            request = self.cell_of(sample)[REQUEST_KEY]
            teacher = compose_teacher_request(
                request, context=context, max_tokens=self.teacher_max_tokens
            )
            taught.append(with_teacher(sample, teacher=teacher))
            teachers += 1
        metadata: dict[str, Any] = {"teachers": teachers}
        return JobData(data_id, tuple(taught), metadata=metadata)
