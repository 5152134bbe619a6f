// The keys of the visible elements matching arguments[0] (what Tab should reach).
return [...document.querySelectorAll(arguments[0])]
  .filter(e => e.offsetParent !== null && getComputedStyle(e).visibility !== 'hidden')
  .map(e => e.dataset.key || e.id || e.textContent.trim().slice(0, 40));
