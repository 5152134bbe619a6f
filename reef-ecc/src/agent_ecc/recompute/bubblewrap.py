"""The bubblewrap executor: checks of runtime ``git`` with every command of the run sandboxed.

:class:`BubblewrapExecutor` is the git executor (:class:`~agent_ecc.recompute.executor.Executor`:
the snapshot cloned into a fresh workspace, the patch applied as swebench's harness applies it,
the eval script under its timeout and limits, the log), with each command that applies the
patch and the eval script itself run by bubblewrap (``bwrap``, Debian's ``bubblewrap``) in new
user, mount, PID, network, IPC and UTS namespaces, as ``nobody``, where only these are visible:
this machine's ``/usr`` and the interpreter's folders (read-only), a fresh ``/proc``, ``/dev``
and ``/tmp``, and the run's workspace (the only folder it can write, besides ``/tmp``). ``/``
itself is read-only. No network: a loopback device of its own only.

It is also the executor protocol's second backend (``docs/ecc/reverification.md``): one
``run(ExecRequest) -> RawOutput`` with the same raw outputs as the git executor's on every
request, which its tests check; a sandbox of one's own (Modal, Kubernetes, SWE-ReX) plugs in the
same way.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from agent_ecc.recompute.executor import Executor, ExecutorError, Limits
from agent_ecc.store import ContentStore

__all__ = ["BubblewrapExecutor"]

_NOBODY: Final = "65534"
#: Files of the host's /etc that programs need to start; nothing else of /etc is visible.
_ETC: Final = ("/etc/ld.so.cache", "/etc/alternatives")


def _interpreter_folders() -> list[str]:
    """This interpreter's folders outside ``/usr`` (a virtual environment's, a Python built
    elsewhere): ``python -m pytest`` must find its interpreter and packages."""
    folders = {sys.prefix, sys.base_prefix, str(Path(sys.executable).resolve().parent.parent)}
    return sorted(f for f in folders if f != "/usr" and not f.startswith("/usr/"))


class BubblewrapExecutor(Executor):
    """Runs requests of runtime ``git`` with every command of the run in bubblewrap (see the
    module docstring). Parameters as :class:`~agent_ecc.recompute.executor.Executor`'s; the
    network is always cut (the namespace has none).

    :raises ExecutorError: when ``bwrap`` is not installed.
    """

    def __init__(
        self,
        store: ContentStore,
        *,
        limits: Limits | None = None,
        path: str | None = None,
        workroot: str | Path | None = None,
    ) -> None:
        bwrap = shutil.which("bwrap")
        if bwrap is None:
            raise ExecutorError("the bubblewrap executor needs bwrap: apt-get install bubblewrap")
        super().__init__(store, limits=limits, path=path, isolate_network=False, workroot=workroot)
        self._bwrap = bwrap
        self._readable = _interpreter_folders()

    @property
    def network(self) -> str:
        """How eval scripts are cut off the network."""
        return "bubblewrap --unshare-all"

    def _command(
        self, argv: Sequence[str], cwd: Path, workspace: Path, *, evaluation: bool
    ) -> list[str]:
        args = [self._bwrap, "--unshare-all", "--unshare-user", "--uid", _NOBODY, "--gid", _NOBODY]
        args += ["--die-with-parent", "--new-session", "--ro-bind", "/usr", "/usr"]
        for link in ("bin", "lib", "lib64", "sbin"):
            if os.path.islink(f"/{link}"):
                args += ["--symlink", os.readlink(f"/{link}"), f"/{link}"]
        for path in _ETC:
            args += ["--ro-bind-try", path, path]
        # /tmp first: an interpreter or a workspace under the host's /tmp is bound onto it.
        size = str(self.limits.memory_mb << 20)
        args += ["--proc", "/proc", "--dev", "/dev", "--size", size, "--tmpfs", "/tmp"]
        for folder in self._readable:
            args += ["--ro-bind", folder, folder]
        args += ["--bind", str(workspace), str(workspace), "--remount-ro", "/"]
        return [*args, "--chdir", str(cwd), "--", *argv]
