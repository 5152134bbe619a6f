// Line charts of a value per job, drawn as inline SVG: no library, nothing fetched. Each line
// is one trainer's run; a point may stand for a run of jobs (a long history is read in runs),
// drawn at its mean with a band from its lowest to its highest value.

import { h } from "./dom.js";
import { number, short, when } from "./format.js";

const WIDTH = 420;
const HEIGHT = 170;
const PAD = { right: 14, top: 14, bottom: 34 };
/** The width of one character of an axis label (11 px monospace), in the chart's units. */
const CHAR = 7;
/** Up to this many points, each is drawn as a dot (with its job in a tooltip). */
const DOTS = 60;

/** A value as an axis label: tiny and huge values in exponent form, so that it stays short. */
function axisLabel(value) {
  const magnitude = Math.abs(value);
  if (magnitude !== 0 && (magnitude < 0.001 || magnitude >= 1e6)) return value.toExponential(2);
  return number(value);
}

/** A wall time as an axis label: the time of day, and the date when the run spans days. */
function timeLabel(seconds, span) {
  const date = new Date(seconds * 1000);
  if (span > 86400) return date.toLocaleDateString("en-GB", { day: "2-digit", month: "short" });
  const fine = span < 3600 ? { second: "2-digit" } : {};
  return date.toLocaleTimeString("en-GB", { hour: "2-digit", minute: "2-digit", ...fine });
}

/**
 * The values `ys` smoothed as TensorBoard does: an exponential moving average of weight
 * `weight` (0: as they are), debiased so that the first values are not pulled to 0.
 */
export function smooth(ys, weight) {
  if (!weight) return ys;
  let last = 0;
  return ys.map((y, i) => {
    last = last * weight + (1 - weight) * y;
    return last / (1 - weight ** (i + 1));
  });
}

const usable = (value) => typeof value === "number" && Number.isFinite(value);

/**
 * A chart titled `title` of `lines` ([{name, points: [{x: job number, t: wall time, y, low,
 * high, first, last, label: job id, note}]}]), against the job number (`options.x` "job") or the
 * wall time ("time"), smoothed by `options.smoothing`. Points without a number are left out;
 * with none left, the chart says so (`options.empty`) instead of drawing an empty frame.
 * `options.unit` names what the x axis counts ("job" unless told: "artifact"). A point with a
 * `note` is drawn hollow, the note in its tooltip.
 */
export function lineChart(title, lines, options = {}) {
  const axis = options.x === "time" ? "t" : "x";
  const unit = options.unit || "job";
  const drawn = lines
    .map((line, index) => ({ ...line, index, points: line.points.filter((p) => usable(p.y) && usable(p[axis])) }))
    .filter((line) => line.points.length > 0);
  const heading = h("h3", { class: "chart-title" }, title);
  if (drawn.length === 0) {
    return h("figure", { class: "chart" }, heading, h("p", { class: "empty" }, options.empty || "No job has reported it yet."));
  }
  for (const line of drawn) line.smoothed = smooth(line.points.map((p) => p.y), options.smoothing || 0);
  const all = drawn.flatMap((line) => line.points);
  const ys = all.flatMap((p) => [p.y, usable(p.low) ? p.low : p.y, usable(p.high) ? p.high : p.y]);
  let low = Math.min(...ys);
  let high = Math.max(...ys);
  if (low === high) {
    low -= Math.abs(low) * 0.1 || 0.5;
    high += Math.abs(high) * 0.1 || 0.5;
  }
  const xs = all.map((p) => p[axis]);
  const first = Math.min(...xs);
  const lastX = Math.max(...xs);
  const labels = [axisLabel(high), axisLabel(low)];
  // The left margin fits the longest label, its sign included.
  const left = 10 + CHAR * Math.max(...labels.map((l) => l.length));
  const plotW = WIDTH - left - PAD.right;
  const plotH = HEIGHT - PAD.top - PAD.bottom;
  // One point sits in the middle; more spread over the width.
  const px = (x) => left + (lastX === first ? 0.5 : (x - first) / (lastX - first)) * plotW;
  const py = (y) => PAD.top + (1 - (y - low) / (high - low)) * plotH;
  const xLabel = (x) => (axis === "t" ? timeLabel(x, lastX - first) : `${unit} ${x}`);
  const jobs = (p) => (p.first !== undefined && p.first !== p.last ? `${unit}s ${p.first}–${p.last}` : `${unit} ${p.x}`);
  const shape = (line) => {
    const parts = [];
    const banded = line.points.some((p) => usable(p.low) && usable(p.high) && p.low !== p.high);
    if (banded) {
      const top = line.points.map((p) => `${px(p[axis]).toFixed(1)},${py(usable(p.high) ? p.high : p.y).toFixed(1)}`);
      const bottom = line.points.map((p) => `${px(p[axis]).toFixed(1)},${py(usable(p.low) ? p.low : p.y).toFixed(1)}`).reverse();
      parts.push(h("svg:polygon", { points: [...top, ...bottom].join(" "), class: `band tone-${line.index}` }));
    }
    const path = (values) => line.points.map((p, i) => `${i ? "L" : "M"}${px(p[axis]).toFixed(1)},${py(values[i]).toFixed(1)}`).join(" ");
    const smoothed = options.smoothing ? line.smoothed : null;
    if (smoothed) parts.push(h("svg:path", { d: path(line.points.map((p) => p.y)), class: `line raw tone-${line.index}` }));
    parts.push(h("svg:path", { d: path(smoothed || line.points.map((p) => p.y)), class: `line tone-${line.index}` }));
    if (line.points.length <= DOTS) {
      parts.push(
        line.points.map((p) =>
          h(
            "svg:circle",
            { cx: px(p[axis]), cy: py(p.y), r: 3, class: `dot tone-${line.index}${p.note ? " marked" : ""}` },
            h("svg:title", {}, `${line.name} · ${jobs(p)}: ${number(p.y)}${p.note ? ` (${p.note})` : ""}`),
          ),
        ),
      );
    }
    return parts;
  };
  const count = all.reduce((n, p) => n + (p.first !== undefined ? p.last - p.first + 1 : 1), 0);
  const ends = drawn.map((line) => {
    const end = line.points[line.points.length - 1];
    return `${line.name} last ${number(end.y)} (${jobs(end)})`;
  });
  const summary = `${title}: ${count} ${unit}s, ${ends.join("; ")}, lowest ${number(Math.min(...ys))}, highest ${number(Math.max(...ys))}`;
  const svg = h(
    "svg:svg",
    { viewBox: `0 0 ${WIDTH} ${HEIGHT}`, class: "chart-svg", role: "img", "aria-label": summary, "data-jobs": count },
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
      ? h("svg:text", { x: px(first), y: HEIGHT - 10, class: "axis", "text-anchor": "middle" }, xLabel(first))
      : [
          h("svg:text", { x: left, y: HEIGHT - 10, class: "axis" }, xLabel(first)),
          h("svg:text", { x: WIDTH - PAD.right, y: HEIGHT - 10, class: "axis", "text-anchor": "end" }, xLabel(lastX)),
        ],
    drawn.map(shape),
  );
  return h(
    "figure",
    { class: "chart" },
    heading,
    svg,
    h(
      "figcaption",
      {},
      drawn.map((line, i) => {
        const end = line.points[line.points.length - 1];
        return [
          i ? h("br", {}) : null,
          drawn.length > 1 ? [h("span", { class: `key tone-${line.index}`, "aria-hidden": "true" }), `${line.name}: `] : "Last: ",
          h("strong", {}, number(end.y)),
          ` · ${jobs(end)}${end.t ? `, ${when(end.t)}` : ""}, `,
          h("code", { title: end.label }, short(end.label, 24)),
        ];
      }),
    ),
  );
}
