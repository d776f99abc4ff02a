// The notes pack's controller side: it keeps the index of notes in the pack's state
// (toolpack-state/notes/index.json) and shows it in the WebUI.

/** @param {import("../../../../types/suzumio").ControllerContext} context */
function readIndex(context) {
  return context.state.read("index.json") ?? { notes: [] };
}

/** @type {import("../../../../types/suzumio").ControllerToolpackFactory} */
export function createControllerToolpack(context) {
  return {
    tools: {
      // Called by runner.mjs through context.callSupport("notes.add", …), as the calling agent.
      "notes.add"({ id, title, path, words }) {
        const index = readIndex(context);
        index.notes = index.notes.filter((n) => n.id !== id);
        index.notes.unshift({ id, title, path, words, agent: context.agent.id, at: context.time.now() });
        context.state.write("index.json", index);
        return { output: `Saved "${title}" (${words} words) as ${path}.`, metadata: { id } };
      },
    },
  };
}

/** @type {import("../../../../types/suzumio").WebuiToolpackFactory} */
export function createWebuiToolpack(context) {
  return {
    webui: {
      "notes.index"() {
        const { notes } = readIndex(context);
        if (notes.length === 0) return { output: "No notes yet." };
        return { output: notes.map((n) => `${n.at}  ${n.agent}  ${n.title} (${n.words} words): ${n.path}`).join("\n") };
      },
    },
  };
}
