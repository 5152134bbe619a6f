// The focused element, scrolled into view, and the outline or shadow that shows its focus.
const e = document.activeElement;
e.scrollIntoView({block: 'nearest'});
const s = getComputedStyle(e);
return {key: e.dataset.key || e.id || e.textContent.trim().slice(0, 40), tag: e.tagName,
        outline: s.outlineStyle, width: parseFloat(s.outlineWidth), color: s.outlineColor,
        shadow: s.boxShadow};
