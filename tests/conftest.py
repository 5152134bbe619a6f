"""Reef's storage fixtures (storage_url, storage_database, postgres_url) for these tests: a
suite opts into them, as a recipe's own suite does."""

pytest_plugins = ["reef.testing"]
