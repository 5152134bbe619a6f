"""The scenario's sample store, ``TrainerSamples``: what every trainer of a scenario trains from.

A sample is a JSON body of one kind (``"trajectory"`` or ``"task"``), stored under an id that
the caller gives. Samples come three ways:

- a unit's samples (:meth:`TrainerSamples.add_record_samples`), made by one trainer from
  records; stored together with the ids of the records they consume, in one transaction, so a
  crash leaves all of them or none; a unit of several samples shares a group;
- named samples (:meth:`TrainerSamples.add_samples`, the pipeline's ``made_samples``): no group,
  no consumed record, and storing one that is there already changes nothing;
- uploads (:meth:`TrainerSamples.add_upload`): samples of no component, read by every trainer
  registered to read uploads, until the item leaves the scenario
  (:meth:`TrainerSamples.remove_upload`).

Store order is the order of :class:`~reef.storage.positions.Position`: units in the order they
were stored, uploads interleaved by arrival.

Each trainer keeps its own consumption: the records it consumed, and a train count per sample
that :meth:`TrainerSamples.commit_submission` raises in the transaction that commits a job.
A trainer's untrained samples live in a table of their own, so reading them costs the same with a
million trained samples as with none.

The store also keeps each trainer's manual buffer, the queued training instructions, the last
job outcome of each trainer, all durable and idempotent by id.

The store is split by concern, one module each, joined by the facade :class:`TrainerSamples`
that the pipeline uses: :mod:`~reef.storage.samples.sample_rows` (storing samples, each
trainer's untrained ones), :mod:`~reef.storage.samples.uploads`,
:mod:`~reef.storage.samples.consumption` (consumed records, commits, train counts),
:mod:`~reef.storage.samples.manual_buffer`, :mod:`~reef.storage.samples.instructions` and
:mod:`~reef.storage.samples.job_outcomes`.
"""

from reef.storage.samples.consumption import Consumption
from reef.storage.samples.instructions import Instruction, Instructions
from reef.storage.samples.job_outcomes import JobOutcomes
from reef.storage.samples.manual_buffer import ManualBuffers
from reef.storage.samples.sample_rows import NewSample, SampleKind, StoredSample
from reef.storage.samples.uploads import Uploads

__all__ = ["Instruction", "NewSample", "SampleKind", "StoredSample", "TrainerSamples"]


class TrainerSamples(Uploads, Consumption, ManualBuffers, Instructions, JobOutcomes):
    """The sample store of one scenario, shared by its trainers (one per component).

    Every method is one transaction. Methods that take a ``trainer`` act for that trainer only:
    another trainer's consumption, train counts and manual buffer are untouched.
    """
