"""Reef storage (placeholder docstring, filled below)."""
