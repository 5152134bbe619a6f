"""``BackgroundJobWorker``: the slow work a stage owns, off the trainer's thread (P-SLOW-2).

A stage submits coroutines (a judgment, a task-generation round); the worker runs them on its
own event loop in its own thread, and the stage collects what ended at its next ``advance``.
The stage owns the worker: its ``close`` stops it, cancelling what still runs, and raises
:class:`TimeoutError` when the cancelled work does not finish its cleanup in time, so that no
caller mistakes an unfinished shutdown for a completed one (P-SLOW-3).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Hashable
from concurrent.futures import Future
from typing import Any

import attrs


@attrs.frozen
class FinishedJob:
    """A background job that ended: its key and its result, or the exception it raised."""

    key: Hashable
    result: Any = None
    error: BaseException | None = None


class BackgroundJobWorker:
    """Runs a stage's coroutines on an event loop of its own thread.

    Thread-safe for its owner: ``submit``, ``finished``, ``running`` and ``close`` may be
    called from the trainer thread while jobs run.

    :param name: names the worker's thread (for logs and debuggers).
    :param close_timeout: how long :meth:`close` waits by default for cancelled jobs to clean up.
    """

    def __init__(self, name: str = "reef-background", *, close_timeout: float = 10.0) -> None:
        self.name = name
        self.close_timeout = close_timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._ended = threading.Condition(self._lock)
        self._pending: dict[Hashable, Future[Any]] = {}
        self._finished: list[FinishedJob] = []
        self._closed = False

    def _start(self) -> asyncio.AbstractEventLoop:
        # Started on first use, so that a stage that never submits never owns a thread.
        if self._loop is None:
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name=self.name, daemon=True)
            thread.start()
            self._loop, self._thread = loop, thread
        return self._loop

    def submit(self, key: Hashable, job: Callable[[], Awaitable[Any]]) -> None:
        """Run ``job()`` in the background; its end shows in :meth:`finished` under ``key``.

        :raises RuntimeError: after :meth:`close`, or when a job with ``key`` still runs.
        """
        with self._lock:
            if self._closed:
                raise RuntimeError(f"worker {self.name!r} is closed")
            if key in self._pending:
                raise RuntimeError(f"worker {self.name!r} already runs job {key!r}")
            loop = self._start()

            async def run() -> Any:
                return await job()

            future = asyncio.run_coroutine_threadsafe(run(), loop)
            self._pending[key] = future
        future.add_done_callback(lambda done: self._collect(key, done))

    def _collect(self, key: Hashable, future: Future[Any]) -> None:
        with self._lock:
            if self._pending.get(key) is not future:
                return
            del self._pending[key]
            if future.cancelled():
                return
            error = future.exception()
            self._finished.append(
                FinishedJob(key, None if error is not None else future.result(), error)
            )
            self._ended.notify_all()

    def finished(self) -> list[FinishedJob]:
        """The jobs that ended since the last call, in the order they ended."""
        with self._lock:
            done, self._finished = self._finished, []
        return done

    def wait(self, timeout: float) -> bool:
        """Block until a job's end waits to be collected, at most ``timeout`` seconds.

        For an owner that has nothing to do but wait (shutdown, a test); the trainer thread
        never waits, it polls :meth:`finished` at its next ``advance``.

        :returns: True when an ended job waits in :meth:`finished`.
        """
        with self._ended:
            return self._ended.wait_for(lambda: bool(self._finished), timeout)

    def running(self) -> bool:
        """True while a submitted job has not ended, or its end was not collected yet."""
        with self._lock:
            return bool(self._pending or self._finished)

    def close(
        self,
        timeout: float | None = None,
        *,
        cleanup: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Cancel every running job, run ``cleanup`` on the loop once they ended (what the jobs
        shared, such as an HTTP client, is closed on the loop it was used on; a worker that
        never ran a job skips it), stop the loop and join the thread; closing again does
        nothing.

        :raises TimeoutError: when the jobs' cleanup and the loop do not finish within
            ``timeout`` seconds (default :attr:`close_timeout`); the worker is then closed but
            its thread may still run.
        :raises Exception: what ``cleanup`` raised, once the loop stopped.
        """
        with self._lock:
            self._closed = True
            pending = list(self._pending.values())
            self._pending.clear()
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None  # a second close has nothing left to stop
        if loop is None or thread is None:
            return
        for future in pending:
            future.cancel()

        failed: list[Exception] = []

        async def drain() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            await asyncio.gather(*tasks, return_exceptions=True)
            try:
                if cleanup is not None:
                    await cleanup()
            except Exception as exc:
                failed.append(exc)
            finally:
                loop.stop()

        limit = self.close_timeout if timeout is None else timeout
        asyncio.run_coroutine_threadsafe(drain(), loop)
        thread.join(limit)
        if thread.is_alive():
            raise TimeoutError(f"worker {self.name!r} did not finish its cleanup within {limit} s")
        loop.close()
        if failed:
            raise failed[0]
