// Background commands of one agent (`shell.start`): status, the end of their output, and a Stop
// button for the running ones; a lost one (its runner went away) says how it was lost. A
// self-contained section: `commandsPanel(ctx, agent)` returns its element and keeps it fresh
// (every 3 s, and on a `shell.command_finished` signal) until the route changes. Reads
// `GET …/agents/:a/commands`, stops with `POST …/commands/:id/stop`.

import { request } from "../api.js";
import { clip, errorBox, h, replace, timeAgo } from "../dom.js";

const enc = encodeURIComponent;
const REFRESH_MS = 3000;

function statusText(c) {
  if (c.status === "lost") return c.cause ? `lost (${c.cause})` : "lost";
  if (c.status === "exited" && c.signal) return `killed by ${c.signal}`;
  if (c.status === "exited" && c.exitCode !== null && c.exitCode !== undefined) return `exit ${c.exitCode}`;
  return c.status;
}

function commandRow(c, stop) {
  const pillStatus = c.status === "running" ? "running" : c.status === "exited" && c.exitCode === 0 ? "completed" : c.status === "stopped" ? "cancelled" : "failed";
  return h(
    "li",
    { class: "card command", "data-command": c.id },
    h(
      "header",
      { class: "hist-head" },
      h("span", { class: ["pill", `st-${pillStatus}`], text: statusText(c) }),
      h("code", { text: clip(c.command, 160) }),
      c.name ? h("span", { class: "badge", text: c.name }) : null,
      h("span", { class: "muted small" }, `started `, timeAgo(c.startedAt)),
      c.status === "running" ? h("button", { type: "button", class: "secondary", onclick: () => stop(c), text: "Stop" }) : null,
    ),
    h("p", {
      class: "muted small",
      text: c.status === "lost" ? `${c.id} · in ${c.cwd || "?"}` : `${c.id} · in ${c.cwd} · ${c.outputBytes} bytes of output${c.droppedBytes ? ` (${c.droppedBytes} dropped: the last 1 MiB is kept)` : ""}`,
    }),
    c.status === "lost" && c.reason ? h("p", { class: "small command-lost", text: `Lost: ${c.reason}` }) : null,
    c.recentOutput
      ? h("pre", { class: "viewer small", text: c.recentOutput })
      : h("p", { class: "muted small", text: c.status === "lost" ? "(its output went with its runner)" : "(no output yet)" }),
  );
}

export function commandsPanel(ctx, agent) {
  const base = `/api/projects/${enc(ctx.api.name)}/agents/${enc(agent)}/commands`;
  const status = h("div", { class: "status-line" });
  const list = h("ol", { class: "history", "aria-label": `Background commands of ${agent}` });
  const el = h("section", { class: "background-commands" }, h("h3", { text: "Background commands" }), status, list);

  async function load() {
    try {
      const data = await request("GET", base);
      replace(status, data.runner === "connected" ? null : h("p", { class: "muted small", text: "The agent's runner is not running." }));
      const items = Array.isArray(data.items) ? data.items : [];
      replace(list, items.length ? items.map((c) => commandRow(c, stop)) : h("li", { class: "muted", text: "No background commands." }));
    } catch (err) {
      replace(status, errorBox(err, `Cannot list the background commands of ${agent}`));
    }
  }

  async function stop(c) {
    try {
      await request("POST", `${base}/${enc(c.id)}/stop`, {});
    } catch (err) {
      replace(status, errorBox(err, `Cannot stop ${c.id}`));
      return;
    }
    load();
  }

  ctx.every(load, REFRESH_MS);
  ctx.onEvent((e) => {
    if (e.type === "signal.created" && e.data?.kind === "shell.command_finished" && e.data?.targetAgent === agent) load();
  });
  load();
  return el;
}
