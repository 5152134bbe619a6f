// Draw a loss chart of the values given (one job each) with the page's own module, at the top
// of the page; answer its axis labels and those cut at the chart's edge.
const [values, done] = arguments;
import("/reef/console/charts.js").then(({ lineChart }) => {
  const points = values.map((y, i) => ({ x: i + 1, y, label: `job-${i + 1}` }));
  const chart = lineChart("Loss per job", [{ name: "local", points }]);
  chart.style.width = "420px";
  document.getElementById("main").prepend(chart);
  const labels = [...chart.querySelectorAll("text.axis")].map((text) => text.textContent);
  const box = chart.querySelector("svg").getBoundingClientRect();
  const cut = [...chart.querySelectorAll("text.axis")]
    .filter((text) => {
      const label = text.getBoundingClientRect();
      return label.left < box.left - 0.5 || label.right > box.right + 0.5;
    })
    .map((text) => text.textContent);
  done({ labels, cut });
}, (error) => done({ error: String(error) }));
