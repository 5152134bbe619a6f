"""The root of every error Reef raises on purpose: :class:`ReefError`.

Catch ``ReefError`` to handle any of Reef's own errors (a bad config, a refused record, a lost
lease, an unknown plugin) and let a bug's ``TypeError`` or ``KeyError`` through. Each error
keeps the built-in base it always had, so ``except ValueError`` still catches a
:class:`reef.core.plugins.PluginConfigError` and ``except LookupError`` an unknown plugin.
"""

from __future__ import annotations

__all__ = ["ReefError"]


class ReefError(Exception):
    """An error of Reef's: every exception class reef-core defines derives from this one."""
