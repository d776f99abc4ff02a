// One WebUI control of a pack: its form (from the entry's `inputSchema`) and its result. A
// panel runs at once, on Refresh, and (debounced) when an agent's call of one of its pack's
// tools finishes; an action runs on submit, then the page's panels re-run.

import { debounce, errorBox, h, metricTiles, replace } from "../../dom.js";
import { schemaForm } from "../../forms.js";
import { entryKey, labelOf } from "./catalog.js";

/**
 * The card for `entry`. `page.panels` collects the panels' run functions; `page.actionDone()`
 * is called after an action succeeded.
 */
export function controlCard(ctx, entry, page) {
  const id = entryKey(entry);
  const isPanel = entry.kind === "panel";
  const label = entry.submitLabel || (isPanel ? "Refresh" : "Run");
  const button = h("button", { type: "submit", class: isPanel ? "secondary" : "primary", "data-refresh": isPanel ? "" : null, text: label });
  const form = schemaForm(entry.inputSchema, { agents: ctx.state.agents, channels: ctx.channels(), idPrefix: id, submit: button });
  const result = h("div", { class: "result", "data-result": "", "aria-live": "polite" });
  let running = false;

  function setBusy(busy) {
    running = busy;
    button.disabled = busy;
    if (busy) result.setAttribute("aria-busy", "true");
    else result.removeAttribute("aria-busy");
    result.classList.toggle("busy", busy);
  }

  async function run() {
    if (running) return;
    form.clearErrors();
    const { input, errors } = form.values();
    if (errors) {
      const rest = form.showErrors(errors);
      replace(result, errorBox({ message: "some fields are not valid", details: rest }));
      return;
    }
    setBusy(true);
    if (!result.firstChild) result.append(h("p", { class: "muted", text: "Running…" }));
    try {
      const output = await ctx.api.invoke(entry.toolpackId, entry.id, input);
      replace(result, showOutput(output));
      // An action changes state the panels on this page show.
      if (!isPanel) page.actionDone(run);
    } catch (err) {
      const unmatched = err.status === 400 ? form.showErrors(err.details) : err.details;
      replace(result, errorBox({ ...err, message: err.message, details: unmatched, status: err.status, route: err.route }));
    } finally {
      setBusy(false);
    }
  }

  form.form.addEventListener("submit", (e) => {
    e.preventDefault();
    run();
  });
  if (isPanel) {
    page.panels.push(run);
    queueMicrotask(run);
    // An agent's call of one of this pack's tools may change what the panel shows.
    const refreshSoon = debounce(() => {
      if (form.form.isConnected) run();
    }, 600);
    ctx.onEvent((e) => {
      if (e.type !== "tool_call.finished" || !form.form.isConnected) return;
      const tool = e.data?.tool;
      const related = Array.isArray(entry.relatedTools) && entry.relatedTools.includes(tool);
      if (related || page.packOf?.(tool) === entry.toolpackId) refreshSoon();
    });
  }
  return h(
    "section",
    { class: ["card", "control", `kind-${entry.kind}`], "data-entry": id, "aria-label": entry.title || entry.id },
    h(
      "header",
      { class: "card-head" },
      h("h3", { text: labelOf(entry.presentation, entry.title || entry.id) }),
      h("span", { class: ["badge", isPanel ? "info" : "accent"], text: entry.kind }),
      h("code", { class: "muted small", text: id }),
    ),
    entry.description ? h("p", { class: "desc", text: entry.description }) : null,
    form.form,
    result,
  );
}

/** A tool output: its title, its metric tiles and its text. */
function showOutput(output) {
  const o = output && typeof output === "object" ? output : { output };
  const metrics = Array.isArray(o.metadata?.metrics) ? o.metadata.metrics : [];
  const text = typeof o.output === "string" ? o.output : JSON.stringify(o.output, null, 2);
  return [
    o.title ? h("h4", { class: "result-title", text: o.title }) : null,
    metrics.length ? metricTiles(metrics) : null,
    h("pre", { class: "output", text: text ?? "" }),
  ];
}
