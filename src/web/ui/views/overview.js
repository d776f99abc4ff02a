// Overview: the project hero (status, task, lifecycle buttons, report), counters, the agent
// roster with live status, and a composer to send a message to an agent or a channel.

import { channelLabel, clip, errorBox, h, metricTiles, pill, pretty, replace, timeAgo, uid } from "../dom.js";
import { fieldFromDetail } from "../forms.js";

export const title = "Overview";

const TASK_PREVIEW = 420;

export function render(root, ctx) {
  const hero = h("section", { class: "hero card" });
  const counters = h("section", { class: "counters", "aria-label": "Counters" });
  const roster = h("section", { class: "roster-wrap" });
  const composer = h("section", { class: "card composer" });
  root.append(hero, counters, h("div", { class: "overview-grid" }, roster, composer));

  let taskExpanded = false;
  let actionError = null;
  let busy = false;
  let requestOpen = false;
  let reportBox = null;

  function renderHero() {
    const p = ctx.state.project || {};
    const status = p.status ?? "unknown";
    const task = String(p.task ?? "");
    const long = task.length > TASK_PREVIEW || task.split("\n").length > 6;
    const buttons = [];
    const act = (label, fn, cls = "secondary") =>
      h("button", { type: "button", class: cls, disabled: busy, onclick: () => lifecycle(fn), text: label });
    if (["initialized", "stopped", "failed"].includes(status)) buttons.push(act("Start project", () => ctx.api.start(), "primary"));
    if (status === "running") buttons.push(act("Stop", () => ctx.api.stop()));
    if (status === "submitted") buttons.push(act("Approve report", () => ctx.api.approve(), "primary"));
    if (["submitted", "completed"].includes(status)) {
      buttons.push(
        h("button", {
          type: "button",
          class: "secondary",
          "aria-expanded": String(requestOpen),
          onclick: () => {
            requestOpen = !requestOpen;
            renderHero();
          },
          text: "Request changes",
        }),
      );
    }
    replace(
      hero,
      h(
        "div",
        { class: "hero-top" },
        h("div", {}, h("div", { class: "eyebrow", text: "Project" }), h("h1", { text: p.name ?? "" })),
        h("div", { class: "hero-status" }, pill(status, "big"), p.updatedAt ? h("span", { class: "muted small" }, "updated ", timeAgo(p.updatedAt)) : null),
      ),
      h(
        "div",
        { class: ["task", long && !taskExpanded ? "clamped" : null] },
        h("div", { class: "eyebrow", text: "Task" }),
        h("p", { class: "task-text", text: long && !taskExpanded ? clip(task, TASK_PREVIEW) : task || "—" }),
        long
          ? h("button", {
              type: "button",
              class: "link",
              "aria-expanded": String(taskExpanded),
              onclick: () => {
                taskExpanded = !taskExpanded;
                renderHero();
              },
              text: taskExpanded ? "Show less" : "Show the whole task",
            })
          : null,
      ),
      buttons.length ? h("div", { class: "actions" }, buttons) : null,
      requestOpen ? requestChangesForm() : null,
      p.submittedReport ? reportLine(p.submittedReport) : null,
      reportBox,
      actionError ? errorBox(actionError) : null,
      ctx.state.projectError ? errorBox(ctx.state.projectError, "Project summary unavailable") : null,
    );
  }

  async function lifecycle(fn) {
    busy = true;
    actionError = null;
    renderHero();
    try {
      await fn();
      requestOpen = false;
      requestForm = null;
    } catch (err) {
      actionError = err;
    }
    busy = false;
    await ctx.refreshProject().catch(() => {});
    renderHero();
  }

  // Built once: the hero is redrawn on every roster refresh, and a request being typed must
  // survive that.
  let requestForm = null;
  function requestChangesForm() {
    requestForm ??= buildRequestChangesForm();
    return requestForm;
  }

  function buildRequestChangesForm() {
    const id = uid("changes");
    const text = h("textarea", { id, name: "body", rows: 4, placeholder: "What should change?" });
    const form = h(
      "form",
      { class: "request-changes", novalidate: true },
      h("label", { for: id, text: "Changes requested (sent to the coordinator as P2)" }),
      text,
      h("div", { class: "form-actions" }, h("button", { type: "submit", class: "primary", text: "Send request" })),
    );
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      if (!text.value.trim()) {
        text.classList.add("invalid");
        text.setAttribute("aria-invalid", "true");
        text.focus();
        return;
      }
      lifecycle(() => ctx.api.requestChanges(text.value));
    });
    return form;
  }

  function reportLine(path) {
    return h(
      "div",
      { class: "report-line" },
      "Final report submitted: ",
      h("code", { text: String(path) }),
      " ",
      h("button", {
        type: "button",
        class: "link",
        onclick: async () => {
          if (reportBox) {
            reportBox = null;
            renderHero();
            return;
          }
          try {
            const r = await ctx.api.report();
            reportBox = h("pre", { class: "viewer report", text: typeof r === "string" ? r : r?.content ?? pretty(r) });
          } catch (err) {
            reportBox = errorBox(err, "Cannot load the report");
          }
          renderHero();
        },
        text: reportBox ? "Hide report" : "View report",
      }),
    );
  }

  function renderCounters() {
    const s = ctx.state.project?.stats;
    if (!s) {
      replace(counters);
      return;
    }
    const by = s.agents?.byStatus || {};
    const byText = Object.entries(by)
      .map(([k, v]) => `${v} ${k}`)
      .join(", ");
    replace(
      counters,
      metricTiles([
        { label: "Agents", value: s.agents?.total ?? ctx.state.agents.length, description: byText },
        { label: "Messages", value: s.messages },
        {
          label: "Activations",
          value: s.activations?.total,
          description: `${s.activations?.running ?? 0} running, ${s.activations?.failed ?? 0} failed`,
          tone: s.activations?.failed ? "bad" : null,
        },
        { label: "Tool calls", value: s.toolCalls },
        { label: "Events", value: s.events },
      ]),
    );
  }

  function renderRoster() {
    const agents = ctx.state.agents || [];
    const coordinator = ctx.state.project?.coordinator;
    replace(
      roster,
      h("h2", { class: "section-title", text: "Agent roster" }),
      ctx.state.agentsError ? errorBox(ctx.state.agentsError, "Agents unavailable") : null,
      agents.length === 0 && !ctx.state.agentsError ? h("p", { class: "muted", text: "No agents." }) : null,
      h(
        "div",
        { class: "roster" },
        agents.map((a) =>
          h(
            "article",
            { class: ["card", "agent", `agent-${a.status}`], "data-agent": a.id },
            h(
              "header",
              { class: "agent-head" },
              h("div", {}, h("h3", { text: a.displayName || a.id }), h("div", { class: "muted small" }, h("code", { text: a.id }), a.role ? ` · ${a.role}` : "", a.id === coordinator ? " · coordinator" : "")),
              pill(a.status),
            ),
            h(
              "dl",
              { class: "facts compact" },
              a.model ? [h("dt", { text: "Model" }), h("dd", { text: a.model })] : null,
              a.activeActivationId
                ? [h("dt", { text: "Active" }), h("dd", {}, h("a", { href: ctx.href("activations", a.activeActivationId), text: clip(a.activeActivationId, 24) }))]
                : null,
              [h("dt", { text: "Updated" }), h("dd", {}, timeAgo(a.updatedAt))],
              Array.isArray(a.mountedToolpacks) && a.mountedToolpacks.length
                ? [h("dt", { text: "Packs" }), h("dd", { text: a.mountedToolpacks.join(", ") })]
                : null,
            ),
            Array.isArray(a.tools)
              ? h(
                  "details",
                  { class: "tools-list" },
                  h("summary", { text: `${a.tools.length} tools` }),
                  h("ul", {}, a.tools.map((t) => h("li", {}, h("a", { href: ctx.href("tools", t) }, h("code", { text: t }))))),
                )
              : null,
            h("div", { class: "agent-links" }, h("a", { href: ctx.href("history", a.id), text: "History" }), " · ", h("a", { href: ctx.href("activations", `agent:${a.id}`), text: "Activations" })),
          ),
        ),
      ),
    );
  }

  // --- composer ---------------------------------------------------------------------------

  function renderComposer() {
    const agents = ctx.state.agents || [];
    const channels = ctx.channels();
    const ids = {
      mode: uid("mode"),
      recipient: uid("recipient"),
      channel: uid("channel"),
      priority: uid("priority"),
      body: uid("body"),
    };
    const recipient = h(
      "select",
      { id: ids.recipient, name: "recipient" },
      agents.map((a) => h("option", { value: a.id, selected: a.id === ctx.state.project?.coordinator, text: a.displayName && a.displayName !== a.id ? `${a.displayName} (${a.id})` : a.id })),
      h("option", { value: "user", text: "user" }),
    );
    const channel = h("select", { id: ids.channel, name: "channel", disabled: true }, channels.map((c) => h("option", { value: c, text: channelLabel(c) })));
    const toAgent = h("input", { type: "radio", name: "mode", value: "recipient", id: `${ids.mode}-r`, checked: true });
    const toChannel = h("input", { type: "radio", name: "mode", value: "channel", id: `${ids.mode}-c`, disabled: channels.length === 0 });
    const priority = h("select", { id: ids.priority, name: "priority" }, ["P0", "P1", "P2", "P3"].map((p) => h("option", { value: p, selected: p === "P3", text: p })));
    const body = h("textarea", { id: ids.body, name: "body", rows: 5, placeholder: "Message (Markdown)", "aria-required": "true" });
    const result = h("div", { class: "result", "aria-live": "polite" });
    const send = h("button", { type: "submit", class: "primary", text: "Send message" });
    const recipientField = h("div", { class: "field" }, h("label", { for: ids.recipient, text: "Recipient" }), recipient);
    const channelField = h("div", { class: "field", hidden: true }, h("label", { for: ids.channel, text: "Channel" }), channel);
    const syncMode = () => {
      const useChannel = toChannel.checked;
      recipient.disabled = useChannel;
      channel.disabled = !useChannel;
      recipientField.hidden = useChannel;
      channelField.hidden = !useChannel;
    };
    toAgent.addEventListener("change", syncMode);
    toChannel.addEventListener("change", syncMode);
    const controls = { recipient, channel, priority, body };

    const form = h(
      "form",
      { class: "schema-form", novalidate: true },
      h(
        "fieldset",
        { class: "mode" },
        h("legend", { text: "Send to" }),
        h("label", { for: toAgent.id, class: "radio" }, toAgent, " an agent or the user"),
        h("label", { for: toChannel.id, class: "radio" }, toChannel, channels.length ? " a channel" : " a channel (none declared)"),
      ),
      h(
        "div",
        { class: "fields" },
        recipientField,
        channelField,
        h("div", { class: "field" }, h("label", { for: ids.priority, text: "Priority" }), priority),
        h("div", { class: "field wide" }, h("label", { for: ids.body }, "Message", h("span", { class: "req", "aria-hidden": "true", text: " *" })), body),
      ),
      h("div", { class: "form-actions" }, send),
      result,
    );
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      for (const c of Object.values(controls)) {
        c.classList.remove("invalid");
        c.removeAttribute("aria-invalid");
      }
      if (!body.value.trim()) {
        body.classList.add("invalid");
        body.setAttribute("aria-invalid", "true");
        replace(result, errorBox(new Error("write a message first")));
        body.focus();
        return;
      }
      const message = { priority: priority.value, body: body.value };
      if (toChannel.checked) message.channel = channel.value;
      else message.recipient = recipient.value;
      send.disabled = true;
      try {
        const sent = await ctx.api.sendMessage(message);
        const id = sent?.messageId ?? sent?.id;
        replace(result, h("p", { class: "ok", text: `Sent${id ? ` (${id})` : ""}.` }));
        body.value = "";
      } catch (err) {
        const fields = new Map(Object.entries(controls));
        for (const d of err.details || []) {
          const name = fieldFromDetail(d, fields);
          if (name) {
            controls[name].classList.add("invalid");
            controls[name].setAttribute("aria-invalid", "true");
          }
        }
        replace(result, errorBox({ message: err.message, details: err.details, status: err.status, route: err.route }, "Not sent"));
      } finally {
        send.disabled = false;
      }
    });
    replace(composer, h("h2", { class: "section-title", text: "Send a message" }), form);
  }

  renderHero();
  renderCounters();
  renderRoster();
  renderComposer();
  let rosterKey = JSON.stringify((ctx.state.agents || []).map((a) => a.id)) + ctx.channels().join(",");
  ctx.onState(() => {
    if (!busy) renderHero();
    renderCounters();
    renderRoster();
    // Rebuild the composer only when the choices changed, so a message being typed survives.
    const next = JSON.stringify((ctx.state.agents || []).map((a) => a.id)) + ctx.channels().join(",");
    if (next !== rosterKey) {
      rosterKey = next;
      renderComposer();
    }
  });
}
