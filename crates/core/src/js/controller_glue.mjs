// Glue between the controller and a toolpack's controller.mjs. Evaluated as its own module
// (`suzumio:glue`); the Rust side calls the exports below with JSON strings and gets JSON strings
// back. Export shapes follow the reference (§3.4, §3.7, §3.8), except that a missing handler is
// an error here.
//
// The host functions are taken off `globalThis` here, before the pack module is evaluated (it is
// imported dynamically below, not statically, which would evaluate it first): the pack's own
// code never sees them, only the `context` of each call, whose operations act for that call's
// caller as Rust set it. What the glue calls later is captured now too, so a pack that replaces
// `JSON` or `Object.freeze` cannot change what the host is sent.

const hostCall = globalThis.__suzumio_host;
const hostCallAsync = globalThis.__suzumio_host_async;
delete globalThis.__suzumio_host;
delete globalThis.__suzumio_host_async;
const { parse, stringify } = JSON;
const freeze = Object.freeze;
const console = globalThis.console;

const PACK_ID = __PACK_ID__;
const pack = await import("__PACK_MODULE__");

function unwrap(reply) {
  const parsed = parse(reply);
  if (parsed.error !== undefined) {
    const error = new Error(parsed.error);
    // A refusal by a rule (the communication policy): the call ends as rejected, not failed.
    if (parsed.rejected === true) error.name = "RejectedError";
    throw error;
  }
  return parsed.ok;
}
const call = (op, args) => unwrap(hostCall(op, stringify(args === undefined ? null : args)));
const callAsync = async (op, args) => unwrap(await hostCallAsync(op, stringify(args === undefined ? null : args)));

function makeContext(base) {
  const context = { ...base };
  context.recordSignal = (request) => call("recordSignal", request);
  context.store = freeze({
    sendMessage: (message) => call("store.sendMessage", message),
    checkMessage: (message) => call("store.checkMessage", message),
    recordSignal: (request) => call("store.recordSignal", request),
    listAgents: () => call("store.listAgents"),
    listMessages: (query) => call("store.listMessages", query ?? {}),
    listSignals: (query) => call("store.listSignals", query ?? {}),
    projectStats: () => call("store.projectStats"),
    config: () => call("store.config"),
    // The project's root directory on the host (packs written for the original build their
    // state path from it; `node:fs` lets them use `toolpack-state/<id>/` under it).
    paths: freeze({ get root() { return call("store.paths.root"); } }),
  });
  context.state = freeze({
    read: (name) => call("state.read", { name }),
    write: (name, value) => call("state.write", { name, value }),
  });
  context.time = freeze({
    now: () => call("time.now"),
    nextCron: (expr, timezone, afterIso) => call("time.nextCron", { expr, timezone, after: afterIso }),
    checkTimezone: (timezone) => call("time.checkTimezone", { timezone }),
    sleep: (ms) => callAsync("time.sleep", { ms }),
  });
  context.uuid = () => call("uuid");
  context.console = console;
  if (base.hooks) {
    context.hasPendingSignals = () => call("hasPendingSignals");
    context.hasPendingSignalsForAgent = (agentId, includeNotReady) =>
      call("hasPendingSignalsForAgent", { agentId, includeNotReady: Boolean(includeNotReady) });
    delete context.hooks;
  }
  return freeze(context);
}

const out = (value) => stringify(value === undefined ? null : value);

export async function support(baseJson, tool, inputJson) {
  const factory = typeof pack.createControllerToolpack === "function" ? pack.createControllerToolpack : pack.default;
  if (typeof factory !== "function") {
    throw new Error(`Controller module for ${PACK_ID} must export createControllerToolpack`);
  }
  const instance = await factory(makeContext(parse(baseJson)));
  const input = parse(inputJson);
  if (instance && typeof instance.support === "function") {
    return out(await instance.support(tool, input));
  }
  const handlers = instance && instance.tools !== undefined ? instance.tools : instance;
  const handler = handlers ? handlers[tool] : undefined;
  if (typeof handler !== "function") {
    throw new Error(`Controller side for ${PACK_ID} did not handle ${tool}`);
  }
  return out(await handler(input));
}

export async function webui(baseJson, entryId, inputJson) {
  const context = makeContext(parse(baseJson));
  const instance = typeof pack.createWebuiToolpack === "function"
    ? await pack.createWebuiToolpack(context)
    : (pack.webui !== undefined ? pack.webui : pack.default);
  const input = parse(inputJson);
  if (typeof instance === "function") {
    return out(await instance(entryId, input));
  }
  const handlers = instance && (instance.webui ?? instance.tools ?? instance);
  const handler = handlers ? handlers[entryId] : undefined;
  if (typeof handler !== "function") {
    throw new Error(`WebUI side for ${PACK_ID} did not handle ${entryId}`);
  }
  return out(await handler(input));
}

export function hasSchedulerHook() {
  return out(typeof pack.schedulerTick === "function" || typeof pack.createSchedulerToolpack === "function");
}

export async function schedulerTick(baseJson) {
  const context = makeContext({ ...parse(baseJson), hooks: true });
  if (typeof pack.schedulerTick === "function") {
    return out(await pack.schedulerTick(context));
  }
  if (typeof pack.createSchedulerToolpack === "function") {
    const instance = await pack.createSchedulerToolpack(context);
    const handler = typeof instance === "function" ? instance : (instance?.schedulerTick ?? instance?.tick);
    if (typeof handler !== "function") return out(null);
    return out(await handler.call(instance));
  }
  return out(null);
}

// Permission hooks (`permissions.hooks`): a pack without them has no opinion.
export async function beforeToolCall(baseJson, callJson) {
  if (typeof pack.beforeToolCall !== "function") return out(null);
  return out(await pack.beforeToolCall(makeContext(parse(baseJson)), parse(callJson)));
}

export async function afterToolCall(baseJson, callJson, resultJson) {
  if (typeof pack.afterToolCall !== "function") return out(null);
  return out(await pack.afterToolCall(makeContext(parse(baseJson)), parse(callJson), parse(resultJson)));
}
