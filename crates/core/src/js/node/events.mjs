// `node:events`: `EventEmitter` (listeners, once, prepend, remove, error events) and `once`.
class EventEmitter {
  #events = new Map();
  #max = 10;

  static defaultMaxListeners = 10;

  #list(name) {
    let list = this.#events.get(name);
    if (!list) this.#events.set(name, (list = []));
    return list;
  }
  #add(name, listener, once, prepend) {
    if (typeof listener !== "function") throw new TypeError('The "listener" argument must be of type function');
    if (this.#events.has("newListener")) this.emit("newListener", name, listener);
    const entry = { listener, once };
    const list = this.#list(name);
    if (prepend) list.unshift(entry);
    else list.push(entry);
    return this;
  }
  on(name, listener) { return this.#add(name, listener, false, false); }
  addListener(name, listener) { return this.on(name, listener); }
  once(name, listener) { return this.#add(name, listener, true, false); }
  prependListener(name, listener) { return this.#add(name, listener, false, true); }
  prependOnceListener(name, listener) { return this.#add(name, listener, true, true); }
  off(name, listener) {
    const list = this.#events.get(name);
    if (!list) return this;
    const at = list.findIndex((e) => e.listener === listener);
    if (at >= 0) list.splice(at, 1);
    if (list.length === 0) this.#events.delete(name);
    if (at >= 0 && this.#events.has("removeListener")) this.emit("removeListener", name, listener);
    return this;
  }
  removeListener(name, listener) { return this.off(name, listener); }
  removeAllListeners(name) {
    if (name === undefined) this.#events.clear();
    else this.#events.delete(name);
    return this;
  }
  emit(name, ...args) {
    const list = this.#events.get(name);
    if (!list || list.length === 0) {
      if (name === "error") throw args[0] instanceof Error ? args[0] : new Error(`Unhandled error. (${String(args[0])})`);
      return false;
    }
    for (const entry of [...list]) {
      if (entry.once) this.off(name, entry.listener);
      entry.listener.apply(this, args);
    }
    return true;
  }
  listeners(name) { return (this.#events.get(name) ?? []).map((e) => e.listener); }
  rawListeners(name) { return this.listeners(name); }
  listenerCount(name) { return (this.#events.get(name) ?? []).length; }
  eventNames() { return [...this.#events.keys()]; }
  setMaxListeners(n) { this.#max = n; return this; }
  getMaxListeners() { return this.#max; }
}

function once(emitter, name) {
  return new Promise((resolve, reject) => {
    const onError = (error) => { emitter.off(name, onEvent); reject(error); };
    const onEvent = (...args) => { if (name !== "error") emitter.off("error", onError); resolve(args); };
    emitter.once(name, onEvent);
    if (name !== "error") emitter.once("error", onError);
  });
}

EventEmitter.EventEmitter = EventEmitter;
EventEmitter.once = once;
export { EventEmitter, once };
export default EventEmitter;
