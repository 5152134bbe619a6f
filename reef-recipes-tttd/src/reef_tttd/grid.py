"""The step grid both recipes collect: reports of an external runner, one fixed unit per step.

A run is a grid: ``steps`` steps, each of ``groups_per_step`` comparison groups of
``rollouts_per_group`` rollouts. The runner reports each rollout with its cell in the report's
metadata, under the recipe's key (``metadata.tttd`` or ``metadata.sdpo``):
``{"step": s, "group": g, "rollout": i}``, zero-based. The grid is configured once, on the
record-to-sample stage (:class:`StepGridSamples`); the sample-to-job stage reads it from that
stage (P-STG-9, :class:`StepGridJobData`).

The collection group is the step: it spans every comparison group of the step (P-REP-10), so a
step trains as one unit, in one job. :class:`StepGrid` decides:

- a step is READY when every cell is in and every call of it was answered by one artifact;
- a complete step of mixed artifacts is DISCARDED and listed in ``status()`` under
  ``<key>.invariant_failures``: it will never train, and the runner must stop waiting for it
  (P-BUF-8);
- a step the runner left is abandoned: when a report opens a step ``open_steps`` or more ahead
  of an open step, that step can no longer complete (both methods sample each step from the
  weights the previous step trained) and its reports end as ``step_abandoned``;
- a report without a valid cell, outside the grid, without a score, or for a step that was
  decided or abandoned ends without training, counted by reason in ``<key>.refused_reports``.

A step is one fixed unit, so a job's data is one step: :class:`StepGridJobData` passes the
step's size as ``max_job_samples`` and a larger ``job_samples`` (or ``buffer_size``) is refused
with ``PluginConfigError`` (P-SIZE-4); without ``job_samples`` a job is one step. Each sample's
group becomes its comparison group within the step (the store groups the whole step), so the
component compares a rollout with the others of its group only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, ClassVar, Self

import attrs

from reef import (
    JSON,
    GroupDecision,
    JobStageBuild,
    PipelineContext,
    PluginConfigError,
    PluginSettings,
    Record,
    Record2Sample,
    Record2SampleSettings,
    Report,
    ReportContext,
    ReportGrouping,
    ReportSamples,
    Sample,
    Sample2Job,
    Sample2JobSettings,
    SampleAssembly,
    SkippedReport,
    config_option,
)

#: The reason a step's reports end when the runner left the step.
STEP_ABANDONED = "step_abandoned"


@attrs.frozen
class Cell:
    """One rollout's place in the grid."""

    step: int
    group: int
    rollout: int

    def as_json(self) -> JSON:
        return {"step": self.step, "group": self.group, "rollout": self.rollout}


@attrs.frozen
class StepGridSettings(Record2SampleSettings):
    """The step grid (configured once, P-STG-9), beside ``max_staleness``."""

    steps: int = config_option(
        help="how many steps the run has; a report of a later step is refused",
        validator=attrs.validators.gt(0),
    )
    groups_per_step: int = config_option(
        help="comparison groups per step (each: rollouts from one state of the runner)",
        validator=attrs.validators.gt(0),
    )
    rollouts_per_group: int = config_option(
        help="rollouts per comparison group", validator=attrs.validators.gt(0)
    )
    open_steps: int = config_option(
        default=1,
        help="how many steps may collect at once; a step this far behind a newer one is"
        " abandoned (1: the runner waits for each step to train, as TTT-Discover does)",
        validator=attrs.validators.gt(0),
    )


def _index(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


class StepGrid(ReportGrouping):
    """The grid's grouping (see the module's documentation): the step is the collection group.

    :param cell_key: the report metadata key of a rollout's cell.
    """

    def __init__(
        self,
        cell_key: str,
        steps: int,
        groups_per_step: int,
        rollouts_per_group: int,
        open_steps: int,
    ) -> None:
        self.cell_key = cell_key
        self.steps = steps
        self.groups_per_step = groups_per_step
        self.rollouts_per_group = rollouts_per_group
        self.open_steps = open_steps
        self.refused: Counter[str] = Counter()
        self.invariant_failures: list[JSON] = []
        self.abandoned: list[int] = []
        self.ready_steps: list[int] = []
        self._open: set[int] = set()
        self._filled: dict[int, int] = {}
        self._decided: set[int] = set()
        self._latest: int | None = None
        self._to_abandon: list[int] = []

    @property
    def step_samples(self) -> int:
        """The samples of one step: every cell of the grid's step."""
        return self.groups_per_step * self.rollouts_per_group

    def cell(self, report: Report) -> Cell | str:
        """The report's cell, or the reason it has none."""
        raw = report.metadata.get(self.cell_key)
        if not isinstance(raw, Mapping):
            return "no_cell"
        step, group, rollout = (_index(raw.get(k)) for k in ("step", "group", "rollout"))
        if step is None or group is None or rollout is None:
            return "bad_cell"
        if (
            step >= self.steps
            or group >= self.groups_per_step
            or rollout >= self.rollouts_per_group
        ):
            return "outside_grid"
        return Cell(step, group, rollout)

    def is_training_report(self, report: Report) -> bool:
        """A scored report with a cell of a step that may still complete; opening a step
        abandons the open steps ``open_steps`` or more behind it."""
        cell = self.cell(report)
        if isinstance(cell, str):
            self.refused[cell] += 1
            return False
        if report.score is None:
            self.refused["no_score"] += 1
            return False
        step = cell.step
        if step in self._decided:
            self.refused["step_decided"] += 1
            return False
        if step not in self._open:
            if self._latest is not None and step <= self._latest - self.open_steps:
                self.refused["step_behind"] += 1
                return False
            self._open.add(step)
            self._latest = step if self._latest is None else max(self._latest, step)
            for behind in sorted(s for s in self._open if s <= self._latest - self.open_steps):
                self._open.discard(behind)
                self._filled.pop(behind, None)
                self._decided.add(behind)
                self.abandoned.append(behind)
                self._to_abandon.append(behind)
        return True

    def take_abandoned(self) -> list[int]:
        """The steps abandoned since the last call, for the stage to end."""
        taken, self._to_abandon = self._to_abandon, []
        return taken

    def placement(self, context: ReportContext) -> tuple[Hashable | None, str | None]:
        """The step is the group; the cell ``group/rollout`` is the slot."""
        cell = self.cell(context.report)
        assert isinstance(cell, Cell)  # is_training_report took only reports with a cell
        return cell.step, f"{cell.group}/{cell.rollout}"

    def decide(self, key: Hashable, members: tuple[ReportContext, ...]) -> GroupDecision:
        """READY once every cell of the step is in, from one artifact; DISCARD (an invariant
        failure) when its cells came from several."""
        assert isinstance(key, int)
        if len(members) < self.step_samples:
            self._filled[key] = len(members)
            return GroupDecision.INCOMPLETE
        self._open.discard(key)
        self._filled.pop(key, None)
        self._decided.add(key)
        artifacts = sorted({str(call.artifact_id) for m in members for call in m.inferences})
        if len(artifacts) > 1:
            self.invariant_failures.append(
                {
                    "step": key,
                    "invariant": "every rollout of a step comes from one artifact",
                    "artifacts": artifacts,
                }
            )
            return GroupDecision.DISCARD
        self.ready_steps.append(key)
        return GroupDecision.READY

    def status(self) -> JSON:
        """What the runner reads: steps ready, abandoned and failed, open steps' cells in."""
        return {
            "grid": {
                "steps": self.steps,
                "groups_per_step": self.groups_per_step,
                "rollouts_per_group": self.rollouts_per_group,
            },
            "ready_steps": list(self.ready_steps),
            "open_steps": {str(step): n for step, n in sorted(self._filled.items())},
            "abandoned_steps": list(self.abandoned),
            "invariant_failures": list(self.invariant_failures),
            "refused_reports": dict(sorted(self.refused.items())),
        }


class StepGridSamples(ReportSamples):
    """The record-to-sample stage of a grid: each report one sample, each step one unit.

    :param steps: see :class:`StepGridSettings`; so are the other keyword arguments.
    """

    Settings: ClassVar[type[PluginSettings]] = StepGridSettings
    #: Extension point: the report metadata key of a rollout's cell, and of the stage's status.
    cell_key: ClassVar[str]

    def __init__(
        self,
        context: PipelineContext,
        *,
        steps: int,
        groups_per_step: int,
        rollouts_per_group: int,
        open_steps: int = 1,
        max_staleness: int = 0,
    ) -> None:
        self.grid = StepGrid(self.cell_key, steps, groups_per_step, rollouts_per_group, open_steps)
        super().__init__(context, self.grid, max_staleness=max_staleness)

    def push(self, record: Record) -> None:
        """As :class:`ReportSamples`, then end the steps a new step abandoned."""
        try:
            super().push(record)
        finally:
            for step in self.grid.take_abandoned():
                self.discard_open_group(step, STEP_ABANDONED)

    def make_sample(self, context: ReportContext) -> Sample | SkippedReport:
        """The rollout's trajectory (every reply trains) with its score, and its cell (and what
        :meth:`cell_metadata` adds) in the sample's metadata under :attr:`cell_key`."""
        cell = self.grid.cell(context.report)
        assert isinstance(cell, Cell)
        sample = SampleAssembly(accept_multi_turn_policy_samples=True).build(context)
        entry = {**cell.as_json(), **self.cell_metadata(context)}
        return attrs.evolve(sample, metadata={**sample.metadata, self.cell_key: entry})

    def cell_metadata(self, context: ReportContext) -> JSON:
        """Extension point: what the method keeps of the report beside its cell; none."""
        del context
        return {}

    def status(self) -> dict[str, Any]:
        """The base status, with the grid's under :attr:`cell_key`."""
        return {**super().status(), self.cell_key: self.grid.status()}


@attrs.frozen
class StepGridJobSettings(Sample2JobSettings):
    """The job size keys; ``job_samples`` defaults to one step of the grid."""


class StepGridJobData(Sample2Job):
    """The sample-to-job stage of a grid (see the module's documentation).

    :param max_job_samples: the samples of one step of the grid.
    :raises PluginConfigError: for a ``job_samples`` or ``buffer_size`` above one step.
    """

    Settings: ClassVar[type[Sample2JobSettings]] = StepGridJobSettings
    #: Extension point: the record-to-sample stage that owns this stage's grid.
    samples_class: ClassVar[type[StepGridSamples]]

    def __init__(
        self,
        context: PipelineContext,
        *,
        job_samples: int,
        max_job_samples: int,
        buffer_size: int | None = None,
    ) -> None:
        super().__init__(
            context,
            job_samples=job_samples,
            buffer_size=buffer_size,
            max_job_samples=max_job_samples,
        )
        if self.buffer_size > max_job_samples:
            raise PluginConfigError(
                type(self).__name__,
                "$.buffer_size",
                f"{self.buffer_size} is more than one step of the grid ({max_job_samples}):"
                " a job trains one step",
            )

    @classmethod
    def grid_of(cls, record2sample: Record2Sample) -> StepGrid:
        """The step grid of ``record2sample``, the stage that owns it (P-STG-9).

        :raises PluginConfigError: when the record-to-sample stage is not :attr:`samples_class`.
        """
        if not isinstance(record2sample, cls.samples_class):
            raise PluginConfigError(
                cls.__name__,
                "$",
                f"reads the step grid from {cls.samples_class.__name__}, but the record-to-sample"
                f" stage is {type(record2sample).__name__}: name {cls.samples_class.__name__}"
                " in pipeline.record2sample",
            )
        return record2sample.grid

    @classmethod
    def max_job_samples_for(cls, record2sample: Record2Sample) -> int | None:
        """One step of the grid (P-SIZE-4)."""
        return cls.grid_of(record2sample).step_samples

    @classmethod
    def from_settings(cls, settings: Sample2JobSettings, build: JobStageBuild) -> Self:
        """The stage with the grid's step size read from the record-to-sample stage; each other
        settings field is a keyword argument of the constructor."""
        step = cls.grid_of(build.record2sample).step_samples
        keywords = settings.as_keywords()
        keywords["job_samples"] = settings.job_samples or step
        return cls(build.context, max_job_samples=step, **keywords)

    def cell_of(self, sample: Sample) -> Mapping[str, Any]:
        """The sample's cell (and what its stage kept beside it).

        :raises ValueError: for a sample another stage made.
        """
        key = self.samples_class.cell_key
        cell = sample.metadata.get(key)
        if not isinstance(cell, Mapping) or "group" not in cell:
            raise ValueError(
                f"sample {sample.sample_id} has no {key} cell in its metadata: only"
                f" {self.samples_class.__name__} makes {type(self).__name__}'s samples"
            )
        return cell

    def in_comparison_groups(self, samples: Sequence[Sample]) -> list[Sample]:
        """Each sample in its comparison group within its step: ``<store group>/<group>``."""
        return [
            attrs.evolve(sample, group_id=f"{sample.group_id}/{self.cell_of(sample)['group']}")
            for sample in samples
        ]
