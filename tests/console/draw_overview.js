// Draw the overview of the scenario and job series given with the page's own module, at the
// top of the page; answer each trainer card's "Running job" and the "Last errors" list as shown.
const [scenario, series, done] = arguments;
import("/reef/console/overview.js").then(({ Charting, overview }) => {
  const box = document.createElement("section");
  const noop = () => {};
  box.append(...overview(scenario, series, new Charting(), { setMode: noop, train: noop, chart: noop }).flat());
  document.getElementById("main").prepend(box);
  const running = [...box.querySelectorAll(".card dt")]
    .filter((term) => term.textContent === "Running job")
    .map((term) => term.nextElementSibling.textContent);
  const block = [...box.querySelectorAll(".block")].find((b) => b.querySelector("h3").textContent === "Last errors");
  const errors = [...block.querySelectorAll("li")].map((item) => item.textContent);
  const empty = [...block.querySelectorAll("p.empty")].map((p) => p.textContent);
  box.remove();
  done({ running, errors, empty });
}, (error) => done({ error: String(error) }));
