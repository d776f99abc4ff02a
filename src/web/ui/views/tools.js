// The Tools panel: an index of standalone control pages and one page per tool (grouped by
// `presentation.group`), a status summary per tool, and the WebUI controls of the packs.
//
// Controls attach to tool pages through the manifests' `relatedTools` (falling back to an
// entry whose id is the tool's name), never through a list kept here. An entry that attaches
// to no tool gets a standalone page `control:<pack>/<entry>`.

import { schemaForm } from "../forms.js";
import { debounce, errorBox, h, metricTiles, pill, replace, timeAgo } from "../dom.js";

export const title = "Tools";

const CONTROL_PREFIX = "control:";

/** Which tool pages each entry belongs on, and which entries stand alone. */
export function attachControls(toolNames, entries) {
  const names = new Set(toolNames);
  const byTool = new Map(toolNames.map((t) => [t, []]));
  const standalone = [];
  for (const entry of entries) {
    const related = (Array.isArray(entry.relatedTools) ? entry.relatedTools : []).filter((t) => names.has(t));
    const targets = related.length ? related : names.has(entry.id) ? [entry.id] : [];
    if (targets.length === 0) standalone.push(entry);
    for (const t of targets) byTool.get(t).push(entry);
  }
  return { byTool, standalone };
}

const entryKey = (e) => `${e.toolpackId}/${e.id}`;

function labelOf(presentation, fallback) {
  const p = presentation || {};
  const text = p.label || fallback;
  return p.icon ? `${p.icon} ${text}` : text;
}

/** Tools grouped by `presentation.group` (else their pack), in order of first appearance. */
function groupTools(tools) {
  const groups = new Map();
  for (const t of tools) {
    const g = t.presentation?.group || t.toolpackId || "other";
    if (!groups.has(g)) groups.set(g, []);
    groups.get(g).push(t);
  }
  return groups;
}

export function render(root, ctx, key) {
  const index = h("nav", { class: "tool-index", "aria-label": "Tools and controls" }, h("p", { class: "muted", text: "Loading…" }));
  const pageEl = h("div", { class: "tool-page" });
  root.append(h("div", { class: "tools-layout" }, index, pageEl));

  let toolStatus = [];
  let entries = [];
  let attached = { byTool: new Map(), standalone: [] };
  let pageRefreshers = []; // redraw the status summary after a refresh of the counts
  let panelRuns = []; // the panels on the page, re-run after an action succeeds

  async function load() {
    const [status, ui] = await Promise.allSettled([ctx.api.toolStatus(), ctx.api.toolUi()]);
    const errors = [];
    if (status.status === "fulfilled") toolStatus = Array.isArray(status.value) ? status.value : status.value?.items ?? [];
    else errors.push(["Tool status", status.reason]);
    if (ui.status === "fulfilled") entries = Array.isArray(ui.value) ? ui.value : ui.value?.items ?? [];
    else errors.push(["WebUI controls", ui.reason]);
    if (status.status === "rejected") {
      // Without tool status, still offer a page per tool the controls name.
      const named = new Set(entries.flatMap((e) => (Array.isArray(e.relatedTools) ? e.relatedTools : [])));
      toolStatus = [...named].sort().map((tool) => ({ tool, presentation: entries.find((e) => e.id === tool)?.presentation }));
    }
    attached = attachControls(
      toolStatus.map((t) => t.tool),
      entries,
    );
    return errors;
  }

  function renderIndex() {
    const current = key || defaultKey();
    const link = (attrs, label, sub, count) =>
      h(
        "a",
        { ...attrs, "aria-current": attrs.href === ctx.href("tools", current) ? "page" : null },
        h("span", { class: "ti-label" }, label, sub ? h("code", { class: "ti-name", text: sub }) : null),
        count !== undefined ? h("span", { class: ["count", count ? "nonzero" : null], title: `${count} calls`, text: String(count) }) : null,
      );
    const sections = [];
    if (attached.standalone.length) {
      sections.push(
        h(
          "section",
          { class: "ti-group" },
          h("h3", { text: "Controls" }),
          h(
            "ul",
            {},
            attached.standalone.map((e) =>
              h(
                "li",
                {},
                link(
                  { href: ctx.href("tools", CONTROL_PREFIX + entryKey(e)), "data-control": entryKey(e), title: e.description || e.title },
                  labelOf(e.presentation, e.title || e.id),
                  e.toolpackId === "core" ? null : e.toolpackId,
                ),
              ),
            ),
          ),
        ),
      );
    }
    for (const [group, tools] of groupTools(toolStatus)) {
      sections.push(
        h(
          "section",
          { class: "ti-group" },
          h("h3", { text: group }),
          h(
            "ul",
            {},
            tools.map((t) => {
              const label = labelOf(t.presentation, t.tool);
              return h(
                "li",
                {},
                link(
                  { href: ctx.href("tools", t.tool), "data-tool": t.tool, title: t.description || t.tool },
                  label,
                  t.presentation?.label ? t.tool : null,
                  t.callCount,
                ),
              );
            }),
          ),
        ),
      );
    }
    if (!sections.length) sections.push(h("p", { class: "muted", text: "No tools are registered." }));
    replace(index, sections);
    // The index scrolls on its own; keep the current page's link in sight.
    const active = index.querySelector('a[aria-current="page"]');
    if (active && (active.offsetTop < index.scrollTop || active.offsetTop + active.offsetHeight > index.scrollTop + index.clientHeight)) {
      index.scrollTop = active.offsetTop - index.clientHeight / 3;
    }
  }

  function defaultKey() {
    if (attached.standalone.length) return CONTROL_PREFIX + entryKey(attached.standalone[0]);
    return toolStatus[0]?.tool ?? "";
  }

  function renderPage() {
    pageRefreshers = [];
    panelRuns = [];
    const current = key || defaultKey();
    if (!current) {
      replace(pageEl, h("p", { class: "muted", text: "Nothing to show." }));
      return;
    }
    if (current.startsWith(CONTROL_PREFIX)) {
      const wanted = current.slice(CONTROL_PREFIX.length);
      const entry = entries.find((e) => entryKey(e) === wanted);
      if (!entry) {
        replace(pageEl, h("h2", { "data-tool-title": "", text: wanted }), errorBox(new Error(`no WebUI entry ${wanted}`)));
        return;
      }
      replace(
        pageEl,
        h(
          "header",
          { class: "page-head" },
          h("h2", { "data-tool-title": "", text: labelOf(entry.presentation, entry.title || entry.id) }),
          h("div", { class: "sub" }, h("code", { text: entryKey(entry) }), entry.toolpackKind ? [" ", h("span", { class: "badge", text: entry.toolpackKind })] : null),
        ),
        h("div", { class: "controls" }, controlCard(entry)),
      );
      return;
    }
    const tool = toolStatus.find((t) => t.tool === current);
    if (!tool) {
      replace(pageEl, h("h2", { "data-tool-title": "", text: current }), errorBox(new Error(`no tool named ${current} in this project`)));
      return;
    }
    const controls = attached.byTool.get(tool.tool) || [];
    const summary = h("div", { class: "tool-summary" });
    const fillSummary = (t) => replace(summary, statusSummary(t));
    fillSummary(tool);
    pageRefreshers.push(() => {
      const fresh = toolStatus.find((t) => t.tool === current);
      if (fresh) fillSummary(fresh);
    });
    replace(
      pageEl,
      h(
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
        ),
        tool.description ? h("p", { class: "desc", text: tool.description }) : null,
      ),
      summary,
      h("h3", { class: "section-title", text: "Controls" }),
      controls.length
        ? h("div", { class: "controls" }, controls.map((e) => controlCard(e)))
        : h("p", { class: "muted", text: "This tool has no WebUI controls." }),
    );
  }

  function statusSummary(t) {
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

  /** One control card: a panel runs at once and on Refresh; an action runs on submit. */
  function controlCard(entry) {
    const id = entryKey(entry);
    const isPanel = entry.kind === "panel";
    const label = entry.submitLabel || (isPanel ? "Refresh" : "Run");
    const button = h("button", { type: "submit", class: isPanel ? "secondary" : "primary", "data-refresh": isPanel ? "" : null, text: label });
    const form = schemaForm(entry.inputSchema, { agents: ctx.state.agents, channels: ctx.channels(), idPrefix: id, submit: button });
    const result = h("div", { class: "result", "data-result": "", "aria-live": "polite" });
    let running = false;

    async function run() {
      if (running) return;
      form.clearErrors();
      const { input, errors } = form.values();
      if (errors) {
        const rest = form.showErrors(errors);
        replace(result, errorBox({ message: "some fields are not valid", details: rest }));
        return;
      }
      running = true;
      button.disabled = true;
      result.setAttribute("aria-busy", "true");
      result.classList.add("busy");
      if (!result.firstChild) result.append(h("p", { class: "muted", text: "Running…" }));
      try {
        const output = await ctx.api.invoke(entry.toolpackId, entry.id, input);
        replace(result, showOutput(output));
        if (!isPanel) {
          // An action changes state the panels on this page show.
          for (const refresh of panelRuns) if (refresh !== run) refresh();
          reloadStatus();
        }
      } catch (err) {
        const unmatched = err.status === 400 ? form.showErrors(err.details) : err.details;
        replace(result, errorBox({ ...err, message: err.message, details: unmatched, status: err.status, route: err.route }));
      } finally {
        running = false;
        button.disabled = false;
        result.removeAttribute("aria-busy");
        result.classList.remove("busy");
      }
    }

    form.form.addEventListener("submit", (e) => {
      e.preventDefault();
      run();
    });
    if (isPanel) {
      panelRuns.push(run);
      queueMicrotask(run);
    }
    return h(
      "section",
      { class: ["card", "control", `kind-${entry.kind}`], "data-entry": id, "aria-label": entry.title || entry.id },
      h(
        "header",
        { class: "card-head" },
        h("h3", { text: labelOf(entry.presentation, entry.title || entry.id) }),
        h("span", { class: ["badge", isPanel ? "info" : "accent"], text: entry.kind }),
        h("code", { class: "muted small", text: id }),
      ),
      entry.description ? h("p", { class: "desc", text: entry.description }) : null,
      form.form,
      result,
    );
  }

  function showOutput(output) {
    const o = output && typeof output === "object" ? output : { output };
    const metrics = Array.isArray(o.metadata?.metrics) ? o.metadata.metrics : [];
    const text = typeof o.output === "string" ? o.output : JSON.stringify(o.output, null, 2);
    return [
      o.title ? h("h4", { class: "result-title", text: o.title }) : null,
      metrics.length ? metricTiles(metrics) : null,
      h("pre", { class: "output", text: text ?? "" }),
    ];
  }

  const reloadStatus = debounce(async () => {
    try {
      const fresh = await ctx.api.toolStatus();
      toolStatus = Array.isArray(fresh) ? fresh : fresh?.items ?? [];
      if (cache) cache.toolStatus = toolStatus;
      // Counts only: the page (and its forms) stay as they are.
      for (const a of index.querySelectorAll("a[data-tool]")) {
        const t = toolStatus.find((x) => x.tool === a.dataset.tool);
        const count = a.querySelector(".count");
        if (t && count) {
          count.textContent = String(t.callCount ?? 0);
          count.classList.toggle("nonzero", Boolean(t.callCount));
        }
      }
      for (const fn of pageRefreshers) fn();
    } catch {
      /* the next event tries again */
    }
  }, 500);

  ctx.onEvent((event) => {
    if (/^tool_call\./.test(event.type)) reloadStatus();
  });

  if (cache) {
    // Navigating between pages: draw at once from what was loaded, then refresh the counts.
    ({ toolStatus, entries } = cache);
    attached = attachControls(
      toolStatus.map((t) => t.tool),
      entries,
    );
    renderIndex();
    renderPage();
    reloadStatus();
  } else {
    load().then((errors) => {
      if (!errors.length) cache = { toolStatus, entries };
      renderIndex();
      renderPage();
      if (errors.length) pageEl.prepend(...errors.map(([what, err]) => errorBox(err, what)));
    });
  }
}

/** The catalogue of the last visit; the packs only change when the controller restarts. */
let cache = null;
