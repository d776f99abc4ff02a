// Messages: the last 100, newest first, with sender → recipient or channel, priority and age.
// Long bodies are clipped; "Expand full" loads the message itself. New messages appear live.

import { channelLabel, clip, debounce, errorBox, h, priorityBadge, replace, timeAgo } from "../dom.js";

export const title = "Messages";

const PREVIEW = 600;

function newestFirst(a, b) {
  const t = String(b.createdAt ?? "").localeCompare(String(a.createdAt ?? ""));
  return t !== 0 ? t : String(b.id).localeCompare(String(a.id));
}

export function render(root, ctx) {
  const status = h("div", { class: "status-line" });
  const list = h("ol", { class: "message-list", "aria-label": "Messages, newest first" });
  const more = h("div", { class: "more" });
  root.append(
    h("header", { class: "page-head" }, h("h2", { text: "Messages" }), h("p", { class: "sub muted", text: "The last 100 messages, newest first." })),
    status,
    list,
    more,
  );

  const shown = new Map(); // id → message
  let next = null;

  function card(m) {
    const body = String(m.body ?? "");
    const long = body.length > PREVIEW || body.split("\n").length > 12;
    const text = h("div", { class: ["body", long ? "clamped" : null], text: long ? clip(body, PREVIEW) : body });
    const to = m.channel
      ? h("span", { class: "channel", text: channelLabel(m.channel) })
      : h("span", { class: "who", text: m.recipient ?? "—" });
    const expand = long
      ? h("button", {
          type: "button",
          class: "link",
          onclick: async (e) => {
            const btn = e.currentTarget;
            if (btn.dataset.expanded) {
              text.textContent = clip(body, PREVIEW);
              text.classList.add("clamped");
              btn.textContent = "Expand full";
              delete btn.dataset.expanded;
              return;
            }
            btn.disabled = true;
            try {
              const full = await ctx.api.message(m.id);
              text.textContent = String(full?.body ?? body);
              text.classList.remove("clamped");
              btn.textContent = "Collapse";
              btn.dataset.expanded = "1";
            } catch (err) {
              text.after(errorBox(err, "Cannot load the message"));
            } finally {
              btn.disabled = false;
            }
          },
          text: "Expand full",
        })
      : null;
    return h(
      "li",
      { class: ["card", "message", `msg-${m.priority}`], "data-message": m.id },
      h(
        "header",
        { class: "message-head" },
        h("span", { class: "route" }, h("span", { class: "who", text: m.sender ?? "—" }), h("span", { class: "arrow", "aria-label": "to", text: " → " }), to),
        priorityBadge(m.priority),
        h("span", { class: "muted small" }, timeAgo(m.createdAt)),
      ),
      text,
      expand,
      h("div", { class: "muted tiny" }, h("code", { text: m.id ?? "" })),
    );
  }

  // Cards are kept, so a live refresh does not collapse an expanded message.
  const cards = new Map();
  function draw() {
    replace(
      list,
      [...shown.values()].sort(newestFirst).map((m) => {
        if (!cards.has(m.id)) cards.set(m.id, card(m));
        return cards.get(m.id);
      }),
    );
    if (!shown.size) list.append(h("li", { class: "muted", text: "No messages yet." }));
    replace(
      more,
      next
        ? h("button", {
            type: "button",
            class: "secondary",
            onclick: () => load({ before: next }),
            text: "Load older",
          })
        : null,
    );
  }

  /** The newest page (first load and live refreshes), or an older page before `before`. */
  async function load({ before, refresh = false } = {}) {
    try {
      const { items, next: cursor } = await ctx.api.messages({ limit: 100, before });
      for (const m of items) shown.set(m.id, m);
      // A live refresh re-reads the newest page; it must not lose the "older" cursor.
      if (!refresh) next = items.length >= 100 ? cursor ?? null : null;
      replace(status);
      draw();
    } catch (err) {
      replace(status, errorBox(err, "Cannot load messages"));
    }
  }

  const refresh = debounce(() => load({ refresh: true }), 300);
  ctx.onEvent((e) => {
    if (e.type === "message.created") refresh();
  });
  load();
}
