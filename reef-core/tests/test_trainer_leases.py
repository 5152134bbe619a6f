"""Trainer leases: one holder at a time, takeover after expiry, fencing of a lost holder's
writes, and how soon a standby's first job follows a holder's death (on SQLite and
PostgreSQL)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from reef.storage import (
    Database,
    FencedDatabase,
    JobHistory,
    LeaseLostError,
    ScenarioSettings,
    TrainerLeases,
    TrainerSamples,
    TrainerState,
    open_database,
)
from reef.testing.components import RecordingComponent, grouped_parts, store_groups
from reef.train.trainer import Trainer, TrainerSettings


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


#: A real trainer that takes the lease and then never gets further than building its parts:
#: it holds the lease with its own heartbeat until the test SIGKILLs it.
HOLDER = """
import sys, threading
from reef.storage import open_database
from reef.train.trainer import Trainer, TrainerSettings

def build(fenced):
    print("held", flush=True)
    threading.Event().wait()

settings = TrainerSettings(lease_ttl=float(sys.argv[2]))
Trainer("s", "c", database=open_database(sys.argv[1]), build=build, holder="dying",
        settings=settings).run()
"""


def test_a_standby_starts_its_first_job_within_four_thirds_of_the_ttl_of_a_death(
    storage_url: str,
) -> None:
    """docs/trainer.md#leases: a holder SIGKILLed stops renewing; its lease expires at most a
    TTL after its last renewal, a standby tries every third of the TTL, so the standby holds
    the lease within 4/3 of the TTL and its first job starts after building its parts. Both
    ends are read from the store: the dead holder's last renewal (its ``expires_at`` less the
    TTL) and the first job's ``submitted_at``, with a third of the TTL allowed for the build."""
    ttl = 3.0
    database = open_database(storage_url)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, storage_url, str(ttl)],
        stdout=subprocess.PIPE,
        text=True,
    )
    standby: Trainer | None = None
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "held\n"
        store_groups(TrainerSamples(database, "s"))
        component = RecordingComponent(1)

        settings = TrainerSettings(poll_interval=0.05, lease_ttl=ttl)
        standby = Trainer(
            "s", "c", database=database, build=grouped_parts(component), settings=settings
        )
        standby.start()  # a standby: it tries every third of the TTL
        time.sleep(ttl / 2)  # at least one renewal by the holder's heartbeat
        assert component.submitted == []  # the holder's claim runs
        holder.kill()
        holder.wait(30)
        leases = TrainerLeases(database, "s", ttl=ttl)
        dead = leases.current("c")  # read at once: its claim runs at least 2/3 TTL more
        assert dead is not None
        assert (dead.holder, dead.token) == ("dying", 1)
        last_renewal = dead.expires_at - ttl
        assert component.all_submitted.wait(30)
        lease = leases.current("c")
        assert lease is not None
        assert (lease.holder, lease.token) == (standby.holder, 2)
        [first_job] = JobHistory(database, "s").read(trainer="c")
        assert first_job.submitted_at is not None
        took = first_job.submitted_at - last_renewal
        # A third of the TTL more for the build and the first submission: a standby that
        # waited twice as long between tries fails this in most phases.
        assert ttl <= took <= ttl * 4 / 3 + ttl / 3, took
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(30)
        if holder.stdout is not None:
            holder.stdout.close()
        if standby is not None:
            standby.stop(30)
        database.dispose()
