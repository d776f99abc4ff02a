// The activity feed: the project's recent events as sentences people read ("pm sent a P2
// message to worker", "worker called file.write: failed — …"), newest first, live. Events
// that only echo another one (history rows, call starts, status flips: the server's event
// types say which) are left out; a type this page does not know is shown by its name, so
// nothing new goes unseen.

import { clip, h, replace, timeAgo } from "../../dom.js";

const SHOWN = 30;

/** The feed section; `render()` redraws it from `ctx.state.recentEvents`. */
export function activityFeed(ctx) {
  const list = h("ol", { "aria-label": "Recent activity", "aria-live": "polite", "aria-relevant": "additions", "data-activity": "" });
  const el = h("section", { class: "card activity-feed" }, h("h2", { class: "section-title", text: "Recent activity" }), list);
  let drawn = "";
  function render() {
    const types = ctx.state.eventTypes || new Map();
    const events = (ctx.state.recentEvents || []).filter((e) => shown(e, types)).slice(-SHOWN).reverse();
    const key = events.map((e) => e.id).join(",");
    if (key === drawn) return;
    drawn = key;
    replace(
      list,
      events.length
        ? events.map((e) => {
            const { text, href, failed } = describe(e, ctx.href);
            return h(
              "li",
              { "data-event": e.id, "data-type": e.type, class: failed ? "failed" : null },
              timeAgo(e.createdAt),
              href ? h("a", { href, text }) : h("span", { text }),
            );
          })
        : h("li", { class: "muted", text: ctx.state.eventsReady ? "Nothing has happened yet." : "Loading…" }),
    );
  }
  return { el, render };
}

function shown(e, types) {
  if (types.get(e.type)?.inFeed === false) {
    // A signal that is not a message's and waits for delivery says something of its own; the
    // closed ones only record what an agent did.
    return e.type === "signal.created" && e.data?.kind !== "message.created" && e.data?.status === "pending";
  }
  return true;
}

/** A sentence for an event, with a link to where it can be looked at. */
export function describe(e, href) {
  const d = e.data || {};
  const act = d.activationId ? href("activations", d.activationId) : null;
  const to = d.recipient ?? (d.channel ? `#${String(d.channel).replace(/^#/, "")}` : "everyone");
  switch (e.type) {
    case "message.created":
      return { text: `${d.sender} sent a ${d.priority ?? ""} message to ${to}`, href: href("messages") };
    case "activation.started":
      return { text: `${d.agentId} started working (${(d.signalIds || []).length} signal(s))`, href: act };
    case "activation.completed":
      return { text: `${d.agentId} finished an activation`, href: act };
    case "activation.failed":
      return { text: `${d.agentId}'s activation failed: ${clip(d.error ?? "", 160)}`, href: act, failed: true };
    case "activation.cancelled":
      return { text: `${d.agentId}'s activation was cancelled${d.error ? `: ${clip(d.error, 120)}` : ""}`, href: act };
    case "tool_call.finished":
      return d.status === "failed"
        ? { text: `${d.agentId} called ${d.tool}: failed — ${clip(d.error ?? "", 160)}`, href: act, failed: true }
        : { text: `${d.agentId} called ${d.tool}`, href: act };
    case "tool_call.rejected":
      return { text: `${d.agentId} called ${d.tool}: rejected — ${clip(d.reason ?? "", 160)}`, href: act, failed: true };
    case "signals.delivered":
      return { text: `${(d.signalIds || []).length} signal(s) reached ${d.agentId} between tool calls`, href: act };
    case "signal.created":
      return { text: `${d.kind} (${d.priority}) for ${d.targetAgent ?? d.targetChannel ?? "everyone"}` };
    case "project.status":
      return { text: `The project is now ${d.status} (was ${d.previous})` };
    case "project.submitted":
      return { text: `${d.agentId ?? "Someone"} submitted the final report`, href: href("overview") };
    case "agent.paused":
      return { text: `${d.agentId} was paused: ${clip(d.reason ?? "", 160)}`, failed: true };
    case "agent.resumed":
      return { text: `${d.agentId} resumed: ${clip(d.reason ?? "", 120)}` };
    case "agent.added":
      return { text: `${d.agentId} joined the project` };
    case "model.fallback":
      return { text: `${d.agentId}'s model ${d.from} failed (${d.status ? `HTTP ${d.status}` : String(d.cause ?? "").replace(/_/g, " ")}), continued with ${d.to}`, href: act, failed: true };
    case "agent.quota_exceeded":
      return { text: `${d.agentId} is over its disk quota`, failed: true };
    default:
      return { text: d.agentId ? `${e.type} (${d.agentId})` : e.type, href: href("events") };
  }
}
