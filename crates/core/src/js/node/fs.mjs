// `node:fs`: the common synchronous calls and `promises`. Callback forms are not provided: use
// the `*Sync` calls or `node:fs/promises`.
import * as core from "suzumio:fs";
import promises from "node:fs/promises";

const readFileSync = (path, options) => core.readFile(path, options);
const writeFileSync = core.writeFile;
const appendFileSync = core.appendFile;
const existsSync = core.exists;
const mkdirSync = core.mkdir;
const readdirSync = core.readdir;
const statSync = core.stat;
const lstatSync = core.stat;
const rmSync = core.rm;
const rmdirSync = core.rmdir;
const unlinkSync = core.unlink;
const renameSync = core.rename;
const copyFileSync = core.copyFile;
const accessSync = core.access;
const constants = promises.constants;
const { Stats, Dirent } = core;

const fs = {
  readFileSync, writeFileSync, appendFileSync, existsSync, mkdirSync, readdirSync, statSync, lstatSync, rmSync,
  rmdirSync, unlinkSync, renameSync, copyFileSync, accessSync, constants, promises, Stats, Dirent,
};
export {
  readFileSync, writeFileSync, appendFileSync, existsSync, mkdirSync, readdirSync, statSync, lstatSync, rmSync,
  rmdirSync, unlinkSync, renameSync, copyFileSync, accessSync, constants, promises, Stats, Dirent,
};
export default fs;
