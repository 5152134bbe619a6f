"""``reef check`` and ``reef plugins`` import only what reading and checking a deployment needs:
no storage, no HTTP client, no training library, no stage or component the deployment does not
use. Each is run in a fresh interpreter, with every distribution of the workspace installed (so
every plugin is loaded), and the modules it ended with are read back.

How long they take is ``benchmarks/bench_cli_startup.py``'s business, never a test's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "examples" / "quickstart" / "serve" / "deployment.yaml"

#: Libraries that neither command needs: the stores, the HTTP client and service, training.
HEAVY = (
    "sqlalchemy",
    "alembic",
    "httpx",
    "torch",
    "tinker",
    "transformers",
    "jsonschema",
    "starlette",
    "uvicorn",
)
#: Modules of Reef and its distributions that only serving or training needs: the storage, the
#: pipeline and trainer, the service, the components themselves, and every stage, generator and
#: seal that the quickstart's deployment does not use.
NOT_CHECKED = (
    "reef.storage",
    "reef.server",
    "reef.engines",
    "reef.runtime",
    "reef.train.pipeline",
    "reef.train.trainer",
    "reef.components.local.component",
    "reef.components.tinker.component",
    "reef.record2sample.distill",
    "reef.record2sample.traces",
    "reef.record2sample.judged",
    "reef.recipe.generated_tasks.processor",
    "reef.sample2job.validation",
    "reef_spade.generator",
    "reef_sft.processor",
    "reef_tttd.processor",
    "reef_distill.openclaw.processor",
    "agent_ecc.reef_seal",
    "agent_ecc.adapters.swebench",
    "agent_ecc.seal",
    "agent_ecc.scorer",
)


def _modules_after(*args: str) -> set[str]:
    """The modules of a fresh interpreter that ran ``reef *args`` (which must succeed)."""
    code = (
        "import json, sys\n"
        "from reef.cli import main\n"
        f"status = main({list(args)!r})\n"
        "print(json.dumps([status, sorted(sys.modules)]))\n"
    )
    env = {**os.environ, "REEF_QUICKSTART_DIR": str(ROOT / "examples" / "quickstart")}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False
    )
    assert done.returncode == 0, done.stderr
    status, modules = json.loads(done.stdout.splitlines()[-1])
    assert status == 0, done.stdout + done.stderr
    return set(modules)


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in HEAVY)


def _unchecked(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(f"{n}.") for n in NOT_CHECKED))


def test_check_of_the_quickstart_imports_no_storage_http_or_training_library() -> None:
    loaded = _modules_after("check", str(QUICKSTART))
    assert _heavy(loaded) == []
    assert _unchecked(loaded) == []
    # What it checks it imports: the recipe, its stages and the component's settings.
    for module in (
        "reef.recipe.grouped.processor",
        "reef.components.local.settings",
        "agent_ecc.reef_plugin",
        "reef_spade.plugin",
    ):
        assert module in loaded, module


def test_plugins_imports_no_stage_and_no_component() -> None:
    loaded = _modules_after("plugins", "--json")
    assert _heavy(loaded) == []
    assert _unchecked(loaded) == []
    assert not any(m.startswith("reef.components.local") for m in loaded)
