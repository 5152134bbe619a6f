// The sample browser: the store a page at a time, filtered; samples chosen into and out of
// the manual buffer through the API.

import { h } from "./dom.js";
import { number, short } from "./format.js";

/** The filters and page a person set, and the samples they selected (kept across pages). */
export class Browsing {
  constructor() {
    this.filters = { kind: "", trained: "", stale: "", chosen: "", group: "", trainer: "", order: "desc" };
    this.cursors = [null]; // the `after` of each page walked so far; the last is the page shown
    this.selected = new Set();
    this.stale = new Set(); // the samples seen left out as stale, to warn before choosing them
  }

  /** Remember which samples of a page (GET .../samples, .../samples/{id}) are stale now. */
  saw(samples) {
    for (const s of samples) {
      if (s.stale_for.length) this.stale.add(s.id);
      else this.stale.delete(s.id);
    }
  }

  parameters() {
    const f = this.filters;
    return {
      kind: f.kind,
      trained: f.trained,
      stale: f.stale,
      chosen: f.chosen,
      group: f.group,
      trainer: f.trainer,
      order: f.order,
      limit: 25,
      after: this.cursors[this.cursors.length - 1],
    };
  }
}

function select(id, label, value, options, onchange) {
  return h(
    "div",
    { class: "field" },
    h("label", { for: id }, label),
    h(
      "select",
      { id, "data-key": id, onchange: (event) => onchange(event.target.value) },
      options.map(([optionValue, text]) =>
        h("option", { value: optionValue, selected: optionValue === value }, text),
      ),
    ),
  );
}

/**
 * The sample browser for `scenario` (its status entry), showing `page` (GET .../samples) and
 * the manual `buffers` (GET .../buffer). `actions`: filter(name, value), next(), previous(),
 * first(), toggle(id, on), open(id), insert(ids), remove(ids).
 */
export function sampleBrowser(scenario, browsing, page, buffers, actions) {
  const f = browsing.filters;
  const trainers = scenario.trainers.map((t) => t.trainer);
  const ids = page.samples.map((s) => s.id);
  const allOnPage = ids.length > 0 && ids.every((id) => browsing.selected.has(id));
  const chosen = [...browsing.selected];
  const inBuffer = [...new Set(Object.values(buffers.buffers).flat())];
  const group = h("input", { id: "filter-group", type: "search", "data-key": "filter-group", value: f.group, placeholder: "any group" });
  const status = (s) => {
    const marks = [];
    const counted = (entries) => entries.map(([t, n]) => (trainers.length > 1 ? `${t}×${n}` : `×${n}`)).join(" ");
    const trained = Object.entries(s.trained_by);
    const failed = Object.entries(s.failed_by || {});
    if (trained.length) marks.push(h("span", { class: "badge finished" }, `trained ${counted(trained)}`));
    // Sent to a job that failed: consumed, its training thrown away; it never trains again.
    if (failed.length) marks.push(h("span", { class: "badge failed" }, `consumed by a failed job ${counted(failed)}`));
    if (!trained.length && !failed.length) marks.push(h("span", { class: "badge idle" }, "untrained"));
    if (s.manual_buffer.length) marks.push(h("span", { class: "badge chosen" }, "in manual buffer"));
    if (s.stale_for.length) marks.push(h("span", { class: "badge stale" }, "stale"));
    return marks;
  };
  return [
    h(
      "div",
      { class: "panel-head" },
      h("h2", { id: "samples-title" }, "Samples"),
      h("span", { class: "hint", id: "samples-count" }, `${number(page.total)} match`),
    ),
    h(
      "form",
      {
        class: "filters",
        "aria-label": "Filter the samples",
        onsubmit: (event) => {
          event.preventDefault();
          actions.filter("group", group.value.trim());
        },
      },
      select("filter-kind", "Kind", f.kind, [["", "any"], ["trajectory", "trajectory"], ["task", "task"]], (v) => actions.filter("kind", v)),
      select("filter-trained", "Trained", f.trained, [["", "any"], ["true", "trained"], ["false", "untrained"]], (v) => actions.filter("trained", v)),
      select("filter-stale", "Stale", f.stale, [["", "any"], ["true", "stale"], ["false", "not stale"]], (v) => actions.filter("stale", v)),
      select("filter-chosen", "Manual buffer", f.chosen, [["", "any"], ["true", "in it"], ["false", "not in it"]], (v) => actions.filter("chosen", v)),
      trainers.length > 1
        ? select("filter-trainer", "Trainer", f.trainer, [["", "any"], ...trainers.map((t) => [t, t])], (v) => actions.filter("trainer", v))
        : null,
      select("filter-order", "Order", f.order, [["desc", "newest first"], ["asc", "oldest first"]], (v) => actions.filter("order", v)),
      h(
        "div",
        { class: "field search" },
        h("label", { for: "filter-group" }, "Group"),
        h("div", { class: "with-button" }, group, h("button", { type: "submit", class: "quiet", "data-key": "filter-apply" }, "Apply")),
      ),
    ),
    h(
      "div",
      { class: "curation", role: "group", "aria-label": "Manual buffer" },
      h("span", { id: "selection-count" }, `${chosen.length} selected`),
      h(
        "button",
        { type: "button", class: "primary", "data-key": "insert", disabled: chosen.length === 0, onclick: () => actions.insert(chosen) },
        "Add to manual buffer",
      ),
      h(
        "button",
        { type: "button", class: "quiet", "data-key": "remove", disabled: chosen.length === 0, onclick: () => actions.remove(chosen) },
        "Remove from manual buffer",
      ),
      h(
        "button",
        { type: "button", class: "quiet", "data-key": "clear", disabled: chosen.length === 0, onclick: () => actions.clear() },
        "Clear selection",
      ),
      h("span", { class: "hint" }, `Manual buffer: ${inBuffer.length} sample${inBuffer.length === 1 ? "" : "s"}. A chosen sample trains with the rest of its group.`),
    ),
    page.samples.length === 0
      ? h("p", { class: "empty" }, "No sample matches these filters.")
      : h(
          "div",
          { class: "scroll" },
          h(
            "table",
            { class: "table samples" },
            h(
              "thead",
              {},
              h(
                "tr",
                {},
                h(
                  "th",
                  { scope: "col", class: "pick" },
                  h("input", {
                    type: "checkbox",
                    "data-key": "select-page",
                    "aria-label": "Select every sample on this page",
                    checked: allOnPage,
                    onchange: (event) => ids.forEach((id) => actions.toggle(id, event.target.checked)),
                  }),
                ),
                [["Sample"], ["Kind"], ["Group"], ["Reward", "num"], ["Status"], ["First message"]].map(([c, kind]) =>
                  h("th", { scope: "col", class: kind || null }, c),
                ),
              ),
            ),
            h(
              "tbody",
              {},
              page.samples.map((s) =>
                h(
                  "tr",
                  { class: browsing.selected.has(s.id) ? "selected" : null },
                  h(
                    "td",
                    { class: "pick" },
                    h("input", {
                      type: "checkbox",
                      "data-key": `pick:${s.id}`,
                      "aria-label": `Select sample ${s.id}`,
                      checked: browsing.selected.has(s.id),
                      onchange: (event) => actions.toggle(s.id, event.target.checked),
                    }),
                  ),
                  h(
                    "td",
                    {},
                    h("button", { type: "button", class: "link", "data-key": `open:${s.id}`, title: `Open sample ${s.id}`, onclick: () => actions.open(s.id) }, short(s.id, 26)),
                  ),
                  h("td", {}, s.kind),
                  h("td", {}, s.group_id ? h("code", { title: s.group_id }, short(s.group_id, 18)) : "–"),
                  h("td", { class: "num" }, number(s.reward)),
                  h("td", { class: "marks" }, status(s)),
                  h("td", { class: "preview", title: s.preview || "" }, s.preview || "–"),
                ),
              ),
            ),
          ),
        ),
    h(
      "div",
      { class: "pager" },
      h("button", { type: "button", class: "quiet", "data-key": "first", disabled: browsing.cursors.length < 2, onclick: actions.first }, "First page"),
      h("button", { type: "button", class: "quiet", "data-key": "previous", disabled: browsing.cursors.length < 2, onclick: actions.previous }, "Previous page"),
      h("span", {}, `Page ${browsing.cursors.length}`),
      h("button", { type: "button", class: "quiet", "data-key": "next", disabled: !page.next, onclick: actions.next }, "Next page"),
    ),
  ];
}
