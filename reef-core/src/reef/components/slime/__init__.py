"""The ``slime`` training component: Reef's jobs trained by slime, with Reef as slime's data
source.

:mod:`reef.components.slime.component` is Reef's side (a training component);
:mod:`reef.components.slime.data_source` is slime's (``--data-source-path
reef.components.slime.data_source.ReefDataSource``, ``--rollout-function-path
reef.components.slime.data_source.generate_rollout``); :mod:`reef.components.slime.exchange` is
the folder they share. See ``docs/components.md`` for the deployment.
"""

from reef.components.slime.component import SlimeComponent, SlimeComponentSettings

__all__ = ["SlimeComponent", "SlimeComponentSettings"]
