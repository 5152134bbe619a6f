"""The ``ecc`` Reef plugin: each job's data sealed under one grader epoch before it trains.

Loaded through the entry point ``ecc`` of the group ``reef.plugins``, which names the class
:class:`EccPlugin`: Reef makes one instance per ``Plugins``, which keeps the seals of its
scenarios (no state is shared through this module). This is the only module of agent_ecc that
imports Reef. For a scenario it is configured for (:meth:`EccPlugin.configure`), the
``reef_before_submit`` hook:

1. groups the job's trajectory samples by ``group_id`` (a sample without one is a group of its
   own); each sample names its member (the attempt id) in ``metadata["agent_ecc"]["member_id"]``
   (else its ``sample_id``), whose record and recorded score are read from the producer's
   JSON-lines files;
2. seals them with a :class:`~agent_ecc.seal.SealSession` under the scenario's journal
   (``<journal_dir>/<scenario>.jsonl``), the job data's id as the batch id; a batch that already
   has a committed decision (a submission refused or crashed after its seal) is given that
   decision again, never a second one (I5);
3. returns the job data with only the groups handed over, every reward rewritten by
   :func:`~agent_ecc.seal.apply_rewards` (all or nothing), and the samples of the unused groups
   (offered, never decided) in ``given_back``: Reef returns them to the buffer for a later job.
   Excluded groups are neither submitted nor given back: the commit consumes them (retired, no
   gradient under this epoch). A seal that raises is failed strictly (every reward 0.0,
   recorded in the journal); a journal that refuses the decision (I3) raises, which refuses
   the submission and releases the data to the buffer.

``reef_job_ended`` writes the consumption lines of a finished or failed job
(``<journal_dir>/<scenario>.learner.jsonl`` and ``.completions.jsonl``), for
:func:`~agent_ecc.consumption.consumption_records`. When the training component reports what
its loss consumed (the outcome's ``consumed`` metric, as the ``local`` component does: per
sample and step, the loss tokens and the reward it trained with), there is one line per
sample and step, from that report: the member is found through the hand-off the seal wrote
(``<scenario>.handoff.jsonl``: each batch's sample ids and members), the reward is the one the
loss used, so a reward changed between the seal and the loss shows as a mismatch, and a sample
the component left out (unrenderable, say) has no line. Otherwise the lines come from the
decision: one per member handed over. ``reef_scenario_status`` shows
the epoch in force, the last seal (its batch, epoch, stats and shortfall) and ``infra_fails``
(members labelled fail only because their execution failed for infrastructure reasons, over all
committed seals) under ``ecc`` in ``GET /reef/status``. ``reef_job_provenance`` tells Reef's
job history, for the job just sealed, the epoch and each offered sample's fate: its group's
outcome and reason, its member's decision and verdict, and the reward it recorded and the one
it trains with (the console shows them on the sample).

Configuration: :class:`EccSettings`, registered as the extension ``ecc``: a deployment turns
the seal on for a scenario with ``scenarios.<name>.extensions.ecc: {...}``, checked when the
deployment is read, and ``reef_scenario_started`` opens the scenario's seal with it. An embedding
without a deployment calls :meth:`EccPlugin.configure` on its plugin itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

import attrs

from agent_ecc.adapters.rules import DEFAULT_RULE, RULES
from reef import (
    JobData,
    JobOutcome,
    PluginRegistrar,
    PluginSettings,
    config_option,
    hookimpl,
)

if TYPE_CHECKING:
    from agent_ecc.reef_seal import ScenarioSeal


def _one_of(values: tuple[str, ...]) -> Any:
    def check(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if value not in values:
            raise ValueError(f"{attribute.name} must be one of {', '.join(values)}: {value!r}")

    return check


@attrs.frozen
class EccSettings(PluginSettings):
    """The ``ecc`` plugin's settings for one scenario."""

    registry: str = config_option(help="the run's registry folder (DirectoryRegistry)")
    store: str = config_option(help="the content store folder (logs, patches, scripts)")
    journal_dir: str = config_option(help="folder of the journal <scenario>.jsonl")
    records: str = config_option(help="JSON-lines file of the producers' execution records")
    scores: str = config_option(help="JSON-lines file of the producers' recorded scores")
    service: str | None = config_option(
        default=None,
        help="URL of the re-verification service; without it a re-execution is undeterminable",
    )
    mode: Literal["repair", "discard", "audit"] = config_option(
        default="repair", help="repair, discard or audit"
    )
    verdict: str = config_option(
        default=DEFAULT_RULE,
        help="the SWE-bench rule of a check that names none (logical: infrastructure failures "
        "neutralize their group instead of training as fails)",
        validator=_one_of(RULES),
    )
    deadline_s: float = config_option(default=60.0, help="the seal's deadline in seconds")
    fillers: bool = config_option(default=False, help="keep the batch size with neutral groups")
    strict: bool = config_option(default=True, help="a failed seal trains nothing")


class EccPlugin:
    """The ``ecc`` plugin: its entry point names this class, so Reef makes one per
    :class:`reef.embed.Plugins` and each holds the seals of its own scenarios (two ``Plugins``
    of one process, a test's and a service's, never share one).

    An embedding without a deployment registers one itself and calls :meth:`configure`.
    """

    def __init__(self) -> None:
        self._seals: dict[str, ScenarioSeal] = {}

    def configure(self, scenario: str, settings: EccSettings | Mapping[str, Any] | None) -> None:
        """Turn the seal on for ``scenario`` with ``settings`` (a mapping is parsed; None: off).

        :raises reef.PluginConfigError: naming the key (``$.ecc.<scenario>.<key>``) of a bad
            setting.
        """
        if settings is None:
            self._seals.pop(scenario, None)
            return
        # Imported when a scenario is sealed: loading the plugin imports its settings alone.
        from agent_ecc.reef_seal import ScenarioSeal

        if not isinstance(settings, EccSettings):
            settings = EccSettings.parse(
                settings, plugin_class=ScenarioSeal, path=f"$.ecc.{scenario}"
            )
        self._seals[scenario] = ScenarioSeal(scenario, settings)

    def configured(self, scenario: str) -> ScenarioSeal | None:
        """The seal of ``scenario``, if configured."""
        return self._seals.get(scenario)

    @hookimpl
    def reef_register_extensions(self, registry: PluginRegistrar) -> None:
        """The seal is configured per scenario: ``scenarios.<name>.extensions.ecc``."""
        registry.register("ecc", EccSettings)

    @hookimpl
    def reef_scenario_started(
        self, scenario: str, extensions: Mapping[str, PluginSettings]
    ) -> None:
        """Open the scenario's seal when its deployment configures ``ecc``; otherwise none."""
        settings = extensions.get("ecc")
        self.configure(scenario, settings if isinstance(settings, EccSettings) else None)

    @hookimpl
    def reef_before_submit(self, scenario: str, job_data: JobData) -> JobData | None:
        """Seal the job's data under the epoch in force and rewrite its rewards."""
        seal = self._seals.get(scenario)
        if seal is None or job_data.kind != "trajectory":
            return None
        return seal.seal(job_data)

    @hookimpl
    def reef_scenario_status(self, scenario: str) -> dict[str, Any] | None:
        """``{"ecc": ...}``: the epoch in force and the last seal, for a sealed scenario."""
        seal = self._seals.get(scenario)
        return None if seal is None else {"ecc": seal.status()}

    @hookimpl
    def reef_job_provenance(self, scenario: str, job_data: JobData) -> dict[str, Any] | None:
        """``{"ecc": ...}``: the seal of the job's data, for the job history (the console)."""
        seal = self._seals.get(scenario)
        found = None if seal is None else seal.provenance(job_data.id)
        return None if found is None else {"ecc": found}

    @hookimpl
    def reef_job_ended(self, scenario: str, outcome: JobOutcome) -> None:
        """Record the job's consumption against its seal decision."""
        seal = self._seals.get(scenario)
        if seal is not None:
            seal.ended(outcome)


__all__ = ["EccPlugin", "EccSettings"]
