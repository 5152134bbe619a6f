"""Agent ECC: every batch of an RL run trained under one grader epoch, with correct rewards.

The names a trainer needs are exported here; see ``docs/ecc/contract.md`` in the workspace for
the contract, ``docs/ecc/integrating.md`` for where each call goes in a trainer and
``docs/ecc/quickstart.md`` for a walkthrough from SWE-bench's logs. This package never imports
Reef; its Reef plugin is the separate module ``agent_ecc.reef_plugin`` (and the seal its hooks
call, ``agent_ecc.reef_seal``).

The names are listed once, in ``__init__.pyi``: type checkers read them there, and
:func:`lazy_loader.attach_stub` loads each one's module when the name is first used, so
importing one module of the package (the Reef plugin, loaded by ``reef check``) imports none of
the others.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
