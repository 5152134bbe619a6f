// The sample browser: the store a page at a time, filtered; samples chosen into and out of
// the manual buffer through the API.

import { h } from "./dom.js";
import { number, short } from "./format.js";

/** How many samples a page shows. */
export const PAGE = 25;
/** How long a count of the matches is trusted before it is asked again (ms). */
const COUNT_FOR_MS = 15000;

const NO_FILTERS = {
  kind: "", trained: "", stale: "", chosen: "", group: "", trainer: "", order: "desc",
  text: "", reward_min: "", reward_max: "", artifact: "", tag: "", since: "", until: "", sort: "time",
};

/** A datetime-local field's value (the person's local time) as Unix seconds; "" for none. */
function seconds(local) {
  const at = Date.parse(local);
  return Number.isFinite(at) ? String(at / 1000) : "";
}

/**
 * The filters and page a person set, and the samples they selected (kept across pages, and
 * across a change of filters only when they asked to keep it). Pages are walked by the
 * cursors the service gives (`next`, `previous`, the last page); the count of the matches is
 * asked for when the filters change, then at most every 15 s, never on each live refresh.
 */
export class Browsing {
  constructor() {
    this.filters = { ...NO_FILTERS };
    this.at = {}; // {} the first page, {after}, {before} or {last: true}
    this.pageNumber = 1; // null when not known (the last page of an uncounted filter)
    this.selected = new Set();
    this.keep = false; // keep the selection when the filters change
    this.exportFormat = "jsonl"; // the file "Export selection" writes: jsonl or parquet
    this.stale = new Set(); // the samples seen left out as stale, to warn before choosing them
    this.total = null;
    this.exact = true;
    this.countedFor = null; // the filters the count is of
    this.countedAt = 0;
    this.cursor = 0; // the row the keyboard is on
  }

  /** Remember which samples of a page (GET .../samples, .../samples/{id}) are stale now. */
  saw(samples) {
    for (const s of samples) {
      if (s.stale_for.length) this.stale.add(s.id);
      else this.stale.delete(s.id);
    }
  }

  key() {
    return JSON.stringify(this.filterParameters());
  }

  filterParameters() {
    const f = this.filters;
    const named = {};
    for (const name of Object.keys(NO_FILTERS)) named[name] = f[name];
    named.since = seconds(f.since);
    named.until = seconds(f.until);
    return named;
  }

  /** The query of the page shown now; it asks for the count when that is due. */
  parameters() {
    const due = this.countedFor !== this.key() || Date.now() - this.countedAt > COUNT_FOR_MS;
    return {
      ...this.filterParameters(),
      limit: PAGE,
      after: this.at.after,
      before: this.at.before,
      last: this.at.last ? "true" : undefined,
      count: due ? "true" : "false",
    };
  }

  /** Keep what a page answer says of the count. */
  counted(page, key) {
    if (!page.next && !page.previous) {
      // The only page: its samples are every match.
      page = { ...page, total: page.samples.length, total_exact: true };
    }
    if (page.total === null || page.total === undefined) return;
    this.total = page.total;
    this.exact = page.total_exact;
    this.countedFor = key;
    this.countedAt = Date.now();
    if (this.at.last) this.pageNumber = this.exact ? Math.max(1, Math.ceil(this.total / PAGE)) : null;
  }

  /** A filter changed: back to the first page; the selection goes unless it is kept. */
  refilter(name, value) {
    this.filters[name] = value;
    this.at = {};
    this.pageNumber = 1;
    this.cursor = 0;
    if (!this.keep) this.selected.clear();
  }

  pages() {
    return this.total === null ? null : Math.max(1, Math.ceil(this.total / PAGE));
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

function text(id, label, value, placeholder, type = "search") {
  return h(
    "div",
    { class: `field ${type === "search" ? "search" : "short"}` },
    h("label", { for: id }, label),
    h("input", { id, name: id, type, "data-key": id, value, placeholder, step: type === "number" ? "any" : null }),
  );
}

/** The keys the sample list answers, as it shows them. */
export const KEYS = [
  ["j", "next sample"],
  ["k", "previous sample"],
  ["x", "select or unselect it"],
  ["o", "open it"],
];

/** How many jobs of each trainer trained `s` without a learning signal, said short. */
function noSignal(s, trainers) {
  const entries = Object.entries(s.no_signal_by || {});
  if (!entries.length) return null;
  const all = entries.every(([t, n]) => (s.trained_by[t] || 0) <= n);
  const counted = entries.map(([t, n]) => (trainers.length > 1 ? `${t}×${n}` : `×${n}`)).join(" ");
  return h(
    "span",
    { class: "badge released", title: "its group scored all alike in these jobs: advantage 0, nothing learnt from it" },
    all ? "no learning signal" : `no signal ${counted}`,
  );
}

/**
 * The sample browser for `scenario` (its status entry), showing `page` (GET .../samples) and
 * the manual `buffers` (GET .../buffer). `actions`: filter(name, value), filters(named),
 * next(), previous(), first(), last(), toggle(id, on), open(id), insert(ids), remove(ids),
 * selectMatching(), keep(on), exportFormat(format), exportSelection(ids, format).
 */
export function sampleBrowser(scenario, browsing, page, buffers, actions) {
  const f = browsing.filters;
  const trainers = scenario.trainers.map((t) => t.trainer);
  const ids = page.samples.map((s) => s.id);
  const allOnPage = ids.length > 0 && ids.every((id) => browsing.selected.has(id));
  const chosen = [...browsing.selected];
  const inBuffer = [...new Set(Object.values(buffers.buffers).flat())];
  const status = (s) => {
    const marks = [];
    const counted = (entries) => entries.map(([t, n]) => (trainers.length > 1 ? `${t}×${n}` : `×${n}`)).join(" ");
    const trained = Object.entries(s.trained_by);
    const failed = Object.entries(s.failed_by || {});
    if (trained.length) marks.push(h("span", { class: "badge finished" }, `trained ${counted(trained)}`));
    marks.push(noSignal(s, trainers));
    // Sent to a job that failed: consumed, its training thrown away; it never trains again.
    if (failed.length) marks.push(h("span", { class: "badge failed" }, `consumed by a failed job ${counted(failed)}`));
    if (!trained.length && !failed.length) marks.push(h("span", { class: "badge idle" }, "untrained"));
    if (s.manual_buffer.length) marks.push(h("span", { class: "badge chosen" }, "in manual buffer"));
    if (s.stale_for.length) marks.push(h("span", { class: "badge stale" }, "stale"));
    if (s.label !== null && s.label !== undefined) {
      marks.push(h("span", { class: "badge chosen", title: `a person's reward: its next job trains with ${s.label}, not ${s.reward}` }, `relabelled ${number(s.label)}`));
    }
    return marks.filter(Boolean);
  };
  const form = h(
    "form",
    {
      class: "filters",
      "aria-label": "Filter the samples",
      onsubmit: (event) => {
        event.preventDefault();
        const named = {};
        for (const name of ["group", "text", "reward_min", "reward_max", "artifact", "tag", "since", "until"]) {
          named[name] = event.target.elements[`filter-${name.replace("_", "-")}`].value.trim();
        }
        actions.filters(named);
      },
    },
    text("filter-text", "Text", f.text, "prompt or reply"),
    text("filter-group", "Group", f.group, "any group"),
    text("filter-reward-min", "Reward ≥", f.reward_min, "", "number"),
    text("filter-reward-max", "Reward ≤", f.reward_max, "", "number"),
    text("filter-artifact", "Artifact", f.artifact, "any artifact"),
    text("filter-tag", "Tag", f.tag, "name=value"),
    text("filter-since", "Called from", f.since, "", "datetime-local"),
    text("filter-until", "Called before", f.until, "", "datetime-local"),
    h("div", { class: "field" }, h("span", { class: "label-space" }, " "), h("button", { type: "submit", class: "quiet", "data-key": "filter-apply" }, "Apply")),
    select("filter-kind", "Kind", f.kind, [["", "any"], ["trajectory", "trajectory"], ["task", "task"]], (v) => actions.filter("kind", v)),
    select("filter-trained", "Trained", f.trained, [["", "any"], ["true", "trained"], ["false", "untrained"]], (v) => actions.filter("trained", v)),
    select("filter-stale", "Stale", f.stale, [["", "any"], ["true", "stale"], ["false", "not stale"]], (v) => actions.filter("stale", v)),
    select("filter-chosen", "Manual buffer", f.chosen, [["", "any"], ["true", "in it"], ["false", "not in it"]], (v) => actions.filter("chosen", v)),
    trainers.length > 1
      ? select("filter-trainer", "Trainer", f.trainer, [["", "any"], ...trainers.map((t) => [t, t])], (v) => actions.filter("trainer", v))
      : null,
    select("filter-sort", "Sort by", f.sort, [["time", "time"], ["reward", "reward"]], (v) => actions.filter("sort", v)),
    select(
      "filter-order",
      "Order",
      f.order,
      f.sort === "reward" ? [["desc", "highest first"], ["asc", "lowest first"]] : [["desc", "newest first"], ["asc", "oldest first"]],
      (v) => actions.filter("order", v),
    ),
  );
  const pages = browsing.pages();
  const count = browsing.total === null ? "counting…" : `${number(browsing.total)}${browsing.exact ? "" : "+"} match`;
  const more = browsing.total !== null && browsing.total > chosen.length;
  return [
    h("div", { class: "panel-head" }, h("h2", { id: "samples-title" }, "Samples"), h("span", { class: "hint", id: "samples-count" }, count)),
    form,
    h(
      "div",
      { class: "curation", role: "group", "aria-label": "Manual buffer" },
      h("span", { id: "selection-count" }, `${number(chosen.length)} selected`),
      h(
        "button",
        { type: "button", class: "quiet", "data-key": "select-matching", disabled: !more || browsing.total > 10000, onclick: () => actions.selectMatching() },
        browsing.total === null ? "Select all matching" : `Select all ${number(browsing.total)}${browsing.exact ? "" : "+"} matching`,
      ),
      h("button", { type: "button", class: "primary", "data-key": "insert", disabled: chosen.length === 0, onclick: () => actions.insert(chosen) }, "Add to manual buffer"),
      h("button", { type: "button", class: "quiet", "data-key": "remove", disabled: chosen.length === 0, onclick: () => actions.remove(chosen) }, "Remove from manual buffer"),
      h("button", { type: "button", class: "quiet", "data-key": "clear", disabled: chosen.length === 0, onclick: () => actions.clear() }, "Clear selection"),
      h(
        "span",
        { class: "export" },
        h(
          "select",
          { id: "export-format", "data-key": "export-format", "aria-label": "Export format", onchange: (event) => actions.exportFormat(event.target.value) },
          [["jsonl", "JSON Lines"], ["parquet", "Parquet"], ["hf", "Hugging Face (zip)"]].map(([value, label]) =>
            h("option", { value, selected: value === browsing.exportFormat }, label),
          ),
        ),
        h(
          "button",
          { type: "button", class: "quiet", "data-key": "export", disabled: chosen.length === 0, onclick: () => actions.exportSelection(chosen, browsing.exportFormat) },
          "Export selection",
        ),
      ),
      h(
        "label",
        { class: "check" },
        h("input", { type: "checkbox", "data-key": "keep-selection", checked: browsing.keep, onchange: (event) => actions.keep(event.target.checked) }),
        " Keep the selection when the filters change",
      ),
      h("span", { class: "hint" }, `Manual buffer: ${inBuffer.length} sample${inBuffer.length === 1 ? "" : "s"}. A chosen sample trains with the rest of its group.`),
    ),
    page.samples.length === 0
      ? h("p", { class: "empty" }, "No sample matches these filters.")
      : h(
          "div",
          { class: "scroll", "data-scroll": "samples" },
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
                [["Sample"], ["Kind"], ["Group"], ["Reward", "num"], ["Status"], ["First message"]].map(([c, kind]) => h("th", { scope: "col", class: kind || null }, c)),
              ),
            ),
            h(
              "tbody",
              {},
              page.samples.map((s, row) =>
                h(
                  "tr",
                  {
                    class: [browsing.selected.has(s.id) ? "selected" : "", row === browsing.cursor ? "cursor" : ""].join(" ").trim() || null,
                    "data-row": row,
                  },
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
                  h("td", {}, h("button", { type: "button", class: "link", "data-key": `open:${s.id}`, title: `Open sample ${s.id}`, onclick: () => actions.open(s.id) }, short(s.id, 26))),
                  h("td", {}, s.kind),
                  h(
                    "td",
                    { class: "group" },
                    s.group
                      ? h("span", { title: s.group_id ? `the client's group; the store's group id: ${s.group_id}` : "the client's group" }, short(s.group, 22))
                      : s.group_id
                        ? h("code", { title: `the store's group id (the client named none): ${s.group_id}` }, short(s.group_id, 18))
                        : "–",
                  ),
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
      h("button", { type: "button", class: "quiet", "data-key": "first", disabled: !page.previous, onclick: actions.first }, "First page"),
      h("button", { type: "button", class: "quiet", "data-key": "previous", disabled: !page.previous, onclick: actions.previous }, "Previous page"),
      h("span", { id: "page-number" }, `Page ${browsing.pageNumber ?? "?"}${pages === null ? "" : ` of ${number(pages)}${browsing.exact ? "" : "+"}`}`),
      h("button", { type: "button", class: "quiet", "data-key": "next", disabled: !page.next, onclick: actions.next }, "Next page"),
      h("button", { type: "button", class: "quiet", "data-key": "last", disabled: !page.next, onclick: actions.last }, "Last page"),
      h("span", { class: "hint keys" }, "Keys: ", KEYS.map(([key, what], i) => [i ? " · " : "", h("kbd", {}, key), ` ${what}`])),
    ),
  ];
}
