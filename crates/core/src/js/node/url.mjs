// `node:url`: the global URL classes and file-URL conversions.
const { URL, URLSearchParams } = globalThis;

function fileURLToPath(url) {
  const parsed = url instanceof URL ? url : new URL(url);
  if (parsed.protocol !== "file:") throw new TypeError(`The URL must be of scheme file: ${parsed.href}`);
  return decodeURIComponent(parsed.pathname);
}

function pathToFileURL(path) {
  if (!String(path).startsWith("/")) throw new TypeError(`pathToFileURL needs an absolute path: ${path}`);
  return new URL(`file://${encodeURI(String(path)).replace(/[?#]/g, encodeURIComponent)}`);
}

export { URL, URLSearchParams, fileURLToPath, pathToFileURL };
export default { URL, URLSearchParams, fileURLToPath, pathToFileURL };
