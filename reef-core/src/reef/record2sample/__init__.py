"""Record-to-sample stages: :class:`Record2Sample`, record sets and units, and the built-ins.

A recipe's record-to-sample stage extends one of :class:`NoSamples`, :class:`TrajectorySamples`,
:class:`ReportSamples` (distilling: :class:`DistillSamples`; grouped:
:class:`reef.recipe.grouped.processor.GroupedReportSamples`) or :class:`JudgedSamples` (or
:class:`Record2Sample` itself). See ``docs/pipeline.md`` for a recipe author's walk through them.

Each name loads its module when first used (the names are listed in ``__init__.pyi``, which
type checkers read too), so importing one module of the package imports none of the others.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
