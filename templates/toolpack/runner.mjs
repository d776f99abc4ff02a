// The runner side of the __NAME__ pack: it runs inside the agent's container, next to the
// agent's files. `context.fs` reads and writes them (confined like the file.* tools) and
// `context.exec` runs programs there; `context.callSupport` hands data to controller.mjs.
import path from "node:path";

export function createRunnerToolpack(context) {
  return {
    tools: {
      "__NAME__.hello": async (input) => {
        const file = path.join("greetings", `${input.name}.txt`);
        await context.fs.writeFile(file, `Hello, ${input.name}!\n`, { createDirs: true });
        const { exitCode, stdout } = await context.exec("wc", ["-c", file]);
        const bytes = exitCode === 0 ? Number.parseInt(stdout.trim(), 10) : 0;
        // The controller keeps the count (the input here follows supportInputSchema).
        const counted = await context.callSupport("__NAME__.hello", { name: input.name, file, bytes });
        return { output: `Wrote ${file} (${bytes} bytes). ${counted.output}` };
      },
    },
  };
}
