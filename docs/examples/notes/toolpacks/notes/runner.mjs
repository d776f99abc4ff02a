// The notes pack's runner side: it runs in the agent's container, writes the note with
// `context.fs`, and tells the controller about it with `context.callSupport`.
import path from "node:path";
import { createHash } from "node:crypto";

const DIR = "notes";

/** A file name from a title: "Release plan!" → "release-plan". */
function slug(title) {
  return title.toLowerCase().replace(/[^a-z0-9]+/g, "-").replace(/^-+|-+$/g, "") || "note";
}

/** @type {import("../../../../types/suzumio").RunnerToolpackFactory} */
export function createRunnerToolpack(context) {
  return {
    tools: {
      async "notes.add"({ title, text }) {
        const file = path.join(DIR, `${slug(title)}.md`);
        await context.fs.writeFile(file, `# ${title}\n\n${text}\n`, { createDirs: true });
        const words = text.split(/\s+/).filter(Boolean).length;
        const id = createHash("sha256").update(file).digest("hex").slice(0, 12);
        // Derived data: what supportInputSchema allows, not the model's input.
        const saved = await context.callSupport("notes.add", { id, title, path: file, words });
        return {
          content: [
            { type: "text", text: saved.output },
            { type: "resource_link", uri: `file://${path.join(context.workspace, file)}`, name: file },
          ],
        };
      },

      async "notes.list"() {
        if (!(await context.fs.exists(DIR))) {
          return { content: [{ type: "text", text: "No notes yet." }], structuredContent: { notes: [] } };
        }
        const notes = [];
        for (const name of await context.fs.readdir(DIR)) {
          const file = path.join(DIR, name);
          notes.push({ path: file, bytes: (await context.fs.stat(file)).size });
        }
        const lines = notes.map((n) => `${n.path} (${n.bytes} bytes)`);
        return { content: [{ type: "text", text: lines.join("\n") }], structuredContent: { notes } };
      },
    },
  };
}
