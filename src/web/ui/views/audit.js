// The permission audit trail (GET audit): every decision, hook verdict and approval resolution,
// newest first, filterable by agent, tool, decision, kind and free text, and by time on the
// server (`since`). Arguments arrive redacted. Self-contained: the Approvals view appends it.

import { debounce, errorBox, h, replace, timeAgo } from "../dom.js";

const KINDS = ["decision", "resolution", "hook", "switch"];
const DECISIONS = ["allow", "ask", "deny"];

export function auditSection(ctx) {
  const el = h("section", { class: "audit", "data-audit": "" });
  const select = (name, label, values) =>
    h("label", {}, `${label} `, h("select", { name }, h("option", { value: "", text: "any" }), values.map((v) => h("option", { value: v, text: v }))));
  const agentSel = select("agent", "Agent", []);
  const decisionSel = select("decision", "Decision", DECISIONS);
  const kindSel = select("kind", "Kind", KINDS);
  const sinceSel = h(
    "label",
    {},
    "Since ",
    h("select", { name: "since" }, [["", "ever"], ["1h", "1 hour"], ["24h", "24 hours"], ["7d", "7 days"]].map(([v, t]) => h("option", { value: v, text: t }))),
  );
  const text = h("input", { type: "search", name: "q", placeholder: "tool, source, reason…", "aria-label": "Search the audit" });
  const form = h("form", { class: "audit-filters", role: "search" }, agentSel, " ", decisionSel, " ", kindSel, " ", sinceSel, " ", text);
  const table = h("div", { "aria-live": "polite" });
  el.append(form, table);
  let entries = [];
  const value = (label) => label.querySelector("select, input")?.value ?? "";

  function draw() {
    const [agent, decision, kind] = [value(agentSel), value(decisionSel), value(kindSel)];
    const q = text.value.trim().toLowerCase();
    const shown = entries
      .filter((e) => e.kind !== "dropped")
      .filter((e) => (!agent || e.agent === agent) && (!decision || e.decision === decision) && (!kind || e.kind === kind))
      .filter((e) => !q || [e.tool, e.source, e.reason, e.feedback, e.userAction].some((f) => String(f ?? "").toLowerCase().includes(q)))
      .reverse()
      .slice(0, 200);
    const dropped = entries.filter((e) => e.kind === "dropped");
    replace(
      table,
      dropped.length ? h("p", { class: "badge warn", text: `${dropped.length} gap(s): entries were dropped while the writer was behind` }) : null,
      shown.length === 0
        ? h("p", { class: "muted", "data-empty": "audit", text: "No audit entry matches." })
        : h(
            "table",
            { class: "audit-table" },
            h("caption", { class: "muted small", text: `${shown.length} of ${entries.length} entries, newest first` }),
            h("thead", {}, h("tr", {}, ["When", "Agent", "Tool", "Kind", "Decision", "Source", "Reason", "Arguments"].map((c) => h("th", { scope: "col", text: c })))),
            h(
              "tbody",
              {},
              shown.map((e) =>
                h(
                  "tr",
                  { "data-audit-entry": "", "data-decision": e.decision, "data-kind": e.kind },
                  h("td", {}, timeAgo(e.time)),
                  h("td", { text: e.agent ?? "" }),
                  h("td", {}, h("code", { text: e.tool ?? "" })),
                  h("td", { text: e.kind ?? "" }),
                  h("td", {}, h("span", { class: `badge decision-${e.decision}`, text: e.decision ?? "" })),
                  h("td", { class: "small", text: e.source ?? "" }),
                  h("td", { class: "small", text: [e.reason, e.userAction && `(${e.userAction})`, e.feedback && `“${e.feedback}”`].filter(Boolean).join(" ") }),
                  h("td", {}, h("code", { class: "small", text: JSON.stringify(e.arguments ?? {}) })),
                ),
              ),
            ),
          ),
    );
  }

  async function load() {
    try {
      const data = await ctx.api.audit({ since: value(sinceSel) || undefined });
      entries = data?.entries ?? [];
    } catch (err) {
      replace(table, errorBox(err, "Audit unavailable"));
      return;
    }
    const agents = [...new Set(entries.map((e) => e.agent).filter(Boolean))].sort();
    const current = value(agentSel);
    replace(agentSel.querySelector("select"), h("option", { value: "", text: "any" }), agents.map((a) => h("option", { value: a, text: a, selected: a === current })));
    draw();
  }

  form.addEventListener("submit", (e) => e.preventDefault());
  for (const s of form.querySelectorAll("select")) s.addEventListener("change", () => (s.name === "since" ? load() : draw()));
  text.addEventListener("input", debounce(draw, 150));
  const reload = debounce(load, 500);
  ctx.onEvent((event) => {
    if (/^(approval\.|permission\.|tool_call\.started)/.test(event.type ?? "")) reload();
  });
  load();
  return el;
}
