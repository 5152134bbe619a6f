// A scenario at a glance: its mode, each trainer (served artifact, buffer, running job),
// what did not train and why, the last errors, Agent ECC's epoch and seal, and the loss and
// reward of each job as charts; then the latest jobs as a table.

import { lineChart } from "./charts.js";
import { facts, h } from "./dom.js";
import { REASONS, ago, number, short, when } from "./format.js";

/**
 * The overview of `scenario` (an entry of GET /reef/status) with its `jobs` (GET .../jobs).
 * `actions.setMode(mode)` and `actions.train(note)` change it through the API.
 */
export function overview(scenario, jobs, actions) {
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
      scenario.trainers.map((t) => trainerCard(t, jobs)),
      lineChart("Loss per job", jobPoints(jobs, (j) => j.metrics.loss), "line-loss"),
      lineChart("Mean reward per job", jobPoints(jobs, (j) => j.metrics.mean_reward ?? j.reward_mean), "line-reward"),
    ),
    h("div", { class: "columns" }, notTrained(scenario), lastErrors(scenario)),
  ];
}

function jobPoints(jobs, value) {
  return jobs
    .filter((j) => j.event === "finished")
    .map((j, i) => ({ x: i + 1, y: value(j), label: j.job_id }));
}

function trainerCard(trainer, jobs) {
  const running = trainer.running_job;
  const job = running && jobs.find((j) => j.job_id === running.job_id);
  const size = trainer.job_samples || 0;
  const ready = trainer.ready_samples;
  const share = size && ready !== null ? Math.min(1, ready / size) : 0;
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
          h(
            "span",
            {},
            ready === null ? "–" : `${number(ready)} of ${number(size)} samples for the next job`,
          ),
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
              job && job.submitted_at ? [" · since ", h("span", { "data-ago": job.submitted_at }, ago(job.submitted_at))] : "",
            )
          : "none",
      ],
      ["Jobs ended", number(trainer.jobs_ended)],
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

/** The latest jobs as a table, newest first. */
export function jobsTable(jobs) {
  const latest = jobs.slice(-12).reverse();
  return [
    h("div", { class: "panel-head" }, h("h2", { id: "jobs-title" }, "Jobs"), h("span", { class: "hint" }, `${jobs.length} in the history shown`)),
    latest.length === 0
      ? h("p", { class: "empty" }, "No job yet.")
      : h(
          "div",
          { class: "scroll" },
          h(
            "table",
            { class: "table" },
            h(
              "thead",
              {},
              h(
                "tr",
                {},
                [["Job"], ["Trainer"], ["Outcome"], ["Trained / consumed", "num"], ["Loss", "num"], ["Mean reward", "num"], ["Ended"]].map(([c, kind]) =>
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
                  h("td", {}, h("code", { title: j.job_id }, short(j.job_id, 30))),
                  h("td", {}, j.trainer),
                  h("td", {}, h("span", { class: `badge ${j.event || "busy"}` }, j.event || "running"), j.error ? h("span", { class: "why" }, ` ${j.error}`) : ""),
                  h("td", { class: "num", title: j.event === "failed" ? "consumed by a failed job: nothing it sent trained" : null }, `${j.trained} / ${j.consumed}`),
                  h("td", { class: "num" }, number(j.metrics.loss)),
                  h("td", { class: "num" }, number(j.metrics.mean_reward ?? j.reward_mean)),
                  h("td", {}, when(j.ended_at)),
                ),
              ),
            ),
          ),
        ),
  ];
}
