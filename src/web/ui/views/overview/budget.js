// Budgets on the overview: a banner for each paused agent (why, when it resumes by itself, and
// a Resume button), and today's project usage against `budgets.project`.

import { errorBox, h, replace } from "../../dom.js";

/** The budget section; `render()` redraws it from `ctx.state.agents` and `ctx.state.project.budget`. */
export function budgetPanel(ctx) {
  const el = h("section", { class: "budget", "aria-label": "Budgets" });
  const ui = { busy: null, error: null };

  async function resume(agent) {
    ui.busy = agent;
    ui.error = null;
    render();
    try {
      await ctx.api.resume(agent);
    } catch (err) {
      ui.error = err;
    }
    ui.busy = null;
    await ctx.refreshProject().catch(() => {});
    render();
  }

  function render() {
    const paused = (ctx.state.agents || []).filter((a) => a.paused);
    const b = ctx.state.project?.budget;
    replace(
      el,
      paused.map((a) => banner(a, ui.busy === a.id, () => resume(a.id))),
      ui.error ? errorBox(ui.error, "Cannot resume") : null,
      b ? usageLine(b) : null,
    );
  }
  return { el, render };
}

function banner(a, busy, onResume) {
  const p = a.paused;
  return h(
    "div",
    { class: "pause-banner", role: "alert", "data-agent": a.id },
    h("strong", { text: `${a.displayName || a.id} is paused` }),
    h("span", { text: `: ${p.reason}` }),
    p.until ? h("span", { class: "muted small", text: ` (resumes by itself at ${p.until})` }) : null,
    " ",
    h("button", { type: "button", class: "secondary", disabled: busy, onclick: onResume, text: busy ? "Resuming…" : "Resume" }),
  );
}

const of = (limit) => (limit === null || limit === undefined ? "" : ` of ${limit}`);

function usageLine(b) {
  const t = b.today || {};
  const tokens = (t.inputTokens ?? 0) + (t.outputTokens ?? 0);
  const cost = t.cost || b.maxCostPerDay ? ` · cost ${Number(t.cost ?? 0).toFixed(4)}${of(b.maxCostPerDay)}` : "";
  return h(
    "p",
    { class: "usage-line muted small" },
    `Today (UTC): ${tokens} tokens${of(b.maxTokensPerDay)} (input ${t.inputTokens ?? 0}, cached ${t.cachedInputTokens ?? 0}, output ${t.outputTokens ?? 0})`,
    cost,
    ` · ${b.activationsThisHour ?? 0} activations this hour${of(b.maxActivationsPerHour)}`,
  );
}
