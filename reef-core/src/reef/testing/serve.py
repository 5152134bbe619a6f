"""``reef serve`` as a subprocess on loopback, for end-to-end tests.

:class:`ServeProcess` starts the ``reef`` command of the running interpreter's environment on a
free port, waits until the service answers ``GET /reef/status`` and stops it with SIGTERM (a
clean stop) or SIGKILL (a crash). Its output goes to a log file, which a failure message shows.
:func:`tiny_local_deployment` writes a deployment whose scenario ``word`` trains the local
component (a TinyGPT small enough to train in seconds on a CPU, unless told another model) and
serves it with the local engine. :class:`ScriptedAgent` plays that scenario's agent and grader
through the ``openai`` client: rounds of answers to "Say ok.", each scored and reported.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

import httpx

from reef.testing.service import free_port

__all__ = ["REEF", "TINY_GPT_OPTIONS", "ScriptedAgent", "ServeProcess", "tiny_local_deployment"]

#: The ``reef`` command of this environment.
REEF = str(Path(sys.executable).with_name("reef"))


_TINY_LOCAL: Final = """
storage:
  url: "{url}"
serving:
{serving}
{auth}scenarios:
  word:
    recipe: grouped
    pipeline:
      record2sample:
        config: {{group_size: 4, max_staleness: {max_staleness}, train_sampled_tokens: {sampled}}}
      sample2job: {{config: {{job_samples: 8}}}}
    training:
      component: local
      options:
        state_dir: "{state}"
        batch_size: 4
        learning_rate: 0.01
{model}
"""

#: The local component's model options of :func:`tiny_local_deployment` by default: a TinyGPT
#: small enough to train in seconds on a CPU.
TINY_GPT_OPTIONS: Final = """\
        d_model: 32
        n_layers: 1
        n_heads: 2
        max_seq_len: 128"""


def tiny_local_deployment(
    folder: Path,
    url: str,
    *,
    tokens: Mapping[str, tuple[str, Sequence[str]]] | None = None,
    model: str = TINY_GPT_OPTIONS,
    serving: str = "  engine: local",
    max_staleness: int = 3,
    train_sampled_tokens: bool = False,
) -> Path:
    """Write ``folder/deployment.yaml``: scenario ``word`` (the ``grouped`` recipe, groups of 4,
    jobs of 8 samples, ``max_staleness``, ``train_sampled_tokens``) trained by a ``local``
    component whose state is
    ``folder/state`` and whose model is ``model`` (its option lines, indented as options),
    served as ``serving`` says (its lines, indented under ``serving:``; the local engine by
    default), stored at ``url``, with ``tokens`` (name → (secret, scopes)) or without auth."""
    auth = ""
    if tokens:
        auth = "auth:\n  tokens:\n" + "".join(
            f"    {name}: {{token: {secret}, scopes: [{', '.join(scopes)}]}}\n"
            for name, (secret, scopes) in tokens.items()
        )
    (folder / "state").mkdir(exist_ok=True)
    path = folder / "deployment.yaml"
    path.write_text(
        _TINY_LOCAL.format(
            url=url,
            state=folder / "state",
            auth=auth,
            model=model,
            serving=serving,
            max_staleness=max_staleness,
            sampled=str(train_sampled_tokens).lower(),
        ),
        encoding="utf-8",
    )
    return path


#: How long a started ``reef serve`` may take to answer before the test fails.
STARTUP_SECONDS: Final = 240.0


class ServeProcess:
    """One ``reef serve`` subprocess.

    :param deployment: the deployment file.
    :param log: where its output goes (appended).
    :param lease_ttl: ``--lease-ttl``.
    :param token: an admin token of the deployment; ``None`` runs it with
        ``--allow-unauthenticated`` (loopback only).
    :param env: variables added to this process's environment for it (a fault point:
        ``REEF_FAULT_POINT``).
    :param log_level: ``--log-level`` (``info`` writes uvicorn's access log).
    :raises AssertionError: when it exits, or does not answer within a minute.
    """

    def __init__(
        self,
        deployment: Path,
        log: Path,
        *,
        lease_ttl: float = 10.0,
        token: str | None = None,
        env: Mapping[str, str] | None = None,
        log_level: str = "warning",
    ) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.headers = {} if token is None else {"authorization": f"Bearer {token}"}
        self._log_path = log
        self._log = log.open("ab")
        command = [REEF, "serve", str(deployment), "--port", str(self.port)]
        command += ["--lease-ttl", str(lease_ttl), "--log-level", log_level]
        if token is None:
            command.append("--allow-unauthenticated")
        self.process = subprocess.Popen(
            command,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=None if env is None else {**os.environ, **env},
        )
        # A start that exits fails at once; one that is merely slow (a loaded machine, a suite
        # run in parallel) is waited for: the bound only catches a start that hangs.
        deadline = time.monotonic() + STARTUP_SECONDS
        while time.monotonic() < deadline:
            assert self.process.poll() is None, log.read_text()
            try:
                status = httpx.get(f"{self.base_url}/reef/status", headers=self.headers, timeout=2)
                status.raise_for_status()
                return
            except httpx.HTTPError:
                time.sleep(0.2)
        raise AssertionError(f"reef serve did not answer: {log.read_text()}")

    def kill(self) -> None:
        """SIGKILL: the process dies where it is."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)
        self._log.close()

    def terminate(self) -> int:
        """SIGTERM: a clean stop; returns the exit status."""
        self.process.send_signal(signal.SIGTERM)
        status = self.process.wait(60)
        self._log.close()
        return status

    def stop(self) -> None:
        """Kill it if it still runs (a test's ``finally``)."""
        if self.process.poll() is None:
            self.kill()


class ScriptedAgent:
    """The agent and grader of an end-to-end test: each :meth:`round` asks the scenario
    ``group`` times to "Say ok." through the ``openai`` client (which it needs installed) and
    reports each answer in one report group, scored by how near its characters are to ``o`` or
    ``k`` (:meth:`score`). The score is graded, not a count of exact letters, so an
    untrained model's answers in a group almost never score alike: a group that scored alike
    has advantages of 0 and moves no weight, and a test waiting for new weights would wait in
    vain.

    :ivar records: the record ids of the calls, in order.
    :ivar reports: the report ids, in order.
    """

    def __init__(self, scenario: str = "word", group: int = 4) -> None:
        self.scenario = scenario
        self.group = group
        self.records: list[str] = []
        self.reports: list[str] = []
        self.rounds = 0

    def score(self, answer: str, member: int) -> float:
        """The mean, over the first three characters of ``answer`` (a missing one scores 0), of
        how near each is to ``o`` or ``k`` in code points: 1 on either letter, falling by 1/128
        per code point away, 0 from 128 away. ``member`` (the call's place in its group) is for
        a subclass whose engine answers every call alike."""
        del member

        def near(c: str) -> float:
            return max(0.0, 1 - min(abs(ord(c) - ord("o")), abs(ord(c) - ord("k"))) / 128)

        return sum(near(c) for c in answer[:3]) / 3

    def round(self, base_url: str) -> None:
        """One group of calls, each scored and reported; a refused report fails the test."""
        import openai  # a test dependency, not one of reef-core's

        client = openai.OpenAI(
            base_url=f"{base_url}/scenarios/{self.scenario}/v1", api_key="unused", max_retries=0
        )
        group = f"g{self.rounds}"
        for member in range(self.group):
            raw = client.chat.completions.with_raw_response.create(
                model="local",
                messages=[{"role": "user", "content": "Say ok."}],
                max_tokens=3,
                temperature=1.0,
            )
            answer = raw.parse().choices[0].message.content or ""
            record_id = raw.headers["x-reef-record-id"]
            report_id = f"{group}-{member}"
            report = {
                "id": report_id,
                "references": [record_id],
                "score": self.score(answer, member),
                "metadata": {"group": group},
            }
            response = httpx.post(
                f"{base_url}/reef/scenarios/{self.scenario}/reports", json=report, timeout=30
            )
            assert response.status_code in (200, 201), response.text
            self.records.append(record_id)
            self.reports.append(report_id)
        self.rounds += 1
