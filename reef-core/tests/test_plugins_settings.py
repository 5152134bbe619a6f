"""Settings parsing: PluginSettings.parse, NoSettings, Record2SampleSettings, PluginConfigError."""

from __future__ import annotations

import attrs
import pytest

from reef.core.config import config_option, option_help
from reef.core.plugins import (
    NoSettings,
    PluginConfigError,
    PluginSettings,
    RecipeConfigError,
    Record2SampleSettings,
)

PATH = "$.pipeline.sample2job.config"


class WeightJobData:
    """Stands for a sample-to-job stage: errors name the plugin class."""


@attrs.frozen
class JobSettings(PluginSettings):
    job_samples: int = config_option(
        help="the fewest samples of one job", validator=attrs.validators.gt(0)
    )
    buffer_size: int | None = config_option(default=None, help="the most samples of one job")
    tags: tuple[str, ...] = config_option(default=(), help="tags to copy")


@attrs.frozen
class GridSettings(Record2SampleSettings):
    steps: int = config_option(help="steps of the grid", validator=attrs.validators.ge(1))


def parse_error(settings: type[PluginSettings], config: object) -> PluginConfigError:
    with pytest.raises(PluginConfigError) as info:
        settings.parse(config, plugin_class=WeightJobData, path=PATH)  # type: ignore[arg-type]
    return info.value


def test_parse_structures_a_frozen_settings_value() -> None:
    """rule: P-STG-10 -- the stage gets a settings object, never the raw mapping."""
    settings = JobSettings.parse({"job_samples": 8, "tags": ["a", "b"]}, plugin_class=WeightJobData)
    assert settings == JobSettings(job_samples=8, buffer_size=None, tags=("a", "b"))
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        settings.job_samples = 2  # type: ignore[misc]


def test_error_names_plugin_key_path_and_reason() -> None:
    """rule: P-STG-10 -- a missing required key names the plugin, the key path and the reason."""
    error = parse_error(JobSettings, {})
    assert error.plugin == "WeightJobData"
    assert error.key == f"{PATH}.job_samples"
    assert error.reason.startswith("required key missing")
    assert "the fewest samples of one job" in error.reason  # the help text of config_option
    assert str(error).startswith("WeightJobData: required key missing")
    assert str(error).endswith(f"@ {PATH}.job_samples")


def test_unknown_key_suggests_the_closest_valid_key() -> None:
    error = parse_error(JobSettings, {"job_samples": 1, "bufer_size": 4})
    assert error.key == f"{PATH}.bufer_size"
    assert "did you mean 'buffer_size'" in error.reason


def test_unknown_key_with_no_close_match_lists_the_valid_keys() -> None:
    error = parse_error(JobSettings, {"job_samples": 1, "zzz": 4})
    assert "valid keys: buffer_size, job_samples, tags" in error.reason


def test_every_problem_of_the_mapping_is_reported() -> None:
    error = parse_error(JobSettings, {"job_samples": 0, "buffer_size": "4", "tags": [1], "x": 1})
    by_key = {e.key: e.reason for e in error.errors}
    assert set(by_key) == {
        f"{PATH}.job_samples",
        f"{PATH}.buffer_size",
        f"{PATH}.tags[0]",
        f"{PATH}.x",
    }
    assert "must be > 0" in by_key[f"{PATH}.job_samples"]
    assert all(e.plugin == "WeightJobData" for e in error.errors)
    assert str(error).count("\n") == 3  # one line per problem


@pytest.mark.parametrize("value", ["3", 3.0, True])
def test_wrong_type_is_refused_not_coerced(value: object) -> None:
    error = parse_error(JobSettings, {"job_samples": value})
    assert error.key == f"{PATH}.job_samples"
    assert error.reason.startswith("expected int")


def test_a_config_that_is_not_a_mapping_is_refused_at_its_own_path() -> None:
    error = parse_error(JobSettings, [1, 2])
    assert error.key == PATH
    assert "expected a mapping" in error.reason


def test_none_config_reads_as_empty() -> None:
    assert NoSettings.parse(None, plugin_class=WeightJobData) == NoSettings()
    assert Record2SampleSettings.parse(None, plugin_class=WeightJobData).max_staleness == 0


def test_no_settings_refuses_any_key() -> None:
    """rule: P-STG-11"""
    error = parse_error(NoSettings, {"max_staleness": 0})
    assert error.key == f"{PATH}.max_staleness"
    assert "takes no keys" in error.reason


def test_max_staleness_defaults_to_zero_and_refuses_negative() -> None:
    """rule: P-STALE-3 -- a non-negative int, default 0; a negative value fails."""
    assert Record2SampleSettings.parse({}, plugin_class=WeightJobData).max_staleness == 0
    assert (
        Record2SampleSettings.parse({"max_staleness": 2}, plugin_class=WeightJobData).max_staleness
        == 2
    )
    error = parse_error(Record2SampleSettings, {"max_staleness": -1})
    assert error.key == f"{PATH}.max_staleness"
    assert "must be >= 0" in error.reason
    assert parse_error(Record2SampleSettings, {"max_staleness": 1.5}).reason.startswith(
        "expected int"
    )


def test_an_extension_of_record2sample_settings_takes_max_staleness_beside_its_keys() -> None:
    """rule: P-STG-12 -- a stage's settings extend Record2SampleSettings."""
    settings = GridSettings.parse({"steps": 3, "max_staleness": 1}, plugin_class=WeightJobData)
    assert (settings.steps, settings.max_staleness) == (3, 1)
    error = parse_error(GridSettings, {"max_staleness": -2})
    assert {e.key for e in error.errors} == {f"{PATH}.steps", f"{PATH}.max_staleness"}


def test_a_stage_can_raise_a_single_problem_error() -> None:
    """rule: P-SIZE-4 -- a stage refuses a job_samples above its max with PluginConfigError."""
    error = PluginConfigError("TTTDJobData", f"{PATH}.job_samples", "at most 4 samples")
    assert error.errors == (error,)
    assert str(error) == f"TTTDJobData: at most 4 samples @ {PATH}.job_samples"


def test_recipe_config_error_is_a_plugin_config_error() -> None:
    error = RecipeConfigError("SFTRecipe", f"{PATH}.job_samples", "a weight recipe needs it")
    assert isinstance(error, PluginConfigError)
    assert error.plugin == "SFTRecipe"


def test_config_option_needs_help_and_records_it() -> None:
    with pytest.raises(ValueError, match="help"):
        config_option(default=1, help=" ")
    field = attrs.fields(JobSettings).job_samples
    assert option_help(field) == "the fewest samples of one job"
