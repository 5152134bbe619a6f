// Draw, with the page's own modules, a sample list of one sample consumed by a failed job and
// that sample opened; answer the list's badges, the opened sample's facts and its job line.
const [scenario, page, detail, done] = arguments;
Promise.all([import("/reef/console/samples.js"), import("/reef/console/sample.js")]).then(
  ([{ Browsing, sampleBrowser }, { sampleView }]) => {
    const box = document.createElement("section");
    const noop = () => {};
    const actions = { filter: noop, next: noop, previous: noop, first: noop, toggle: noop, open: noop, insert: noop, remove: noop, close: noop };
    box.append(...sampleBrowser(scenario, new Browsing(), page, { buffers: {} }, actions).flat());
    box.append(...sampleView(detail, false, actions).flat());
    document.getElementById("main").prepend(box);
    const badges = [...box.querySelectorAll(".badge")].map((b) => `${b.className}: ${b.textContent}`);
    const facts = Object.fromEntries([...box.querySelectorAll(".facts dt")].map((t) => [t.textContent, t.nextElementSibling.textContent]));
    const jobs = [...box.querySelectorAll(".jobs-of-sample li")].map((item) => item.textContent);
    box.remove();
    done({ badges, facts, jobs });
  },
  (error) => done({ error: String(error) }),
);
