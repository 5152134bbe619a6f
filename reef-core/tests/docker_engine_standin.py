"""A STAND-IN for the Docker Engine API, not a Docker daemon: exactly the calls that
:mod:`reef.containers.docker` documents, on a unix socket, for machines without a daemon.

It answers, under the ``/v1.43`` prefix, with the Engine's status codes and bodies for them:
``GET /images/{name}/json`` (``200`` with the image's name, ``404`` for an image it does not
have), ``POST /build?t=<tag>`` (a tar build context; the Engine's stream of JSON lines, with an
``error`` line when the context has no ``Dockerfile`` or its ``FROM`` names an image it does
not have), ``POST /containers/create`` (``404`` for an image it does not have), ``PUT
/containers/{id}/archive?path=/`` (a tar of the run's folders), ``POST /containers/{id}/start``,
``POST /containers/{id}/wait`` (``{"StatusCode": n}``), ``POST /containers/{id}/kill``, ``GET
/containers/{id}/logs`` (stdout framed as the Engine frames a container without a TTY: an 8-byte
header, stream 1, big-endian size), ``GET /containers/{id}/archive?path=<file>`` (a tar of the
file; ``404`` when it is not there) and ``DELETE /containers/{id}``. Every call is kept in
``calls``; any other is answered 404 and kept in ``unexpected``.

What it is not: it has no images or layers. ``images`` names the images it pretends to have; a
build runs none of the Dockerfile's steps: it checks the ``FROM`` line, keeps the context's
files in ``builds`` under the tag and adds the tag to ``images``. A container's command, of
any image, runs in Reef's own sandbox backend (bubblewrap, this machine's ``/usr``),
in a folder made from the uploaded tar, with ``HostConfig.Memory`` as its memory limit. The
other HostConfig fields are only kept, for the tests to check what the backend asked for.
"""

from __future__ import annotations

import io
import json
import re
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

from reef.containers.interface import RunSpec
from reef.containers.sandbox import SandboxBackend, SandboxProcess, collect_files

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
        ("GET", r"/containers/([^/]+)/archive", "get_archive"),
        ("DELETE", r"/containers/([^/]+)", "remove"),
    )
)


class _Container:
    def __init__(self, folder: Path, body: dict[str, Any]) -> None:
        self.folder = folder
        self.body = body
        self.process: SandboxProcess | None = None
        self.output = folder / "output"
        self.done = threading.Event()
        self.exit_code: int | None = None


class DockerEngineStandIn:
    """The stand-in (see the module's documentation); ``url`` is what the backend takes."""

    def __init__(self, folder: Path, images: tuple[str, ...]) -> None:
        self.folder = folder
        self.images = set(images)
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
        return self._json(200, {"Id": f"sha256:{uuid.uuid5(uuid.NAMESPACE_URL, name).hex}"})

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
            lines.append({"stream": f"Successfully tagged {query['t']}\n"})
        if error:
            lines.append({"errorDetail": {"message": error}, "error": error})
        stream = "".join(json.dumps(line) + "\r\n" for line in lines).encode()
        return 200, stream, "application/json"

    def _create(self, query: dict[str, str], body: bytes) -> tuple[int, bytes, str]:
        document = json.loads(body)
        if document["Image"] not in self.images:
            return self._json(404, {"message": f"No such image: {document['Image']}"})
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
        spec = RunSpec(
            files={},
            command=tuple(container.body["Cmd"]),
            timeout_seconds=600,
            memory_bytes=container.body["HostConfig"]["Memory"],
            workdir=container.body["WorkingDir"],
            env=dict(entry.split("=", 1) for entry in container.body["Env"]),
        )
        output = container.output.open("wb")
        container.process = self._sandbox.start(spec, container.folder, output)

        def wait() -> None:
            assert container.process is not None
            container.exit_code = container.process.wait()
            output.close()
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
        data = self.containers[cid].output.read_bytes()
        framed = struct.pack(">BxxxI", 1, len(data)) + data if data else b""
        return 200, framed, "application/vnd.docker.raw-stream"

    def _get_archive(self, cid: str, query: dict[str, str], body: bytes) -> tuple[int, bytes, str]:
        container = self.containers[cid]
        found = collect_files(container.folder, (query["path"],))
        if not found:
            return self._json(404, {"message": f"Could not find the file {query['path']}"})
        data = found[query["path"]].encode()
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
        return 204, b"", "text/plain"
