// The Tools panel's index: each agent's switch page, the standalone controls, then the tools
// by group, each tool with its call count. The current page's link is marked and kept in sight.

import { h, replace } from "../../dom.js";
import { CONTROL_PREFIX, entryKey, groupTools, labelOf } from "./catalog.js";
import { SWITCHES_PREFIX } from "./switches.js";

/** The index nav; `render(cat, current)` draws it, `updateCounts(toolStatus)` only the counts. */
export function toolIndex(ctx) {
  const el = h("nav", { class: "tool-index", "aria-label": "Tools and controls" }, h("p", { class: "muted", text: "Loading…" }));

  function render(cat, current) {
    const link = (attrs, label, sub, count) =>
      h(
        "a",
        { ...attrs, "aria-current": attrs.href === ctx.href("tools", current) ? "page" : null },
        h("span", { class: "ti-label" }, label, sub ? h("code", { class: "ti-name", text: sub }) : null),
        count !== undefined ? h("span", { class: ["count", count ? "nonzero" : null], title: `${count} calls`, text: String(count) }) : null,
      );
    const controlLink = (e) =>
      link(
        { href: ctx.href("tools", CONTROL_PREFIX + entryKey(e)), "data-control": entryKey(e), title: e.description || e.title },
        labelOf(e.presentation, e.title || e.id),
        e.toolpackId === "core" ? null : e.toolpackId,
      );
    const toolLink = (t) =>
      link(
        { href: ctx.href("tools", t.tool), "data-tool": t.tool, title: t.description || t.tool },
        labelOf(t.presentation, t.tool),
        t.presentation?.label ? t.tool : null,
        t.callCount,
      );
    const section = (heading, items) => h("section", { class: "ti-group" }, h("h3", { text: heading }), h("ul", {}, items.map((i) => h("li", {}, i))));
    const sections = [];
    // The roster, else every agent the catalog says may call a tool (the roster may still be loading).
    const roster = (ctx.state.agents || []).map((a) => a?.id).filter((a) => typeof a === "string");
    const fromCatalog = [...new Set([...(cat.definitions?.values() ?? [])].flatMap((d) => d.allowedAgents ?? []))];
    const agents = roster.length ? roster : fromCatalog;
    const switchLink = (agent) =>
      link({ href: ctx.href("tools", SWITCHES_PREFIX + agent), "data-switches-link": agent, title: `Switch ${agent}'s tools off and on` }, `${agent}'s tools`);
    if (agents.length) sections.push(section("Switches", agents.map(switchLink)));
    if (cat.attached.standalone.length) sections.push(section("Controls", cat.attached.standalone.map(controlLink)));
    for (const [group, tools] of groupTools(cat.toolStatus)) sections.push(section(group, tools.map(toolLink)));
    if (!sections.length) sections.push(h("p", { class: "muted", text: "No tools are registered." }));
    replace(el, sections);
    keepCurrentInSight();
  }

  // The index scrolls on its own.
  function keepCurrentInSight() {
    const active = el.querySelector('a[aria-current="page"]');
    if (active && (active.offsetTop < el.scrollTop || active.offsetTop + active.offsetHeight > el.scrollTop + el.clientHeight)) {
      el.scrollTop = active.offsetTop - el.clientHeight / 3;
    }
  }

  function updateCounts(toolStatus) {
    for (const a of el.querySelectorAll("a[data-tool]")) {
      const t = toolStatus.find((x) => x.tool === a.dataset.tool);
      const count = a.querySelector(".count");
      if (t && count) {
        count.textContent = String(t.callCount ?? 0);
        count.classList.toggle("nonzero", Boolean(t.callCount));
      }
    }
  }

  return { el, render, updateCounts };
}
