// The Tools panel's switch page `switches:<agent>`: the agent's tools by group (the catalog's
// `group`, from what the packs declare), a switch per group and per tool. Switching one off
// takes it out of the agent's next model request and refuses its calls; switching it on never
// goes past the agent's allowlist (the page only lists the tools the config allows it). The
// server records who switched (`webui`) and the audit line; this page only asks and redraws.

import { errorBox, h, replace, selectField, timeAgo } from "../../dom.js";

export const SWITCHES_PREFIX = "switches:";

/** The page for `agent` (one of `ctx.state.agents`, else the first agent). */
export function switchesPage(ctx, agent) {
  const agents = (ctx.state.agents || []).map((a) => a?.id).filter((a) => typeof a === "string");
  const picker = selectField({
    name: "switch-agent",
    label: "Agent",
    options: agents.length ? agents : [agent],
    value: agent,
    onchange: (e) => ctx.navigate("tools", SWITCHES_PREFIX + e.target.value),
  });
  picker.select.setAttribute("data-switch-agent", "");
  const body = h("div", { class: "switch-groups" }, h("p", { class: "muted", text: "Loading…" }));
  const status = h("div", { class: "switch-status", role: "status" });

  async function load() {
    try {
      draw(await ctx.api.agentTools(agent));
    } catch (err) {
      replace(body, errorBox(err, `The tools of ${agent}`));
    }
  }

  async function flip(name, group, enabled) {
    replace(status);
    try {
      await ctx.api.switchTools(agent, name, { group, enabled });
    } catch (err) {
      replace(status, errorBox(err, `Switching ${group ? "group " : ""}${name} ${enabled ? "on" : "off"}`));
    }
    await load();
  }

  function draw(entries) {
    const groups = new Map();
    for (const e of Array.isArray(entries) ? entries : []) {
      if (!groups.has(e.group)) groups.set(e.group, []);
      groups.get(e.group).push(e);
    }
    if (!groups.size) {
      replace(body, h("p", { class: "muted", text: `${agent} may call no tool.` }));
      return;
    }
    const sections = [];
    for (const [group, tools] of groups) {
      const off = tools.filter((t) => t.switchedOffFor?.[agent]);
      const groupBox = h("input", {
        type: "checkbox",
        "data-switch-group": group,
        "aria-label": `Group ${group} on for ${agent}`,
        checked: off.length === 0,
        onchange: (e) => flip(group, true, e.target.checked),
      });
      groupBox.indeterminate = off.length > 0 && off.length < tools.length;
      const rows = tools.map((t) => {
        const why = t.switchedOffFor?.[agent];
        return h(
          "li",
          { "data-switch-row": t.name, class: why ? "switched-off" : null },
          h(
            "label",
            {},
            h("input", {
              type: "checkbox",
              "data-switch-tool": t.name,
              "aria-label": `${t.name} on for ${agent}`,
              checked: !why,
              onchange: (e) => flip(t.name, false, e.target.checked),
            }),
            " ",
            h("span", { text: t.displayName || t.name }),
            " ",
            h("code", { class: "ti-name", text: t.name }),
          ),
          why ? h("span", { class: "muted small", "data-switched-by": why.by }, " off by ", h("code", { text: why.by }), " ", timeAgo(why.at)) : null,
        );
      });
      sections.push(
        h(
          "section",
          { class: "switch-group", "data-group": group },
          h("h3", {}, h("label", {}, groupBox, " ", h("span", { text: group }))),
          h("ul", { class: "switch-tools" }, rows),
        ),
      );
    }
    replace(body, sections);
  }

  ctx.onEvent((event) => {
    if (event.type === "tools.switched" && event.data?.agentId === agent) load();
  });
  load();
  return [
    h(
      "header",
      { class: "page-head" },
      h("h2", { "data-tool-title": "", text: `Tool switches of ${agent}` }),
      h("p", { class: "desc", text: "A tool or group switched off leaves the agent's next model request and its calls are refused, until it is switched on again. Only the tools its configuration allows are listed." }),
    ),
    h("div", { class: "tool-switches", "data-switches": agent }, picker.el, status, body),
  ];
}
