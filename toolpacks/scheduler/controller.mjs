// Suzumio packaged scheduler toolpack: controller module (runs on the controller side, in the
// controller's embedded JavaScript engine). Reference §5.1, plus cron/time zones, endAt,
// maxRuns, pause/resume and missed-run bookkeeping.
//
// State: one document, toolpack-state/<pack id>/jobs.json = {"version": 1, "jobs": [Job...]}.
// Jobs are only ever appended or replaced, never removed, so a job's index is stable. A job's
// `createdBy` is the agent whose support call created it, or "user" (the WebUI): an agent's job
// is sent as that agent and checked by the communication policy, when created and when it fires.
//
// Invariants:
// * Every change goes through commit(): the new document is built in full first (inputs are
//   validated before anything is built), then written once, atomically (context.state.write),
//   and only then does the in-memory cache change. A failed write leaves cache and file as
//   they were, except after a scheduler tick has already sent messages (see `dirty`).
// * The cache (parsed document, id index, and a queue of active jobs sorted by nextAt) is
//   loaded from disk on the first call after the module is (re)loaded and is then the truth:
//   calls into one pack run one at a time on its runtime thread, and this module is the only
//   writer of its state. So a tick with nothing due reads no file and compares one number.
// * A corrupt jobs.json is never replaced by an empty one: the host moves it aside, and the
//   scheduler refuses to work (a marker file remembers this across restarts) until a valid
//   jobs.json is back.
// * Time always comes from the controller clock (context.time.now() / context.now), never from
//   Date.now(), so tests can drive it by hand. Date is only used for arithmetic.

const STATE_FILE = "jobs.json";
const BLOCK_FILE = "jobs-blocked.json";
const WEEKDAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];
const PRIORITIES = ["P0", "P1", "P2", "P3"];
const USER = "user";
const SENDERS = ["scheduler", USER];
const ONCE_DELAYS = [
  ["afterMs", 1],
  ["afterSeconds", 1000],
  ["afterMinutes", 60_000],
  ["afterHours", 3_600_000],
  ["afterDays", 86_400_000],
];
const INTERVALS = [
  ["everyMs", 1],
  ["everyMinutes", 60_000],
  ["everyHours", 3_600_000],
  ["everyDays", 86_400_000],
];
/** Missed occurrences are counted up to this many per delivery. */
const MISSED_RUNS_CAP = 1000;
/** Deliveries per tick; the rest follow on the next tick (asked for at once via wakeAt). */
const DELIVERIES_PER_TICK = 200;
const BODY_PREVIEW_CHARS = 140;
/** Timestamps stay within four-digit years, so every nextAt is a plain RFC 3339 string. */
const MAX_TIME_MS = Date.UTC(9999, 11, 31, 23, 59, 59, 999);
/** WebUI "Schedule once" without a time or delay: in an hour (reference §5.1). */
const WEBUI_DEFAULT_AFTER_MINUTES = 60;

// ---------------------------------------------------------------------------------------------
// Module state (one instance per pack runtime).

/** {doc, byId: Map<id, index>, queue: [{ms, idx}] of active jobs sorted by (ms, idx)} or null. */
let cache = null;
/** A tick sent messages but could not write jobs.json; the next tick or change writes again. */
let dirty = false;
/** The last load error a tick reported, so a persisting problem is reported once, not every tick. */
let lastTickError = null;

// ---------------------------------------------------------------------------------------------
// Exports.

export function createControllerToolpack(context) {
  return {
    tools: {
      "schedule.once": (input) => scheduleOnce(context, input, false),
      "schedule.recurring": (input) => scheduleRecurring(context, input),
      "schedule.list": (input) => listJobs(context, input),
      "schedule.cancel": (input) => cancelJob(context, input),
      "schedule.pause": (input) => pauseJob(context, input),
      "schedule.resume": (input) => resumeJob(context, input),
    },
  };
}

export function createWebuiToolpack(context) {
  return {
    webui: {
      "schedule.jobs": (input) => listJobs(context, input),
      "schedule.once": (input) => scheduleOnce(context, input, true),
      "schedule.recurring": (input) => scheduleRecurring(context, input),
      "schedule.cancel": (input) => cancelJob(context, input),
      "schedule.pause": (input) => pauseJob(context, input),
      "schedule.resume": (input) => resumeJob(context, input),
    },
  };
}

/**
 * Deliver due jobs. Returns no signal requests and `wakeAt`: the earliest nextAt still in the
 * future (held and failing jobs wait for the next event or periodic tick instead), or now when
 * more due jobs are left than one tick delivers, or null when nothing is scheduled.
 */
export async function schedulerTick(context) {
  const nowIso = typeof context.now === "string" ? context.now : context.time.now();
  const now = parseTimestamp(nowIso);
  if (cache !== null && !dirty) {
    const head = cache.queue[0];
    if (head === undefined) return { signals: [], wakeAt: null };
    if (head.ms > now) return { signals: [], wakeAt: toIso(head.ms) };
  }
  let state;
  try {
    state = load(context);
  } catch (e) {
    const message = errorText(e);
    if (message === lastTickError) return { signals: [], wakeAt: null };
    lastTickError = message;
    throw e;
  }
  if (dirty) commit(context, state, new Map(), { keepOnFailure: true });
  return deliverDue(context, state, now, nowIso);
}

// ---------------------------------------------------------------------------------------------
// Tools.

function scheduleOnce(context, rawInput, fromWebui) {
  const input = objectInput(rawInput);
  const nowIso = context.time.now();
  const now = parseTimestamp(nowIso);
  const config = context.store.config();
  const message = messageFields(context, config, input);
  const delays = ONCE_DELAYS.map(([key, unit]) => [key, finiteNumber(input[key]), unit]);
  const at = optionalTimestamp(input, "at");
  let schedule;
  let next;
  if (at !== undefined) {
    next = at;
    schedule = { at: toIso(at) };
  } else {
    const noDelayGiven = ONCE_DELAYS.every(([key]) => !isGiven(input[key]));
    let delay = delays.reduce((sum, [, value, unit]) => sum + Math.max(0, value) * unit, 0);
    if (fromWebui && noDelayGiven) delay = WEBUI_DEFAULT_AFTER_MINUTES * 60_000;
    delay = Math.round(delay);
    if (!(delay > 0)) throw new Error("schedule.once requires at or a positive after* delay");
    next = now + delay;
    schedule = { afterMs: delay };
  }
  checkInRange(next);
  const job = newJob(context, "once", nowIso, next, message, schedule);
  const state = load(context);
  commit(context, state, new Map([[state.doc.jobs.length, job]]));
  return created(job);
}

function scheduleRecurring(context, rawInput) {
  const input = objectInput(rawInput);
  const nowIso = context.time.now();
  const now = parseTimestamp(nowIso);
  const config = context.store.config();
  const message = messageFields(context, config, input);

  const everyMs = Math.round(
    INTERVALS.reduce((sum, [key, unit]) => sum + Math.max(0, finiteNumber(input[key])) * unit, 0),
  );
  const weekday = optionalString(input, "weekday");
  const time = optionalString(input, "time");
  const cron = optionalString(input, "cron");
  const hasEvery = everyMs > 0;
  const hasWeekly = weekday !== undefined || time !== undefined;
  const hasCron = cron !== undefined;
  if (hasCron && (hasEvery || hasWeekly)) throw new Error("Use only one of every*, weekday/time or cron");
  if (hasEvery && hasWeekly) throw new Error("Use either an every* interval or weekday/time, not both");

  const startAt = optionalTimestamp(input, "startAt");
  const endAt = optionalTimestamp(input, "endAt");
  const maxRuns = optionalMaxRuns(input);

  let schedule;
  if (hasCron) {
    checkCronDayNames(cron);
    schedule = { mode: "cron", cron, timezone: timezoneFrom(context, input) };
  } else if (hasEvery) {
    schedule = { mode: "interval", everyMs };
  } else if (weekday !== undefined && time !== undefined) {
    const day = weekday.toLowerCase();
    if (!WEEKDAYS.includes(day)) throw new Error(`Invalid weekday: ${weekday}`);
    const match = /^(\d{1,2}):(\d{2})$/.exec(time);
    const hour = match ? Number(match[1]) : NaN;
    const minute = match ? Number(match[2]) : NaN;
    if (!(hour >= 0 && hour <= 23 && minute >= 0 && minute <= 59)) {
      throw new Error(`Invalid time, expected HH:MM: ${time}`);
    }
    schedule = { mode: "weekly", weekday: day, hour, minute, timezone: timezoneFrom(context, input) };
  } else {
    throw new Error("schedule.recurring requires a positive every* interval, or weekday plus time");
  }
  if (startAt !== undefined) schedule.startAt = toIso(startAt);
  if (endAt !== undefined) schedule.endAt = toIso(endAt);
  if (maxRuns !== undefined) schedule.maxRuns = maxRuns;

  const first = firstRun(context, schedule, now);
  if (first === null) throw new Error(`Cron expression ${cron} has no future run`);
  checkInRange(first);
  if (endAt !== undefined && first > endAt) {
    throw new Error(`endAt ${toIso(endAt)} is before the first run at ${toIso(first)}`);
  }
  const job = newJob(context, "recurring", nowIso, first, message, schedule);
  const state = load(context);
  commit(context, state, new Map([[state.doc.jobs.length, job]]));
  return created(job);
}

function listJobs(context, rawInput) {
  const input = objectInput(rawInput);
  const includeInactive = optionalBoolean(input, "includeInactive");
  const state = load(context);
  const all = state.doc.jobs;
  const jobs = includeInactive ? all : all.filter((job) => job.status !== "done" && job.status !== "cancelled");
  const count = (status) => all.reduce((n, job) => n + (job.status === status ? 1 : 0), 0);
  const lines = jobs.length === 0 ? ["- none"] : jobs.map(listLine);
  return {
    title: "scheduled messages",
    output: ["Scheduled messages:", ...lines].join("\n"),
    metadata: {
      metrics: [
        { label: "Active", value: count("active") },
        { label: "Done", value: count("done") },
        { label: "Cancelled", value: count("cancelled") },
        { label: "Paused", value: count("paused") },
      ],
      jobs,
    },
  };
}

function cancelJob(context, rawInput) {
  const id = jobId(rawInput);
  const nowIso = context.time.now();
  const state = load(context);
  const idx = findJob(state, id);
  const job = state.doc.jobs[idx];
  let result = job;
  if (job.status === "active" || job.status === "paused") {
    result = { ...job, status: "cancelled", cancelledAt: nowIso };
    commit(context, state, new Map([[idx, result]]));
  }
  return { title: "scheduled message cancelled", output: `Cancelled ${id}.`, metadata: { job: result } };
}

function pauseJob(context, rawInput) {
  const id = jobId(rawInput);
  const nowIso = context.time.now();
  const state = load(context);
  const idx = findJob(state, id);
  const job = state.doc.jobs[idx];
  if (job.status !== "active") {
    throw new Error(`Cannot pause ${id}: it is ${job.status}; only active jobs can be paused`);
  }
  const paused = { ...job, status: "paused", pausedAt: nowIso };
  commit(context, state, new Map([[idx, paused]]));
  return { title: "scheduled message paused", output: `Paused ${id}.`, metadata: { job: paused } };
}

function resumeJob(context, rawInput) {
  const id = jobId(rawInput);
  const nowIso = context.time.now();
  const now = parseTimestamp(nowIso);
  const state = load(context);
  const idx = findJob(state, id);
  const job = state.doc.jobs[idx];
  if (job.status !== "paused") throw new Error(`Cannot resume ${id}: it is ${job.status}, not paused`);
  const resumed = { ...job, status: "active", resumedAt: nowIso };
  delete resumed.pausedAt;
  if (job.type === "recurring") {
    // Runs missed while paused are not owed: the schedule restarts from now.
    const schedule = job.schedule ?? {};
    const next = firstRun(context, schedule, now);
    const endAt = schedule.endAt !== undefined ? parseTimestamp(schedule.endAt) : Infinity;
    if (next === null || next > endAt || next > MAX_TIME_MS) {
      throw new Error(`Cannot resume ${id}: it has no run left${schedule.endAt ? ` before its endAt ${schedule.endAt}` : ""}`);
    }
    resumed.nextAt = toIso(next);
  }
  commit(context, state, new Map([[idx, resumed]]));
  return { title: "scheduled message resumed", output: `Resumed ${id}.`, metadata: { job: resumed } };
}

// ---------------------------------------------------------------------------------------------
// Input checks.

function objectInput(input) {
  if (input === undefined || input === null) return {};
  if (typeof input !== "object" || Array.isArray(input)) throw new Error("Tool input must be an object");
  return input;
}

/** Present and not blank. */
function isGiven(value) {
  return value !== undefined && value !== null && !(typeof value === "string" && value.trim() === "");
}

function optionalString(input, key) {
  const value = input[key];
  if (!isGiven(value)) return undefined;
  if (typeof value !== "string") throw new Error(`${key} must be a string, got ${show(value)}`);
  return value.trim();
}

function optionalBoolean(input, key) {
  const value = input[key];
  if (value === undefined || value === null) return false;
  if (typeof value !== "boolean") throw new Error(`Expected boolean, got ${show(value)}`);
  return value;
}

/** A number (or numeric string); absent is 0. */
function finiteNumber(value) {
  if (!isGiven(value)) return 0;
  const n = typeof value === "number" ? value : typeof value === "string" ? Number(value) : NaN;
  if (!Number.isFinite(n)) throw new Error(`Expected finite number, got ${show(value)}`);
  return n;
}

function optionalTimestamp(input, key) {
  const value = input[key];
  if (!isGiven(value)) return undefined;
  const ms = typeof value === "string" ? parseTimestamp(value) : NaN;
  if (!Number.isFinite(ms)) throw new Error(`Invalid ${key} timestamp: ${show(value)}`);
  return ms;
}

function optionalMaxRuns(input) {
  const value = input.maxRuns;
  if (!isGiven(value)) return undefined;
  const n = typeof value === "string" ? Number(value) : value;
  if (typeof n !== "number" || !Number.isInteger(n) || n < 1) {
    throw new Error(`Invalid maxRuns, expected a positive integer: ${show(value)}`);
  }
  return n;
}

function timezoneFrom(context, input) {
  const timezone = optionalString(input, "timezone") ?? "UTC";
  context.time.checkTimezone(timezone);
  return timezone;
}

function jobId(rawInput) {
  const id = optionalString(objectInput(rawInput), "id");
  if (id === undefined) throw new Error("id is required");
  return id;
}

/**
 * The cron crate behind context.time.nextCron numbers weekdays 1 (Sunday) to 7, while Unix cron
 * uses 0 or 7 for Sunday and 1 for Monday: "1-5" would silently mean Sunday to Thursday. Names
 * mean the same everywhere, so numbers are refused in the day-of-week field.
 */
function checkCronDayNames(expr) {
  const fields = expr.split(/\s+/);
  const dow = fields.length === 5 ? fields[4] : fields.length === 6 ? fields[5] : undefined;
  if (dow !== undefined && /\d/.test(dow.replace(/\/\d+$/, ""))) {
    throw new Error(
      `Use day names (sun, mon, tue, wed, thu, fri, sat) in the cron day-of-week field, not numbers: ${expr}`,
    );
  }
}

/**
 * Sender, route, priority, waitForQuiet and body, checked (reference §5.1 routing). A job an
 * agent schedules (a support call: context.agent is set by the controller) is sent as that agent
 * and must pass the communication policy now, through the same check the host applies when the
 * job fires; from the WebUI (the user) any of "scheduler", "user" or an agent may be the sender.
 */
function messageFields(context, config, input) {
  const body = input.body;
  if (typeof body !== "string" || body.trim() === "") throw new Error("body is required");
  const agentIds = (config.agents ?? []).map((agent) => agent.id);
  const creator = context.agent?.id;
  const sender = optionalString(input, "sender") ?? creator ?? "scheduler";
  if (!SENDERS.includes(sender) && !agentIds.includes(sender)) throw new Error(`Unknown sender: ${sender}`);
  const route = routeFromInput(config, agentIds, input);
  const priority = optionalString(input, "priority") ?? "P3";
  if (!PRIORITIES.includes(priority)) throw new Error(`Invalid priority: ${input.priority}`);
  const waitForQuiet = optionalBoolean(input, "waitForQuiet");
  if (creator !== undefined) context.store.checkMessage({ sender, ...route, priority });
  return { sender, ...route, priority, waitForQuiet, body };
}

function routeFromInput(config, agentIds, input) {
  const recipient = optionalString(input, "recipient");
  const channel = optionalString(input, "channel");
  if (recipient !== undefined && channel !== undefined) throw new Error("Use either recipient or channel, not both");
  if (channel !== undefined) {
    if (!(config.channels ?? []).includes(channel)) throw new Error(`Unknown channel: ${channel}`);
    return { channel };
  }
  if (recipient !== undefined) {
    if (recipient !== "user" && !agentIds.includes(recipient)) throw new Error(`Unknown recipient: ${recipient}`);
    return { recipient };
  }
  const coordinator = config.communication?.coordinatorAgent ?? null;
  if (agentIds.includes(coordinator)) return { recipient: coordinator };
  return { recipient: agentIds.length > 0 ? agentIds[0] : "user" };
}

function checkInRange(ms) {
  if (!(ms <= MAX_TIME_MS)) throw new Error(`Scheduled time is out of range (after 9999-12-31): ${ms} ms since 1970`);
}

// ---------------------------------------------------------------------------------------------
// Jobs.

function newJob(context, type, nowIso, next, message, schedule) {
  const job = {
    id: `sch_${context.uuid()}`,
    type,
    status: "active",
    createdAt: nowIso,
    nextAt: toIso(next),
    sentCount: 0,
    sender: message.sender,
  };
  if (message.recipient !== undefined) job.recipient = message.recipient;
  if (message.channel !== undefined) job.channel = message.channel;
  job.priority = message.priority;
  job.waitForQuiet = message.waitForQuiet;
  job.body = message.body;
  job.schedule = schedule;
  // Who the job acts for when it fires (see deliverOne): set only from the controller's context
  // of this call, never from the input.
  job.createdBy = context.agent?.id ?? USER;
  return job;
}

/** The agent that created a job, or undefined for the user (the WebUI). */
function createdByAgent(job) {
  return typeof job.createdBy === "string" && job.createdBy !== USER ? job.createdBy : undefined;
}

function created(job) {
  return {
    title: "scheduled message created",
    output: [
      `Scheduled ${job.id}.`,
      `Next: ${job.nextAt}`,
      `Route: ${job.sender} -> ${routeOf(job)}`,
      `Priority: ${job.priority}`,
    ].join("\n"),
    metadata: { job },
  };
}

function routeOf(job) {
  return job.channel ?? job.recipient ?? "(none)";
}

function listLine(job) {
  let line =
    `- ${job.id} [${job.status}/${job.type}] next ${job.nextAt}, ` +
    `${job.priority} ${job.sender} -> ${routeOf(job)}, sent ${job.sentCount ?? 0}`;
  if (job.waitForQuiet === true) line += ", waits for quiet";
  line += `: ${preview(job.body)}`;
  if (job.lastError) line += ` (last delivery failed: ${job.lastError})`;
  if (job.missedRuns > 0) line += `, missed ${job.missedRuns} run(s) while stopped`;
  return line;
}

function preview(body) {
  const text = String(body ?? "").replace(/\s+/g, " ").trim();
  return text.length > BODY_PREVIEW_CHARS ? `${text.slice(0, BODY_PREVIEW_CHARS)}…` : text;
}

function findJob(state, id) {
  const idx = state.byId.get(id);
  if (idx === undefined) throw new Error(`Unknown scheduled job: ${id}`);
  return idx;
}

/** The cron expression and zone of a weekly or cron schedule. */
function cronOf(schedule) {
  const timezone = schedule.timezone ?? "UTC";
  if (schedule.mode === "cron") return { expr: schedule.cron, timezone };
  if (schedule.mode === "weekly") return { expr: `${schedule.minute} ${schedule.hour} * * ${schedule.weekday}`, timezone };
  throw new Error(`unknown schedule mode ${show(schedule.mode)}`);
}

function nextCron(context, expr, timezone, afterMs) {
  const next = context.time.nextCron(expr, timezone, toIso(afterMs));
  return next === null ? null : parseTimestamp(next);
}

/**
 * First run of a recurring schedule from `now`: never before a future startAt. Interval: startAt
 * if it is in the future, else now + interval. Weekly and cron: the first occurrence strictly
 * after now, or at or after a future startAt. Null when a cron expression never fires again.
 */
function firstRun(context, schedule, now) {
  const start = schedule.startAt !== undefined ? parseTimestamp(schedule.startAt) : NaN;
  const future = Number.isFinite(start) && start > now;
  if (schedule.mode === "interval") {
    const every = Number(schedule.everyMs);
    if (!(every > 0)) throw new Error(`invalid everyMs ${show(schedule.everyMs)}`);
    return future ? start : now + every;
  }
  const { expr, timezone } = cronOf(schedule);
  return nextCron(context, expr, timezone, future ? start - 1 : now);
}

function finish(job, nowIso) {
  return { ...job, status: "done", completedAt: nowIso };
}

/**
 * One due job: send it (or record why not), then move it on. Returns the job unchanged when
 * nothing is to be written (a repeat of the same delivery error).
 */
function deliverOne(context, job, dueMs, now, nowIso) {
  let sent;
  try {
    const message = { sender: job.sender, priority: job.priority, body: job.body };
    if (job.channel !== undefined) message.channel = job.channel;
    else message.recipient = job.recipient;
    // The hook is the controller's own code, but a job an agent created is that agent's message:
    // the host sends it as that agent, under the communication policy.
    const creator = createdByAgent(job);
    if (creator !== undefined) message.onBehalfOf = creator;
    sent = context.store.sendMessage(message);
  } catch (e) {
    const error = errorText(e);
    if (job.lastError === error) return job;
    context.console.warn(`scheduled job ${job.id}: delivery failed, retrying on the next tick: ${error}`);
    return { ...job, lastError: error, lastErrorAt: nowIso };
  }
  const updated = {
    ...job,
    sentCount: (Number(job.sentCount) || 0) + 1,
    lastSentAt: nowIso,
    lastMessageId: sent.messageId,
  };
  delete updated.lastError;
  delete updated.lastErrorAt;
  if (job.type !== "recurring") return finish(updated, nowIso);
  try {
    return advanceRecurring(context, updated, dueMs, now, nowIso);
  } catch (e) {
    // It was sent; retrying would send it again. Stop the job and say why.
    const error = `delivered, but the next run cannot be computed: ${errorText(e)}`;
    context.console.warn(`scheduled job ${job.id}: ${error}; the job is now done`);
    return { ...finish(updated, nowIso), lastError: error, lastErrorAt: nowIso };
  }
}

/**
 * After a send: done when maxRuns is reached, when the next run would be after endAt, or when
 * there is none; else nextAt = the next run after now (interval: send time + interval). Past
 * occurrences beyond the one just delivered are not caught up but counted as missed runs.
 */
function advanceRecurring(context, job, dueMs, now, nowIso) {
  const schedule = job.schedule ?? {};
  if (schedule.maxRuns !== undefined && job.sentCount >= schedule.maxRuns) return finish(job, nowIso);
  const parsedEnd = schedule.endAt !== undefined ? parseTimestamp(schedule.endAt) : NaN;
  const end = Number.isFinite(parsedEnd) ? parsedEnd : Infinity;
  const limit = Math.min(now, end);
  let occurrences = 1;
  let next;
  if (schedule.mode === "interval") {
    const every = Number(schedule.everyMs);
    if (!(every > 0)) throw new Error(`invalid everyMs ${show(schedule.everyMs)}`);
    if (limit > dueMs) occurrences += Math.min(Math.floor((limit - dueMs) / every), MISSED_RUNS_CAP);
    next = now + every;
  } else {
    const { expr, timezone } = cronOf(schedule);
    let after = dueMs;
    for (;;) {
      const candidate = nextCron(context, expr, timezone, after);
      if (candidate === null || candidate > limit) {
        next = candidate;
        break;
      }
      occurrences += 1;
      after = candidate;
      if (occurrences > MISSED_RUNS_CAP) {
        next = nextCron(context, expr, timezone, now);
        break;
      }
    }
  }
  let updated = job;
  const missed = occurrences - 1;
  if (missed > 0) {
    updated = { ...job, missedRuns: (Number(job.missedRuns) || 0) + missed, lastMissedAt: nowIso };
  }
  if (next === null || next > end || next > MAX_TIME_MS) return finish(updated, nowIso);
  return { ...updated, nextAt: toIso(next) };
}

function deliverDue(context, state, now, nowIso) {
  const alive = new Set();
  for (const agent of context.agents ?? []) if (agent.modelAlive) alive.add(agent.id);
  const jobs = state.doc.jobs;
  const changes = new Map();
  let deliveries = 0;
  let more = false;
  for (const entry of state.queue) {
    if (entry.ms > now) break;
    const job = jobs[entry.idx];
    // waitForQuiet only holds direct messages to an agent that is working right now.
    if (job.waitForQuiet === true && job.recipient !== undefined && alive.has(job.recipient)) continue;
    if (deliveries >= DELIVERIES_PER_TICK) {
      more = true;
      break;
    }
    deliveries += 1;
    let updated;
    try {
      updated = deliverOne(context, job, entry.ms, now, nowIso);
    } catch (e) {
      // Nothing in deliverOne should throw; if it does, the other jobs still go out.
      context.console.warn(`scheduled job ${job.id}: ${errorText(e)}`);
      continue;
    }
    if (updated !== job) changes.set(entry.idx, updated);
  }
  if (changes.size > 0) commit(context, state, changes, { keepOnFailure: true });
  if (more) return { signals: [], wakeAt: nowIso };
  const upcoming = state.queue.find((entry) => entry.ms > now);
  return { signals: [], wakeAt: upcoming === undefined ? null : toIso(upcoming.ms) };
}

// ---------------------------------------------------------------------------------------------
// State: load once, commit whole documents.

function statePath(context) {
  return `toolpack-state/${context.toolpackId ?? "scheduler"}/${STATE_FILE}`;
}

function blockedText(context, reason) {
  const path = statePath(context);
  return (
    `Scheduled jobs are unavailable: ${reason}. The scheduler will not start a new ${STATE_FILE} over it: ` +
    `put the repaired file back at ${path}, or write {"version": 1, "jobs": []} there to start with no jobs.`
  );
}

function load(context) {
  if (cache !== null) return cache;
  let raw;
  try {
    raw = context.state.read(STATE_FILE);
  } catch (e) {
    const message = errorText(e);
    if (/not valid JSON/.test(message)) {
      // The host has moved the file aside. Remember that, so a restart does not quietly begin
      // with no jobs.
      try {
        context.state.write(BLOCK_FILE, { blockedAt: context.time.now(), reason: message });
      } catch (w) {
        context.console.warn(`cannot record that ${STATE_FILE} is corrupt: ${errorText(w)}`);
      }
      throw new Error(blockedText(context, message));
    }
    throw new Error(`Cannot read ${statePath(context)}: ${message}`);
  }
  let block = null;
  try {
    block = context.state.read(BLOCK_FILE);
  } catch (e) {
    context.console.warn(`ignoring unreadable ${BLOCK_FILE}: ${errorText(e)}`);
  }
  const blocked = block !== null && typeof block === "object" && typeof block.reason === "string";
  let doc;
  if (raw === null || raw === undefined) {
    if (blocked) throw new Error(blockedText(context, block.reason));
    doc = { version: 1, jobs: [] };
  } else {
    const problem = documentProblem(raw);
    if (problem !== null) {
      throw new Error(
        `${statePath(context)} is not a scheduler jobs document (${problem}); ` +
          `fix it (expected {"version": 1, "jobs": [...]}) — the scheduler leaves it untouched until then.`,
      );
    }
    doc = raw;
    if (blocked) context.state.write(BLOCK_FILE, null);
  }
  cache = indexDocument(context, doc);
  dirty = false;
  lastTickError = null;
  return cache;
}

function documentProblem(doc) {
  if (typeof doc !== "object" || Array.isArray(doc)) return "the top level is not an object";
  if (doc.version !== 1) return `unsupported version ${show(doc.version)}, expected 1`;
  if (!Array.isArray(doc.jobs)) return "jobs is not an array";
  for (let i = 0; i < doc.jobs.length; i += 1) {
    const job = doc.jobs[i];
    if (job === null || typeof job !== "object" || Array.isArray(job) || typeof job.id !== "string") {
      return `jobs[${i}] is not a job with a string id`;
    }
  }
  return null;
}

function indexDocument(context, doc) {
  const byId = new Map();
  const queue = [];
  doc.jobs.forEach((job, idx) => {
    byId.set(job.id, idx);
    if (job.status !== "active") return;
    const ms = parseTimestamp(job.nextAt);
    if (Number.isFinite(ms)) queue.push({ ms, idx });
    else context.console.warn(`scheduled job ${job.id} has an invalid nextAt ${show(job.nextAt)}; it will not fire`);
  });
  queue.sort(compareEntries);
  return { doc, byId, queue };
}

function compareEntries(a, b) {
  return a.ms - b.ms || a.idx - b.idx;
}

/** Position of the first queue entry not before (ms, idx). */
function lowerBound(queue, ms, idx) {
  let lo = 0;
  let hi = queue.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    const e = queue[mid];
    if (e.ms < ms || (e.ms === ms && e.idx < idx)) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

function queueKey(job) {
  if (job === undefined || job.status !== "active") return null;
  const ms = parseTimestamp(job.nextAt);
  return Number.isFinite(ms) ? ms : null;
}

/**
 * Write the document with `changes` (index → job; index == length appends) applied, then update
 * the cache. On a failed write nothing changes and the error is thrown — unless keepOnFailure
 * (a tick that already sent messages): then the cache takes the changes anyway, so they are not
 * sent twice, and stays dirty until a later write succeeds.
 */
function commit(context, state, changes, { keepOnFailure = false } = {}) {
  const before = state.doc.jobs;
  const jobs = before.slice();
  for (const [idx, job] of changes) jobs[idx] = job;
  const doc = { ...state.doc, version: 1, jobs };
  let failure = null;
  try {
    context.state.write(STATE_FILE, doc);
  } catch (e) {
    if (!keepOnFailure) throw e;
    failure = e;
  }
  for (const [idx, job] of changes) {
    const oldKey = queueKey(before[idx]);
    if (oldKey !== null) {
      const at = lowerBound(state.queue, oldKey, idx);
      if (at < state.queue.length && state.queue[at].idx === idx) state.queue.splice(at, 1);
    }
    const newKey = queueKey(job);
    if (newKey !== null) state.queue.splice(lowerBound(state.queue, newKey, idx), 0, { ms: newKey, idx });
    if (idx >= before.length) state.byId.set(job.id, idx);
  }
  state.doc = doc;
  dirty = failure !== null;
  if (failure !== null) {
    context.console.error(`cannot write ${statePath(context)}; keeping the changes in memory: ${errorText(failure)}`);
    throw failure;
  }
}

// ---------------------------------------------------------------------------------------------
// Time and text helpers.

const TIMESTAMP = /^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d+))?)?([Zz]|[+-]\d{2}:?\d{2})$/;

/** Milliseconds of an ISO 8601 / RFC 3339 timestamp with an explicit zone, or NaN. */
function parseTimestamp(text) {
  if (typeof text !== "string") return NaN;
  const m = TIMESTAMP.exec(text.trim());
  if (m === null) return NaN;
  const [year, month, day, hour, minute] = [m[1], m[2], m[3], m[4], m[5]].map(Number);
  const second = m[6] === undefined ? 0 : Number(m[6]);
  const millis = m[7] === undefined ? 0 : Number(m[7].slice(0, 3).padEnd(3, "0"));
  const daysInMonth = new Date(Date.UTC(2000, month, 0)).getUTCDate() - (month === 2 && !isLeap(year) ? 1 : 0);
  if (month < 1 || month > 12 || day < 1 || day > daysInMonth || hour > 23 || minute > 59 || second > 59) return NaN;
  let offset = 0;
  const zone = m[8];
  if (zone !== "Z" && zone !== "z") {
    const digits = zone.slice(1).replace(":", "");
    const hours = Number(digits.slice(0, 2));
    const minutes = Number(digits.slice(2));
    if (hours > 23 || minutes > 59) return NaN;
    offset = (zone[0] === "-" ? -1 : 1) * (hours * 60 + minutes);
  }
  const date = new Date(0);
  date.setUTCFullYear(year, month - 1, day);
  date.setUTCHours(hour, minute, second, millis);
  return date.getTime() - offset * 60_000;
}

function isLeap(year) {
  return (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0;
}

function toIso(ms) {
  return new Date(ms).toISOString();
}

function show(value) {
  if (typeof value === "string") return value;
  try {
    const text = JSON.stringify(value);
    return text === undefined ? String(value) : text;
  } catch {
    return String(value);
  }
}

function errorText(e) {
  return e instanceof Error ? e.message : show(e);
}
