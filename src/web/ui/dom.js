// Small DOM helpers shared by the views. Every piece of data reaches the page as text nodes
// or attributes, never as HTML, so nothing the agents write can inject markup.

/**
 * Create an element. `attrs` keys: `class`, `text`, `on<event>` (listener), `data-*`/`aria-*`
 * and any other attribute; `checked`, `disabled`, `value`, `selected`, `hidden` are set as
 * properties. Children may be strings, nodes, arrays, or null/false (skipped).
 */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false && !PROPS.has(key)) continue;
    if (key === "class") el.className = Array.isArray(value) ? value.filter(Boolean).join(" ") : value;
    else if (key === "text") el.textContent = String(value);
    else if (key.startsWith("on") && typeof value === "function") el.addEventListener(key.slice(2), value);
    else if (PROPS.has(key)) el[key] = value;
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

const PROPS = new Set(["checked", "disabled", "value", "selected", "hidden", "open", "multiple"]);

export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

/** Replace every child of `el`. */
export function replace(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

const UNITS = [
  ["y", 365 * 86400],
  ["mo", 30 * 86400],
  ["d", 86400],
  ["h", 3600],
  ["m", 60],
  ["s", 1],
];

/** "3m ago", "in 2h", "just now"; "" for a missing time. */
export function relativeTime(iso, now = Date.now()) {
  if (!iso) return "";
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return String(iso);
  const diff = Math.round((now - t) / 1000);
  const abs = Math.abs(diff);
  if (abs < 5) return "just now";
  for (const [unit, secs] of UNITS) {
    if (abs >= secs) {
      const n = Math.floor(abs / secs);
      return diff >= 0 ? `${n}${unit} ago` : `in ${n}${unit}`;
    }
  }
  return "just now";
}

export function absoluteTime(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? String(iso) : d.toLocaleString();
}

/** A <time> that app.js keeps up to date ("3m ago"), with the absolute time as its tooltip. */
export function timeAgo(iso) {
  if (!iso) return h("span", { class: "muted", text: "—" });
  return h("time", { datetime: iso, title: absoluteTime(iso), "data-rel": "", text: relativeTime(iso) });
}

export function refreshTimes(root = document) {
  for (const el of root.querySelectorAll("time[data-rel]")) {
    el.textContent = relativeTime(el.getAttribute("datetime"));
  }
}

/** Human duration between two ISO times (or until now when `end` is missing). */
export function duration(start, end) {
  if (!start) return "";
  const ms = (end ? Date.parse(end) : Date.now()) - Date.parse(start);
  if (Number.isNaN(ms) || ms < 0) return "";
  if (ms < 1000) return `${ms} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${Math.round(s % 60)}s`;
  return `${Math.floor(m / 60)}h ${m % 60}m`;
}

/** A status pill; the class carries the status so CSS can colour it. */
export function pill(status, extra) {
  const s = String(status ?? "unknown");
  return h("span", { class: ["pill", `st-${s.replace(/[^a-z0-9_-]/gi, "_")}`, extra], text: s });
}

/** A channel as people write it: `#name` (configs may or may not include the `#`). */
export function channelLabel(channel) {
  const c = String(channel ?? "");
  return c.startsWith("#") ? c : `#${c}`;
}

export function priorityBadge(priority) {
  const p = String(priority ?? "");
  return h("span", { class: ["prio", `prio-${p}`], title: `Priority ${p}`, text: p });
}

/** An error box for an API error (or any Error), listing the details when present. */
export function errorBox(err, prefix) {
  const message = err?.message ?? String(err);
  const details = Array.isArray(err?.details) ? err.details : [];
  return h(
    "div",
    { class: "error-box", role: "alert" },
    h("strong", { text: prefix ? `${prefix}: ` : "Error: " }),
    message,
    err?.status === 404 && err?.route ? h("div", { class: "muted small", text: `(${err.route} is not available on this server)` }) : null,
    details.length
      ? h("ul", {}, details.map((d) => h("li", {}, d.path ? h("code", { text: d.path }) : null, d.path ? " " : null, d.message ?? "")))
      : null,
  );
}

/** Metric tiles from `[{label, value, description?}]`. */
export function metricTiles(metrics, attrs = {}) {
  return h(
    "div",
    { class: "tiles", ...attrs },
    (metrics || []).map((m) =>
      h(
        "div",
        { class: ["tile", m.tone ? `tone-${m.tone}` : null], title: m.description || null },
        h("div", { class: ["tile-value", typeof m.value === "number" ? null : "text"], text: formatValue(m.value) }),
        h("div", { class: "tile-label", text: m.label ?? "" }),
        m.description ? h("div", { class: "tile-desc", text: m.description }) : null,
      ),
    ),
  );
}

export function formatValue(value) {
  if (value === null || value === undefined || value === "") return "—";
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

export function pretty(value) {
  if (typeof value === "string") return value;
  try {
    return JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}

/** First `n` characters of a text, with an ellipsis when cut. */
export function clip(text, n) {
  const s = String(text ?? "");
  return s.length > n ? `${s.slice(0, n).trimEnd()}…` : s;
}

let idCounter = 0;
/** A document-unique id for label/aria wiring. */
export function uid(prefix = "id") {
  idCounter += 1;
  return `${prefix}-${idCounter}`;
}

/** Run `fn` at most once per `ms`, trailing (for refreshes triggered by bursts of events). */
export function debounce(fn, ms) {
  let timer = null;
  const wrapped = (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
  wrapped.cancel = () => clearTimeout(timer);
  return wrapped;
}

/** A labelled <select>; `options` are strings or `{value, label}`. */
export function selectField({ id, name, label, options, value, onchange }) {
  const fid = id || uid(name || "sel");
  const select = h(
    "select",
    { id: fid, name, onchange },
    options.map((o) => {
      const opt = typeof o === "string" ? { value: o, label: o } : o;
      return h("option", { value: opt.value, selected: opt.value === value, text: opt.label });
    }),
  );
  return { el: h("div", { class: "field inline" }, h("label", { for: fid, text: label }), select), select };
}
