// `suzumio:fs`: the file operations behind `node:fs`, `node:fs/promises` and the runner's
// `context.fs`. Each is one synchronous host call; the host confines the path (runner: the
// agent's roots, exactly as the `file.*` tools; controller: the pack's directory read-only and its
// `toolpack-state/<id>/` read-write) and reports failures as `{err: {code, message}}`, thrown here
// as Node-style errors with `code` (`ENOENT`, `EACCES`, ...).
import { call, Buffer, toBytes, bytesToString, fromHex, fsError } from "suzumio:runtime";

function op(name, args) {
  const reply = call(`fs.${name}`, args);
  if (reply && reply.err) throw fsError(reply.err);
  return reply ? reply.value : undefined;
}

export function pathOf(path) {
  if (path instanceof URL) {
    if (path.protocol !== "file:") throw new TypeError(`Only file: URLs are paths: ${path.href}`);
    return decodeURIComponent(path.pathname);
  }
  if (path instanceof Uint8Array) return bytesToString(path);
  if (typeof path !== "string") throw new TypeError(`The "path" argument must be a string, Buffer or file URL. Received ${typeof path}`);
  return path;
}

const encodingOf = (options, fallback) => (typeof options === "string" ? options : options && "encoding" in options ? options.encoding : fallback);

// `bytes` (no encoding): a Buffer; otherwise the text in that encoding.
export function readFile(path, options, fallbackEncoding = null) {
  const encoding = encodingOf(options, fallbackEncoding);
  const wanted = encoding === null || encoding === undefined || encoding === "buffer" ? null : encoding;
  if (wanted !== null && /^utf-?8$/i.test(wanted)) return op("readFile", { path: pathOf(path), encoding: "utf8" });
  const bytes = Buffer.from(fromHex(op("readFile", { path: pathOf(path), encoding: null })));
  return wanted === null ? bytes : bytesToString(bytes, wanted);
}

export function writeFile(path, data, options = {}) {
  const encoding = encodingOf(options, "utf8") ?? "utf8";
  const flag = (typeof options === "object" && options && options.flag) || "w";
  const bytes = typeof data === "string" ? toBytes(data, encoding) : toBytes(data);
  op("writeFile", {
    path: pathOf(path),
    hex: bytes.toHex(),
    append: flag.startsWith("a"),
    exclusive: flag.includes("x"),
    createDirs: Boolean(typeof options === "object" && options && options.createDirs),
  });
}

export const appendFile = (path, data, options = {}) =>
  writeFile(path, data, typeof options === "string" ? { encoding: options, flag: "a" } : { ...options, flag: "a" });

class Stats {
  constructor(raw) {
    Object.assign(this, {
      dev: raw.dev, ino: raw.ino, mode: raw.mode, nlink: raw.nlink, uid: raw.uid, gid: raw.gid,
      size: raw.size, blksize: 4096, blocks: Math.ceil(raw.size / 512),
      atimeMs: raw.atimeMs, mtimeMs: raw.mtimeMs, ctimeMs: raw.ctimeMs, birthtimeMs: raw.mtimeMs,
      atime: new Date(raw.atimeMs), mtime: new Date(raw.mtimeMs), ctime: new Date(raw.ctimeMs), birthtime: new Date(raw.mtimeMs),
    });
    Object.defineProperty(this, "kind", { value: raw.kind, enumerable: false });
  }
  isFile() { return this.kind === "file"; }
  isDirectory() { return this.kind === "directory"; }
  isSymbolicLink() { return this.kind === "symlink"; }
  isFIFO() { return this.kind === "fifo"; }
  isSocket() { return this.kind === "socket"; }
  isBlockDevice() { return false; }
  isCharacterDevice() { return this.kind === "char"; }
}

class Dirent {
  constructor(name, kind, parentPath) {
    this.name = name;
    this.parentPath = parentPath;
    this.path = parentPath;
    Object.defineProperty(this, "kind", { value: kind, enumerable: false });
  }
  isFile() { return this.kind === "file"; }
  isDirectory() { return this.kind === "directory"; }
  isSymbolicLink() { return this.kind === "symlink"; }
  isFIFO() { return this.kind === "fifo"; }
  isSocket() { return this.kind === "socket"; }
  isBlockDevice() { return false; }
  isCharacterDevice() { return this.kind === "char"; }
}

export const stat = (path) => new Stats(op("stat", { path: pathOf(path) }));

export function exists(path) {
  try {
    op("stat", { path: pathOf(path) });
    return true;
  } catch {
    return false;
  }
}

export function readdir(path, options = {}) {
  const dir = pathOf(path);
  const entries = op("readdir", { path: dir });
  if (options && options.withFileTypes) return entries.map((e) => new Dirent(e.name, e.kind, dir));
  return entries.map((e) => e.name);
}

export function mkdir(path, options = {}) {
  const recursive = typeof options === "object" && options !== null && Boolean(options.recursive);
  const created = op("mkdir", { path: pathOf(path), recursive });
  return recursive ? (created ?? undefined) : undefined;
}

export function rm(path, options = {}) {
  op("rm", { path: pathOf(path), recursive: Boolean(options && options.recursive), force: Boolean(options && options.force) });
}

export const unlink = (path) => op("rm", { path: pathOf(path), only: "file" });
export const rmdir = (path, options = {}) =>
  op("rm", { path: pathOf(path), only: options && options.recursive ? undefined : "directory", recursive: Boolean(options && options.recursive) });
export const rename = (from, to) => op("rename", { from: pathOf(from), to: pathOf(to) });

export function copyFile(from, to) {
  writeFile(to, readFile(from));
}

export function access(path) {
  op("stat", { path: pathOf(path) });
}

export { Stats, Dirent };
