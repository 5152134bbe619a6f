"""The designer's training signal: each of its calls reported with its task's hint-based regret.

spade-rl/spade trains the designer on how much a hint helps the policy on the environment it
proposed: ``R(with hint) - R(without hint)``, the mean rewards of the policy's plays of the task
with and without the hint (``_finalize_regrets`` in ``spade/core/orchestrator.py``), 0 for a
proposal that is not valid, floored at 0 and centred within its group of proposals
(``assign_env_rewards_regret`` and ``_center_skill_rewards`` in
``spade/core/utils/env_rewards.py``). :func:`regret` is that score, and :class:`RegretReports`
reports it: where Reef serves the designer (its URL is ``<reef>/scenarios/<scenario>/v1``), each
designer call is recorded there, and SPADE posts a report on it to that scenario with the regret
as its score and the generation's group as ``metadata.group``. That scenario's ``grouped``
recipe centres each score in its group and trains the designer on it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any, Final

import httpx

from reef_spade.designer import DesignerCall, DesignerError

__all__ = ["RegretReports", "designer_scenario", "mean_reward", "regret"]

logger = logging.getLogger(__name__)

_SERVED: Final = re.compile(r"^(?P<reef>.+)/scenarios/(?P<scenario>[^/]+)/v1/?$")


def designer_scenario(url: str) -> tuple[str, str] | None:
    """The Reef service and scenario that serve the designer at ``url``, when it is a scenario's
    OpenAI-compatible URL (``<reef>/scenarios/<scenario>/v1``)."""
    found = _SERVED.match(url)
    return (found["reef"], found["scenario"]) if found else None


def mean_reward(rewards: Sequence[float | None]) -> float:
    """The mean reward of plays, a play without a reward counting 0 (0 for no plays)."""
    return sum(r or 0.0 for r in rewards) / len(rewards) if rewards else 0.0


def regret(alone: Sequence[float | None], helped: Sequence[float | None]) -> float:
    """The hint-based regret of a task: the mean reward of the plays with the hint less that of
    the plays without it (a play without a reward counts 0), floored at 0."""
    return max(0.0, mean_reward(helped) - mean_reward(alone))


class RegretReports:
    """Posts the designer's reports to the Reef scenario that serves it.

    :param reef: the service's base URL.
    :param scenario: the designer's scenario.
    :param token: a token with the ``feedback`` scope, or ``None`` where the service needs none.
    """

    def __init__(self, reef: str, scenario: str, token: str | None, timeout: float = 60.0) -> None:
        self.url = f"{reef.rstrip('/')}/reef/scenarios/{scenario}/reports"
        self._headers = {"authorization": f"Bearer {token}"} if token else {}
        self._timeout = timeout

    async def report(self, call: DesignerCall, score: float, **details: Any) -> None:
        """Report the designer's ``call`` with ``score`` in its group; ``details`` go into the
        report's ``metadata.spade``. A report of this call stored before stands (the report id
        is the call's, so a retried generation reports each call once).

        :raises DesignerError: when the service refuses the report or does not answer: the
            generation is tried again.
        """
        body = {
            "id": f"spade-regret-{call.record_id}",
            "references": [call.record_id],
            "score": score,
            "metadata": {"group": call.group, "spade": details},
        }
        try:
            async with httpx.AsyncClient(headers=self._headers, timeout=self._timeout) as client:
                answer = await client.post(self.url, json=body)
        except httpx.HTTPError as exc:
            raise DesignerError(f"the designer's report to {self.url} failed: {exc}") from exc
        if answer.status_code == 409:
            logger.info("the designer's call %s was reported before", call.record_id)
            return
        if answer.status_code not in (200, 201):
            raise DesignerError(
                f"{self.url} refused the designer's report ({answer.status_code}): "
                f"{answer.text[:300]}"
            )
