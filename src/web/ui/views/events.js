// Events timeline, newest first, live over the event stream: new events are prepended as
// they arrive, without reloading. `[data-live]` says whether the stream is open.

import { errorBox, h, pretty, replace, timeAgo, uid } from "../dom.js";

export const title = "Events";

const MAX_SHOWN = 500;

const STREAM_TEXT = {
  live: "live",
  connecting: "connecting…",
  reconnecting: "reconnecting…",
  polling: "polling (no stream)",
  offline: "offline",
};

/** A one-line summary of an event's data: `key=value` pairs of its scalar fields. */
function summarize(data) {
  if (data === null || data === undefined) return "";
  if (typeof data !== "object") return String(data);
  return Object.entries(data)
    .filter(([, v]) => v !== null && v !== undefined && typeof v !== "object")
    .map(([k, v]) => `${k}=${String(v).length > 80 ? `${String(v).slice(0, 80)}…` : v}`)
    .join("  ");
}

function typeClass(type) {
  const head = String(type ?? "").split(".")[0].replace(/[^a-z_]/gi, "");
  return `ev-${head || "other"}`;
}

export function render(root, ctx) {
  const live = h("span", { class: "live", "data-live": "", role: "status" });
  const filterId = uid("filter");
  const filter = h("input", { id: filterId, type: "search", placeholder: "e.g. activation, message.created", autocomplete: "off" });
  const status = h("div", { class: "status-line" });
  const list = h("ol", { class: "timeline", "aria-label": "Events, newest first" });
  root.append(
    h(
      "header",
      { class: "page-head row" },
      h("div", {}, h("h2", { text: "Events" }), h("p", { class: "sub muted", text: "Everything the controller records, newest first." })),
      live,
    ),
    h("div", { class: "filters" }, h("div", { class: "field inline" }, h("label", { for: filterId, text: "Filter by type" }), filter)),
    status,
    list,
  );

  function drawLive(state) {
    live.textContent = STREAM_TEXT[state] ?? state;
    live.className = `live live-${state}`;
  }
  drawLive(ctx.state.stream);
  ctx.onStream(drawLive);

  const seen = new Set();

  function row(ev, fresh) {
    const text = summarize(ev.data);
    const li = h(
      "li",
      { class: ["event", typeClass(ev.type), fresh ? "fresh" : null], "data-event-id": ev.id, "data-type": ev.type },
      h(
        "div",
        { class: "event-head" },
        h("span", { class: "event-id muted", text: `#${ev.id}` }),
        h("span", { class: "event-type", text: ev.type }),
        h("span", { class: "muted small" }, timeAgo(ev.createdAt)),
      ),
      text ? h("div", { class: "event-summary", text }) : null,
      ev.data && typeof ev.data === "object" && Object.keys(ev.data).length
        ? h("details", { class: "json" }, h("summary", { text: "Data" }), h("pre", { text: pretty(ev.data) }))
        : null,
    );
    applyFilter(li);
    return li;
  }

  function applyFilter(li) {
    const q = filter.value.trim().toLowerCase();
    li.hidden = Boolean(q) && !String(li.dataset.type).toLowerCase().includes(q);
  }

  filter.addEventListener("input", () => {
    for (const li of list.children) applyFilter(li);
  });

  function add(ev, fresh) {
    if (ev.id !== undefined && seen.has(String(ev.id))) return;
    seen.add(String(ev.id));
    list.prepend(row(ev, fresh));
    while (list.children.length > MAX_SHOWN) list.lastElementChild.remove();
  }

  // Start from the events the app already holds (fetched at startup, kept current by the
  // stream), so the page shows at once and in step with the stream.
  let started = false;
  function startFromRecent() {
    if (started || !ctx.state.eventsReady) return;
    started = true;
    replace(list);
    const initial = ctx.state.recentEvents || [];
    for (const ev of initial) add(ev, false);
    if (!initial.length) {
      if (ctx.state.eventsError) replace(status, errorBox(ctx.state.eventsError, "Cannot load events"));
      else list.append(h("li", { class: "muted empty", text: "No events yet." }));
    }
  }
  list.append(h("li", { class: "muted empty", text: "Loading…" }));
  startFromRecent();
  ctx.onState(startFromRecent);

  ctx.onEvent((ev) => {
    list.querySelector(".empty")?.remove();
    add(ev, true);
  });
}
