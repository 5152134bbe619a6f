"""Re-verification: executing checks for real and serving their raw outputs over HTTP.

- :mod:`agent_ecc.recompute.executor`: one check on one patch, in a fresh temporary workspace
  (the repository snapshot from the content store, the patch applied with git, the eval script
  under a timeout, resource limits, a scrubbed environment and no network where possible).
- :mod:`agent_ecc.recompute.container`: one check on one patch in a fresh container of the
  check's image (runtime ``docker``), through the Docker Engine API, with the same limits.
- :mod:`agent_ecc.recompute.wire`: the JSON form of requests and outcomes, and the validation
  that refuses a malformed request before anything runs.
- :mod:`agent_ecc.recompute.service`: the HTTP service (raw outputs, never verdicts) and
  :class:`~agent_ecc.recompute.client.HTTPBackend`, the scorer's backend that calls it.
"""
