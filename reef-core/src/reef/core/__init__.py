"""Values and rules every floor of Reef shares: records, trajectories, ATIF, job data, settings.

The bottom floor: it imports nothing of Reef above it and does no I/O (``docs/architecture.md``).
"""
