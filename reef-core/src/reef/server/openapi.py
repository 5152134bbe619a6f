"""The route table of the service and its OpenAPI document, generated from it and the body types.

Each route of the application is one :class:`ApiRoute`: its method, path, the attrs class of
its request body and of each answer. The Starlette routes and the OpenAPI 3.1 document are both
made from that one list, and each body's JSON Schema from its attrs class (:func:`json_schema`),
so the document cannot drift from the code.

What every route checks before its handler runs is applied here too, from the same row
(:meth:`ApiRoute.endpoint`), so a route added later gets it without asking: each path
parameter is a name (:mod:`reef.server.names`), and a route that reads a JSON body refuses any
other content type with a 415 (a browser may send ``text/plain`` to any origin without asking
first; ``application/json`` it may not).
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal

import attrs
from starlette.requests import Request
from starlette.responses import Response

from reef.core.records import JSON
from reef.server.errors import ApiError, ErrorBody
from reef.server.names import check_name
from reef.version import __version__

__all__ = [
    "JSON_MEDIA_TYPE",
    "ApiRoute",
    "check_json_content_type",
    "json_schema",
    "openapi_document",
]

# A path parameter, with Starlette's converter when it has one (``{sample_id:path}``).
_PATH_PARAMETER = re.compile(r"\{([a-z_]+)(?::[a-z]+)?\}")
# A path parameter that may hold a ``/``: an id the service made, looked up as given.
_FREE_PARAMETER = re.compile(r"\{([a-z_]+):path\}")

#: The media type of every request body the service reads.
JSON_MEDIA_TYPE = "application/json"


@attrs.frozen
class ApiRoute:
    """One route of the service.

    :ivar method: ``GET``, ``POST`` or ``DELETE``.
    :ivar path: the path, with ``{name}`` parameters (``{name:path}`` for one that may hold a
        ``/``; the document writes it ``{name}``).
    :ivar summary: one line for the document.
    :ivar handler: the Starlette endpoint.
    :ivar request: the attrs class of the body; ``None`` without a body.
    :ivar responses: status → attrs class of the body (``None``: a body the class cannot
        describe, such as a chat completion or a stream).
    :ivar scope: the token scope the route needs (``None``: none, e.g. the document itself).
    :ivar headers: request headers the route reads, by name → description.
    :ivar query: the attrs class of the query parameters the route reads (each field one
        parameter; :func:`reef.server.bodies.read_query`); ``None`` for none.
    """

    method: str
    path: str
    summary: str
    handler: Callable[..., Awaitable[Any]]
    request: type[Any] | None = None
    responses: Mapping[int, type[Any] | None] = attrs.field(factory=dict)
    scope: str | None = None
    headers: Mapping[str, str] = attrs.field(factory=dict)
    query: type[Any] | None = None

    @property
    def document_path(self) -> str:
        """The path as the document writes it: parameters without their converters."""
        return _PATH_PARAMETER.sub(r"{\1}", self.path)

    @property
    def named_parameters(self) -> tuple[str, ...]:
        """The path parameters that are names (every one but a ``{name:path}``)."""
        free = set(_FREE_PARAMETER.findall(self.path))
        return tuple(p for p in _PATH_PARAMETER.findall(self.path) if p not in free)

    def endpoint(self) -> Callable[[Request], Awaitable[Response]]:
        """The handler behind the checks every route takes (the module docstring): its path
        parameters are names, and its body, when it reads one, is declared JSON.

        :raises ApiError: 400 for a path parameter that is no name; 415 for a body of another
            content type.
        """
        handler, named, reads_json = self.handler, self.named_parameters, self.request is not None

        async def checked(request: Request) -> Response:
            for parameter in named:
                check_name(request.path_params[parameter], parameter)
            if reads_json:
                check_json_content_type(request)
            response: Response = await handler(request)
            return response

        return checked


def check_json_content_type(request: Request) -> None:
    """:raises ApiError: 415 unless the request declares its body ``application/json``."""
    declared = request.headers.get("content-type", "")
    media_type = declared.partition(";")[0].strip().lower()
    if media_type != JSON_MEDIA_TYPE:
        raise ApiError.one(
            415,
            "unsupported_media_type",
            "content-type",
            f"the body must be sent as {JSON_MEDIA_TYPE}, not {declared or 'without a type'!r}",
        )


def json_schema(cls: Any, components: dict[str, JSON]) -> JSON:
    """The JSON Schema of a type that cattrs (un)structures: attrs classes become components
    (``#/components/schemas/<Name>``) added to ``components``."""
    if attrs.has(cls):
        name = cls.__name__
        if name not in components:
            components[name] = {}  # placeholder: a class that refers to itself terminates
            hints = typing.get_type_hints(cls)
            properties: JSON = {}
            required: list[str] = []
            for field in attrs.fields(cls):
                if not field.init:
                    continue
                properties[field.name] = json_schema(hints[field.name], components)
                if field.default is attrs.NOTHING:
                    required.append(field.name)
            schema: JSON = {
                "type": "object",
                "properties": properties,
                "additionalProperties": False,
            }
            if required:
                schema["required"] = required
            if cls.__doc__:
                schema["description"] = cls.__doc__.strip().split("\n\n")[0]
            components[name] = schema
        return {"$ref": f"#/components/schemas/{name}"}
    if cls is Any:
        return {}
    if cls is type(None):
        return {"type": "null"}
    simple = {str: "string", bool: "boolean", int: "integer", float: "number"}
    if cls in simple:
        return {"type": simple[cls]}
    origin = typing.get_origin(cls)
    args = typing.get_args(cls)
    if origin is Literal:
        return {"enum": list(args)}
    if origin in (typing.Union, types.UnionType):
        return {"anyOf": [json_schema(arg, components) for arg in args]}
    if origin in (tuple, list, Sequence):
        item = args[0] if args else Any
        return {"type": "array", "items": json_schema(item, components)}
    if origin in (dict, Mapping) or cls is dict:
        value = args[1] if len(args) == 2 else Any
        return {"type": "object", "additionalProperties": json_schema(value, components)}
    raise TypeError(f"no JSON Schema for {cls!r}")


def _error_response() -> JSON:
    return {
        "description": "refused: the body names the field and the reason",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
    }


def openapi_document(routes: Sequence[ApiRoute], *, title: str = "Reef") -> JSON:
    """The OpenAPI 3.1 document of ``routes``."""
    components: dict[str, JSON] = {}
    json_schema(ErrorBody, components)
    paths: dict[str, JSON] = {}
    for route in routes:
        operation: JSON = {
            "summary": route.summary,
            "operationId": f"{route.method.lower()}_{_operation_name(route.document_path)}",
            "responses": {},
        }
        parameters = [
            {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
            for name in _PATH_PARAMETER.findall(route.path)
        ]
        parameters += [
            {
                "name": name,
                "in": "header",
                "required": False,
                "description": description,
                "schema": {"type": "string"},
            }
            for name, description in route.headers.items()
        ]
        if route.query is not None:
            parameters += _query_parameters(route.query, components)
        if parameters:
            operation["parameters"] = parameters
        if route.request is not None:
            operation["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": json_schema(route.request, components)}},
            }
        for status, body in route.responses.items():
            content: JSON = {"schema": {} if body is None else json_schema(body, components)}
            operation["responses"][str(status)] = {
                "description": "success",
                "content": {"application/json": content},
            }
        refusals = ("400", "401", "403", "404", "409", "413")
        for refused in (*refusals, "415") if route.request is not None else refusals:
            operation["responses"].setdefault(refused, _error_response())
        if route.scope is not None:
            operation["security"] = [{"bearer": []}]
            operation["x-reef-scope"] = route.scope
        paths.setdefault(route.document_path, {})[route.method.lower()] = operation
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": __version__},
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


def _query_parameters(cls: type[Any], components: dict[str, JSON]) -> list[JSON]:
    """One ``in: query`` parameter per field of the attrs class ``cls``, described by the
    first paragraph of its ``:ivar <name>:`` line in the class's docstring."""
    hints = typing.get_type_hints(cls)
    described = dict(
        re.findall(r":ivar ([a-z_]+): ([^:]+?)(?=\n\s*:|\n\s*\n|\Z)", cls.__doc__ or "")
    )
    parameters = []
    for field in attrs.fields(cls):
        kind = hints[field.name]
        # An absent parameter is None: the query itself holds no null.
        given = [a for a in typing.get_args(kind) if a is not type(None)]
        if typing.get_origin(kind) in (typing.Union, types.UnionType) and len(given) == 1:
            kind = given[0]
        parameter: JSON = {
            "name": field.name,
            "in": "query",
            "required": field.default is attrs.NOTHING,
            "schema": json_schema(kind, components),
        }
        if field.name in described:
            parameter["description"] = " ".join(described[field.name].split())
        parameters.append(parameter)
    return parameters


def _operation_name(path: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", path.lower()).strip("_")
