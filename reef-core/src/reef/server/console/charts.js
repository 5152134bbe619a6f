// A line chart of one value per job, drawn as inline SVG: no library, nothing fetched.

import { h } from "./dom.js";
import { number, short } from "./format.js";

const WIDTH = 420;
const HEIGHT = 170;
const PAD = { right: 14, top: 14, bottom: 34 };
/** The width of one character of an axis label (11 px monospace), in the chart's units. */
const CHAR = 7;

/** A value as an axis label: tiny and huge values in exponent form, so that it stays short. */
function axisLabel(value) {
  const magnitude = Math.abs(value);
  if (magnitude !== 0 && (magnitude < 0.001 || magnitude >= 1e6)) return value.toExponential(2);
  return number(value);
}

/**
 * A chart of `points` ([{x: job number, y: value, label: job id}]) titled `title`, in the
 * colour class `tone` (line-loss, line-reward). Points without a number are left out; with
 * none left, the chart says so instead of drawing an empty frame.
 */
export function lineChart(title, points, tone) {
  const shown = points.filter((p) => typeof p.y === "number" && Number.isFinite(p.y));
  const heading = h("h3", { class: "chart-title" }, title);
  if (shown.length === 0) {
    return h("figure", { class: "chart" }, heading, h("p", { class: "empty" }, "No job has reported it yet."));
  }
  const last = shown[shown.length - 1];
  const ys = shown.map((p) => p.y);
  let low = Math.min(...ys);
  let high = Math.max(...ys);
  if (low === high) {
    low -= Math.abs(low) * 0.1 || 0.5;
    high += Math.abs(high) * 0.1 || 0.5;
  }
  const xs = shown.map((p) => p.x);
  const first = Math.min(...xs);
  const lastX = Math.max(...xs);
  const labels = [axisLabel(high), axisLabel(low)];
  // The left margin fits the longest label, its sign included.
  const left = 10 + CHAR * Math.max(...labels.map((l) => l.length));
  const plotW = WIDTH - left - PAD.right;
  const plotH = HEIGHT - PAD.top - PAD.bottom;
  // One job sits in the middle; more spread over the width.
  const px = (x) => left + (lastX === first ? 0.5 : (x - first) / (lastX - first)) * plotW;
  const py = (y) => PAD.top + (1 - (y - low) / (high - low)) * plotH;
  const path = shown.map((p, i) => `${i ? "L" : "M"}${px(p.x).toFixed(1)},${py(p.y).toFixed(1)}`);
  const summary = `${title}: ${shown.length} jobs, last ${number(last.y)} (job ${last.label}), lowest ${number(Math.min(...ys))}, highest ${number(Math.max(...ys))}`;
  const svg = h(
    "svg:svg",
    {
      viewBox: `0 0 ${WIDTH} ${HEIGHT}`,
      class: "chart-svg",
      role: "img",
      "aria-label": summary,
    },
    h("svg:title", {}, summary),
    // the frame and the two value lines
    [high, low].map((value, i) =>
      h(
        "svg:g",
        {},
        h("svg:line", { x1: left, x2: WIDTH - PAD.right, y1: py(value), y2: py(value), class: "grid" }),
        h("svg:text", { x: left - 6, y: py(value) + 4, class: "axis", "text-anchor": "end" }, labels[i]),
      ),
    ),
    lastX === first
      ? h("svg:text", { x: px(first), y: HEIGHT - 10, class: "axis", "text-anchor": "middle" }, `job ${first}`)
      : [
          h("svg:text", { x: left, y: HEIGHT - 10, class: "axis" }, `job ${first}`),
          h("svg:text", { x: WIDTH - PAD.right, y: HEIGHT - 10, class: "axis", "text-anchor": "end" }, `job ${lastX}`),
        ],
    h("svg:path", { d: path.join(" "), class: `line ${tone}` }),
    shown.map((p) =>
      h("svg:circle", { cx: px(p.x), cy: py(p.y), r: 3, class: `dot ${tone}` }, h("svg:title", {}, `job ${p.label}: ${number(p.y)}`)),
    ),
  );
  return h(
    "figure",
    { class: "chart" },
    heading,
    svg,
    h("figcaption", {}, `Last: `, h("strong", {}, number(last.y)), ` · job ${last.x}, `, h("code", { title: last.label }, short(last.label, 30))),
  );
}
