// The composer: send a message to an agent, the user or a channel, with a priority. Server
// errors are marked on the fields their `details[].path` name.

import { channelLabel, errorBox, h, replace, uid } from "../../dom.js";
import { fieldFromDetail } from "../../forms.js";

/**
 * The composer section. `refresh()` rebuilds the form only when the choices (agents, channels)
 * changed, so a message being typed survives the roster refreshes.
 */
export function messageComposer(ctx) {
  const el = h("section", { class: "card composer" });
  let choicesKey = null;
  function refresh() {
    const agents = ctx.state.agents || [];
    const channels = ctx.channels();
    const key = JSON.stringify(agents.map((a) => a.id)) + channels.join(",");
    if (key === choicesKey) return;
    choicesKey = key;
    replace(el, h("h2", { class: "section-title", text: "Send a message" }), composerForm(ctx, agents, channels));
  }
  return { el, refresh };
}

const agentLabel = (a) => (a.displayName && a.displayName !== a.id ? `${a.displayName} (${a.id})` : a.id);

function composerForm(ctx, agents, channels) {
  const ids = { mode: uid("mode"), recipient: uid("recipient"), channel: uid("channel"), priority: uid("priority"), body: uid("body") };
  const recipient = h(
    "select",
    { id: ids.recipient, name: "recipient" },
    agents.map((a) => h("option", { value: a.id, selected: a.id === ctx.state.project?.coordinator, text: agentLabel(a) })),
    h("option", { value: "user", text: "user" }),
  );
  const channel = h("select", { id: ids.channel, name: "channel", disabled: true }, channels.map((c) => h("option", { value: c, text: channelLabel(c) })));
  const priority = h("select", { id: ids.priority, name: "priority" }, ["P0", "P1", "P2", "P3"].map((p) => h("option", { value: p, selected: p === "P3", text: p })));
  const body = h("textarea", { id: ids.body, name: "body", rows: 5, placeholder: "Message (Markdown)", "aria-required": "true" });
  const controls = { recipient, channel, priority, body };
  const mode = sendToChoice(ids.mode, channels.length > 0);
  const recipientField = h("div", { class: "field" }, h("label", { for: ids.recipient, text: "Recipient" }), recipient);
  const channelField = h("div", { class: "field", hidden: true }, h("label", { for: ids.channel, text: "Channel" }), channel);
  mode.onChange((useChannel) => {
    recipient.disabled = useChannel;
    channel.disabled = !useChannel;
    recipientField.hidden = useChannel;
    channelField.hidden = !useChannel;
  });
  const result = h("div", { class: "result", "aria-live": "polite" });
  const send = h("button", { type: "submit", class: "primary", text: "Send message" });

  const form = h(
    "form",
    { class: "schema-form", novalidate: true },
    mode.el,
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
    for (const c of Object.values(controls)) markInvalid(c, false);
    if (!body.value.trim()) {
      markInvalid(body, true);
      replace(result, errorBox(new Error("write a message first")));
      body.focus();
      return;
    }
    const message = { priority: priority.value, body: body.value };
    if (mode.toChannel()) message.channel = channel.value;
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
        if (name) markInvalid(controls[name], true);
      }
      replace(result, errorBox({ message: err.message, details: err.details, status: err.status, route: err.route }, "Not sent"));
    } finally {
      send.disabled = false;
    }
  });
  return form;
}

/** The "Send to" radios: an agent (or the user), or a channel when the project declares any. */
function sendToChoice(id, haveChannels) {
  const toAgent = h("input", { type: "radio", name: "mode", value: "recipient", id: `${id}-r`, checked: true });
  const toChannel = h("input", { type: "radio", name: "mode", value: "channel", id: `${id}-c`, disabled: !haveChannels });
  const el = h(
    "fieldset",
    { class: "mode" },
    h("legend", { text: "Send to" }),
    h("label", { for: toAgent.id, class: "radio" }, toAgent, " an agent or the user"),
    h("label", { for: toChannel.id, class: "radio" }, toChannel, haveChannels ? " a channel" : " a channel (none declared)"),
  );
  return {
    el,
    toChannel: () => toChannel.checked,
    onChange: (fn) => {
      for (const radio of [toAgent, toChannel]) radio.addEventListener("change", () => fn(toChannel.checked));
    },
  };
}

function markInvalid(control, invalid) {
  control.classList.toggle("invalid", invalid);
  if (invalid) control.setAttribute("aria-invalid", "true");
  else control.removeAttribute("aria-invalid");
}
