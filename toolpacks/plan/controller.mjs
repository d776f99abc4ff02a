// Suzumio packaged plan toolpack: controller module (runs on the controller side).
//
// Placeholder. The real implementation (tool support handlers, createWebuiToolpack and the
// schedulerTick hook, with state under toolpack-state/plan/) arrives with issue [C].
// Until then every support call fails loudly instead of silently doing nothing.

export function createControllerToolpack(context) {
  throw new Error("plan controller arrives with issue [C]");
}
