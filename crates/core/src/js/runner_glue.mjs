// Glue between the runner and a toolpack's runner.mjs (reference §3.3). Evaluated as its own
// module; the Rust side calls the exports below with JSON strings and gets JSON strings back.
// The factory is called at load (to check the handlers) and again for every call, with that
// activation's context. As in the controller glue, the host function is taken off `globalThis`
// before the pack module is evaluated (a dynamic import, below), so pack code only ever has the
// context of its call.

import * as files from "suzumio:fs";
import { run as runProcess } from "suzumio:exec";
import { AbortController, abortError } from "suzumio:runtime";

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
  if (parsed.error !== undefined) throw new Error(parsed.error);
  return parsed.ok;
}
const callAsync = async (op, args) => unwrap(await hostCallAsync(op, stringify(args === undefined ? null : args)));

function makeContext(base) {
  return freeze({
    project: base.project,
    agentId: base.agentId,
    activationId: base.activationId,
    workspace: base.workspace,
    toolpackId: PACK_ID,
    callSupport: (tool, input) => callAsync("callSupport", { tool, input: input === undefined ? {} : input }),
    recordSignal: (signal) => callAsync("recordSignal", signal),
    console,
    fs: containerFs,
    exec: (command, args, options) => runProcess(command, args ?? [], options ?? {}),
    signal: base.activationId ? cancelSignal() : new AbortController().signal,
    env: freeze({ ...base.env }),
  });
}

// ---- the container: `context.fs`, `context.signal` ----

// Like `node:fs/promises`, but text (UTF-8) unless `{encoding: null}` or `"buffer"` asks for bytes.
const containerFs = freeze({
  readFile: async (path, options) => files.readFile(path, options, "utf8"),
  writeFile: async (path, data, options) => files.writeFile(path, data, options ?? {}),
  appendFile: async (path, data, options) => files.appendFile(path, data, options ?? {}),
  readdir: async (path, options) => files.readdir(path, options ?? {}),
  stat: async (path) => files.stat(path),
  exists: async (path) => files.exists(path),
  mkdir: async (path, options) => files.mkdir(path, options ?? {}),
  rm: async (path, options) => files.rm(path, options ?? {}),
  rename: async (from, to) => files.rename(from, to),
});

// Fired when the controller cancels the tool call (a P0 pre-emption, shutdown).
function cancelSignal() {
  const controller = new AbortController();
  callAsync("call.cancelled").then(
    (cancelled) => { if (cancelled) controller.abort(abortError("The tool call was cancelled")); },
    () => {},
  );
  return controller.signal;
}

async function handlers(baseJson) {
  const factory = typeof pack.createRunnerToolpack === "function" ? pack.createRunnerToolpack : pack.default;
  if (typeof factory !== "function") {
    throw new Error(`Runner module for ${PACK_ID} must export createRunnerToolpack`);
  }
  const instance = await factory(makeContext(parse(baseJson)));
  const map = instance && typeof instance === "object" && instance.tools !== undefined ? instance.tools : instance;
  return map !== null && typeof map === "object" ? map : {};
}

// A handler is a function the pack put there, not one every object inherits (`toString`).
function handlerOf(map, name) {
  const handler = map[name];
  return typeof handler === "function" && handler !== Object.prototype[name] ? handler : undefined;
}

export async function load(baseJson, toolsJson) {
  const map = await handlers(baseJson);
  for (const name of parse(toolsJson)) {
    if (!handlerOf(map, name)) throw new Error(`Runner module for ${PACK_ID} did not register ${name}`);
  }
  return stringify(Object.keys(map).filter((name) => handlerOf(map, name)));
}

export async function invoke(baseJson, tool, inputJson) {
  const map = await handlers(baseJson);
  const handler = handlerOf(map, tool);
  if (!handler) throw new Error(`Runner module for ${PACK_ID} did not register ${tool}`);
  const input = parse(inputJson);
  const result = await handler.call(map, input === null ? {} : input);
  return stringify(result === undefined ? null : result);
}
