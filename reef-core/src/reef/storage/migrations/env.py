"""Alembic's environment for Reef's schema: always run on a connection that
:func:`reef.storage.database.migrate` gives, inside its transaction and lock."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from reef.storage.tables import metadata

connection = context.config.attributes.get("connection")
if not isinstance(connection, Connection):
    raise RuntimeError("Reef's migrations run through reef.storage.database.migrate, not alone")
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
