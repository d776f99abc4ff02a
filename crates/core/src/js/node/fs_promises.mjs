// `node:fs/promises`: the operations of `suzumio:fs` as promises (each settles after its one
// host call; nothing runs in the background).
import * as core from "suzumio:fs";

const wrap = (fn) => async (...args) => fn(...args);

const readFile = wrap((path, options) => core.readFile(path, options));
const writeFile = wrap(core.writeFile);
const appendFile = wrap(core.appendFile);
const readdir = wrap(core.readdir);
const stat = wrap(core.stat);
const lstat = wrap(core.stat);
const mkdir = wrap(core.mkdir);
const rm = wrap(core.rm);
const rmdir = wrap(core.rmdir);
const unlink = wrap(core.unlink);
const rename = wrap(core.rename);
const copyFile = wrap(core.copyFile);
const access = wrap(core.access);
const constants = { F_OK: 0, R_OK: 4, W_OK: 2, X_OK: 1 };

export { readFile, writeFile, appendFile, readdir, stat, lstat, mkdir, rm, rmdir, unlink, rename, copyFile, access, constants };
export default { readFile, writeFile, appendFile, readdir, stat, lstat, mkdir, rm, rmdir, unlink, rename, copyFile, access, constants };
