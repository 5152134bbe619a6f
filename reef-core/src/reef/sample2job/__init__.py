"""Sample-to-job stages: :class:`Sample2Job` and the built-in job-data stages.

A recipe's sample-to-job stage extends :class:`Sample2Job` and implements ``make_job_data``;
the core's default weight recipe uses :class:`reef.recipe.grouped.processor.GroupedJobData`.
:func:`validate_job_data` is the trainer's check of a stage's job data against its
``output_schema``, for a recipe's tests too.

Each name loads its module when first used (the names are listed in ``__init__.pyi``, which
type checkers read too), so importing one module of the package imports none of the others.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
