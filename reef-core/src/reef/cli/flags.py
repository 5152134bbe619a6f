"""The checks of the ``reef`` command's arguments, made before a subcommand does any work.

Each value a subcommand takes is read by one of the functions here, given to argparse as the
argument's ``type``: it returns the value, or raises :class:`argparse.ArgumentTypeError` saying
what the value must be. argparse prints that after the argument's name, with the subcommand's
usage (``reef serve: error: argument --port: 99999 is not a port: use a whole number from 1 to
65535``), and exits with status 2; nothing was loaded, opened or written. A check that needs
several arguments at once (is the port free on that host?) is one of a subcommand's ``checks``
(:data:`reef.cli.SUBCOMMANDS`), a function of the parsed arguments whose answer, when it finds
a problem, argparse reports the same way. ``reef-core/tests/test_cli_flags.py`` holds every
argument of every subcommand to one of these.
"""

from __future__ import annotations

import argparse
import errno
import ipaddress
import math
import re
import socket
from datetime import UTC, datetime
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

__all__ = [
    "LOG_LEVELS",
    "deployment_file",
    "export_file",
    "finite_number",
    "folder",
    "host",
    "http_url",
    "log_level",
    "name",
    "new_path",
    "port",
    "port_is_free",
    "positive_seconds",
    "recipe_name",
    "tag",
    "timestamp",
    "token",
    "workers",
]

#: The log levels ``reef serve`` takes: those of Python's logging that uvicorn knows too.
LOG_LEVELS: Final = ("critical", "error", "warning", "info", "debug")

#: The highest TCP port.
_HIGHEST_PORT: Final = 65535
#: One label of a host name (RFC 1123): letters, digits and inner hyphens.
_LABEL: Final = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")


def port(text: str) -> int:
    """A TCP port to listen on, 1 to 65535."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 1 <= value <= _HIGHEST_PORT:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a port: use a whole number from 1 to {_HIGHEST_PORT}"
        )
    return value


def _number(text: str) -> float:
    """``text`` as a number; NaN when it is none (which every check refuses)."""
    try:
        return float(text)
    except ValueError:
        return math.nan


def workers(text: str) -> int:
    """A number of worker processes: a whole number from 1."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number of processes: use a whole number from 1, such as 4"
        )
    return int(text)


def positive_seconds(text: str) -> float:
    """A duration in seconds, finite and above 0."""
    value = _number(text)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration: use a number of seconds above 0, such as 10 or 2.5"
        )
    return value


def log_level(text: str) -> str:
    """A log level, in either case; the lower-case name."""
    if text.lower() not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a log level: use one of {', '.join(LOG_LEVELS)}"
        )
    return text.lower()


def host(text: str) -> str:
    """An address to listen on: an IPv4 or IPv6 address, or a host name."""
    try:
        ipaddress.ip_address(text)
    except ValueError:
        labels = text.removesuffix(".").split(".")
        if len(text) > 253 or not all(_LABEL.match(label) for label in labels):
            raise argparse.ArgumentTypeError(
                f"{text!r} is not an address: use an IP address (127.0.0.1, ::1, 0.0.0.0) or a"
                " host name of letters, digits, '-' and '.'"
            ) from None
    return text


def http_url(text: str) -> str:
    """The base URL of a service: ``http://`` or ``https://``, a host, an optional port."""
    parts = urlsplit(text)
    try:
        well_formed = (
            parts.scheme in ("http", "https")
            and bool(parts.hostname)
            and not parts.query
            and parts.port != 0
        )
    except ValueError:  # a port that is not a number, or beyond 65535
        well_formed = False
    if not well_formed:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a service's URL: use http://HOST:PORT or https://HOST:PORT, such"
            " as http://127.0.0.1:8000"
        )
    return text


def token(text: str) -> str:
    """A bearer token: not empty, no spaces."""
    if not text or any(character.isspace() for character in text):
        raise argparse.ArgumentTypeError(
            "a token is one word with no spaces: give the secret of an auth.tokens entry, or"
            " leave the flag out to use $REEF_TOKEN"
        )
    return text


def deployment_file(text: str) -> Path:
    """A deployment file that exists (what it holds is the subcommand's to check)."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder: name the deployment's YAML file")
    if not path.exists():
        raise argparse.ArgumentTypeError(
            f"{text}: no such file: name a deployment's YAML file (docs/configuration.md)"
        )
    return path


def folder(text: str) -> Path:
    """A folder to write into: one that exists, or a path with no file on it (made then)."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a file: name a folder")
    return path


def new_path(text: str) -> Path:
    """A path to write a new file or folder at: nothing is there yet, its folder exists."""
    path = Path(text)
    if path.exists():
        raise argparse.ArgumentTypeError(f"{text} exists: name a new path (nothing is overwritten)")
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: the folder {path.parent} does not exist")
    return path


def export_file(text: str) -> Path:
    """An export to read: a ``.jsonl`` or ``.parquet`` file, or a ``datasets`` folder."""
    path = Path(text)
    if not path.exists():
        raise argparse.ArgumentTypeError(
            f"{text}: no such file: name a file reef export wrote (.jsonl, .parquet, or a"
            " datasets folder)"
        )
    return path


def name(text: str) -> str:
    """A name (a scenario's, a trainer's) as the service takes names."""
    from reef.server.names import name_problem

    problem = name_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def timestamp(text: str) -> float:
    """A time: Unix seconds, or an ISO 8601 date and time (UTC unless it names its offset)."""
    try:
        value = float(text)
    except ValueError:
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a time: use Unix seconds (1767225600) or an ISO 8601 date and"
                " time (2026-01-01T00:00:00)"
            ) from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        value = moment.timestamp()
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a time: use a finite number")
    return value


def finite_number(text: str) -> float:
    """A finite number (a reward bound)."""
    value = _number(text)
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number: use one such as 0.5 or -1")
    return value


def tag(text: str) -> tuple[str, str]:
    """A call's tag and its value, ``NAME=VALUE`` (the ``x-reef-tag-NAME`` header's)."""
    tag_name, equals, value = text.partition("=")
    if not equals or not tag_name:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a tag: write NAME=VALUE, as the call's x-reef-tag-NAME header has it"
        )
    return tag_name, value


def recipe_name(text: str) -> str:
    """A recipe's name as ``reef new recipe`` takes it (:mod:`reef.cli.scaffold`)."""
    from reef.cli.scaffold import ScaffoldError, check_recipe_name

    try:
        return check_recipe_name(text)
    except ScaffoldError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def port_is_free(args: argparse.Namespace) -> str | None:
    """Why ``reef serve`` could not listen on ``--host`` and ``--port``, or ``None``.

    It binds the address as uvicorn will (``SO_REUSEADDR``, so a port whose last connections
    are still closing is free) and lets it go at once.
    """
    try:
        found = socket.getaddrinfo(args.host, args.port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        return f"argument --host: cannot resolve {args.host!r} ({exc.strerror}): use an address"
    family, kind, protocol, _, address = found[0]
    with socket.socket(family, kind, protocol) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return (
                    f"argument --port: port {args.port} is taken on {args.host} (another"
                    " process listens there): stop it, or choose another port with --port"
                )
            if exc.errno == errno.EACCES:
                return (
                    f"argument --port: port {args.port} needs privileges on this machine:"
                    " choose a port above 1023 with --port"
                )
            return f"argument --host: cannot listen on {args.host}: {exc.strerror}"
    return None
