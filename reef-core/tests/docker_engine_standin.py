"""A STAND-IN for the Docker Engine API, not a Docker daemon: exactly the calls that
:mod:`reef.containers.docker` documents, on a unix socket, for machines without a daemon.

It answers, under the ``/v1.43`` prefix, with the Engine's status codes and bodies for them
(moby's ``api/server/router`` and ``daemon`` packages are the source followed):
``GET /images/{name}/json`` (``200`` with the image's ``Id`` and ``Config.Volumes``, ``404`` for
an image it does not have), ``POST /build?t=<tag>`` (a tar build context; the Engine's stream
of JSON lines, with an ``error`` line when the context has no ``Dockerfile`` or its ``FROM``
names an image it does not have), ``POST /containers/create`` (``404`` for an image it does not
have; ``500`` with moby's overlay2 message for a ``StorageOpt`` when it was made with
``storage_quota=False``, like a daemon whose storage cannot hold quotas), ``PUT
/containers/{id}/archive?path=/`` (a tar of the run's folders), ``POST /containers/{id}/start``,
``POST /containers/{id}/wait`` (``{"StatusCode": n}``), ``POST /containers/{id}/kill``, ``GET
/containers/{id}/logs`` (framed as the Engine frames a container without a TTY: an 8-byte
header, the stream, big-endian size), ``GET /containers/{id}/json?size=1`` (``State`` with
``OOMKilled``, ``SizeRw``), ``GET /containers/{id}/archive?path=<file>`` (a tar of the file;
``404`` when it is not there) and ``DELETE /containers/{id}``. Every call is kept in ``calls``;
any other is answered 404 and kept in ``unexpected``.

What it is not: it has no images or layers. ``images`` names the images it pretends to have; a
build runs none of the Dockerfile's steps: it checks the ``FROM`` line, keeps the context's
files in ``builds`` under the tag, its ``VOLUME`` lines as the image's volumes, and adds the
tag to ``images``. A container's command, of any image, runs in Reef's own sandbox backend
(bubblewrap, this machine's ``/usr``): the uploaded ``/tests`` and ``/solution`` read-only,
``/app`` and ``/logs`` (its writable layer) a tmpfs each of the ``StorageOpt`` size, and each
``HostConfig.Tmpfs`` folder and ``/dev/shm`` (``ShmSize``) a tmpfs of its size, with
``HostConfig.Memory`` as its memory limit. Approximations, all on the safe side: the layer's
quota holds for ``/app`` and ``/logs`` each, not together; everything else is read-only;
``SizeRw`` is the size of the files ``/app`` and ``/logs`` hold when the command ends; a full
``Tmpfs`` folder or ``/dev/shm`` sets ``State.OOMKilled`` (on a daemon their pages are charged
to the memory cgroup, whose limit is no larger, so its OOM killer ends the run first); the
command's stdout and stderr come as one stream (2). The other HostConfig fields are only
kept, for the tests to check what the backend asked for.
"""

from __future__ import annotations

import io
import json
import re
import shutil
import socketserver
import struct
import tarfile
import tempfile
import threading
import uuid
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from reef.containers.sandbox import INPUTS, SandboxBackend, SandboxProcess

_ROUTES: tuple[tuple[str, re.Pattern[str], str], ...] = tuple(
    (method, re.compile(f"^/v1.43{pattern}$"), name)
    for method, pattern, name in (
        ("GET", r"/images/(.+)/json", "inspect_image"),
        ("POST", r"/build", "build"),
        ("POST", r"/containers/create", "create"),
        ("PUT", r"/containers/([^/]+)/archive", "put_archive"),
        ("POST", r"/containers/([^/]+)/start", "start"),
        ("POST", r"/containers/([^/]+)/wait", "wait"),
        ("POST", r"/containers/([^/]+)/kill", "kill"),
        ("GET", r"/containers/([^/]+)/logs", "logs"),
        ("GET", r"/containers/([^/]+)/json", "inspect"),
        ("GET", r"/containers/([^/]+)/archive", "get_archive"),
        ("DELETE", r"/containers/([^/]+)", "remove"),
    )
)


_NO_QUOTA = "--storage-opt is supported only for overlay over xfs with 'pquota' mount option"


def _size(options: str) -> int:
    """The ``size=`` of a tmpfs's mount options (bytes; Docker's default is half the RAM)."""
    for option in options.split(","):
        if option.startswith("size="):
            return int(option.removeprefix("size="))
    raise ValueError(f"tmpfs options {options!r} give no size: the stand-in sizes every tmpfs")


class _Container:
    def __init__(self, folder: Path, body: dict[str, Any]) -> None:
        self.folder = folder
        self.body = body
        self.process: SandboxProcess | None = None
        self.done = threading.Event()
        self.exit_code: int | None = None
        self.output = b""
        #: What /app and /logs held when the command ended: its writable layer.
        self.layer: dict[str, bytes] = {}
        self.oom_killed = False


class DockerEngineStandIn:
    """The stand-in (see the module's documentation); ``url`` is what the backend takes."""

    def __init__(
        self, folder: Path, images: tuple[str, ...], *, storage_quota: bool = True
    ) -> None:
        self.folder = folder
        self.images = set(images)
        self.storage_quota = storage_quota
        #: The ``VOLUME`` folders of each image built, by its tag.
        self.volumes: dict[str, list[str]] = {}
        #: The context files of each image built, by its tag.
        self.builds: dict[str, dict[str, str]] = {}
        self.calls: list[tuple[str, str, Any]] = []
        self.unexpected: list[tuple[str, str]] = []
        self.containers: dict[str, _Container] = {}
        self._sandbox = SandboxBackend(folder / "runs")
        socket_path = folder / "docker.sock"
        self.url = f"unix://{socket_path}"
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                standin._handle(self)

            do_POST = do_PUT = do_DELETE = do_GET

        class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
            daemon_threads = True

        self._server = Server(str(socket_path), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> DockerEngineStandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    # ------------------------------------------------------------------ the calls

    def _handle(self, request: BaseHTTPRequestHandler) -> None:
        url = urlsplit(request.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        length = int(request.headers.get("Content-Length") or 0)
        body = request.rfile.read(length) if length else b""
        for method, pattern, name in _ROUTES:
            match = pattern.match(url.path)
            if match and method == request.command:
                self.calls.append((name, url.path, json.loads(body) if name == "create" else query))
                status, payload, kind = getattr(self, f"_{name}")(*match.groups(), query, body)
                break
        else:
            self.unexpected.append((request.command, request.path))
            status, payload, kind = 404, b'{"message": "page not found"}', "application/json"
        request.send_response(status)
        request.send_header("Content-Type", kind)
        request.send_header("Content-Length", str(len(payload)))
        request.end_headers()
        request.wfile.write(payload)

    @staticmethod
    def _json(status: int, value: object) -> tuple[int, bytes, str]:
        return status, json.dumps(value).encode(), "application/json"

    def _inspect_image(
        self, name: str, query: dict[str, str], body: bytes
    ) -> tuple[int, bytes, str]:
        if name not in self.images:
            return self._json(404, {"message": f"No such image: {name}"})
        volumes = {key: {} for key in self.volumes.get(name, [])}
        image_id = f"sha256:{uuid.uuid5(uuid.NAMESPACE_URL, name).hex}"
        return self._json(200, {"Id": image_id, "Config": {"Volumes": volumes or None}})

    def _build(self, query: dict[str, str], body: bytes) -> tuple[int, bytes, str]:
        files: dict[str, str] = {}
        with tarfile.open(fileobj=io.BytesIO(body)) as tar:
            for member in tar.getmembers():
                extracted = tar.extractfile(member) if member.isfile() else None
                if extracted is not None:
                    files[member.name] = extracted.read().decode("utf-8")
        steps = [line.split() for line in files.get("Dockerfile", "").splitlines()]
        base = next((step[1] for step in steps if len(step) > 1 and step[0].upper() == "FROM"), "")
        lines: list[object] = [{"stream": f"Step 1/{len(steps)} : FROM {base}\n"}]
        if "Dockerfile" not in files:
            error = "Cannot locate specified Dockerfile: Dockerfile"
        elif base not in self.images:
            error = f"pull access denied for {base}, repository does not exist"
        else:
            error = ""
            self.images.add(query["t"])
            self.builds[query["t"]] = files
            self.volumes[query["t"]] = [
                json.loads(step[1])[0] if step[1].startswith("[") else step[1]
                for step in steps
                if len(step) > 1 and step[0].upper() == "VOLUME"
            ]
            lines.append({"stream": f"Successfully tagged {query['t']}\n"})
        if error:
            lines.append({"errorDetail": {"message": error}, "error": error})
        stream = "".join(json.dumps(line) + "\r\n" for line in lines).encode()
        return 200, stream, "application/json"

    def _create(self, query: dict[str, str], body: bytes) -> tuple[int, bytes, str]:
        document = json.loads(body)
        if document["Image"] not in self.images:
            return self._json(404, {"message": f"No such image: {document['Image']}"})
        if document["HostConfig"].get("StorageOpt") and not self.storage_quota:
            return self._json(500, {"message": _NO_QUOTA})
        container_id = uuid.uuid4().hex
        folder = Path(tempfile.mkdtemp(dir=self.folder))
        self.containers[container_id] = _Container(folder, document)
        return self._json(201, {"Id": container_id, "Warnings": []})

    def _put_archive(self, cid: str, query: dict[str, str], body: bytes) -> tuple[int, bytes, str]:
        container = self.containers[cid]
        with tarfile.open(fileobj=io.BytesIO(body)) as tar:
            tar.extractall(container.folder, filter="data")
        return 200, b"", "text/plain"

    def _start(self, cid: str, query: dict[str, str], body: bytes) -> tuple[int, bytes, str]:
        container = self.containers[cid]
        host = container.body["HostConfig"]
        layer = int(host["StorageOpt"]["size"])
        tmpfs = {path: _size(options) for path, options in host.get("Tmpfs", {}).items()}
        folders = {"/app": layer, "/logs": layer, **tmpfs, "/dev/shm": host["ShmSize"]}
        for top in ("app", "logs", "tests", "solution"):
            (container.folder / top).mkdir(exist_ok=True)
        container.process = self._sandbox.start(
            container.body["Cmd"],
            inputs={
                "/tests": container.folder / "tests",
                "/solution": container.folder / "solution",
                INPUTS: container.folder,
            },
            folders=folders,
            workdir=container.body["WorkingDir"],
            env=dict(entry.split("=", 1) for entry in container.body["Env"]),
            memory_bytes=host["Memory"],
            cpu_seconds=600,
            dump=True,
        )

        def wait() -> None:
            assert container.process is not None
            container.exit_code = container.process.wait()
            container.output = container.process.output().encode()
            report = container.process.report()
            with tarfile.open(fileobj=io.BytesIO(report.dump)) as tar:
                for member in tar.getmembers():
                    extracted = tar.extractfile(member) if member.isfile() else None
                    if extracted is not None:
                        container.layer[member.name] = extracted.read()
            container.oom_killed = any(top in tmpfs or top == "/dev/shm" for top in report.filled)
            container.done.set()

        threading.Thread(target=wait, daemon=True).start()
        return 204, b"", "text/plain"

    def _wait(self, cid: str, query: dict[str, str], body: bytes) -> tuple[int, bytes, str]:
        container = self.containers[cid]
        container.done.wait()
        code = 137 if container.exit_code is None else container.exit_code
        return self._json(200, {"StatusCode": code, "Error": None})

    def _kill(self, cid: str, query: dict[str, str], body: bytes) -> tuple[int, bytes, str]:
        container = self.containers[cid]
        if container.process is None or container.done.is_set():
            return self._json(409, {"message": f"container {cid} is not running"})
        container.process.kill()
        container.done.wait()
        return 204, b"", "text/plain"

    def _logs(self, cid: str, query: dict[str, str], body: bytes) -> tuple[int, bytes, str]:
        data = self.containers[cid].output
        framed = struct.pack(">BxxxI", 2, len(data)) + data if data else b""
        return 200, framed, "application/vnd.docker.raw-stream"

    def _inspect(self, cid: str, query: dict[str, str], body: bytes) -> tuple[int, bytes, str]:
        container = self.containers[cid]
        state = {
            "Status": "exited" if container.done.is_set() else "running",
            "OOMKilled": container.oom_killed,
            "ExitCode": container.exit_code or 0,
        }
        answer: dict[str, Any] = {"Id": cid, "State": state}
        if query.get("size") in ("1", "true"):
            answer["SizeRw"] = sum(len(data) for data in container.layer.values())
        return self._json(200, answer)

    def _get_archive(self, cid: str, query: dict[str, str], body: bytes) -> tuple[int, bytes, str]:
        container = self.containers[cid]
        data = container.layer.get(query["path"].lstrip("/"))
        if data is None:
            return self._json(404, {"message": f"Could not find the file {query['path']}"})
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            info = tarfile.TarInfo(query["path"].rsplit("/", 1)[-1])
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        return 200, buffer.getvalue(), "application/x-tar"

    def _remove(self, cid: str, query: dict[str, str], body: bytes) -> tuple[int, bytes, str]:
        container = self.containers.pop(cid, None)
        if container is None:
            return self._json(404, {"message": f"No such container: {cid}"})
        if container.process is not None and not container.done.is_set():
            container.process.kill()
        shutil.rmtree(container.folder, ignore_errors=True)
        return 204, b"", "text/plain"
