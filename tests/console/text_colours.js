// Every visible text of the page: its colour and the background behind it (layers of
// translucent backgrounds composed), size and weight. Disabled controls and SVG are left out.
function rgba(text) {
  const m = text.match(/rgba?\(([^)]+)\)/);
  if (!m) return null;
  const p = m[1].split(',').map(Number);
  return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1];
}
function over(top, bottom) {
  const a = top[3];
  return [0, 1, 2].map(i => top[i] * a + bottom[i] * (1 - a)).concat([1]);
}
function background(e) {
  const layers = [];
  for (let n = e; n; n = n.parentElement) {
    const c = rgba(getComputedStyle(n).backgroundColor);
    if (c && c[3] > 0) { layers.push(c); if (c[3] >= 1) break; }
  }
  let colour = [255, 255, 255, 1];
  for (const layer of layers.reverse()) colour = over(layer, colour);
  return colour;
}
const found = [];
const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
for (let t = walker.nextNode(); t; t = walker.nextNode()) {
  const e = t.parentElement;
  if (!t.textContent.trim() || !e || e.closest('svg, [hidden]')) continue;
  if (e.offsetParent === null || e.closest('button:disabled, select:disabled, input:disabled')) continue;
  const s = getComputedStyle(e);
  const bg = background(e);
  found.push({text: t.textContent.trim().slice(0, 40), colour: over(rgba(s.color), bg), background: bg,
              size: parseFloat(s.fontSize), weight: parseInt(s.fontWeight, 10)});
}
return found;
