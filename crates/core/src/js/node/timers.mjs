// `node:timers`: the global timers.
const { setTimeout, setInterval, clearTimeout, clearInterval } = globalThis;
const setImmediate = (callback, ...args) => setTimeout(callback, 0, ...args);
const clearImmediate = clearTimeout;
export { setTimeout, setInterval, clearTimeout, clearInterval, setImmediate, clearImmediate };
export default { setTimeout, setInterval, clearTimeout, clearInterval, setImmediate, clearImmediate };
