// Agent history: one agent's model context as recorded (prompts, model output, tool results,
// signals), 80 rows a page, oldest first, with "Load older" above. Route `#/history/<agent>`.

import { clip, debounce, errorBox, h, pretty, replace, selectField, timeAgo } from "../dom.js";
import { toolImages } from "./tool-content.js";
import { commandsPanel } from "./commands.js";

export const title = "Agent history";

const PAGE = 80;

/**
 * The readable part of a history row, by kind; anything unknown is shown as JSON. Tools are
 * named by their real names (`tools`, `tool` of the row), not the model-facing ones.
 */
function contentView(kind, content, row = {}) {
  const c = content && typeof content === "object" ? content : { text: content };
  const parts = [];
  if (kind === "tool_result" || (c.name && "content" in c)) {
    parts.push(
      h("div", { class: "tool-line" }, h("code", { "data-tool-name": "", text: row.tool ?? c.name ?? "tool" }), c.isError ? h("span", { class: "pill st-failed", text: "error" }) : null),
      h("pre", { class: ["viewer", "small", c.isError ? "error-pre" : null], text: typeof c.content === "string" ? c.content : pretty(c.content) }),
      toolImages(c.images, c.name),
    );
  } else if (typeof c.text === "string" && kind === "activation_prompt") {
    // Prompts are long and mostly the same each time: folded, with their first heading.
    const first = c.text.split("\n").find((l) => l.trim()) ?? "";
    parts.push(
      h(
        "details",
        { class: "prompt-fold" },
        h("summary", {}, clip(first.replace(/^#+\s*/, ""), 80), h("span", { class: "muted small", text: ` · ${c.text.length} chars` })),
        h("pre", { class: "viewer small", text: c.text }),
      ),
    );
  } else if (typeof c.text === "string") {
    if (c.text.trim()) parts.push(h("pre", { class: "viewer small", text: c.text }));
    else if (!Array.isArray(c.toolCalls) || !c.toolCalls.length) parts.push(h("p", { class: "muted", text: "(no text)" }));
  }
  if (Array.isArray(c.toolCalls) && c.toolCalls.length) {
    parts.push(
      h(
        "ul",
        { class: "tool-calls" },
        c.toolCalls.map((t, i) =>
          h("li", {}, h("code", { "data-tool-name": "", text: row.tools?.[i] ?? t.name ?? "?" }), " ", h("span", { class: "muted small", text: clip(JSON.stringify(t.arguments ?? {}), 240) })),
        ),
      ),
    );
  }
  if (!parts.length) parts.push(h("pre", { class: "viewer small", text: pretty(content) }));
  return parts;
}

export function render(root, ctx, key) {
  const agents = ctx.state.agents || [];
  const agent = key || agents[0]?.id || "";
  const picker = selectField({
    name: "agent",
    label: "Agent",
    value: agent,
    options: agents.length ? agents.map((a) => ({ value: a.id, label: a.displayName && a.displayName !== a.id ? `${a.displayName} (${a.id})` : a.id })) : [{ value: agent, label: agent || "(no agents)" }],
    onchange: (e) => ctx.navigate("history", e.target.value),
  });
  const older = h("div", { class: "more top" });
  const status = h("div", { class: "status-line" });
  const list = h("ol", { class: "history", "aria-label": `History of ${agent}` });
  root.append(
    h("header", { class: "page-head" }, h("h2", { text: "Agent history" }), h("p", { class: "sub muted", text: "Oldest first; the newest rows are at the bottom." })),
    h("div", { class: "filters" }, picker.el),
    status,
    older,
    list,
  );
  if (!agent) {
    replace(status, h("p", { class: "muted", text: "This project has no agents." }));
    return;
  }
  root.insertBefore(commandsPanel(ctx, agent), status);

  const rows = new Map();
  const rowEls = new Map();
  let next = null;

  function rowEl(r) {
    return h(
      "li",
      { class: ["card", "hist", `kind-${String(r.kind).replace(/[^a-z_]/gi, "")}`], "data-history": r.id },
      h(
        "header",
        { class: "hist-head" },
        h("span", { class: "badge", text: r.kind }),
        r.activationId ? h("a", { class: "small", href: ctx.href("activations", r.activationId) }, h("code", { text: clip(r.activationId, 30) })) : null,
        h("span", { class: "muted small" }, timeAgo(r.createdAt)),
      ),
      contentView(r.kind, r.content, r),
      h("details", { class: "json" }, h("summary", { text: "Raw" }), h("pre", { text: pretty(r) })),
    );
  }

  function draw({ keepBottom = false } = {}) {
    const atBottom = keepBottom && window.innerHeight + window.scrollY >= document.body.scrollHeight - 40;
    const sorted = [...rows.values()].sort((a, b) => String(a.createdAt ?? "").localeCompare(String(b.createdAt ?? "")) || String(a.id).localeCompare(String(b.id)));
    // Rows are kept, so a live refresh leaves opened details open.
    replace(
      list,
      sorted.map((r) => {
        if (!rowEls.has(r.id)) rowEls.set(r.id, rowEl(r));
        return rowEls.get(r.id);
      }),
    );
    if (!sorted.length) list.append(h("li", { class: "muted", text: "No history yet." }));
    replace(
      older,
      next ? h("button", { type: "button", class: "secondary", onclick: () => load({ before: next }), text: "Load older" }) : null,
    );
    if (atBottom) window.scrollTo(0, document.body.scrollHeight);
  }

  async function load({ before, refresh = false } = {}) {
    try {
      const { items, next: cursor } = await ctx.api.history(agent, { limit: PAGE, before });
      for (const r of items) rows.set(r.id, r);
      if (!refresh) next = items.length >= PAGE ? cursor ?? items[0]?.id ?? null : null;
      replace(status);
      draw({ keepBottom: refresh });
    } catch (err) {
      replace(status, errorBox(err, `Cannot load the history of ${agent}`));
    }
  }

  const refresh = debounce(() => load({ refresh: true }), 400);
  ctx.onEvent((e) => {
    if (e.type === "history.appended" && e.data?.agentId === agent) refresh();
  });
  load();
}
