"""The ``tinker`` training component: jobs trained by Tinker, the hosted training service.

:mod:`reef.components.tinker.component` runs the jobs (see its documentation for idempotence
across restarts, artifacts and errors); :mod:`reef.components.tinker.datums` turns rendered
sequences into the SDK's ``Datum`` values. Needs the ``tinker`` SDK: install
``reef-core[tinker]``.
"""

from reef.components.tinker.component import TinkerComponent
from reef.components.tinker.settings import TinkerComponentSettings

__all__ = ["TinkerComponent", "TinkerComponentSettings"]
