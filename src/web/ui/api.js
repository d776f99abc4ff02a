// The API client: one fetch wrapper (same-origin cookies, JSON in and out, the
// `{error, details}` body turned into an ApiError) and the live event stream (SSE with a
// polling fallback). No view calls fetch directly.

export class ApiError extends Error {
  constructor(status, message, details = [], route = "") {
    super(message);
    this.name = "ApiError";
    this.status = status;
    this.details = Array.isArray(details) ? details : [];
    this.route = route;
  }
}

function withQuery(path, query) {
  if (!query) return path;
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) {
    if (v !== undefined && v !== null && v !== "") params.set(k, String(v));
  }
  const qs = params.toString();
  return qs ? `${path}?${qs}` : path;
}

export async function request(method, path, body) {
  // X-Suzumio-Client: a decision made here is recorded as the WebUI's (`by webui`).
  const init = { method, credentials: "same-origin", headers: { Accept: "application/json", "X-Suzumio-Client": "webui" } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (e) {
    throw new ApiError(0, `cannot reach the server (${e.message})`, [], path);
  }
  const text = await response.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = text;
    }
  }
  if (!response.ok) {
    const message =
      (data && typeof data === "object" && data.error) ||
      (typeof data === "string" && data.trim()) ||
      `${response.status} ${response.statusText}`;
    throw new ApiError(response.status, String(message), data?.details, path.split("?")[0]);
  }
  return data;
}

/** A list response as `{items, next}`, whether the route returns a page or a bare array. */
export function page(data) {
  if (Array.isArray(data)) return { items: data, next: null };
  return { items: Array.isArray(data?.items) ? data.items : [], next: data?.next ?? null };
}

const enc = encodeURIComponent;

/** The routes of one project, as in the API contract (issue [F]). */
export function projectApi(name) {
  const base = `/api/projects/${enc(name)}`;
  const get = (path, query) => request("GET", withQuery(base + path, query));
  const post = (path, body) => request("POST", base + path, body ?? {});
  return {
    name,
    summary: () => get(""),
    agents: () => get("/agents"),
    resume: (agent) => post(`/agents/${enc(agent)}/resume`),
    history: (agent, { limit = 80, before } = {}) => get(`/agents/${enc(agent)}/history`, { limit, before }).then(page),
    messages: ({ limit = 100, before } = {}) => get("/messages", { limit, before }).then(page),
    message: (id) => get(`/messages/${enc(id)}`),
    activations: ({ agent, limit = 50, before } = {}) => get("/activations", { agent, limit, before }).then(page),
    activation: (id) => get(`/activations/${enc(id)}`),
    timeline: (id) => get(`/activations/${enc(id)}/timeline`),
    messageGraph: ({ hours = 24 } = {}) => get("/message-graph", { hours }),
    events: ({ after, limit = 200 } = {}) => get("/events", { after, limit }).then(page),
    signals: (query = {}) => get("/signals", query).then(page),
    toolStatus: () => get("/tool-status"),
    toolCatalog: () => get("/tools"),
    agentTools: (agent) => get(`/agents/${enc(agent)}/tools`),
    /** Switch one agent's tool, or group (`group` true), off or back on: `PUT …/tools/:t`, `…/tool-groups/:g`. */
    switchTools: (agent, name, { group = false, enabled }) =>
      request("PUT", `${base}/agents/${enc(agent)}/${group ? "tool-groups" : "tools"}/${enc(name)}`, { enabled }),
    toolUi: () => get("/tool-ui"),
    invoke: (pack, entry, input) => post(`/tool-ui/${enc(pack)}/${enc(entry)}`, input),
    config: () => get("/config"),
    report: () => get("/report"),
    start: () => post("/start"),
    stop: () => post("/stop"),
    approve: () => post("/approve"),
    approvals: ({ all } = {}) => get("/approvals", { all }).then((d) => d?.approvals ?? []),
    allowApproval: (id, decision) => post(`/approvals/${enc(id)}/allow`, decision),
    denyApproval: (id, decision) => post(`/approvals/${enc(id)}/deny`, decision),
    questions: ({ all } = {}) => get("/questions", { all }).then((d) => d?.questions ?? []),
    answerQuestion: (id, answer) => post(`/questions/${enc(id)}/answer`, answer),
    rememberedRules: () => get("/permissions/rules").then((d) => d?.rules ?? []),
    permissionRules: () => get("/permissions/rules"),
    addRule: (rule) => post("/permissions/rules", rule),
    setPermissionMode: (agent, mode) => request("PUT", `${base}/agents/${enc(agent)}/permission-mode`, { mode }),
    audit: ({ agent, since, limit } = {}) => get("/audit", { agent, since, limit }),
    deleteRule: (id) => request("DELETE", `${base}/permissions/rules/${enc(id)}`),
    requestChanges: (body) => post("/request-changes", { body }),
    sendMessage: (message) => post("/messages", message),
    streamUrl: `${base}/stream`,
  };
}

export const listProjects = () => request("GET", "/api/projects");

/**
 * Every event type the server records, by name → `{ name, inFeed, refreshesSummary }`: what
 * the activity feed leaves out and what is worth reading the summary again for.
 */
export async function eventTypes() {
  const { types } = await request("GET", "/api/event-types");
  return new Map((types || []).map((t) => [t.name, t]));
}

/**
 * The newest `n` events, oldest first. `GET events` only pages forward (`after`), so start
 * near the end using the project's event count as a hint (ids count up from 1) and page on.
 */
export async function latestEvents(api, countHint, n = 100) {
  const start = Number.isFinite(countHint) ? Math.max(0, countHint - n) : 0;
  let all = [];
  let after = start;
  for (let round = 0; round < 50; round += 1) {
    const { items } = await api.events({ after, limit: 500 });
    if (items.length === 0) break;
    all = all.concat(items).slice(-n);
    after = Number(items[items.length - 1].id);
  }
  if (all.length === 0 && start > 0) return latestEvents(api, undefined, n);
  return all;
}

/**
 * The project's live events. Calls `onEvent(event)` once per event, in id order, and
 * `onState(state)` with "connecting" | "live" | "reconnecting" | "polling" | "offline".
 *
 * The stream sends plain `data:` frames (the event record, its type in `type`), so every event
 * reaches `onmessage` whatever its type. Event ids are consecutive, so a jump in ids still means
 * something went by unseen: the missing ones are fetched from `GET events?after=`. When the
 * stream route is missing or keeps failing, the same route is polled instead.
 */
export class EventStream {
  constructor(api, { onEvent, onState, onLive }) {
    this.api = api;
    this.onEvent = onEvent;
    this.onState = onState;
    this.onLive = onLive;
    this.lastId = null;
    this.queue = Promise.resolve();
    this.source = null;
    this.pollTimer = null;
    this.state = null;
    this.failures = 0;
  }

  /** Start after the event with id `lastId` (the newest one the page already shows). */
  start(lastId) {
    this.lastId = Number.isFinite(lastId) ? lastId : null;
    this.connect();
  }

  setState(state) {
    if (state === this.state) return;
    this.state = state;
    this.onState?.(state);
  }

  connect() {
    if (typeof EventSource === "undefined") return this.poll();
    this.setState("connecting");
    // `after` closes the window between the page's first read of the events and the stream;
    // on reconnects the browser's Last-Event-ID takes over.
    const url = this.lastId !== null ? `${this.api.streamUrl}?after=${this.lastId}` : this.api.streamUrl;
    const source = new EventSource(url);
    this.source = source;
    source.onopen = () => {
      this.failures = 0;
      this.setState("live");
    };
    source.onerror = () => {
      if (source.readyState === EventSource.CLOSED) {
        // A 404, a wrong content type or an auth failure: the browser will not retry.
        this.source = null;
        this.poll();
      } else {
        this.failures += 1;
        this.setState("reconnecting");
      }
    };
    source.onmessage = (e) => this.receive(e);
  }

  receive(e) {
    let event;
    try {
      event = JSON.parse(e.data);
    } catch {
      return;
    }
    if (!event || typeof event !== "object") return;
    // Ephemeral frames (live model text) have no id: not part of the timeline, never refetched.
    if (event.ephemeral) {
      this.onLive?.(event);
      return;
    }
    if (event.id === undefined && e.lastEventId) event.id = Number(e.lastEventId);
    this.enqueue(async () => {
      const id = Number(event.id);
      if (this.lastId !== null && Number.isFinite(id)) {
        if (id <= this.lastId) return;
        if (id > this.lastId + 1) await this.fill(id);
        if (id <= this.lastId) return;
      }
      this.deliver(event);
    });
  }

  enqueue(task) {
    this.queue = this.queue.then(task).catch((err) => console.warn("event stream:", err));
    return this.queue;
  }

  deliver(event) {
    const id = Number(event.id);
    if (Number.isFinite(id)) this.lastId = this.lastId === null ? id : Math.max(this.lastId, id);
    this.onEvent?.(event);
  }

  /** Fetch and deliver the events after `lastId`, until `untilId` is reached or none are left. */
  async fill(untilId = Infinity) {
    if (this.lastId === null) return;
    for (let round = 0; round < 10; round += 1) {
      const { items } = await this.api.events({ after: this.lastId, limit: 200 });
      const fresh = items.filter((ev) => Number(ev.id) > this.lastId).sort((a, b) => a.id - b.id);
      for (const ev of fresh) this.deliver(ev);
      if (fresh.length === 0 || this.lastId >= untilId) return;
    }
  }

  poll() {
    this.setState("polling");
    clearTimeout(this.pollTimer);
    const tick = () => {
      this.enqueue(async () => {
        try {
          if (this.lastId === null) this.lastId = 0;
          await this.fill();
          this.setState("polling");
        } catch {
          this.setState("offline");
        }
      }).then(() => {
        this.pollTimer = setTimeout(tick, 5000);
      });
    };
    this.pollTimer = setTimeout(tick, 1000);
  }

  close() {
    this.source?.close();
    this.source = null;
    clearTimeout(this.pollTimer);
  }
}
