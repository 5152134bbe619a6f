"""Every error reef-core defines derives from ``reef.errors.ReefError`` and keeps its
built-in base, so ``except ReefError`` catches Reef's own errors and old handlers still work."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import reef
from reef.errors import ReefError

# The built-in bases (beside ReefError) that callers already catch: these stay.
BUILTIN_BASES = {
    "reef.components.local.causal_lm.ModelFolderError": ValueError,
    "reef.engines.local.EngineRequestError": ValueError,
    "reef.core.atif.AtifFormatError": ValueError,
    "reef.core.atif_build.AtifBuildError": ValueError,
    "reef.core.chat_rendering.RenderError": ValueError,
    "reef.core.deployment.DeploymentError": ValueError,
    "reef.core.job_data.SampleFormatError": ValueError,
    "reef.core.plugins.PluginConfigError": ValueError,
    "reef.core.records.RecordFormatError": ValueError,
    "reef.plugins.registrar.UnknownPluginError": LookupError,
    "reef.record2sample.record_sets.RecordSetError": ValueError,
    "reef.record2sample.record_sets.ReportError": ValueError,
    "reef.sample2job.validation.JobDataError": ValueError,
    "reef.server.auth.UnauthenticatedServiceError": ValueError,
    "reef.server.errors.ServiceConfigError": ValueError,
    "reef.storage.errors.MissingLinkError": ValueError,
    "reef.storage.errors.UnknownSampleError": LookupError,
    "reef.storage.errors.UnknownTrainerError": LookupError,
    "reef.train.pipeline.GivenBackError": ValueError,
    "reef.components.tinker.sampler.NothingPublished": LookupError,
    "reef.components.slime.data_source.ReefDataSourceError": RuntimeError,
}
#: Failures that test stand-ins raise to play an outside system dying (a killed process, a
#: crashed slime job): not Reef's errors, and a killed process must pass `except Exception`.
STAND_IN_FAILURES = frozenset({"doubles.tinker_service.ProcessKilled", "doubles.slime_run.Crash"})


def _reef_exceptions() -> tuple[dict[str, type[BaseException]], set[str]]:
    """Every exception class defined in reef's modules, by qualified name; and the modules
    left out because an optional extra they need (torch, the server's) is not installed."""
    found: dict[str, type[BaseException]] = {}
    without_extra: set[str] = set()
    for module_info in pkgutil.walk_packages(reef.__path__, "reef."):
        if ".migrations" in module_info.name:
            continue  # alembic's scripts run a migration when imported
        try:
            module = importlib.import_module(module_info.name)
        except ModuleNotFoundError as exc:
            if (exc.name or "").split(".")[0] == "reef":
                raise
            without_extra.add(module_info.name)
            continue
        for _, value in inspect.getmembers(module, inspect.isclass):
            if issubclass(value, BaseException) and value.__module__ == module.__name__:
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return found, without_extra


def test_every_reef_error_derives_from_reef_error() -> None:
    errors, _ = _reef_exceptions()
    assert len(errors) >= 20  # the walk found the modules
    outside = sorted(
        name
        for name, cls in errors.items()
        if not issubclass(cls, ReefError) and name not in STAND_IN_FAILURES
    )
    assert outside == [], f"errors not derived from reef.errors.ReefError: {outside}"


def test_each_error_keeps_the_builtin_base_callers_catch() -> None:
    errors, without_extra = _reef_exceptions()
    for name, base in BUILTIN_BASES.items():
        if name not in errors:  # only where its module (or package) needs a missing extra
            module = name.rpartition(".")[0]
            missing = any(module == m or module.startswith(f"{m}.") for m in without_extra)
            assert missing, f"{name} is gone"
            continue
        assert issubclass(errors[name], base), f"{name} lost its base {base.__name__}"
