// Activations: a list filtered by agent (and status), and one activation's detail: its
// timeline (`activations/timeline.js`), live while it runs. Routes: `#/activations`,
// `#/activations/agent:<id>` (filtered), `#/activations/<activation id>` (detail).

import { clip, debounce, duration, errorBox, h, pill, replace, selectField, timeAgo } from "../dom.js";
import { activationTimeline } from "./activations/timeline.js";

export const title = "Activations";

const STATUSES = ["running", "waiting_approval", "waiting_user", "completed", "failed", "cancelled"];

export function render(root, ctx, key) {
  if (key && !key.startsWith("agent:")) return renderDetail(root, ctx, key);
  return renderList(root, ctx, key ? key.slice("agent:".length) : "");
}

function renderList(root, ctx, agent) {
  let status = "";
  const agentSelect = selectField({
    name: "agent",
    label: "Agent",
    value: agent,
    options: [{ value: "", label: "All agents" }, ...ctx.state.agents.map((a) => ({ value: a.id, label: a.id }))],
    onchange: (e) => ctx.navigate("activations", e.target.value ? `agent:${e.target.value}` : ""),
  });
  const statusSelect = selectField({
    name: "status",
    label: "Status",
    value: "",
    options: [{ value: "", label: "Any status" }, ...STATUSES],
    onchange: (e) => {
      status = e.target.value;
      draw();
    },
  });
  const message = h("div", { class: "status-line" });
  const body = h("tbody");
  const more = h("div", { class: "more" });
  root.append(
    h("header", { class: "page-head" }, h("h2", { text: "Activations" }), h("p", { class: "sub muted", text: "Newest first. Open one to see its timeline." })),
    h("div", { class: "filters" }, agentSelect.el, statusSelect.el),
    message,
    h(
      "div",
      { class: "table-wrap" },
      h(
        "table",
        { class: "grid" },
        h("thead", {}, h("tr", {}, ["Activation", "Agent", "Status", "Started", "Duration", "Signals", "Error"].map((t) => h("th", { scope: "col", text: t })))),
        body,
      ),
    ),
    more,
  );

  const rows = new Map();
  let next = null;

  function draw() {
    const list = [...rows.values()]
      .filter((a) => !status || a.status === status)
      .sort((a, b) => String(b.startedAt ?? "").localeCompare(String(a.startedAt ?? "")) || String(b.id).localeCompare(String(a.id)));
    replace(
      body,
      list.map((a) =>
        h(
          "tr",
          { "data-activation": a.id },
          h("td", {}, h("a", { href: ctx.href("activations", a.id) }, h("code", { text: clip(a.id, 30) }))),
          h("td", {}, h("a", { href: ctx.href("history", a.agentId), text: a.agentId ?? "" })),
          h("td", {}, pill(a.status)),
          h("td", {}, timeAgo(a.startedAt)),
          h("td", { text: duration(a.startedAt, a.endedAt) }),
          h("td", { text: Array.isArray(a.signalIds) ? String(a.signalIds.length) : "" }),
          h("td", { class: "error-cell", title: a.error || null, text: a.error ? clip(a.error, 90) : "" }),
        ),
      ),
    );
    if (!list.length) body.append(h("tr", {}, h("td", { colspan: 7, class: "muted", text: rows.size ? "No activation with this status." : "No activations yet." })));
    replace(more, next ? h("button", { type: "button", class: "secondary", onclick: () => load({ before: next }), text: "Load older" }) : null);
  }

  async function load({ before, refresh = false } = {}) {
    try {
      const { items, next: cursor } = await ctx.api.activations({ agent: agent || undefined, limit: 50, before });
      for (const a of items) rows.set(a.id, a);
      if (!refresh) next = items.length >= 50 ? cursor ?? null : null;
      replace(message);
      draw();
    } catch (err) {
      replace(message, errorBox(err, "Cannot load activations"));
    }
  }

  const refresh = debounce(() => load({ refresh: true }), 400);
  ctx.onEvent((e) => {
    if (/^activation\./.test(e.type)) refresh();
  });
  load();
}

function renderDetail(root, ctx, id) {
  const head = h("div", {}, h("header", { class: "page-head" }, h("h2", {}, "Activation ", h("code", { text: id }))));
  const timeline = activationTimeline(ctx, id, { onHead: (a, t) => replace(head, headView(ctx, a, t.usage, t.toolCalls)) });
  root.append(
    h("p", { class: "crumbs" }, h("a", { href: ctx.href("activations"), text: "← All activations" })),
    head,
    h("h3", { class: "section-title", text: "Timeline" }),
    timeline.el,
  );
}

/** The activation's status, agent, times, totals and error above its timeline. */
function headView(ctx, a, usage, calls) {
  const u = usage ?? {};
  const c = calls ?? {};
  const callText = [`${c.total ?? 0}`, c.failed ? `${c.failed} failed` : null, c.rejected ? `${c.rejected} rejected` : null].filter(Boolean).join(" · ");
  return [
    h(
      "header",
      { class: "page-head" },
      h("h2", {}, "Activation ", h("code", { text: a.id })),
      h("div", { class: "sub" }, pill(a.status), " ", h("a", { href: ctx.href("history", a.agentId), text: a.agentId ?? "" })),
    ),
    h(
      "dl",
      { class: "facts" },
      h("dt", { text: "Started" }),
      h("dd", {}, timeAgo(a.startedAt)),
      h("dt", { text: "Ended" }),
      h("dd", {}, a.endedAt ? [timeAgo(a.endedAt), ` (${duration(a.startedAt, a.endedAt)})`] : h("span", { class: "muted", text: "still running" })),
      h("dt", { text: "Model calls" }),
      h("dd", { "data-total-usage": "", text: `${u.modelCalls ?? 0} · ${u.inputTokens ?? 0} in / ${u.outputTokens ?? 0} out tokens${u.cost ? ` · $${Number(u.cost).toFixed(4)}` : ""}` }),
      h("dt", { text: "Tool calls" }),
      h("dd", { "data-tool-calls": "", text: callText }),
      a.error ? [h("dt", { text: "Error" }), h("dd", {}, h("pre", { class: "error-pre", text: a.error }))] : null,
    ),
  ];
}
