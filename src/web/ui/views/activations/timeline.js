// An activation's timeline: its prompt and signals, each model turn (text, tokens, cost), each
// tool call (input, output or error, duration), the signals that arrived at tool boundaries,
// approvals, fallbacks to the next model with their cause and how it ended, from
// `GET activations/<id>/timeline`, with the text the model is writing now at the end. It reloads (debounced) on every stored event of the activation, so it grows while
// the activation runs. Arrow keys move between steps; Home and End go to the first and last.

import { clip, debounce, errorBox, h, pill, pretty, priorityBadge, replace, timeAgo } from "../../dom.js";
import { toolImages } from "../tool-content.js";

/** The timeline of activation `id`; `onHead(timeline.activation)` runs after every load. */
export function activationTimeline(ctx, id, { onHead } = {}) {
  const status = h("p", { class: "sr-only", role: "status", "aria-live": "polite", "data-timeline-status": "" });
  const list = h("ol", { class: "timeline", "data-timeline": id, "aria-label": `Timeline of activation ${id}` });
  const liveText = h("pre", { class: "viewer live-text", "aria-label": "Model output so far" });
  // After the last step: what the model is writing for the next one.
  const live = h("section", { class: "live", "data-kind": "live", hidden: true }, h("h3", { class: "section-title", text: "Writing now" }), liveText);
  const problem = h("div");
  const el = h("section", { class: "timeline-wrap" }, problem, status, list, live);
  let items = [];
  let loaded = false;

  const showLive = () => {
    const text = ctx.state.live.get(id)?.text ?? "";
    live.hidden = !text;
    liveText.textContent = text;
  };

  async function load() {
    let timeline;
    try {
      timeline = await ctx.api.timeline(id);
    } catch (err) {
      replace(problem, errorBox(err, "Cannot load the timeline"));
      return;
    }
    replace(problem);
    const fresh = Array.isArray(timeline.items) ? timeline.items : [];
    // Details the reader opened or closed stay so across reloads.
    const open = new Map([...list.querySelectorAll("details[data-key]")].map((d) => [d.dataset.key, d.open]));
    const focused = document.activeElement?.closest?.("[data-step]")?.dataset.step;
    replace(list, fresh.map((item, i) => itemView(ctx, item, i, open)));
    showLive();
    if (focused) list.querySelector(`[data-step="${CSS.escape(focused)}"]`)?.focus();
    rovingTabindex();
    if (loaded && fresh.length > items.length) status.textContent = `${fresh.length - items.length} new step(s): ${summary(fresh[fresh.length - 1])}`;
    items = fresh;
    loaded = true;
    onHead?.(timeline.activation, timeline);
  }

  // One tab stop for the list; the arrow keys move within it.
  function rovingTabindex() {
    const steps = [...list.querySelectorAll(":scope > li")];
    const current = steps.find((s) => s === document.activeElement) ?? steps[0];
    for (const s of steps) s.tabIndex = s === current ? 0 : -1;
  }
  list.addEventListener("keydown", (e) => {
    if (!(e.target instanceof HTMLElement) || e.target.parentElement !== list) return;
    const steps = [...list.querySelectorAll(":scope > li")];
    const at = steps.indexOf(e.target);
    const to = { ArrowDown: at + 1, ArrowUp: at - 1, Home: 0, End: steps.length - 1 }[e.key];
    if (to === undefined || !steps[to]) return;
    e.preventDefault();
    for (const s of steps) s.tabIndex = -1;
    steps[to].tabIndex = 0;
    steps[to].focus();
  });

  const reload = debounce(load, 150);
  ctx.onEvent((e) => {
    const d = e.data || {};
    if (d.activationId === id) reload();
  });
  ctx.onLive((l) => {
    if (l.activationId === id) showLive();
  });
  load();
  return { el, reload: load };
}

/** A one-line summary of a step, for the live region. */
function summary(item) {
  switch (item?.kind) {
    case "model_turn":
      return `model: ${clip(item.text || "(no text)", 80)}`;
    case "tool_call":
      return `${item.tool} ${item.status}`;
    case "signals":
      return `${item.signals?.length ?? 0} signal(s) arrived`;
    case "approval":
      return `approval for ${item.tool}: ${item.status}`;
    case "model_fallback":
      return `model ${item.from} failed (${fallbackCause(item)}), continued with ${item.to}`;
    case "ended":
      return `activation ${item.status}`;
    default:
      return item?.kind ?? "";
  }
}

const ICONS = { prompt: "▶", model_turn: "◆", tool_call: "⚙", signals: "✉", compaction: "≡", approval: "✋", model_fallback: "↪", ended: "■" };

function itemView(ctx, item, index, open) {
  const key = item.id ?? `${item.kind}-${index}`;
  const fold = (name, summaryText, body, startOpen = false) => {
    const k = `${key}:${name}`;
    return h("details", { class: "tl-fold", "data-key": k, open: open.get(k) ?? startOpen }, h("summary", { text: summaryText }), body);
  };
  const head = (...parts) => h("header", { class: "tl-head" }, h("span", { class: "tl-icon", "aria-hidden": "true", text: ICONS[item.kind] ?? "•" }), ...parts);
  const li = (extra, ...children) =>
    h("li", { class: ["tl-item", `tl-${item.kind}`], "data-kind": item.kind, "data-step": key, tabindex: "-1", ...extra }, ...children);
  switch (item.kind) {
    case "prompt":
      return li(
        {},
        head(h("strong", { text: "Prompt" }), h("span", { class: "muted small", text: ` · ${item.delivery}` }), h("span", { class: "tl-time" }, timeAgo(item.at))),
        item.signals?.length ? signalList(item.signals) : null,
        fold("text", `Prompt text (${item.text?.length ?? 0} chars)`, h("pre", { class: "viewer small", text: item.text ?? "" })),
      );
    case "model_turn":
      return li(
        { "aria-label": `Model turn: ${clip(item.text || "no text", 60)}` },
        head(
          h("strong", { text: "Model" }),
          h("code", { class: "muted small", text: ` ${item.model}` }),
          h("span", { class: "tl-meta", "data-usage": "" }, usageText(item.usage), item.durationMs != null ? ` · ${ms(item.durationMs)}` : ""),
          h("span", { class: "tl-time" }, timeAgo(item.at)),
        ),
        item.text?.trim()
          ? h("pre", { class: "viewer small tl-text", "data-turn-text": "", text: item.text })
          : h("p", { class: "muted small", text: item.toolCalls ? `(no text; ${item.toolCalls} tool call${item.toolCalls > 1 ? "s" : ""})` : "(no text)" }),
      );
    case "tool_call":
      return li(
        { "data-tool": item.tool, "data-tool-call": item.id ?? null, "data-status": item.status, "aria-label": `Tool call ${item.tool}, ${item.status}` },
        head(
          h("a", { href: ctx.href("tools", item.tool) }, h("code", { class: "tl-tool", text: item.tool })),
          " ",
          pill(item.status),
          item.errorKind ? h("span", { class: "badge warn", text: item.errorKind }) : null,
          h("span", { class: "tl-meta" }, item.durationMs != null ? ms(item.durationMs) : item.status === "running" ? "running…" : ""),
          h("span", { class: "tl-time" }, timeAgo(item.at)),
        ),
        fold("input", "Input", h("pre", { class: "viewer small", "data-input": "", text: pretty(item.input ?? {}) })),
        item.error
          ? h("pre", { class: "error-pre", "data-error": "", text: item.error })
          : item.output !== null && item.output !== undefined
            ? fold("output", outputSummary(item.output), toolOutputView(item.output, item.tool), true)
            : null,
      );
    case "signals":
      return li(
        {},
        head(h("strong", { text: "Signals arrived" }), h("span", { class: "muted small", text: ` at the ${String(item.delivery).replace(/_/g, " ")}` }), h("span", { class: "tl-time" }, timeAgo(item.at))),
        signalList(item.signals ?? []),
      );
    case "compaction":
      return li(
        {},
        head(h("strong", { text: "History compacted" }), h("span", { class: "muted small", text: ` · ${item.reason} · ${item.archivedMessages} archived, ${item.keptMessages} kept` })),
        fold("summary", "Summary", h("pre", { class: "viewer small", text: item.summary ?? "" })),
      );
    case "approval":
      return li(
        { "data-approval": item.approvalId, "data-status": item.status },
        head(h("strong", { text: "Approval" }), " ", h("code", { text: item.tool }), " ", pill(item.status), item.risk ? h("span", { class: "badge warn", text: `risk: ${item.risk}` }) : null, h("span", { class: "tl-time" }, timeAgo(item.at))),
        item.reason ? h("p", { class: "small", text: item.reason }) : null,
        item.resolvedBy ? h("p", { class: "muted small" }, `${item.status} by ${item.resolvedBy} `, timeAgo(item.resolvedAt)) : null,
        item.feedback ? h("pre", { class: "viewer small", text: item.feedback }) : null,
      );
    case "model_fallback":
      return li(
        { "data-cause": item.cause, "aria-label": `Model ${item.from} failed: ${fallbackCause(item)}` },
        head(
          h("strong", { text: "Fallback" }),
          " ",
          h("code", { class: "muted small", text: item.from }),
          h("span", { class: "badge warn", "data-fallback-cause": "", text: fallbackCause(item) }),
          h("span", { class: "muted small", text: ` → continued with ${item.to}` }),
          h("span", { class: "tl-time" }, timeAgo(item.at)),
        ),
        h("pre", { class: "error-pre", "data-error": "", text: item.error ?? "" }),
      );
    case "ended":
      return li(
        {},
        head(h("strong", { text: "Ended" }), " ", pill(item.status), h("span", { class: "tl-time" }, timeAgo(item.at))),
        item.error ? h("pre", { class: "error-pre", text: item.error }) : null,
      );
    default:
      return li({}, head(h("strong", { text: item.kind ?? "step" })), h("pre", { class: "viewer small", text: pretty(item) }));
  }
}

/** A fallback's cause in a few words (the same as `suzumio show` prints). */
function fallbackCause(item) {
  const words = {
    rate_limited: "rate limited (HTTP 429)",
    stream_stalled: "stream stalled past chunkTimeoutMs",
    malformed_stream: "malformed stream",
    bad_response: "malformed answer",
    context_overflow: "context overflow",
    timeout: "timeout (timeoutMs)",
    missing_key: "missing API key",
  };
  if (item.cause === "http_error" && item.status != null) return `HTTP ${item.status}`;
  return words[item.cause] ?? String(item.cause ?? "").replace(/_/g, " ");
}

function signalList(signals) {
  return h(
    "ul",
    { class: "tl-signals" },
    signals.map((s) =>
      h(
        "li",
        { "data-signal": s.id, "data-priority": s.priority },
        priorityBadge(s.priority),
        " ",
        h("code", { text: s.kind }),
        s.sender || s.sourceAgent ? h("span", { class: "muted small", text: ` from ${s.sender ?? s.sourceAgent}` }) : null,
        s.body ? h("div", { class: "tl-signal-body", text: clip(s.body, 400) }) : null,
      ),
    ),
  );
}

function usageText(u) {
  if (!u) return "";
  const parts = [`${u.inputTokens ?? 0} in`, `${u.outputTokens ?? 0} out`];
  if (u.cachedInputTokens) parts.push(`${u.cachedInputTokens} cached`);
  let text = `${parts.join(" / ")} tokens`;
  if (u.cost) text += ` · $${Number(u.cost).toFixed(4)}`;
  return text;
}

function ms(n) {
  return n < 1000 ? `${n} ms` : `${(n / 1000).toFixed(n < 10000 ? 1 : 0)} s`;
}

function outputSummary(output) {
  return output && typeof output === "object" && output.title ? `Output: ${output.title}` : "Output";
}

/**
 * A tool call's output (`{output, title?, metadata?}`) as the timeline shows it. The one place
 * that renders tool output, so richer renderings (content blocks, images) plug in here.
 */
export function toolOutputView(output, tool = "tool result") {
  const o = output && typeof output === "object" ? output : { output };
  const text = typeof o.output === "string" ? o.output : pretty(o.output);
  // A rich result's image blocks, as the model got them.
  const images = (Array.isArray(o.content) ? o.content : []).filter((b) => b?.type === "image");
  return h(
    "div",
    { class: "tool-output" },
    h("pre", { class: "viewer small", "data-output": "", text: text ?? "" }),
    toolImages(images, tool),
  );
}
