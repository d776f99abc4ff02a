// A page of the Tools panel: a tool (its header, status summary and attached controls), a
// standalone control `control:<pack>/<entry>`, or an agent's tool switches `switches:<agent>`.

import { errorBox, h, metricTiles, pill, replace, timeAgo } from "../../dom.js";
import { CONTROL_PREFIX, entryKey, labelOf } from "./catalog.js";
import { controlCard } from "./control-card.js";
import { SWITCHES_PREFIX, switchesPage } from "./switches.js";

/**
 * The page area. `render(cat, current)` draws the page `current`; `statusChanged(toolStatus)`
 * redraws only its status summary, so the forms on it stay as they are. `onAction` runs after
 * an action on the page succeeded.
 */
export function toolPage(ctx, { onAction }) {
  const el = h("div", { class: "tool-page" });
  let refreshStatus = null;

  function render(cat, current) {
    refreshStatus = null;
    const panels = [];
    const page = {
      panels,
      // The pack a tool belongs to, for panels that refresh on their pack's calls.
      packOf: (tool) => cat.toolStatus.find((t) => t.tool === tool)?.toolpackId ?? null,
      actionDone: (from) => {
        for (const run of panels) if (run !== from) run();
        onAction();
      },
    };
    if (!current) {
      replace(el, h("p", { class: "muted", text: "Nothing to show." }));
    } else if (current.startsWith(SWITCHES_PREFIX)) {
      replace(el, switchesPage(ctx, current.slice(SWITCHES_PREFIX.length)));
    } else if (current.startsWith(CONTROL_PREFIX)) {
      replace(el, controlPage(ctx, cat, current.slice(CONTROL_PREFIX.length), page));
    } else {
      const tool = cat.toolStatus.find((t) => t.tool === current);
      if (!tool) {
        replace(el, h("h2", { "data-tool-title": "", text: current }), errorBox(new Error(`no tool named ${current} in this project`)));
        return;
      }
      const summary = h("div", { class: "tool-summary" }, statusSummary(ctx, tool));
      refreshStatus = (toolStatus) => {
        const fresh = toolStatus.find((t) => t.tool === current);
        if (fresh) replace(summary, statusSummary(ctx, fresh));
      };
      const definition = cat.definitions?.get(tool.tool);
      replace(
        el,
        toolHeader(tool, definition),
        summary,
        definition ? agentAccess(definition) : null,
        attachedControls(ctx, cat.attached.byTool.get(tool.tool) || [], page),
      );
    }
  }

  return { el, render, statusChanged: (toolStatus) => refreshStatus?.(toolStatus) };
}

function controlPage(ctx, cat, wanted, page) {
  const entry = cat.entries.find((e) => entryKey(e) === wanted);
  if (!entry) return [h("h2", { "data-tool-title": "", text: wanted }), errorBox(new Error(`no WebUI entry ${wanted}`))];
  return [
    h(
      "header",
      { class: "page-head" },
      h("h2", { "data-tool-title": "", text: labelOf(entry.presentation, entry.title || entry.id) }),
      h("div", { class: "sub" }, h("code", { text: entryKey(entry) }), entry.toolpackKind ? [" ", h("span", { class: "badge", text: entry.toolpackKind })] : null),
    ),
    h("div", { class: "controls" }, controlCard(ctx, entry, page)),
  ];
}

/** Which agents may call the tool, each one's default decision and whether it is deferred. */
function agentAccess(def) {
  if (!def.allowedAgents?.length) {
    return h("section", { class: "tool-access", "data-tool-access": "" }, h("h3", { text: "Agents" }), h("p", { class: "muted", text: "No agent may call this tool." }));
  }
  const rows = def.allowedAgents.map((agent) => {
    const d = def.decisions?.[agent];
    const deferred = def.deferredFor?.includes(agent);
    return h(
      "tr",
      { "data-agent": agent },
      h("th", { scope: "row", text: agent }),
      h("td", {}, d ? h("span", { class: `badge decision-${d.decision}`, text: d.decision }) : "—"),
      h("td", { class: "muted small", text: d?.source ?? "" }),
      h("td", { text: deferred ? "through tool_search" : "always" }),
    );
  });
  return h(
    "section",
    { class: "tool-access", "data-tool-access": "" },
    h("h3", { text: "Agents" }),
    h(
      "table",
      {},
      h("caption", { class: "muted small", text: "Default permission decision for a call of this tool, per agent" }),
      h("thead", {}, h("tr", {}, h("th", { scope: "col", text: "Agent" }), h("th", { scope: "col", text: "Decision" }), h("th", { scope: "col", text: "Decided by" }), h("th", { scope: "col", text: "Loaded" }))),
      h("tbody", {}, rows),
    ),
  );
}

function toolHeader(tool, def) {
  return h(
    "header",
    { class: "page-head" },
    h("h2", { "data-tool-title": "", text: labelOf(tool.presentation, tool.tool) }),
    h(
      "div",
      { class: "sub" },
      h("code", { text: tool.tool }),
      tool.toolpackId ? [" in ", h("code", { text: tool.toolpackId })] : null,
      tool.toolpackKind ? [" ", h("span", { class: "badge", text: tool.toolpackKind })] : null,
      tool.requiresApproval ? [" ", h("span", { class: "badge warn", text: "requires approval" })] : null,
      def?.annotations?.readOnlyHint ? [" ", h("span", { class: "badge", text: "read-only" })] : null,
      def?.annotations?.destructiveHint ? [" ", h("span", { class: "badge warn", text: "destructive" })] : null,
      serverClaims(def),
      def ? [" ", h("span", { class: "badge", text: `runs in the ${def.runsIn}` })] : null,
    ),
    tool.description ? h("p", { class: "desc", text: tool.description }) : null,
  );
}

/** What an untrusted MCP server claims about the tool, marked advisory (it decides nothing). */
function serverClaims(def) {
  const claims = Object.entries(def?.serverAnnotations ?? {});
  if (!claims.length) return null;
  const words = {
    readOnlyHint: ["read-only", "not read-only"],
    destructiveHint: ["destructive", "not destructive"],
    idempotentHint: ["idempotent", "not idempotent"],
    openWorldHint: ["open world", "closed world"],
  };
  const said = claims.map(([hint, value]) => (words[hint] ? words[hint][value ? 0 : 1] : `${hint}: ${value}`)).join(", ");
  return [" ", h("span", { class: "badge", "data-server-claims": "", title: def.serverAnnotationsNote ?? "", text: `server says ${said} (advisory)` })];
}

function attachedControls(ctx, entries, page) {
  return [
    h("h3", { class: "section-title", text: "Controls" }),
    entries.length
      ? h("div", { class: "controls" }, entries.map((e) => controlCard(ctx, e, page)))
      : h("p", { class: "muted", text: "This tool has no WebUI controls." }),
  ];
}

/** A tool's counts, the agents it is enabled for, its last call and its last error. */
function statusSummary(ctx, t) {
  const metrics = [
    { label: "Total calls", value: t.callCount },
    { label: "Running", value: t.runningCount },
    { label: "Completed", value: t.completedCount },
    { label: "Failed", value: t.failedCount, tone: t.failedCount ? "bad" : null },
  ];
  const agents = Array.isArray(t.enabledForAgents) ? t.enabledForAgents : [];
  return [
    metricTiles(metrics, { "data-status-summary": "" }),
    h(
      "dl",
      { class: "facts" },
      h("dt", { text: "Enabled agents" }),
      h(
        "dd",
        {},
        agents.length
          ? agents.map((a) => h("a", { class: "chip", href: ctx.href("history", a), text: a }))
          : h("span", { class: "muted", text: Array.isArray(t.enabledForAgents) ? "none" : "—" }),
      ),
      h("dt", { text: "Last activity" }),
      h(
        "dd",
        {},
        t.lastAt
          ? [timeAgo(t.lastAt), t.lastAgentId ? [" by ", h("code", { text: t.lastAgentId })] : null, t.lastStatus ? [" ", pill(t.lastStatus)] : null]
          : h("span", { class: "muted", text: "never called" }),
      ),
      t.submittedReportPath ? [h("dt", { text: "Final report path" }), h("dd", {}, h("code", { text: t.submittedReportPath }))] : null,
      t.lastError ? [h("dt", { text: "Last error" }), h("dd", {}, h("pre", { class: "error-pre", text: t.lastError }))] : null,
    ),
  ];
}
