// One sample opened: its trajectory turn by turn (messages, tool calls, observations) or its
// task, its reward, where it came from, and the jobs that consumed it with the reward each
// trained with (and, for a job sealed by Agent ECC, the verdict and epoch behind it).

import { facts, h } from "./dom.js";
import { number, short, when } from "./format.js";

function text(content) {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) {
    return content
      .map((part) => (part && part.type === "text" ? part.text : part && part.source ? `[${part.type}: ${part.source.path}]` : ""))
      .join("\n");
  }
  return content === null || content === undefined ? "" : JSON.stringify(content);
}

function json(value) {
  return h("pre", { class: "json" }, JSON.stringify(value, null, 2));
}

function step(s) {
  const calls = s.tool_calls || [];
  const results = (s.observation && s.observation.results) || [];
  return h(
    "li",
    { class: `step ${s.source}` },
    h("div", { class: "step-head" }, h("span", { class: "who" }, s.source), ` · step ${s.step_id}`, s.model_name ? ` · ${s.model_name}` : ""),
    text(s.message) ? h("div", { class: "message" }, text(s.message)) : null,
    s.reasoning_content ? h("details", {}, h("summary", {}, "Reasoning"), h("div", { class: "message" }, s.reasoning_content)) : null,
    calls.map((c) =>
      h("div", { class: "call" }, h("span", { class: "label" }, "Tool call "), h("code", {}, c.function_name), h("pre", { class: "json" }, JSON.stringify(c.arguments, null, 2))),
    ),
    results.map((r) =>
      h("div", { class: "observation" }, h("span", { class: "label" }, `Observation${r.source_call_id ? ` of ${r.source_call_id}` : ""}`), h("div", { class: "message" }, text(r.content))),
    ),
  );
}

function trajectory(body) {
  const t = body.trajectory || {};
  const steps = t.steps || [];
  return h(
    "div",
    { class: "block" },
    h("h3", {}, `Trajectory · ${steps.length} step${steps.length === 1 ? "" : "s"}`),
    t.agent ? h("p", { class: "hint" }, `Agent ${t.agent.name} ${t.agent.version || ""}${t.agent.model_name ? ` · ${t.agent.model_name}` : ""}`) : null,
    h("ol", { class: "steps" }, steps.map(step)),
  );
}

function eccLine(sample, job) {
  const mine = sample.ecc;
  const sealed = job.ecc;
  if (!mine && !sealed) return null;
  const epoch = sealed && sealed.epoch ? `epoch ${sealed.epoch.index} (grader ${sealed.epoch.version_id})` : "epoch unknown";
  if (!mine) return `ECC: sealed under ${epoch}`;
  const parts = [`ECC: ${mine.outcome || "?"}`, epoch];
  if (mine.verdict) parts.push(`verdict ${mine.verdict}`);
  if (mine.decision) parts.push(`by ${mine.decision}`);
  if (mine.reward !== undefined) parts.push(`reward ${number(mine.reward)} (recorded ${number(mine.recorded_reward)})`);
  if (mine.reason) parts.push(mine.reason);
  return parts.join(" · ");
}

function sources(detail) {
  const rows = [];
  if (detail.records.length) {
    rows.push([
      "Records",
      h(
        "ul",
        { class: "plain" },
        detail.records.map((r) =>
          h(
            "li",
            {},
            h("code", { title: r.id }, short(r.id, 30)),
            ` ${r.kind || "not stored"}`,
            r.artifact_id ? ` · artifact ${short(r.artifact_id, 24)}` : "",
            r.at ? ` · ${when(r.at)}` : "",
            r.stored && !r.held ? ` · body evicted (${r.evicted_reason})` : "",
          ),
        ),
      ),
    ]);
  }
  if (detail.report) {
    const r = detail.report;
    rows.push([
      "Report",
      h("span", {}, h("code", {}, r.id), r.held ? ` · score ${number(r.score)}${r.feedback ? ` · “${r.feedback}”` : ""}` : " · body evicted"),
    ]);
  }
  if (detail.upload) {
    rows.push(["Upload", h("span", {}, "data item ", h("code", {}, detail.upload.item_id), detail.upload.stored ? "" : " (deleted since)")]);
  }
  if (detail.task) rows.push(["Task", `${detail.task.name} (${detail.task.split || "train"})`]);
  if (rows.length === 0) rows.push(["Made by", detail.sample.made_by || "–"]);
  return rows;
}

/** The reward a person may give a trajectory sample, and every label it was given. */
function relabelling(detail, actions) {
  const s = detail.sample;
  if (s.kind !== "trajectory") return null;
  const labelled = s.label !== null && s.label !== undefined;
  return h(
    "div",
    { class: "block" },
    h("h3", {}, "Relabel"),
    h("p", { class: "hint" }, "A reward given here replaces the sample's own in every job that takes it from now on (a job already run keeps the reward it trained with). Each label is kept, with who gave it and when."),
    h(
      "form",
      {
        class: "relabel",
        "aria-label": "Relabel this sample",
        onsubmit: (event) => {
          event.preventDefault();
          const fields = event.target.elements;
          actions.relabel(s.id, fields["relabel-reward"].value.trim(), fields["relabel-note"].value.trim());
        },
      },
      h(
        "div",
        { class: "field short" },
        h("label", { for: "relabel-reward" }, "Reward"),
        h("input", { id: "relabel-reward", name: "relabel-reward", type: "number", step: "any", "data-key": "relabel-reward", value: "" }),
      ),
      h(
        "div",
        { class: "field search" },
        h("label", { for: "relabel-note" }, "Why (optional)"),
        h("input", { id: "relabel-note", name: "relabel-note", type: "text", maxlength: 2000, "data-key": "relabel-note", value: "" }),
      ),
      h("div", { class: "field" }, h("span", { class: "label-space" }, " "), h("button", { type: "submit", class: "primary", "data-key": "relabel-set" }, "Set reward")),
      labelled
        ? h(
            "div",
            { class: "field" },
            h("span", { class: "label-space" }, " "),
            h("button", { type: "button", class: "quiet", "data-key": "relabel-clear", onclick: () => actions.relabel(s.id, null, "") }, "Take the label back"),
          )
        : null,
    ),
    detail.labels.length
      ? h(
          "ol",
          { class: "plain labels", "aria-label": "Labels, oldest first" },
          detail.labels.map((l) =>
            h(
              "li",
              {},
              l.reward === null ? "label taken back" : `reward ${number(l.reward)}`,
              ` (was ${number(l.previous_reward)}) · by ${l.labelled_by} · ${when(l.labelled_at)}`,
              l.note ? ` · “${l.note}”` : "",
            ),
          ),
        )
      : null,
  );
}

/** The opened sample; `actions.close()` closes it, `actions.toggle(id, on)` selects it,
 * `actions.relabel(id, reward, note)` labels it (`reward` null: takes the label back). */
export function sampleView(detail, selected, actions) {
  const s = detail.sample;
  const body = detail.body;
  return [
    h(
      "div",
      { class: "panel-head" },
      h("h2", { id: "sample-title" }, "Sample ", h("span", { class: "name", title: s.id }, short(s.id, 32))),
      h("button", { type: "button", class: "quiet", "data-key": "close-sample", onclick: actions.close }, "Close"),
    ),
    h(
      "label",
      { class: "check" },
      h("input", { type: "checkbox", "data-key": "pick-open", checked: selected, onchange: (event) => actions.toggle(s.id, event.target.checked) }),
      " Select this sample (for the buttons above the list)",
    ),
    facts([
      ["Kind", s.kind],
      ["Group", s.group || (s.group_id ? "none named by the client" : "–")],
      s.group_id ? ["Store group id", h("code", {}, s.group_id)] : null,
      ["Reward", s.label === null || s.label === undefined ? number(s.reward) : `${number(s.label)}, labelled (its own: ${number(s.reward)})`],
      body.feedback ? ["Feedback", body.feedback] : null,
      ["Trained", Object.keys(s.trained_by).length ? Object.entries(s.trained_by).map(([t, n]) => `${t} ×${n}`).join(", ") : "not yet"],
      Object.keys(s.failed_by || {}).length
        ? ["Consumed by a failed job", `${Object.entries(s.failed_by).map(([t, n]) => `${t} ×${n}`).join(", ")} (its training thrown away; it does not train again there)`]
        : null,
      ["Manual buffer", s.manual_buffer.length ? s.manual_buffer.join(", ") : "no"],
      ["Stale", s.stale_for.length ? `for ${s.stale_for.join(", ")}` : "no"],
      ["Stored", `position ${s.position} · ${s.origin}`],
      ...sources(detail),
    ]),
    h(
      "div",
      { class: "block" },
      h("h3", {}, "Jobs that consumed it"),
      detail.jobs.length === 0
        ? h("p", { class: "empty" }, "None yet.")
        : h(
            "ul",
            { class: "plain jobs-of-sample" },
            detail.jobs.map((j) => {
              const line = eccLine(j.extensions, j.job_extensions);
              return h(
                "li",
                {},
                h(
                  "button",
                  { type: "button", class: "link", "data-key": `sample-job:${j.trainer}:${j.job_id}`, title: `Open job ${j.job_id}`, onclick: () => actions.openJob(j.trainer, j.job_id) },
                  j.number ? `job ${j.number}` : short(j.job_id, 30),
                ),
                ` · ${j.trainer} · ${j.event || "running"} · `,
                j.trained
                  ? `trained with reward ${number(j.reward)}`
                  : j.sent && j.event === "failed"
                    ? "consumed by a failed job: its training was thrown away"
                    : "consumed without training",
                j.sent && j.signal === false
                  ? h(
                      "div",
                      { class: "no-signal" },
                      "No learning signal: every member of its group in this job trained with the same reward, so its advantage was 0 (the group-relative objective learns from differences within a group) and this job learnt nothing from it.",
                    )
                  : null,
                line ? h("div", { class: "ecc" }, line) : null,
              );
            }),
          ),
    ),
    relabelling(detail, actions),
    s.kind === "task" ? h("div", { class: "block" }, h("h3", {}, "Task"), json(body.task)) : trajectory(body),
    body.metadata && Object.keys(body.metadata).length ? h("details", { class: "block" }, h("summary", {}, "Metadata"), json(body.metadata)) : null,
  ];
}
