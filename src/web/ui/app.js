// The app shell: picks the project, keeps the shared state (project summary, roster,
// channels, the live text of running model calls), runs the live event stream, and routes
// `#/<view>[/<key>]` to a view module.
//
// A view module exports `render(root, ctx, key)`; it may return a cleanup function. Whatever
// it subscribes to through `ctx` is released when the route changes.

import { EventStream, eventTypes, latestEvents, listProjects, projectApi } from "./api.js";
import { errorBox, h, pill, refreshTimes, replace, debounce } from "./dom.js";
import * as overview from "./views/overview.js";
import * as messages from "./views/messages.js";
import * as activations from "./views/activations.js";
import * as events from "./views/events.js";
import * as history from "./views/history.js";
import * as tools from "./views/tools.js";
import * as approvals from "./views/approvals.js";

const VIEWS = { overview, messages, activations, events, history, tools, approvals };
const DEFAULT_VIEW = "overview";

const state = {
  api: null,
  project: null, // GET /api/projects/:p, or the list entry while that route is missing
  projectError: null,
  agents: [],
  agentsError: null,
  stream: "connecting",
  // The server's event types (GET /api/event-types): name → { inFeed, refreshesSummary }.
  eventTypes: new Map(),
  newestEventId: null,
  recentEvents: [], // newest last, at most 200: the events view starts from these
  eventsReady: false,
  eventsError: null,
  // The text of each running model call so far, from `activation.delta` frames:
  // activation id → { agentId, text, chars }. Dropped once the turn is recorded.
  live: new Map(),
  // Pending approval requests (GET approvals): the tab's count and the agents' badges.
  pendingApprovals: [],
  openQuestions: [],
};

const listeners = { event: new Set(), state: new Set(), stream: new Set(), live: new Set() };

function emit(kind, value) {
  for (const fn of [...listeners[kind]]) {
    try {
      fn(value);
    } catch (err) {
      console.error(`${kind} listener failed`, err);
    }
  }
}

/** Parse `#/<view>[/<key>]`; the key may itself contain slashes (`control:pack/entry`). */
export function parseRoute(hash) {
  const path = (hash || "").replace(/^#\/?/, "");
  const slash = path.indexOf("/");
  const view = decodeURIComponent(slash < 0 ? path : path.slice(0, slash)) || DEFAULT_VIEW;
  const key = slash < 0 ? "" : decodeURIComponent(path.slice(slash + 1));
  return { view, key };
}

/** The hash for a view and key; keys keep their `/` and `:` readable. */
export function routeHash(view, key) {
  if (!key) return `#/${view}`;
  return `#/${view}/${encodeURIComponent(key).replace(/%2F/gi, "/").replace(/%3A/gi, ":")}`;
}

// --- shared state -------------------------------------------------------------------------

export function channelsOf(project) {
  const raw = project?.channels;
  if (!Array.isArray(raw)) return [];
  return raw
    .map((c) => (typeof c === "string" ? c : c?.name ?? c?.id))
    .filter((c) => typeof c === "string" && c);
}

async function refreshProject() {
  const api = state.api;
  const [summary, agents] = await Promise.allSettled([api.summary(), api.agents()]);
  if (summary.status === "fulfilled" && summary.value) {
    state.project = summary.value;
    state.projectError = null;
  } else if (summary.status === "rejected") {
    state.projectError = summary.reason;
    // Fall back to the project list entry (name, status, task) so the page still works.
    try {
      const list = await listProjects();
      const entry = (Array.isArray(list) ? list : []).find((p) => p.name === api.name);
      if (entry) state.project = { ...state.project, ...entry };
    } catch {
      /* keep what we had */
    }
  }
  try {
    state.pendingApprovals = await api.approvals();
  } catch {
    /* an older server has no approvals route: no badges */
  }
  try {
    state.openQuestions = await api.questions();
  } catch {
    /* an older server has no questions route: no badges */
  }
  renderApprovalCount();
  if (agents.status === "fulfilled") {
    state.agents = Array.isArray(agents.value) ? agents.value : agents.value?.items ?? [];
    state.agentsError = null;
  } else {
    state.agentsError = agents.reason;
  }
  renderChip();
  emit("state", state);
}

const refreshSoon = debounce(() => refreshProject().catch(() => {}), 400);

function renderChip() {
  const chip = document.getElementById("project-chip");
  if (!chip) return;
  const p = state.project;
  replace(chip, p ? [h("span", { class: "project-name", text: p.name }), pill(p.status)] : null);
}

function renderApprovalCount() {
  const badge = document.getElementById("approvals-count");
  if (!badge) return;
  const n = state.pendingApprovals.length + state.openQuestions.length;
  badge.hidden = n === 0;
  badge.textContent = String(n);
  badge.title = `${state.pendingApprovals.length} tool call(s) waiting for approval, ${state.openQuestions.length} question(s) waiting for an answer`;
}

const STREAM_LABELS = {
  connecting: "connecting…",
  live: "live",
  reconnecting: "reconnecting…",
  polling: "polling",
  offline: "offline",
};

function renderConn() {
  const conn = document.getElementById("conn");
  if (!conn) return;
  conn.className = `conn conn-${state.stream}`;
  conn.title =
    state.stream === "live"
      ? "Live updates over the event stream"
      : state.stream === "polling"
        ? "The event stream is unavailable; polling every 5 s"
        : "Live updates";
  replace(conn, h("span", { class: "dot", "aria-hidden": "true" }), STREAM_LABELS[state.stream] ?? state.stream);
}

// --- live model text ----------------------------------------------------------------------

function onLive(event) {
  if (event.type !== "activation.delta") return;
  const d = event.data || {};
  const piece = String(d.text ?? "");
  const entry = state.live.get(d.activationId);
  // `offset` counts characters (not UTF-16 units); 0 starts a new model call's text.
  if (d.offset === 0) state.live.set(d.activationId, { agentId: d.agentId, text: piece, chars: [...piece].length });
  else if (entry && entry.chars === d.offset) {
    entry.text += piece;
    entry.chars += [...piece].length;
  } else return; // a piece of a turn already recorded, or of one whose start was missed
  emit("live", { activationId: d.activationId, agentId: d.agentId });
}

// The recorded turn (or the activation's end) replaces the live text.
function endLive(event) {
  const d = event.data || {};
  const done = (event.type === "history.appended" && d.kind === "assistant_output") || /^activation\.(completed|failed|cancelled)$/.test(event.type ?? "");
  if (done && state.live.delete(d.activationId)) emit("live", { activationId: d.activationId, agentId: d.agentId });
}

// --- routing ------------------------------------------------------------------------------

let cleanup = [];
let currentRoute = null;

function context(route) {
  const own = [];
  const subscribe = (kind, fn) => {
    listeners[kind].add(fn);
    own.push(() => listeners[kind].delete(fn));
    return () => listeners[kind].delete(fn);
  };
  cleanup = own;
  return {
    api: state.api,
    state,
    route,
    channels: () => channelsOf(state.project),
    onEvent: (fn) => subscribe("event", fn),
    onState: (fn) => subscribe("state", fn),
    onStream: (fn) => subscribe("stream", fn),
    onLive: (fn) => subscribe("live", fn),
    refreshProject,
    navigate: (view, key) => {
      location.hash = routeHash(view, key);
    },
    href: routeHash,
    every: (fn, ms) => {
      const t = setInterval(fn, ms);
      own.push(() => clearInterval(t));
    },
  };
}

function route() {
  const { view, key } = parseRoute(location.hash);
  const root = document.getElementById("view");
  const module = VIEWS[view];
  for (const a of document.querySelectorAll("nav.tabs a[data-view]")) {
    if (a.dataset.view === view) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  for (const fn of cleanup) fn();
  cleanup = [];
  if (!module) {
    replace(root, errorBox(new Error(`unknown view "${view}"`)), h("p", {}, h("a", { href: "#/overview", text: "Go to the overview" })));
    return;
  }
  const sameView = currentRoute?.view === view;
  currentRoute = { view, key };
  root.replaceChildren();
  root.className = `view view-${view}`;
  document.title = `${module.title ?? view} · ${state.project?.name ?? "Suzumio"}`;
  const ctx = context(currentRoute);
  try {
    const dispose = module.render(root, ctx, key);
    if (typeof dispose === "function") cleanup.push(dispose);
  } catch (err) {
    console.error(err);
    root.append(errorBox(err, "This view failed"));
  }
  if (!sameView) root.focus({ preventScroll: true });
}

// --- start --------------------------------------------------------------------------------

async function start() {
  const root = document.getElementById("view");
  let projects;
  try {
    [projects, state.eventTypes] = await Promise.all([listProjects(), eventTypes()]);
  } catch (err) {
    replace(root, errorBox(err, "Cannot load the project"), h("button", { type: "button", onclick: () => location.reload(), text: "Retry" }));
    return;
  }
  const list = Array.isArray(projects) ? projects : projects?.items ?? [];
  if (list.length === 0) {
    replace(root, errorBox(new Error("this server has no project")));
    return;
  }
  state.api = projectApi(list[0].name);
  state.project = list[0];
  renderChip();
  renderConn();
  await refreshProject();

  const stream = new EventStream(state.api, {
    onEvent: (event) => {
      state.newestEventId = Math.max(state.newestEventId ?? 0, Number(event.id) || 0);
      state.recentEvents.push(event);
      if (state.recentEvents.length > 200) state.recentEvents.splice(0, state.recentEvents.length - 200);
      if (state.eventTypes.get(event.type)?.refreshesSummary) refreshSoon();
      endLive(event);
      emit("event", event);
    },
    onLive,
    onState: (s) => {
      state.stream = s;
      renderConn();
      emit("stream", s);
    },
  });
  window.addEventListener("hashchange", route);
  route();

  // The timeline's starting point, then the live stream from just after it. Views that show
  // events wait for `eventsReady` (announced through the state listeners).
  try {
    state.recentEvents = await latestEvents(state.api, state.project?.stats?.events, 200);
    const last = state.recentEvents[state.recentEvents.length - 1];
    state.newestEventId = last ? Number(last.id) : 0;
  } catch (err) {
    state.eventsError = err;
  }
  state.eventsReady = true;
  emit("state", state);
  stream.start(state.newestEventId ?? 0);
  setInterval(() => refreshTimes(), 15000);
  // A slow safety net: the roster and counters also refresh without any event.
  setInterval(() => {
    if (!document.hidden) refreshProject().catch(() => {});
  }, 15000);
}

start();
