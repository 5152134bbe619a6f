"""The scenario's sample store (TrainerSamples): units, uploads, consumption, train counts,
the manual buffer, instructions and job outcomes."""

from __future__ import annotations

import math

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from reef.storage import (
    ConflictError,
    Database,
    NewSample,
    TrainerSamples,
    UnknownSampleError,
    UnknownTrainerError,
)


def _sample(sample_id: str, kind: str = "trajectory", **body: object) -> NewSample:
    return NewSample(sample_id, kind, {"id": sample_id, **body})  # type: ignore[arg-type]


@pytest.fixture
def store(storage_database: Database) -> TrainerSamples:
    samples = TrainerSamples(storage_database, "sc")
    samples.register_trainer("sft", reads_uploads=True)
    return samples


def _ids(samples: list[object]) -> list[str]:
    return [s.id for s in samples]  # type: ignore[attr-defined]


def test_a_unit_stores_its_samples_and_consumes_its_records_together(
    store: TrainerSamples,
) -> None:
    """rule: P-SET-16, P-SET-18, P-SET-19 (one transaction; ids; a unit shares a group)."""
    unit = [_sample("sft:r1:0"), _sample("sft:r1:1")]
    assert store.add_record_samples("sft", unit, ["c1", "c2", "r1"])
    assert store.add_record_samples("sft", [_sample("sft:r2:0")], ["c3", "r2"])
    untrained = store.untrained("sft")
    assert _ids(untrained) == ["sft:r1:0", "sft:r1:1", "sft:r2:0"]
    assert [s.group_id for s in untrained] == ["sft:r1:0", "sft:r1:0", None]
    assert untrained[0].body == {"id": "sft:r1:0"}
    assert {s.trainer for s in untrained} == {"sft"}
    assert store.consumed_record_ids("sft") == {"c1", "c2", "c3", "r1", "r2"}


def test_storing_a_unit_again_changes_nothing_and_other_content_conflicts(
    store: TrainerSamples,
) -> None:
    """rule: P-SET-20 (a restart never makes stored samples again: stores are idempotent)."""
    unit = [_sample("sft:r1:0"), _sample("sft:r1:1")]
    assert store.add_record_samples("sft", unit, ["r1"])
    assert not store.add_record_samples("sft", unit, ["r1"])
    with pytest.raises(ConflictError, match="sft:r1:0"):
        store.add_record_samples("sft", [_sample("sft:r1:0", score=2)], ["r1"])
    # A unit that overlaps a stored one is a different unit under the same ids.
    with pytest.raises(ConflictError):
        store.add_record_samples("sft", [_sample("sft:r1:1"), _sample("sft:r1:2")], ["r9"])
    assert _ids(store.untrained("sft")) == ["sft:r1:0", "sft:r1:1"]
    assert "r9" not in store.consumed_record_ids("sft")


def test_uploads_interleave_by_arrival_and_leave_every_trainer(
    storage_database: Database,
) -> None:
    """rule: P-BUF-2, P-UP-1, P-UP-2, P-UP-7 (store order; removal forgets the upload)."""
    store = TrainerSamples(storage_database, "sc")
    store.register_trainer("a", reads_uploads=True)
    store.add_record_samples("a", [_sample("a:r1:0")], ["r1"])
    assert store.add_upload(_sample("traj-1"))
    assert not store.add_upload(_sample("traj-1"))
    store.add_record_samples("a", [_sample("a:r2:0")], ["r2"])
    # A trainer registered after the upload still reads it; one that reads no uploads does not.
    store.register_trainer("b", reads_uploads=True)
    store.register_trainer("c", reads_uploads=False)
    assert _ids(store.untrained("a")) == ["a:r1:0", "traj-1", "a:r2:0"]
    assert _ids(store.untrained("b")) == ["traj-1"]
    assert store.untrained("c") == []
    upload = store.untrained("b")[0]
    assert (upload.trainer, upload.origin, upload.group_id) == (None, "upload", None)
    with pytest.raises(ConflictError):
        store.add_upload(_sample("traj-1", changed=True))

    store.insert_into_manual_buffer("b", ["traj-1"])
    assert store.remove_upload("traj-1")
    assert not store.remove_upload("traj-1")
    assert _ids(store.untrained("a")) == ["a:r1:0", "a:r2:0"]
    assert store.untrained("b") == []
    assert store.manual_buffer("b") == []
    assert store.get(["traj-1"]) == []


def test_a_removed_upload_added_again_is_a_new_upload_and_keeps_its_train_counts(
    storage_database: Database,
) -> None:
    """rule: P-UP-1, P-UP-2, P-UP-8 (re-attach: a new place in store order; a trainer that
    trained it keeps its count and does not get it again; the others read it)."""
    store = TrainerSamples(storage_database, "sc")
    for trainer in ("a", "b"):
        store.register_trainer(trainer, reads_uploads=True)
    store.add_upload(_sample("traj-1"))
    store.add_record_samples("a", [_sample("a:r1:0")], ["r1"])
    assert store.commit_submission("a", "sc:data:1", ["traj-1"])
    (before,) = store.get(["traj-1"])
    assert store.remove_upload("traj-1")

    assert store.add_upload(_sample("traj-1", revised=True))
    assert not store.add_upload(_sample("traj-1", revised=True))
    (again,) = store.get(["traj-1"])
    assert again.position > before.position
    assert again.body == {"id": "traj-1", "revised": True}
    assert _ids(store.untrained("a")) == ["a:r1:0"]  # trained it once: never again
    assert store.train_counts("a", ["traj-1"]) == {"traj-1": 1}
    untrained_b = store.untrained("b")
    assert _ids(untrained_b) == ["traj-1"]
    assert untrained_b[0].position == again.position  # after any cursor that saw the first
    # Removed and re-added again: still one row, the counts still there.
    assert store.remove_upload("traj-1")
    assert store.add_upload(_sample("traj-1"))
    assert store.train_counts("a", ["traj-1"]) == {"traj-1": 1}
    assert len(store.get(["traj-1"])) == 1


def test_a_commit_counts_the_trained_samples_for_its_trainer_only(
    storage_database: Database,
) -> None:
    """rule: P-PIPE-9, P-PIPE-19, P-UP-8 (train counts per trainer, in the commit)."""
    store = TrainerSamples(storage_database, "sc")
    for trainer in ("a", "b"):
        store.register_trainer(trainer, reads_uploads=True)
    store.add_record_samples("a", [_sample("a:r1:0"), _sample("a:r1:1")], ["r1"])
    store.add_upload(_sample("traj-1"))
    ids = ["a:r1:0", "a:r1:1", "traj-1"]
    assert store.commit_submission("a", "sc:data:1", ids, released_record_ids=["r7"])
    # Idempotent per data id: a retried commit counts nothing twice.
    assert not store.commit_submission("a", "sc:data:1", ids)
    assert store.train_counts("a", ids) == {"a:r1:0": 1, "a:r1:1": 1, "traj-1": 1}
    assert store.train_counts("b", ids) == {"a:r1:0": 0, "a:r1:1": 0, "traj-1": 0}
    assert store.untrained("a") == []
    assert _ids(store.untrained("b")) == ["traj-1"]
    assert store.consumed_record_ids("a") == {"r1", "r7"}
    assert store.consumed_record_ids("b") == frozenset()

    assert store.commit_submission("b", "sc:data:1", ["traj-1"])
    assert store.commit_submission("a", "sc:data:2", ["traj-1"])
    assert store.train_counts("a", ["traj-1"]) == {"traj-1": 2}


def test_a_commit_naming_an_unknown_sample_writes_nothing(store: TrainerSamples) -> None:
    store.add_record_samples("sft", [_sample("sft:r1:0")], ["r1"])
    with pytest.raises(UnknownSampleError, match="ghost"):
        store.commit_submission("sft", "sc:data:1", ["sft:r1:0", "ghost"])
    assert store.train_counts("sft", ["sft:r1:0"]) == {"sft:r1:0": 0}
    assert _ids(store.untrained("sft")) == ["sft:r1:0"]
    # The data id was not used up: the corrected commit goes through.
    assert store.commit_submission("sft", "sc:data:1", ["sft:r1:0"])


def test_named_samples_are_stored_once_without_group(store: TrainerSamples) -> None:
    """rule: P-PIPE-11 (made_samples: no group, no consumed record, storing again is a no-op)."""
    tasks = [_sample("generated-tasks/t1", "task"), _sample("generated-tasks/t2", "task")]
    assert store.add_samples("sft", tasks) == 2
    changed = [_sample("generated-tasks/t1", "task", again=True)]
    assert store.add_samples("sft", changed) == 0
    stored = store.untrained("sft")
    assert [(s.id, s.kind, s.group_id, s.origin) for s in stored] == [
        ("generated-tasks/t1", "task", None, "named"),
        ("generated-tasks/t2", "task", None, "named"),
    ]
    assert stored[0].body == {"id": "generated-tasks/t1"}
    assert store.consumed_record_ids("sft") == frozenset()


def test_many_named_samples_in_one_call_are_all_stored_in_their_order(
    store: TrainerSamples,
) -> None:
    """rule: P-PIPE-11 (made_samples: every one is stored, in the order it was made), for more
    samples than one insert statement carries."""
    tasks = [_sample(f"generated-tasks/t{n:04}", "task") for n in range(1201)]
    assert store.add_samples("sft", tasks) == len(tasks)
    assert _ids(store.untrained("sft")) == [task.id for task in tasks]
    assert store.add_samples("sft", tasks) == 0


def test_a_unit_the_database_refuses_raises_its_error_and_stores_nothing(
    store: TrainerSamples, storage_database: Database
) -> None:
    """rule: P-SET-16 (a unit is stored whole or not at all). The database's error comes out as
    SQLAlchemy's, as from every other statement (the service answers those with a 503)."""
    with storage_database.write() as connection:
        connection.execute(text("DROP TABLE reef_consumed_records"))
    with pytest.raises(DBAPIError):
        store.add_record_samples("sft", [_sample("sft:r1:0"), _sample("sft:r1:1")], ["r1"])
    assert store.untrained("sft") == []
    assert store.get(["sft:r1:0", "sft:r1:1"]) == []


def test_untrained_reads_incrementally_after_a_position(store: TrainerSamples) -> None:
    """rule: P-PIPE-5 (advance reads the samples stored since the last call)."""
    for n in range(5):
        store.add_record_samples("sft", [_sample(f"sft:r{n}:0")], [f"r{n}"])
    first = store.untrained("sft", limit=2)
    rest = store.untrained("sft", after_position=first[-1].position)
    assert _ids(first + rest) == [f"sft:r{n}:0" for n in range(5)]


def test_a_trainer_must_register_before_reading(storage_database: Database) -> None:
    with pytest.raises(UnknownTrainerError, match="register_trainer"):
        TrainerSamples(storage_database, "sc").untrained("nobody")


def test_the_manual_buffer_keeps_store_order_and_loses_trained_samples(
    store: TrainerSamples,
) -> None:
    """rule: P-MODE-5, P-MODE-7 (chosen samples in store order; the commit removes them)."""
    for n in range(3):
        store.add_record_samples("sft", [_sample(f"sft:r{n}:0")], [f"r{n}"])
    store.insert_into_manual_buffer("sft", ["sft:r2:0", "sft:r0:0", "sft:r1:0"])
    store.insert_into_manual_buffer("sft", ["sft:r2:0"])
    assert _ids(store.manual_buffer("sft")) == ["sft:r0:0", "sft:r1:0", "sft:r2:0"]
    store.remove_from_manual_buffer("sft", ["sft:r1:0", "absent"])
    with pytest.raises(UnknownSampleError):
        store.insert_into_manual_buffer("sft", ["ghost"])
    assert store.enqueue_instruction("req-1", {"action": "TRAIN"})
    store.commit_submission("sft", "sc:instruction:req-1", ["sft:r0:0"], "req-1")
    assert _ids(store.manual_buffer("sft")) == ["sft:r2:0"]
    assert store.unread_instructions("sft") == []


def test_instructions_are_fifo_idempotent_and_consumed_per_trainer(
    store: TrainerSamples,
) -> None:
    """rule: P-MODE-3, P-MODE-8, P-MODE-10 (FIFO queue, consumed by acknowledgement)."""
    assert store.enqueue_instruction("b", {"action": "TRAIN", "n": 1})
    assert store.enqueue_instruction("a", {"action": "TRAIN", "n": 2})
    # False, not merely falsy: the API's receipt says `queued: false` (scripts/mutation).
    assert store.enqueue_instruction("b", {"n": 1, "action": "TRAIN"}) is False
    with pytest.raises(ConflictError, match="instruction 'b'"):
        store.enqueue_instruction("b", {"action": "STOP"})
    assert [i.request_id for i in store.unread_instructions("sft")] == ["b", "a"]
    store.consume_instruction("sft", "b")
    unread = store.unread_instructions("sft")
    assert [(i.request_id, i.body) for i in unread] == [("a", {"action": "TRAIN", "n": 2})]
    assert [i.request_id for i in store.unread_instructions("other")] == ["b", "a"]


def test_the_last_job_outcome_is_durable_per_trainer(storage_url: str) -> None:
    """rule: P-PIPE-13 (a restarted trainer finds the last job that ended)."""
    from reef.storage import open_database

    database = open_database(storage_url)
    store = TrainerSamples(database, "sc")
    assert store.last_job_outcome("sft") is None
    store.record_job_outcome("sft", {"job_id": "j1", "event": "failed", "error": "boom"})
    store.record_job_outcome("sft", {"job_id": "j2", "event": "finished", "error": None})
    database.dispose()
    reopened = open_database(storage_url)
    outcome = TrainerSamples(reopened, "sc").last_job_outcome("sft")
    reopened.dispose()
    assert outcome == {"job_id": "j2", "event": "finished", "error": None}


def test_a_job_outcome_with_metrics_that_are_not_finite_reads_back_as_recorded(
    store: TrainerSamples,
) -> None:
    """rule: P-PIPE-13 a diverged job's NaN or infinite metrics are stored, not refused (a
    refusal would stop the trainer at every retry), and the outcome read back is the one
    recorded, nested values included."""
    metrics = {"loss": math.nan, "grad_norm": math.inf, "per_step": [-math.inf, 1.5]}
    store.record_job_outcome("c", {"job_id": "j1", "event": "finished", "metrics": metrics})
    outcome = store.last_job_outcome("c")
    assert outcome is not None
    read = outcome["metrics"]
    assert math.isnan(read["loss"])
    assert (read["grad_norm"], read["per_step"]) == (math.inf, [-math.inf, 1.5])


def test_scenarios_do_not_see_each_others_samples(storage_database: Database) -> None:
    one = TrainerSamples(storage_database, "one")
    two = TrainerSamples(storage_database, "two")
    for store in (one, two):
        store.register_trainer("t", reads_uploads=True)
    one.add_record_samples("t", [_sample("t:r1:0")], ["r1"])
    two.add_record_samples("t", [_sample("t:r1:0", other=True)], ["r1"])
    assert one.untrained("t")[0].body == {"id": "t:r1:0"}
    assert two.untrained("t")[0].body == {"id": "t:r1:0", "other": True}


def test_a_sample_kind_is_trajectory_or_task() -> None:
    with pytest.raises(ValueError, match="kind"):
        NewSample("x", "image", {})  # type: ignore[arg-type]


# -- found by scripts/mutation (docs/testing.md): each test kills mutants every other passed ----


def test_membership_queries_answer_for_one_trainer_of_one_scenario(
    storage_database: Database,
) -> None:
    """rule: P-SET-20, P-PIPE-19 -- recovery asks which of a batch of records a trainer
    consumed and which job data ids it committed: that trainer's in this scenario only
    (mutants: no answer, or another trainer's or scenario's rows)."""
    here, there = TrainerSamples(storage_database, "sc"), TrainerSamples(storage_database, "x")
    for store in (here, there):
        for trainer in ("a", "b"):
            store.register_trainer(trainer, reads_uploads=False)
    here.add_record_samples("a", [_sample("a:r1:0")], ["r1"])
    here.add_record_samples("b", [_sample("b:r3:0")], ["r3"])
    there.add_record_samples("a", [_sample("a:r2:0")], ["r2"])
    here.commit_submission("a", "job-a", ["a:r1:0"])
    here.commit_submission("b", "job-b", ["b:r3:0"])
    there.commit_submission("a", "job-x", ["a:r2:0"])
    assert here.consumed_among("a", ["r1", "r2", "r3", "r9"]) == {"r1"}
    assert here.submitted_among("a", ["job-a", "job-b", "job-x", "job-9"]) == {"job-a"}
    assert here.consumed_among("a", []) == here.submitted_among("a", []) == frozenset()


def test_registering_again_changes_which_uploads_wait_and_nothing_else(
    storage_database: Database,
) -> None:
    """rule: P-UP-7 -- a trainer that reads uploads waits for every upload it has not trained
    and never for one it trained (mutants: the trained check matches other samples, or other
    trainers' trains); one that stops reading them forgets the waiting uploads (mutant: forgets
    nothing) and keeps its own samples (mutant: forgets those instead)."""
    store = TrainerSamples(storage_database, "sc")
    store.register_trainer("a", reads_uploads=True)
    store.add_record_samples("a", [_sample("a:r1:0")], ["r1"])
    store.add_upload(_sample("traj-1"))
    store.add_upload(_sample("traj-2"))
    store.commit_submission("a", "job-1", ["traj-1"])
    store.register_trainer("a", reads_uploads=True)
    assert _ids(store.untrained("a")) == ["a:r1:0", "traj-2"]
    store.register_trainer("a", reads_uploads=False)
    assert _ids(store.untrained("a")) == ["a:r1:0"]
    store.register_trainer("a", reads_uploads=True)
    assert _ids(store.untrained("a")) == ["a:r1:0", "traj-2"]


def test_a_trainer_registered_in_another_scenario_is_unknown_here(
    storage_database: Database,
) -> None:
    """Reading refuses a trainer registered only in another scenario's store (mutant: any
    scenario's registration counts)."""
    TrainerSamples(storage_database, "x").register_trainer("a", reads_uploads=False)
    with pytest.raises(UnknownTrainerError, match="register_trainer"):
        TrainerSamples(storage_database, "sc").untrained("a")
