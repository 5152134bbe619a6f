"""What the service asks of the process that runs the trainers, and what it tells it.

The routes never call a trainer: a mode change, an instruction or a manual-buffer edit is
stored, and the trainer reads the store (``docs/service.md``). A process that runs trainers
beside the service may still want to hear of a change at once instead of at its next poll, and
it owns the local engine and the publication of trained weights into vLLM or SGLang.
:class:`ServiceRuntime` is that seam: every method has a default that does nothing, so the
service runs without one.
"""

from __future__ import annotations

import functools

from reef.engines.interface import CompletionFunction
from reef.engines.publisher import Publisher
from reef.pipeline_context import TrainingMode
from reef.train.trainer import TrainerObserver, process_holder

__all__ = ["ServiceRuntime"]


@functools.cache
def _this_process() -> str:
    """The name of a process that runs no trainer, made once."""
    return process_holder()


class ServiceRuntime:
    """Hooks between the service and the trainers of its process; override what you serve.

    The service calls the notification hooks after the change is durable, on the event loop:
    they must return at once (set an event, put on a queue).
    """

    def process(self) -> str:
        """This process's name, as its trainers hold their leases by: the ``process`` label of
        what the service computes from the stores (``docs/observe.md``)."""
        return _this_process()

    def observe_trainers(self, observer: TrainerObserver) -> None:
        """Tell every trainer of this process of its steps and ends through ``observer`` (the
        service's metrics and traces); called once, before the trainers start."""
        del observer

    def local_engine(self, scenario: str) -> CompletionFunction | None:
        """The built-in engine that answers ``scenario`` (its ``serving.engine`` is
        ``local``); ``None`` when this process has none."""
        del scenario
        return None

    def publisher(self, scenario: str) -> Publisher | None:
        """What puts trained artifacts into the scenario's vLLM or SGLang server and routes its
        calls to them (:class:`~reef.engines.publisher.Publisher`); ``None`` when this
        process has none for it."""
        del scenario
        return None

    def training_mode_changed(self, scenario: str, mode: TrainingMode) -> None:
        """The scenario's stored training mode is now ``mode``."""
        del scenario, mode

    def instructions_queued(self, scenario: str) -> None:
        """A training instruction of ``scenario`` was stored."""
        del scenario

    def manual_buffer_changed(self, scenario: str) -> None:
        """A manual buffer of ``scenario`` changed in the store."""
        del scenario
