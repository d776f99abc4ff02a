// Suzumio packaged scheduler toolpack: runner module (runs inside the activation container).
//
// Scheduling logic and job state live on the controller side (controller.mjs). This module
// only forwards each model-facing tool call unchanged to context.callSupport(name, input),
// which verifies the activation token, toolpack membership and the agent allowlist.
// Keep TOOL_NAMES in sync with the "tools" array of suzumio.toolpack.json.

const TOOL_NAMES = Object.freeze([
  "schedule.once",
  "schedule.recurring",
  "schedule.list",
  "schedule.cancel",
  "schedule.pause",
  "schedule.resume",
]);

export function createRunnerToolpack(context) {
  const tools = Object.fromEntries(
    TOOL_NAMES.map((name) => [name, async (input) => context.callSupport(name, input ?? {})]),
  );
  return { tools };
}
