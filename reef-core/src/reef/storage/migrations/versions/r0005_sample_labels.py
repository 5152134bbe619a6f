"""Rewards people gave samples, kept as an audit trail; the artifact each job made.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02 15:10:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "reef_sample_labels",
        sa.Column(
            "seq",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("scenario", sa.String(length=400), nullable=False),
        sa.Column("sample_id", sa.String(length=400), nullable=False),
        sa.Column("reward", sa.Float(), nullable=True),
        sa.Column("previous_reward", sa.Float(), nullable=True),
        sa.Column("labelled_by", sa.String(length=400), nullable=False),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("labelled_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_reef_sample_labels")),
        sqlite_autoincrement=True,
        comment="Rewards people gave samples, newest in force: who, when, from what, to what.",
    )
    with op.batch_alter_table("reef_sample_labels", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_reef_sample_labels_scenario_sample_id_seq"),
            ["scenario", "sample_id", "seq"],
            unique=False,
        )

    with op.batch_alter_table("reef_jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("artifact_id", sa.String(length=400), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("reef_jobs", schema=None) as batch_op:
        batch_op.drop_column("artifact_id")
    with op.batch_alter_table("reef_sample_labels", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_reef_sample_labels_scenario_sample_id_seq"))
    op.drop_table("reef_sample_labels")
