"""Trainer leases and trainer state: one running trainer per scenario and component, and the
job it submitted and has not ended.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29 19:10:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "reef_trainer_leases",
        sa.Column("scenario", sa.String(length=400), nullable=False),
        sa.Column("trainer", sa.String(length=400), nullable=False),
        sa.Column("holder", sa.String(length=400), nullable=False),
        sa.Column("token", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("scenario", "trainer", name=op.f("pk_reef_trainer_leases")),
        comment="Which process runs each trainer; token grows with every takeover (fencing).",
    )
    op.create_table(
        "reef_trainer_state",
        sa.Column("scenario", sa.String(length=400), nullable=False),
        sa.Column("trainer", sa.String(length=400), nullable=False),
        sa.Column("running_job", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("scenario", "trainer", name=op.f("pk_reef_trainer_state")),
        comment="The job each trainer submitted and whose end is not committed yet.",
    )


def downgrade() -> None:
    op.drop_table("reef_trainer_state")
    op.drop_table("reef_trainer_leases")
