// `node:path` (POSIX only, as Node's `path.posix`). `resolve` starts from the side's working
// directory: `/workspace` in the runner, the pack's state directory in the controller.
import { call } from "suzumio:runtime";

const sep = "/";
const delimiter = ":";

function normalizeParts(path, absolute) {
  const out = [];
  for (const part of path.split("/")) {
    if (part === "" || part === ".") continue;
    if (part === "..") {
      if (out.length && out[out.length - 1] !== "..") out.pop();
      else if (!absolute) out.push("..");
    } else out.push(part);
  }
  return out.join("/");
}

function check(path) {
  if (typeof path !== "string") throw new TypeError(`The "path" argument must be of type string. Received ${typeof path}`);
  return path;
}

function normalize(path) {
  check(path);
  if (path === "") return ".";
  const absolute = path.startsWith("/");
  const trailing = path.endsWith("/");
  let out = normalizeParts(path, absolute);
  if (out === "" && !absolute) out = ".";
  if (out !== "" && trailing) out += "/";
  return absolute ? `/${out}` : out;
}

const isAbsolute = (path) => check(path).startsWith("/");

function join(...parts) {
  const joined = parts.map(check).filter((p) => p !== "").join("/");
  return joined === "" ? "." : normalize(joined);
}

let cwdCache;
const cwd = () => (cwdCache ??= call("runtime.cwd"));

function resolve(...parts) {
  let resolved = "";
  for (let i = parts.length - 1; i >= -1 && !resolved.startsWith("/"); i--) {
    const part = i >= 0 ? check(parts[i]) : cwd();
    if (part === "") continue;
    resolved = resolved === "" ? part : `${part}/${resolved}`;
  }
  const out = normalizeParts(resolved, true);
  return `/${out}`;
}

function relative(from, to) {
  const a = resolve(from).split("/").filter(Boolean);
  const b = resolve(to).split("/").filter(Boolean);
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  return [...Array(a.length - i).fill(".."), ...b.slice(i)].join("/");
}

function dirname(path) {
  check(path);
  if (path === "") return ".";
  const trimmed = path.replace(/\/+$/, "");
  if (trimmed === "") return "/";
  const at = trimmed.lastIndexOf("/");
  if (at < 0) return ".";
  if (at === 0) return "/";
  return trimmed.slice(0, at).replace(/\/+$/, "") || "/";
}

function basename(path, suffix) {
  check(path);
  const trimmed = path.replace(/\/+$/, "");
  const base = trimmed.slice(trimmed.lastIndexOf("/") + 1);
  return suffix !== undefined && base.endsWith(suffix) && base !== suffix ? base.slice(0, -suffix.length) : base;
}

function extname(path) {
  const base = basename(path);
  const dot = base.lastIndexOf(".");
  return dot <= 0 ? "" : base.slice(dot);
}

function parse(path) {
  check(path);
  const root = path.startsWith("/") ? "/" : "";
  const base = basename(path);
  const ext = extname(path);
  let dir = dirname(path);
  if (dir === "." && !path.includes("/")) dir = "";
  return { root, dir, base, ext, name: ext ? base.slice(0, -ext.length) : base };
}

function format({ root = "", dir, base, name = "", ext = "" }) {
  const file = base ?? `${name}${ext.startsWith(".") || ext === "" ? ext : `.${ext}`}`;
  const directory = dir ?? root;
  if (!directory) return file;
  return directory === root ? `${directory}${file}` : `${directory}/${file}`;
}

const toNamespacedPath = (path) => path;

const posix = { sep, delimiter, normalize, isAbsolute, join, resolve, relative, dirname, basename, extname, parse, format, toNamespacedPath };
posix.posix = posix;
export { sep, delimiter, normalize, isAbsolute, join, resolve, relative, dirname, basename, extname, parse, format, toNamespacedPath, posix };
export default posix;
