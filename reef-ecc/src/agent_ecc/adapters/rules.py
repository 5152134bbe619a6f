"""The SWE-bench adapter's verdict rules, by name (:mod:`agent_ecc.adapters.swebench` says what
each decides). Apart from the adapter so that what only names a rule (the Reef plugin's
settings) imports nothing of grading."""

from __future__ import annotations

from typing import Final

RULES: Final = ("official", "logical", "swebench_4_1", "reference_set")
#: The one default rule: the adapter's, :func:`~agent_ecc.adapters.swebench.conjunction_version`'s
#: and the Reef plugin's.
DEFAULT_RULE: Final = "official"
