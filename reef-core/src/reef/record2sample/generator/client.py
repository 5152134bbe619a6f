"""The generator service's client: what a task generator calls to check its tasks.

A generator gets the service's address from the ``environ`` its ``from_config`` receives
(:func:`GeneratorClient.from_environ`): ``reef serve`` sets ``REEF_GENERATOR_URL`` to its own
address when the deployment has a ``generator`` section, and ``REEF_GENERATOR_TOKEN`` must
hold a token with the ``admin`` scope where the service has tokens. Every call is async
(httpx, ``reef-core[server]``); a failure to run raises :class:`GeneratorServiceError`, which a
generator lets through ``validate`` so that the recipe retries the generation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from reef.containers.agent import AnswerAgent
from reef.containers.verify import Verdict
from reef.core.harbor import HarborTask
from reef.core.records import JSON
from reef.errors import ReefError

__all__ = ["GENERATOR_TOKEN", "GENERATOR_URL", "GeneratorClient", "GeneratorServiceError"]

#: The environment variable that holds the generator service's base URL.
GENERATOR_URL: Final = "REEF_GENERATOR_URL"
#: The environment variable that holds the token a generator calls the service with.
GENERATOR_TOKEN: Final = "REEF_GENERATOR_TOKEN"


class GeneratorServiceError(ReefError):
    """The generator service could not do what was asked (unreachable, refused, or the task
    could not run); the message carries the service's answer."""


def _verdict(body: Mapping[str, Any]) -> Verdict:
    return Verdict(body["reward"], body["timed_out"], body["exit_code"], body["output"])


class GeneratorClient:
    """Calls the generator service of one scenario.

    :param url: the service's base URL (``http://127.0.0.1:8000``); ``None`` when it is not
        known, which every call then raises as a :class:`GeneratorServiceError` (so a deployment
        still checks, ``reef check``, without the service running).
    :param scenario: the scenario whose tasks and policy the calls use.
    :param token: a bearer token with the ``admin`` scope, where the service has tokens.
    :param timeout: seconds to wait for one call (plays take long).
    """

    def __init__(
        self, url: str | None, *, scenario: str, token: str | None = None, timeout: float = 900.0
    ) -> None:
        import httpx

        self._httpx = httpx
        self._base_url = url and f"{url.rstrip('/')}/reef/scenarios/{scenario}/generator"
        self._headers = {"authorization": f"Bearer {token}"} if token else {}
        self._timeout = timeout

    @classmethod
    def from_environ(cls, environ: Mapping[str, str], *, scenario: str) -> GeneratorClient:
        """The client of the service that ``environ`` names (``REEF_GENERATOR_URL``; without
        it, every call raises)."""
        return cls(
            environ.get(GENERATOR_URL), scenario=scenario, token=environ.get(GENERATOR_TOKEN)
        )

    async def _post(self, path: str, body: JSON) -> Any:
        if not self._base_url:
            raise GeneratorServiceError(
                f"{GENERATOR_URL} is not set: give the deployment a generator section and run "
                "it with reef serve, or set it to the generator service's address"
            )
        # A client per call: a generator's calls may run on different event loops.
        try:
            async with self._httpx.AsyncClient(
                base_url=self._base_url, headers=self._headers, timeout=self._timeout
            ) as client:
                response = await client.post(path, json=body)
        except self._httpx.HTTPError as exc:
            raise GeneratorServiceError(f"the generator service failed {path}: {exc}") from exc
        if response.status_code != 200:
            raise GeneratorServiceError(
                f"the generator service answered {path} with {response.status_code}: "
                f"{response.text[:1000]}"
            )
        return response.json()

    async def stage(self, task: HarborTask) -> str:
        """Stage ``task``; its digest."""
        return str((await self._post("/tasks", {"task": task.to_json()}))["digest"])

    async def verify(self, task: HarborTask, attempt: Mapping[str, str]) -> Verdict:
        """The task's verifier on ``attempt`` (files relative to ``/app``)."""
        return _verdict(
            await self._post("/verify", {"task": task.to_json(), "attempt": dict(attempt)})
        )

    async def oracle(self, task: HarborTask) -> Verdict:
        """The task's oracle solution, then its verifier."""
        return _verdict(await self._post("/verify", {"task": task.to_json(), "oracle": True}))

    async def play(
        self,
        task: HarborTask,
        *,
        rollouts: int,
        hint: str | None = None,
        agent: AnswerAgent | None = None,
    ) -> list[tuple[str, Verdict]]:
        """``rollouts`` plays of the scenario's policy on ``task`` (with ``hint``): each
        reply and its verdict. Plays are no records and never train."""
        settings = agent or AnswerAgent()
        body = {
            "task": task.to_json(),
            "rollouts": rollouts,
            "hint": hint,
            "agent": {
                "answer_file": settings.answer_file,
                "max_tokens": settings.max_tokens,
                "temperature": settings.temperature,
            },
        }
        plays = (await self._post("/play", body))["plays"]
        return [(play["reply"], _verdict(play["verdict"])) for play in plays]
