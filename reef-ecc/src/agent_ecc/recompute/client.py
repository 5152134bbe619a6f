"""HTTPBackend: the scorer's backend that asks the re-verification service to execute requests.

A post is retried only when it failed before any evaluation could have started: the connection
could not be made or the request not sent (``URLError``), or the service answered ``503`` (no
free slot: it ran nothing). A failure after the request was sent (the connection dropped, no
answer in time) may follow an execution, so it is not retried, and neither is a refusal (4xx).
Retries wait a jittered, doubling backoff, and stop at ``attempts`` or when the next attempt
could not start within ``deadline_s`` of the first. Every answer carries how many attempts it
took and each failure's reason, which the scorer adds up in ``decision.stats["transport"]``
(E-SEAL-10). A request given up on is an :class:`~agent_ecc.execution.InfraFailure`, never a
verdict (I2).
"""

from __future__ import annotations

import json
import random
import time
import urllib.error
import urllib.request
from concurrent.futures import Future, ThreadPoolExecutor
from http.client import HTTPException

import attrs

from agent_ecc.codec import FormatError
from agent_ecc.execution import ExecRequest, InfraFailure, Outcome
from agent_ecc.recompute.wire import output_from_json, request_to_json

_EXECUTE = "/v1/execute"


class HTTPBackend:
    """Posts requests to the service at ``url`` (``http://host:port``), ``capacity`` at once.

    :param attempts: posts per request at most (retries only of failures before evaluation).
    :param deadline_s: no new attempt starts later than this after the first.
    :param backoff_s: the first retry's mean wait; each later one doubles, jittered by +-50%.
    :param read_timeout_s: how long to wait for an answer once a request is sent; by default
        the request's own ``timeout_s`` plus a margin for the checkout and the patch.
    :param seed: seeds the jitter (tests); None draws it.
    """

    def __init__(
        self,
        url: str,
        *,
        attempts: int = 3,
        deadline_s: float = 60.0,
        backoff_s: float = 0.25,
        capacity: int = 16,
        read_timeout_s: float | None = None,
        seed: int | None = None,
    ) -> None:
        if attempts < 1:
            raise ValueError(f"attempts must be at least 1, got {attempts}")
        self.url = url.rstrip("/")
        self.attempts = attempts
        self.deadline_s = deadline_s
        self.backoff_s = backoff_s
        self.read_timeout_s = read_timeout_s
        self._random = random.Random(seed)
        self._pool = ThreadPoolExecutor(max_workers=capacity, thread_name_prefix="agent-ecc-http")

    def submit(self, request: ExecRequest) -> Future[Outcome]:
        """Post ``request`` from the pool; the future gives its raw output or infra failure."""
        return self._pool.submit(self.post, request)

    def close(self) -> None:
        """Stop the pool after the posts under way."""
        self._pool.shutdown(wait=True)

    def _read_timeout(self, request: ExecRequest) -> float:
        if self.read_timeout_s is not None:
            return self.read_timeout_s
        return float(request.execution.get("timeout_s", 60.0)) + 120.0

    def post(self, request: ExecRequest) -> Outcome:
        """Post ``request`` with retries (see the module docstring), in the calling thread."""
        data = json.dumps(request_to_json(request)).encode()
        start = time.monotonic()
        failures: list[str] = []
        attempt = 0
        while True:
            attempt += 1
            reason, detail, retry = self._attempt(request, data)
            if reason is None:
                assert isinstance(detail, str)
                try:
                    output = output_from_json(json.loads(detail))
                except (json.JSONDecodeError, FormatError) as error:
                    reason, detail, retry = "bad_response", str(error), False
                else:
                    if output.request_id != request.request_id:
                        reason, retry = "bad_response", False
                        detail = f"answer for {output.request_id}, asked {request.request_id}"
                    else:
                        return attrs.evolve(output, attempts=attempt, failures=tuple(failures))
            failures.append(reason)
            if not retry or attempt >= self.attempts:
                break
            wait = self.backoff_s * 2 ** (attempt - 1) * self._random.uniform(0.5, 1.5)
            if time.monotonic() + wait - start > self.deadline_s:
                break
            time.sleep(wait)  # backoff between retries: nothing to wait on but time
        final = "refused" if reason == "refused" else "transport"
        return InfraFailure(
            request.request_id,
            reason=final,
            detail=f"{reason}: {detail}",
            attempts=attempt,
            failures=tuple(failures),
        )

    def _attempt(self, request: ExecRequest, data: bytes) -> tuple[str | None, str, bool]:
        """One post: (None, body, _) on 200, else (failure reason, detail, retryable)."""
        post = urllib.request.Request(
            self.url + _EXECUTE,
            data=data,
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(post, timeout=self._read_timeout(request)) as answer:
                return None, answer.read().decode(), False
        except urllib.error.HTTPError as error:
            body = error.read().decode(errors="replace")
            if error.code == 503:
                return "unavailable", body, True
            if 400 <= error.code < 500:
                return "refused", f"{error.code} {body}", False
            return "server_error", f"{error.code} {body}", False
        except urllib.error.URLError as error:
            # urllib wraps only what failed while connecting or sending: nothing ran.
            return "connect", str(error.reason), True
        except TimeoutError:
            return "timeout", "no answer in time", False
        except (HTTPException, ConnectionError, OSError) as error:
            return "disconnected", repr(error), False
