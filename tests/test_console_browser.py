"""The console (``/reef/console``) in headless Chromium against a real ``reef serve`` on loopback
with tokens, the local TinyGPT component training for real.

- A person's path: open the page, sign in with a token, switch the scenario to manual, watch
  the agent's samples arrive, filter the untrained ones, choose two groups into the manual
  buffer, open a sample, queue TRAIN and see the job run and the chosen samples trained (the
  others untouched), all through the page, which calls the HTTP API only.
- The keyboard: every control of the page is reached with Tab, each shows a visible focus
  ring, and a sample opens and is chosen without a mouse.
- Contrast: every text's colour against its background meets WCAG 2 AA (4.5:1, 3:1 for large
  text), computed from the colours the browser renders.

Screenshots of each step are kept in ``$REEF_TEST_ARTIFACTS/console`` (default: the test's
temporary folder); the test prints where. Debian's ``chromium`` and ``chromium-driver`` drive
it through selenium, pointed at ``/usr/bin/chromedriver`` (nothing is downloaded); without them
the tests skip, saying so (``scripts/setup`` installs them where apt is available).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from selenium import webdriver
from selenium.common.exceptions import (
    ElementNotInteractableException,
    StaleElementReferenceException,
)
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.select import Select
from selenium.webdriver.support.wait import WebDriverWait
from sqlalchemy import create_engine, text

from reef.core.atif import trajectory_to_json
from reef.core.atif_build import trajectory_from_records
from reef.core.records import InferenceRecord
from reef.storage import JobHistory, SampleOfJob, open_database
from reef.testing.serve import ServeProcess, tiny_local_deployment

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
SCENARIO = "word"
ADMIN = "console-admin-secret"
AGENT = "console-agent-secret"
GROUP = 4

#: The flags Chromium needs here: headless, as root, and no network but loopback.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1366,900",
    "--force-device-scale-factor=1",
    "--hide-scrollbars",
)


@pytest.fixture(scope="module")
def chromium() -> None:
    """Skip, saying why, where Debian's Chromium and its driver are not installed."""
    if not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):
        pytest.skip(
            f"the console's browser tests need Debian's chromium and chromium-driver"
            f" ({CHROMIUM}, {CHROMEDRIVER}); scripts/setup installs them where apt is available"
            " (apt-get install chromium chromium-driver)"
        )


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the screenshots go: ``$REEF_TEST_ARTIFACTS/console``, else a temporary folder."""
    root = os.environ.get("REEF_TEST_ARTIFACTS")
    folder = Path(root) / "console" if root else tmp_path_factory.mktemp("console-artifacts")
    folder.mkdir(parents=True, exist_ok=True)
    print(f"\nconsole screenshots: {folder}")
    return folder


@pytest.fixture(scope="module")
def served(
    chromium: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServeProcess, str]]:
    """``reef serve`` of the TinyGPT deployment with tokens; its base URL and storage URL."""
    folder = tmp_path_factory.mktemp("console-serve")
    url = f"sqlite:///{folder / 'reef.db'}"
    tokens = {
        "admin": (ADMIN, ["infer", "feedback", "admin"]),
        "agent": (AGENT, ["infer", "feedback"]),
    }
    # max_staleness 0: a job's new weights make the samples of the old ones stale.
    deployment = tiny_local_deployment(folder, url, tokens=tokens, max_staleness=0)
    serve = ServeProcess(deployment, folder / "serve.log", token=ADMIN)
    try:
        wait_until_served(serve)
        yield serve, url
    finally:
        serve.stop()


def wait_until_served(serve: ServeProcess) -> None:
    """Return once the trainer published its first weights: the engine answers from then on."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status = httpx.get(f"{serve.base_url}/reef/status", headers=serve.headers).json()
        if status["scenarios"][0]["trainers"][0]["served_artifact"] is not None:
            return
        time.sleep(0.2)
    raise AssertionError(f"no weights published: {status}")


def stored_samples(serve: ServeProcess, count: int) -> list[dict[str, Any]]:
    """The scenario's samples once the trainer made ``count`` of them: a report is admitted at
    once, its sample made by the trainer's next pass."""
    deadline = time.monotonic() + 60
    while True:
        samples: list[dict[str, Any]] = httpx.get(
            f"{serve.base_url}/reef/scenarios/{SCENARIO}/samples",
            params={"limit": 50, "order": "asc"},
            headers=serve.headers,
        ).json()["samples"]
        if len(samples) >= count or time.monotonic() > deadline:
            assert len(samples) == count, samples
            return samples
        time.sleep(0.2)


def downloads(tmp_path: Path) -> Path:
    """Where the browser of a test whose temporary folder is ``tmp_path`` saves files."""
    return tmp_path / "downloads"


@pytest.fixture
def browser(chromium: None, tmp_path: Path) -> Iterator[WebDriver]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path / 'chromium-profile'}")
    # A file the page saves lands in downloads(tmp_path), without asking.
    options.add_experimental_option(
        "prefs",
        {
            "download.default_directory": str(downloads(tmp_path)),
            "download.prompt_for_download": False,
        },
    )
    # Selenium Manager stays offline: the driver is the one given, nothing is fetched.
    os.environ["SE_OFFLINE"] = "true"
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


# -- the agent's traffic, through the HTTP API (not the page) ---------------------------------


def agent_round(base_url: str, group: str, tags: dict[str, str] | None = None) -> None:
    """``GROUP`` calls answered by the local engine (carrying ``tags``), each reported in
    ``group`` with its own score (member / GROUP): a group whose answers all scored the same has
    no signal and its job moves no weight, yet the person path needs a job's new weights to
    make samples stale."""
    headers = {"authorization": f"Bearer {AGENT}"}
    headers.update({f"x-reef-tag-{name}": value for name, value in (tags or {}).items()})
    with httpx.Client(base_url=base_url, headers=headers, timeout=60) as client:
        for member in range(GROUP):
            answer = client.post(
                f"/scenarios/{SCENARIO}/v1/chat/completions",
                json={
                    "model": "local",
                    "messages": [{"role": "user", "content": f"Say ok, round {group}."}],
                    "max_tokens": 3,
                    "temperature": 1.0,
                },
            )
            assert answer.status_code == 200, answer.text
            report = {
                "id": f"{group}-{member}",
                "references": [answer.headers["x-reef-record-id"]],
                "score": member / GROUP,
                "metadata": {"group": group},
            }
            reported = client.post(f"/reef/scenarios/{SCENARIO}/reports", json=report)
            assert reported.status_code in (200, 201), reported.text


@pytest.fixture
def with_samples(served: tuple[ServeProcess, str]) -> ServeProcess:
    """The service with the agent's samples stored (made here, in manual mode so that they wait,
    unless an earlier test of the module made them)."""
    serve, _ = served
    samples = f"{serve.base_url}/reef/scenarios/{SCENARIO}/samples"
    if httpx.get(samples, headers=serve.headers).json()["total"] == 0:
        update = f"{serve.base_url}/reef/scenarios/{SCENARIO}/update"
        httpx.post(update, json={"training_mode": "manual"}, headers=serve.headers)
        for group in ("g0", "g1", "g2"):
            agent_round(serve.base_url, group)
    return serve


def train_counts(url: str) -> dict[str, int]:
    """Each sample's train count, by sample id, read from the store."""
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                text(
                    "SELECT s.id, COALESCE(SUM(t.count), 0) FROM reef_samples s"
                    " LEFT JOIN reef_sample_trains t ON t.sample_seq = s.seq"
                    " WHERE s.scenario = :s GROUP BY s.id"
                ),
                {"s": SCENARIO},
            ).all()
    finally:
        engine.dispose()
    return {str(sample_id): int(count) for sample_id, count in rows}


# -- driving the page ---------------------------------------------------------------------------


def wait_for(driver: WebDriver, condition: Any, what: str, timeout: float = 60) -> Any:
    """Wait until ``condition(driver)`` is truthy (the page updates itself)."""
    return WebDriverWait(
        driver,
        timeout,
        ignored_exceptions=(StaleElementReferenceException, ElementNotInteractableException),
    ).until(condition, what)


def read(driver: WebDriver, look: Any, attempts: int = 5) -> Any:
    """``look(driver)``, looked at again when the live refresh replaced an element it found
    between finding and reading it."""
    for _ in range(attempts - 1):
        try:
            return look(driver)
        except StaleElementReferenceException:
            continue
    return look(driver)


def text_of(driver: WebDriver, css: str) -> str:
    """The text of the first element ``css`` finds ("" when none), read afresh (:func:`read`)."""

    def look(d: WebDriver) -> str:
        found = d.find_elements(By.CSS_SELECTOR, css)
        return found[0].text if found else ""

    return read(driver, look)


def attribute_of(driver: WebDriver, css: str, name: str, index: int = 0) -> str | None:
    """The attribute ``name`` of the element ``css`` finds at ``index``, read afresh."""
    return read(driver, lambda d: d.find_elements(By.CSS_SELECTOR, css)[index].get_attribute(name))


def click_first(driver: WebDriver, css: str) -> None:
    """Click the first element ``css`` finds, found again when the live refresh replaced it."""
    wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, css)[0].click() or True, css)


def shot(driver: WebDriver, folder: Path, name: str, top: str | None = None) -> None:
    """Save what the window shows as ``<name>.png``, scrolled to the element ``top`` (CSS)
    or to the top of the page."""
    if top is None:
        driver.execute_script("window.scrollTo(0, 0)")
    else:
        driver.execute_script(
            "window.scrollTo(0, document.querySelector(arguments[0]).offsetTop - 8)", top
        )
    driver.save_screenshot(str(folder / f"{name}.png"))


def sign_in(driver: WebDriver, base_url: str) -> None:
    driver.get(f"{base_url}/reef/console")
    # The form shows once the page asked the service and was refused without a token.
    token = wait_for(
        driver,
        lambda d: next((t for t in [d.find_element(By.ID, "token")] if t.is_displayed()), None),
        "the sign-in form",
    )
    token.send_keys(ADMIN, Keys.ENTER)
    wait_for(driver, lambda d: SCENARIO in text_of(d, "#overview-title"), "the scenario")


def signed_in_search(driver: WebDriver, base_url: str, words: str) -> None:
    """Sign in, search the samples for ``words`` and wait for the round's ``GROUP`` matches."""
    sign_in(driver, base_url)
    wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, ".samples tbody tr"), "samples")
    click(driver, "filter-text")
    ActionChains(driver).send_keys(words, Keys.ENTER).perform()
    wait_for(driver, lambda d: text_of(d, "#samples-count") == f"{GROUP} match", "the search")


def click(driver: WebDriver, key: str) -> None:
    """Click the control ``data-key=key``, found afresh: a live update may have redrawn it
    between finding and clicking, as it would under a person's mouse."""

    def clicked(d: WebDriver) -> bool:
        d.find_element(By.CSS_SELECTOR, f'[data-key="{key}"]').click()
        return True

    wait_for(driver, clicked, f"a click on {key}", 10)


def choose(driver: WebDriver, select_id: str, value: str) -> None:
    """Choose ``value`` in the select ``select_id``, found afresh (see :func:`click`)."""

    def chosen(d: WebDriver) -> bool:
        Select(d.find_element(By.ID, select_id)).select_by_value(value)
        return True

    wait_for(driver, chosen, f"{value!r} chosen in {select_id}", 10)


def pick(driver: WebDriver, sample_id: str) -> None:
    """Tick a sample's box."""
    click(driver, f"pick:{sample_id}")


def test_a_person_chooses_samples_and_trains_them(
    served: tuple[ServeProcess, str], browser: WebDriver, artifacts: Path
) -> None:
    serve, url = served
    browser.get(f"{serve.base_url}/reef/console")
    wait_for(browser, lambda d: d.find_element(By.ID, "token").is_displayed(), "the sign-in form")
    shot(browser, artifacts, "01-sign-in")
    browser.find_element(By.ID, "token").send_keys("not-a-token", Keys.ENTER)
    wait_for(browser, lambda d: "refused" in text_of(d, "#sign-in-reason"), "a refused token")
    sign_in(browser, serve.base_url)

    # Manual mode first: from now on, only what the person chooses trains.
    click(browser, "mode-manual")
    wait_for(
        browser,
        lambda d: (
            d.find_element(By.CSS_SELECTOR, '[data-key="mode-manual"]').get_attribute(
                "aria-pressed"
            )
            == "true"
        ),
        "manual mode",
    )
    groups = ["g0", "g1", "g2"]
    for group in groups:
        agent_round(serve.base_url, group)
    # The samples arrive live, without a reload.
    wait_for(browser, lambda d: text_of(d, "#samples-count") == "12 match", "12 samples", 120)

    choose(browser, "filter-trained", "false")
    wait_for(browser, lambda d: text_of(d, "#samples-count") == "12 match", "the filter")
    samples = httpx.get(
        f"{serve.base_url}/reef/scenarios/{SCENARIO}/samples",
        params={"limit": 50, "order": "asc"},
        headers=serve.headers,
    ).json()["samples"]
    by_group: dict[str, list[str]] = {}
    for sample in samples:
        by_group.setdefault(sample["group_id"], []).append(sample["id"])
    first, second, left = list(by_group.values())
    chosen = first + second
    # The whole page into the manual buffer, then the last group out of it again, found with
    # the manual buffer's filter.
    click(browser, "select-page")
    wait_for(browser, lambda d: text_of(d, "#selection-count") == "12 selected", "12 selected")
    click(browser, "insert")
    wait_for(
        browser,
        lambda d: text_of(d, "#notice") == "Added 12 samples to the manual buffer.",
        "the buffer edit",
    )
    choose(browser, "filter-chosen", "true")
    wait_for(
        browser,
        lambda d: len(d.find_elements(By.CSS_SELECTOR, ".samples .badge.chosen")) == 12,
        "12 samples shown in the manual buffer",
    )
    for sample_id in left:
        pick(browser, sample_id)
    wait_for(browser, lambda d: text_of(d, "#selection-count") == "4 selected", "4 selected")
    click(browser, "remove")
    wait_for(
        browser,
        lambda d: "Took 4 samples out of the manual buffer" in text_of(d, "#notice"),
        "the removal",
    )
    wait_for(browser, lambda d: text_of(d, "#samples-count") == "8 match", "8 left chosen")
    buffers = httpx.get(
        f"{serve.base_url}/reef/scenarios/{SCENARIO}/buffer", headers=serve.headers
    ).json()["buffers"]
    assert sorted(buffers["local"]) == sorted(chosen)
    choose(browser, "filter-chosen", "")
    wait_for(
        browser,
        lambda d: (
            text_of(d, "#samples-count") == "12 match"
            and len(d.find_elements(By.CSS_SELECTOR, ".samples .badge.chosen")) == 8
        ),
        "8 samples marked as chosen among all 12",
    )
    shot(browser, artifacts, "02-chosen", "#samples")

    # A grader scores one call a second time: that report cannot train (its trajectory is
    # taken), and the overview says so.
    record_id = httpx.get(
        f"{serve.base_url}/reef/scenarios/{SCENARIO}/samples/{left[0]}", headers=serve.headers
    ).json()["records"][0]["id"]
    again = {"id": "again", "references": [record_id], "score": 1.0}
    rescored = httpx.post(
        f"{serve.base_url}/reef/scenarios/{SCENARIO}/reports",
        json=again,
        headers={"authorization": f"Bearer {AGENT}"},
    )
    assert rescored.status_code == 201, rescored.text
    wait_for(
        browser,
        lambda d: (
            "shared trajectory \N{EN DASH} its trajectory was already scored by another report"
            in text_of(d, "#overview")
        ),
        "the second report in what did not train",
    )

    click(browser, f"open:{chosen[0]}")
    wait_for(browser, lambda d: "Trajectory" in text_of(d, "#sample"), "the sample")
    detail = text_of(browser, "#sample")
    assert "Say ok, round" in detail  # the user's turn
    assert "Report" in detail  # where it came from
    assert "Records" in detail
    # with a sample open, the filters still take one line: Apply is not left alone below
    kind_bottom, apply_top = browser.execute_script(
        "return [document.querySelector(\"[data-key='filter-kind']\").getBoundingClientRect()"
        ".bottom, document.querySelector(\"[data-key='filter-apply']\").getBoundingClientRect()"
        ".top]"
    )
    assert apply_top < kind_bottom, (kind_bottom, apply_top)
    shot(browser, artifacts, "03-sample", "#samples")

    # The TRAIN note is shown again beside the job it made.
    click(browser, "train-note")
    ActionChains(browser).send_keys("the first two rounds").perform()
    click(browser, "train")
    wait_for(browser, lambda d: "queued" in text_of(d, "#notice"), "the instruction")
    wait_for(
        browser,
        lambda d: "finished" in text_of(d, "#jobs tbody"),
        "the job to train and its end to show",
        180,
    )
    assert "\N{LEFT DOUBLE QUOTATION MARK}the first two rounds" in text_of(browser, "#jobs tbody")
    # Trained, the chosen samples left the "untrained" list; all of them show again.
    wait_for(browser, lambda d: text_of(d, "#samples-count") == "4 match", "4 left untrained")
    choose(browser, "filter-trained", "")
    wait_for(
        browser,
        lambda d: len(d.find_elements(By.CSS_SELECTOR, ".samples .badge.finished")) == 8,
        "the chosen samples shown trained",
    )
    wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".chart svg"), "the charts")
    wait_for(
        browser,
        lambda d: "trained with reward" in text_of(d, "#sample"),
        "the opened sample's job",
    )
    # The job's page names the artifact its weights were published as.
    deadline = time.monotonic() + 30
    while True:
        jobs = httpx.get(
            f"{serve.base_url}/reef/scenarios/{SCENARIO}/jobs", headers=serve.headers
        ).json()["jobs"]
        made = [j for j in jobs if j["event"] == "finished"][-1]  # oldest first
        if made["artifact_id"] is not None or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert made["artifact_id"], made
    click(browser, f"job:{made['trainer']}:{made['job_id']}")

    def names_the_artifact(d: WebDriver) -> bool:
        codes = d.find_elements(By.CSS_SELECTOR, "#sample code")
        return any(c.get_attribute("title") == made["artifact_id"] for c in codes)

    wait_for(browser, names_the_artifact, "the artifact the job made, on its page")
    click(browser, "close-job")
    # The trainer's card: the artifact it serves now, its buffer (in manual mode: what the
    # next TRAIN takes), its job.
    trainer = httpx.get(f"{serve.base_url}/reef/status", headers=serve.headers).json()
    served_now = trainer["scenarios"][0]["trainers"][0]["served_artifact"]
    card = wait_for(
        browser,
        lambda d: next(
            (c for c in [text_of(d, '[data-trainer="local"]')] if served_now[:12] in c), None
        ),
        "the artifact trained by the job, served",
    )
    assert "0 samples for the next TRAIN" in card, card
    assert "Jobs ended\n1" in card, card
    counts = train_counts(url)
    assert {sample_id: counts[sample_id] for sample_id in chosen} == dict.fromkeys(chosen, 1)
    assert {sample_id: counts[sample_id] for sample_id in left} == dict.fromkeys(left, 0)
    jobs = httpx.get(
        f"{serve.base_url}/reef/scenarios/{SCENARIO}/jobs", headers=serve.headers
    ).json()["jobs"]
    assert [(j["event"], j["trained"]) for j in jobs] == [("finished", 8)]
    assert isinstance(jobs[0]["metrics"]["loss"], float)

    # The job's new weights make the last group stale (max_staleness 0); the agent plays a
    # fresh round. The person chooses every untrained sample: the page warns that the stale
    # ones will not train, and TRAIN trains the fresh group only.
    agent_round(serve.base_url, "g3")
    choose(browser, "filter-trained", "false")
    wait_for(
        browser,
        lambda d: (
            len(d.find_elements(By.CSS_SELECTOR, ".samples tbody tr")) == 8
            and len(d.find_elements(By.CSS_SELECTOR, ".samples .badge.stale")) == 4
        ),
        "the fresh round beside the stale group",
    )
    fresh = [s for s in stored_samples(serve, 16) if s["group_id"] not in by_group]
    click(browser, "select-page")
    wait_for(browser, lambda d: text_of(d, "#selection-count") == "8 selected", "8 selected")
    click(browser, "insert")
    warned = wait_for(
        browser,
        lambda d: next((n for n in [d.find_element(By.ID, "notice")] if "Added 8" in n.text), None),
        "the second choice",
    )
    assert "4 of them are stale" in warned.text, warned.text
    assert "warn" in warned.get_attribute("class").split()
    shot(browser, artifacts, "03b-stale-warning", "#notice")
    click(browser, "train")
    wait_for(
        browser,
        lambda d: len(d.find_elements(By.CSS_SELECTOR, "#jobs tbody .badge.finished")) == 2,
        "two jobs finished",
        180,
    )
    choose(browser, "filter-trained", "")
    wait_for(
        browser,
        lambda d: len(d.find_elements(By.CSS_SELECTOR, ".samples .badge.finished")) == 12,
        "the fresh group shown trained",
    )
    wait_for(
        browser,
        lambda d: (
            [
                c.get_attribute("aria-label")[:22]
                for c in d.find_elements(
                    By.CSS_SELECTOR, ".chart-row:not(.artifact-chart) .chart svg"
                )
            ]
            == ["Loss per job: 2 jobs, ", "Mean reward per job: 2"]
        ),
        "the charts of both jobs",
    )
    shot(browser, artifacts, "04-trained")
    shot(browser, artifacts, "05-trained-samples", "#jobs")
    counts = train_counts(url)
    assert {sample_id: counts[sample_id] for sample_id in left} == dict.fromkeys(left, 0)
    assert [counts[s["id"]] for s in fresh] == [1] * GROUP
    buffers = httpx.get(
        f"{serve.base_url}/reef/scenarios/{SCENARIO}/buffer", headers=serve.headers
    ).json()["buffers"]
    assert sorted(buffers["local"]) == sorted(left)  # stale, they stay chosen, untrained

    # Back to auto mode, through the page.
    click(browser, "mode-auto")
    wait_for(browser, lambda d: "is now auto" in text_of(d, "#notice"), "auto mode")
    wait_for(
        browser,
        lambda d: (
            d.find_element(By.CSS_SELECTOR, '[data-key="mode-auto"]').get_attribute("aria-pressed")
            == "true"
        ),
        "the Auto button pressed",
    )
    status = httpx.get(f"{serve.base_url}/reef/status", headers=serve.headers).json()
    assert status["scenarios"][0]["training_mode"] == "auto"


def test_a_charts_axis_labels_are_whole_for_tiny_and_negative_values(
    served: tuple[ServeProcess, str], browser: WebDriver, artifacts: Path
) -> None:
    """A loss of -0.00723 or 6e-7 is labelled in full (a cut minus sign would show a negative
    loss as positive), drawn by the page's own chart module."""
    browser.get(f"{served[0].base_url}/reef/console/")
    wait_for(browser, lambda d: d.find_element(By.ID, "token").is_displayed(), "the page")
    drawn = browser.execute_async_script(_DRAW_CHART, [-0.00723, 0.000000601])
    assert drawn["labels"] == ["6.01e-7", "-0.00723", "job 1", "job 2"], drawn
    assert drawn["cut"] == [], drawn
    shot(browser, artifacts, "10-chart-labels", ".chart")


def test_the_overview_shows_the_running_job_and_the_last_errors(
    served: tuple[ServeProcess, str], browser: WebDriver
) -> None:
    """A trainer's running job and its last errors, as GET /reef/status reports them, are on
    the overview (a job of the served deployment runs too briefly to catch, and no error is
    easy to cause, so the service's status entry is given them here)."""
    serve = served[0]
    browser.get(f"{serve.base_url}/reef/console/")
    wait_for(browser, lambda d: d.find_element(By.ID, "token").is_displayed(), "the page")
    status = httpx.get(f"{serve.base_url}/reef/status", headers=serve.headers).json()
    scenario = status["scenarios"][0]
    idle = browser.execute_async_script(_DRAW_OVERVIEW, scenario, None)
    assert idle == {"running": ["none"], "errors": [], "empty": ["No errors."]}, idle
    (trainer,) = scenario["trainers"]
    trainer["running_job"] = {"job_id": "job-7", "sample_ids": ["s1", "s2", "s3"]}
    trainer["last_errors"] = [
        {"at": 1_700_000_000.0, "where": "submit", "error": "the GPU ran out of memory"}
    ]
    busy = browser.execute_async_script(_DRAW_OVERVIEW, scenario, None)
    assert busy["running"] == ["job-7 · 3 samples"], busy
    (error,) = busy["errors"]
    assert f"{trainer['trainer']} · submit" in error, busy
    assert error.endswith("the GPU ran out of memory"), busy
    assert busy["empty"] == [], busy


def test_a_sample_a_failed_job_consumed_shows_so_not_trained(
    served: tuple[ServeProcess, str], browser: WebDriver
) -> None:
    """rule: P-PIPE-10 -- a sample sent to a job that failed (its holder killed with it) is
    drawn as consumed by a failed job, in the list and opened, never as trained; the answers
    are shaped as the sample routes give them."""
    serve = served[0]
    browser.get(f"{serve.base_url}/reef/console/")
    wait_for(browser, lambda d: d.find_element(By.ID, "token").is_displayed(), "the page")
    status = httpx.get(f"{serve.base_url}/reef/status", headers=serve.headers).json()
    sample = {
        "id": "word:r9:0", "kind": "trajectory", "group_id": "r9", "position": "9.1",
        "made_by": "local", "origin": "record", "reward": 0.5, "report_id": "r9", "steps": 2,
        "preview": "Say ok.", "trained_by": {}, "manual_buffer": [], "stale_for": [],
        "failed_by": {"local": 1},
    }  # fmt: skip
    page = {"scenario": SCENARIO, "samples": [sample], "total": 1, "next": None}
    job = {
        "job_id": "word:data:3", "trainer": "local", "trained": False, "sent": True,
        "reward": 0.5, "event": "failed", "submitted_at": 1.0, "ended_at": 2.0,
        "extensions": {}, "job_extensions": {},
    }  # fmt: skip
    detail = {
        "scenario": SCENARIO, "sample": sample,
        "body": {"trajectory": {"steps": []}, "reward": 0.5},
        "records": [], "report": None, "upload": None, "task": None, "jobs": [job],
        "labels": [],
    }  # fmt: skip
    drawn = browser.execute_async_script(_DRAW_FAILED_JOB, status["scenarios"][0], page, detail)
    assert "error" not in drawn, drawn
    times = "\u00d7"  # the multiplication sign the console writes counts with
    assert drawn["badges"] == [f"badge failed: consumed by a failed job {times}1"], drawn
    assert drawn["facts"]["Trained"] == "not yet"
    assert drawn["facts"]["Consumed by a failed job"].startswith(f"local {times}1")
    [line] = drawn["jobs"]
    assert "consumed by a failed job" in line, line
    assert "trained with" not in line, line


def test_the_page_fits_a_small_laptop_screen(
    with_samples: ServeProcess, browser: WebDriver, artifacts: Path
) -> None:
    """At 1024 pixels wide nothing makes the page scroll sideways (wide tables scroll inside
    their own box), and the opened sample goes under the list."""
    browser.set_window_size(1024, 768)
    sign_in(browser, with_samples.base_url)
    wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".samples tbody tr"), "samples")
    click_first(browser, ".samples button.link")
    wait_for(browser, lambda d: "Trajectory" in text_of(d, "#sample"), "the sample")
    widths = browser.execute_script(
        "return [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    assert widths[0] <= widths[1], widths
    shot(browser, artifacts, "07-small-screen")
    shot(browser, artifacts, "08-small-screen-sample", "#sample")


#: The page-side checks, run in the browser (tests/console/*.js).
CHECKS = Path(__file__).with_name("console")
_FOCUS_RING = (CHECKS / "focus_ring.js").read_text(encoding="utf-8")
_REACHABLE = (CHECKS / "reachable.js").read_text(encoding="utf-8")
_COLOURS = (CHECKS / "text_colours.js").read_text(encoding="utf-8")
_DRAW_CHART = (CHECKS / "draw_chart.js").read_text(encoding="utf-8")
_DRAW_OVERVIEW = (CHECKS / "draw_overview.js").read_text(encoding="utf-8")
_DRAW_FAILED_JOB = (CHECKS / "draw_failed_job.js").read_text(encoding="utf-8")
_DRAW_COMPARE = (CHECKS / "draw_compare.js").read_text(encoding="utf-8")
_DRAW_EVALUATIONS = (CHECKS / "draw_evaluations.js").read_text(encoding="utf-8")

#: Every element a person can reach with Tab, as the page draws it.
FOCUSABLE = (
    "a[href], button:not([disabled]), input:not([disabled]), select:not([disabled]),"
    " textarea:not([disabled]), summary, [tabindex]:not([tabindex='-1'])"
)


def test_every_control_is_reached_by_tab_with_a_visible_focus_ring(
    with_samples: ServeProcess, browser: WebDriver, artifacts: Path
) -> None:
    sign_in(browser, with_samples.base_url)
    wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".samples tbody tr"), "samples")
    # Open a sample and choose it with the keyboard alone: its panel's controls count too.
    wait_for(
        browser,
        lambda d: (
            d.find_elements(By.CSS_SELECTOR, ".samples button.link")[0].send_keys(Keys.ENTER)
            or True
        ),
        "a sample opened by Enter",
    )
    wait_for(browser, lambda d: "Trajectory" in text_of(d, "#sample"), "the sample, by keyboard")
    browser.find_element(By.CSS_SELECTOR, '[data-key="pick-open"]').send_keys(Keys.SPACE)
    wait_for(browser, lambda d: text_of(d, "#selection-count") == "1 selected", "chosen by Space")

    expected = set(browser.execute_script(_REACHABLE, FOCUSABLE))
    browser.execute_script("document.activeElement.blur(); window.scrollTo(0, 0);")
    order: list[str] = []
    rings: dict[str, dict[str, Any]] = {}
    for _ in range(4 * len(expected) + 10):
        ActionChains(browser).send_keys(Keys.TAB).perform()
        ring = browser.execute_script(_FOCUS_RING)
        if ring["tag"] == "BODY":
            continue  # past the last control: the next Tab starts again at the first
        if order and ring["key"] == order[0]:
            break  # around once
        order.append(ring["key"])
        rings[ring["key"]] = ring
        if len(order) == 1:
            shot(browser, artifacts, "06-focus-skip-link")
    missing = expected - set(order)
    assert not missing, f"not reached with Tab: {sorted(missing)}"
    unringed = {
        key: ring
        for key, ring in rings.items()
        if not (ring["outline"] != "none" and ring["width"] >= 2) and ring["shadow"] == "none"
    }
    assert not unringed, f"no visible focus ring: {unringed}"


def _luminance(colour: list[float]) -> float:
    def channel(value: float) -> float:
        c = value / 255
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (channel(v) for v in colour[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(first: list[float], second: list[float]) -> float:
    """The WCAG 2 contrast ratio of two colours."""
    light, dark = sorted((_luminance(first), _luminance(second)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def test_contrast_ratio_of_every_text_meets_wcag_aa(
    with_samples: ServeProcess, browser: WebDriver, artifacts: Path
) -> None:
    sign_in(browser, with_samples.base_url)
    wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".samples tbody tr"), "samples")
    click_first(browser, ".samples button.link")
    wait_for(browser, lambda d: "Trajectory" in text_of(d, "#sample"), "the sample")
    texts = browser.execute_script(_COLOURS)
    assert len(texts) > 50  # the overview, jobs, samples and the opened sample
    failing = []
    for found in texts:
        large = found["size"] >= 24 or (found["size"] >= 18.66 and found["weight"] >= 700)
        ratio = contrast(found["colour"], found["background"])
        if ratio < (3.0 if large else 4.5):
            failing.append((found["text"], round(ratio, 2), found["colour"], found["background"]))
    # Every text's ratio, weakest first, beside the screenshots.
    ratios = sorted((round(contrast(t["colour"], t["background"]), 2), t["text"]) for t in texts)
    (artifacts / "contrast.json").write_text(json.dumps(ratios, indent=1), encoding="utf-8")
    assert not failing, failing


def test_contrast_is_computed_as_wcag_defines_it() -> None:
    assert round(contrast([0, 0, 0, 1], [255, 255, 255, 1]), 1) == 21.0
    assert round(contrast([119, 119, 119, 1], [255, 255, 255, 1]), 2) == 4.48
    assert contrast([10, 20, 30, 1], [10, 20, 30, 1]) == 1.0


def weather_trajectory() -> dict[str, Any]:
    """An ATIF trajectory of an agent that called a tool and read its result."""
    call = {"id": "call-1", "type": "function",
            "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}}  # fmt: skip
    question = {"role": "user", "content": "What is the weather in Oslo?"}
    asked = InferenceRecord(
        "c1",
        SCENARIO,
        {"messages": [question]},
        {"choices": [{"index": 0, "message": {"role": "assistant", "tool_calls": [call]}}]},
    )
    answered = InferenceRecord(
        "c2",
        SCENARIO,
        {"messages": [question, {"role": "assistant", "tool_calls": [call]},
                      {"role": "tool", "tool_call_id": "call-1", "content": "Rain, 7 degrees"}]},
        {"choices": [{"index": 0, "message": {"role": "assistant", "content": "It rains."}}]},
    )  # fmt: skip
    return trajectory_to_json(trajectory_from_records([asked, answered], trajectory_id="weather-1"))


def test_an_uploaded_trajectory_shows_its_tool_calls_and_observations(
    with_samples: ServeProcess, browser: WebDriver, artifacts: Path
) -> None:
    """A trajectory uploaded as a data item opens as its turns, the tool call with its
    arguments, the tool's observation, and the upload it came from."""
    agent = {"authorization": f"Bearer {AGENT}"}
    base = with_samples.base_url
    uploaded = httpx.post(f"{base}/reef/items", json={"trajectory": weather_trajectory()},
                          headers=agent)  # fmt: skip
    assert uploaded.is_success, uploaded.text
    attached = httpx.post(f"{base}/reef/scenarios/{SCENARIO}/items/weather-1", headers=agent)
    assert attached.is_success, attached.text
    sign_in(browser, base)
    click(browser, "open:weather-1")
    wait_for(browser, lambda d: "Trajectory" in text_of(d, "#sample"), "the uploaded sample")
    detail = text_of(browser, "#sample")
    assert "What is the weather in Oslo?" in detail, detail
    assert "Tool call weather" in detail, detail
    assert '"city": "Oslo"' in detail, detail
    assert "Observation of call-1\nRain, 7 degrees" in detail, detail
    assert "It rains." in detail, detail
    assert "Upload\ndata item weather-1" in detail, detail
    shot(browser, artifacts, "12-upload-tool-calls", "#sample")


# -- a job sealed by Agent ECC ------------------------------------------------------------------

#: What each attempt of the sealed group did, by its place in the group (agent_ecc.synthetic).
BEHAVIOURS = ("correct", "wrong", "correct", "skip")


@pytest.fixture(scope="module")
def sealed_served(
    chromium: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServeProcess, Path]]:
    """``reef serve`` of the TinyGPT deployment with the ``ecc`` extension on its scenario: a
    registry whose grader was published (epoch 0) and then fixed (epoch 1), the producers'
    records and scores files (empty until the test writes its attempts), in manual mode."""
    pytest.importorskip("agent_ecc")
    from agent_ecc import DirectoryRegistry
    from agent_ecc.store import ContentStore
    from agent_ecc.synthetic import SyntheticWorld

    folder = tmp_path_factory.mktemp("console-ecc")
    world = SyntheticWorld(ContentStore(folder / "ecc-store"), ("t1",))
    registry = DirectoryRegistry(folder / "registry")
    registry.publish_grader(world.version(0), source="startup")
    registry.publish_world(world.world(), source="startup")
    registry.publish_grader(world.version(1), source="fix")
    tokens = {
        "admin": (ADMIN, ["infer", "feedback", "admin"]),
        "agent": (AGENT, ["infer", "feedback"]),
    }
    path = tiny_local_deployment(folder, f"sqlite:///{folder / 'reef.db'}", tokens=tokens)
    deployment = yaml.safe_load(path.read_text(encoding="utf-8"))
    deployment["scenarios"][SCENARIO]["extensions"] = {
        "ecc": {
            "registry": str(folder / "registry"),
            "store": str(folder / "ecc-store"),
            "journal_dir": str(folder / "journals"),
            "records": str(folder / "records.jsonl"),
            "scores": str(folder / "scores.jsonl"),
        }
    }
    path.write_text(yaml.safe_dump(deployment), encoding="utf-8")
    serve = ServeProcess(path, folder / "serve.log", token=ADMIN)
    try:
        wait_until_served(serve)
        update = f"{serve.base_url}/reef/scenarios/{SCENARIO}/update"
        httpx.post(update, json={"training_mode": "manual"}, headers=serve.headers)
        yield serve, folder
    finally:
        serve.stop()


def test_a_sealed_jobs_sample_shows_the_verdict_and_epoch_behind_its_reward(
    sealed_served: tuple[ServeProcess, Path], browser: WebDriver, artifacts: Path
) -> None:
    """A person opens a sample of a job Agent ECC sealed and reads which grader epoch decided
    its reward, the verdict, and the reward recorded before the fix."""
    from agent_ecc import DirectoryRegistry
    from agent_ecc.records import dump_jsonl
    from agent_ecc.store import ContentStore
    from agent_ecc.synthetic import SyntheticWorld

    serve, folder = sealed_served
    agent_round(serve.base_url, "g0")
    chosen = [sample["id"] for sample in stored_samples(serve, GROUP)]
    # The producers recorded each attempt under the first grader; a sample names its member by
    # its own id, so the attempts carry the samples' ids.
    world = SyntheticWorld(ContentStore(folder / "ecc-store"), ("t1",))
    first = DirectoryRegistry(folder / "registry").grader(world.version(0).version_id)
    for sample_id, behaviour in zip(chosen, BEHAVIOURS, strict=True):
        record, score = world.produce(first, "t1", sample_id, behaviour)
        dump_jsonl(folder / "records.jsonl", [record])
        dump_jsonl(folder / "scores.jsonl", [score])

    sign_in(browser, serve.base_url)
    for sample_id in chosen:
        pick(browser, sample_id)
    click(browser, "insert")
    wait_for(browser, lambda d: f"Added {GROUP} samples" in text_of(d, "#notice"), "the choice")
    click(browser, f"open:{chosen[0]}")
    wait_for(browser, lambda d: "Trajectory" in text_of(d, "#sample"), "the sample")
    click(browser, "train")
    wait_for(browser, lambda d: "finished" in text_of(d, "#jobs tbody"), "the sealed job", 180)
    fixed = world.version(1).version_id
    line = wait_for(
        browser,
        lambda d: next(
            (
                li.text
                for li in d.find_elements(By.CSS_SELECTOR, "#sample li, #sample p, #sample dd")
                if "ECC:" in li.text
            ),
            None,
        ),
        "the seal's line on the opened sample",
    )
    assert f"epoch 1 (grader {fixed})" in line, line
    assert "ECC: batch" in line, line
    assert "verdict pass" in line, line
    assert "recorded" in line, line
    shot(browser, artifacts, "09-sealed-sample", "#sample")
    # The trainer's card: the epoch in force and the job's seal.
    [job] = httpx.get(
        f"{serve.base_url}/reef/scenarios/{SCENARIO}/jobs", headers=serve.headers
    ).json()["jobs"]
    card = wait_for(
        browser,
        lambda d: next(
            (c for c in [text_of(d, '[data-trainer="local"]')] if "Last seal" in c), None
        ),
        "the seal on the trainer's card",
    )
    assert f"ECC epoch\n1 (grader {fixed})" in card, card
    seal = card.split("Last seal\n", 1)[1]
    assert seal.startswith(job["job_id"][:12]), seal
    assert "\N{MIDDLE DOT} epoch 1 \N{MIDDLE DOT}" in seal, seal
    shot(browser, artifacts, "11-sealed-overview")


# -- round two: the refresh keeps a person's place; groups; the whole run charted -----------


def test_what_a_person_types_survives_a_live_refresh(
    with_samples: ServeProcess, browser: WebDriver, artifacts: Path
) -> None:
    """The agent sends traffic while a person types the TRAIN note and a text filter (not yet
    applied): the live refresh redraws both sections, and the typed text, the focus and the
    caret stay where they were."""
    sign_in(browser, with_samples.base_url)
    wait_for(browser, lambda d: "match" in text_of(d, "#samples-count"), "the sample count")
    before = text_of(browser, "#samples-count")
    # Keys go to the focused field, whatever element it is by then: a redraw between two
    # keys is what this test is about.
    click(browser, "train-note")
    ActionChains(browser).send_keys("only the polite answers").perform()
    click(browser, "filter-text")
    ActionChains(browser).send_keys("round", Keys.ARROW_LEFT, Keys.ARROW_LEFT).perform()
    browser.execute_script(
        "window.typedInto = ['train-note', 'filter-text'].map((id) => document.getElementById(id))"
    )
    agent_round(with_samples.base_url, "typed")
    wait_for(browser, lambda d: text_of(d, "#samples-count") != before, "the new samples", 90)
    # Both sections were drawn anew: the elements typed into are gone from the page.
    redrawn = browser.execute_script("return window.typedInto.map((e) => e.isConnected)")
    assert redrawn == [False, False], redrawn
    kept = browser.execute_script(
        "const a = document.activeElement; return [document.getElementById('train-note').value,"
        " document.getElementById('filter-text').value, a.id, a.selectionStart]"
    )
    assert kept == ["only the polite answers", "round", "filter-text", 3], kept
    shot(browser, artifacts, "13-typed-through-a-refresh")


def test_the_group_filter_finds_the_group_the_client_named(
    with_samples: ServeProcess, browser: WebDriver, artifacts: Path
) -> None:
    """The agent named its groups g0, g1, g2 (``metadata.group``): the list shows those names
    (the store's own group id as a detail), the filter finds the group by its name, and the
    opened sample shows both."""
    sign_in(browser, with_samples.base_url)
    wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".samples tbody tr"), "samples")
    click(browser, "filter-group")
    ActionChains(browser).send_keys("g1", Keys.ENTER).perform()
    wait_for(browser, lambda d: text_of(d, "#samples-count") == f"{GROUP} match", "the group")
    cells = browser.execute_script(
        "return [...document.querySelectorAll('.samples td.group')]"
        ".map((c) => [c.textContent, c.firstElementChild.title])"
    )
    assert [text for text, _ in cells] == ["g1"] * GROUP, cells
    store = "the client's group; the store's group id: "
    assert all(title.startswith(store) for _, title in cells), cells
    shot(browser, artifacts, "14-client-group", "#samples")
    opener = browser.execute_script(
        "return document.querySelector('.samples button.link').dataset.key"
    )
    click(browser, opener)
    wait_for(browser, lambda d: "Trajectory" in text_of(d, "#sample"), "the sample")
    facts = browser.execute_script(
        "return Object.fromEntries([...document.querySelectorAll('#sample .facts dt')]"
        ".map((t) => [t.textContent, t.nextElementSibling.textContent]))"
    )
    assert facts["Group"] == "g1"
    assert facts["Store group id"]


def test_text_search_reward_sort_and_selecting_every_match(
    with_samples: ServeProcess, browser: WebDriver
) -> None:
    """Text found in the prompts, the matches sorted by reward highest first, all of them
    selected (not only a page); a change of filters clears the selection, unless it is kept."""
    signed_in_search(browser, with_samples.base_url, "ROUND G2")
    choose(browser, "filter-sort", "reward")
    cells = "return [...document.querySelectorAll('.samples td.num')].map((c) => c.textContent)"
    highest = ["0.75", "0.5", "0.25", "0"]
    wait_for(browser, lambda d: d.execute_script(cells) == highest, "highest reward first")
    click(browser, "select-matching")
    wait_for(browser, lambda d: text_of(d, "#selection-count") == f"{GROUP} selected", "all")
    choose(browser, "filter-kind", "trajectory")
    wait_for(browser, lambda d: text_of(d, "#selection-count") == "0 selected", "cleared")
    click(browser, "keep-selection")
    click(browser, "select-matching")
    wait_for(browser, lambda d: text_of(d, "#selection-count") == f"{GROUP} selected", "again")
    choose(browser, "filter-kind", "")
    wait_for(browser, lambda d: "match" in text_of(d, "#samples-count"), "the list")
    assert text_of(browser, "#selection-count") == f"{GROUP} selected"


def test_the_keyboard_moves_selects_and_opens_with_its_keys_shown(
    with_samples: ServeProcess, browser: WebDriver
) -> None:
    """j/k move along the list, x selects the sample there, o opens it; the keys are shown."""
    sign_in(browser, with_samples.base_url)
    wait_for(
        browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, ".samples tbody tr")) > 2, "samples"
    )
    assert "j next sample" in text_of(browser, ".keys")
    browser.find_element(By.TAG_NAME, "body").send_keys("j", "j", "k", "x")
    wait_for(browser, lambda d: text_of(d, "#selection-count") == "1 selected", "one selected")
    picked = attribute_of(browser, ".samples tr.cursor button.link", "title")
    assert picked == attribute_of(browser, ".samples tbody tr button.link", "title", 1)
    browser.find_element(By.TAG_NAME, "body").send_keys("o")
    wait_for(browser, lambda d: "Trajectory" in text_of(d, "#sample"), "the sample opened")
    opened = attribute_of(browser, "#sample-title .name", "title")
    assert f"Open sample {opened}" == picked


def test_a_250_job_history_is_charted_whole_with_real_numbers(
    served: tuple[ServeProcess, str], browser: WebDriver, artifacts: Path
) -> None:
    """250 more finished jobs in the history (written to the store as a trainer writes them),
    40 of them sending one sample alone, so without a learning signal: the charts cover every
    job from job 1 to the last, drawn in runs, the trainer card counts the jobs without a
    signal, and the jobs table numbers the latest as the history does. It leaves the history
    long: the tests after it do not read the history."""
    serve, url = served
    database = open_database(url)
    try:
        history = JobHistory(database, SCENARIO)
        before = len(history.read(limit=None))
        one = httpx.get(
            f"{serve.base_url}/reef/scenarios/{SCENARIO}/samples",
            params={"limit": 1},
            headers=serve.headers,
        ).json()["samples"][0]
        for number in range(250):
            alone = number % 25 < 4
            sent = [SampleOfJob(one["id"], True, 0.5)] if alone else []
            history.submitted("local", f"history-{number}", sent)
            history.ended("local", f"history-{number}", "finished", {"loss": 1 / (number + 1)})
    finally:
        database.dispose()
    total = before + 250
    sign_in(browser, serve.base_url)
    wait_for(
        browser,
        lambda d: any(
            (c.get_attribute("data-jobs") or "") == str(total)
            for c in d.find_elements(By.CSS_SELECTOR, ".chart svg")
        ),
        f"a chart of all {total} jobs",
        60,
    )
    labels = read(
        browser,
        lambda d: [
            t.text for t in d.find_elements(By.CSS_SELECTOR, ".chart:first-of-type text.axis")
        ],
    )
    assert f"job {total}" in labels, labels
    assert "job 1" in labels, labels
    assert text_of(browser, "#jobs tbody tr td") == str(total)
    card = text_of(browser, '[data-key="no-signal:local"]')
    assert card.startswith(f"40 of {total} finished jobs"), card
    choose(browser, "chart-x", "time")
    wait_for(browser, lambda d: "job 1" not in text_of(d, ".chart"), "the time axis")
    shot(browser, artifacts, "15-whole-run", "#overview")


def test_the_selection_is_exported_as_a_file_in_the_format_chosen(
    with_samples: ServeProcess, browser: WebDriver, tmp_path: Path
) -> None:
    """Every match of a search selected and exported: the browser saves the service's file,
    which holds exactly those samples, as JSON Lines, then as Parquet."""
    serve = with_samples
    signed_in_search(browser, serve.base_url, "ROUND G1")
    click(browser, "select-matching")
    wait_for(browser, lambda d: text_of(d, "#selection-count") == f"{GROUP} selected", "all")
    matching = httpx.get(
        f"{serve.base_url}/reef/scenarios/{SCENARIO}/samples",
        params={"text": "ROUND G1", "limit": 50},
        headers=serve.headers,
    ).json()["samples"]
    expected = {s["id"] for s in matching}
    assert len(expected) == GROUP
    folder = downloads(tmp_path)
    saved = folder / f"{SCENARIO}-selection.jsonl"
    click(browser, "export")
    wait_for(browser, lambda d: saved.exists(), f"{saved} saved", 30)
    wait_for(browser, lambda d: "Exported 4 samples" in text_of(d, "#notice"), "the notice")
    rows = [json.loads(line) for line in saved.read_text().splitlines()]
    assert {r["sample_id"] for r in rows} == expected
    assert all("ROUND G1" in json.dumps(r["trajectory"]).upper() for r in rows)
    pytest.importorskip("pyarrow")
    choose(browser, "export-format", "parquet")
    click(browser, "export")
    parquet = folder / f"{SCENARIO}-selection.parquet"
    wait_for(browser, lambda d: parquet.exists(), f"{parquet} saved", 30)
    import pyarrow.parquet as pq

    assert set(pq.read_table(str(parquet)).column("sample_id").to_pylist()) == expected


def test_a_person_relabels_a_sample_and_the_label_is_kept_with_who_gave_it(
    with_samples: ServeProcess, browser: WebDriver, artifacts: Path
) -> None:
    """A reward typed on the opened sample becomes its label (the list marks it, the page lists
    it with the token's name and the note), and taking it back is kept too."""
    serve = with_samples
    signed_in_search(browser, serve.base_url, "ROUND G0")
    key = attribute_of(browser, '.samples tbody [data-key^="open:"]', "data-key")
    assert key is not None
    sample_id = key.removeprefix("open:")
    click(browser, key)
    wait_for(browser, lambda d: d.find_elements(By.ID, "relabel-reward"), "the relabel form")
    click(browser, "relabel-reward")
    ActionChains(browser).send_keys("0.9").perform()
    click(browser, "relabel-note")
    ActionChains(browser).send_keys("the reply is right", Keys.ENTER).perform()
    wait_for(browser, lambda d: "reward 0.9" in text_of(d, ".labels"), "the label listed")
    line = text_of(browser, ".labels")
    assert "by admin" in line, line
    assert "the reply is right" in line, line
    wait_for(browser, lambda d: "relabelled 0.9" in text_of(d, ".samples tbody"), "the mark")
    shot(browser, artifacts, "16-relabelled", "#samples")
    detail = httpx.get(
        f"{serve.base_url}/reef/scenarios/{SCENARIO}/samples/{sample_id}", headers=serve.headers
    ).json()
    assert detail["sample"]["label"] == 0.9
    assert detail["labels"][-1]["labelled_by"] == "admin"
    click(browser, "relabel-clear")
    wait_for(browser, lambda d: "label taken back" in text_of(d, ".labels"), "taken back")
    wait_for(browser, lambda d: "relabelled" not in text_of(d, ".samples tbody"), "unmarked")


def test_the_tag_and_time_filters_find_the_calls_of_a_round(
    with_samples: ServeProcess, browser: WebDriver, artifacts: Path
) -> None:
    """A round sent with a tag is found by ``name=value``; a time range before it finds none
    of it, one around it finds it (this test runs last: it adds a round)."""
    serve = with_samples
    agent_round(serve.base_url, "g-tagged", tags={"team": "blue"})
    stored = f"{serve.base_url}/reef/scenarios/{SCENARIO}/samples"
    deadline = time.monotonic() + 60
    while (
        httpx.get(stored, params={"tag": "team=blue"}, headers=serve.headers).json()["total"]
        < GROUP
    ):
        assert time.monotonic() < deadline, "the tagged round was not stored"
        time.sleep(0.2)
    sign_in(browser, serve.base_url)
    wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".samples tbody tr"), "samples")
    click(browser, "filter-tag")
    ActionChains(browser).send_keys("team=blue", Keys.ENTER).perform()
    wait_for(browser, lambda d: text_of(d, "#samples-count") == f"{GROUP} match", "the tag")
    shot(browser, artifacts, "18-tag-filter", "#samples")
    previews = (
        "return [...document.querySelectorAll('.samples td.preview')].map((c) => c.textContent)"
    )
    assert all("g-tagged" in p for p in browser.execute_script(previews))
    # A local time the person would pick: a day before now, then a day after.
    set_until = (
        "const d = new Date(Date.now() + arguments[0] * 86400000);"
        "const local = new Date(d.getTime() - d.getTimezoneOffset() * 60000);"
        "document.getElementById('filter-until').value = local.toISOString().slice(0, 16);"
    )
    browser.execute_script(set_until, -1)
    click(browser, "filter-apply")
    wait_for(browser, lambda d: text_of(d, "#samples-count") == "0 match", "nothing before")
    browser.execute_script(set_until, 1)
    click(browser, "filter-apply")
    wait_for(browser, lambda d: text_of(d, "#samples-count") == f"{GROUP} match", "the round")


def test_the_reward_of_each_artifact_is_charted_as_the_quickstart_draws_it(
    with_samples: ServeProcess, browser: WebDriver, artifacts: Path
) -> None:
    """The overview's artifact curve holds every artifact the route counts, numbered in the
    order they first answered, each at the mean reward of the samples it answered."""
    serve = with_samples
    rewards = httpx.get(
        f"{serve.base_url}/reef/scenarios/{SCENARIO}/artifact_rewards", headers=serve.headers
    ).json()
    assert rewards["total"] >= 1, rewards
    assert [a["number"] for a in rewards["artifacts"]] == list(range(1, rewards["total"] + 1))
    sign_in(browser, serve.base_url)
    css = ".artifact-chart svg"
    wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, css), "the artifact curve")
    assert attribute_of(browser, css, "data-jobs") == str(rewards["total"])
    label = attribute_of(browser, css, "aria-label") or ""
    first = rewards["artifacts"][0]["mean_reward"]
    assert label.startswith(f"Mean reward per artifact: {rewards['total']} artifacts"), label
    assert rewards["artifacts"][0]["samples"] > 0
    assert 0.0 <= first <= 1.0
    shot(browser, artifacts, "17-reward-per-artifact", ".chart-controls")


def artifact_rewards(*means: tuple[str, float]) -> dict[str, Any]:
    """An answer of GET .../artifact_rewards: each artifact with its mean reward, numbered in
    the order given, four samples each."""
    artifacts = [
        {"artifact_id": a, "number": n, "samples": 4, "mean_reward": m}
        for n, (a, m) in enumerate(means, 1)
    ]
    return {"scenario": SCENARIO, "artifacts": artifacts, "total": len(artifacts)}


def test_another_scenarios_trainers_are_drawn_beside_this_ones(
    served: tuple[ServeProcess, str], browser: WebDriver
) -> None:
    """With another scenario chosen beside it, each chart draws a line per trainer of both,
    each named after its scenario; the artifact curve numbers its artifacts."""
    serve = served[0]
    browser.get(f"{serve.base_url}/reef/console/")
    wait_for(browser, lambda d: d.find_element(By.ID, "token").is_displayed(), "the page")
    status = httpx.get(f"{serve.base_url}/reef/status", headers=serve.headers).json()
    points = [
        {
            "first": n, "last": n, "jobs": 1, "job_id": f"job-{n}", "ended_at": 1000.0 + n,
            "mean": {"loss": 1 / n}, "low": {"loss": 1 / n}, "high": {"loss": 1 / n},
            "no_signal": 0,
        }
        for n in (1, 2, 3)
    ]  # fmt: skip
    series = {
        "scenario": SCENARIO,
        "trainers": {"local": points},
        "jobs": {"local": 3},
        "no_signal": {"local": 0},
        "metrics": ["loss"],
    }
    other = {**series, "scenario": "other"}
    rewards = artifact_rewards(("first-weights", 0.25), ("second-weights", 0.75))
    drawn = browser.execute_async_script(
        _DRAW_COMPARE, status["scenarios"][0], series, other, rewards
    )
    assert "error" not in drawn, drawn
    assert f"{SCENARIO} · local" in drawn["caption"], drawn
    assert "other · local" in drawn["caption"], drawn
    assert drawn["lines"] == 2, drawn
    assert drawn["beside"] == ["", "other"], drawn
    assert drawn["artifacts"].startswith("Mean reward per artifact: 2 artifacts"), drawn
    assert "artifact 1" in drawn["axis"], drawn
    assert "artifact 2" in drawn["axis"], drawn


def test_the_eval_curve_draws_each_set_beside_the_reward_and_marks_what_was_held_back(
    served: tuple[ServeProcess, str], browser: WebDriver
) -> None:
    """The overview's eval curve (what GET .../evaluations answers: the route is tested on a
    gated run in reef-core's test_evals_gate.py): a line per eval set and one of the mean
    reward, matched by artifact id; the artifact the gate held back drawn hollow, said so."""
    serve = served[0]
    browser.get(f"{serve.base_url}/reef/console/")
    wait_for(browser, lambda d: d.find_element(By.ID, "token").is_displayed(), "the page")
    status = httpx.get(f"{serve.base_url}/reef/status", headers=serve.headers).json()
    series = {"scenario": SCENARIO, "trainers": {}, "jobs": {}, "no_signal": {}, "metrics": []}
    rewards = artifact_rewards(("w1", 0.25), ("w2", 0.5))
    evaluated = [("w1", 0.3, 1.0, True), ("w2", 0.6, 1.0, True), ("w3", 0.1, 0.5, False)]
    evaluations = {
        "scenario": SCENARIO,
        "sets": ["held_out", "format"],
        "artifacts": [
            {
                "trainer": "local", "artifact_id": a, "number": n, "evaluated_at": 1000.0 + n,
                "scores": {"held_out": held_out, "format": fmt}, "served": served_,
                "reason": None if served_ else "held_out: 0.1000 < 0.5800",
            }
            for n, (a, held_out, fmt, served_) in enumerate(evaluated, 1)
        ],
        "total": 3,
    }  # fmt: skip
    drawn = browser.execute_async_script(
        _DRAW_EVALUATIONS, status["scenarios"][0], series, rewards, evaluations
    )
    assert "error" not in drawn, drawn
    assert drawn["lines"] == 3, drawn
    assert drawn["label"].startswith("Eval score per artifact: "), drawn
    # The mean reward ends at w2 (w3 never answered); each set at w3.
    assert "held_out last 0.1 (artifact 3)" in drawn["label"], drawn
    assert "mean reward last 0.5 (artifact 2)" in drawn["label"], drawn
    assert drawn["dots"] == 3 + 3 + 2, drawn
    assert len(drawn["hollow"]) == 2, drawn
    assert all("artifact 3" in t and "(held back by the gate)" in t for t in drawn["hollow"])
    assert "1 held back by the gate" in drawn["hint"], drawn
