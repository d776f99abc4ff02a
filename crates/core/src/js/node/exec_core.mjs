// `suzumio:exec`: running a program, behind `node:child_process` and the runner's
// `context.exec`. The host (the runner) starts it in its own process group with the agent's
// environment plus `env`, no shell unless asked for, output capped, and kills the group on
// timeout, on cancel of the tool call and when the call ends. The controller refuses.
import { call, callAsync, Buffer, toBytes, bytesToString, fromHex, fsError } from "suzumio:runtime";

function request(command, args, options = {}) {
  if (typeof command !== "string" || command === "") throw new TypeError("exec: command must be a non-empty string");
  if (!Array.isArray(args)) throw new TypeError("exec: args must be an array of strings");
  const env = options.env ?? {};
  if (typeof env !== "object" || env === null) throw new TypeError("exec: env must be an object");
  return {
    command,
    args: args.map(String),
    cwd: options.cwd === undefined ? undefined : String(options.cwd),
    env: Object.fromEntries(Object.entries(env).filter(([, v]) => v !== undefined).map(([k, v]) => [k, String(v)])),
    input: options.input === undefined || options.input === null ? undefined : toBytes(options.input).toHex(),
    timeoutMs: options.timeoutMs ?? options.timeout,
    maxOutputBytes: options.maxOutputBytes ?? options.maxBuffer,
  };
}

function finish(answer, encoding) {
  if (answer && answer.err) throw fsError(answer.err);
  const reply = answer.value;
  const decode = (hex) => {
    const bytes = Buffer.from(fromHex(hex));
    return encoding === "buffer" || encoding === null ? bytes : bytesToString(bytes, encoding ?? "utf8");
  };
  return {
    exitCode: reply.exitCode,
    signal: reply.signal,
    stdout: decode(reply.stdout),
    stderr: decode(reply.stderr),
    timedOut: reply.timedOut,
    truncated: reply.truncated,
  };
}

export const run = async (command, args, options = {}) =>
  finish(await callAsync("exec", request(command, args, options)), options.encoding);

export const runSync = (command, args, options = {}) =>
  finish(call("exec.sync", request(command, args, options)), options.encoding);
