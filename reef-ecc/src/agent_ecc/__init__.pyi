"""The names agent_ecc exports (``__init__.py`` says how they load): one list, read by type
checkers and by the lazy loader alike."""

from .audits import (
    EpochAudit as EpochAudit,
    audit_epochs as audit_epochs,
    verdict_conflicts as verdict_conflicts,
)
from .backends import (
    LocalBackend as LocalBackend,
    RecordedBackend as RecordedBackend,
    RecordingBackend as RecordingBackend,
    load_recordings as load_recordings,
)
from .candidates import (
    Candidate as Candidate,
    Member as Member,
)
from .consumption import (
    ConsumptionRecord as ConsumptionRecord,
    ConsumptionReport as ConsumptionReport,
    Manifest as Manifest,
    consumption_records as consumption_records,
)
from .grading import grade_recorded as grade_recorded
from .journal import (
    JournalError as JournalError,
    SealJournal as SealJournal,
)
from .preparer import Preparer as Preparer
from .registry import (
    DirectoryRegistry as DirectoryRegistry,
    Epoch as Epoch,
    Pin as Pin,
    PointerRead as PointerRead,
    Publication as Publication,
    RegistryError as RegistryError,
)
from .scorer import (
    ExecutionCache as ExecutionCache,
    Scorer as Scorer,
)
from .seal import (
    Decision as Decision,
    RewardError as RewardError,
    SealSession as SealSession,
    apply_rewards as apply_rewards,
    arm_session as arm_session,
)
from .store import ContentStore as ContentStore
from .version import __version__ as __version__
from .versions import (
    AllOf as AllOf,
    Check as Check,
    GraderVersion as GraderVersion,
    World as World,
    iter_checks as iter_checks,
)
