// Suzumio packaged plan toolpack: controller module (runs on the controller side).
//
// One active plan per project: a titled checklist for a target agent, kept in
// toolpack-state/<pack>/state.json as {"version": 1, "activePlan": Plan|null, "archivedPlans": [...]}
// (reference §5.2). The model tools and the WebUI entries share one set of handlers; the
// scheduler hook sends the target P2 `plan.continuation_nudge` signals while items remain tbd.
//
// Every handler reads the document, checks the whole request, changes the copy in memory and
// writes it once, with no `await` in between. Calls to a pack run one at a time on its runtime
// thread, so a read-modify-write never interleaves with another call and no update is lost; a
// rejected request never leaves a half-changed document behind. Time comes only from the
// controller clock (`context.now` / `context.time.now()`), never from Date.now().

const STATE_FILE = "state.json";
const STATE_VERSION = 1;
const ARCHIVE_LIMIT = 20;
const DEFAULT_NUDGE_COOLDOWN_MS = 60000;
const DEFAULT_MAX_NUDGES = 0;
const NUDGE_KIND = "plan.continuation_nudge";
const ITEM_STATUSES = ["tbd", "done", "wont_do"];
const CLOSE_STATUSES = ["done", "abandoned"];
const ITEM_MODES = ["append", "replace"];
// A nudge to a failed agent would restart it into the same failure; a stopped agent is never
// scheduled, so its nudge would only sit there.
const NUDGE_BLOCKING_STATUSES = ["failed", "stopped"];
const NO_ACTIVE_PLAN = "No active plan. Use plan.create first.";
// A leading list marker: "-", "*", "1." or "1)", followed by whitespace or the end of the line
// (so "1.5 kg" and "-v flag" keep their text).
const LIST_MARKER = /^(?:[-*]|\d+[.)])(?=\s|$)/;

// ---------------------------------------------------------------------------------------------
// input checks (the schema is checked before a handler runs; these guard direct callers too)

function inputObject(input) {
  if (input === undefined || input === null) return {};
  if (typeof input !== "object" || Array.isArray(input)) throw new Error("Tool input must be an object");
  return input;
}

function optionalString(input, key) {
  const value = input[key];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "string") throw new Error(`${key} must be a string, got ${JSON.stringify(value)}`);
  return value;
}

function optionalBoolean(input, key) {
  const value = input[key];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "boolean") throw new Error(`${key} must be a boolean, got ${JSON.stringify(value)}`);
  return value;
}

function optionalCount(input, key) {
  const value = input[key];
  if (value === undefined || value === null) return undefined;
  if (!Number.isSafeInteger(value) || value < 0) {
    throw new Error(`${key} must be a non-negative integer, got ${JSON.stringify(value)}`);
  }
  return value;
}

/** Trimmed text, or undefined when absent or blank. */
function optionalText(input, key) {
  const value = optionalString(input, key);
  const trimmed = value === undefined ? "" : value.trim();
  return trimmed === "" ? undefined : trimmed;
}

function cleanItemText(line) {
  return line.trim().replace(LIST_MARKER, "").trim();
}

/**
 * Item texts from `itemsText` (one per line) and the runtime-only `items` array, in that order;
 * undefined when neither is given.
 */
function itemTextsFrom(input) {
  const text = optionalString(input, "itemsText");
  const list = input.items;
  if (text === undefined && (list === undefined || list === null)) return undefined;
  const texts = text === undefined ? [] : text.split(/\r\n|\r|\n/).map(cleanItemText);
  if (list !== undefined && list !== null) {
    if (!Array.isArray(list) || list.some((entry) => typeof entry !== "string")) {
      throw new Error("items must be an array of strings");
    }
    texts.push(...list.map(cleanItemText));
  }
  return texts.filter((t) => t !== "");
}

/** The agent ids of the current roster and the coordinator (the default target). */
function roster(context) {
  const config = context.store.config();
  return {
    agentIds: (config.agents ?? []).map((a) => a.id),
    coordinator: config.communication?.coordinatorAgent ?? null,
  };
}

function resolveTarget(context, requested) {
  const { agentIds, coordinator } = roster(context);
  if (requested !== undefined) {
    if (!agentIds.includes(requested)) throw new Error(`Unknown targetAgent: ${requested}`);
    return requested;
  }
  if (coordinator === null) {
    throw new Error("The project has no coordinator (communication.coordinatorAgent) to own the plan; pass targetAgent");
  }
  if (!agentIds.includes(coordinator)) {
    throw new Error(
      `Unknown targetAgent: ${coordinator} (the coordinator, used when targetAgent is not given); pass targetAgent`,
    );
  }
  return coordinator;
}

// ---------------------------------------------------------------------------------------------
// the state document

function statePath(context) {
  return `toolpack-state/${context.toolpackId}/${STATE_FILE}`;
}

const isObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);

function planProblem(plan, where) {
  if (!isObject(plan)) return `${where} is not an object`;
  for (const key of ["id", "title", "targetAgent", "status"]) {
    if (typeof plan[key] !== "string") return `${where}.${key} is not a string`;
  }
  if (!Array.isArray(plan.items)) return `${where}.items is not an array`;
  for (const [i, item] of plan.items.entries()) {
    const at = `${where}.items[${i}]`;
    if (!isObject(item)) return `${at} is not an object`;
    if (typeof item.id !== "string" || typeof item.text !== "string") return `${at} needs string id and text`;
    if (!ITEM_STATUSES.includes(item.status)) return `${at}.status is ${JSON.stringify(item.status)}`;
  }
  return undefined;
}

function stateProblem(doc) {
  if (!isObject(doc)) return "the document is not a JSON object";
  if (doc.version !== STATE_VERSION) return `version is ${JSON.stringify(doc.version)}, expected ${STATE_VERSION}`;
  if (doc.activePlan !== undefined && doc.activePlan !== null) {
    const problem = planProblem(doc.activePlan, "activePlan");
    if (problem) return problem;
  }
  if (doc.archivedPlans !== undefined) {
    if (!Array.isArray(doc.archivedPlans)) return "archivedPlans is not an array";
    for (const [i, plan] of doc.archivedPlans.entries()) {
      const problem = planProblem(plan, `archivedPlans[${i}]`);
      if (problem) return problem;
    }
  }
  return undefined;
}

const itemNumber = (id) => {
  const match = /^item_(\d+)$/.exec(id);
  return match ? Number(match[1]) : 0;
};

/** Fill in bookkeeping a hand-edited document may lack, so the rest of the code can rely on it. */
function normalizePlan(plan) {
  const out = { ...plan, items: plan.items.map((item) => ({ ...item })) };
  const count = (value, fallback) => (Number.isSafeInteger(value) && value >= 0 ? value : fallback);
  out.nudgeCooldownMs = count(out.nudgeCooldownMs, DEFAULT_NUDGE_COOLDOWN_MS);
  out.maxNudges = count(out.maxNudges, DEFAULT_MAX_NUDGES);
  out.nudgeCount = count(out.nudgeCount, 0);
  const highest = Math.max(0, ...out.items.map((item) => itemNumber(item.id)));
  if (!Number.isSafeInteger(out.nextItemNumber) || out.nextItemNumber <= highest) out.nextItemNumber = highest + 1;
  return out;
}

/**
 * The state document; an empty one when the file does not exist. A file that is not JSON is
 * reported by the host (and moved aside there); valid JSON of the wrong shape is reported here
 * and left exactly as it is: nothing is written until someone repairs or removes it.
 */
function loadState(context) {
  const doc = context.state.read(STATE_FILE);
  if (doc === undefined || doc === null) return { version: STATE_VERSION, activePlan: null, archivedPlans: [] };
  const problem = stateProblem(doc);
  if (problem) {
    throw new Error(
      `${statePath(context)} is not a plan state document (${problem}); it was left unchanged: repair or remove it`,
    );
  }
  return {
    version: STATE_VERSION,
    activePlan: doc.activePlan ? normalizePlan(doc.activePlan) : null,
    archivedPlans: (doc.archivedPlans ?? []).map(normalizePlan),
  };
}

function saveState(context, state) {
  context.state.write(STATE_FILE, {
    version: STATE_VERSION,
    activePlan: state.activePlan,
    archivedPlans: state.archivedPlans.slice(0, ARCHIVE_LIMIT),
  });
}

// ---------------------------------------------------------------------------------------------
// plan rules

const isComplete = (plan) => plan.items.length > 0 && plan.items.every((item) => item.status !== "tbd");

/** Finalize a complete plan (done + completedAt) or reopen an incomplete one. True if it changed. */
function settle(plan, now) {
  if (isComplete(plan)) {
    if (plan.status === "done" && plan.completedAt) return false;
    plan.status = "done";
    plan.completedAt = now;
    return true;
  }
  if (plan.status === "active" && plan.completedAt === undefined) return false;
  plan.status = "active";
  delete plan.completedAt;
  return true;
}

function addItems(plan, texts, now) {
  for (const text of texts) {
    plan.items.push({ id: `item_${plan.nextItemNumber}`, text, status: "tbd", createdAt: now, updatedAt: now });
    plan.nextItemNumber += 1;
  }
}

/** Move the active plan to the front of the archive (capped) as `status`. Returns the archived copy. */
function archiveActive(state, status, now, reason) {
  const archived = { ...state.activePlan, status, updatedAt: now, closedAt: now };
  delete archived.nudgeBlocked;
  if (reason) archived.closeReason = reason;
  state.archivedPlans = [archived, ...state.archivedPlans];
  state.activePlan = null;
  return archived;
}

function counts(plan) {
  const c = { tbd: 0, done: 0, wont_do: 0 };
  for (const item of plan?.items ?? []) c[item.status] += 1;
  return c;
}

// ---------------------------------------------------------------------------------------------
// output

function planText(plan) {
  const c = counts(plan);
  const lines = [
    `Plan ${plan.id}: ${plan.title}`,
    `Status: ${plan.status}`,
    `Target: ${plan.targetAgent}`,
    `Items: ${c.tbd} tbd, ${c.done} done, ${c.wont_do} wont_do`,
    `Nudges: ${plan.nudgeCount}${plan.lastNudgeAt ? `, last ${plan.lastNudgeAt}` : ""}`,
  ];
  if (plan.nudgeBlocked) lines.push(`Nudges paused: ${plan.nudgeBlocked}`);
  if (plan.instructions) lines.push(`Instructions: ${plan.instructions}`);
  if (plan.completedAt) lines.push(`Completed: ${plan.completedAt}`);
  if (plan.closedAt) lines.push(`Closed: ${plan.closedAt}`);
  if (plan.closeReason) lines.push(`Reason: ${plan.closeReason}`);
  lines.push("Items:");
  plan.items.forEach((item, i) => {
    lines.push(`${i + 1}. ${item.id} [${item.status}] ${item.text}${item.note ? ` — ${item.note}` : ""}`);
  });
  return lines.join("\n");
}

function archiveText(archivedPlans) {
  const lines = ["Archived plans:"];
  if (archivedPlans.length === 0) lines.push("- none");
  for (const plan of archivedPlans) {
    lines.push(`- ${plan.id} [${plan.status}] ${plan.title} (${plan.closedAt ?? plan.updatedAt})`);
  }
  return lines.join("\n");
}

function metrics(plan) {
  const c = counts(plan);
  const nudgeNotes = [];
  if (plan?.maxNudges > 0) nudgeNotes.push(`max ${plan.maxNudges}`);
  if (plan?.nudgeBlocked) nudgeNotes.push(`paused: ${plan.nudgeBlocked}`);
  const nudges = { label: "Nudges", value: plan ? plan.nudgeCount : 0 };
  if (nudgeNotes.length > 0) nudges.description = nudgeNotes.join("; ");
  return [
    { label: "Status", value: plan ? plan.status : "none" },
    { label: "TBD", value: c.tbd },
    { label: "Done", value: c.done },
    { label: "Won't do", value: c.wont_do },
    nudges,
  ];
}

/** A tool result: optional lead lines, then the plan shown (`plan`, or a note when none). */
function result(title, { lead = [], plan, state, closedPlan, includeArchived = false }) {
  const sections = [...lead, plan ? planText(plan) : "No active plan."];
  const metadata = { metrics: metrics(plan), activePlan: state.activePlan };
  if (closedPlan) metadata.closedPlan = closedPlan;
  if (includeArchived) {
    sections.push(archiveText(state.archivedPlans));
    metadata.archivedPlans = state.archivedPlans;
  }
  return { title, output: sections.join("\n"), metadata };
}

const COMPLETE_HINT = "Every item is done or wont_do, so the plan is done. Close it with plan.close.";

// ---------------------------------------------------------------------------------------------
// handlers

function handlers(context) {
  const now = () => context.now ?? context.time.now();

  function create(rawInput) {
    const input = inputObject(rawInput);
    const title = optionalText(input, "title");
    if (title === undefined) throw new Error("plan.create requires a title");
    const instructions = optionalText(input, "instructions");
    const replaceActive = optionalBoolean(input, "replaceActive") ?? false;
    const nudgeCooldownMs = optionalCount(input, "nudgeCooldownMs") ?? DEFAULT_NUDGE_COOLDOWN_MS;
    const maxNudges = optionalCount(input, "maxNudges") ?? DEFAULT_MAX_NUDGES;
    const texts = itemTextsFrom(input) ?? [];
    if (texts.length === 0) throw new Error("plan.create requires at least one item in itemsText");
    const targetAgent = resolveTarget(context, optionalString(input, "targetAgent"));

    const state = loadState(context);
    const previous = state.activePlan;
    if (previous && !isComplete(previous) && !replaceActive) {
      throw new Error(`Active plan already exists: ${previous.id}. Use plan.update or pass replaceActive:true.`);
    }
    const at = now();
    const lead = [];
    if (previous) {
      const archived = isComplete(previous)
        ? archiveActive(state, "done", at, "archived when a new plan was created")
        : archiveActive(state, "replaced", at, "replaced by new plan");
      lead.push(`Archived the previous plan ${archived.id} as ${archived.status}.`);
    }
    const plan = {
      id: `pln_${context.uuid()}`,
      status: "active",
      title,
      targetAgent,
      ...(instructions === undefined ? {} : { instructions }),
      items: [],
      nextItemNumber: 1,
      nudgeCooldownMs,
      maxNudges,
      nudgeCount: 0,
      createdAt: at,
      updatedAt: at,
    };
    addItems(plan, texts, at);
    state.activePlan = plan;
    saveState(context, state);
    lead.push(`Created plan ${plan.id} with ${plan.items.length} item${plan.items.length === 1 ? "" : "s"}.`);
    return result("plan created", { lead, plan, state });
  }

  function status(rawInput) {
    const input = inputObject(rawInput);
    const includeArchived = optionalBoolean(input, "includeArchived") ?? false;
    const state = loadState(context);
    return result("plan status", { plan: state.activePlan, state, includeArchived });
  }

  function update(rawInput) {
    const input = inputObject(rawInput);
    const title = optionalString(input, "title");
    if (title !== undefined && title.trim() === "") throw new Error("title must not be empty");
    const requestedTarget = optionalString(input, "targetAgent");
    const instructions = optionalString(input, "instructions");
    const itemMode = optionalString(input, "itemMode") ?? "append";
    if (!ITEM_MODES.includes(itemMode)) throw new Error(`Invalid itemMode: ${itemMode}`);
    const nudgeCooldownMs = optionalCount(input, "nudgeCooldownMs");
    const maxNudges = optionalCount(input, "maxNudges");
    const texts = itemTextsFrom(input);
    if (itemMode === "replace" && (texts === undefined || texts.length === 0)) {
      throw new Error("plan.update with itemMode replace requires at least one item in itemsText");
    }
    const targetAgent = requestedTarget === undefined ? undefined : resolveTarget(context, requestedTarget);
    const fields = [title, targetAgent, instructions, nudgeCooldownMs, maxNudges];
    if (fields.every((v) => v === undefined) && !(texts?.length > 0)) {
      throw new Error(
        "plan.update requires at least one of title, targetAgent, instructions, itemsText, nudgeCooldownMs or maxNudges",
      );
    }

    const state = loadState(context);
    const plan = state.activePlan;
    if (!plan) throw new Error(NO_ACTIVE_PLAN);
    const at = now();
    const changes = [];
    if (title !== undefined) {
      plan.title = title.trim();
      changes.push("title");
    }
    if (targetAgent !== undefined && targetAgent !== plan.targetAgent) {
      plan.targetAgent = targetAgent;
      // The pause was about the old target; the next tick looks at the new one.
      delete plan.nudgeBlocked;
      changes.push(`target ${targetAgent}`);
    }
    if (instructions !== undefined) {
      if (instructions.trim() === "") delete plan.instructions;
      else plan.instructions = instructions.trim();
      changes.push("instructions");
    }
    if (nudgeCooldownMs !== undefined) {
      plan.nudgeCooldownMs = nudgeCooldownMs;
      changes.push(`nudgeCooldownMs ${nudgeCooldownMs}`);
    }
    if (maxNudges !== undefined) {
      plan.maxNudges = maxNudges;
      changes.push(`maxNudges ${maxNudges}`);
    }
    if (itemMode === "replace") {
      // Numbering continues, so an id named in an earlier nudge never means a different item.
      plan.items = [];
      addItems(plan, texts, at);
      changes.push(`items replaced (${texts.length})`);
    } else if (texts !== undefined && texts.length > 0) {
      addItems(plan, texts, at);
      changes.push(`${texts.length} item${texts.length === 1 ? "" : "s"} appended`);
    }
    const wasDone = plan.status === "done";
    settle(plan, at);
    plan.updatedAt = at;
    saveState(context, state);
    const lead = [`Updated plan ${plan.id}: ${changes.length > 0 ? changes.join(", ") : "no changes"}.`];
    if (wasDone && plan.status === "active") lead.push("The plan has tbd items again and is active.");
    if (!wasDone && plan.status === "done") lead.push(COMPLETE_HINT);
    return result("plan updated", { lead, plan, state });
  }

  function setItemStatus(rawInput) {
    const input = inputObject(rawInput);
    const itemId = optionalString(input, "itemId");
    const itemIndex = input.itemIndex ?? undefined;
    const newStatus = optionalString(input, "status");
    if (itemId === undefined && itemIndex === undefined) {
      throw new Error("plan.set_item_status requires itemId or itemIndex");
    }
    if (!ITEM_STATUSES.includes(newStatus)) throw new Error(`Invalid item status: ${newStatus}`);
    const text = optionalString(input, "text");
    if (text !== undefined && cleanItemText(text) === "") throw new Error("text must not be empty");
    const note = optionalString(input, "note");

    const state = loadState(context);
    const plan = state.activePlan;
    if (!plan) throw new Error(NO_ACTIVE_PLAN);
    let position;
    if (itemId !== undefined) {
      position = plan.items.findIndex((item) => item.id === itemId);
      if (position < 0) throw new Error(`Unknown plan item: ${itemId}`);
      if (itemIndex !== undefined && itemIndex !== position + 1) {
        throw new Error(`itemId ${itemId} is item ${position + 1}, not itemIndex ${itemIndex}; give one of them`);
      }
    } else {
      if (!Number.isSafeInteger(itemIndex) || itemIndex < 1 || itemIndex > plan.items.length) {
        throw new Error(`Unknown plan item index: ${itemIndex}`);
      }
      position = itemIndex - 1;
    }
    const at = now();
    const item = plan.items[position];
    item.status = newStatus;
    if (text !== undefined) item.text = cleanItemText(text);
    if (note !== undefined) {
      if (note.trim() === "") delete item.note;
      else item.note = note.trim();
    }
    item.updatedAt = at;
    const wasDone = plan.status === "done";
    settle(plan, at);
    plan.updatedAt = at;
    saveState(context, state);
    const lead = [`Marked ${item.id} ${newStatus}.`];
    if (!wasDone && plan.status === "done") lead.push(COMPLETE_HINT);
    if (wasDone && plan.status === "active") lead.push("The plan has tbd items again and is active.");
    return result("plan item updated", { lead, plan, state });
  }

  function close(rawInput) {
    const input = inputObject(rawInput);
    const closeStatus = optionalString(input, "status") ?? "done";
    if (!CLOSE_STATUSES.includes(closeStatus)) throw new Error(`Invalid close status: ${closeStatus}`);
    const reason = optionalText(input, "reason");

    const state = loadState(context);
    const plan = state.activePlan;
    if (!plan) throw new Error(NO_ACTIVE_PLAN);
    if (closeStatus === "done" && plan.items.some((item) => item.status === "tbd")) {
      throw new Error(
        "Cannot close plan as done while items are still tbd; mark them done or wont_do first, or close as abandoned.",
      );
    }
    const closed = archiveActive(state, closeStatus, now(), reason);
    saveState(context, state);
    return result("plan closed", {
      lead: [`Closed plan ${closed.id} as ${closed.status}.`],
      plan: closed,
      state,
      closedPlan: closed,
    });
  }

  return { create, status, update, setItemStatus, close };
}

export function createControllerToolpack(context) {
  const h = handlers(context);
  return {
    tools: {
      "plan.create": h.create,
      "plan.status": h.status,
      "plan.update": h.update,
      "plan.set_item_status": h.setItemStatus,
      "plan.close": h.close,
    },
  };
}

export function createWebuiToolpack(context) {
  const h = handlers(context);
  return {
    webui: {
      "plan.board": h.status,
      "plan.create": h.create,
      "plan.update": h.update,
      "plan.set_item_status": h.setItemStatus,
      "plan.close": h.close,
    },
  };
}

// ---------------------------------------------------------------------------------------------
// continuation nudge

function nudgeMessage(plan, remaining) {
  return [
    "Continue the active plan before routine queued work.",
    `Plan: ${plan.title}`,
    `Plan id: ${plan.id}`,
    `Target: ${plan.targetAgent}`,
    ...(plan.instructions ? [`Instructions: ${plan.instructions}`] : []),
    "Remaining TBD items:",
    ...remaining.map((item) => `- ${item.id}: ${item.text}`),
    "After meaningful progress, call plan.set_item_status to mark items done or wont_do. Use plan.status if you need the current plan state.",
  ].join("\n");
}

/**
 * Whether a nudge for this plan is still pending for its target. A pending nudge whose payload
 * names no plan cannot be told apart, so it counts as a duplicate (as in the reference).
 */
function hasPendingNudge(context, plan) {
  const pending = context.store.listSignals({
    targetAgent: plan.targetAgent,
    status: "pending",
    kind: NUDGE_KIND,
    limit: 500,
  });
  return pending.some(
    (signal) =>
      signal.kind === NUDGE_KIND &&
      (!isObject(signal.payload) || typeof signal.payload.planId !== "string" || signal.payload.planId === plan.id),
  );
}

/**
 * Reference §5.2 conditions 1–6, plus: no nudge to a failed or stopped target (recorded on the
 * plan as `nudgeBlocked` until it recovers). Returns `{signals, wakeAt}`; `wakeAt` is when the
 * cooldown ends if the cooldown alone holds a nudge back.
 */
export async function schedulerTick(context) {
  const idle = { signals: [], wakeAt: null };
  const state = loadState(context);
  const plan = state.activePlan;
  if (!plan) return idle;
  const now = context.now ?? context.time.now();
  let changed = false;
  // Write only when something changed: the hook runs on every tick.
  const finish = (outcome = idle) => {
    if (changed) saveState(context, state);
    return outcome;
  };

  // 1. Only an active plan is nudged; a complete one is finalized instead.
  if (settle(plan, now)) {
    plan.updatedAt = now;
    changed = true;
  }
  if (plan.status !== "active") return finish();

  // 2. The target is still in the roster, and (beyond the reference) neither failed nor stopped.
  const target = (context.agents ?? []).find((agent) => agent.id === plan.targetAgent);
  const blocked = !target
    ? `target ${plan.targetAgent} is not in the roster`
    : NUDGE_BLOCKING_STATUSES.includes(target.status)
      ? `target ${plan.targetAgent} is ${target.status}`
      : undefined;
  if (plan.nudgeBlocked !== blocked) {
    if (blocked === undefined) delete plan.nudgeBlocked;
    else plan.nudgeBlocked = blocked;
    changed = true;
  }
  if (blocked) return finish();

  // 3. Not while the target's model is working; the end of its activation wakes the scheduler.
  if (target.modelAlive) return finish();
  // 4. One pending nudge per plan and target.
  if (hasPendingNudge(context, plan)) return finish();
  // 6. The cap (checked before the cooldown so that a capped plan asks for no wake-up).
  if (plan.maxNudges > 0 && plan.nudgeCount >= plan.maxNudges) return finish();
  // 5. The cooldown since the last nudge.
  if (plan.lastNudgeAt && plan.nudgeCooldownMs > 0) {
    const readyAt = Date.parse(plan.lastNudgeAt) + plan.nudgeCooldownMs;
    if (Date.parse(now) < readyAt) return finish({ signals: [], wakeAt: new Date(readyAt).toISOString() });
  }

  plan.nudgeCount += 1;
  plan.lastNudgeAt = now;
  changed = true;
  const remaining = plan.items.filter((item) => item.status === "tbd");
  return finish({
    signals: [
      {
        kind: NUDGE_KIND,
        targetAgent: plan.targetAgent,
        priority: "P2",
        usefulEffect: false,
        payload: {
          planId: plan.id,
          title: plan.title,
          message: nudgeMessage(plan, remaining),
          remainingItems: remaining.map((item) => ({ id: item.id, text: item.text })),
          nudgeCount: plan.nudgeCount,
        },
      },
    ],
    wakeAt: null,
  });
}
