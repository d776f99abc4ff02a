// Who talks to whom: the agents (and the user, virtual senders, channels) on a circle, an arrow
// per sender → recipient with the number of messages in the window, from `GET message-graph`.
// The SVG is drawn here by hand (a handful of nodes needs no library); the same counts are in a
// table below it for screen readers and for reading exact numbers. Redrawn when a message is
// created.

import { debounce, errorBox, h, replace, selectField } from "../../dom.js";

const SVG = "http://www.w3.org/2000/svg";
const WINDOWS = [
  { value: "1", label: "Last hour" },
  { value: "24", label: "Last 24 hours" },
  { value: "168", label: "Last 7 days" },
];

function s(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== null && v !== undefined) el.setAttribute(k, String(v));
  for (const c of children.flat()) if (c) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}

/** The graph section; it loads itself and follows `message.created` events. */
export function messageGraph(ctx) {
  let hours = "24";
  const picker = selectField({
    name: "window",
    label: "Window",
    value: hours,
    options: WINDOWS,
    onchange: (e) => {
      hours = e.target.value;
      load();
    },
  });
  const body = h("div", { "aria-live": "polite" });
  const el = h(
    "section",
    { class: "card message-graph", "data-message-graph": "" },
    h("h2", { class: "section-title", text: "Who talks to whom" }),
    h("div", { class: "filters" }, picker.el),
    body,
  );

  async function load() {
    try {
      const graph = await ctx.api.messageGraph({ hours });
      replace(body, draw(graph), table(graph));
    } catch (err) {
      replace(body, errorBox(err, "Cannot load the message graph"));
    }
  }
  const reload = debounce(load, 800);
  ctx.onEvent((e) => {
    if (e.type === "message.created") reload();
  });
  load();
  return { el };
}

function windowText(hours) {
  return WINDOWS.find((w) => w.value === String(hours))?.label.toLowerCase() ?? `last ${hours} hours`;
}

function draw(graph) {
  const nodes = graph.nodes || [];
  const edges = graph.edges || [];
  const W = 420;
  const H = 320;
  const cx = W / 2;
  const cy = H / 2;
  const r = Math.min(W, H) / 2 - 48;
  const at = new Map(
    nodes.map((n, i) => {
      const angle = -Math.PI / 2 + (2 * Math.PI * i) / Math.max(nodes.length, 1);
      return [n.id, { x: cx + r * Math.cos(angle), y: cy + r * Math.sin(angle) }];
    }),
  );
  const pairs = new Set(edges.map((e) => `${e.from}\u0000${e.to}`));
  const max = Math.max(1, ...edges.map((e) => e.count));
  const titleId = `graph-title-${graph.windowHours}`;
  const descId = `graph-desc-${graph.windowHours}`;
  const lines = edges
    .filter((e) => at.has(e.from) && at.has(e.to) && e.from !== e.to)
    .map((e) => {
      const a = at.get(e.from);
      const b = at.get(e.to);
      // Both directions present: bend each to its own side so they do not overlap.
      const both = pairs.has(`${e.to}\u0000${e.from}`);
      const dx = b.x - a.x;
      const dy = b.y - a.y;
      const len = Math.hypot(dx, dy) || 1;
      const bend = both ? 22 : 0;
      const mx = (a.x + b.x) / 2 - (dy / len) * bend;
      const my = (a.y + b.y) / 2 + (dx / len) * bend;
      // Stop at the edge of the target's circle, so the arrowhead shows.
      const ex = b.x - (dx / len) * 20;
      const ey = b.y - (dy / len) * 20;
      return s(
        "g",
        { "data-edge": `${e.from}->${e.to}` },
        s("path", { class: "edge", d: `M ${a.x} ${a.y} Q ${mx} ${my} ${ex} ${ey}`, "stroke-width": 1 + (3 * e.count) / max, "marker-end": "url(#graph-arrow)" }),
        s("text", { class: "count", x: (a.x + 2 * mx + ex) / 4, y: (a.y + 2 * my + ey) / 4 - 3, "text-anchor": "middle" }, String(e.count)),
      );
    });
  const circles = nodes.map((n) => {
    const p = at.get(n.id);
    return s(
      "g",
      { class: `node ${n.kind}`, "data-node": n.id },
      s("circle", { cx: p.x, cy: p.y, r: 16 }),
      s("text", { x: p.x, y: p.y + (p.y < cy ? -22 : 30), "text-anchor": "middle" }, n.id),
    );
  });
  return s(
    "svg",
    { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-labelledby": `${titleId} ${descId}` },
    s("title", { id: titleId }, `Messages between participants, ${windowText(graph.windowHours)}`),
    s("desc", { id: descId }, edges.length ? edges.map((e) => `${e.from} to ${e.to}: ${e.count}`).join("; ") : "No messages in this window."),
    s("defs", {}, s("marker", { id: "graph-arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerUnits: "userSpaceOnUse", markerWidth: 9, markerHeight: 9, orient: "auto-start-reverse" }, s("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "currentColor" }))),
    lines,
    circles,
  );
}

function table(graph) {
  const edges = graph.edges || [];
  return h(
    "table",
    { class: "grid small", "data-message-graph-table": "" },
    h("caption", { class: "muted small", text: `Messages, ${windowText(graph.windowHours)}` }),
    h("thead", {}, h("tr", {}, ["From", "To", "Messages"].map((t) => h("th", { scope: "col", text: t })))),
    h(
      "tbody",
      {},
      edges.length
        ? edges.map((e) => h("tr", { "data-from": e.from, "data-to": e.to }, h("td", { text: e.from }), h("td", { text: e.to }), h("td", { "data-count": "", text: String(e.count) })))
        : h("tr", {}, h("td", { colspan: 3, class: "muted", text: "No messages in this window." })),
    ),
  );
}
