"""Trainer leases: one holder at a time, takeover after expiry, fencing of a lost holder's
writes, and how soon a standby takes over from a holder's death: within the TTL, under load
(on SQLite and PostgreSQL)."""

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
from reef.train.trainer import Trainer, TrainerParts, TrainerSettings


class Clock:
    """A wall clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_one_holder_at_a_time_and_takeover_after_expiry(storage_database: Database) -> None:
    clock = Clock()
    leases = TrainerLeases(storage_database, "s", ttl=6.0, clock=clock)
    assert (leases.claim, leases.beat) == (3.0, 1.0)  # half the TTL; a sixth
    first = leases.try_acquire("local", "a")
    assert first is not None
    assert first.token == 1
    assert first.expires_at == 1003.0
    assert leases.try_acquire("local", "b") is None  # a's claim runs
    clock.now += 2
    first = leases.renew(first)  # the heartbeat
    clock.now += 2
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
from reef.train.trainer import Trainer, TrainerParts, TrainerSettings

def build(fenced):
    print("held", flush=True)
    threading.Event().wait()

settings = TrainerSettings(lease_ttl=float(sys.argv[2]))
Trainer("s", "c", database=open_database(sys.argv[1]), build=build, holder="dying",
        settings=settings).run()
"""


#: A process that keeps one core busy: the load a takeover must meet its TTL under.
SPIN = "while True: pass"


def test_a_standby_takes_over_within_the_ttl_of_a_death_under_load(storage_url: str) -> None:
    """docs/trainer.md#leases: a holder SIGKILLed stops renewing; its claim (half the TTL)
    lapses, a standby tries every sixth of the TTL, so the standby holds the lease within two
    thirds of the TTL of the death, with a third to spare, and the promise is the TTL itself.
    Measured with two more processes spinning on the machine's cores: from the SIGKILL to the
    standby building its parts (what it does first under the lease), and on to its first job,
    whose ``submitted_at`` the store keeps."""
    ttl = 3.0
    database = open_database(storage_url)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, storage_url, str(ttl)],
        stdout=subprocess.PIPE,
        text=True,
    )
    load = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(2)]
    standby: Trainer | None = None
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "held\n"
        store_groups(TrainerSamples(database, "s"))
        component = RecordingComponent(1)
        build = grouped_parts(component)
        taken: list[float] = []

        def timed_build(fenced: Database) -> TrainerParts:
            taken.append(time.time())
            return build(fenced)

        settings = TrainerSettings(poll_interval=0.05, lease_ttl=ttl)
        standby = Trainer("s", "c", database=database, build=timed_build, settings=settings)
        standby.start()  # a standby: it tries every sixth of the TTL
        time.sleep(ttl / 2)  # several renewals by the holder's heartbeat, under the load
        assert component.submitted == []  # the holder's claim runs
        # The worst moment to die: just after a renewal, which leaves the longest claim.
        leases = TrainerLeases(database, "s", ttl=ttl)
        renewed = leases.current("c")
        assert renewed is not None
        while (dead := leases.current("c")) == renewed:
            time.sleep(0.005)  # polls the store for the next renewal
        killed = time.time()
        holder.kill()
        holder.wait(30)
        assert dead is not None
        assert (dead.holder, dead.token) == ("dying", 1)  # it held on under the load
        assert component.all_submitted.wait(30)
        lease = leases.current("c")
        assert lease is not None
        assert (lease.holder, lease.token) == (standby.holder, 2)
        [first_job] = JobHistory(database, "s").read(trainer="c")
        assert first_job.submitted_at is not None
        takeover, first = taken[0] - killed, first_job.submitted_at - killed
        print(f"takeover {takeover:.2f} s, first job {first:.2f} s after the death (TTL {ttl} s)")
        assert taken[0] >= dead.expires_at  # not before the dead holder's claim lapsed
        assert takeover <= ttl, takeover
    finally:
        for process in (holder, *load):
            if process.poll() is None:
                process.kill()
                process.wait(30)
        if holder.stdout is not None:
            holder.stdout.close()
        if standby is not None:
            standby.stop(30)
        database.dispose()
