// Draw the overview of a scenario with its eval curve (GET .../evaluations) beside each
// artifact's mean reward, with the page's own module; answer what the curve shows.
const [scenario, series, rewards, evaluations, done] = arguments;
import("/reef/console/overview.js").then(({ Charting, overview }) => {
  const box = document.createElement("section");
  const noop = () => {};
  const charted = { others: [], compared: null, rewards, evaluations };
  box.append(...overview(scenario, series, new Charting(), { setMode: noop, train: noop, chart: noop }, charted).flat());
  document.getElementById("main").prepend(box);
  const curve = box.querySelector(".evaluation-chart");
  const answer = {
    label: curve.querySelector("svg").getAttribute("aria-label"),
    caption: curve.querySelector("figcaption").textContent,
    lines: curve.querySelectorAll("path.line:not(.raw)").length,
    hollow: [...curve.querySelectorAll("circle.dot.marked")].map((c) => c.textContent),
    dots: curve.querySelectorAll("circle.dot").length,
    hint: curve.querySelector(".hint").textContent,
  };
  box.remove();
  done(answer);
}, (error) => done({ error: String(error) }));
