"""The generator service, and what task generators are given."""
