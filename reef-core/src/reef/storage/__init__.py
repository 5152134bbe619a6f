"""Reef's stores, on SQLAlchemy 2: SQLite by default (a file, WAL), PostgreSQL by URL.

Open a database once with :func:`open_database` (it migrates the schema), then make the stores
of each scenario on it:

- :class:`RecordStore`: inference records, reports and judged records, append-only, read by a
  gap-safe cursor, with trajectory link entries and body eviction under a capacity bound;
- :class:`TrainerSamples`: the scenario's samples, per-trainer consumption and train counts,
  the manual buffer, training instructions and job outcomes;
- :class:`TaskStorage`: task stores opened by name;
- :class:`ScenarioSettings` and :class:`DropCounters`;
- :class:`TrainerLeases` (one process runs each trainer) and :class:`TrainerState` (the job
  each trainer is running);
- for people to read: :class:`JobHistory` (each trainer's jobs, their metrics and samples),
  :class:`StaleSamples` (what each trainer leaves out as stale) and :class:`SampleBrowser`
  (samples a page at a time, filtered);
- :class:`ArtifactEvaluations`: each artifact's evaluation results and the eval gate's
  decisions;
- :class:`SampleLabels`: rewards people gave samples, kept as an audit trail.

See ``docs/storage.md`` for the tables, transactions and durability choices.
"""

from reef.storage.browse import (
    ArtifactReward,
    BrowsedSample,
    BrowseKey,
    SampleBrowser,
    SampleFilter,
)
from reef.storage.database import Database, open_database
from reef.storage.drops import DropCounters
from reef.storage.errors import (
    ConflictError,
    MissingLinkError,
    StorageError,
    UnknownSampleError,
    UnknownTrainerError,
)
from reef.storage.evaluations import ArtifactEvaluations, EvaluatedArtifact, GateDecision
from reef.storage.job_history import JobEntry, JobHistory, JobSampleEntry, SampleOfJob
from reef.storage.labels import SampleLabel, SampleLabels
from reef.storage.leases import FencedDatabase, Lease, LeaseLostError, TrainerLeases
from reef.storage.positions import Position
from reef.storage.records import RecordCapacity, RecordStore, StoredLink, StoredRecord
from reef.storage.samples import Instruction, NewSample, StoredSample, TrainerSamples
from reef.storage.scenario_settings import ScenarioSettings
from reef.storage.stale_samples import StaleSamples
from reef.storage.tasks import KeyValueStore, TaskStorage, TaskStore, TaskStores
from reef.storage.trainer_state import TrainerState

__all__ = [
    "ArtifactEvaluations",
    "ArtifactReward",
    "BrowseKey",
    "BrowsedSample",
    "ConflictError",
    "Database",
    "DropCounters",
    "EvaluatedArtifact",
    "FencedDatabase",
    "GateDecision",
    "Instruction",
    "JobEntry",
    "JobHistory",
    "JobSampleEntry",
    "KeyValueStore",
    "Lease",
    "LeaseLostError",
    "MissingLinkError",
    "NewSample",
    "Position",
    "RecordCapacity",
    "RecordStore",
    "SampleBrowser",
    "SampleFilter",
    "SampleLabel",
    "SampleLabels",
    "SampleOfJob",
    "ScenarioSettings",
    "StaleSamples",
    "StorageError",
    "StoredLink",
    "StoredRecord",
    "StoredSample",
    "TaskStorage",
    "TaskStore",
    "TaskStores",
    "TrainerLeases",
    "TrainerSamples",
    "TrainerState",
    "UnknownSampleError",
    "UnknownTrainerError",
    "open_database",
]
