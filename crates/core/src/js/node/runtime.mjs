// `suzumio:runtime`: the private half of the Node-compatible layer. The host evaluates it before
// the glue, so it runs before any pack code: it takes the native functions off `globalThis`
// (pack code never sees them), keeps references to the host calls (the glue removes those
// globals right after), and installs the web globals Node code expects (TextEncoder, URL,
// structuredClone, timers, AbortController, Buffer, crypto). The `node:*` modules and the glue
// import what they need from here; a pack module cannot import `suzumio:` modules.
//
// Bytes cross to Rust as hex strings (`Uint8Array.prototype.toHex` / `Uint8Array.fromHex` are
// native in QuickJS-ng).

const native = globalThis.__suzumio_native;
delete globalThis.__suzumio_native;
const hostSync = globalThis.__suzumio_host;
const hostAsync = globalThis.__suzumio_host_async;
const { parse, stringify } = JSON;

function unwrap(reply) {
  const parsed = parse(reply);
  if (parsed.error !== undefined) {
    const error = new Error(parsed.error);
    if (parsed.rejected === true) error.name = "RejectedError";
    throw error;
  }
  return parsed.ok;
}
export const call = (op, args) => unwrap(hostSync(op, stringify(args === undefined ? null : args)));
export const callAsync = async (op, args) => unwrap(await hostAsync(op, stringify(args === undefined ? null : args)));

// ---- bytes and text ----

export function toBytes(data, encoding) {
  if (typeof data === "string") {
    switch (normalizeEncoding(encoding)) {
      case "hex": return Uint8Array.fromHex(data.length % 2 ? data.slice(0, -1) : data);
      case "base64": return Uint8Array.fromBase64(data.replace(/[^A-Za-z0-9+/]/g, ""), { lastChunkHandling: "loose" });
      case "base64url": return Uint8Array.fromBase64(data.replace(/[^A-Za-z0-9_-]/g, ""), { alphabet: "base64url", lastChunkHandling: "loose" });
      case "latin1": return Uint8Array.from(data, (c) => c.charCodeAt(0) & 0xff);
      default: return Uint8Array.fromHex(native.utf8Encode(data));
    }
  }
  if (data instanceof Uint8Array) return data;
  if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  if (Array.isArray(data)) return Uint8Array.from(data);
  throw new TypeError(`Expected a string, Buffer, TypedArray or ArrayBuffer, got ${typeof data}`);
}

export function bytesToString(bytes, encoding) {
  switch (normalizeEncoding(encoding)) {
    case "hex": return bytes.toHex();
    case "base64": return bytes.toBase64();
    case "base64url": return bytes.toBase64({ alphabet: "base64url", omitPadding: true });
    case "latin1": return Array.from(bytes, (b) => String.fromCharCode(b)).join("");
    default: return decodeUtf8(bytes, false);
  }
}

export function normalizeEncoding(encoding) {
  const e = String(encoding ?? "utf8").toLowerCase();
  if (e === "utf8" || e === "utf-8") return "utf8";
  if (e === "hex" || e === "base64" || e === "base64url") return e;
  if (e === "latin1" || e === "binary" || e === "ascii") return "latin1";
  throw new TypeError(`Unknown encoding: ${encoding} (supported: utf8, hex, base64, base64url, latin1)`);
}

const decodeUtf8 = (bytes, fatal) => native.utf8Decode(bytes.toHex(), Boolean(fatal));

export const hexOf = (bytes) => bytes.toHex();
export const fromHex = (hex) => Uint8Array.fromHex(hex);
export const hash = (algorithm, bytes) => Uint8Array.fromHex(native.hash(algorithm, bytes.toHex()));
export const randomBytes = (n) => Uint8Array.fromHex(native.random(n));
export const sleep = (ms) => native.sleep(ms);

// ---- Buffer (a Uint8Array with Node's basic methods) ----

export class Buffer extends Uint8Array {
  static from(value, encodingOrOffset, length) {
    if (typeof value === "string") return copyBuffer(toBytes(value, encodingOrOffset));
    if (value instanceof ArrayBuffer) return new Buffer(value, encodingOrOffset ?? 0, length ?? value.byteLength - (encodingOrOffset ?? 0));
    if (ArrayBuffer.isView(value) || Array.isArray(value)) return copyBuffer(toBytes(value));
    if (value && typeof value === "object" && value.type === "Buffer" && Array.isArray(value.data)) return copyBuffer(value.data);
    throw new TypeError("Buffer.from expects a string, Buffer, array, TypedArray or ArrayBuffer");
  }
  static alloc(size, fill) {
    const out = new Buffer(size);
    if (fill !== undefined) out.fill(typeof fill === "string" ? toBytes(fill)[0] ?? 0 : fill);
    return out;
  }
  static allocUnsafe(size) { return new Buffer(size); }
  static isBuffer(value) { return value instanceof Buffer; }
  static isEncoding(encoding) { try { normalizeEncoding(encoding); return true; } catch { return false; } }
  static byteLength(value, encoding) {
    return typeof value === "string" ? toBytes(value, encoding).length : toBytes(value).byteLength;
  }
  static concat(list, totalLength) {
    const total = totalLength ?? list.reduce((n, b) => n + b.length, 0);
    const out = Buffer.alloc(total);
    let at = 0;
    for (const b of list) {
      if (at >= total) break;
      const part = toBytes(b).subarray(0, total - at);
      out.set(part, at);
      at += part.length;
    }
    return out;
  }
  static compare(a, b) { return Buffer.from(a).compare(b); }
  toString(encoding, start = 0, end = this.length) {
    return bytesToString(this.subarray(start, end), encoding);
  }
  toJSON() { return { type: "Buffer", data: Array.from(this) }; }
  equals(other) { return this.compare(other) === 0; }
  compare(other) {
    const b = toBytes(other);
    for (let i = 0; i < Math.min(this.length, b.length); i++) if (this[i] !== b[i]) return this[i] < b[i] ? -1 : 1;
    return Math.sign(this.length - b.length);
  }
  write(string, offset = 0, encoding = "utf8") {
    const bytes = toBytes(string, encoding).subarray(0, Math.max(0, this.length - offset));
    this.set(bytes, offset);
    return bytes.length;
  }
  slice(start, end) { return this.subarray(start, end); }
}

function copyBuffer(bytes) {
  const out = new Buffer(bytes.length);
  out.set(bytes);
  return out;
}

// ---- errors Node code checks by `code` ----

export function fsError({ code, message, syscall, path }) {
  const error = new Error(`${code}: ${message}`);
  error.code = code;
  if (syscall) error.syscall = syscall;
  if (path !== undefined) error.path = path;
  return error;
}

// ---- AbortController / AbortSignal ----

export class AbortSignal {
  #listeners = [];
  constructor() {
    this.aborted = false;
    this.reason = undefined;
    this.onabort = null;
  }
  addEventListener(type, listener, options) {
    if (type !== "abort" || typeof listener !== "function") return;
    this.#listeners.push({ listener, once: Boolean(options && options.once) });
  }
  removeEventListener(type, listener) {
    this.#listeners = this.#listeners.filter((l) => l.listener !== listener);
  }
  throwIfAborted() {
    if (this.aborted) throw this.reason;
  }
  static abort(reason) {
    const controller = new AbortController();
    controller.abort(reason);
    return controller.signal;
  }
  static timeout(ms) {
    const controller = new AbortController();
    setTimeout(() => controller.abort(abortError("The operation timed out", "TimeoutError")), ms);
    return controller.signal;
  }
  _abort(reason) {
    if (this.aborted) return;
    this.aborted = true;
    this.reason = reason === undefined ? abortError("This operation was aborted") : reason;
    const event = { type: "abort", target: this };
    if (typeof this.onabort === "function") this.onabort(event);
    for (const { listener } of this.#listeners.splice(0)) listener.call(this, event);
  }
}

export class AbortController {
  constructor() { this.signal = new AbortSignal(); }
  abort(reason) { this.signal._abort(reason); }
}

export function abortError(message, name = "AbortError") {
  const error = new Error(message);
  error.name = name;
  error.code = name === "AbortError" ? "ABORT_ERR" : undefined;
  return error;
}

// ---- timers ----

let nextTimer = 1;
const liveTimers = new Set();
function setTimeout(callback, ms, ...args) {
  const id = nextTimer++;
  liveTimers.add(id);
  native.sleep(Math.max(0, Number(ms) || 0)).then(() => {
    if (liveTimers.delete(id)) callback(...args);
  });
  return id;
}
function setInterval(callback, ms, ...args) {
  const id = nextTimer++;
  const every = Math.max(1, Number(ms) || 0);
  liveTimers.add(id);
  const tick = () => native.sleep(every).then(() => {
    if (!liveTimers.has(id)) return;
    callback(...args);
    tick();
  });
  tick();
  return id;
}
const clearTimer = (id) => { liveTimers.delete(id); };

// ---- TextEncoder / TextDecoder ----

class TextEncoder {
  get encoding() { return "utf-8"; }
  encode(input = "") { return toBytes(String(input)); }
  encodeInto(input, destination) {
    const bytes = toBytes(String(input)).subarray(0, destination.length);
    destination.set(bytes);
    return { read: String(input).length, written: bytes.length };
  }
}

class TextDecoder {
  #fatal;
  constructor(label = "utf-8", options = {}) {
    if (normalizeEncoding(label) !== "utf8") throw new RangeError(`TextDecoder supports only utf-8, not ${label}`);
    this.#fatal = Boolean(options.fatal);
  }
  get encoding() { return "utf-8"; }
  get fatal() { return this.#fatal; }
  decode(input) {
    if (input === undefined) return "";
    let text = decodeUtf8(toBytes(input), this.#fatal);
    return text.charCodeAt(0) === 0xfeff ? text.slice(1) : text;
  }
}

// ---- structuredClone ----

function structuredClone(value, seen = new Map()) {
  if (value === null || typeof value !== "object") {
    if (typeof value === "function" || typeof value === "symbol") throw cloneError(value);
    return value;
  }
  if (seen.has(value)) return seen.get(value);
  let out;
  if (value instanceof Date) out = new Date(value.getTime());
  else if (value instanceof RegExp) out = new RegExp(value.source, value.flags);
  else if (ArrayBuffer.isView(value)) out = new value.constructor(value);
  else if (value instanceof ArrayBuffer) out = value.slice(0);
  else if (value instanceof Map) {
    out = new Map();
    seen.set(value, out);
    for (const [k, v] of value) out.set(structuredClone(k, seen), structuredClone(v, seen));
    return out;
  } else if (value instanceof Set) {
    out = new Set();
    seen.set(value, out);
    for (const v of value) out.add(structuredClone(v, seen));
    return out;
  } else if (value instanceof Error) {
    out = new Error(value.message);
    out.name = value.name;
  } else {
    out = Array.isArray(value) ? [] : {};
    seen.set(value, out);
    for (const key of Object.keys(value)) out[key] = structuredClone(value[key], seen);
    return out;
  }
  seen.set(value, out);
  return out;
}

function cloneError(value) {
  const error = new Error(`${String(value)} could not be cloned.`);
  error.name = "DataCloneError";
  return error;
}

// ---- URL / URLSearchParams (WHATWG basics: hierarchical URLs, relative resolution) ----

const DEFAULT_PORTS = { "http:": "80", "https:": "443", "ws:": "80", "wss:": "443", "ftp:": "21" };
const SPECIAL = new Set(["http:", "https:", "ws:", "wss:", "ftp:", "file:"]);

function removeDotSegments(path) {
  const out = [];
  const parts = path.split("/");
  for (let i = 0; i < parts.length; i++) {
    const part = parts[i];
    if (part === "..") {
      if (out.length > 1) out.pop();
      if (i === parts.length - 1) out.push("");
    } else if (part === ".") {
      if (i === parts.length - 1) out.push("");
    } else out.push(part);
  }
  const joined = out.join("/");
  return joined.startsWith("/") ? joined : `/${joined}`;
}

function parseUrl(input, base) {
  const text = String(input).trim().replace(/[\t\n\r]/g, "");
  const absolute = /^([a-zA-Z][a-zA-Z0-9+.-]*:)(.*)$/.exec(text);
  if (absolute && !(base && SPECIAL.has(absolute[1].toLowerCase()) && !absolute[2].startsWith("/") && absolute[1].toLowerCase() === base.protocol)) {
    const protocol = absolute[1].toLowerCase();
    let rest = absolute[2];
    if (SPECIAL.has(protocol)) rest = rest.replace(/\\/g, "/");
    if (rest.startsWith("//") || (SPECIAL.has(protocol) && protocol !== "file:")) {
      rest = rest.replace(/^\/*/, "");
      const end = rest.search(/[/?#]/);
      const authority = end < 0 ? rest : rest.slice(0, end);
      const tail = end < 0 ? "" : rest.slice(end);
      return { protocol, ...parseAuthority(authority, protocol), ...parseTail(tail, SPECIAL.has(protocol)) };
    }
    if (protocol === "file:") return { protocol, username: "", password: "", hostname: "", port: "", ...parseTail(rest.replace(/^\/*/, "/"), true) };
    return { protocol, username: "", password: "", hostname: "", port: "", opaque: true, ...parseTail(rest, false) };
  }
  if (!base) throw new TypeError(`Invalid URL: ${text}`);
  if (base.opaque) {
    if (!text.startsWith("#")) throw new TypeError(`Invalid URL: ${text}`);
    return { ...base, hash: text === "#" ? "" : text };
  }
  const relative = absolute ? absolute[2] : text.replace(/\\/g, "/");
  if (relative.startsWith("//")) return parseUrl(`${base.protocol}${relative}`);
  const result = { ...base };
  const tail = parseTail(relative, false);
  if (relative === "") return { ...result, hash: "" };
  if (relative.startsWith("#")) return { ...result, hash: tail.hash };
  if (relative.startsWith("?")) return { ...result, search: tail.search, hash: tail.hash };
  const path = relative.startsWith("/") ? tail.pathname : `${base.pathname.replace(/[^/]*$/, "")}${tail.pathname.replace(/^\//, "")}`;
  return { ...result, pathname: removeDotSegments(path), search: tail.search, hash: tail.hash };
}

function parseAuthority(authority, protocol) {
  const at = authority.lastIndexOf("@");
  const userinfo = at < 0 ? "" : authority.slice(0, at);
  const hostport = at < 0 ? authority : authority.slice(at + 1);
  const [username, password = ""] = userinfo.split(/:(.*)/s);
  const match = /^(\[[^\]]*\]|[^:]*)(?::(\d*))?$/.exec(hostport);
  if (!match) throw new TypeError(`Invalid URL host: ${hostport}`);
  const hostname = match[1].toLowerCase();
  if (SPECIAL.has(protocol) && protocol !== "file:" && hostname === "") throw new TypeError(`Invalid URL: ${protocol}//${authority}`);
  let port = match[2] ?? "";
  if (port !== "") port = String(Number(port));
  if (DEFAULT_PORTS[protocol] === port) port = "";
  return { username: username ?? "", password, hostname, port };
}

function parseTail(tail, hierarchical) {
  const hashAt = tail.indexOf("#");
  const hash = hashAt < 0 ? "" : tail.slice(hashAt);
  const beforeHash = hashAt < 0 ? tail : tail.slice(0, hashAt);
  const queryAt = beforeHash.indexOf("?");
  const search = queryAt < 0 ? "" : beforeHash.slice(queryAt);
  let pathname = queryAt < 0 ? beforeHash : beforeHash.slice(0, queryAt);
  if (hierarchical) pathname = removeDotSegments(pathname || "/");
  return { pathname: encodeURI(decodeSafe(pathname)), search: search === "?" ? "" : search, hash: hash === "#" ? "" : hash };
}

function decodeSafe(text) {
  try { return decodeURI(text); } catch { return text; }
}

class URL {
  #parts;
  constructor(input, base) {
    const baseParts = base === undefined ? undefined : (base instanceof URL ? base.#parts : new URL(base).#parts);
    this.#parts = parseUrl(input, baseParts);
  }
  static canParse(input, base) { try { new URL(input, base); return true; } catch { return false; } }
  get protocol() { return this.#parts.protocol; }
  get username() { return this.#parts.username; }
  get password() { return this.#parts.password; }
  get hostname() { return this.#parts.hostname; }
  get port() { return this.#parts.port; }
  get host() { return this.#parts.port ? `${this.#parts.hostname}:${this.#parts.port}` : this.#parts.hostname; }
  get pathname() { return this.#parts.pathname; }
  get search() { return this.#parts.search; }
  get hash() { return this.#parts.hash; }
  get origin() { return SPECIAL.has(this.protocol) && this.protocol !== "file:" ? `${this.protocol}//${this.host}` : "null"; }
  get searchParams() {
    const params = new URLSearchParams(this.#parts.search);
    params._onChange = (text) => { this.#parts.search = text ? `?${text}` : ""; };
    return params;
  }
  get href() {
    const p = this.#parts;
    if (p.opaque) return `${p.protocol}${p.pathname}${p.search}${p.hash}`;
    const userinfo = p.username ? `${p.username}${p.password ? `:${p.password}` : ""}@` : "";
    return `${p.protocol}//${userinfo}${this.host}${p.pathname}${p.search}${p.hash}`;
  }
  set href(value) { this.#parts = parseUrl(value); }
  set pathname(value) { this.#parts.pathname = removeDotSegments(encodeURI(decodeSafe(String(value).startsWith("/") ? String(value) : `/${value}`))); }
  set search(value) { const v = String(value); this.#parts.search = v === "" || v === "?" ? "" : (v.startsWith("?") ? v : `?${v}`); }
  set hash(value) { const v = String(value); this.#parts.hash = v === "" || v === "#" ? "" : (v.startsWith("#") ? v : `#${v}`); }
  set hostname(value) { this.#parts.hostname = String(value).toLowerCase(); }
  set port(value) { const v = String(value); this.#parts.port = DEFAULT_PORTS[this.protocol] === v ? "" : v; }
  set protocol(value) { this.#parts.protocol = `${String(value).replace(/:$/, "").toLowerCase()}:`; }
  set username(value) { this.#parts.username = String(value); }
  set password(value) { this.#parts.password = String(value); }
  toString() { return this.href; }
  toJSON() { return this.href; }
}

const formEncode = (s) => encodeURIComponent(s).replace(/%20/g, "+").replace(/[!'()~]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
const formDecode = (s) => decodeSafeComponent(s.replace(/\+/g, " "));
function decodeSafeComponent(s) { try { return decodeURIComponent(s); } catch { return s; } }

class URLSearchParams {
  #pairs = [];
  constructor(init = "") {
    if (typeof init === "string") {
      for (const part of init.replace(/^\?/, "").split("&")) {
        if (part === "") continue;
        const eq = part.indexOf("=");
        this.#pairs.push(eq < 0 ? [formDecode(part), ""] : [formDecode(part.slice(0, eq)), formDecode(part.slice(eq + 1))]);
      }
    } else if (init instanceof URLSearchParams) {
      this.#pairs = [...init];
    } else if (init && typeof init[Symbol.iterator] === "function") {
      for (const [k, v] of init) this.#pairs.push([String(k), String(v)]);
    } else if (init && typeof init === "object") {
      for (const [k, v] of Object.entries(init)) this.#pairs.push([k, String(v)]);
    }
  }
  #changed() { if (this._onChange) this._onChange(this.toString()); }
  get size() { return this.#pairs.length; }
  append(name, value) { this.#pairs.push([String(name), String(value)]); this.#changed(); }
  delete(name) { this.#pairs = this.#pairs.filter(([k]) => k !== String(name)); this.#changed(); }
  get(name) { const found = this.#pairs.find(([k]) => k === String(name)); return found ? found[1] : null; }
  getAll(name) { return this.#pairs.filter(([k]) => k === String(name)).map(([, v]) => v); }
  has(name) { return this.#pairs.some(([k]) => k === String(name)); }
  set(name, value) {
    const key = String(name);
    const at = this.#pairs.findIndex(([k]) => k === key);
    if (at < 0) this.#pairs.push([key, String(value)]);
    else this.#pairs = this.#pairs.filter(([k], i) => k !== key || i === at).map((p, i) => (p[0] === key ? [key, String(value)] : p));
    this.#changed();
  }
  sort() { this.#pairs.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0)); this.#changed(); }
  forEach(callback, thisArg) { for (const [k, v] of this.#pairs) callback.call(thisArg, v, k, this); }
  keys() { return this.#pairs.map(([k]) => k)[Symbol.iterator](); }
  values() { return this.#pairs.map(([, v]) => v)[Symbol.iterator](); }
  entries() { return this.#pairs.map((p) => [...p])[Symbol.iterator](); }
  [Symbol.iterator]() { return this.entries(); }
  toString() { return this.#pairs.map(([k, v]) => `${formEncode(k)}=${formEncode(v)}`).join("&"); }
}

// ---- crypto (the Web Crypto subset Node code uses without importing) ----

export function getRandomValues(array) {
  if (!ArrayBuffer.isView(array) || array instanceof Float32Array || array instanceof Float64Array) {
    throw new TypeError("getRandomValues expects an integer TypedArray");
  }
  if (array.byteLength > 65536) throw new RangeError("getRandomValues: at most 65536 bytes at a time");
  new Uint8Array(array.buffer, array.byteOffset, array.byteLength).set(randomBytes(array.byteLength));
  return array;
}

export function randomUUID() {
  const b = randomBytes(16);
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const h = b.toHex();
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

const define = (name, value) => Object.defineProperty(globalThis, name, { value, writable: true, configurable: true, enumerable: false });
define("TextEncoder", TextEncoder);
define("TextDecoder", TextDecoder);
define("URL", URL);
define("URLSearchParams", URLSearchParams);
define("structuredClone", (value) => structuredClone(value));
define("setTimeout", setTimeout);
define("setInterval", setInterval);
define("clearTimeout", clearTimer);
define("clearInterval", clearTimer);
define("AbortController", AbortController);
define("AbortSignal", AbortSignal);
define("Buffer", Buffer);
define("crypto", Object.freeze({ getRandomValues, randomUUID }));
export { TextEncoder, TextDecoder, URL, URLSearchParams, setTimeout, setInterval, clearTimer };
