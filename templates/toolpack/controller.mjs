// The controller side of the __NAME__ pack: `support` answers the runner's callSupport, and
// the WebUI entries read and change the pack's state (JSON documents in
// toolpack-state/__NAME__/, written atomically by context.state).
const STATE = "greetings.json";

function load(context) {
  return context.state.read(STATE) ?? { counts: {} };
}

export function createControllerToolpack(context) {
  return {
    async support(tool, input) {
      const state = load(context);
      state.counts[input.name] = (state.counts[input.name] ?? 0) + 1;
      context.state.write(STATE, state);
      return { output: `${input.name} was greeted ${state.counts[input.name]} time(s).` };
    },
  };
}

export function createWebuiToolpack(context) {
  return {
    webui: {
      "__NAME__.greetings": async () => {
        const { counts } = load(context);
        const lines = Object.entries(counts).map(([name, n]) => `${name}: ${n}`);
        return { output: lines.length ? lines.join("\n") : "Nobody was greeted yet.", metadata: { counts } };
      },
      "__NAME__.reset": async (input) => {
        context.state.write(STATE, { counts: {}, resetReason: input?.reason ?? null });
        return { output: "Greetings reset." };
      },
    },
  };
}
