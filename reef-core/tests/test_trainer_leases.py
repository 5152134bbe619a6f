"""Trainer leases: one holder at a time, takeover after expiry, fencing of a lost holder's
writes (on SQLite and PostgreSQL)."""

from __future__ import annotations

import pytest

from reef.storage import (
    Database,
    FencedDatabase,
    LeaseLostError,
    ScenarioSettings,
    TrainerLeases,
    TrainerState,
)


class Clock:
    """A wall clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_one_holder_at_a_time_and_takeover_after_expiry(storage_database: Database) -> None:
    clock = Clock()
    leases = TrainerLeases(storage_database, "s", ttl=5.0, clock=clock)
    first = leases.try_acquire("local", "a")
    assert first is not None
    assert first.token == 1
    assert leases.try_acquire("local", "b") is None  # a's claim runs
    clock.now += 4
    first = leases.renew(first)  # the heartbeat
    clock.now += 4
    assert leases.try_acquire("local", "b") is None  # renewed: still a's
    clock.now += 2
    second = leases.try_acquire("local", "b")  # a stopped renewing: b takes over
    assert second is not None
    assert second.token == 2
    with pytest.raises(LeaseLostError):
        leases.renew(first)
    assert leases.current("local") == second


def test_a_lost_lease_cannot_commit_anything(storage_database: Database) -> None:
    clock = Clock()
    leases = TrainerLeases(storage_database, "s", ttl=5.0, clock=clock)
    old = leases.try_acquire("local", "a")
    assert old is not None
    fenced_old = FencedDatabase(storage_database, leases, old)
    ScenarioSettings(fenced_old, "s").set("k", 1)
    clock.now += 6
    new = leases.try_acquire("local", "b")
    assert new is not None
    with pytest.raises(LeaseLostError):
        ScenarioSettings(fenced_old, "s").set("k", 2)
    with pytest.raises(LeaseLostError):
        TrainerState(fenced_old, "s").set_running_job("local", {"job_id": "x"})
    assert ScenarioSettings(storage_database, "s").get("k") == 1  # nothing of it was written
    assert TrainerState(storage_database, "s").running_job("local") is None
    ScenarioSettings(FencedDatabase(storage_database, leases, new), "s").set("k", 3)
    assert ScenarioSettings(storage_database, "s").get("k") == 3


def test_release_hands_over_at_once_and_leases_are_per_trainer(
    storage_database: Database,
) -> None:
    leases = TrainerLeases(storage_database, "s", ttl=60.0)
    held = leases.try_acquire("local", "a")
    assert held is not None
    assert leases.try_acquire("other", "b") is not None  # another trainer's lease is its own
    assert leases.try_acquire("local", "b") is None
    leases.release(held)
    taken = leases.try_acquire("local", "b")
    assert taken is not None
    assert taken.token == held.token + 1
    leases.release(held)  # releasing a lost lease changes nothing
    assert leases.current("local") == taken
