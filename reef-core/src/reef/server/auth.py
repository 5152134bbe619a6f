"""Who may call the service: bearer tokens with scopes, each optionally limited to scenarios.

The tokens come from the deployment file (``auth.tokens``, docs/decisions.md#auth). A token's
scopes are ``infer`` (inference), ``feedback`` (reports and data items), ``admin`` (training
modes, instructions, the manual buffer, status) and ``metrics`` (``GET /metrics``, for a
Prometheus scraper). A service without tokens runs only when its options
say so explicitly (``allow_unauthenticated``), and then answers loopback clients only, whatever
address it was bound to; :func:`check_auth_mode` lets ``reef serve`` refuse a service it may
not run (without tokens unasked, with tokens and asked to run without, without tokens beyond
loopback) before it does any work: before plugins load, before a store is opened.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Mapping
from typing import Literal, TypeAlias

import attrs

from reef.core.deployment import AuthSection
from reef.errors import ReefError
from reef.server.errors import ApiError

__all__ = [
    "Authenticator",
    "Caller",
    "Scope",
    "UnauthenticatedServiceError",
    "check_auth_mode",
    "check_bind_address",
]

Scope: TypeAlias = Literal["infer", "feedback", "admin", "metrics"]


class UnauthenticatedServiceError(ReefError, ValueError):
    """A service without tokens that was not explicitly allowed, or that would listen beyond
    loopback."""


@attrs.frozen
class Caller:
    """Who made a request: the token's name (``None`` without auth), its scopes and the
    scenarios it is limited to (``None``: every scenario)."""

    name: str | None
    scopes: frozenset[str]
    scenarios: frozenset[str] | None

    def may(self, scope: Scope, scenario: str | None = None) -> bool:
        """Whether this caller has ``scope`` (for ``scenario`` when one is given)."""
        if scope not in self.scopes:
            return False
        return scenario is None or self.scenarios is None or scenario in self.scenarios

    def require(self, scope: Scope, scenario: str | None = None) -> None:
        """:raises ApiError: 403 naming the scope or the scenario the token lacks."""
        if scope not in self.scopes:
            raise ApiError.one(
                403, "forbidden", "authorization", f"token {self.name!r} lacks the {scope!r} scope"
            )
        if not self.may(scope, scenario):
            raise ApiError.one(
                403,
                "forbidden",
                "scenario",
                f"token {self.name!r} is not allowed for scenario {scenario!r}",
            )

    def sees(self, scenario: str) -> bool:
        """Whether the caller may see ``scenario`` at all."""
        return self.scenarios is None or scenario in self.scenarios


_EVERYONE = Caller(None, frozenset(("infer", "feedback", "admin", "metrics")), None)


def is_loopback(host: str | None) -> bool:
    """True for a loopback address (``127.0.0.0/8``, ``::1``) or ``localhost``."""
    if host is None:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind_address(host: str, *, authenticated: bool) -> None:
    """Refuse to listen beyond loopback without authentication.

    :raises UnauthenticatedServiceError: when ``host`` is not a loopback address and the
        service has no tokens.
    """
    if not authenticated and not is_loopback(host):
        raise UnauthenticatedServiceError(
            f"a service without auth tokens listens on loopback only, not on {host!r}:"
            " add tokens under auth.tokens, or listen on loopback with reef serve --host"
            " 127.0.0.1 (the default)"
        )


def check_auth_mode(
    *, authenticated: bool, allow_unauthenticated: bool, host: str | None = None
) -> None:
    """Refuse a service that may not run as asked.

    :param authenticated: the deployment has tokens.
    :param allow_unauthenticated: the service was asked to run without tokens.
    :param host: the address it is to listen on, when known (:func:`check_bind_address`).
    :raises UnauthenticatedServiceError: when there are no tokens and running without them was
        not allowed, or when there are tokens and it was (one or the other, never both), or
        when a service without tokens would listen beyond loopback.
    """
    if not authenticated and not allow_unauthenticated:
        raise UnauthenticatedServiceError(
            "the deployment has no auth.tokens: add tokens under auth.tokens, or run"
            " without auth explicitly with reef serve --allow-unauthenticated (loopback"
            " clients only; ServerOptions(allow_unauthenticated=True) when embedding)"
        )
    if authenticated and allow_unauthenticated:
        raise UnauthenticatedServiceError(
            "the deployment has auth.tokens and the service was asked to run without auth;"
            " choose one"
        )
    if host is not None:
        check_bind_address(host, authenticated=authenticated)


class Authenticator:
    """Finds the caller of each request from its ``Authorization`` header.

    :param auth: the deployment's auth section.
    :param allow_unauthenticated: run without tokens (loopback clients only).
    :raises UnauthenticatedServiceError: as :func:`check_auth_mode`.
    """

    def __init__(self, auth: AuthSection, *, allow_unauthenticated: bool = False) -> None:
        check_auth_mode(
            authenticated=bool(auth.tokens), allow_unauthenticated=allow_unauthenticated
        )
        self.enabled = bool(auth.tokens)
        self._tokens: Mapping[str, Caller] = {
            section.token: Caller(
                name,
                frozenset(section.scopes),
                None if section.scenarios is None else frozenset(section.scenarios),
            )
            for name, section in auth.tokens.items()
        }

    def check_client(self, client_host: str | None) -> None:
        """Whether the service answers ``client_host`` at all (what needs no token, such as
        the console's page, asks this alone).

        :raises ApiError: 403 for a client beyond loopback of a service without auth.
        """
        if not self.enabled and not is_loopback(client_host):
            raise ApiError.one(
                403,
                "forbidden",
                "client",
                f"this service runs without auth and answers loopback clients only,"
                f" not {client_host!r}",
            )

    def caller(self, authorization: str | None, client_host: str | None) -> Caller:
        """The caller of a request.

        :raises ApiError: 401 for a missing or unknown token; 403 for a client beyond loopback
            of a service without auth.
        """
        if not self.enabled:
            self.check_client(client_host)
            return _EVERYONE
        if not authorization or not authorization.lower().startswith("bearer "):
            raise ApiError.one(401, "unauthorized", "authorization", "a bearer token is required")
        # Only ASCII spaces surround a token: str.strip() would also drop U+00A0, U+0085 and
        # the like, which are not part of the header's syntax.
        presented = authorization[7:].strip(" ").encode()
        if not presented:
            raise ApiError.one(401, "unauthorized", "authorization", "the bearer token is empty")
        # Compare against every token in constant time, so timing does not reveal a prefix.
        found: Caller | None = None
        for secret, caller in self._tokens.items():
            if hmac.compare_digest(secret.encode(), presented):
                found = caller
        if found is None:
            raise ApiError.one(401, "unauthorized", "authorization", "unknown bearer token")
        return found
