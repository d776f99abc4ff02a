// Activations: a list filtered by agent (and status), and one activation's detail: its
// prompt in a viewer, the text its model is writing right now, and the tool calls it made. Routes: `#/activations`,
// `#/activations/agent:<id>` (filtered), `#/activations/<activation id>` (detail).

import { clip, debounce, duration, errorBox, h, pill, replace, selectField, timeAgo } from "../dom.js";

export const title = "Activations";

const STATUSES = ["running", "waiting_approval", "completed", "failed", "cancelled"];

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
    h("header", { class: "page-head" }, h("h2", { text: "Activations" }), h("p", { class: "sub muted", text: "Newest first. Open one to see its prompt and tool calls." })),
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
  const holder = h("div", {}, h("p", { class: "muted", text: "Loading…" }));
  // Kept across reloads of the detail, so streaming text does not flicker.
  const liveText = h("pre", { class: "viewer live-text", "aria-live": "polite", "aria-label": "Model output so far" });
  const live = h("section", { class: "live", hidden: true }, h("h3", { class: "section-title", text: "Writing now" }), liveText);
  const showLive = () => {
    const text = ctx.state.live.get(id)?.text ?? "";
    live.hidden = !text;
    liveText.textContent = text;
  };
  root.append(h("p", { class: "crumbs" }, h("a", { href: ctx.href("activations"), text: "← All activations" })), live, holder);
  showLive();
  ctx.onLive((l) => {
    if (l.activationId === id) showLive();
  });

  async function load() {
    let a;
    try {
      a = await ctx.api.activation(id);
    } catch (err) {
      replace(holder, h("h2", { text: id }), errorBox(err, "Cannot load the activation"));
      return;
    }
    const calls = Array.isArray(a.toolCalls) ? a.toolCalls : [];
    replace(
      holder,
      h(
        "header",
        { class: "page-head" },
        h("h2", {}, "Activation ", h("code", { text: a.id })),
        h("div", { class: "sub" }, pill(a.status), " ", h("a", { href: ctx.href("history", a.agentId), text: a.agentId ?? "" })),
      ),
      h(
        "dl",
        { class: "facts" },
        h("dt", { text: "Agent" }),
        h("dd", {}, h("a", { href: ctx.href("history", a.agentId), text: a.agentId ?? "" })),
        h("dt", { text: "Started" }),
        h("dd", {}, timeAgo(a.startedAt)),
        h("dt", { text: "Ended" }),
        h("dd", {}, a.endedAt ? [timeAgo(a.endedAt), ` (${duration(a.startedAt, a.endedAt)})`] : h("span", { class: "muted", text: "still running" })),
        h("dt", { text: "Signals" }),
        h("dd", {}, Array.isArray(a.signalIds) && a.signalIds.length ? a.signalIds.map((s) => h("code", { class: "chip", text: s })) : h("span", { class: "muted", text: "none" })),
        a.error ? [h("dt", { text: "Error" }), h("dd", {}, h("pre", { class: "error-pre", text: a.error }))] : null,
      ),
      h("h3", { class: "section-title", text: "Prompt" }),
      a.prompt ? h("pre", { class: "viewer prompt", tabindex: "0", "aria-label": "Activation prompt", text: a.prompt }) : h("p", { class: "muted", text: "No prompt recorded." }),
      h("h3", { class: "section-title", text: `Tool calls (${calls.length})` }),
      calls.length
        ? h(
            "div",
            { class: "table-wrap" },
            h(
              "table",
              { class: "grid" },
              h("thead", {}, h("tr", {}, ["Tool", "Status", "Target", "Started", "Duration", "Error"].map((t) => h("th", { scope: "col", text: t })))),
              h(
                "tbody",
                {},
                calls.map((c) =>
                  h(
                    "tr",
                    { "data-tool-call": c.id },
                    h("td", {}, h("a", { href: ctx.href("tools", c.tool) }, h("code", { text: c.tool }))),
                    h("td", {}, pill(c.status)),
                    h("td", {}, c.target ? h("code", { text: typeof c.target === "string" ? c.target : JSON.stringify(c.target) }) : ""),
                    h("td", {}, timeAgo(c.startedAt)),
                    h("td", { text: duration(c.startedAt, c.finishedAt) }),
                    h("td", { class: "error-cell" }, c.error ? h("pre", { class: "error-pre", text: c.error }) : ""),
                  ),
                ),
              ),
            ),
          )
        : h("p", { class: "muted", text: "No tool calls." }),
    );
  }

  const refresh = debounce(load, 500);
  ctx.onEvent((e) => {
    const d = e.data || {};
    if ((/^tool_call\./.test(e.type) || /^activation\./.test(e.type)) && (d.activationId === id || d.id === id)) refresh();
  });
  load();
}
