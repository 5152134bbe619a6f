"""The schema of Reef's stores, as SQLAlchemy Core tables.

Every table is scenario-scoped: the first column of each key is ``scenario``. Rows that have a
*store order* (records, samples) carry ``seq``, a value of one autoincrementing sequence drawn
under the scenario's store-order lock, and ``commit_tx`` (0; kept so that a later scheme of
concurrent writers can order by transaction without a migration of every reader). Their order
is ``(commit_tx, seq)``; see :mod:`reef.storage.positions`.

JSON values are stored as canonical text (sorted keys, no spaces), so that equal values are equal
text and a conflict check is a string comparison on both dialects.

This metadata is what the migrations must produce: a test compares the migrated schema with it.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
)

#: Naming convention, so that every constraint has a stable name that migrations can refer to.
metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

#: An id: record ids, sample ids, trainer and store names, keys.
_ID = String(400)
#: The type of ``seq``: a 64-bit integer, but SQLite needs ``INTEGER`` to alias its rowid.
_SEQ = BigInteger().with_variant(Integer(), "sqlite")


def _seq() -> Column[int]:
    return Column("seq", _SEQ, primary_key=True, autoincrement=True)


scenarios = Table(
    "reef_scenarios",
    metadata,
    Column("scenario", _ID, primary_key=True),
    comment="A row per scenario; writers that must not race lock it.",
)

records = Table(
    "reef_records",
    metadata,
    _seq(),
    Column("commit_tx", BigInteger, nullable=False),
    Column("scenario", _ID, nullable=False),
    Column("id", _ID, nullable=False),
    Column("kind", String(16), nullable=False),
    # The canonical JSON of the record; NULL once evicted (the row and its link entry stay).
    Column("body", Text, nullable=True),
    Column("body_bytes", Integer, nullable=False),
    # Hash of the record's content, kept after eviction so a retry can still be told apart
    # from a conflicting write under the same id.
    Column("content_hash", String(64), nullable=False),
    Column("stored_at", Float, nullable=False),
    Column("evicted_reason", String(32), nullable=True),
    # The trajectory link entry of an inference record (reef.core.trajectory_index.LinkEntry).
    Column("parent_id", _ID, nullable=True),
    Column("request_key", String(64), nullable=True),
    Column("reply_keys", Text, nullable=True),
    UniqueConstraint("id"),
    Index(None, "scenario", "commit_tx", "seq"),
    # Eviction walks the oldest bodies still held.
    Index(None, "scenario", "evicted_reason", "seq"),
    sqlite_autoincrement=True,
)

record_usage = Table(
    "reef_record_usage",
    metadata,
    Column("scenario", _ID, primary_key=True),
    Column("bodies", BigInteger, nullable=False),
    Column("body_bytes", BigInteger, nullable=False),
    comment="Running totals of the bodies a scenario holds, for the capacity bound.",
)

samples = Table(
    "reef_samples",
    metadata,
    _seq(),
    Column("commit_tx", BigInteger, nullable=False),
    Column("scenario", _ID, nullable=False),
    Column("id", _ID, nullable=False),
    Column("kind", String(16), nullable=False),
    Column("body", Text, nullable=False),
    Column("group_id", _ID, nullable=True),
    # The trainer (component) that made the sample; NULL for an upload.
    Column("trainer", _ID, nullable=True),
    # 'record' (a unit's sample), 'named' (made_samples) or 'upload'.
    Column("origin", String(16), nullable=False),
    # An upload whose item left the scenario: kept as a tombstone so ids and order stay stable.
    Column("removed", Boolean, nullable=False),
    UniqueConstraint("scenario", "id"),
    # Store order within a scenario: a page of samples (the browser, an export) is a range.
    Index(None, "scenario", "commit_tx", "seq"),
    sqlite_autoincrement=True,
)

trainers = Table(
    "reef_trainers",
    metadata,
    Column("scenario", _ID, nullable=False),
    Column("trainer", _ID, nullable=False),
    Column("reads_uploads", Boolean, nullable=False),
    PrimaryKeyConstraint("scenario", "trainer"),
)

pending_samples = Table(
    "reef_pending_samples",
    metadata,
    Column("scenario", _ID, nullable=False),
    Column("trainer", _ID, nullable=False),
    Column("commit_tx", BigInteger, nullable=False),
    Column("sample_seq", _SEQ, ForeignKey("reef_samples.seq", ondelete="CASCADE"), nullable=False),
    # The key is the read order: untrained samples of one trainer, in store order, never
    # touching the rows of samples it already trained.
    PrimaryKeyConstraint("scenario", "trainer", "commit_tx", "sample_seq"),
    comment="The samples each trainer has not trained yet.",
)

sample_trains = Table(
    "reef_sample_trains",
    metadata,
    Column("sample_seq", _SEQ, ForeignKey("reef_samples.seq", ondelete="CASCADE"), nullable=False),
    Column("trainer", _ID, nullable=False),
    Column("count", Integer, nullable=False),
    PrimaryKeyConstraint("sample_seq", "trainer"),
)

consumed_records = Table(
    "reef_consumed_records",
    metadata,
    Column("scenario", _ID, nullable=False),
    Column("trainer", _ID, nullable=False),
    Column("record_id", _ID, nullable=False),
    PrimaryKeyConstraint("scenario", "trainer", "record_id"),
)

submissions = Table(
    "reef_submissions",
    metadata,
    Column("scenario", _ID, nullable=False),
    Column("trainer", _ID, nullable=False),
    Column("data_id", _ID, nullable=False),
    Column("committed_at", Float, nullable=False),
    PrimaryKeyConstraint("scenario", "trainer", "data_id"),
)

manual_buffer = Table(
    "reef_manual_buffer",
    metadata,
    Column("scenario", _ID, nullable=False),
    Column("trainer", _ID, nullable=False),
    Column("sample_seq", _SEQ, ForeignKey("reef_samples.seq", ondelete="CASCADE"), nullable=False),
    PrimaryKeyConstraint("scenario", "trainer", "sample_seq"),
)

instructions = Table(
    "reef_instructions",
    metadata,
    _seq(),
    Column("scenario", _ID, nullable=False),
    Column("request_id", _ID, nullable=False),
    Column("body", Text, nullable=False),
    UniqueConstraint("scenario", "request_id"),
    sqlite_autoincrement=True,
)

instruction_reads = Table(
    "reef_instruction_reads",
    metadata,
    Column("scenario", _ID, nullable=False),
    Column("trainer", _ID, nullable=False),
    Column("request_id", _ID, nullable=False),
    PrimaryKeyConstraint("scenario", "trainer", "request_id"),
)

job_outcomes = Table(
    "reef_job_outcomes",
    metadata,
    Column("scenario", _ID, nullable=False),
    Column("trainer", _ID, nullable=False),
    Column("body", Text, nullable=False),
    Column("ended_at", Float, nullable=False),
    PrimaryKeyConstraint("scenario", "trainer"),
    comment="The last job outcome of each trainer, for recovery after a restart.",
)

scenario_settings = Table(
    "reef_scenario_settings",
    metadata,
    Column("scenario", _ID, nullable=False),
    Column("key", _ID, nullable=False),
    Column("value", Text, nullable=False),
    PrimaryKeyConstraint("scenario", "key"),
)

task_entries = Table(
    "reef_task_entries",
    metadata,
    _seq(),
    Column("scenario", _ID, nullable=False),
    Column("store", _ID, nullable=False),
    Column("key", _ID, nullable=False),
    Column("value", Text, nullable=False),
    UniqueConstraint("scenario", "store", "key"),
    sqlite_autoincrement=True,
)

drop_counts = Table(
    "reef_drop_counts",
    metadata,
    Column("scenario", _ID, nullable=False),
    # '' for a count of the scenario that no trainer owns (an evicted record body).
    Column("trainer", _ID, nullable=False),
    Column("reason", String(64), nullable=False),
    Column("count", BigInteger, nullable=False),
    PrimaryKeyConstraint("scenario", "trainer", "reason"),
)
