"""Fault points: places where a crash test kills the process on purpose, at an exact moment.

A crash that matters falls between two durable steps (weights saved, outcome not yet written).
Waiting for it by timing is luck; instead the code names the moment with :func:`fault_point`,
and a test runs the process with ``REEF_FAULT_POINT`` set to that name: the process SIGKILLs
itself there, as a power cut or the OOM killer would. Unset (always, outside such tests), a
fault point does nothing.
"""

from __future__ import annotations

import os
import signal
from typing import Final

__all__ = ["FAULT_POINT_ENV", "fault_point"]

#: The environment variable that names the fault point to die at.
FAULT_POINT_ENV: Final = "REEF_FAULT_POINT"


def fault_point(name: str) -> None:
    """Die here at once (SIGKILL) when ``REEF_FAULT_POINT`` is ``name``; else nothing."""
    if os.environ.get(FAULT_POINT_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
