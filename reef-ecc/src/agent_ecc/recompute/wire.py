"""The re-verification service's wire form: requests checked before anything runs, raw outputs.

A request body is the JSON form of an :class:`~agent_ecc.execution.ExecRequest`. The service
executes it only if every field is present with its type, nothing else is there, it is of the
runtime the service runs (``git``: the store holds the snapshot its ``image`` names; ``docker``:
its ``image`` is a container image reference and its ``workdir`` an absolute path), the store
holds the eval script and patch it names, and the identities it carries are the ones derived
from what it asks to run. Anything else is a :class:`RequestRefused` naming the field,
answered with a 4xx status; nothing was executed for it. An answer is the JSON form of a
:class:`~agent_ecc.execution.RawOutput`: a log and run facts, never a verdict.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any, Final

from agent_ecc.codec import from_json, to_json
from agent_ecc.execution import RUNTIMES, ExecRequest, RawOutput, request_identity, runtime_of
from agent_ecc.store import ContentStore, StoreError
from agent_ecc.versions import execution_identity

#: The largest request body the service reads (a request names blobs; it carries none).
MAX_BODY: Final = 64 * 1024
#: The adapters whose checks the executor knows how to run.
ADAPTERS: Final = ("swebench",)

_REQUEST_FIELDS: Final = {
    "request_id": str,
    "adapter": str,
    "check_id": str,
    "execution": dict,
    "execution_identity": str,
    "patch": str,
}
_EXECUTION_FIELDS: Final = {
    "image",
    "eval_script",
    "timeout_s",
    "patch_exclude",
    "runtime",
    "workdir",
}
#: A container image reference: ``[registry/]name[:tag][@sha256:digest]``.
_IMAGE_REFERENCE: Final = re.compile(r"[a-z0-9][a-z0-9._/:@-]{0,255}", re.IGNORECASE)


class RequestRefused(ValueError):
    """A request the service does not execute: ``status`` (4xx), ``field`` (its JSON path)
    and ``reason``."""

    def __init__(self, status: int, field: str, reason: str) -> None:
        self.status = status
        self.field = field
        self.reason = reason
        super().__init__(f"{reason} @ {field}")

    def body(self) -> dict[str, Any]:
        """The JSON body of the refusal."""
        return {"error": self.reason, "field": self.field}


def _blob(store: ContentStore, key: object, field: str) -> str:
    if not isinstance(key, str):
        raise RequestRefused(400, field, f"expected a store key string, got {type(key).__name__}")
    try:
        present = store.has(key)
    except StoreError as error:
        raise RequestRefused(400, field, str(error)) from None
    if not present:
        raise RequestRefused(422, field, f"the store holds no blob {key}")
    return key


def _image(body: Mapping[str, Any], store: ContentStore, runtime: str) -> None:
    kind = runtime_of(body)
    if kind not in RUNTIMES:
        raise RequestRefused(
            422, "$.execution.runtime", f"unknown runtime {kind!r}; known: {', '.join(RUNTIMES)}"
        )
    if kind != runtime:
        raise RequestRefused(
            422,
            "$.execution.runtime",
            f"this service runs {runtime} checks, not {kind} ones: start one with "
            f"--runtime {kind} for them",
        )
    if kind == "git":
        _blob(store, body["image"], "$.execution.image")
        return
    image = body["image"]
    if not isinstance(image, str) or _IMAGE_REFERENCE.fullmatch(image) is None:
        raise RequestRefused(
            422, "$.execution.image", f"not a container image reference: {image!r}"
        )
    workdir = body.get("workdir")
    if not isinstance(workdir, str) or not workdir.startswith("/"):
        raise RequestRefused(
            422, "$.execution.workdir", f"expected the absolute path of the repository: {workdir!r}"
        )


def _execution(
    body: Mapping[str, Any], store: ContentStore, max_timeout_s: float, runtime: str
) -> None:
    for key in body:
        if key not in _EXECUTION_FIELDS:
            raise RequestRefused(400, f"$.execution.{key}", "unknown key")
    for key in ("image", "eval_script"):
        if key not in body:
            raise RequestRefused(400, f"$.execution.{key}", "required key missing")
    _image(body, store, runtime)
    _blob(store, body["eval_script"], "$.execution.eval_script")
    if "patch_exclude" in body:
        _blob(store, body["patch_exclude"], "$.execution.patch_exclude")
    timeout = body.get("timeout_s", 60.0)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise RequestRefused(400, "$.execution.timeout_s", "expected a number of seconds")
    if not math.isfinite(timeout) or not 0 < timeout <= max_timeout_s:
        raise RequestRefused(
            422, "$.execution.timeout_s", f"must be in (0, {max_timeout_s}], got {timeout!r}"
        )


def parse_request(
    data: bytes, store: ContentStore, *, max_timeout_s: float, runtime: str = "git"
) -> ExecRequest:
    """The request in ``data``, every field checked (see the module docstring); ``runtime``:
    the one the service runs.

    :raises RequestRefused: naming the first field found wrong.
    """
    try:
        body = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise RequestRefused(400, "$", f"not JSON: {error}") from None
    if not isinstance(body, dict):
        raise RequestRefused(400, "$", f"expected a JSON object, got {type(body).__name__}")
    for key in body:
        if key not in _REQUEST_FIELDS:
            raise RequestRefused(400, f"$.{key}", "unknown key")
    for key, kind in _REQUEST_FIELDS.items():
        if key not in body:
            raise RequestRefused(400, f"$.{key}", "required key missing")
        if not isinstance(body[key], kind):
            raise RequestRefused(
                400, f"$.{key}", f"expected {kind.__name__}, got {type(body[key]).__name__}"
            )
    if body["adapter"] not in ADAPTERS:
        raise RequestRefused(
            422, "$.adapter", f"unknown adapter {body['adapter']!r}; known: {', '.join(ADAPTERS)}"
        )
    _execution(body["execution"], store, max_timeout_s, runtime)
    _blob(store, body["patch"], "$.patch")
    derived = execution_identity(body["adapter"], body["execution"])
    if body["execution_identity"] != derived:
        raise RequestRefused(
            422, "$.execution_identity", f"is not the identity of $.execution ({derived})"
        )
    derived = request_identity(derived, body["patch"])
    if body["request_id"] != derived:
        raise RequestRefused(422, "$.request_id", f"is not the identity of the request ({derived})")
    return ExecRequest(**body)


def request_to_json(request: ExecRequest) -> dict[str, Any]:
    """The wire body of ``request``."""
    return {
        "request_id": request.request_id,
        "adapter": request.adapter,
        "check_id": request.check_id,
        "execution": dict(request.execution),
        "execution_identity": request.execution_identity,
        "patch": request.patch,
    }


def output_to_json(output: RawOutput) -> Any:
    """The wire body of a raw output."""
    return to_json(output)


def output_from_json(body: Any) -> RawOutput:
    """A raw output from its wire body (:class:`agent_ecc.codec.FormatError` when malformed)."""
    return from_json(RawOutput, body)
