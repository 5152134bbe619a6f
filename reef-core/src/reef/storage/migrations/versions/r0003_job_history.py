"""The job history and the trainers' stale marks, which the console reads.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 09:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "reef_jobs",
        sa.Column(
            "seq",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("scenario", sa.String(length=400), nullable=False),
        sa.Column("trainer", sa.String(length=400), nullable=False),
        sa.Column("job_id", sa.String(length=400), nullable=False),
        sa.Column("submitted_at", sa.Float(), nullable=True),
        sa.Column("instruction_id", sa.String(length=400), nullable=True),
        sa.Column("ended_at", sa.Float(), nullable=True),
        sa.Column("event", sa.String(length=16), nullable=True),
        sa.Column("metrics", sa.Text(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("extensions", sa.Text(), nullable=False),
        sa.Column("trained", sa.Integer(), nullable=False),
        sa.Column("consumed", sa.Integer(), nullable=False),
        sa.Column("reward_mean", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_reef_jobs")),
        sa.UniqueConstraint(
            "scenario", "trainer", "job_id", name=op.f("uq_reef_jobs_scenario_trainer_job_id")
        ),
        sqlite_autoincrement=True,
        comment="Each trainer's jobs, for people to read: submission, end, metrics.",
    )
    with op.batch_alter_table("reef_jobs", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_reef_jobs_scenario_seq"), ["scenario", "seq"], unique=False
        )
    op.create_table(
        "reef_job_samples",
        sa.Column("scenario", sa.String(length=400), nullable=False),
        sa.Column("trainer", sa.String(length=400), nullable=False),
        sa.Column("job_id", sa.String(length=400), nullable=False),
        sa.Column("sample_id", sa.String(length=400), nullable=False),
        sa.Column("trained", sa.Boolean(), nullable=False),
        sa.Column("reward", sa.Float(), nullable=True),
        sa.Column("extensions", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint(
            "scenario", "trainer", "job_id", "sample_id", name=op.f("pk_reef_job_samples")
        ),
        comment="The samples each job consumed, with the reward each trained with.",
    )
    with op.batch_alter_table("reef_job_samples", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_reef_job_samples_scenario_sample_id"),
            ["scenario", "sample_id"],
            unique=False,
        )
    op.create_table(
        "reef_stale_samples",
        sa.Column("scenario", sa.String(length=400), nullable=False),
        sa.Column("trainer", sa.String(length=400), nullable=False),
        sa.Column("sample_id", sa.String(length=400), nullable=False),
        sa.PrimaryKeyConstraint(
            "scenario", "trainer", "sample_id", name=op.f("pk_reef_stale_samples")
        ),
        comment="The untrained samples each trainer leaves out as stale, as of its last step.",
    )


def downgrade() -> None:
    op.drop_table("reef_stale_samples")
    with op.batch_alter_table("reef_job_samples", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_reef_job_samples_scenario_sample_id"))
    op.drop_table("reef_job_samples")
    with op.batch_alter_table("reef_jobs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_reef_jobs_scenario_seq"))
    op.drop_table("reef_jobs")
