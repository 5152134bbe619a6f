// A line chart of one value per job, drawn as inline SVG: no library, nothing fetched.

import { h } from "./dom.js";
import { number, short } from "./format.js";

const WIDTH = 420;
const HEIGHT = 170;
const PAD = { left: 52, right: 14, top: 14, bottom: 34 };

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
  const plotW = WIDTH - PAD.left - PAD.right;
  const plotH = HEIGHT - PAD.top - PAD.bottom;
  // One job sits in the middle; more spread over the width.
  const px = (x) => PAD.left + (lastX === first ? 0.5 : (x - first) / (lastX - first)) * plotW;
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
    [high, low].map((value) =>
      h(
        "svg:g",
        {},
        h("svg:line", { x1: PAD.left, x2: WIDTH - PAD.right, y1: py(value), y2: py(value), class: "grid" }),
        h("svg:text", { x: PAD.left - 6, y: py(value) + 4, class: "axis", "text-anchor": "end" }, number(value)),
      ),
    ),
    lastX === first
      ? h("svg:text", { x: px(first), y: HEIGHT - 10, class: "axis", "text-anchor": "middle" }, `job ${first}`)
      : [
          h("svg:text", { x: PAD.left, y: HEIGHT - 10, class: "axis" }, `job ${first}`),
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
