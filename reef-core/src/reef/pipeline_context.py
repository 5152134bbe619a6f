"""What a scenario's stages know of where they run: :class:`PipelineContext`, and what a stage
is built with (:class:`StageBuild`, :class:`JobStageBuild`).

The trainer builds one context per pipeline and hands it to both stages (``from_config``). A
stage reads it, never the trainer or the deployment; when the scenario changes something a
stage must follow (a mode switch, a wider report contract), the pipeline hands the stage an
updated context (``context_changed``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, Literal, TypeAlias

import attrs

from reef.core.task_stores import TaskStores

if TYPE_CHECKING:
    from reef.record2sample.stage import Record2Sample

TrainingMode: TypeAlias = Literal["auto", "manual"]

#: Resolves a class a deployment names: ``(kind, name) -> class``, where ``kind`` is a plugin
#: kind's value (``"task_generator"``) and ``name`` a registered name or ``module:Class``.
PluginResolver: TypeAlias = Callable[[str, str], type[Any]]

#: Every training mode a pipeline knows; ``auto``, the default, first (P-MODE-1).
TRAINING_MODES: Final[tuple[TrainingMode, ...]] = ("auto", "manual")


def check_training_mode(mode: str) -> TrainingMode:
    """``mode`` as a :data:`TrainingMode`.

    :raises ValueError: for a name that is no training mode (P-MODE-12).
    """
    if mode == "auto":
        return "auto"
    if mode == "manual":
        return "manual"
    raise ValueError(f"unknown training mode {mode!r}; expected one of {', '.join(TRAINING_MODES)}")


@attrs.frozen
class PipelineContext:
    """The scenario, trainer and settings that a pipeline's stages run with.

    :ivar scenario: the scenario's name.
    :ivar component: the training component this pipeline's trainer feeds; the trainer's name.
    :ivar trainers: the components of every trainer of the scenario (one per component). With
        more than one, ids the trainer makes carry its component name (P-SET-18, P-PIPE-11).
    :ivar training_mode: the initial training mode (P-MODE-1).
    :ivar task_storage: the scenario session's task stores; ``None`` without a session
        (P-LAYOUT-2).
    :ivar admitted_report_types: report types of other components that the scenario admits; a
        stage releases a report of such a type instead of failing it (P-PIPE-20).
    :ivar has_runtime_loader: the scenario has a runtime whose surface has a component that a
        runtime loads; without one no staleness check runs (P-STALE-10).
    :ivar resolve_plugin: resolves a class that a stage's config names (a task generator),
        through the loaded plugins; ``None`` when the stage was built without them, and then
        only a ``module:Class`` reference resolves.
    """

    scenario: str
    component: str
    trainers: tuple[str, ...] = ()
    training_mode: TrainingMode = attrs.field(default="auto", converter=check_training_mode)
    task_storage: TaskStores | None = None
    admitted_report_types: frozenset[str] = frozenset()
    has_runtime_loader: bool = False
    resolve_plugin: PluginResolver | None = attrs.field(default=None, eq=False, repr=False)

    @property
    def trainer(self) -> str:
        """The trainer's name in the sample store: its component's name."""
        return self.component

    @property
    def shares_scenario(self) -> bool:
        """True when the scenario has trainers of several components."""
        return len(set(self.trainers) | {self.component}) > 1

    def sample_id(self, set_id: str, index: int) -> str:
        """The id of sample ``index`` of record set ``set_id``: ``<trainer>:<s>:<i>``, or
        ``<s>:<i>`` for the only trainer of the scenario (P-SET-18)."""
        return self.made_sample_id(f"{set_id}:{index}")

    def made_sample_id(self, name: str) -> str:
        """The id of a sample the stage made from no record set: ``<name>``, or
        ``<component>:<name>`` in a scenario of several (P-PIPE-11)."""
        return f"{self.component}:{name}" if self.shares_scenario else name


@attrs.frozen
class StageBuild:
    """What a stage's :meth:`~reef.record2sample.stage.Record2Sample.from_settings` is given
    beside its parsed settings: the context it runs in, and the environment it may read (a
    judge's API key).

    One value rather than keyword arguments, so an override takes ``(settings, build)`` and
    what a build carries can grow without changing any stage's signature.
    """

    context: PipelineContext
    environ: Mapping[str, str] = attrs.field(factory=dict, repr=False)


@attrs.frozen
class JobStageBuild(StageBuild):
    """A sample-to-job stage's build: also the record-to-sample stage built before it, whose
    values it may read (the step grid, a judging) so that they are configured once (P-STG-9)."""

    record2sample: Record2Sample = attrs.field(kw_only=True)
