"""Errors a newcomer meets first: each names the file or path, what is wrong, and the fix (the
option to set, the extra to install). One test per message; ``reef`` runs in this process
unless a missing package has to be simulated, which takes a process of its own."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from reef.cli import main
from reef.core.deployment import DeploymentError
from reef.plugins import Plugins
from reef.plugins.scenarios import load_deployment
from reef.testing import inline_plugin, write_distribution

#: A scenario of the core's grouped recipe, whose stages' configs are the {config} placeholders.
GROUPED = """\
storage: {{url: "sqlite:///{folder}/reef.db"}}
scenarios:
  words:
    recipe: grouped
    pipeline:
      sample2job: {{config: {sample2job}}}
    training: {{component: {component}, options: {{state_dir: "{folder}/state"}}}}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "deployment.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def grouped(tmp_path: Path, *, sample2job: str, component: str = "local") -> Path:
    return write(
        tmp_path,
        GROUPED.format(folder=tmp_path, sample2job=sample2job, component=component),
    )


def check(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    status = main(["check", str(path)])
    return status, capsys.readouterr().err


def reef(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "reef.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, check=False)


def test_check_builds_every_stage_and_refuses_what_serve_would(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """rule: P-BUF-6 -- a buffer_size below job_samples parses, but the stage refuses it when
    built; ``reef check`` builds it, as ``reef serve`` does before it listens."""
    pytest.importorskip("torch")  # the local component (the torch extra), known to check
    path = grouped(tmp_path, sample2job="{job_samples: 8, buffer_size: 4}")
    status, err = check(path, capsys)
    assert status == 1
    assert f"{path}: 1 problem(s)" in err
    assert (
        "GroupedJobData: 4 is smaller than job_samples (8): set buffer_size to at least 8, or"
        " leave it out (it defaults to job_samples)"
        " @ $.scenarios.words.pipeline.sample2job.config.buffer_size"
    ) in err
    fixed = grouped(tmp_path, sample2job="{job_samples: 8, buffer_size: 16}")
    assert check(fixed, capsys)[0] == 0


def test_a_missing_deployment_file_is_named(tmp_path: Path) -> None:
    """What a program that loads a deployment is told (``reef`` refuses the argument before,
    test_cli_flags.py)."""
    missing = tmp_path / "nowhere.yaml"
    with pytest.raises(DeploymentError) as info:
        load_deployment(missing, plugins=Plugins(), environ={})
    err = str(info.value)
    assert err.startswith(f"{missing}: 1 problem(s)")
    assert "cannot read the deployment file (No such file or directory)" in err
    assert "give the path of a YAML file" in err


def test_yaml_errors_name_the_file_line_and_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "scenarios:\n  words:\n    recipe: [grouped\n")
    status, err = check(path, capsys)
    assert status == 1
    assert f"not valid YAML at {path} line 4, column 1:" in err
    assert "fix the syntax there" in err
    assert "<unicode string>" not in err


def test_a_stage_under_the_wrong_kind_says_which_kind_it_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(
        tmp_path,
        GROUPED.format(folder=tmp_path, sample2job="{job_samples: 4}", component="local").replace(
            "sample2job: {config:", "sample2job: {class: GroupedReportSamples, config:"
        ),
    )
    status, err = check(path, capsys)
    assert status == 1
    assert (
        "'GroupedReportSamples' is a record-to-sample stage, not a sample-to-job stage: name it"
        " under scenarios.<name>.pipeline.record2sample.class"
    ) in err
    assert "@ $.scenarios.words.pipeline.sample2job.class" in err


def test_a_plugin_blocked_by_the_environment_is_named_with_the_variable() -> None:
    plugins = Plugins(blocked={"sft"})
    plugins.load()
    with pytest.raises(DeploymentError) as info:
        load_deployment("scenarios: {notes: {recipe: sft}}", plugins=plugins, environ={})
    (problem,) = info.value.problems
    assert "unknown recipe 'sft'" in problem
    assert "REEF_BLOCK_PLUGINS blocks the plugins sft" in problem
    assert "take the one that provides 'sft' out of REEF_BLOCK_PLUGINS" in problem


@pytest.fixture
def blocked_by_distribution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """REEF_BLOCK_PLUGINS names an installed plugin's distribution, not the plugin: the
    message that says so, as each command ends it."""
    module = f"acme_{tmp_path.name.replace('-', '_')}"
    root = write_distribution(
        tmp_path / "dist",
        name="acme-recipes",
        version="1.0",
        plugins={"acme": module},
        modules={f"{module}.py": ""},
    )
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv("REEF_BLOCK_PLUGINS", "acme-recipes")
    return (
        "REEF_BLOCK_PLUGINS names acme-recipes, which no installed plugin is called, so they block"
        " nothing; acme-recipes is a distribution: block its plugins by their names, acme;"
        " the plugins it can block: "
    )


def test_check_refuses_a_block_that_blocks_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], blocked_by_distribution: str
) -> None:
    status, err = check(write(tmp_path, ""), capsys)
    assert status == 1
    assert err.startswith(f"reef check: {blocked_by_distribution}")
    assert err.rstrip().endswith("; name only those, or unset REEF_BLOCK_PLUGINS")


def test_serve_refuses_to_start_on_a_block_that_blocks_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], blocked_by_distribution: str
) -> None:
    pytest.importorskip("reef.runtime")  # the server extra
    from reef.testing.service import free_port

    status = main(["serve", str(write(tmp_path, "")), "--port", str(free_port())])
    assert status == 1
    assert capsys.readouterr().err.startswith(f"reef serve: {blocked_by_distribution}")


def test_plugins_warns_of_a_block_that_blocks_nothing_and_still_lists(
    capsys: pytest.CaptureFixture[str], blocked_by_distribution: str
) -> None:
    assert main(["plugins"]) == 0
    out, err = capsys.readouterr()
    assert err.startswith(f"warning: {blocked_by_distribution}")
    assert "NoSamples" in out  # the listing that names what can be blocked is still there


class NotARecipe:
    """Registered as a recipe, but not a :class:`reef.Recipe`."""


def test_a_registered_class_that_is_not_a_recipe_is_refused_naming_it() -> None:
    plugins = Plugins(blocked=())
    plugins.register(inline_plugin(recipes={"odd": NotARecipe}), "odd")
    with pytest.raises(DeploymentError) as info:
        load_deployment("scenarios: {s: {recipe: odd}}", plugins=plugins, environ={})
    assert info.value.problems == (
        f"recipe 'odd' ({__name__}:NotARecipe) does not extend reef.Recipe, so it names no"
        " stages: make the class a subclass of reef.Recipe with a pipeline_spec()"
        " @ $.scenarios.s.recipe",
    )


def test_the_missing_auth_setting_names_the_flag() -> None:
    pytest.importorskip("starlette")
    from reef.core.deployment import AuthSection
    from reef.server.auth import Authenticator, UnauthenticatedServiceError

    with pytest.raises(UnauthenticatedServiceError) as info:
        Authenticator(AuthSection())
    assert "add tokens under auth.tokens" in str(info.value)
    assert "reef serve --allow-unauthenticated" in str(info.value)


def test_listening_beyond_loopback_without_tokens_names_the_option() -> None:
    pytest.importorskip("starlette")
    from reef.server.auth import UnauthenticatedServiceError, check_bind_address

    check_bind_address("127.0.0.1", authenticated=False)
    check_bind_address("0.0.0.0", authenticated=True)
    with pytest.raises(UnauthenticatedServiceError) as info:
        check_bind_address("0.0.0.0", authenticated=False)
    assert "listens on loopback only, not on '0.0.0.0'" in str(info.value)
    assert "add tokens under auth.tokens" in str(info.value)
    assert "reef serve --host 127.0.0.1" in str(info.value)


def test_a_built_in_component_without_its_extra_names_the_extra(
    tmp_path: Path, without_modules: Callable[..., dict[str, str]]
) -> None:
    path = grouped(tmp_path, sample2job="{job_samples: 4}", component="local")
    done = reef("check", str(path), env=without_modules("torch"))
    assert done.returncode == 1
    assert (
        "the built-in component 'local' needs the torch package, which is not installed:"
        " pip install 'reef-core[torch]' @ $.scenarios.words.training.component"
    ) in done.stderr


@pytest.mark.parametrize("command", ["serve", "status"])
def test_serve_and_status_without_the_server_extra_name_it(
    tmp_path: Path, command: str, without_modules: Callable[..., dict[str, str]]
) -> None:
    path = grouped(tmp_path, sample2job="{job_samples: 4}")
    args = [command, str(path)] if command == "serve" else [command]
    done = reef(*args, env=without_modules("starlette", "httpx", "uvicorn"))
    assert done.returncode == 1, done.stderr
    assert f"reef {command}: needs the " in done.stderr
    assert "install the service's extra with pip install 'reef-core[server]'" in done.stderr
    assert "Traceback" not in done.stderr


def test_status_help_shows_the_default_url(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["status", "--help"])
    assert done.value.code == 0
    assert "the service's base URL (http://127.0.0.1:8000)" in capsys.readouterr().out


def test_status_of_a_service_it_cannot_reach_says_to_give_its_url(
    capsys: pytest.CaptureFixture[str],
) -> None:
    pytest.importorskip("httpx")
    pytest.importorskip("starlette")  # reef status prints with the server extra's table
    assert main(["status", "--url", "http://127.0.0.1:1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("reef status: cannot reach http://127.0.0.1:1: ")
    assert "is reef serve running there? give its address with --url" in err


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--host", "0.0.0.0", "--allow-unauthenticated"], "listens on loopback only"),
        ([], "the deployment has no auth.tokens"),
    ],
)
def test_serve_refuses_a_service_it_may_not_run_before_any_work(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    words: str,
) -> None:
    """No tokens beyond loopback, or no tokens unasked: refused from the auth section alone,
    before a plugin loads (a block that blocks nothing, which loading would refuse, is never
    reached) and before the store is created or migrated."""
    pytest.importorskip("reef.runtime")  # the server extra
    monkeypatch.setenv("REEF_BLOCK_PLUGINS", "no-such-plugin")
    path = grouped(tmp_path, sample2job="{job_samples: 2}")
    status = main(["serve", str(path), *args])
    assert status == 1
    err = capsys.readouterr().err
    assert err.startswith("reef serve: "), err
    assert words in err
    assert "REEF_BLOCK_PLUGINS" not in err
    assert not (tmp_path / "reef.db").exists()
