// `node:crypto`: random values and hashes (sha1, sha256, sha384, sha512, md5) computed by the
// host with the RustCrypto crates. No ciphers, signatures, HMAC or key derivation.
import { Buffer, getRandomValues, randomUUID, hash, randomBytes as bytes, toBytes } from "suzumio:runtime";

const ALGORITHMS = ["sha1", "sha256", "sha384", "sha512", "md5"];

function normalizeAlgorithm(name) {
  const algorithm = String(name).toLowerCase().replace(/^sha-/, "sha");
  if (!ALGORITHMS.includes(algorithm)) throw new Error(`Digest method not supported: ${name} (supported: ${ALGORITHMS.join(", ")})`);
  return algorithm;
}

class Hash {
  #algorithm;
  #chunks = [];
  #done = false;
  constructor(algorithm) { this.#algorithm = normalizeAlgorithm(algorithm); }
  update(data, encoding) {
    if (this.#done) throw new Error("Digest already called");
    this.#chunks.push(toBytes(data, encoding));
    return this;
  }
  digest(encoding) {
    if (this.#done) throw new Error("Digest already called");
    this.#done = true;
    const result = Buffer.from(hash(this.#algorithm, Buffer.concat(this.#chunks)));
    return encoding === undefined || encoding === "buffer" ? result : result.toString(encoding);
  }
  copy() {
    const copy = new Hash(this.#algorithm);
    for (const chunk of this.#chunks) copy.update(chunk);
    return copy;
  }
}

const createHash = (algorithm) => new Hash(algorithm);
const getHashes = () => [...ALGORITHMS];

function randomBytes(size, callback) {
  if (!Number.isInteger(size) || size < 0 || size > 1 << 24) throw new RangeError(`randomBytes: size must be an integer from 0 to ${1 << 24}`);
  const out = Buffer.from(bytes(size));
  if (typeof callback === "function") {
    queueMicrotask(() => callback(null, out));
    return undefined;
  }
  return out;
}

function randomInt(min, max, callback) {
  if (max === undefined || typeof max === "function") [min, max, callback] = [0, min, max];
  if (!Number.isSafeInteger(min) || !Number.isSafeInteger(max) || max <= min) throw new RangeError("randomInt: need safe integers with min < max");
  const range = max - min;
  const limit = Math.floor(2 ** 48 / range) * range;
  let value;
  do {
    const b = bytes(6);
    value = b.reduce((n, x) => n * 256 + x, 0);
  } while (value >= limit);
  const result = min + (value % range);
  if (typeof callback === "function") {
    queueMicrotask(() => callback(null, result));
    return undefined;
  }
  return result;
}

function timingSafeEqual(a, b) {
  const x = toBytes(a);
  const y = toBytes(b);
  if (x.length !== y.length) throw new RangeError("Input buffers must have the same byte length");
  let diff = 0;
  for (let i = 0; i < x.length; i++) diff |= x[i] ^ y[i];
  return diff === 0;
}

const webcrypto = globalThis.crypto;
export { createHash, getHashes, randomBytes, randomUUID, randomInt, getRandomValues, timingSafeEqual, webcrypto, Hash };
export default { createHash, getHashes, randomBytes, randomUUID, randomInt, getRandomValues, timingSafeEqual, webcrypto, Hash };
