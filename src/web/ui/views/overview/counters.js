// The counters under the hero: agents (by status), messages, activations, tool calls, events.

import { h, metricTiles, replace } from "../../dom.js";

/** The counter tiles; `render()` redraws them from `ctx.state.project.stats`. */
export function projectCounters(ctx) {
  const el = h("section", { class: "counters", "aria-label": "Counters" });
  function render() {
    const s = ctx.state.project?.stats;
    replace(el, s ? metricTiles(counterTiles(s, ctx.state.agents.length)) : null);
  }
  return { el, render };
}

function counterTiles(s, agentCount) {
  const byStatus = Object.entries(s.agents?.byStatus || {})
    .map(([k, v]) => `${v} ${k}`)
    .join(", ");
  return [
    { label: "Agents", value: s.agents?.total ?? agentCount, description: byStatus },
    { label: "Messages", value: s.messages },
    {
      label: "Activations",
      value: s.activations?.total,
      description: `${s.activations?.running ?? 0} running${s.activations?.waitingApproval ? `, ${s.activations.waitingApproval} waiting for approval` : ""}${s.activations?.waitingUser ? `, ${s.activations.waitingUser} waiting for an answer` : ""}, ${s.activations?.failed ?? 0} failed`,
      tone: s.activations?.failed ? "bad" : null,
    },
    { label: "Tool calls", value: s.toolCalls },
    { label: "Events", value: s.events },
  ];
}
