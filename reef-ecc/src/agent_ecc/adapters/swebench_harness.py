"""What SWE-bench's evaluation harness leaves behind, read into rows and runs.

The harness (``python -m swebench.harness.run_evaluation``) writes, per run id, model and
instance, a folder ``logs/run_evaluation/<run_id>/<model>/<instance_id>/`` holding
``test_output.txt`` (the eval script's output), ``run_instance.log`` (what the harness did) and
``report.json`` (its verdict). This module turns those folders, the instances' rows and the
predictions into what agent_ecc grades: rows for :func:`~agent_ecc.adapters.swebench.
conjunction_version` and one :class:`~agent_ecc.records.Run` per evaluated prediction:

- ``test_output.txt`` present: the eval script ran; its output is the log (timed out when the
  harness appended its timeout line);
- no test output and ``run_instance.log`` says the patch failed to apply: the patch does not
  apply (a fail of the patch's own);
- anything else (the container could not be created, the image is missing, the harness crashed,
  the prediction was never evaluated): an infrastructure failure, with the harness's last error
  as the run's ``error``. SWE-bench reports such an instance unresolved; the ``official`` rule
  grades it a fail too (counted in a seal's ``stats["infra_fails"]``), ``logical`` leaves it
  undeterminable.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final

from agent_ecc.adapters.swebench import APPLY_PATCH_FAIL, SWEBenchAdapter
from agent_ecc.execution import HARNESS_ATTEMPT
from agent_ecc.records import Application, Run
from agent_ecc.store import ContentStore, put_text
from agent_ecc.versions import Check

TEST_OUTPUT: Final = "test_output.txt"
INSTANCE_LOG: Final = "run_instance.log"
REPORT: Final = "report.json"
_TIMEOUT_LINE: Final = "Timeout error:"


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The objects of a JSON-lines file, or of a JSON file holding a list (SWE-bench ships both
    forms of rows and predictions)."""
    text = Path(path).read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        return list(json.loads(text))
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def version_rows(
    instances: Iterable[Mapping[str, Any]], store: ContentStore
) -> list[dict[str, Any]]:
    """Rows for :func:`~agent_ecc.adapters.swebench.conjunction_version` from SWE-bench instance
    rows: each eval script (its text in the row) put in ``store``, its key in its place."""
    rows = []
    for instance in instances:
        if "eval_script" not in instance:
            raise ValueError(
                f"instance {instance.get('instance_id')!r} has no eval_script: SWE-bench 5 rows "
                "carry theirs (the harness's make_test_spec needs it too)"
            )
        rows.append({**instance, "eval_script": put_text(store, str(instance["eval_script"]))})
    return rows


def instance_dir(run_dir: str | Path, model: str, instance_id: str) -> Path:
    """Where the harness keeps an instance's logs: ``run_dir`` is
    ``logs/run_evaluation/<run_id>``; a ``/`` in the model's name is written ``__``."""
    return Path(run_dir) / model.replace("/", "__") / instance_id


def harness_run(
    adapter: SWEBenchAdapter, check: Check, store: ContentStore, folder: str | Path
) -> Run:
    """The run of ``check`` that the harness's instance ``folder`` records (see the module
    docstring for how each outcome reads)."""
    folder = Path(folder)
    output = folder / TEST_OUTPUT
    if output.is_file():
        log = output.read_text(encoding="utf-8", errors="replace")
        timed_out = _TIMEOUT_LINE in log[-200:]
        return adapter.run(check, store=store, log=log, applied=True, timed_out=timed_out)
    instance_log = folder / INSTANCE_LOG
    text = (
        instance_log.read_text(encoding="utf-8", errors="replace") if instance_log.is_file() else ""
    )
    if APPLY_PATCH_FAIL in text:
        steps = tuple(line for line in text.splitlines() if APPLY_PATCH_FAIL in line)
        application = Application(applied=False, attempts=(HARNESS_ATTEMPT,), steps=steps)
        return adapter.run(check, store=store, log=None, applied=False, application=application)
    if text:
        errors = [line for line in text.splitlines() if "Error" in line or "error" in line]
        detail = (errors[-1] if errors else text.strip().splitlines()[-1]).strip()
    else:
        detail = f"no evaluation of this prediction in {folder}"
    return adapter.run(
        check,
        store=store,
        log=None,
        applied=False,
        error=f"swebench harness: {detail}",
        application=Application(applied=False, infra_error=detail),
    )


def harness_resolved(folder: str | Path, instance_id: str) -> bool | None:
    """What the harness's ``report.json`` says (resolved or not), or None without a report."""
    report = Path(folder) / REPORT
    if not report.is_file():
        return None
    return bool(json.loads(report.read_text(encoding="utf-8"))[instance_id]["resolved"])
