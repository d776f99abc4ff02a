// `node:child_process`: `execFile`, `exec`, `spawnSync`, `execFileSync`, `execSync` on top of
// `suzumio:exec` (runner only; the controller refuses). Output is collected, never streamed:
// `spawn` and the returned ChildProcess object are not provided.
import { run, runSync } from "suzumio:exec";

const customPromisify = Symbol.for("nodejs.util.promisify.custom");

function split(args, options, callback) {
  if (typeof args === "function") return [[], {}, args];
  if (!Array.isArray(args)) return [[], args ?? {}, typeof options === "function" ? options : callback];
  if (typeof options === "function") return [args, {}, options];
  return [args, options ?? {}, callback];
}

function failure(file, args, result) {
  const error = new Error(
    result.timedOut
      ? `Command timed out: ${[file, ...args].join(" ")}`
      : `Command failed: ${[file, ...args].join(" ")}\n${String(result.stderr)}`,
  );
  error.code = result.exitCode;
  error.signal = result.signal;
  error.killed = result.timedOut || result.signal !== null;
  error.stdout = result.stdout;
  error.stderr = result.stderr;
  error.status = result.exitCode;
  return error;
}

const failed = (result) => result.exitCode !== 0;

function execFile(file, args, options, callback) {
  const [list, opts, cb] = split(args, options, callback);
  const done = run(file, list, opts).then(
    (result) => (failed(result) ? [failure(file, list, result), result] : [null, result]),
    (error) => [error, { stdout: "", stderr: "" }],
  );
  if (typeof cb === "function") done.then(([error, result]) => cb(error, result.stdout, result.stderr));
  return undefined;
}
execFile[customPromisify] = (file, args, options) => {
  const [list, opts] = split(args, options);
  return run(file, list, opts).then((result) => {
    if (failed(result)) throw failure(file, list, result);
    return { stdout: result.stdout, stderr: result.stderr };
  });
};

function exec(command, options, callback) {
  return execFile("/bin/sh", ["-c", command], options, callback);
}
exec[customPromisify] = (command, options) => execFile[customPromisify]("/bin/sh", ["-c", command], options);

function spawnSync(command, args, options) {
  const [list, opts] = split(args, options);
  const shell = opts.shell ? ["/bin/sh", ["-c", [command, ...list].join(" ")]] : [command, list];
  try {
    const result = runSync(shell[0], shell[1], { ...opts, encoding: opts.encoding ?? "buffer" });
    return {
      pid: 0, status: result.exitCode, signal: result.signal, stdout: result.stdout, stderr: result.stderr,
      output: [null, result.stdout, result.stderr],
      error: result.timedOut ? Object.assign(new Error(`spawnSync ${command} ETIMEDOUT`), { code: "ETIMEDOUT" }) : undefined,
    };
  } catch (error) {
    return { pid: 0, status: null, signal: null, stdout: null, stderr: null, output: null, error };
  }
}

function execFileSync(file, args, options) {
  const [list, opts] = split(args, options);
  const result = runSync(file, list, { ...opts, encoding: opts.encoding ?? "buffer" });
  if (failed(result)) throw failure(file, list, result);
  return result.stdout;
}

const execSync = (command, options = {}) => execFileSync("/bin/sh", ["-c", command], options);

function spawn() {
  throw new Error("child_process.spawn is not supported in toolpacks (no streaming processes); use execFile or spawnSync");
}

export { execFile, exec, spawnSync, execFileSync, execSync, spawn };
export default { execFile, exec, spawnSync, execFileSync, execSync, spawn };
