// `node:util`: `format`, `inspect`, `promisify`, `inherits`, `deprecate`, `isDeepStrictEqual`,
// `types` and the text codecs. `inspect` is a compact, Node-like rendering, not Node's exact one.
import { TextEncoder, TextDecoder } from "suzumio:runtime";

const customPromisify = Symbol.for("nodejs.util.promisify.custom");

function inspect(value, options = {}) {
  const depth = options.depth === undefined ? 2 : options.depth === null ? Infinity : options.depth;
  const seen = new Set();
  const show = (v, level) => {
    if (typeof v === "string") return level === 0 ? `'${v}'` : `'${v.replace(/'/g, "\\'")}'`;
    if (typeof v === "bigint") return `${v}n`;
    if (typeof v === "symbol") return v.toString();
    if (typeof v === "function") return `[Function: ${v.name || "(anonymous)"}]`;
    if (v === null || typeof v !== "object") return String(v);
    if (seen.has(v)) return "[Circular *1]";
    if (v instanceof Error) return v.stack ? `${v.name}: ${v.message}\n${v.stack}`.trimEnd() : `${v.name}: ${v.message}`;
    if (v instanceof Date) return Number.isNaN(v.getTime()) ? "Invalid Date" : v.toISOString();
    if (v instanceof RegExp) return String(v);
    if (level > depth) return Array.isArray(v) ? "[Array]" : "[Object]";
    seen.add(v);
    try {
      if (Array.isArray(v)) return v.length === 0 ? "[]" : `[ ${v.map((x) => show(x, level + 1)).join(", ")} ]`;
      if (v instanceof Map) return `Map(${v.size}) { ${[...v].map(([k, x]) => `${show(k, level + 1)} => ${show(x, level + 1)}`).join(", ")} }`;
      if (v instanceof Set) return `Set(${v.size}) { ${[...v].map((x) => show(x, level + 1)).join(", ")} }`;
      if (ArrayBuffer.isView(v)) return `${v.constructor.name}(${v.length}) [ ${Array.from(v).slice(0, 50).join(", ")}${v.length > 50 ? ", ..." : ""} ]`;
      const keys = Object.keys(v);
      const name = v.constructor && v.constructor !== Object && v.constructor.name ? `${v.constructor.name} ` : "";
      if (keys.length === 0) return `${name}{}`;
      const key = (k) => (/^[A-Za-z_$][\w$]*$/.test(k) ? k : `'${k}'`);
      return `${name}{ ${keys.map((k) => `${key(k)}: ${show(v[k], level + 1)}`).join(", ")} }`;
    } finally {
      seen.delete(v);
    }
  };
  return show(value, 0);
}
inspect.custom = Symbol.for("nodejs.util.inspect.custom");

function format(first, ...args) {
  if (typeof first !== "string") return [first, ...args].map((v) => (typeof v === "string" ? v : inspect(v))).join(" ");
  let i = 0;
  const text = first.replace(/%([sdifjoOc%])/g, (match, spec) => {
    if (spec === "%") return "%";
    if (i >= args.length) return match;
    const arg = args[i++];
    switch (spec) {
      case "s": return typeof arg === "string" ? arg : typeof arg === "object" && arg !== null ? inspect(arg, { depth: 1 }) : String(arg);
      case "d": case "i": return typeof arg === "object" ? "NaN" : String(spec === "i" ? Math.trunc(Number(arg)) : Number(arg));
      case "f": return String(parseFloat(arg));
      case "j": try { return JSON.stringify(arg); } catch { return "[Circular]"; }
      case "c": return "";
      default: return inspect(arg);
    }
  });
  return [text, ...args.slice(i).map((v) => (typeof v === "string" ? v : inspect(v)))].join(" ");
}

function promisify(original) {
  if (typeof original !== "function") throw new TypeError('The "original" argument must be of type function');
  if (typeof original[customPromisify] === "function") return original[customPromisify];
  return function (...args) {
    return new Promise((resolve, reject) => {
      original.call(this, ...args, (error, value) => (error ? reject(error) : resolve(value)));
    });
  };
}
promisify.custom = customPromisify;

function callbackify(original) {
  return function (...args) {
    const callback = args.pop();
    original.apply(this, args).then((value) => callback(null, value), (error) => callback(error));
  };
}

function inherits(ctor, superCtor) {
  Object.setPrototypeOf(ctor.prototype, superCtor.prototype);
  Object.setPrototypeOf(ctor, superCtor);
  ctor.super_ = superCtor;
}

function deprecate(fn, message) {
  let warned = false;
  return function (...args) {
    if (!warned) { warned = true; console.warn(`DeprecationWarning: ${message}`); }
    return fn.apply(this, args);
  };
}

function isDeepStrictEqual(a, b) {
  if (Object.is(a, b)) return true;
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false;
  if (Object.getPrototypeOf(a) !== Object.getPrototypeOf(b)) return false;
  if (a instanceof Date) return a.getTime() === b.getTime();
  if (a instanceof Map || a instanceof Set) return a.size === b.size && isDeepStrictEqual([...a], [...b]);
  const ka = Object.keys(a);
  const kb = Object.keys(b);
  return ka.length === kb.length && ka.every((k) => Object.prototype.hasOwnProperty.call(b, k) && isDeepStrictEqual(a[k], b[k]));
}

const types = {
  isDate: (v) => v instanceof Date,
  isRegExp: (v) => v instanceof RegExp,
  isPromise: (v) => v instanceof Promise,
  isMap: (v) => v instanceof Map,
  isSet: (v) => v instanceof Set,
  isTypedArray: (v) => ArrayBuffer.isView(v) && !(v instanceof DataView),
  isUint8Array: (v) => v instanceof Uint8Array,
  isNativeError: (v) => v instanceof Error,
};

const util = { format, inspect, promisify, callbackify, inherits, deprecate, isDeepStrictEqual, types, TextEncoder, TextDecoder };
export { format, inspect, promisify, callbackify, inherits, deprecate, isDeepStrictEqual, types, TextEncoder, TextDecoder };
export default util;
