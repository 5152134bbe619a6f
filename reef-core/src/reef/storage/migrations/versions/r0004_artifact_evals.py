"""Each artifact's evaluation results, and the eval gate's decisions.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02 06:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "reef_artifact_evals",
        sa.Column("scenario", sa.String(length=400), nullable=False),
        sa.Column("trainer", sa.String(length=400), nullable=False),
        sa.Column("artifact_id", sa.String(length=400), nullable=False),
        sa.Column("eval", sa.String(length=400), nullable=False),
        sa.Column("score", sa.Float(), nullable=False),
        sa.Column("items", sa.Text(), nullable=False),
        sa.Column("sampling", sa.Text(), nullable=False),
        sa.Column("measured_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint(
            "scenario", "trainer", "artifact_id", "eval", name=op.f("pk_reef_artifact_evals")
        ),
        comment="Each artifact's score on each eval set, with every item's outcome.",
    )
    op.create_table(
        "reef_gate_decisions",
        sa.Column(
            "seq",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("scenario", sa.String(length=400), nullable=False),
        sa.Column("trainer", sa.String(length=400), nullable=False),
        sa.Column("artifact_id", sa.String(length=400), nullable=False),
        sa.Column("served", sa.Boolean(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("decided_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_reef_gate_decisions")),
        sa.UniqueConstraint(
            "scenario",
            "trainer",
            "artifact_id",
            name=op.f("uq_reef_gate_decisions_scenario_trainer_artifact_id"),
        ),
        sqlite_autoincrement=True,
        comment="The eval gate's decision on each artifact: served or held back, and why.",
    )
    with op.batch_alter_table("reef_gate_decisions", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_reef_gate_decisions_scenario_trainer_seq"),
            ["scenario", "trainer", "seq"],
            unique=False,
        )


def downgrade() -> None:
    with op.batch_alter_table("reef_gate_decisions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_reef_gate_decisions_scenario_trainer_seq"))
    op.drop_table("reef_gate_decisions")
    op.drop_table("reef_artifact_evals")
