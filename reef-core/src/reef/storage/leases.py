"""Trainer leases: one process at a time runs the trainer of a scenario and component.

Several ``reef serve`` processes may share one store. Any of them admits records, but a trainer
must run in exactly one, or two processes would reserve and train the same samples. The lease
is a row of the store per ``(scenario, trainer)``:

- ``holder`` names the process that runs the trainer, ``expires_at`` when its claim lapses
  unless renewed (a heartbeat renews it), and ``token`` is a number that grows by one with
  every change of holder: a *fencing token*.
- A process takes the lease when it is free or expired (:meth:`TrainerLeases.try_acquire`).
  A holder that dies (SIGKILL, power loss) stops renewing, and another process takes over once
  ``expires_at`` has passed.
- The schedule meets the TTL: a dead holder's trainer has a new holder within ``ttl`` seconds
  of the death. A claim lasts half the TTL (:attr:`TrainerLeases.claim`); the holder renews
  it, and standbys try to take it, every sixth of the TTL (:attr:`TrainerLeases.beat`). A
  holder that dies just after a renewal leaves a claim of half the TTL, and the next try of a
  standby comes at most a sixth later: two thirds of the TTL, and a third to spare for a
  loaded machine (a late try, a slow write). A holder loses its lease only when no renewal of
  three commits within half the TTL.
- Every write the trainer makes goes through a :class:`FencedDatabase`, whose write
  transactions first check, inside the same transaction, that the row still holds the
  trainer's holder and token. A process that lost its lease (it stalled past the expiry and
  another took over) therefore cannot commit anything: its transaction raises
  :class:`LeaseLostError` and is rolled back. The check locks the lease row (``FOR SHARE`` on
  PostgreSQL; SQLite's write lock covers it), so a takeover waits for a commit that passed the
  check, and a commit after a takeover sees the new token.

Expiry compares wall-clock times of the processes (``time.time()``): processes on several
machines need synchronised clocks, and a claim (half the ``ttl``) must exceed the worst clock
skew.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any, Final

import attrs
from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    Float,
    PrimaryKeyConstraint,
    String,
    Table,
    select,
    update,
)

from reef.storage.database import Database
from reef.storage.errors import StorageError
from reef.storage.tables import metadata
from reef.storage.upserts import insert_or_ignore

__all__ = [
    "BEAT_SHARE",
    "CLAIM_SHARE",
    "FencedDatabase",
    "Lease",
    "LeaseLostError",
    "TrainerLeases",
    "trainer_leases",
]

#: How much of the TTL one claim lasts.
CLAIM_SHARE: Final = 1 / 2
#: How much of the TTL passes between two renewals, and between two tries of a standby.
BEAT_SHARE: Final = 1 / 6

trainer_leases = Table(
    "reef_trainer_leases",
    metadata,
    Column("scenario", String(400), nullable=False),
    Column("trainer", String(400), nullable=False),
    Column("holder", String(400), nullable=False),
    Column("token", BigInteger, nullable=False),
    Column("expires_at", Float, nullable=False),
    PrimaryKeyConstraint("scenario", "trainer"),
    comment="Which process runs each trainer; token grows with every takeover (fencing).",
)


@attrs.frozen
class Lease:
    """A held lease.

    :ivar scenario: the scenario.
    :ivar trainer: the trainer (its component's name).
    :ivar holder: the process that holds it.
    :ivar token: the fencing token of this tenure.
    :ivar expires_at: when it lapses unless renewed (Unix seconds).
    """

    scenario: str
    trainer: str
    holder: str
    token: int
    expires_at: float


class LeaseLostError(StorageError):
    """The trainer's lease belongs to another process now (or was released): nothing it
    writes may commit. The message names the trainer, the token it held and the holder now."""

    def __init__(self, lease: Lease, holder: str | None, token: int | None) -> None:
        super().__init__(
            f"trainer {lease.trainer!r} of scenario {lease.scenario!r}: lease token"
            f" {lease.token} of {lease.holder!r} was lost (now token {token} of {holder!r})"
        )
        self.lease = lease


class TrainerLeases:
    """The leases of one scenario's trainers.

    :param database: the opened database.
    :param scenario: the scenario.
    :param ttl: the longest a dead holder's trainer waits for a new holder (seconds): a claim
        lasts :data:`CLAIM_SHARE` of it, renewals and a standby's tries come every
        :data:`BEAT_SHARE` (the module docstring).
    :param clock: the wall clock (Unix seconds).
    """

    def __init__(
        self,
        database: Database,
        scenario: str,
        *,
        ttl: float = 10.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if ttl <= 0:
            raise ValueError(f"a lease's ttl must be positive, got {ttl!r}")
        self._database = database
        self.scenario = scenario
        self.ttl = ttl
        self._clock = clock

    @property
    def claim(self) -> float:
        """Seconds a claim lasts without renewal: half the TTL."""
        return self.ttl * CLAIM_SHARE

    @property
    def beat(self) -> float:
        """Seconds between two renewals of a holder, and between two tries of a standby."""
        return self.ttl * BEAT_SHARE

    def _locked_row(self, connection: Connection, trainer: str) -> tuple[str, int, float]:
        insert_or_ignore(
            connection,
            trainer_leases,
            [
                {
                    "scenario": self.scenario,
                    "trainer": trainer,
                    "holder": "",
                    "token": 0,
                    "expires_at": 0.0,
                }
            ],
        )
        row = connection.execute(
            select(trainer_leases.c.holder, trainer_leases.c.token, trainer_leases.c.expires_at)
            .where(self._key(trainer))
            .with_for_update()
        ).one()
        return str(row.holder), int(row.token), float(row.expires_at)

    def _key(self, trainer: str) -> Any:  # a SQL condition
        return (trainer_leases.c.scenario == self.scenario) & (trainer_leases.c.trainer == trainer)

    def try_acquire(self, trainer: str, holder: str) -> Lease | None:
        """Take the lease of ``trainer`` for ``holder`` when it is free or expired.

        A holder that asks again while it holds the lease keeps its token (a renewal).

        :returns: the lease, or ``None`` while another holder's claim runs.
        """
        with self._database.write() as connection:
            current, token, expires_at = self._locked_row(connection, trainer)
            now = self._clock()
            if current != holder or expires_at <= now:
                if current and current != holder and expires_at > now:
                    return None
                token += 1  # a new tenure: whatever the previous one writes now is refused
            lease = Lease(self.scenario, trainer, holder, token, now + self.claim)
            connection.execute(
                update(trainer_leases)
                .where(self._key(trainer))
                .values(holder=holder, token=token, expires_at=lease.expires_at)
            )
        return lease

    def renew(self, lease: Lease) -> Lease:
        """Extend ``lease`` by a claim (the heartbeat).

        A lease that expired but that nobody took over is renewed: no other process wrote.

        :raises LeaseLostError: when another holder took it, or it was released.
        """
        with self._database.write() as connection:
            holder, token, _ = self._locked_row(connection, lease.trainer)
            if (holder, token) != (lease.holder, lease.token):
                raise LeaseLostError(lease, holder or None, token)
            renewed = attrs.evolve(lease, expires_at=self._clock() + self.claim)
            connection.execute(
                update(trainer_leases)
                .where(self._key(lease.trainer))
                .values(expires_at=renewed.expires_at)
            )
        return renewed

    def release(self, lease: Lease) -> None:
        """Give ``lease`` up now, so another process takes over without waiting for the
        expiry (a clean stop). Releasing a lease that was lost changes nothing."""
        with self._database.write() as connection:
            holder, token, _ = self._locked_row(connection, lease.trainer)
            if (holder, token) == (lease.holder, lease.token):
                connection.execute(
                    update(trainer_leases).where(self._key(lease.trainer)).values(expires_at=0.0)
                )

    def current(self, trainer: str) -> Lease | None:
        """The lease of ``trainer`` as stored (possibly expired); ``None`` if never taken."""
        query = select(trainer_leases).where(self._key(trainer))
        with self._database.read() as connection:
            row = connection.execute(query).one_or_none()
        if row is None or not row.holder:
            return None
        return Lease(self.scenario, trainer, row.holder, int(row.token), float(row.expires_at))

    def check(self, connection: Connection, lease: Lease) -> None:
        """Inside the caller's write transaction: refuse it unless ``lease`` is still held.

        :raises LeaseLostError: when the row names another holder or token.
        """
        query = select(trainer_leases.c.holder, trainer_leases.c.token).where(
            self._key(lease.trainer)
        )
        if connection.dialect.name == "postgresql":
            query = query.with_for_update(read=True)
        row = connection.execute(query).one_or_none()
        found = (None, None) if row is None else (str(row.holder), int(row.token))
        if found != (lease.holder, lease.token):
            raise LeaseLostError(lease, found[0], found[1])


class FencedDatabase(Database):
    """The database as a lease holder writes it: every write transaction checks the lease
    first (see the module's documentation). Reads are not fenced.

    :param database: the opened database (its engine is shared).
    :param leases: the scenario's leases.
    :param lease: the lease every write must still hold.
    """

    def __init__(self, database: Database, leases: TrainerLeases, lease: Lease) -> None:
        super().__init__(database.engine)
        self._inner = database
        self._leases = leases
        self.lease = lease

    @contextlib.contextmanager
    def write(self) -> Iterator[Connection]:
        """A write transaction that commits only while the lease is held.

        :raises LeaseLostError: at the start, when the lease was lost; nothing is written.
        """
        with self._inner.write() as connection:
            self._leases.check(connection, self.lease)
            yield connection

    @contextlib.contextmanager
    def read(self) -> Iterator[Connection]:
        """A read transaction of the underlying database."""
        with self._inner.read() as connection:
            yield connection
