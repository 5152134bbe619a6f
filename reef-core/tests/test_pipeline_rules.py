"""TrainingPipeline and its stages, rule by rule, on the real sample store (SQLite; PostgreSQL
with REEF_TEST_DATABASE_URL): the rules no broader pipeline test names."""

from __future__ import annotations

import gc
import importlib
import importlib.util
import inspect
import sys
import threading
import types
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest

from reef.core.deployment import PipelineSection, RecipeSection, ScenarioSection, StageSection
from reef.core.job_data import JobData, Sample, TrainingInstruction
from reef.core.trajectory_index import TrajectoryIndex
from reef.pipeline_context import PipelineContext
from reef.plugins import PluginKind, Plugins, UnknownPluginError
from reef.recipe import PipelineSpec, Recipe
from reef.recipe.grouped.processor import GroupedJobData
from reef.record2sample import ReportSamples, TrajectorySamples
from reef.record2sample.stage import Record2Sample
from reef.sample2job.stage import Sample2Job
from reef.storage import Database, RecordStore, TrainerSamples
from reef.testing import inline_plugins
from reef.testing.components import RecordingComponent
from reef.train.pipeline import TrainingPipeline
from reef.train.stages import build_stages
from reef.train.trainer import Trainer, TrainerParts, TrainerSettings


def one_sample_jobs(
    database: Database,
    record2sample: Callable[[PipelineContext], Record2Sample],
    sample2job: type[GroupedJobData] = GroupedJobData,
    **options: Any,
) -> TrainingPipeline:
    """A pipeline of scenario ``s`` on ``database``: the stage ``record2sample`` builds, and
    ``sample2job`` making jobs of one sample."""
    context = PipelineContext("s", "c")
    return TrainingPipeline(
        record2sample(context),
        sample2job(context, job_samples=1),
        samples=TrainerSamples(database, "s"),
        context=context,
        **options,
    )


def _load(name: str) -> types.ModuleType:
    """A sibling test module, loaded by path (test folders are not packages)."""
    spec = importlib.util.spec_from_file_location(f"_{name}", Path(__file__).with_name(name))
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(f"_{name}", module)
    spec.loader.exec_module(module)
    return module


_training = _load("test_pipeline_training.py")
build, feed, ids, train_counts = (
    _training.build,
    _training.feed,
    _training.ids,
    _training.train_counts,
)
call, report = _training.call, _training.report


def test_produce_advances_the_stage_to_now_and_stores_ready_units(
    storage_database: Database,
) -> None:
    """rule: P-PIPE-4 P-STG-6 produce() calls the stage's advance(now) with the pipeline's clock,
    then stores the samples of each unit that became ready; before the set is due nothing is
    stored."""
    now = [14.0]
    advanced: list[float] = []

    class Recording(TrajectorySamples):
        def advance(self, now: float) -> None:
            advanced.append(now)
            super().advance(now)

    pipeline = one_sample_jobs(
        storage_database,
        lambda context: Recording(context, trajectory_idle_seconds=10),
        clock=lambda: now[0],
    )
    store = TrainerSamples(storage_database, "s")
    pipeline.push(call("c1", 1, at=0))
    pipeline.push(call("c2", 2, at=5))
    pipeline.produce()
    assert advanced == [14.0]
    assert store.untrained("c") == []
    now[0] = 15.0
    pipeline.produce()
    assert advanced == [14.0, 15.0]
    assert [s.id for s in store.untrained("c")] == ["c2:0"]  # the set is named by its last call
    assert store.consumed_record_ids("c") == {"c1", "c2"}


def test_the_record_to_sample_stage_never_reaches_the_pipeline(
    storage_database: Database,
) -> None:
    """rule: P-STG-5 the record-to-sample stage never calls the pipeline: it is built without
    one, and nothing reachable from the stage after a full push/produce/acknowledge cycle is the
    pipeline (the pipeline pulls units from the stage and tells it to consume them)."""
    for parameters in (
        inspect.signature(Record2Sample.__init__).parameters,
        inspect.signature(Record2Sample.from_config).parameters,
    ):
        assert not any("pipeline" in name for name in parameters)
    pipeline = build(storage_database, job_samples=1)
    feed(pipeline, "a")
    pipeline.produce()
    data = pipeline.build_job_data(1)
    assert data is not None
    pipeline.acknowledge(data.id)
    seen: set[int] = set()
    todo: list[Any] = [pipeline.record2sample]
    while todo:
        item = todo.pop()
        if id(item) in seen or isinstance(item, type | types.ModuleType | types.FunctionType):
            continue
        seen.add(id(item))
        assert item is not pipeline, "the record-to-sample stage holds its pipeline"
        todo.extend(gc.get_referents(item))


def test_close_closes_both_stages(storage_database: Database) -> None:
    """rule: P-PIPE-15 close() closes both stages with the timeout; a TimeoutError of the
    record-to-sample stage propagates after the sample-to-job stage was closed too."""
    closed: list[tuple[str, float | None]] = []

    class ClosingSamples(ReportSamples):
        fail = False

        def close(self, timeout: float | None = None) -> None:
            closed.append(("record2sample", timeout))
            if self.fail:
                raise TimeoutError("worker still busy")

    class ClosingJobData(GroupedJobData):
        def close(self, timeout: float | None = None) -> None:
            closed.append(("sample2job", timeout))

    pipeline = one_sample_jobs(storage_database, ClosingSamples, ClosingJobData)
    record2sample = pipeline.record2sample
    assert isinstance(record2sample, ClosingSamples)
    pipeline.close(2.5)
    assert closed == [("record2sample", 2.5), ("sample2job", 2.5)]
    closed.clear()
    record2sample.fail = True
    with pytest.raises(TimeoutError, match="still busy"):
        pipeline.close(1.0)
    assert closed == [("record2sample", 1.0), ("sample2job", 1.0)]


def test_close_raises_the_first_error_and_notes_the_second(storage_database: Database) -> None:
    """rule: P-PIPE-15 when both stages fail to close, the record-to-sample stage's error is
    the one raised (the sample-to-job stage's must not replace it); the other is noted on it."""

    class StuckSamples(ReportSamples):
        def close(self, timeout: float | None = None) -> None:
            raise TimeoutError("worker still busy")

    class FailingJobData(GroupedJobData):
        def close(self, timeout: float | None = None) -> None:
            raise OSError("could not release")

    pipeline = one_sample_jobs(storage_database, StuckSamples, FailingJobData)
    with pytest.raises(TimeoutError, match="still busy") as caught:
        pipeline.close(1.0)
    assert caught.value.__notes__ == [
        "closing another stage also failed: OSError: could not release"
    ]


def test_status_metrics_and_background_work_are_the_stages(storage_database: Database) -> None:
    """rule: P-PIPE-14 the pipeline merges both stages' status() and metrics();
    background_jobs_running() is the record-to-sample stage's."""
    busy = [True]

    class Busy(ReportSamples):
        def status(self) -> dict[str, Any]:
            return {**super().status(), "r2s_entry": 1}

        def metrics(self) -> dict[str, float]:
            return {"r2s_metric": 1.5}

        def background_jobs_running(self) -> bool:
            return busy[0]

    class Reporting(GroupedJobData):
        def status(self) -> dict[str, Any]:
            return {"s2j_entry": 2}

        def metrics(self) -> dict[str, float]:
            return {"s2j_metric": 2.5}

    pipeline = one_sample_jobs(storage_database, Busy, Reporting)
    status = pipeline.status()
    assert (status["r2s_entry"], status["s2j_entry"]) == (1, 2)
    assert pipeline.metrics() == {"r2s_metric": 1.5, "s2j_metric": 2.5}
    assert pipeline.background_jobs_running()
    busy[0] = False
    assert not pipeline.background_jobs_running()


def test_releasable_records_and_release(storage_database: Database) -> None:
    """rule: P-PIPE-16 releasable_record_ids() gives the records whose samples are stored (or
    that ended) and that no held set references; a call still waiting for its report is not
    releasable; release_records frees them after the commit."""
    pipeline = build(storage_database, job_samples=1)
    feed(pipeline, "a")
    pipeline.push(call("b.c", session="b"))  # held: no report yet
    assert set(pipeline.releasable_record_ids()) == {"a", "a.c"}
    data = pipeline.build_job_data(1)
    assert data is not None
    released = pipeline.releasable_record_ids()
    pipeline.acknowledge(data.id, released_record_ids=released)
    assert pipeline.releasable_record_ids() == ()
    pipeline.push(report("b", "b.c"))
    assert set(pipeline.releasable_record_ids()) == {"b", "b.c"}


def test_commits_retain_bodies_and_consumption_survives_a_restart(
    storage_database: Database,
) -> None:
    """rule: P-PIPE-17 a commit keeps the stored bodies (records and samples stay readable);
    the stored consumption keeps a restarted pipeline, replaying every record, from training
    them again."""
    records = RecordStore(storage_database, "s")
    pushed = [call("a.c", session="a"), report("a", "a.c")]
    records.append_calls([pushed[0]], TrajectoryIndex(), None)
    records.append(pushed[1])
    pipeline = build(storage_database, job_samples=1)
    pipeline.push_many([s.record for s in records.read_after(None) if s.record is not None])
    data = pipeline.build_job_data(1)
    assert ids(data) == ["a:0"]
    assert data is not None
    pipeline.acknowledge(data.id, released_record_ids=pipeline.releasable_record_ids())
    store = TrainerSamples(storage_database, "s")
    (kept,) = store.get(["a:0"])
    assert kept.body
    assert [s.record for s in records.read_after(None)] == pushed
    restarted = build(storage_database, job_samples=1)
    restarted.push_many(pushed)
    restarted.produce()
    assert restarted.buffer() == ()
    assert restarted.build_job_data(1) is None
    assert train_counts(storage_database, "c") == {"a:0": 1}


def test_the_buffer_is_computed_the_same_way_in_both_modes(storage_database: Database) -> None:
    """rule: P-BUF-1 the same stored samples give the same buffer in auto and in manual (every
    sample chosen): same store order, the stale sample left out with its group in both."""
    pipeline = build(storage_database, job_samples=1, buffer_size=10, group_size=2, max_staleness=1)
    pipeline.observe_serving_artifact_id("old")
    feed(pipeline, "a", artifact="old", group="g")
    feed(pipeline, "b", artifact="new", group="g")
    feed(pipeline, "c", artifact="new")
    feed(pipeline, "d", artifact="new")
    pipeline.observe_serving_artifact_id("new")
    pipeline.observe_serving_artifact_id("newer")  # a is stale: a and b wait
    auto = pipeline.buffer()
    assert [s.sample_id for s in auto] == ["c:0", "d:0"]
    pipeline.training_mode = "manual"
    pipeline.insert_into_buffer(["a:0", "b:0", "c:0", "d:0"])
    assert pipeline.buffer() == auto


def test_push_storage_and_acknowledgement_are_the_same_in_both_modes(
    storage_database: Database,
) -> None:
    """rule: P-MODE-2 P-MODE-11 records pushed in manual are stored exactly as in auto, and an
    acknowledgement in manual counts the trained samples in the same store as in auto."""
    auto = build(storage_database, job_samples=1, component="x", trainers=("x", "y"))
    manual = build(
        storage_database, job_samples=1, component="y", trainers=("x", "y"), mode="manual"
    )
    for pipeline in (auto, manual):
        feed(pipeline, "a")
    store = TrainerSamples(storage_database, "s")
    assert [s.id for s in store.untrained("x")] == ["x:a:0"]
    assert [s.id for s in store.untrained("y")] == ["y:a:0"]
    assert store.consumed_record_ids("x") == store.consumed_record_ids("y") == {"a", "a.c"}
    data = auto.build_job_data(1)
    assert data is not None
    assert auto.acknowledge(data.id) == ("sample:x:a:0",)
    manual.insert_into_buffer(["y:a:0"])
    manual.queue_instructions([TrainingInstruction("q1")])
    instructed = manual.build_job_data(1)
    assert instructed is not None
    assert manual.acknowledge(instructed.id) == ("sample:y:a:0", "instruction:q1")
    assert train_counts(storage_database, "x") == {"x:a:0": 1}
    assert train_counts(storage_database, "y") == {"y:a:0": 1}


def test_reads_instructions_runs_an_instruction_with_an_empty_buffer(
    storage_database: Database,
) -> None:
    """rule: P-MODE-6 a stage that reads instructions runs a queued instruction at once in
    manual, even with an empty manual buffer; one that does not waits for a sample."""

    class Instructed(GroupedJobData):
        reads_instructions = True

    for stage, runs in ((Instructed, True), (GroupedJobData, False)):
        context = PipelineContext("s", f"c-{stage.__name__}", training_mode="manual")
        pipeline = TrainingPipeline(
            ReportSamples(context),
            stage(context, job_samples=1),
            samples=TrainerSamples(storage_database, "s"),
            context=context,
        )
        pipeline.queue_instructions([TrainingInstruction("q1", text="write tests")])
        assert pipeline.buffer() == ()
        assert pipeline.ready(1) is runs
        data = pipeline.build_job_data(1)
        if not runs:
            assert data is None
            continue
        assert data is not None
        assert data.id == "s:instruction:q1"
        assert data.samples == ()
        assert data.request == TrainingInstruction("q1", text="write tests")
        assert pipeline.acknowledge(data.id) == ("instruction:q1",)
        assert pipeline.buffered_requests == 0


def test_make_job_data_is_given_no_model_and_no_trainer(storage_database: Database) -> None:
    """rule: P-MODE-9 make_job_data must not call models or train: it receives only the samples
    and the data id, the stage is built from its config, context and record-to-sample stage
    (no model client, no component), and the context carries none; job data is built with no
    component or engine present."""
    assert list(inspect.signature(Sample2Job.make_job_data).parameters) == [
        "self",
        "samples",
        "data_id",
    ]
    assert list(inspect.signature(Sample2Job.from_config).parameters) == [
        "config",
        "context",
        "record2sample",
        "environ",
    ]
    assert {f.name for f in attrs.fields(PipelineContext)} == {
        "scenario",
        "component",
        "trainers",
        "training_mode",
        "task_storage",
        "admitted_report_types",
        "has_runtime_loader",
        "resolve_plugin",  # resolves the classes a config names: no model, no component
    }
    given: list[tuple[tuple[str, ...], str]] = []

    class Seen(GroupedJobData):
        def make_job_data(self, samples: Sequence[Sample], data_id: str) -> JobData:
            given.append((tuple(str(s.sample_id) for s in samples), data_id))
            return super().make_job_data(samples, data_id)

    pipeline = one_sample_jobs(storage_database, ReportSamples, Seen)
    feed(pipeline, "a")
    data = pipeline.build_job_data(1)
    assert data is not None
    assert given == [(("a:0",), data.id)]


def test_report_samples_defaults_train_every_report_by_itself() -> None:
    """rule: P-REP-4 ReportSamples(context, grouping=None, *, exclusive_sources=False,
    max_staleness=0); without a grouping every valid report is its own unit with one sample and
    no group."""
    parameters = inspect.signature(ReportSamples.__init__).parameters
    assert [(p.name, p.kind, p.default) for p in list(parameters.values())[1:]] == [
        ("context", inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.empty),
        ("grouping", inspect.Parameter.POSITIONAL_OR_KEYWORD, None),
        ("exclusive_sources", inspect.Parameter.KEYWORD_ONLY, False),
        ("max_staleness", inspect.Parameter.KEYWORD_ONLY, 0),
    ]
    stage = ReportSamples(PipelineContext("s", "c"))
    for name in ("a", "b"):
        stage.push(call(f"{name}.c", session=name))
        stage.push(report(name, f"{name}.c"))
    units = stage.ready_units()
    assert [set(u.record_ids) for u in units] == [{"a", "a.c"}, {"b", "b.c"}]
    for unit in units:
        ((_, samples),) = stage.unit_samples(unit)
        assert len(samples) == 1
        assert samples[0].group_id is None


def test_report_samples_handle_duplicate_reports_and_consumption(
    storage_database: Database,
) -> None:
    """rule: P-REP-12 the stage, not the recipe, deduplicates report ids (the same report pushed
    again trains once), consumes what the pipeline stored and retains nothing it released."""
    pipeline = build(storage_database, job_samples=1, buffer_size=5)
    feed(pipeline, "a")
    pipeline.push(report("a", "a.c"))  # the same report id again
    assert [s.sample_id for s in pipeline.buffer()] == ["a:0"]
    assert pipeline.record2sample.ready_units() == ()  # consumed once stored
    data = pipeline.build_job_data(1)
    assert data is not None
    pipeline.acknowledge(data.id, released_record_ids=pipeline.releasable_record_ids())
    assert pipeline.record2sample.releasable_record_ids() == ()
    assert pipeline.record2sample.ended_records() == {}


def test_recipes_do_not_subclass_the_pipeline() -> None:
    """rule: P-PIPE-1 TrainingPipeline is the one object a trainer gives records to and takes
    job data from: the trainer's parts hold a TrainingPipeline, and no installed recipe
    distribution subclasses it."""
    from importlib.metadata import entry_points

    from reef.train.trainer import TrainerParts

    assert attrs.fields(TrainerParts).pipeline.type in (TrainingPipeline, "TrainingPipeline")
    for entry in entry_points(group="reef.plugins"):
        entry.load()  # every installed distribution's plugin, with its recipe and stages
    assert TrainingPipeline.__subclasses__() == []


def test_stage_packages_layout() -> None:
    """rule: P-LAYOUT-1 stage packages reef/record2sample/ and reef/sample2job/, the pipeline in
    reef/train/pipeline.py, the context in reef/pipeline_context.py."""
    import reef.pipeline_context
    import reef.record2sample
    import reef.sample2job
    import reef.train.pipeline

    root = Path(reef.pipeline_context.__file__).parent
    assert Path(reef.pipeline_context.__file__) == root / "pipeline_context.py"
    assert Path(reef.train.pipeline.__file__) == root / "train" / "pipeline.py"
    assert Path(reef.record2sample.__file__) == root / "record2sample" / "__init__.py"
    assert Path(reef.sample2job.__file__) == root / "sample2job" / "__init__.py"
    assert reef.train.pipeline.TrainingPipeline is TrainingPipeline
    assert reef.pipeline_context.PipelineContext is PipelineContext
    assert Record2Sample.__module__.startswith("reef.record2sample.")
    assert Sample2Job.__module__.startswith("reef.sample2job.")


def test_the_trainer_calls_the_pipeline_on_its_thread_under_its_lock(
    storage_database: Database,
) -> None:
    """rule: P-PIPE-2 P-SLOW-1 the trainer calls the pipeline, and so the stages' push, advance,
    make_samples and make_job_data, on its own thread while it holds its lock."""
    calls: list[tuple[str, str, bool]] = []
    holder: list[Trainer] = []

    def note(method: str) -> None:
        # The lock is held by the calling thread when no other thread can take it now.
        free: list[bool] = []
        probe = threading.Thread(target=lambda: free.append(_try_lock(holder[0].lock)))
        probe.start()
        probe.join()
        calls.append((method, threading.current_thread().name, not free[0]))

    class Noting(ReportSamples):
        def push(self, record: Any) -> None:
            note("push")
            super().push(record)

        def advance(self, now: float) -> None:
            note("advance")
            super().advance(now)

        def make_samples(self, record_set: Any) -> Any:
            note("make_samples")
            return super().make_samples(record_set)

    class NotingJobData(GroupedJobData):
        def make_job_data(self, samples: Sequence[Sample], data_id: str) -> JobData:
            note("make_job_data")
            return super().make_job_data(samples, data_id)

    records = RecordStore(storage_database, "s")
    records.append_calls([call("a.c", session="a")], TrajectoryIndex(), None)
    records.append(report("a", "a.c"))
    component = RecordingComponent()

    def parts(database: Database) -> TrainerParts:
        pipeline = one_sample_jobs(database, Noting, NotingJobData)
        return TrainerParts(pipeline, component)  # type: ignore[arg-type]

    trainer = Trainer(
        "s", "c", database=storage_database, build=parts, settings=TrainerSettings(0.05)
    )
    holder.append(trainer)
    trainer.start()
    try:
        assert component.all_submitted.wait(30)
    finally:
        trainer.stop(30)
    assert {method for method, _, _ in calls} == {
        "push",
        "advance",
        "make_samples",
        "make_job_data",
    }
    assert {(thread, locked) for _, thread, locked in calls} == {("reef-trainer-s-c", True)}


def _try_lock(lock: Any) -> bool:
    taken = bool(lock.acquire(blocking=False))
    if taken:
        lock.release()
    return taken


class _OwnedSamples(ReportSamples):
    """A record-to-sample stage that owns a value its sample-to-job stage needs."""

    group_size = 3


class _ReadingJobData(GroupedJobData):
    """Reads the group size from the record-to-sample stage it is built with, never from its
    own config."""

    def __init__(self, context: PipelineContext, *, job_samples: int, group_size: int) -> None:
        super().__init__(context, job_samples=job_samples)
        self.group_size = group_size
        self.source: Record2Sample | None = None

    @classmethod
    def from_config(
        cls,
        config: Mapping[str, Any] | None,
        *,
        context: PipelineContext,
        record2sample: Record2Sample,
        environ: Mapping[str, str],
    ) -> _ReadingJobData:
        built = GroupedJobData.from_config(
            config, context=context, record2sample=record2sample, environ=environ
        )
        assert isinstance(record2sample, _OwnedSamples)
        made = cls(context, job_samples=built.job_samples, group_size=record2sample.group_size)
        made.source = record2sample
        return made


class _Recipe(Recipe):
    @classmethod
    def pipeline_spec(cls) -> PipelineSpec:
        return PipelineSpec(record2sample="OwnedSamples", sample2job="ReadingJobData")


def test_the_sample_to_job_stage_reads_the_record_to_sample_stages_values() -> None:
    """rule: P-STG-9 P-STG-8 build_stages builds the record-to-sample stage first and hands that
    very stage to the sample-to-job stage's from_config, which reads the values the other stage
    owns from it (configured once, in the record-to-sample stage)."""
    plugins = inline_plugins(
        recipes={"owned": _Recipe},
        record2sample={"OwnedSamples": _OwnedSamples},
        sample2job={"ReadingJobData": _ReadingJobData},
    )
    scenario = ScenarioSection(
        recipe=RecipeSection(class_="owned"),
        pipeline=PipelineSection(sample2job=StageSection(config={"job_samples": 2})),
    )
    record2sample, sample2job = build_stages(
        "s", scenario, plugins=plugins, context=PipelineContext("s", "c"), environ={}
    )
    assert isinstance(record2sample, _OwnedSamples)
    assert isinstance(sample2job, _ReadingJobData)
    assert sample2job.source is record2sample  # the very stage built first, not a copy
    assert (sample2job.job_samples, sample2job.group_size) == (2, 3)


def test_installed_recipes_keep_their_own_stages_in_their_processor_module() -> None:
    """rule: P-LAYOUT-4 for every installed recipe that brings its own stages, those stages live
    in the processor module of the recipe's package, and the recipe module names them in
    pipeline_spec() (stages from reef itself are shared, not a method's own)."""
    plugins = Plugins(blocked=())
    plugins.load()
    checked = 0
    for name in plugins.names(PluginKind.RECIPE):
        recipe = plugins.resolve(PluginKind.RECIPE, name)
        package = recipe.__module__.rsplit(".", 1)[0]
        if package.split(".")[0] == "reef" or not hasattr(recipe, "pipeline_spec"):
            continue
        spec = recipe.pipeline_spec()
        for kind, stage_name in (
            (PluginKind.RECORD2SAMPLE, spec.record2sample),
            (PluginKind.SAMPLE2JOB, spec.sample2job),
        ):
            try:
                stage = plugins.resolve(kind, stage_name)
            except UnknownPluginError:
                continue  # a recipe whose stages are not built yet (distill, spade)
            if stage.__module__.split(".")[0] != package.split(".")[0]:
                continue  # a stage shared from another distribution
            assert recipe.__module__ == f"{package}.recipe", recipe
            assert stage.__module__ == f"{package}.processor", (name, stage)
            checked += 1
    if checked == 0:
        pytest.skip("no installed recipe brings its own stages")
