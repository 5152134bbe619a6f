"""The ``reef`` command.

Each subcommand is one entry of :data:`SUBCOMMANDS`: a one-line description, its page of the
docs, a function that adds its arguments, the checks that need several of them, and a function
that runs it and returns the exit status. Every value is read through a check of
:mod:`reef.cli.flags`, so a bad one is refused, naming the argument and what it may be, before
the subcommand does any work. A subcommand that needs heavy modules imports them in its
``run``, so ``reef --help`` stays fast.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

import attrs

from reef.cli import flags
from reef.core.deployment import DeploymentError, auth_of
from reef.plugins import BLOCK_ENV_VAR, PluginError, PluginKind, Plugins
from reef.plugins.builtin import built_in_components, built_in_trackers
from reef.plugins.scenarios import load_deployment, recipe_gaps
from reef.version import __version__


@attrs.frozen
class Subcommand:
    """One ``reef <name>`` subcommand.

    :ivar help: what it does, in one line (``reef --help`` and the top of its own help).
    :ivar doc: the page of Reef's docs that explains it, named at the end of its help.
    :ivar configure: adds its arguments, each read through a check of :mod:`reef.cli.flags`.
    :ivar run: runs it; the exit status.
    :ivar checks: checks of several arguments at once, run after parsing and before ``run``:
        each returns what is wrong, or ``None``.
    """

    help: str
    doc: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    checks: tuple[Callable[[argparse.Namespace], str | None], ...] = ()


class _HelpFormatter(argparse.HelpFormatter):
    """Each option's help ends with its default, where it has one to show."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        shown = action.default not in (None, False, argparse.SUPPRESS)
        if shown and action.option_strings and "%(default)" not in text:
            text += " (default: %(default)s)"
        return text


def _loaded_plugins() -> Plugins:
    plugins = Plugins()
    plugins.load()
    return plugins


def _blocks_nothing(command: str, plugins: Plugins) -> bool:
    """Refuse, saying so, when REEF_BLOCK_PLUGINS names a plugin that is not there: whoever set
    it believes that plugin is off (docs/decisions.md#blocking-plugins)."""
    problem = plugins.unmatched_blocks()
    if problem is not None:
        print(
            f"reef {command}: {problem}; name only those, or unset {BLOCK_ENV_VAR}", file=sys.stderr
        )
    return problem is not None


def _configure_plugins(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _run_plugins(args: argparse.Namespace) -> int:
    plugins = _loaded_plugins()
    unmatched = plugins.unmatched_blocks()
    if unmatched is not None:  # a warning: this listing is where the right names are found
        print(f"warning: {unmatched}", file=sys.stderr)
    # A recipe whose stages are not installed is listed, but not as usable.
    recipe_problems = {
        r.name: list(recipe_gaps(plugins, r.cls))
        for r in plugins.registrations
        if r.kind == PluginKind.RECIPE
    }
    rows = [
        {
            "name": r.name,
            "kind": str(r.kind),
            "class": r.reference,  # not imported: listing loads no stage, no component
            "plugin": r.plugin,
            "distribution": r.distribution,
            "version": r.version,
            **({"not_usable": recipe_problems[r.name]} if r.kind == PluginKind.RECIPE else {}),
        }
        for r in plugins.registrations
    ]
    contributing = {r.plugin for r in plugins.registrations}
    empty = [p for p in plugins.loaded if p.name not in contributing]
    failed = [attrs.asdict(f) for f in plugins.failures]
    # A built-in component whose extra is missing is not registered: say what installs it.
    unavailable = [] if "core" in plugins.blocked else built_in_components()[1]
    trackers_missing = [] if "core" in plugins.blocked else built_in_trackers()[1]
    if args.json:
        body = {
            "registered": rows,
            "plugins": [attrs.asdict(p) for p in plugins.loaded],
            "failed": failed,
            "blocked": sorted(plugins.blocked),
            "unavailable": [attrs.asdict(u) for u in unavailable],
            "unavailable_trackers": [attrs.asdict(u) for u in trackers_missing],
        }
        print(json.dumps(body, indent=2))
        return 0
    table = [("NAME", "KIND", "DISTRIBUTION", "VERSION", "CLASS")] + [
        (r["name"], r["kind"], r["distribution"] or "-", r["version"] or "-", r["class"])
        for r in rows
    ]
    widths = [max(len(str(row[i])) for row in table) for i in range(4)]
    for row in table:
        print(
            "  ".join(str(cell).ljust(w) for cell, w in zip(row, widths, strict=False))
            + "  "
            + str(row[4])
        )
    for recipe, gaps in recipe_problems.items():
        if gaps:
            print(f"not usable: recipe {recipe}: {'; '.join(gaps)}")
    for p in empty:
        print(f"registers nothing yet: plugin {p.name} ({p.distribution or '-'} {p.version or ''})")
    for f in plugins.failures:
        print(f"failed: {f.name} ({f.entry_point}, {f.distribution} {f.version}): {f.error}")
    for u in unavailable:
        print(f"not installed: component {u.name} needs the {u.missing} package: {u.install}")
    for u in trackers_missing:
        print(f"not installed: tracker {u.name} needs the {u.missing} package: {u.install}")
    if plugins.blocked:
        print(f"blocked: {', '.join(sorted(plugins.blocked))}")
    return 0


def _configure_check(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("deployment", type=flags.deployment_file, help="the deployment file (YAML)")


def _run_check(args: argparse.Namespace) -> int:
    from reef.train.stages import check_stages

    plugins = _loaded_plugins()
    if _blocks_nothing("check", plugins):
        return 1
    try:
        deployment = load_deployment(args.deployment, plugins=plugins)
        # What reef serve builds before it listens: every trainer's stages.
        check_stages(deployment, plugins=plugins, origin=str(args.deployment))
    except DeploymentError as exc:
        print(exc, file=sys.stderr)
        return 1
    print(f"{args.deployment}: ok ({', '.join(deployment.scenarios)})")
    return 0


def _configure_serve(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("deployment", type=flags.deployment_file, help="the deployment file (YAML)")
    parser.add_argument("--host", type=flags.host, default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=flags.port, default=8000, help="port to listen on")
    parser.add_argument(
        "--allow-unauthenticated",
        action="store_true",
        help="run without auth tokens (loopback clients only)",
    )
    parser.add_argument(
        "--no-trainers", action="store_true", help="serve only; trainers run in other processes"
    )
    parser.add_argument(
        "--workers",
        type=flags.workers,
        default=1,
        help="processes serving on the one port (each a whole reef serve: its trainers wait for"
        " their leases); uvicorn's supervisor restarts one that dies",
    )
    parser.add_argument(
        "--lease-ttl",
        type=flags.positive_seconds,
        default=10.0,
        help="seconds within which another process takes over the trainers of one that died"
        " (a claim lasts half of it; renewals and standbys' tries come every sixth)",
    )
    parser.add_argument(
        "--log-level",
        type=flags.log_level,
        default="info",
        help=f"uvicorn's and Reef's log level: {', '.join(flags.LOG_LEVELS)}",
    )


def _needs_server_extra(command: str, error: ModuleNotFoundError) -> int:
    """Say which extra installs the module ``reef <command>`` misses; the exit status."""
    if error.name is None or error.name.split(".")[0] == "reef":
        raise error  # a module of Reef itself: a broken installation, not a missing extra
    print(
        f"reef {command}: needs the {error.name} package, which is not installed: install the"
        " service's extra with pip install 'reef-core[server]'",
        file=sys.stderr,
    )
    return 1


def _run_serve(args: argparse.Namespace) -> int:
    import logging

    try:
        from reef.runtime import ServeOptions, serve, serve_workers
        from reef.server import ServiceConfigError, UnauthenticatedServiceError
    except ModuleNotFoundError as exc:
        return _needs_server_extra("serve", exc)
    from reef.server.auth import check_auth_mode
    from reef.train.trainer import TrainerSettings

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    # Whether this service may run at all is decided first, from the auth section alone: no
    # plugin loads and no store is opened or migrated for one that may not.
    try:
        auth = auth_of(args.deployment.read_text(encoding="utf-8"), environ=os.environ)
    except (OSError, UnicodeDecodeError):
        auth = None  # loading the deployment says what is wrong with the file
    if auth is not None:
        try:
            check_auth_mode(
                authenticated=bool(auth.tokens),
                allow_unauthenticated=args.allow_unauthenticated,
                host=args.host,
            )
        except UnauthenticatedServiceError as exc:
            print(f"reef serve: {exc}", file=sys.stderr)
            return 1
    plugins = _loaded_plugins()
    if _blocks_nothing("serve", plugins):
        return 1
    try:
        deployment = load_deployment(args.deployment, plugins=plugins)
    except DeploymentError as exc:
        print(exc, file=sys.stderr)
        return 1
    options = ServeOptions(
        host=args.host,
        port=args.port,
        allow_unauthenticated=args.allow_unauthenticated,
        run_trainers=not args.no_trainers,
        trainer_settings=TrainerSettings(lease_ttl=args.lease_ttl),
        log_level=args.log_level,
    )
    try:
        if args.workers > 1:
            serve_workers(deployment, args.deployment, options=options, workers=args.workers)
        else:
            serve(deployment, plugins=plugins, options=options)
    except (UnauthenticatedServiceError, ServiceConfigError, DeploymentError) as exc:
        print(f"reef serve: {exc}", file=sys.stderr)
        return 1
    return 0


def _configure_status(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url",
        type=flags.http_url,
        default="http://127.0.0.1:8000",
        help="the service's base URL (%(default)s)",
    )
    parser.add_argument(
        "--token",
        type=flags.token,
        default=None,
        help="an admin bearer token (default: $REEF_TOKEN)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _run_status(args: argparse.Namespace) -> int:
    import os

    try:
        import httpx

        from reef.server.status import status_table
    except ModuleNotFoundError as exc:
        return _needs_server_extra("status", exc)

    token = args.token or os.environ.get("REEF_TOKEN")
    headers = {"authorization": f"Bearer {token}"} if token else {}
    try:
        response = httpx.get(f"{args.url.rstrip('/')}/reef/status", headers=headers, timeout=30)
    except httpx.HTTPError as exc:
        print(
            f"reef status: cannot reach {args.url}: {exc}; is reef serve running there? give"
            " its address with --url",
            file=sys.stderr,
        )
        return 1
    if response.status_code in (401, 403):
        print(
            f"reef status: {response.status_code} {response.text}: give a token with the admin"
            " scope with --token or in REEF_TOKEN",
            file=sys.stderr,
        )
        return 1
    if response.status_code != 200:
        print(f"reef status: {response.status_code} {response.text}", file=sys.stderr)
        return 1
    print(json.dumps(response.json(), indent=2) if args.json else status_table(response.json()))
    return 0


def _configure_new(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("what", choices=["recipe"], help="what to write: a recipe package")
    parser.add_argument(
        "name",
        type=flags.recipe_name,
        help="the recipe's name (lower case: what a deployment writes)",
    )
    parser.add_argument(
        "--directory",
        type=flags.folder,
        default=Path(),
        help="where the package's folder goes (%(default)s: the current folder)",
    )


def _run_new(args: argparse.Namespace) -> int:
    from reef.cli.scaffold import ScaffoldError, write_recipe_package

    try:
        root = write_recipe_package(args.name, args.directory)
    except ScaffoldError as exc:
        print(f"reef new: {exc}", file=sys.stderr)
        return 1
    print(
        f"wrote {root}: cd {root} && pip install -e '.[test]' && pytest (in an environment that"
        " has reef-core, or with --find-links naming a folder of its wheels: docs/installing.md)"
    )
    return 0


def _configure_export(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("deployment", type=flags.deployment_file, help="the deployment file (YAML)")
    parser.add_argument("scenario", type=flags.name, help="the scenario whose samples to export")
    parser.add_argument(
        "--evaluations",
        action="store_true",
        help="export the scenario's evaluation results (each artifact's score on each eval set,"
        " every item's outcome, the gate's decision) instead of its samples",
    )
    parser.add_argument(
        "--format",
        choices=["jsonl", "parquet", "hf"],
        default="jsonl",
        help="JSON Lines, a Parquet file, or a Hugging Face datasets folder (load_from_disk)",
    )
    parser.add_argument(
        "--output", type=flags.new_path, required=True, help="the file (folder, for hf) to write"
    )
    parser.add_argument(
        "--since", type=flags.timestamp, help="samples of calls received at or after this time"
    )
    parser.add_argument(
        "--until", type=flags.timestamp, help="samples of calls received before this time"
    )
    parser.add_argument(
        "--tag",
        type=flags.tag,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="samples of calls carrying this tag (repeat for several; all must match)",
    )
    trained = parser.add_mutually_exclusive_group()
    trained.add_argument(
        "--trained", dest="trained", action="store_const", const=True, help="trained samples only"
    )
    trained.add_argument(
        "--untrained", dest="trained", action="store_const", const=False, help="untrained only"
    )
    parser.add_argument(
        "--trainer",
        type=flags.name,
        help="the trainer --trained and --untrained ask about; with --evaluations, that"
        " trainer's results only",
    )
    parser.add_argument("--reward-min", type=flags.finite_number, help="a reward at least this")
    parser.add_argument("--reward-max", type=flags.finite_number, help="a reward at most this")


def _open_scenario(command: str, args: argparse.Namespace) -> tuple[Any, Any] | None:
    """The deployment's database of ``args.scenario``, opened, and the export module; ``None``
    (said why) when it cannot be."""
    try:
        from reef.server import export, open_databases
    except ModuleNotFoundError as exc:
        _needs_server_extra(command, exc)
        return None
    plugins = _loaded_plugins()
    try:
        deployment = load_deployment(args.deployment, plugins=plugins)
    except DeploymentError as exc:
        print(exc, file=sys.stderr)
        return None
    if args.scenario not in deployment.scenarios:
        print(
            f"reef {command}: the deployment has no scenario {args.scenario!r}; its scenarios:"
            f" {', '.join(deployment.scenarios)}",
            file=sys.stderr,
        )
        return None
    url = deployment.storage_of(args.scenario).url
    return open_databases(deployment)[url], export


#: The flags of ``reef export`` that choose samples, which an export of evaluations refuses.
_SAMPLE_FLAGS: Final = ("since", "until", "tag", "trained", "reward_min", "reward_max")


def _run_export(args: argparse.Namespace) -> int:
    if args.evaluations:
        given = [
            f"--{n.replace('_', '-')}" for n in _SAMPLE_FLAGS if getattr(args, n) not in (None, [])
        ]
        if given:
            print(
                f"reef export: {', '.join(given)} choose samples; --evaluations exports every"
                " evaluation result (of --trainer, if given): leave them out",
                file=sys.stderr,
            )
            return 2
    opened = _open_scenario("export", args)
    if opened is None:
        return 1
    database, export = opened
    if args.evaluations:
        rows = export.evaluation_rows(database, args.scenario, args.trainer)
        written = export.write_export(rows, args.format, args.output, export.EVALUATIONS)
        print(f"exported {written} evaluation results of scenario {args.scenario} to {args.output}")
        return 0
    where = export.ExportFilter(
        since=args.since,
        until=args.until,
        tags=dict(args.tag),
        trained=args.trained,
        trainer=args.trainer,
        reward_min=args.reward_min,
        reward_max=args.reward_max,
    )
    written = export.write_export(
        export.export_rows(database, args.scenario, where), args.format, args.output
    )
    print(f"exported {written} samples of scenario {args.scenario} to {args.output}")
    return 0


def _configure_import(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("deployment", type=flags.deployment_file, help="the deployment file (YAML)")
    parser.add_argument(
        "file", type=flags.export_file, help="what reef export wrote: .jsonl, .parquet, a folder"
    )
    parser.add_argument(
        "--scenario", type=flags.name, required=True, help="the scenario that gets the uploads"
    )


def _run_import(args: argparse.Namespace) -> int:
    opened = _open_scenario("import", args)
    if opened is None:
        return 1
    database, export = opened
    try:
        result = export.import_file(database, args.scenario, args.file)
    except export.ImportError_ as exc:
        print(f"reef import: {exc}", file=sys.stderr)
        return 1
    print(
        f"imported {result.stored} trajectories into scenario {args.scenario} as uploads"
        f" ({result.already} were there already)"
    )
    return 0


#: Every subcommand, by name. A layer that adds one (``serve``, ``status``, ``example``) adds
#: its entry here.
SUBCOMMANDS: dict[str, Subcommand] = {
    "plugins": Subcommand(
        "list every registered name with its kind, distribution and version",
        "docs/plugins.md#loading-blocking-listing",
        _configure_plugins,
        _run_plugins,
    ),
    "check": Subcommand(
        "check a deployment file as reef serve would, and print every problem",
        "docs/configuration.md",
        _configure_check,
        _run_check,
    ),
    "serve": Subcommand(
        "serve a deployment: the HTTP service and the scenarios' trainers, until stopped",
        "docs/trainer.md#running-it",
        _configure_serve,
        _run_serve,
        checks=(flags.port_is_free,),
    ),
    "new": Subcommand(
        "write reef-recipe-NAME/, a recipe package that passes its tests as written: its"
        " pyproject.toml, the recipe, its stage (processor.py), a deployment and tests",
        "docs/recipe-authoring.md",
        _configure_new,
        _run_new,
    ),
    "export": Subcommand(
        "write a scenario's trajectory samples (ATIF, rewards, train counts, artifacts, tags) as"
        " JSON Lines, Parquet or a Hugging Face datasets folder, filtered",
        "docs/observe.md#export-and-import",
        _configure_export,
        _run_export,
    ),
    "import": Subcommand(
        "store the trajectories of an export file as uploads of a deployment's scenario",
        "docs/observe.md#export-and-import",
        _configure_import,
        _run_import,
    ),
    "status": Subcommand(
        "print each scenario and trainer of a running service as a table",
        "docs/service.md#routes",
        _configure_status,
        _run_status,
    ),
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``reef`` with ``argv`` (default: the process's arguments); the exit status.

    A bad argument ends the run with argparse's status 2 and a message naming it, before the
    subcommand does anything.
    """
    parser = argparse.ArgumentParser(
        prog="reef",
        description="Reef: train agents on their traffic",
        epilog="Each command's --help names its page of the docs; start at docs/index.md.",
    )
    parser.add_argument("--version", action="version", version=f"reef {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    parsers = {}
    for name, subcommand in SUBCOMMANDS.items():
        parsers[name] = commands.add_parser(
            name,
            help=subcommand.help,
            description=f"{subcommand.help[0].upper()}{subcommand.help[1:]}.",
            epilog=f"Documentation: {subcommand.doc} in Reef's repository.",
            formatter_class=_HelpFormatter,
        )
        subcommand.configure(parsers[name])
    args = parser.parse_args(argv)
    command = SUBCOMMANDS[args.command]
    for check in command.checks:
        problem = check(args)
        if problem is not None:
            parsers[args.command].error(problem)
    try:
        return command.run(args)
    except PluginError as exc:
        print(f"reef {args.command}: {exc}", file=sys.stderr)
        return 2
