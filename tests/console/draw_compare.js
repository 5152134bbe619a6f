// Draw the overview of a scenario with another scenario's job series beside its own and an
// artifact curve, with the page's own module; answer what the charts show.
const [scenario, series, compared, rewards, done] = arguments;
import("/reef/console/overview.js").then(({ Charting, overview }) => {
  const box = document.createElement("section");
  const noop = () => {};
  const charting = new Charting();
  charting.set("compare", compared.scenario);
  const charted = { others: [compared.scenario], compared, rewards };
  box.append(...overview(scenario, series, charting, { setMode: noop, train: noop, chart: noop }, charted).flat());
  document.getElementById("main").prepend(box);
  const first = box.querySelector(".chart-row .chart");
  const artifacts = box.querySelector(".artifact-chart");
  const answer = {
    caption: first.querySelector("figcaption").textContent,
    lines: first.querySelectorAll("path.line:not(.raw)").length,
    beside: [...box.querySelectorAll("#chart-compare option")].map((o) => o.value),
    artifacts: artifacts.querySelector("svg").getAttribute("aria-label"),
    axis: [...artifacts.querySelectorAll("text.axis")].map((t) => t.textContent),
  };
  box.remove();
  done(answer);
}, (error) => done({ error: String(error) }));
