// Suzumio packaged scheduler toolpack: controller module (runs on the controller side).
//
// Placeholder. The real implementation (tool support handlers, createWebuiToolpack and the
// schedulerTick hook, with state under toolpack-state/scheduler/) arrives with issue [C].
// Until then every support call fails loudly instead of silently doing nothing.

export function createControllerToolpack(context) {
  throw new Error("scheduler controller arrives with issue [C]");
}
