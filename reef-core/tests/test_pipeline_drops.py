"""What will never train is counted by reason, durably, and shown in the pipeline's status.

decision: docs/decisions.md#counting-what-did-not-train: every record or sample that will
never train is counted by reason per scenario and trainer, durably, and shown in status. The
pipeline counts a record the stage ended in the transaction of the commit that names it
(P-STALE-1), so a crash can neither lose nor double a count.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from reef.storage import Database, DropCounters, NewSample, RecordStore, TrainerSamples
from reef.storage.records import RecordCapacity
from reef.train.pipeline import TrainingPipeline

_spec = importlib.util.spec_from_file_location(
    "_pipeline_tests", Path(__file__).with_name("test_pipeline_training.py")
)
assert _spec is not None
assert _spec.loader is not None
_pipeline_tests = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("_pipeline_tests", _pipeline_tests)
_spec.loader.exec_module(_pipeline_tests)
build, feed, call, report = (
    _pipeline_tests.build,
    _pipeline_tests.feed,
    _pipeline_tests.call,
    _pipeline_tests.report,
)


def _push_drops(pipeline: TrainingPipeline) -> None:
    """An aborted set (report and call), and a report whose slot was taken."""
    pipeline.push(call("x.c", session="x", finish="abort"))
    pipeline.push(report("x", "x.c"))
    feed(pipeline, "a", group="g", slot="1")
    feed(pipeline, "b", group="g", slot="1")  # slot 1 taken: b ends, its call stays held
    feed(pipeline, "d", group="g", slot="2")  # the group of a and d is ready


def _commit(pipeline: TrainingPipeline) -> None:
    data = pipeline.build_job_data(1)
    assert data is not None
    pipeline.acknowledge(data.id, released_record_ids=pipeline.releasable_record_ids())


def test_ended_records_are_counted_at_their_commit_once(storage_database: Database) -> None:
    """rule: P-STALE-1 P-SET-10 an ended record is counted under its reason in the commit that
    names it; a restart neither loses nor doubles the count."""
    pipeline = build(storage_database, job_samples=1, group_size=2)
    _push_drops(pipeline)
    status = pipeline.status()
    assert status["ending_records"] == {"engine_abort": 2, "slot_taken": 1}
    assert status["dropped"] == {}
    _commit(pipeline)
    status = pipeline.status()
    assert status["ending_records"] == {}
    assert status["dropped"] == {"engine_abort": 2, "slot_taken": 1}
    # A second commit names nothing ended again: no count grows.
    feed(pipeline, "c")
    _commit(pipeline)
    assert pipeline.status()["dropped"] == {"engine_abort": 2, "slot_taken": 1}

    # A restart replays the whole stream: the committed ends are consumed, never ended again.
    again = build(storage_database, job_samples=1, group_size=2)
    _push_drops(again)
    feed(again, "c")
    assert again.status()["ending_records"] == {}
    assert again.status()["dropped"] == {"engine_abort": 2, "slot_taken": 1}
    assert DropCounters(storage_database, "s").counts() == {
        "c": {"engine_abort": 2, "slot_taken": 1}
    }


def test_an_end_lost_in_a_crash_is_counted_once_after_restart(storage_database: Database) -> None:
    """rule: P-STALE-1 ends not yet committed are not counted; after a restart the records end
    again and the next commit counts them once."""
    first = build(storage_database, job_samples=1, group_size=2)
    _push_drops(first)
    del first  # the process dies before any commit
    second = build(storage_database, job_samples=1, group_size=2)
    _push_drops(second)
    assert second.status()["dropped"] == {}
    _commit(second)
    assert second.status()["dropped"] == {"engine_abort": 2}
    # The stored group is fixed; the stage forgot its slots, so b, whose end was never
    # committed, waits in a new group of key g (see docs/pipeline.md, Decisions).
    assert second.status()["open_groups"] == 1


def test_status_shows_stale_refused_and_evicted(storage_database: Database) -> None:
    """rule: P-BUF-7 P-UP-6 P-STALE-6 stale samples and refused uploads stay in the store and
    are shown as they are now; evicted bodies are the scenario's durable count."""
    pipeline = build(storage_database, job_samples=1, buffer_size=5)
    pipeline.observe_serving_artifact_id("art1")
    feed(pipeline, "a", artifact="art1")
    store = TrainerSamples(storage_database, "s")
    store.add_upload(NewSample("bad", "trajectory", {"trajectory": {}, "unknown": 1}))
    pipeline.observe_serving_artifact_id("art2")
    records = RecordStore(storage_database, "s", capacity=RecordCapacity(max_bodies=1))
    records.append(report("r1", "z"))
    records.append(report("r2", "z"))
    status = pipeline.status()
    assert status["stale_samples"] == 1
    assert status["refused_samples"] == 1
    assert status["scenario_dropped"] == {"evicted": 1}
