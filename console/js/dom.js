// Builds elements without innerHTML: summaries and ids come from the API and are shown as text only.

const SVG_NS = "http://www.w3.org/2000/svg";

function append(node, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function assign(node, attrs) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") node.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  return node;
}

/** An HTML element: h("a", {href: "/x"}, "text", child, ...). */
export function h(tag, attrs, ...children) {
  return append(assign(document.createElement(tag), attrs), children);
}

/** An SVG element, same calling convention as h. */
export function s(tag, attrs, ...children) {
  return append(assign(document.createElementNS(SVG_NS, tag), attrs), children);
}

/** Replace the children of ``node``. */
export function replace(node, ...children) {
  node.replaceChildren();
  return append(node, children);
}

/** A short status line for a failed call: the API's message and status, never a stack. */
export function problem(error) {
  const text = error && error.status ? `${error.message} (HTTP ${error.status})` : String(error?.message || error);
  return h("p", { class: "problem", role: "alert" }, text);
}

/** "3 min ago" style age of an ISO instant, for call-outs. */
export function age(iso, now = Date.now()) {
  const seconds = Math.max(0, Math.round((now - Date.parse(iso)) / 1000));
  if (seconds < 90) return `${seconds} s ago`;
  if (seconds < 5400) return `${Math.round(seconds / 60)} min ago`;
  if (seconds < 129600) return `${Math.round(seconds / 3600)} h ago`;
  return `${Math.round(seconds / 86400)} d ago`;
}

/** Load a page's own stylesheet once (the shell loads only the shared one). */
export function stylesheet(href) {
  if (document.querySelector(`link[rel="stylesheet"][href="${href}"]`)) return;
  document.head.append(h("link", { rel: "stylesheet", href }));
}

/** Ask for these modules now, all at once, rather than each after the module that imports it is parsed. */
export function preloadModules(hrefs) {
  for (const href of hrefs) {
    if (document.querySelector(`link[rel="modulepreload"][href="${href}"]`)) continue;
    document.head.append(h("link", { rel: "modulepreload", href }));
  }
}

/** "1 hit", "3 hits", "1,200 rows": a count with its noun agreeing (``many`` for irregular plurals). */
export function plural(n, one, many = `${one}s`) {
  return `${Number(n).toLocaleString("en")} ${n === 1 ? one : many}`;
}
