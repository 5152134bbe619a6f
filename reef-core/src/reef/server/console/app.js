// The Reef console: signs in, follows the service live (it polls), and draws the chosen
// scenario's overview, jobs, samples and the opened sample. Every change goes through the
// service's HTTP API (docs/console.md); the page holds no data of its own.

import { ApiFailure, api, setToken, token } from "./api.js";
import { h, replace } from "./dom.js";
import { ago } from "./format.js";
import { jobView } from "./job.js";
import { Charting, jobsTable, overview } from "./overview.js";
import { sampleView } from "./sample.js";
import { Browsing, sampleBrowser } from "./samples.js";

/** How often the page asks the service for news, while the tab is visible. */
const POLL_MS = 2000;
/** The most points a chart draws of each trainer's jobs (a longer run is drawn in runs). */
const CHART_POINTS = 400;

const $ = (id) => document.getElementById(id);

const state = {
  status: null,
  scenario: null,
  jobs: [],
  page: null,
  buffers: null,
  openId: null,
  openJob: null, // [trainer, job id] of the job page shown
  detail: null,
  job: null,
  series: null,
  seriesFor: null, // the jobs ended when the series was read
  rewards: null, // each artifact's mean reward, read with the series
  evaluations: null, // each evaluated artifact's scores, read when a new result was measured
  evaluatedFor: null,
  compared: null, // the series of the scenario charted beside, read when its jobs ended
  comparedFor: null,
  charting: new Charting(),
  browsing: new Browsing(),
  drawn: {}, // what each section shows now, to redraw only what changed
  timer: null,
  busy: false,
};

// -- where the person is: #/<scenario>[/sample/<id> | /job/<trainer>/<id>] --------------------

function readLocation() {
  const parts = location.hash.replace(/^#\/?/, "").split("/");
  const scenario = parts[0] ? decodeURIComponent(parts[0]) : null;
  const openId = parts[1] === "sample" && parts.length > 2 ? decodeURIComponent(parts.slice(2).join("/")) : null;
  const openJob = parts[1] === "job" && parts.length > 3 ? [decodeURIComponent(parts[2]), decodeURIComponent(parts.slice(3).join("/"))] : null;
  if (scenario !== state.scenario) {
    state.browsing = new Browsing();
    state.drawn = {};
    state.series = null;
    state.seriesFor = null;
    state.rewards = null;
    state.evaluations = null;
    state.evaluatedFor = null;
    state.compared = null;
    state.comparedFor = null;
    state.charting.compare = "";
  }
  state.scenario = scenario;
  state.openId = openId;
  state.openJob = openJob;
  if (!openId) state.detail = null;
  if (!openJob) state.job = null;
}

function go(scenario, openId, openJob = null) {
  let hash = `#/${encodeURIComponent(scenario)}`;
  if (openId) hash += `/sample/${encodeURIComponent(openId)}`;
  else if (openJob) hash += `/job/${encodeURIComponent(openJob[0])}/${encodeURIComponent(openJob[1])}`;
  if (location.hash !== hash) history.pushState(null, "", hash);
  readLocation();
}

// -- messages ---------------------------------------------------------------------------------

function notice(message, kind = "info") {
  const element = $("notice");
  element.hidden = false;
  element.className = `notice ${kind}`;
  element.textContent = message;
}

function live(message, kind) {
  const element = $("live");
  element.className = `live ${kind}`;
  element.textContent = message;
}

function showSignIn(reason) {
  $("console").hidden = true;
  $("sign-in").hidden = false;
  $("sign-out").hidden = !token();
  $("sign-in-reason").textContent = reason;
  replace($("scenario-tabs"));
  state.drawn = {}; // whatever was drawn is drawn again after the next sign-in
  live("Signed out", "off");
  $("token").focus();
}

function failed(error) {
  if (error instanceof ApiFailure && error.status === 401) {
    const had = token();
    setToken(null);
    showSignIn(had ? `The service refused that token: ${error.message}.` : "This service needs a bearer token with the admin scope.");
    return;
  }
  if (error instanceof ApiFailure && error.status === 403 && !state.status) {
    showSignIn(`This token may not read the scenarios: ${error.message}.`);
    return;
  }
  live(`Not updated: ${error.message}`, "error");
}

// -- reading the service ----------------------------------------------------------------------

async function refresh() {
  if (state.busy) return;
  state.busy = true;
  try {
    state.status = await api.status();
    $("sign-in").hidden = true;
    $("console").hidden = false;
    $("sign-out").hidden = !token();
    const names = state.status.scenarios.map((s) => s.scenario);
    if (!names.includes(state.scenario)) {
      if (names.length === 0) {
        replace($("overview"), h("h2", { id: "overview-title" }, "No scenario"), h("p", {}, "This token may see no scenario of this service."));
        return;
      }
      go(names[0], null);
    }
    drawTabs(names);
    const name = state.scenario;
    const browsing = state.browsing;
    const asked = browsing.key();
    // The series (every job of the run, in runs) is read again only when a job ended since:
    // the trainers' counts moved, or the latest jobs read last time changed.
    const latest = state.jobs.map((j) => [j.job_id, j.event]);
    const ended = JSON.stringify([current().trainers.map((t) => t.jobs_ended), latest]);
    const beside = names.includes(state.charting.compare) ? state.charting.compare : "";
    const besideEnded = beside ? JSON.stringify([beside, state.status.scenarios.find((s) => s.scenario === beside).trainers.map((t) => t.jobs_ended)]) : null;
    const fresh = state.seriesFor !== ended;
    // The eval curve is read again when the status shows a result newer than it.
    const evaluated = current().evaluations;
    const evaluatedFor = evaluated ? JSON.stringify((evaluated.results || []).slice(-1)) : null;
    const [jobs, page, buffers, detail, job, series, rewards, compared, evaluations] = await Promise.all([
      api.jobs(name, { limit: 12 }),
      api.samples(name, browsing.parameters()),
      api.buffer(name),
      state.openId ? api.sample(name, state.openId).catch((e) => e) : null,
      state.openJob ? api.job(name, ...state.openJob).catch((e) => e) : null,
      fresh ? api.series(name, CHART_POINTS) : state.series,
      fresh || !state.rewards ? api.artifactRewards(name) : state.rewards,
      !beside ? null : state.comparedFor === besideEnded ? state.compared : api.series(beside, CHART_POINTS),
      !evaluated ? null : state.evaluatedFor === evaluatedFor ? state.evaluations : api.evaluations(name),
    ]);
    state.jobs = jobs.jobs;
    state.page = page;
    state.buffers = buffers;
    state.series = series;
    state.seriesFor = ended;
    state.rewards = rewards;
    state.compared = compared;
    state.comparedFor = besideEnded;
    state.evaluations = evaluations;
    state.evaluatedFor = evaluatedFor;
    browsing.counted(page, asked);
    browsing.cursor = Math.min(browsing.cursor, Math.max(0, page.samples.length - 1));
    browsing.saw(page.samples);
    if (detail instanceof ApiFailure) {
      notice(`Sample ${state.openId}: ${detail.message}`, "error");
      go(name, null);
    } else {
      state.detail = detail;
      if (detail) browsing.saw([detail.sample]);
    }
    if (job instanceof ApiFailure) {
      notice(`Job ${state.openJob[1]}: ${job.message}`, "error");
      go(name, null);
    } else {
      state.job = job;
    }
    draw();
    tick();
    live(`Live · updated ${new Date().toLocaleTimeString("en-GB")}`, "on");
  } catch (error) {
    failed(error);
  } finally {
    state.busy = false;
  }
}

function schedule() {
  clearTimeout(state.timer);
  state.timer = setTimeout(async () => {
    if (document.hidden) {
      live("Paused while the tab is hidden", "off");
    } else if ($("sign-in").hidden) {
      await refresh();
    }
    schedule();
  }, POLL_MS);
}

// -- drawing ----------------------------------------------------------------------------------

function current() {
  return state.status.scenarios.find((s) => s.scenario === state.scenario);
}

/** Redraw `section` only when what it shows changed (a live refresh keeps focus and scroll). */
function section(id, shown, build) {
  const key = JSON.stringify(shown);
  if (state.drawn[id] === key) return;
  state.drawn[id] = key;
  replace($(id), build());
}

function drawTabs(names) {
  section("scenario-tabs", [names, state.scenario], () =>
    names.map((n) =>
      h("a", { href: `#/${encodeURIComponent(n)}`, class: "tab", "data-key": `tab:${n}`, "aria-current": n === state.scenario ? "page" : null }, n),
    ),
  );
}

/** Bring every "… ago" up to date in place, and mark a trainer not heard from for long. */
function tick() {
  for (const trainer of current().trainers) {
    const card = document.querySelector(`[data-trainer="${CSS.escape(trainer.trainer)}"] [data-heard]`);
    if (card) card.dataset.ago = trainer.snapshot_at ?? "";
  }
  for (const element of document.querySelectorAll("[data-ago]")) {
    const at = Number(element.dataset.ago) || null;
    element.textContent = ago(at);
    const silent = element.dataset.silentAfter;
    if (silent) element.classList.toggle("warn", at !== null && Date.now() / 1000 - at > Number(silent));
  }
}

function draw() {
  const scenario = current();
  // A trainer writes its snapshot at every step: the time it wrote it is shown by the ticker
  // (tick), so that the overview is redrawn only when what it shows changed.
  const steady = { ...scenario, trainers: scenario.trainers.map((t) => ({ ...t, snapshot_at: null })) };
  const charting = state.charting;
  const others = state.status.scenarios.map((s) => s.scenario).filter((n) => n !== state.scenario);
  const charted = { others, compared: charting.compare ? state.compared : null, rewards: state.rewards, evaluations: state.evaluations };
  section("overview", [steady, state.series, charting.choice(), charted], () => overview(scenario, state.series, charting, actions, charted));
  section("jobs", [state.jobs, state.series && state.series.jobs], () => jobsTable(state.jobs, state.series, actions));
  const browsing = state.browsing;
  section(
    "samples",
    [state.page, state.buffers, [...browsing.selected], browsing.filters, browsing.at, browsing.total, browsing.keep, browsing.cursor],
    () => sampleBrowser(scenario, browsing, state.page, state.buffers, actions),
  );
  const open = $("sample");
  const shown = state.detail || state.job;
  open.hidden = !shown;
  $("browse").classList.toggle("with-detail", Boolean(shown));
  if (state.detail) {
    section("sample", ["sample", state.detail, browsing.selected.has(state.detail.sample.id)], () =>
      sampleView(state.detail, browsing.selected.has(state.detail.sample.id), actions),
    );
  } else if (state.job) {
    section("sample", ["job", state.job], () => jobView(state.job, actions));
  } else {
    state.drawn.sample = undefined;
  }
}

// -- what the person does ---------------------------------------------------------------------

async function act(work, done, kind = "ok") {
  state.browsing.countedAt = 0; // what the person changed may change the count
  try {
    await work();
    notice(done, kind);
  } catch (error) {
    if (error instanceof ApiFailure && error.status === 401) return failed(error);
    notice(error.message, "error");
  }
  await refresh();
}

function requestId() {
  const random = crypto.getRandomValues(new Uint32Array(1))[0].toString(36);
  return `console-${Date.now().toString(36)}-${random}`;
}

/** How many of `ids` were last seen stale, said as a warning ("" when none). */
function staleWarning(ids) {
  const stale = ids.filter((id) => state.browsing.stale.has(id)).length;
  if (stale === 0) return "";
  const them = stale === ids.length ? (stale === 1 ? "It is" : "All of them are") : `${stale} of them ${stale === 1 ? "is" : "are"}`;
  return ` ${them} stale (made by weights too many versions old): a stale sample does not train, and stays in the manual buffer until taken out.`;
}

const MODE_DONE = {
  manual:
    "the samples that waited for the next automatic job moved into the manual buffer; choose more or take some out, then queue TRAIN.",
  auto: "each trainer now trains its buffer whenever it holds a job's worth of samples.",
};

const actions = {
  setMode: (mode) => act(() => api.setMode(state.scenario, mode), `Training mode of ${state.scenario} is now ${mode}: ${MODE_DONE[mode]}`),
  train: (note) => {
    const id = requestId();
    return act(() => api.train(state.scenario, id, note), `TRAIN instruction ${id} queued: the trainer takes the manual buffer at its next step.`);
  },
  insert: (ids) => {
    const warning = staleWarning(ids);
    return act(
      async () => {
        await api.insert(state.scenario, ids, state.browsing.filters.trainer || undefined);
        state.browsing.selected.clear();
      },
      `Added ${ids.length} sample${ids.length === 1 ? "" : "s"} to the manual buffer.${warning}`,
      warning ? "warn" : "ok",
    );
  },
  remove: (ids) =>
    act(async () => {
      await api.remove(state.scenario, ids, state.browsing.filters.trainer || undefined);
      state.browsing.selected.clear();
    }, `Took ${ids.length} sample${ids.length === 1 ? "" : "s"} out of the manual buffer.`),
  relabel: (id, rewardText, note) => {
    let reward = null;
    if (rewardText !== null) {
      reward = rewardText === "" ? NaN : Number(rewardText);
      if (!Number.isFinite(reward)) return notice("Type the reward to give the sample: a number.", "error");
    }
    const done = reward === null ? `Sample ${id}: label taken back; it trains with its own reward again.` : `Sample ${id} now trains with reward ${reward} in its next job.`;
    return act(() => api.relabel(state.scenario, id, reward, note), done);
  },
  exportFormat: (format) => {
    state.browsing.exportFormat = format;
    draw();
  },
  exportSelection: (ids, format) =>
    act(async () => {
      const { blob, filename } = await api.exportSelection(state.scenario, ids, format);
      const link = document.createElement("a");
      link.href = URL.createObjectURL(blob);
      link.download = filename;
      link.click();
      setTimeout(() => URL.revokeObjectURL(link.href), 60000);
    }, `Exported ${ids.length} sample${ids.length === 1 ? "" : "s"} (${{ parquet: "Parquet", hf: "a Hugging Face datasets folder, zipped" }[format] || "JSON Lines"}): your browser saves the file.`),
  clear: () => {
    state.browsing.selected.clear();
    draw();
  },
  toggle: (id, on) => {
    if (on) state.browsing.selected.add(id);
    else state.browsing.selected.delete(id);
    draw();
  },
  filter: (name, value) => {
    state.browsing.refilter(name, value);
    refresh();
  },
  filters: (named) => {
    for (const [name, value] of Object.entries(named)) state.browsing.refilter(name, value);
    refresh();
  },
  keep: (on) => {
    state.browsing.keep = on;
    draw();
  },
  selectMatching: () =>
    act(async () => {
      // Every match, walked a page of 200 at a time (the count bounds it at 10,000).
      const browsing = state.browsing;
      const query = { ...browsing.filterParameters(), limit: 200, count: "false" };
      let after;
      do {
        const page = await api.samples(state.scenario, { ...query, after });
        page.samples.forEach((s) => browsing.selected.add(s.id));
        after = page.next;
      } while (after);
    }, "Selected every sample that matches the filters."),
  next: () => {
    const b = state.browsing;
    if (!state.page || !state.page.next) return;
    b.at = { after: state.page.next };
    b.pageNumber = b.pageNumber === null ? null : b.pageNumber + 1;
    b.cursor = 0;
    refresh();
  },
  previous: () => {
    const b = state.browsing;
    if (!state.page || !state.page.previous) return;
    b.at = { before: state.page.previous };
    b.pageNumber = b.pageNumber === null ? null : Math.max(1, b.pageNumber - 1);
    b.cursor = 0;
    refresh();
  },
  first: () => {
    Object.assign(state.browsing, { at: {}, pageNumber: 1, cursor: 0 });
    refresh();
  },
  last: () => {
    const b = state.browsing;
    const pages = b.exact ? b.pages() : null;
    Object.assign(b, { at: { last: true }, pageNumber: pages, cursor: 0 });
    refresh();
  },
  chart: (name, value) => {
    state.charting.set(name, value);
    if (name === "compare") refresh(); // the other scenario's series is read first
    else draw();
  },
  openJob: async (trainer, id) => {
    go(state.scenario, null, [trainer, id]);
    await refresh();
    const title = $("job-title");
    if (title) {
      title.tabIndex = -1;
      title.focus();
    }
  },
  open: async (id) => {
    go(state.scenario, id);
    await refresh();
    const title = $("sample-title");
    if (title) {
      title.tabIndex = -1;
      title.focus();
    }
  },
  close: () => {
    const id = state.openId;
    state.job = null;
    go(state.scenario, null);
    draw();
    const opener = document.querySelector(`[data-key="${CSS.escape(`open:${id}`)}"]`);
    if (opener) opener.focus();
  },
};

// -- the keyboard: j/k move along the sample list, x selects, o opens -----------------------

document.addEventListener("keydown", (event) => {
  const target = event.target;
  if (event.ctrlKey || event.metaKey || event.altKey || !state.page || $("console").hidden) return;
  if (target instanceof HTMLElement && target.closest("input, select, textarea, [contenteditable]")) return;
  const browsing = state.browsing;
  const rows = state.page.samples;
  if (!rows.length) return;
  const here = rows[Math.min(browsing.cursor, rows.length - 1)];
  const key = event.key.toLowerCase();
  if (key === "j" || key === "k") {
    browsing.cursor = Math.max(0, Math.min(rows.length - 1, browsing.cursor + (key === "j" ? 1 : -1)));
    draw();
    const row = document.querySelector(`.samples tr[data-row="${browsing.cursor}"]`);
    if (row) row.scrollIntoView({ block: "nearest" });
  } else if (key === "x") {
    actions.toggle(here.id, !browsing.selected.has(here.id));
  } else if (key === "o") {
    actions.open(here.id);
  } else {
    return;
  }
  event.preventDefault();
});

// -- start ------------------------------------------------------------------------------------

$("sign-in-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const value = $("token").value.trim();
  $("token").value = "";
  setToken(value);
  state.status = null;
  refresh();
});

$("sign-out").addEventListener("click", () => {
  setToken(null);
  state.status = null;
  showSignIn("Signed out. The token was removed from this tab.");
});

window.addEventListener("hashchange", () => {
  readLocation();
  state.drawn = {};
  refresh();
});

document.addEventListener("visibilitychange", () => {
  if (!document.hidden) refresh();
});

readLocation();
refresh().then(schedule);
