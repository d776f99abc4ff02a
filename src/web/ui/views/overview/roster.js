// The agent roster: one card per agent with its live status, model, active activation, the
// text its model is writing right now, why it failed (its last error), packs, tools and links to its history and activations.
// Each card has a permission-mode switch: it takes effect from the agent's next tool call
// (`PUT …/agents/:a/permission-mode`), and says who switched it when it is not suzumio.yaml's.

import { clip, errorBox, h, pill, replace, timeAgo } from "../../dom.js";

/** The roster section; `render()` redraws it from `ctx.state.agents`. */
export function agentRoster(ctx) {
  const el = h("section", { class: "roster-wrap" });
  function render() {
    const agents = ctx.state.agents || [];
    const coordinator = ctx.state.project?.coordinator;
    replace(
      el,
      h("h2", { class: "section-title", text: "Agent roster" }),
      ctx.state.agentsError ? errorBox(ctx.state.agentsError, "Agents unavailable") : null,
      agents.length === 0 && !ctx.state.agentsError ? h("p", { class: "muted", text: "No agents." }) : null,
      h(
        "div",
        { class: "roster" },
        agents.map((a) => agentCard(ctx, a, a.id === coordinator, waitingOf(ctx, a.id), askingOf(ctx, a.id))),
      ),
    );
    live();
  }
  // Only the live lines change as text streams in; the cards stay.
  function live() {
    for (const line of el.querySelectorAll("[data-live-agent]")) {
      const entry = [...ctx.state.live.values()].find((l) => l.agentId === line.dataset.liveAgent);
      const text = entry?.text.trim() ?? "";
      line.hidden = !text;
      line.textContent = text.length > LIVE_TAIL ? `…${text.slice(-LIVE_TAIL)}` : text;
    }
  }
  return { el, render, live };
}

// The card shows the end of the text being written.
const LIVE_TAIL = 280;

/** How many of the agent's tool calls wait for approval. */
function waitingOf(ctx, agentId) {
  return (ctx.state.pendingApprovals || []).filter((r) => r.agentId === agentId).length;
}

/** How many of the agent's questions wait for an answer. */
function askingOf(ctx, agentId) {
  return (ctx.state.openQuestions || []).filter((q) => q.agentId === agentId).length;
}

function agentCard(ctx, a, isCoordinator, waiting, asking) {
  const href = ctx.href;
  return h(
    "article",
    { class: ["card", "agent", `agent-${a.status}`], "data-agent": a.id },
    h(
      "header",
      { class: "agent-head" },
      h(
        "div",
        {},
        h("h3", { text: a.displayName || a.id }),
        h("div", { class: "muted small" }, h("code", { text: a.id }), a.role ? ` · ${a.role}` : "", isCoordinator ? " · coordinator" : ""),
      ),
      pill(a.status),
    ),
    waiting
      ? h("a", { class: "badge warn approval-badge", href: href("approvals"), "data-approvals-agent": a.id, text: `${waiting} awaiting approval` })
      : null,
    asking
      ? h("a", { class: "badge warn approval-badge", href: href("approvals"), "data-questions-agent": a.id, text: `${asking} question(s) for you` })
      : null,
    agentFacts(ctx, a),
    a.status === "failed" && a.lastError
      ? h("p", { class: "agent-error", "data-last-error": "" }, h("strong", { text: "Failed: " }), a.lastError)
      : null,
    h("p", { class: "live-text", "data-live-agent": a.id, "aria-live": "polite", hidden: true }),
    Array.isArray(a.tools)
      ? h(
          "details",
          { class: "tools-list" },
          h("summary", { text: `${a.tools.length} tools` }),
          h("ul", {}, a.tools.map((t) => h("li", {}, h("a", { href: href("tools", t) }, h("code", { text: t }))))),
        )
      : null,
    h(
      "div",
      { class: "agent-links" },
      h("a", { href: href("history", a.id), text: "History" }),
      " · ",
      h("a", { href: href("activations", `agent:${a.id}`), text: "Activations" }),
    ),
  );
}

const MODES = ["default", "auto", "full-access"];

/** The agent's permission mode as a switch; "config" takes it back to suzumio.yaml's. */
function modeSwitch(ctx, a) {
  const live = Boolean(a.permissionModeSet);
  const select = h(
    "select",
    { name: "permission-mode", "data-permission-mode": a.id, "aria-label": `Permission mode of ${a.id}` },
    MODES.map((m) => h("option", { value: m, text: m, selected: m === a.permissionMode })),
    live ? h("option", { value: "config", text: `back to suzumio.yaml (${a.configPermissionMode})` }) : null,
  );
  select.value = a.permissionMode;
  const status = h("span", { class: "muted small", role: "status", "data-permission-mode-status": a.id });
  if (live) status.append(` set by ${a.permissionModeSet.setBy} `, timeAgo(a.permissionModeSet.setAt));
  select.addEventListener("change", async () => {
    select.disabled = true;
    try {
      const change = await ctx.api.setPermissionMode(a.id, select.value === "config" ? null : select.value);
      replace(status, ` ${change.mode} from the next tool call`);
      await ctx.refreshProject();
    } catch (err) {
      replace(status, errorBox(err, "Cannot switch the mode"));
      select.value = a.permissionMode;
    } finally {
      select.disabled = false;
    }
  });
  return [select, status];
}

function agentFacts(ctx, a) {
  const href = ctx.href;
  const fact = (term, ...value) => [h("dt", { text: term }), h("dd", {}, ...value)];
  return h(
    "dl",
    { class: "facts compact" },
    a.model ? fact("Model", a.model) : null,
    a.permissionMode ? fact("Permissions", ...modeSwitch(ctx, a)) : null,
    a.deferredTools?.length ? fact("Deferred tools", `${a.deferredTools.length} (through tool_search)`) : null,
    a.activeActivationId
      ? fact("Active", h("a", { href: href("activations", a.activeActivationId), text: clip(a.activeActivationId, 24) }))
      : null,
    fact("Updated", timeAgo(a.updatedAt)),
    Array.isArray(a.mountedToolpacks) && a.mountedToolpacks.length ? fact("Packs", a.mountedToolpacks.join(", ")) : null,
  );
}
