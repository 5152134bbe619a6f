"""The docs stand on their own, and their examples work (docs/contributing.md says how).

- Every fenced block in ``docs/`` and the README files names its language. YAML blocks are
  deployments that ``reef check`` accepts; shell blocks run and exit 0; a block that cannot run
  here says why with ``<!-- not-run: reason -->`` on the line before its fence.
- Relative Markdown links, and ``docs/<page>.md#anchor`` pointers in code, reach a file that
  exists and a heading it has; ``docs/index.md`` links every page of ``docs/``.
- Every rule id a test cites has its one line in ``docs/rules.md``; ids there are well formed
  and listed once.
- A path of the repository named in a page (``benchmarks/bench_distill.py`` in code, in a
  block that does not run, or in its not-run reason) names a file or folder that exists.
- Nothing points at documents kept outside the repository; a link to another site credits
  upstream work, over https, on a listed site, and says what it points at.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from reef.cli import main as reef_main

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
RULES = DOCS / "rules.md"

#: Folders no search of the repository enters: environments, caches, build output, VCS data.
_SKIPPED_DIRS = frozenset(
    {".git", ".venv", ".ruff_cache", ".mypy_cache", "__pycache__", "build", "dist", "node_modules"}
)
#: Files whose text is searched for pointers: sources, docs, configs and scripts.
_TEXT_SUFFIXES = frozenset({".md", ".py", ".toml", ".yaml", ".yml", ".txt", ".cfg", ".ini", ".sh"})

SHELL = frozenset({"bash", "sh", "shell", "console"})
YAML = frozenset({"yaml", "yml"})
#: How long one shell block may take before it counts as failed.
SHELL_TIMEOUT_S = 60

_FENCE_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<lang>[^\s`]*)")
_MARKER = re.compile(r"^\s*<!--\s*not-run\s*:(?P<reason>.*?)-->\s*$")
_MARKER_START = re.compile(r"<!--\s*not-run")
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")
_INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
_HEADING = re.compile(r"^(#{1,6})\s+(?P<text>.+?)\s*#*\s*$")
_DOC_POINTER = re.compile(r"(?<![\w./-])docs/(?P<path>[\w./-]+?\.md)(?:#(?P<anchor>[\w-]+))?")
_RULE_ID = re.compile(r"\b[PE]-[A-Z]+-[0-9]+\b")
_RULE_LINE = re.compile(r"^- \*\*(?P<id>[^*]+)\*\* (?P<text>.+)$")
_WELL_FORMED_ID = re.compile(r"[PE]-[A-Z]+-[1-9][0-9]*")
_ENV_REFERENCE = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)\}")
#: Documents kept outside the repository, which nothing in it may point at.
_OUTSIDE_POINTERS = re.compile(
    r"RULES\.md|DECISIONS\.md|DECISIONS \d|shared/(?:spec|DECISIONS|DESIGN|STYLE)"
    r"|reef-training-pipeline\.md|agent-ecc-trainer-integration\.md"
)


@attrs.frozen
class Block:
    """One fenced code block of a Markdown file."""

    path: Path
    line: int
    lang: str
    body: str
    not_run: str | None

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def _walk(top: Path) -> Iterator[Path]:
    for entry in sorted(top.iterdir()):
        if entry.is_dir():
            if entry.name not in _SKIPPED_DIRS and not entry.name.endswith(".egg-info"):
                yield from _walk(entry)
        elif entry.is_file():
            yield entry


def repository_files() -> list[Path]:
    """Every file of the working tree, without environments, caches and build output."""
    return list(_walk(ROOT))


def markdown_files() -> list[Path]:
    return [p for p in repository_files() if p.suffix == ".md"]


def documentation_files() -> list[Path]:
    """The pages whose examples must run: ``docs/`` and every README."""
    return [p for p in markdown_files() if p.is_relative_to(DOCS) or p.name == "README.md"]


def text_files() -> list[Path]:
    """Sources, docs, configs and scripts (files of ``scripts/`` and ``.ci/`` have no suffix)."""
    scripted = {ROOT / "scripts", ROOT / ".ci"}
    return [p for p in repository_files() if p.suffix in _TEXT_SUFFIXES or p.parent in scripted]


def prose_lines(path: Path) -> Iterator[tuple[int, str]]:
    """The lines of a Markdown file outside fenced blocks, numbered from 1."""
    fence: str | None = None
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if fence is None:
            opened = _FENCE_OPEN.match(line)
            if opened:
                fence = opened["fence"]
                continue
            yield number, line
        elif line.strip().startswith(fence) and not line.strip().strip(fence[0]):
            fence = None


def fenced_blocks(path: Path) -> list[Block]:
    """The fenced blocks of ``path``, each with the reason of its not-run marker, if any."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    index = 0
    while index < len(lines):
        opened = _FENCE_OPEN.match(lines[index])
        if not opened:
            index += 1
            continue
        fence, indent = opened["fence"], len(opened["indent"])
        start, body = index, []
        index += 1
        while index < len(lines):
            stripped = lines[index].strip()
            if stripped.startswith(fence) and not stripped.strip(fence[0]):
                break
            body.append(lines[index][indent:] if lines[index][:indent].isspace() else lines[index])
            index += 1
        marker = _MARKER.match(lines[start - 1]) if start > 0 else None
        blocks.append(
            Block(
                path,
                start + 1,
                opened["lang"].lower(),
                "\n".join(body) + "\n",
                marker["reason"].strip() if marker else None,
            )
        )
        index += 1
    return blocks


def all_blocks() -> list[Block]:
    return [block for path in documentation_files() for block in fenced_blocks(path)]


def runnable(langs: frozenset[str]) -> list[Block]:
    return [b for b in all_blocks() if b.lang in langs and b.not_run is None]


def github_anchor(heading: str) -> str:
    """The fragment GitHub gives a heading: lower case, links and code marks reduced to their
    text, punctuation other than ``-`` and ``_`` removed, spaces made ``-``."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading fragment of a Markdown file, numbered as GitHub numbers repeats."""
    seen: Counter[str] = Counter()
    found: set[str] = set()
    for _, line in prose_lines(path):
        heading = _HEADING.match(line)
        if not heading:
            continue
        anchor = github_anchor(heading["text"])
        found.add(anchor if not seen[anchor] else f"{anchor}-{seen[anchor]}")
        seen[anchor] += 1
    return found


def test_every_fence_names_its_language_and_every_marker_a_reason() -> None:
    problems = [
        f"{b.where}: a fenced block without a language (use `text` for output)"
        for b in all_blocks()
        if not b.lang
    ]
    for path in documentation_files():
        blocks_at = {b.line for b in fenced_blocks(path)}
        for number, line in prose_lines(path):
            if not _MARKER_START.search(line):
                continue
            where = f"{path.relative_to(ROOT)}:{number}"
            marker = _MARKER.match(line)
            if marker is None or not marker["reason"].strip():
                problems.append(f"{where}: write the marker as <!-- not-run: <reason> -->")
            elif number + 1 not in blocks_at:
                problems.append(f"{where}: a not-run marker must be right before a fence")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("block", runnable(YAML), ids=lambda b: b.where)
def test_yaml_example_is_a_deployment_reef_check_accepts(
    block: Block,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Each YAML example is checked as ``reef check`` checks a file; every environment
    reference it makes is set to a fresh folder, so paths and secrets read alike."""
    for name in {m["name"] for m in _ENV_REFERENCE.finditer(block.body)}:
        folder = tmp_path / "env" / name
        folder.mkdir(parents=True)
        monkeypatch.setenv(name, str(folder))
    deployment = tmp_path / "deployment.yaml"
    deployment.write_text(block.body, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    status = reef_main(["check", str(deployment)])
    out = capsys.readouterr()
    assert status == 0, (
        f"{block.where}: reef check refused the example (fix it, or mark it with "
        f"<!-- not-run: reason -->):\n{out.err}{out.out}"
    )


@pytest.mark.parametrize("block", runnable(SHELL), ids=lambda b: b.where)
def test_shell_example_runs(block: Block) -> None:
    """Each shell example runs from the repository root with the environment's ``bin`` first
    on ``PATH``, as a reader who set up the workspace would run it."""
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": os.pathsep.join([str(bin_dir), os.environ.get("PATH", "")])}
    try:
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block.body],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=SHELL_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{block.where}: still running after {SHELL_TIMEOUT_S} s; mark it not-run")
    assert done.returncode == 0, (
        f"{block.where}: exit {done.returncode}\n{block.body}\n"
        f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )


def test_relative_links_reach_a_file_and_a_heading() -> None:
    problems: list[str] = []
    for path in markdown_files():
        for number, line in prose_lines(path):
            for link in _LINK.finditer(_INLINE_CODE.sub("", line)):
                target = link["target"]
                if re.match(r"[A-Za-z][\w+.-]*:", target):  # http:, https:, mailto:, ...
                    continue
                file_part, _, fragment = target.partition("#")
                resolved = (path.parent / file_part).resolve() if file_part else path
                where = f"{path.relative_to(ROOT)}:{number}: {target}"
                if not resolved.exists():
                    problems.append(f"{where}: no such file")
                elif fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
                    problems.append(f"{where}: {resolved.name} has no heading #{fragment}")
    assert not problems, "\n".join(problems)


def test_pointers_to_doc_pages_in_code_and_text_resolve() -> None:
    """``docs/<page>.md`` and ``docs/<page>.md#anchor`` written anywhere (a docstring, a
    comment, a script) name a page and a heading that exist."""
    problems: list[str] = []
    for path in text_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        for pointer in _DOC_POINTER.finditer(text):
            page = DOCS / pointer["path"]
            number = text.count("\n", 0, pointer.start()) + 1
            where = f"{path.relative_to(ROOT)}:{number}: {pointer[0]}"
            if not page.is_file():
                problems.append(f"{where}: no such page")
            elif pointer["anchor"] and pointer["anchor"] not in anchors(page):
                problems.append(f"{where}: {page.name} has no heading #{pointer['anchor']}")
    assert not problems, "\n".join(problems)


#: The sites a page may link to (docs/contributing.md#links-to-other-sites), each with why: the
#: upstream work a part of Reef follows or drives, credited where that part is explained.
_OTHER_SITES = {
    "github.com": "the repositories of methods and trainers Reef follows (OpenClaw-RL, slime,"
    " Tinker's cookbook)",
    "tinker-docs.thinkingmachines.ai": "the documentation of Tinker, the service the tinker"
    " component trains on",
}
#: Link texts that say nothing of where they go.
_VAGUE_LINK_TEXTS = frozenset({"here", "this", "link", "this page", "click here", "docs", "source"})
_EXTERNAL_LINK = re.compile(
    r"\[(?P<text>(?:[^\[\]]|\[[^\]]*\])*)\]\((?P<target>[A-Za-z][\w+.-]*:[^)\s]*)\)"
)


def test_links_to_other_sites_credit_listed_upstream_work() -> None:
    """rule of docs/contributing.md: a link elsewhere is https, to a listed site, and names what
    it points at."""
    problems = []
    for path in markdown_files():
        for number, line in prose_lines(path):
            for link in _EXTERNAL_LINK.finditer(_INLINE_CODE.sub("", line)):
                target, text = link["target"], link["text"].strip("` ")
                where = f"{path.relative_to(ROOT)}:{number}: {target}"
                host = re.sub(r"^https://([^/:]+).*", r"\1", target)
                if not target.startswith("https://"):
                    problems.append(f"{where}: link other sites over https:// only")
                elif host not in _OTHER_SITES:
                    problems.append(
                        f"{where}: {host} is not a site the docs may link to: credit upstream"
                        " work only, and add the site to _OTHER_SITES with why"
                    )
                if text.lower() in _VAGUE_LINK_TEXTS:
                    problems.append(f"{where}: say what the link points at, not {text!r}")
    assert not problems, "\n".join(problems)


#: Paths written in the docs that name files of another repository (a task's, a Harbor task's
#: layout), not of this one, with why.
_PATHS_OF_OTHER_REPOSITORIES = {
    "tests/test.sh": "the verifier of a Harbor task, in the task's folder",
    "tests/test_ops.py": "a test of the calc project that the ECC quickstart grades",
    "tests/test_clamp.py": "the test patch of the reverification page's example task",
    "tests/test_clamp_hard.py": "a test the reverification page's cheating patch adds",
}


def _repository_path_pattern() -> re.Pattern[str]:
    """A path that starts with a top-level folder of the repository (``tests/...``,
    ``benchmarks/...``, ``reef-core/...``), globs allowed."""
    tops = sorted(
        entry.name
        for entry in ROOT.iterdir()
        if entry.is_dir() and entry.name not in _SKIPPED_DIRS and not entry.name.startswith(".")
    )
    alternatives = "|".join(re.escape(top) for top in tops)
    return re.compile(rf"(?<![\w./-])(?P<path>(?:{alternatives})/[\w./*-]*[\w/*])")


def _unchecked_code(path: Path) -> Iterator[tuple[int, str]]:
    """The code of a page that no other test runs: inline code, not-run reasons, and the
    shell blocks marked not-run (the blocks that run fail on a missing file by themselves)."""
    for number, line in prose_lines(path):
        for code in _INLINE_CODE.finditer(line):
            yield number, code[0]
        marker = _MARKER.match(line)
        if marker:
            yield number, marker["reason"]
    for block in fenced_blocks(path):
        if block.lang in SHELL and block.not_run is not None:
            yield block.line, block.body


def test_repository_paths_named_in_the_docs_exist() -> None:
    """A page that names ``benchmarks/bench_x.py`` or ``tests/test_y.py`` names a file that is
    here: at the repository's root, or in one of its distributions (whose pages run commands
    from the distribution's folder)."""
    pattern = _repository_path_pattern()
    bases = [ROOT, *sorted(p.parent for p in ROOT.glob("*/pyproject.toml"))]
    problems = []
    for page in documentation_files():
        for number, code in _unchecked_code(page):
            for found in pattern.finditer(code):
                named = found["path"].rstrip("/")
                if named in _PATHS_OF_OTHER_REPOSITORIES:
                    continue
                if not any(next(base.glob(named), None) is not None for base in bases):
                    problems.append(f"{page.relative_to(ROOT)}:{number}: {named}: no such file")
    assert not problems, "\n".join(problems)


def test_the_index_links_every_page() -> None:
    index = DOCS / "index.md"
    linked = {
        (index.parent / link["target"].partition("#")[0]).resolve()
        for _, line in prose_lines(index)
        for link in _LINK.finditer(line)
    }
    missing = [
        str(page.relative_to(DOCS))
        for page in markdown_files()
        if page.is_relative_to(DOCS) and page != index and page.resolve() not in linked
    ]
    assert not missing, f"docs/index.md does not link: {', '.join(missing)}"


def stated_rules() -> dict[str, str]:
    """The rule lines of docs/rules.md, by id (a repeated id fails the test that reads it)."""
    stated: dict[str, str] = {}
    repeated: list[str] = []
    for _, line in prose_lines(RULES):
        rule = _RULE_LINE.match(line)
        if rule:
            if rule["id"] in stated:
                repeated.append(rule["id"])
            stated[rule["id"]] = rule["text"]
    assert not repeated, f"listed more than once in docs/rules.md: {', '.join(repeated)}"
    return stated


def cited_rule_ids(folders: list[Path]) -> dict[str, str]:
    """Every rule id written in the files under ``folders``, with one place it is written."""
    cited: dict[str, str] = {}
    for folder in folders:
        for path in _walk(folder):
            text = path.read_text(encoding="utf-8", errors="replace")
            for found in _RULE_ID.finditer(text):
                cited.setdefault(found[0], str(path.relative_to(ROOT)))
    return cited


def test_every_rule_line_is_well_formed_unique_and_linked() -> None:
    problems = []
    for rule_id, text in stated_rules().items():
        if not _WELL_FORMED_ID.fullmatch(rule_id):
            problems.append(f"{rule_id}: not an id like P-BUF-3 or E-SEAL-10")
        links = list(_LINK.finditer(_INLINE_CODE.sub("", text)))
        if not links:
            problems.append(f"{rule_id}: link the page that explains it")
        if len(text) - sum(len(link[0]) for link in links) < 20:
            problems.append(f"{rule_id}: state the rule in a sentence")
    assert not problems, "\n".join(problems)


#: Where rule ids are cited: the tests (``grep -rhoE '\b[PE]-[A-Z]+-[0-9]+\b' */tests tests``),
#: and the docs and sources, which name the rules they explain or rely on.
_CITING_FOLDERS = {
    "tests": [*sorted(p for p in ROOT.glob("*/tests") if p.is_dir()), ROOT / "tests"],
    "docs and sources": [DOCS, *sorted(p for p in ROOT.glob("*/src") if p.is_dir())],
}


@pytest.mark.parametrize("citing", sorted(_CITING_FOLDERS))
def test_every_cited_rule_id_is_stated(citing: str) -> None:
    stated = stated_rules()
    cited = cited_rule_ids(_CITING_FOLDERS[citing])
    missing = {rule_id: where for rule_id, where in cited.items() if rule_id not in stated}
    assert not missing, "\n".join(
        f"{rule_id} (cited in {where}) has no line in docs/rules.md"
        for rule_id, where in sorted(missing.items())
    )


def test_nothing_points_at_documents_outside_the_repository() -> None:
    this = Path(__file__).resolve()
    problems = []
    for path in text_files():
        relative = path.relative_to(ROOT).as_posix()
        if path.resolve() == this:
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for found in _OUTSIDE_POINTERS.finditer(text):
            number = text.count("\n", 0, found.start()) + 1
            problems.append(
                f"{relative}:{number}: {found[0]!r} is not in this repository; point at "
                "docs/rules.md or docs/decisions.md instead"
            )
    assert not problems, "\n".join(problems)
