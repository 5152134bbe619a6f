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
 * Replace the children of `container` with `children`, keeping the person's place: the
 * keyboard focus and the caret go back to the element of the same data-key, the text typed
 * into a field (a value that differs from the one the page drew) goes back into the field of
 * the same data-key, and each scrolled box of a data-key keeps its scroll. A live refresh must
 * not throw away what a person was doing.
 */
export function replace(container, ...children) {
  const active = document.activeElement;
  const key = active && container.contains(active) ? active.dataset.key : undefined;
  const caret = key && typeof active.selectionStart === "number" ? [active.selectionStart, active.selectionEnd, active.selectionDirection] : null;
  const typed = new Map();
  for (const field of container.querySelectorAll("input[data-key], textarea[data-key]")) {
    if (field.type !== "checkbox" && field.type !== "radio" && field.value !== field.defaultValue) {
      typed.set(field.dataset.key, field.value);
    }
  }
  const scrolled = new Map();
  for (const box of container.querySelectorAll("[data-scroll]")) {
    if (box.scrollTop || box.scrollLeft) scrolled.set(box.dataset.scroll, [box.scrollTop, box.scrollLeft]);
  }
  container.replaceChildren();
  append(container, children);
  const same = (attribute, name) => container.querySelector(`[${attribute}="${CSS.escape(name)}"]`);
  for (const [name, value] of typed) {
    const field = same("data-key", name);
    if (field) field.value = value;
  }
  for (const [name, [top, left]] of scrolled) {
    const box = same("data-scroll", name);
    if (box) {
      box.scrollTop = top;
      box.scrollLeft = left;
    }
  }
  if (key) {
    const again = same("data-key", key);
    if (again) {
      again.focus({ preventScroll: true });
      if (caret && typeof again.setSelectionRange === "function") {
        try {
          again.setSelectionRange(...caret);
        } catch {
          // a field type without a caret (number, email): the focus is enough
        }
      }
    }
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
