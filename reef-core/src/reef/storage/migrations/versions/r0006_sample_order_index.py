"""An index on each scenario's samples in store order: a page of samples is an index range.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03 10:10:00.000000
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("reef_samples", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_reef_samples_scenario_commit_tx_seq"),
            ["scenario", "commit_tx", "seq"],
            unique=False,
        )


def downgrade() -> None:
    with op.batch_alter_table("reef_samples", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_reef_samples_scenario_commit_tx_seq"))
