// `node:timers/promises`: `setTimeout(ms, value)` as a promise.
import { sleep } from "suzumio:runtime";

const setTimeout = async (ms, value) => {
  await sleep(Math.max(0, Number(ms) || 0));
  return value;
};
const setImmediate = (value) => setTimeout(0, value);
const scheduler = { wait: (ms) => setTimeout(ms) };
export { setTimeout, setImmediate, scheduler };
export default { setTimeout, setImmediate, scheduler };
