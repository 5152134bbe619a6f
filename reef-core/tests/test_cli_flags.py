"""Every argument of every ``reef`` subcommand is checked before the subcommand does any work:
a bad value ends the run with status 2 and a message naming the argument and what it may be,
and nothing is loaded, created or migrated; each subcommand's help has a description, shows
its defaults and names its page of the docs."""

from __future__ import annotations

import argparse
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from reef.cli import SUBCOMMANDS, flags, main

ROOT = Path(__file__).resolve().parents[2]

#: The checks an argument's value may be read through.
CHECKS = {
    getattr(flags, name)
    for name in flags.__all__
    if callable(getattr(flags, name)) and name != "port_is_free"
}


def arguments(name: str) -> list[argparse.Action]:
    """The arguments of subcommand ``name`` (``--help`` left out)."""
    parser = argparse.ArgumentParser()
    SUBCOMMANDS[name].configure(parser)
    return [a for a in parser._actions if not isinstance(a, argparse._HelpAction)]


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_every_value_an_argument_takes_is_read_through_a_check(name: str) -> None:
    """An argument added without a check would take any text until the subcommand trips on
    it: each one that takes a value has a check of reef.cli.flags or a list of choices."""
    unchecked = [
        action.dest
        for action in arguments(name)
        if action.nargs != 0 and action.choices is None and action.type not in CHECKS
    ]
    assert unchecked == []


@pytest.fixture
def deployment(tmp_path: Path) -> Path:
    """A deployment whose store is a file in ``tmp_path`` (which a refused run never makes)."""
    path = tmp_path / "deployment.yaml"
    path.write_text(
        f'storage: {{url: "sqlite:///{tmp_path}/reef.db"}}\n'
        "scenarios:\n  s: {recipe: grouped, pipeline: {sample2job: {config: {job_samples: 2}}}}\n",
        encoding="utf-8",
    )
    return path


def refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """What ``reef`` says when it refuses ``argv`` (it must refuse with status 2)."""
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 2
    return capsys.readouterr().err.splitlines()[-1]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--log-level", "verbose"],
            "argument --log-level: 'verbose' is not a log level: use one of critical, error,"
            " warning, info, debug",
        ),
        (
            ["--lease-ttl", "0"],
            "argument --lease-ttl: '0' is not a duration: use a number of seconds above 0",
        ),
        (["--lease-ttl", "nan"], "argument --lease-ttl: 'nan' is not a duration"),
        (
            ["--workers", "0"],
            "argument --workers: '0' is not a number of processes: use a whole number from 1",
        ),
        (["--workers", "two"], "argument --workers: 'two' is not a number of processes"),
        (
            ["--port", "99999"],
            "argument --port: '99999' is not a port: use a whole number from 1 to 65535",
        ),
        (["--port", "0"], "argument --port: '0' is not a port"),
        (["--port", "http"], "argument --port: 'http' is not a port"),
        (["--host", "my host"], "argument --host: 'my host' is not an address: use an IP"),
        (["--host", "10.255.255.254"], "argument --host: cannot listen on 10.255.255.254: "),
    ],
)
def test_serve_refuses_a_bad_flag_naming_it_before_any_work(
    argv: list[str],
    message: str,
    deployment: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    said = refused(["serve", str(deployment), *argv], capsys)
    assert said.startswith("reef serve: error: ")
    assert message in said
    assert not (deployment.parent / "reef.db").exists()  # no store was created or migrated


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port that a socket of this test listens on."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


def test_serve_on_a_taken_port_says_so_and_how_to_choose_another(
    deployment: Path, taken_port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    said = refused(["serve", str(deployment), "--port", str(taken_port)], capsys)
    assert said == (
        f"reef serve: error: argument --port: port {taken_port} is taken on 127.0.0.1 (another"
        " process listens there): stop it, or choose another port with --port"
    )
    assert not (deployment.parent / "reef.db").exists()


def test_a_missing_or_folder_deployment_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for command in ("check", "serve"):
        said = refused([command, str(tmp_path / "nowhere.yaml")], capsys)
        assert said == (
            f"reef {command}: error: argument deployment: {tmp_path / 'nowhere.yaml'}: no such"
            " file: name a deployment's YAML file (docs/configuration.md)"
        )
        said = refused([command, str(tmp_path)], capsys)
        assert said.endswith(f"{tmp_path} is a folder: name the deployment's YAML file")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["status", "--url", "127.0.0.1:8000"],
            "argument --url: '127.0.0.1:8000' is not a service's URL: use http://HOST:PORT or"
            " https://HOST:PORT",
        ),
        (["status", "--url", "http://127.0.0.1:99999"], "argument --url: "),
        (["status", "--token", ""], "argument --token: a token is one word with no spaces"),
        (["new", "recipe", "My-Recipe"], "argument name: recipe name 'My-Recipe': use lower-case"),
        (["new", "plugin", "x"], "argument what: invalid choice: 'plugin' (choose from 'recipe')"),
    ],
)
def test_status_and_new_refuse_a_bad_value_naming_it(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert message in refused(argv, capsys)


def test_new_refuses_a_directory_that_is_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "file"
    file.touch()
    said = refused(["new", "recipe", "votes", "--directory", str(file)], capsys)
    assert said.endswith(f"argument --directory: {file} is a file: name a folder")
    assert sorted(tmp_path.iterdir()) == [file]


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_each_subcommand_describes_itself_shows_defaults_and_names_its_doc_page(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        main([name, "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    flat = " ".join(text.split())
    description = SUBCOMMANDS[name].help
    assert f"{description[0].upper()}{description[1:]}." in flat
    page = re.search(r"Documentation: (docs/[\w./-]+\.md)(#[\w-]+)? in Reef's repository\.", flat)
    assert page is not None, text
    assert (ROOT / page[1]).is_file()
    for action in arguments(name):
        if action.option_strings and action.default not in (None, False):
            shown = (f"(default: {action.default})", f"({action.default}")
            assert any(text in flat for text in shown), action.dest


def test_serve_help_lists_the_log_levels_and_its_defaults(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    flat = " ".join(capsys.readouterr().out.split())
    assert "log level: critical, error, warning, info, debug (default: info)" in flat
    assert "port to listen on (default: 8000)" in flat
    assert "address to listen on (default: 127.0.0.1)" in flat
    assert "(default: 10.0)" in flat


def test_good_values_pass_through_as_their_type() -> None:
    assert flags.port("8000") == 8000
    assert flags.positive_seconds("2.5") == 2.5
    assert flags.log_level("WARNING") == "warning"
    assert flags.host("::1") == "::1"
    assert flags.host("reef-1.internal") == "reef-1.internal"
    assert flags.http_url("https://reef.internal:8443") == "https://reef.internal:8443"
    ns = argparse.Namespace(host="127.0.0.1", port=0)
    assert flags.port_is_free(ns) is None  # port 0 binds anywhere: the probe itself
