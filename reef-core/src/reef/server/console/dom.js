// Building the page's elements. Text always goes in as text nodes (never as HTML), so nothing
// a sample or an error holds can run as markup.

/**
 * An element: h("button", {class: "primary", onclick: f}, "Train").
 * Attributes named on* become listeners; true/false toggle boolean attributes; null is left out.
 */
export function h(tag, attributes = {}, ...children) {
  const svg = tag.startsWith("svg:");
  const element = svg
    ? document.createElementNS("http://www.w3.org/2000/svg", tag.slice(4))
    : document.createElement(tag);
  for (const [name, value] of Object.entries(attributes || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") {
      element.addEventListener(name.slice(2), value);
    } else if (value === true) {
      element.setAttribute(name, "");
    } else {
      element.setAttribute(name, String(value));
    }
  }
  append(element, children);
  return element;
}

function append(element, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/**
 * Replace the children of `container` with `children`, keeping the keyboard focus on the
 * element of the same data-key when there is one (a live refresh must not throw a person's
 * place away).
 */
export function replace(container, ...children) {
  const active = document.activeElement;
  const key = active && container.contains(active) ? active.dataset.key : undefined;
  container.replaceChildren();
  append(container, children);
  if (key) {
    const again = container.querySelector(`[data-key="${CSS.escape(key)}"]`);
    if (again) again.focus({ preventScroll: true });
  }
}

/** A definition list of [term, value] pairs (values may be nodes). */
export function facts(pairs) {
  return h(
    "dl",
    { class: "facts" },
    pairs.filter(Boolean).map(([term, value]) => [h("dt", {}, term), h("dd", {}, value)]),
  );
}
