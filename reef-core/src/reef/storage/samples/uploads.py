"""Uploads: samples of no component, read by every trainer registered to read them (P-UP-*).

An upload is stored once under its trajectory id and every trainer that reads uploads gets it as
untrained, until its item leaves the scenario (:meth:`Uploads.remove_upload`); stored again
after that, it is a new upload at the end of store order that keeps each trainer's train count.
"""

from __future__ import annotations

from sqlalchemy import Connection, delete, select, update

from reef.storage.samples.manual_buffer import forget_chosen
from reef.storage.samples.sample_rows import NewSample, SampleRows
from reef.storage.tables import pending_samples, sample_trains, samples, trainers

__all__ = ["Uploads"]


class Uploads(SampleRows):
    """The uploads of one scenario's sample store."""

    def add_upload(self, upload: NewSample) -> bool:
        """Store an uploaded trajectory: a sample of no component (P-UP-1).

        Every trainer registered to read uploads gets it as untrained. Storing the same upload
        again changes nothing. An upload that was removed (its item detached) is stored again
        as a new upload, at the end of store order, with its body as given now; each trainer
        keeps its train count of it, so one that trained it does not get it again (a sample
        trains at most once per trainer) and the others get it as untrained.

        :returns: True when stored now.
        :raises ConflictError: when the id is stored with other content, or is not an upload.
        """
        row = self._row(upload, None, "upload", None)
        with self._database.write() as connection:
            self._lock_scenario(connection)
            stored = self._stored_rows(connection, [upload.id])
            counts: dict[str, int] = {}
            if stored and not (stored[0].origin == "upload" and stored[0].removed):
                self._check_same([row], stored)
                return False
            if stored:
                counts = self._take_removed_upload(connection, stored[0].seq)
            readers = connection.execute(
                select(trainers.c.trainer).where(
                    trainers.c.scenario == self.scenario, trainers.c.reads_uploads.is_(True)
                )
            ).scalars()
            positions = self._insert(
                connection, [row], pending_for=[r for r in readers if not counts.get(r)]
            )
            if counts:
                connection.execute(
                    sample_trains.insert(),
                    [
                        {"sample_seq": positions[0].seq, "trainer": trainer, "count": count}
                        for trainer, count in counts.items()
                    ],
                )
        return True

    def _take_removed_upload(self, connection: Connection, seq: int) -> dict[str, int]:
        """Delete a removed upload's tombstone so that it can be stored again at a new place in
        store order; returns its train counts by trainer, which the new row keeps."""
        counts = {
            str(trainer): int(count)
            for trainer, count in connection.execute(
                select(sample_trains.c.trainer, sample_trains.c["count"]).where(
                    sample_trains.c.sample_seq == seq
                )
            )
        }
        connection.execute(delete(sample_trains).where(sample_trains.c.sample_seq == seq))
        connection.execute(delete(samples).where(samples.c.seq == seq))
        return counts

    def remove_upload(self, sample_id: str) -> bool:
        """The upload's item left the scenario: every trainer forgets it (P-UP-2).

        Its train counts are kept, its place in the buffers is not.

        :returns: True when an upload was removed now; False when there was none to remove.
        """
        with self._database.write() as connection:
            seq = connection.execute(
                update(samples)
                .where(
                    samples.c.scenario == self.scenario,
                    samples.c.id == sample_id,
                    samples.c.origin == "upload",
                    samples.c.removed.is_(False),
                )
                .values(removed=True)
                .returning(samples.c.seq)
            ).scalar_one_or_none()
            if seq is None:
                return False
            connection.execute(delete(pending_samples).where(pending_samples.c.sample_seq == seq))
            forget_chosen(connection, [seq], scenario=self.scenario)
        return True
