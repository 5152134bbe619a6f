"""The errors of Reef's stores. Each names what is wrong and where; none leaves a partial write
behind (the transaction that raised it is rolled back)."""

from __future__ import annotations

from reef.errors import ReefError


class StorageError(ReefError):
    """Base of every error raised by :mod:`reef.storage`."""


class ConflictError(StorageError):
    """A write under an id that is stored already with different content.

    Ids are deterministic, so storing the same content again is a no-op; different content
    under the same id is a bug or a client error that must not overwrite what is stored.

    :ivar what: what kind of thing the id names (``"record"``, ``"sample"``, ...).
    :ivar id: the id.
    :ivar scenario: the scenario of the stored value.
    """

    def __init__(self, what: str, id: str, scenario: str) -> None:
        super().__init__(
            f"{what} {id!r} of scenario {scenario!r} is already stored with different content"
        )
        self.what = what
        self.id = id
        self.scenario = scenario


class UnknownSampleError(StorageError, LookupError):
    """A sample id that the scenario's sample store does not hold.

    :ivar scenario: the scenario.
    :ivar sample_ids: the ids that are not stored, in the caller's order.
    """

    def __init__(self, scenario: str, sample_ids: tuple[str, ...]) -> None:
        shown = ", ".join(repr(i) for i in sample_ids[:5])
        more = f" and {len(sample_ids) - 5} more" if len(sample_ids) > 5 else ""
        super().__init__(f"scenario {scenario!r} stores no sample {shown}{more}")
        self.scenario = scenario
        self.sample_ids = sample_ids


class UnknownTrainerError(StorageError, LookupError):
    """A trainer that reads a sample store without having registered with it.

    Registration (:meth:`~reef.storage.samples.TrainerSamples.register_trainer`) is what gives a
    trainer the uploads stored before it existed.
    """

    def __init__(self, scenario: str, trainer: str) -> None:
        super().__init__(
            f"trainer {trainer!r} is not registered with the sample store of scenario "
            f"{scenario!r}; call register_trainer first"
        )
        self.scenario = scenario
        self.trainer = trainer


class MissingLinkError(StorageError, ValueError):
    """An inference record stored without its trajectory link entry, or another record with one."""
