"""The initial schema of Reef's stores: records, samples, tasks, settings and counters.

Revision ID: 0001
Revises: (none)
Create Date: 2026-11-29 17:29:31.133856
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "reef_consumed_records",
        sa.Column("scenario", sa.String(length=400), nullable=False),
        sa.Column("trainer", sa.String(length=400), nullable=False),
        sa.Column("record_id", sa.String(length=400), nullable=False),
        sa.PrimaryKeyConstraint(
            "scenario", "trainer", "record_id", name=op.f("pk_reef_consumed_records")
        ),
    )
    op.create_table(
        "reef_drop_counts",
        sa.Column("scenario", sa.String(length=400), nullable=False),
        sa.Column("trainer", sa.String(length=400), nullable=False),
        sa.Column("reason", sa.String(length=64), nullable=False),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("scenario", "trainer", "reason", name=op.f("pk_reef_drop_counts")),
    )
    op.create_table(
        "reef_instruction_reads",
        sa.Column("scenario", sa.String(length=400), nullable=False),
        sa.Column("trainer", sa.String(length=400), nullable=False),
        sa.Column("request_id", sa.String(length=400), nullable=False),
        sa.PrimaryKeyConstraint(
            "scenario", "trainer", "request_id", name=op.f("pk_reef_instruction_reads")
        ),
    )
    op.create_table(
        "reef_instructions",
        sa.Column(
            "seq",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("scenario", sa.String(length=400), nullable=False),
        sa.Column("request_id", sa.String(length=400), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_reef_instructions")),
        sa.UniqueConstraint(
            "scenario", "request_id", name=op.f("uq_reef_instructions_scenario_request_id")
        ),
        sqlite_autoincrement=True,
    )
    op.create_table(
        "reef_job_outcomes",
        sa.Column("scenario", sa.String(length=400), nullable=False),
        sa.Column("trainer", sa.String(length=400), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("ended_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("scenario", "trainer", name=op.f("pk_reef_job_outcomes")),
        comment="The last job outcome of each trainer, for recovery after a restart.",
    )
    op.create_table(
        "reef_record_usage",
        sa.Column("scenario", sa.String(length=400), nullable=False),
        sa.Column("bodies", sa.BigInteger(), nullable=False),
        sa.Column("body_bytes", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("scenario", name=op.f("pk_reef_record_usage")),
        comment="Running totals of the bodies a scenario holds, for the capacity bound.",
    )
    op.create_table(
        "reef_records",
        sa.Column(
            "seq",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("commit_tx", sa.BigInteger(), nullable=False),
        sa.Column("scenario", sa.String(length=400), nullable=False),
        sa.Column("id", sa.String(length=400), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("body", sa.Text(), nullable=True),
        sa.Column("body_bytes", sa.Integer(), nullable=False),
        sa.Column("content_hash", sa.String(length=64), nullable=False),
        sa.Column("stored_at", sa.Float(), nullable=False),
        sa.Column("evicted_reason", sa.String(length=32), nullable=True),
        sa.Column("parent_id", sa.String(length=400), nullable=True),
        sa.Column("request_key", sa.String(length=64), nullable=True),
        sa.Column("reply_keys", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_reef_records")),
        sa.UniqueConstraint("id", name=op.f("uq_reef_records_id")),
        sqlite_autoincrement=True,
    )
    with op.batch_alter_table("reef_records", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_reef_records_scenario_commit_tx_seq"),
            ["scenario", "commit_tx", "seq"],
            unique=False,
        )
        batch_op.create_index(
            batch_op.f("ix_reef_records_scenario_evicted_reason_seq"),
            ["scenario", "evicted_reason", "seq"],
            unique=False,
        )

    op.create_table(
        "reef_samples",
        sa.Column(
            "seq",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("commit_tx", sa.BigInteger(), nullable=False),
        sa.Column("scenario", sa.String(length=400), nullable=False),
        sa.Column("id", sa.String(length=400), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("group_id", sa.String(length=400), nullable=True),
        sa.Column("trainer", sa.String(length=400), nullable=True),
        sa.Column("origin", sa.String(length=16), nullable=False),
        sa.Column("removed", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_reef_samples")),
        sa.UniqueConstraint("scenario", "id", name=op.f("uq_reef_samples_scenario_id")),
        sqlite_autoincrement=True,
    )
    op.create_table(
        "reef_scenario_settings",
        sa.Column("scenario", sa.String(length=400), nullable=False),
        sa.Column("key", sa.String(length=400), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("scenario", "key", name=op.f("pk_reef_scenario_settings")),
    )
    op.create_table(
        "reef_scenarios",
        sa.Column("scenario", sa.String(length=400), nullable=False),
        sa.PrimaryKeyConstraint("scenario", name=op.f("pk_reef_scenarios")),
        comment="A row per scenario; writers that must not race lock it.",
    )
    op.create_table(
        "reef_submissions",
        sa.Column("scenario", sa.String(length=400), nullable=False),
        sa.Column("trainer", sa.String(length=400), nullable=False),
        sa.Column("data_id", sa.String(length=400), nullable=False),
        sa.Column("committed_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("scenario", "trainer", "data_id", name=op.f("pk_reef_submissions")),
    )
    op.create_table(
        "reef_task_entries",
        sa.Column(
            "seq",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("scenario", sa.String(length=400), nullable=False),
        sa.Column("store", sa.String(length=400), nullable=False),
        sa.Column("key", sa.String(length=400), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_reef_task_entries")),
        sa.UniqueConstraint(
            "scenario", "store", "key", name=op.f("uq_reef_task_entries_scenario_store_key")
        ),
        sqlite_autoincrement=True,
    )
    op.create_table(
        "reef_trainers",
        sa.Column("scenario", sa.String(length=400), nullable=False),
        sa.Column("trainer", sa.String(length=400), nullable=False),
        sa.Column("reads_uploads", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("scenario", "trainer", name=op.f("pk_reef_trainers")),
    )
    op.create_table(
        "reef_manual_buffer",
        sa.Column("scenario", sa.String(length=400), nullable=False),
        sa.Column("trainer", sa.String(length=400), nullable=False),
        sa.Column(
            "sample_seq", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
        ),
        sa.ForeignKeyConstraint(
            ["sample_seq"],
            ["reef_samples.seq"],
            name=op.f("fk_reef_manual_buffer_sample_seq_reef_samples"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "scenario", "trainer", "sample_seq", name=op.f("pk_reef_manual_buffer")
        ),
    )
    op.create_table(
        "reef_pending_samples",
        sa.Column("scenario", sa.String(length=400), nullable=False),
        sa.Column("trainer", sa.String(length=400), nullable=False),
        sa.Column("commit_tx", sa.BigInteger(), nullable=False),
        sa.Column(
            "sample_seq", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
        ),
        sa.ForeignKeyConstraint(
            ["sample_seq"],
            ["reef_samples.seq"],
            name=op.f("fk_reef_pending_samples_sample_seq_reef_samples"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "scenario", "trainer", "commit_tx", "sample_seq", name=op.f("pk_reef_pending_samples")
        ),
        comment="The samples each trainer has not trained yet.",
    )
    op.create_table(
        "reef_sample_trains",
        sa.Column(
            "sample_seq", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
        ),
        sa.Column("trainer", sa.String(length=400), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["sample_seq"],
            ["reef_samples.seq"],
            name=op.f("fk_reef_sample_trains_sample_seq_reef_samples"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("sample_seq", "trainer", name=op.f("pk_reef_sample_trains")),
    )


def downgrade() -> None:
    op.drop_table("reef_sample_trains")
    op.drop_table("reef_pending_samples")
    op.drop_table("reef_manual_buffer")
    op.drop_table("reef_trainers")
    op.drop_table("reef_task_entries")
    op.drop_table("reef_submissions")
    op.drop_table("reef_scenarios")
    op.drop_table("reef_scenario_settings")
    op.drop_table("reef_samples")
    with op.batch_alter_table("reef_records", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_reef_records_scenario_evicted_reason_seq"))
        batch_op.drop_index(batch_op.f("ix_reef_records_scenario_commit_tx_seq"))

    op.drop_table("reef_records")
    op.drop_table("reef_record_usage")
    op.drop_table("reef_job_outcomes")
    op.drop_table("reef_instructions")
    op.drop_table("reef_instruction_reads")
    op.drop_table("reef_drop_counts")
    op.drop_table("reef_consumed_records")
