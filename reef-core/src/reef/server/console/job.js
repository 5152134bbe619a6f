// One job opened (GET .../jobs/{trainer}/{job id}): how it ended, its metrics, whether it had a
// learning signal, the TRAIN note it answered, what Agent ECC sealed, and every sample it
// consumed, each opening its sample page (which links back here).

import { facts, h } from "./dom.js";
import { number, short, when } from "./format.js";

function json(value) {
  return h("pre", { class: "json" }, JSON.stringify(value, null, 2));
}

/** What a job's learning signal means, said once. */
export function signalLine(signal) {
  if (signal === false) return "none: every group of it scored alike, so each advantage was 0 (under a group-relative objective), the loss 0, and the weights stayed as they were";
  if (signal === true) return "yes: some group of it scored unlike";
  return "unknown: its samples carry no reward (SFT, tasks)";
}

/** The opened job; `actions.open(id)` opens one of its samples, `actions.close()` closes it. */
export function jobView(detail, actions) {
  const j = detail.job;
  const metrics = Object.entries(j.metrics || {});
  return [
    h(
      "div",
      { class: "panel-head" },
      h("h2", { id: "job-title" }, `Job ${number(j.number)} `, h("span", { class: "name", title: j.job_id }, short(j.job_id, 30))),
      h("button", { type: "button", class: "quiet", "data-key": "close-job", onclick: actions.close }, "Close"),
    ),
    facts([
      ["Trainer", j.trainer],
      ["Outcome", h("span", {}, h("span", { class: `badge ${j.event || "busy"}` }, j.event || "running"), j.error ? ` ${j.error}` : "")],
      ["Learning signal", signalLine(j.signal)],
      ["Trained / consumed", `${j.trained} / ${j.consumed}${j.event === "failed" ? " (failed: what it sent was consumed, not trained)" : ""}`],
      ["Mean reward", number(j.reward_mean)],
      ["TRAIN instruction", j.instruction_id ? `${j.instruction_id}${j.instruction_text ? ` · “${j.instruction_text}”` : " · no note"}` : "none (an automatic job)"],
      ["Submitted", when(j.submitted_at)],
      ["Ended", when(j.ended_at)],
      ["Artifact made", j.artifact_id ? h("code", { title: j.artifact_id }, short(j.artifact_id, 40)) : j.event === "finished" ? "not published yet (or before the history kept it)" : "none: only a finished job makes weights"],
    ]),
    h(
      "div",
      { class: "block" },
      h("h3", {}, "Metrics"),
      metrics.length === 0
        ? h("p", { class: "empty" }, "None reported.")
        : h("table", { class: "table compact" }, h("tbody", {}, metrics.map(([name, value]) => h("tr", {}, h("th", { scope: "row" }, name), h("td", { class: "num" }, number(value)))))),
    ),
    j.extensions && j.extensions.ecc ? h("div", { class: "block" }, h("h3", {}, "Agent ECC seal"), json(j.extensions.ecc)) : null,
    h(
      "div",
      { class: "block" },
      h("h3", {}, `Samples it consumed · ${detail.samples.length}`),
      detail.samples.length === 0
        ? h("p", { class: "empty" }, "The history holds none of its samples.")
        : h(
            "table",
            { class: "table compact job-samples" },
            h("thead", {}, h("tr", {}, ["Sample", "Group", "Reward", "Sent"].map((c) => h("th", { scope: "col" }, c)))),
            h(
              "tbody",
              {},
              detail.samples.map((s) =>
                h(
                  "tr",
                  {},
                  h("td", {}, h("button", { type: "button", class: "link", "data-key": `job-sample:${s.sample_id}`, onclick: () => actions.open(s.sample_id) }, short(s.sample_id, 26))),
                  h("td", { title: s.group_id || "" }, s.group || (s.group_id ? short(s.group_id, 18) : "–")),
                  h("td", { class: "num" }, number(s.reward)),
                  h("td", {}, s.sent ? "to the component" : "retired before it"),
                ),
              ),
            ),
          ),
    ),
  ];
}
