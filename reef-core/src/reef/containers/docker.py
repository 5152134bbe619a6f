"""The Docker backend: each run in a fresh container of a Docker daemon, for production.

It speaks the Docker Engine API over the daemon's socket (``unix:///var/run/docker.sock``) or
TCP (``http://host:2375``) with httpx (``reef-core[server]``), and makes these calls, and no
others (``tests/docker_engine_standin.py`` implements exactly these for the tests of machines
without a daemon):

1. The run's image: the task's ``[environment].docker_image`` when it names one (never pulled:
   it must be on the daemon, ``docker pull`` or ``docker build`` it first; an unknown image
   fails the run); else, when the task has an ``environment/Dockerfile``, the image built from
   its ``environment/`` folder, tagged ``reef-task-env:<digest of the folder>``: only when
   ``GET /images/{tag}/json`` says the daemon does not have it (404),
   ``POST /build?t=<tag>&rm=1&forcerm=1`` builds it from a tar of the folder (the answer
   is the Engine's stream of JSON lines; a line with ``error`` fails the run, with the build's
   message); else the backend's ``default_image``. A build has the daemon's network (its
   ``FROM`` and ``RUN`` steps may fetch); the runs of the image never do.
   ``GET /images/{image}/json`` (200; 404 fails the run) gives the image's ``VOLUME`` folders.
2. ``POST /containers/create``: that image, ``Cmd``, ``WorkingDir``, ``Env``, running as
   ``nobody``, with ``HostConfig``: ``NetworkMode: none``, ``Memory`` (and ``MemorySwap`` equal
   to it: no swap), ``PidsLimit``, ``Ulimits`` (file size, no core files), ``CapDrop: [ALL]``,
   ``SecurityOpt: [no-new-privileges]``, and the run's storage limits:

   - ``StorageOpt: {size: <disk_bytes>}``: the container's writable layer, everything the run
     writes outside its tmpfs folders, is capped at its disk quota. The daemon's storage driver
     must support it (overlay2 on xfs mounted with ``pquota``, btrfs, zfs); one that does not
     answers 500 and every run fails, saying so: Reef never runs a task without a disk quota;
   - ``Tmpfs``: ``/tmp`` of ``memory_bytes`` (RAM, charged to the container's memory cgroup
     with its processes: ``/tmp`` counts against ``Memory``), and each ``VOLUME`` of the image
     (Docker would otherwise make it an anonymous volume on the host's disk, outside the quota)
     of ``disk_bytes``, also RAM charged to the cgroup; ``ShmSize``: 64 MiB, likewise;
   - ``LogConfig``: ``json-file`` with ``max-size: 1m`` and ``max-file: 2``: what the run prints
     takes at most 2 MiB of the daemon's disk (only the last 64 KiB are read).
3. ``PUT /containers/{id}/archive?path=/``: the run's files, with its four folders, as a tar.
4. ``POST /containers/{id}/start``.
5. ``POST /containers/{id}/wait``, under the run's wall-clock limit; past it,
   ``POST /containers/{id}/kill`` and the run is timed out.
6. ``GET /containers/{id}/logs?stdout=1&stderr=1``: the output (the Engine's framed stream of a
   container without a TTY).
7. ``GET /containers/{id}/json?size=1``: ``State.OOMKilled`` (the run reached its memory limit)
   and ``SizeRw`` (its layer's size: within 1 MiB of the quota, it reached its disk quota).
8. ``GET /containers/{id}/archive?path=<file>`` for each collected file (404: not there).
9. ``DELETE /containers/{id}?force=1&v=1``, always: the layer and every volume go with it.
"""

from __future__ import annotations

import hashlib
import io
import json
import struct
import tarfile
from collections.abc import Mapping
from typing import Any, Final

from reef.containers.interface import (
    FOLDERS,
    MAX_COLLECTED_BYTES,
    MAX_OUTPUT_BYTES,
    SHM_BYTES,
    ContainerError,
    RunResult,
    RunSpec,
    container_path,
)

__all__ = [
    "BUILT_IMAGES",
    "LOG_CONFIG",
    "DockerBackend",
    "context_tar",
    "environment_tag",
    "files_tar",
]

_API: Final = "/v1.43"
_PIDS: Final = 256
#: How much of a run's output the daemon keeps on its disk.
LOG_CONFIG: Final = {"Type": "json-file", "Config": {"max-size": "1m", "max-file": "2"}}
#: How near its quota a run's layer must be to have reached it (file systems count in blocks).
_QUOTA_SLACK: Final = 1 << 20
#: The repository of the images the backend builds from tasks' ``environment/`` folders.
BUILT_IMAGES: Final = "reef-task-env"


def _add_file(tar: tarfile.TarFile, name: str, text: str, mode: int) -> None:
    data = text.encode("utf-8")
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    tar.addfile(info, io.BytesIO(data))


def environment_tag(environment: Mapping[str, str]) -> str:
    """The tag of the image built from ``environment`` (a task's ``environment/`` folder):
    the same folder always gives the same tag, so the daemon builds it once."""
    digest = hashlib.sha256(json.dumps(sorted(environment.items())).encode("utf-8"))
    return f"{BUILT_IMAGES}:{digest.hexdigest()[:32]}"


def context_tar(environment: Mapping[str, str]) -> bytes:
    """The build context ``POST /build`` takes: a tar of the ``environment/`` folder's files,
    by their paths inside it (a parent folder is implied by its files' paths)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path, text in sorted(environment.items()):
            _add_file(tar, path, text, 0o644)
    return buffer.getvalue()


def _build_error(stream: str) -> str | None:
    """The first error of the Engine's build stream (JSON lines), else ``None``."""
    for line in stream.splitlines():
        try:
            message = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(message, dict) and message.get("error"):
            return str(message["error"]).strip()
    return None


def files_tar(files: Mapping[str, str]) -> bytes:
    """A tar of the run's folders (``app``, ``logs`` writable by anyone; ``tests``,
    ``solution`` read-only) and its files, as ``PUT /containers/{id}/archive?path=/`` takes."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for top, writable in FOLDERS.items():
            folder = tarfile.TarInfo(top)
            folder.type = tarfile.DIRTYPE
            folder.mode = 0o777 if writable else 0o755
            tar.addfile(folder)
        made = set(FOLDERS)
        for path, text in sorted(files.items()):
            top, rest = container_path(path)
            parts = [top, *rest.split("/")]
            for depth in range(2, len(parts)):
                name = "/".join(parts[:depth])
                if name not in made:
                    made.add(name)
                    folder = tarfile.TarInfo(name)
                    folder.type = tarfile.DIRTYPE
                    folder.mode = 0o777 if FOLDERS[top] else 0o755
                    tar.addfile(folder)
            _add_file(tar, "/".join(parts), text, 0o666 if FOLDERS[top] else 0o644)
    return buffer.getvalue()


def _frames(data: bytes) -> bytes:
    """The payload of the Engine's framed log stream (8-byte headers: stream, 0, 0, 0, size)."""
    out = bytearray()
    offset = 0
    while offset + 8 <= len(data):
        (size,) = struct.unpack(">I", data[offset + 4 : offset + 8])
        out += data[offset + 8 : offset + 8 + size]
        offset += 8 + size
    return bytes(out)


def _member(data: bytes) -> str | None:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in tar.getmembers():
            if member.isfile():
                extracted = tar.extractfile(member)
                if extracted is not None:
                    return extracted.read(MAX_COLLECTED_BYTES).decode("utf-8", errors="replace")
    return None


class DockerBackend:
    """Runs each :class:`RunSpec` in a Docker container (see the module's documentation).

    :param url: the daemon: ``unix:///path/to/docker.sock`` or ``http://host:port``.
    :param default_image: the image of a run that names none and builds none.
    :param max_file_bytes: the largest file a run may write.
    :param build_timeout_seconds: how long building one task's image may take.
    """

    name = "docker"

    def __init__(
        self,
        url: str,
        *,
        default_image: str,
        max_file_bytes: int = 64 << 20,
        build_timeout_seconds: float = 1800.0,
    ) -> None:
        try:
            import httpx
        except ImportError as exc:  # pragma: no cover - the server extra brings httpx
            raise ContainerError(
                "the docker backend needs httpx: pip install 'reef-core[server]'"
            ) from exc
        self._httpx = httpx
        if url.startswith("unix://"):
            transport = httpx.HTTPTransport(uds=url.removeprefix("unix://"))
            self._client = httpx.Client(transport=transport, base_url="http://docker" + _API)
        elif url.startswith(("http://", "https://")):
            self._client = httpx.Client(base_url=url.rstrip("/") + _API)
        else:
            raise ContainerError(
                f"docker url {url!r} must be unix:///path/to/docker.sock or http://host:port"
            )
        self._default_image = default_image
        self._max_file_bytes = max_file_bytes
        self._build_timeout = build_timeout_seconds

    def close(self) -> None:
        """Close the connections to the daemon."""
        self._client.close()

    def _call(
        self, method: str, path: str, *, ok: tuple[int, ...] = (200, 201, 204), **kwargs: Any
    ) -> Any:
        try:
            response = self._client.request(method, path, **kwargs)
        except self._httpx.HTTPError as exc:
            raise ContainerError(f"the Docker daemon failed {method} {path}: {exc}") from exc
        if response.status_code not in ok:
            raise ContainerError(
                f"the Docker daemon answered {method} {path} with {response.status_code}: "
                f"{response.text[:500]}"
            )
        return response

    def image(self, spec: RunSpec) -> str:
        """The image ``spec`` runs in: its own, else the one its environment builds (built now
        unless the daemon has it), else the default (see the module's documentation).

        :raises ContainerError: when the build fails, with the build's error.
        """
        if spec.image is not None:
            return spec.image
        if "Dockerfile" not in spec.environment:
            return self._default_image
        tag = environment_tag(spec.environment)
        if self._call("GET", f"/images/{tag}/json", ok=(200, 404)).status_code == 200:
            return tag
        built = self._call(
            "POST",
            "/build",
            params={"t": tag, "rm": 1, "forcerm": 1},
            content=context_tar(spec.environment),
            headers={"Content-Type": "application/x-tar"},
            timeout=self._build_timeout,
        )
        error = _build_error(built.text)
        if error is not None:
            raise ContainerError(f"building the task's environment/Dockerfile failed: {error}")
        return tag

    def _volumes(self, image: str) -> list[str]:
        """The ``VOLUME`` folders of ``image``. :raises ContainerError: for an image the daemon
        does not have."""
        found = self._call("GET", f"/images/{image}/json", ok=(200, 404))
        if found.status_code == 404:
            raise ContainerError(f"No such image: {image} (the daemon does not have it)")
        volumes = (found.json().get("Config") or {}).get("Volumes") or {}
        return sorted(str(path) for path in volumes)

    def run(self, spec: RunSpec) -> RunResult:
        """Run ``spec`` (see :class:`reef.containers.interface.ContainerBackend`).

        :raises ContainerError: when the run could not happen: the image is missing, its build
            failed, the daemon cannot cap the container's disk, or the daemon failed.
        """
        image = self.image(spec)
        tmpfs = {
            "/tmp": f"rw,exec,nosuid,nodev,size={spec.memory_bytes},mode=1777",
            **{
                folder: f"rw,exec,nosuid,nodev,size={spec.disk_bytes},mode=1777"
                for folder in self._volumes(image)
                if folder != "/tmp"
            },
        }
        body = {
            "Image": image,
            "Cmd": list(spec.command),
            "WorkingDir": spec.workdir,
            "Env": [f"{key}={value}" for key, value in spec.env.items()],
            "User": "65534:65534",
            "NetworkDisabled": True,
            "HostConfig": {
                "NetworkMode": "none",
                "Memory": spec.memory_bytes,
                "MemorySwap": spec.memory_bytes,
                "PidsLimit": _PIDS,
                "Ulimits": [
                    {"Name": "fsize", "Soft": self._max_file_bytes, "Hard": self._max_file_bytes},
                    {"Name": "core", "Soft": 0, "Hard": 0},
                ],
                "CapDrop": ["ALL"],
                "SecurityOpt": ["no-new-privileges"],
                "StorageOpt": {"size": str(spec.disk_bytes)},
                "Tmpfs": tmpfs,
                "ShmSize": SHM_BYTES,
                "LogConfig": LOG_CONFIG,
            },
        }
        try:
            created = self._call("POST", "/containers/create", json=body).json()
        except ContainerError as exc:
            if "storage-opt" not in str(exc):
                raise
            raise ContainerError(
                f"{exc}: the Docker daemon cannot cap a container's disk (StorageOpt size), and "
                "every run gets a disk quota (generated tasks are untrusted): give the daemon a "
                "storage driver with quotas (overlay2 on xfs mounted with pquota, btrfs, zfs)"
            ) from None
        container = created["Id"]
        try:
            self._call(
                "PUT",
                f"/containers/{container}/archive",
                params={"path": "/"},
                content=files_tar(spec.files),
                headers={"Content-Type": "application/x-tar"},
            )
            self._call("POST", f"/containers/{container}/start")
            exit_code: int | None
            try:
                waited = self._client.post(
                    f"/containers/{container}/wait", timeout=spec.timeout_seconds
                )
                exit_code, timed_out = int(waited.json()["StatusCode"]), False
            except self._httpx.TimeoutException:
                self._call("POST", f"/containers/{container}/kill", ok=(204, 409))
                exit_code, timed_out = None, True
            except self._httpx.HTTPError as exc:
                raise ContainerError(f"the Docker daemon failed the wait: {exc}") from exc
            logs = self._call(
                "GET", f"/containers/{container}/logs", params={"stdout": 1, "stderr": 1}
            ).content
            output = _frames(logs)[-MAX_OUTPUT_BYTES:].decode("utf-8", errors="replace")
            state = self._call("GET", f"/containers/{container}/json", params={"size": 1}).json()
            reached = (
                ("disk", int(state.get("SizeRw") or 0) >= spec.disk_bytes - _QUOTA_SLACK),
                ("memory", bool((state.get("State") or {}).get("OOMKilled"))),
            )
            files: dict[str, str] = {}
            for path in spec.collect:
                found = self._call(
                    "GET", f"/containers/{container}/archive", params={"path": path}, ok=(200, 404)
                )
                if found.status_code == 200 and (text := _member(found.content)) is not None:
                    files[path] = text
            limits = tuple(name for name, hit in reached if hit)
            return RunResult(exit_code, timed_out, output, files, limits)
        finally:
            self._call(
                "DELETE", f"/containers/{container}", params={"force": 1, "v": 1}, ok=(204, 404)
            )
