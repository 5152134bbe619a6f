"""``reef serve`` as a subprocess on loopback, for end-to-end tests.

:class:`ServeProcess` starts the ``reef`` command of the running interpreter's environment on a
free port, waits until the service answers ``GET /reef/status`` and stops it with SIGTERM (a
clean stop) or SIGKILL (a crash). Its output goes to a log file, which a failure message shows.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from reef.testing.service import free_port

__all__ = ["REEF", "ServeProcess"]

#: The ``reef`` command of this environment.
REEF = str(Path(sys.executable).with_name("reef"))


class ServeProcess:
    """One ``reef serve`` subprocess.

    :param deployment: the deployment file.
    :param log: where its output goes (appended).
    :param lease_ttl: ``--lease-ttl``.
    :param token: an admin token of the deployment; ``None`` runs it with
        ``--allow-unauthenticated`` (loopback only).
    :raises AssertionError: when it exits, or does not answer within a minute.
    """

    def __init__(
        self,
        deployment: Path,
        log: Path,
        *,
        lease_ttl: float = 10.0,
        token: str | None = None,
    ) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.headers = {} if token is None else {"authorization": f"Bearer {token}"}
        self._log_path = log
        self._log = log.open("ab")
        command = [REEF, "serve", str(deployment), "--port", str(self.port)]
        command += ["--lease-ttl", str(lease_ttl), "--log-level", "warning"]
        if token is None:
            command.append("--allow-unauthenticated")
        self.process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
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
