"""Training components: what trains a job's data and publishes the weights it makes.

:mod:`reef.components.interface` is the contract every component meets (submit a job's data,
learn how it ended, publish weights as an artifact); it needs nothing beyond reef-core. The
built-in ``local`` component (:mod:`reef.components.local.component`) and its engine
(:mod:`reef.engines.local`) need PyTorch: install ``reef-core[torch]``.
"""
