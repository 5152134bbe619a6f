// A scenario at a glance: its mode, each trainer (served artifact, buffer, running job, the
// jobs without a learning signal), what did not train and why, the last errors, Agent ECC's
// epoch and seal, and every job's metrics as charts (any stored metric, against the job number
// or the wall time, smoothed or not, a line per trainer); then the latest jobs as a table.

import { lineChart } from "./charts.js";
import { facts, h } from "./dom.js";
import { REASONS, ago, number, short, when } from "./format.js";

/** What the charts show: a metric in each of two charts, the x axis, the smoothing, and the
 * other scenario whose trainers are drawn beside this one's ("" for none). */
export class Charting {
  constructor() {
    this.metrics = ["loss", "reward_mean"];
    this.x = "job";
    this.smoothing = 0;
    this.compare = "";
  }

  choice() {
    return [this.metrics, this.x, this.smoothing, this.compare];
  }

  set(name, value) {
    if (name.startsWith("metric-")) this.metrics[Number(name.slice(7))] = value;
    else if (name === "x") this.x = value;
    else if (name === "smoothing") this.smoothing = Number(value);
    else if (name === "compare") this.compare = value;
  }
}

/** A metric's name as a chart's title says it. */
const METRIC_NAMES = { loss: "Loss", reward_mean: "Mean reward", samples_trained: "Samples trained" };
const metricName = (name) => METRIC_NAMES[name] || name.replaceAll("_", " ");

function chartSelect(id, label, value, options, onchange) {
  return h(
    "div",
    { class: "field" },
    h("label", { for: id }, label),
    h("select", { id, "data-key": id, onchange: (event) => onchange(event.target.value) }, options.map(([v, text]) => h("option", { value: v, selected: String(v) === String(value) }, text))),
  );
}

/** One chart line per trainer of `series`, named after its scenario too when `named`. */
function trainerLines(series, metric, named) {
  return Object.entries(series.trainers).map(([trainer, points]) => ({
    name: named ? `${series.scenario} · ${trainer}` : trainer,
    points: points.map((p) => ({ x: p.last, t: p.ended_at, y: p.mean[metric], low: p.low[metric], high: p.high[metric], first: p.first, last: p.last, label: p.job_id })),
  }));
}

/** The quickstart's curve: each artifact's mean reward (GET .../artifact_rewards), in the
 * order the artifacts first answered. */
function artifactChart(rewards) {
  const points = rewards.artifacts.map((a) => ({ x: a.number, y: a.mean_reward, label: a.artifact_id }));
  const chart = lineChart("Mean reward per artifact", [{ name: "artifacts", points }], {
    unit: "artifact",
    empty: "No sample with a reward names the artifact that answered it yet.",
  });
  const shown = rewards.artifacts.length;
  const more = rewards.total > shown ? ` (the last ${number(shown)} of ${number(rewards.total)})` : "";
  const hint = h("p", { class: "hint" }, `Each artifact (a set of weights, numbered as they first answered) with the mean reward of the samples whose calls it answered${more}.`);
  return h("div", { class: "chart-row artifact-chart" }, chart, hint);
}

/** The eval curve: each evaluated artifact's score on each set (GET .../evaluations), in the
 * order they were evaluated, beside the mean reward of the samples it answered (`rewards`); an
 * artifact the gate held back is drawn hollow (it never answered, so it has no reward). */
function evaluationChart(evaluations, rewards) {
  const trainers = new Set(evaluations.artifacts.map((a) => a.trainer));
  const named = (trainer, name) => (trainers.size > 1 ? `${trainer} · ${name}` : name);
  const note = (a) => (a.served === false ? "held back by the gate" : null);
  const reward = new Map((rewards ? rewards.artifacts : []).map((r) => [r.artifact_id, r.mean_reward]));
  const lines = [];
  for (const trainer of trainers) {
    const own = evaluations.artifacts.filter((a) => a.trainer === trainer);
    for (const set of evaluations.sets) {
      lines.push({ name: named(trainer, set), points: own.map((a) => ({ x: a.number, y: a.scores[set], label: a.artifact_id, note: note(a) })) });
    }
    lines.push({ name: named(trainer, "mean reward"), points: own.map((a) => ({ x: a.number, y: reward.get(a.artifact_id), label: a.artifact_id })) });
  }
  const chart = lineChart("Eval score per artifact", lines, {
    unit: "artifact",
    empty: "No artifact has been evaluated yet: each is when the trainer publishes it.",
  });
  const held = evaluations.artifacts.filter((a) => a.served === false).length;
  const shown = evaluations.artifacts.length;
  const more = evaluations.total > shown ? ` (the last ${number(shown)} of ${number(evaluations.total)})` : "";
  const hint = h(
    "p",
    { class: "hint" },
    `Each artifact numbered as it was evaluated${more}, its score on each eval set beside the mean reward of the samples it answered` +
      (held ? `; ${number(held)} held back by the gate (hollow: never served, so no reward).` : "."),
  );
  return h("div", { class: "chart-row evaluation-chart" }, chart, hint);
}

/** The charts of `series` (GET .../job_series) as `charting` says, with their controls;
 * `others` the other scenarios the token sees, `compared` the series of the one chosen to
 * draw beside it, `rewards` each artifact's mean reward, `evaluations` each evaluated
 * artifact's scores (null: the scenario has no evals). */
function charts(series, charting, actions, others, compared, rewards, evaluations) {
  if (!series) return [];
  const names = [...new Set([...series.metrics, ...(compared ? compared.metrics : [])])];
  if (!names.length) names.push("loss");
  const lines = (metric) => [
    ...trainerLines(series, metric, Boolean(compared)),
    ...(compared ? trainerLines(compared, metric, true) : []),
  ];
  const total = Object.values(series.jobs).reduce((n, c) => n + c, 0);
  const controls = h(
    "div",
    { class: "filters chart-controls", role: "group", "aria-label": "What the charts show" },
    charting.metrics.map((metric, i) =>
      chartSelect(`chart-metric-${i}`, `Chart ${i + 1}`, metric, names.map((n) => [n, metricName(n)]), (v) => actions.chart(`metric-${i}`, v)),
    ),
    chartSelect("chart-x", "Against", charting.x, [["job", "job number"], ["time", "wall time"]], (v) => actions.chart("x", v)),
    chartSelect("chart-smoothing", "Smoothing", charting.smoothing, [[0, "none"], [0.6, "0.6"], [0.9, "0.9"], [0.99, "0.99"]], (v) => actions.chart("smoothing", v)),
    others.length
      ? chartSelect("chart-compare", "Beside", charting.compare, [["", "no other scenario"], ...others.map((n) => [n, n])], (v) => actions.chart("compare", v))
      : null,
    h(
      "span",
      { class: "hint" },
      `${number(total)} finished job${total === 1 ? "" : "s"}, every one drawn` +
        (Object.values(series.trainers).some((points) => points.some((p) => p.jobs > 1)) ? " (a long run in runs of jobs: the line their mean, the band lowest to highest)" : ""),
    ),
  );
  return [
    controls,
    h(
      "div",
      { class: "chart-row" },
      charting.metrics.map((metric) => lineChart(`${metricName(metric)} per job`, lines(metric), { x: charting.x, smoothing: charting.smoothing })),
    ),
    rewards ? artifactChart(rewards) : null,
    evaluations ? evaluationChart(evaluations, rewards) : null,
  ];
}

/**
 * The overview of `scenario` (an entry of GET /reef/status) with its `series` (GET
 * .../job_series) charted as `charting` says, beside `charted.compared` (another scenario's
 * series, or null; `charted.others` the scenarios it may be), `charted.rewards` (GET
 * .../artifact_rewards) and `charted.evaluations` (GET .../evaluations, null without evals).
 * `actions.setMode(mode)` and `actions.train(note)` change it through the API;
 * `actions.chart(name, value)` the charts.
 */
export function overview(scenario, series, charting, actions, charted = { others: [], compared: null, rewards: null, evaluations: null }) {
  const manual = scenario.training_mode === "manual";
  const modes = new Set(scenario.trainers.flatMap((t) => t.supported_training_modes));
  const pending = scenario.trainers.reduce((n, t) => n + (t.pending_instructions || 0), 0);
  const chosen = Math.max(0, ...scenario.trainers.map((t) => t.manual_buffer || 0));
  const note = h("input", { id: "train-note", type: "text", "data-key": "train-note", placeholder: "optional" });
  const modeButton = (mode, label) =>
    h(
      "button",
      {
        type: "button",
        class: "segment",
        "data-key": `mode-${mode}`,
        "aria-pressed": String(scenario.training_mode === mode),
        disabled: !modes.has(mode),
        onclick: () => actions.setMode(mode),
      },
      label,
    );
  return [
    h(
      "div",
      { class: "panel-head" },
      h("h2", { id: "overview-title" }, `Scenario `, h("span", { class: "name" }, scenario.scenario)),
      h(
        "div",
        { class: "mode", role: "group", "aria-label": "Training mode" },
        h("span", { class: "label" }, "Training mode"),
        modeButton("auto", "Auto"),
        modeButton("manual", "Manual"),
      ),
    ),
    h(
      "p",
      { class: "hint" },
      manual
        ? "Manual: jobs train only the samples chosen into the manual buffer, when a TRAIN instruction is queued."
        : "Auto: each trainer trains its buffer whenever it holds a job's worth of samples.",
    ),
    h(
      "form",
      {
        class: "train",
        onsubmit: (event) => {
          event.preventDefault();
          actions.train(note.value.trim());
          note.value = "";
        },
      },
      h("label", { for: "train-note" }, "Note for the instruction"),
      note,
      h(
        "button",
        { type: "submit", class: "primary", "data-key": "train", disabled: !manual },
        "Queue TRAIN",
      ),
      h(
        "span",
        { class: "hint" },
        manual
          ? `${chosen} chosen sample${chosen === 1 ? "" : "s"}; ${pending} instruction${pending === 1 ? "" : "s"} waiting.`
          : "Switch to manual to train a chosen set of samples.",
      ),
    ),
    h(
      "div",
      { class: "glance" },
      scenario.trainers.map((t) => trainerCard(t, series, manual)),
    ),
    charts(series, charting, actions, charted.others, charted.compared, charted.rewards, charted.evaluations),
    h("div", { class: "columns" }, notTrained(scenario), lastErrors(scenario)),
  ];
}

/** What a trainer's next job holds, said so that the manual buffer's count adds up. */
function bufferLine(trainer, manual) {
  const ready = trainer.ready_samples;
  const size = trainer.job_samples || 0;
  if (ready === null || ready === undefined) return "–";
  if (!manual) return `${number(ready)} of ${number(size)} samples for the next job`;
  const chosen = trainer.manual_buffer || 0;
  const rest = ready - chosen;
  return rest > 0
    ? `${number(ready)} samples for the next TRAIN: the ${number(chosen)} chosen and ${number(rest)} more of their groups (a chosen sample trains with its whole group)`
    : `${number(ready)} samples for the next TRAIN`;
}

function trainerCard(trainer, series, manual) {
  const running = trainer.running_job;
  const size = trainer.job_samples || 0;
  const ready = trainer.ready_samples;
  const share = manual ? (ready ? 1 : 0) : size && ready !== null ? Math.min(1, ready / size) : 0;
  const ended = series ? series.jobs[trainer.trainer] || 0 : null;
  const flat = series ? series.no_signal[trainer.trainer] || 0 : null;
  const bar = h("span", { class: "fill" });
  bar.style.width = `${Math.round(share * 100)}%`; // CSSOM: allowed by the page's policy
  const ecc = trainer.extensions && trainer.extensions.ecc;
  return h(
    "article",
    { class: "card", "aria-label": `Trainer ${trainer.trainer}`, "data-trainer": trainer.trainer },
    h(
      "h3",
      {},
      `Trainer `,
      h("span", { class: "name" }, trainer.trainer),
      " ",
      h(
        "span",
        { class: `badge ${running ? "busy" : "idle"}` },
        trainer.snapshot_at === null ? "not started" : running ? "training" : "idle",
      ),
    ),
    facts([
      ["Served artifact", h("code", { title: trainer.served_artifact || "" }, short(trainer.served_artifact, 26))],
      [
        "Buffer",
        h(
          "div",
          { class: "buffer" },
          h("span", { class: "bar", "aria-hidden": "true" }, bar),
          h("span", {}, bufferLine(trainer, manual)),
        ),
      ],
      [
        "Running job",
        running
          ? h(
              "span",
              {},
              h("code", {}, short(running.job_id, 30)),
              ` · ${(running.sample_ids || []).length} samples`,
            )
          : "none",
      ],
      ["Jobs ended", number(trainer.jobs_ended)],
      ended
        ? [
            "No learning signal",
            h(
              "span",
              { class: flat ? "warn-text" : null, "data-key": `no-signal:${trainer.trainer}` },
              `${number(flat)} of ${number(ended)} finished jobs`,
              flat ? " (every group in them scored alike: advantage 0, loss 0, the weights unmoved)" : "",
            ),
          ]
        : null,
      ["Manual buffer", `${number(trainer.manual_buffer)} chosen`],
      ["Instructions waiting", number(trainer.pending_instructions)],
      [
        "Last heard",
        h("span", { "data-ago": trainer.snapshot_at, "data-heard": true, "data-silent-after": 30 }, ago(trainer.snapshot_at)),
      ],
      ecc && ["ECC epoch", eccEpoch(ecc.epoch)],
      ecc && ["Last seal", eccSeal(ecc.last_seal)],
    ]),
  );
}

function eccEpoch(epoch) {
  return epoch ? `${epoch.index} (grader ${epoch.version_id})` : "none published";
}

function eccSeal(seal) {
  if (!seal) return "none yet";
  const groups = Object.entries(seal.groups || {})
    .map(([outcome, n]) => `${n} ${outcome}`)
    .join(", ");
  return h(
    "span",
    {},
    h("code", {}, short(seal.batch_id, 26)),
    ` · epoch ${seal.epoch ? seal.epoch.index : "–"}`,
    groups ? ` · ${groups}` : "",
    seal.shortfall ? ` · short by ${seal.shortfall}` : "",
    seal.failed ? h("span", { class: "warn" }, ` · failed: ${seal.failed}`) : "",
  );
}

function notTrained(scenario) {
  const rows = [];
  for (const trainer of scenario.trainers) {
    for (const [reason, count] of Object.entries(trainer.drops || {})) {
      rows.push([trainer.trainer, reason, count]);
    }
    const pipeline = trainer.pipeline || {};
    if (pipeline.stale_samples) rows.push([trainer.trainer, "stale_now", pipeline.stale_samples]);
    if (pipeline.held_with_stale_group)
      rows.push([trainer.trainer, "held_with_stale_group", pipeline.held_with_stale_group]);
    if (pipeline.refused_samples) rows.push([trainer.trainer, "refused_now", pipeline.refused_samples]);
    for (const [reason, count] of Object.entries(pipeline.ending_records || {})) {
      rows.push([trainer.trainer, reason, count, "decided; counted when the next job commits"]);
    }
  }
  for (const [reason, count] of Object.entries(scenario.drops || {})) {
    rows.push(["(scenario)", reason, count]);
  }
  return h(
    "div",
    { class: "block" },
    h("h3", {}, "What did not train, and why"),
    rows.length === 0
      ? h("p", { class: "empty" }, "Nothing was left out.")
      : h(
          "table",
          { class: "table compact" },
          h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Trainer"), h("th", { scope: "col" }, "Reason"), h("th", { scope: "col", class: "num" }, "Count"))),
          h(
            "tbody",
            {},
            rows.map(([trainer, reason, count, pending]) =>
              h(
                "tr",
                {},
                h("td", {}, trainer),
                h(
                  "td",
                  {},
                  h("span", { class: "reason" }, reason.replaceAll("_", " ")),
                  REASONS[reason] ? h("span", { class: "why" }, ` – ${REASONS[reason]}`) : "",
                  pending ? h("span", { class: "why" }, ` (${pending})`) : "",
                ),
                h("td", { class: "num" }, number(count)),
              ),
            ),
          ),
        ),
    h("p", { class: "hint" }, `Record bodies held: ${number(scenario.bodies_held)}, evicted: ${number(scenario.evicted_bodies)}.`),
  );
}

function lastErrors(scenario) {
  const errors = scenario.trainers
    .flatMap((t) => (t.last_errors || []).map((e) => ({ ...e, trainer: t.trainer })))
    .sort((a, b) => (b.at || 0) - (a.at || 0));
  return h(
    "div",
    { class: "block" },
    h("h3", {}, "Last errors"),
    errors.length === 0
      ? h("p", { class: "empty" }, "No errors.")
      : h(
          "ul",
          { class: "errors" },
          errors.map((e) =>
            h("li", {}, h("span", { class: "when" }, `${when(e.at)} · ${e.trainer} · ${e.where}`), h("span", { class: "error-text" }, e.error)),
          ),
        ),
  );
}

/** The latest `jobs` (GET .../jobs) as a table, newest first; a job opens its page. */
export function jobsTable(jobs, series, actions) {
  const latest = jobs.slice(-12).reverse();
  const total = series ? Object.values(series.jobs).reduce((n, c) => n + c, 0) : null;
  const flat = series ? Object.values(series.no_signal).reduce((n, c) => n + c, 0) : null;
  return [
    h(
      "div",
      { class: "panel-head" },
      h("h2", { id: "jobs-title" }, "Jobs"),
      h("span", { class: "hint" }, total === null ? `the latest ${latest.length}` : `the latest ${latest.length}; ${number(total)} finished, ${number(flat)} without a learning signal`),
    ),
    latest.length === 0
      ? h("p", { class: "empty" }, "No job yet.")
      : h(
          "div",
          { class: "scroll", "data-scroll": "jobs" },
          h(
            "table",
            { class: "table" },
            h(
              "thead",
              {},
              h(
                "tr",
                {},
                [["#", "num"], ["Job"], ["Trainer"], ["Outcome"], ["Trained / consumed", "num"], ["Loss", "num"], ["Mean reward", "num"], ["TRAIN note"], ["Ended"]].map(([c, kind]) =>
                  h("th", { scope: "col", class: kind || null }, c),
                ),
              ),
            ),
            h(
              "tbody",
              {},
              latest.map((j) =>
                h(
                  "tr",
                  {},
                  h("td", { class: "num" }, number(j.number)),
                  h("td", {}, h("button", { type: "button", class: "link", "data-key": `job:${j.trainer}:${j.job_id}`, title: `Open job ${j.job_id}`, onclick: () => actions.openJob(j.trainer, j.job_id) }, short(j.job_id, 30))),
                  h("td", {}, j.trainer),
                  h(
                    "td",
                    {},
                    h("span", { class: `badge ${j.event || "busy"}` }, j.event || "running"),
                    j.signal === false ? [" ", h("span", { class: "badge released", title: "every group of it scored alike: advantage 0, nothing learnt" }, "no learning signal")] : "",
                    j.error ? h("span", { class: "why" }, ` ${j.error}`) : "",
                  ),
                  h("td", { class: "num", title: j.event === "failed" ? "consumed by a failed job: nothing it sent trained" : null }, `${j.trained} / ${j.consumed}`),
                  h("td", { class: "num" }, number(j.metrics.loss)),
                  h("td", { class: "num" }, number(j.metrics.mean_reward ?? j.reward_mean)),
                  h("td", { class: "note" }, j.instruction_id ? (j.instruction_text ? `“${j.instruction_text}”` : "(no note)") : "–"),
                  h("td", {}, when(j.ended_at)),
                ),
              ),
            ),
          ),
        ),
  ];
}
