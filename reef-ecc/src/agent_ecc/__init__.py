"""Agent ECC: every batch of an RL run trained under one grader epoch, with correct rewards.

The names a trainer needs are exported here; see ``docs/ecc/contract.md`` in the workspace for
the contract, ``docs/ecc/integrating.md`` for where each call goes in a trainer and
``docs/ecc/quickstart.md`` for a walkthrough from SWE-bench's logs. This package never imports
Reef; its Reef plugin is the separate module ``agent_ecc.reef_plugin``.
"""

from agent_ecc.audits import EpochAudit, audit_epochs, verdict_conflicts
from agent_ecc.backends import LocalBackend, RecordedBackend, RecordingBackend, load_recordings
from agent_ecc.candidates import Candidate, Member
from agent_ecc.consumption import (
    ConsumptionRecord,
    ConsumptionReport,
    Manifest,
    consumption_records,
)
from agent_ecc.grading import grade_recorded
from agent_ecc.journal import JournalError, SealJournal
from agent_ecc.preparer import Preparer
from agent_ecc.registry import (
    DirectoryRegistry,
    Epoch,
    Pin,
    PointerRead,
    Publication,
    RegistryError,
)
from agent_ecc.scorer import ExecutionCache, Scorer
from agent_ecc.seal import Decision, RewardError, SealSession, apply_rewards, arm_session
from agent_ecc.store import ContentStore
from agent_ecc.version import __version__
from agent_ecc.versions import AllOf, Check, GraderVersion, World, iter_checks

__all__ = [
    "AllOf",
    "Candidate",
    "Check",
    "ConsumptionRecord",
    "ConsumptionReport",
    "ContentStore",
    "Decision",
    "DirectoryRegistry",
    "Epoch",
    "EpochAudit",
    "ExecutionCache",
    "GraderVersion",
    "JournalError",
    "LocalBackend",
    "Manifest",
    "Member",
    "Pin",
    "PointerRead",
    "Preparer",
    "Publication",
    "RecordedBackend",
    "RecordingBackend",
    "RegistryError",
    "RewardError",
    "Scorer",
    "SealJournal",
    "SealSession",
    "World",
    "__version__",
    "apply_rewards",
    "arm_session",
    "audit_epochs",
    "consumption_records",
    "grade_recorded",
    "iter_checks",
    "load_recordings",
    "verdict_conflicts",
]
