// The Approvals view: every tool call waiting for a person (tool, agent, input, reason, risk,
// the reason's code and the risk categories the decision saw), each with the actions the
// decision offers (Allow / Deny, optional feedback for the model, a remembered scope and "all calls
// of this activation"; recently decided requests (an expired one, whose call ended with a
// restart, with why); the remembered rules, each deletable; and the live rules — added here
// (or from the CLI, the API) while the project runs, each with its source, each removable —
// which decide from the agents' next tool calls.
// Above them, the questions agents asked (`ask_user`): each with its choices as buttons and a
// free-text answer (when it has no choices), and the recently answered ones.
// It reloads on approval and question events (SSE) and every few seconds; the cards being
// typed into stay.

import { debounce, errorBox, h, pill, pretty, replace, timeAgo } from "../dom.js";
import { auditSection } from "./audit.js";

export const title = "Approvals";

export function render(root, ctx) {
  const questionsEl = h("section", { class: "questions-open" });
  const pendingEl = h("section", { class: "approvals-pending" });
  const rulesEl = h("section", { class: "approvals-rules" });
  const liveEl = h("section", { class: "approvals-live-rules" });
  const liveForm = liveRuleForm(ctx, () => reload());
  const decidedEl = h("section", { class: "approvals-decided" });
  root.append(
    h("h2", { class: "section-title", text: "Questions from agents" }),
    questionsEl,
    h("h2", { class: "section-title", text: "Waiting for approval" }),
    pendingEl,
    h("h2", { class: "section-title", text: "Live rules" }),
    liveEl,
    liveForm,
    h("h2", { class: "section-title", text: "Remembered decisions" }),
    rulesEl,
    h("h2", { class: "section-title", text: "Recently decided" }),
    decidedEl,
    h("h2", { class: "section-title", text: "Audit trail" }),
    auditSection(ctx),
  );
  // Cards by request id, so a reload keeps what was typed into a card still pending.
  const cards = new Map();
  const questionCards = new Map();

  async function loadQuestions() {
    let all;
    try {
      all = await ctx.api.questions({ all: true });
    } catch (err) {
      replace(questionsEl, errorBox(err, "Questions unavailable"));
      return;
    }
    const open = all.filter((q) => q.status === "pending");
    for (const id of [...questionCards.keys()]) if (!open.some((q) => q.id === id)) questionCards.delete(id);
    for (const q of open) if (!questionCards.has(q.id)) questionCards.set(q.id, questionCard(ctx, q, reload));
    const answered = all.filter((q) => q.status !== "pending").reverse().slice(0, 10);
    replace(
      questionsEl,
      open.length === 0 ? h("p", { class: "muted", "data-empty": "questions", text: "No agent is waiting for an answer." }) : null,
      open.map((q) => questionCards.get(q.id)),
      answered.length ? answeredList(answered, ctx) : null,
    );
  }

  async function load() {
    loadQuestions();
    let all;
    let rules;
    let permissions;
    try {
      [all, permissions] = await Promise.all([ctx.api.approvals({ all: true }), ctx.api.permissionRules()]);
      rules = permissions?.rules ?? [];
    } catch (err) {
      replace(pendingEl, errorBox(err, "Approvals unavailable"));
      return;
    }
    replace(liveEl, liveRulesTable(ctx, permissions?.liveRules ?? [], reload));
    const pending = all.filter((r) => r.status === "pending");
    for (const id of [...cards.keys()]) if (!pending.some((r) => r.id === id)) cards.delete(id);
    for (const r of pending) if (!cards.has(r.id)) cards.set(r.id, requestCard(ctx, r, reload));
    replace(
      pendingEl,
      pending.length === 0 ? h("p", { class: "muted", "data-empty": "approvals", text: "No tool call is waiting for approval." }) : null,
      pending.map((r) => cards.get(r.id)),
    );
    replace(rulesEl, rulesTable(ctx, rules, reload));
    const decided = all.filter((r) => r.status !== "pending").reverse().slice(0, 30);
    replace(decidedEl, decided.length ? decidedList(decided, ctx) : h("p", { class: "muted", text: "Nothing decided yet." }));
  }
  const reload = debounce(() => load(), 200);
  ctx.onEvent((event) => {
    if (/^(approval\.|permission\.|question\.)/.test(event.type ?? "")) reload();
  });
  ctx.every(() => {
    if (!document.hidden) load();
  }, 5000);
  load();
}

function requestCard(ctx, r, reload) {
  const feedback = h("textarea", { rows: 2, name: "feedback", placeholder: "Feedback for the model (optional)" });
  const remember = h(
    "select",
    { name: "remember", "aria-label": "Remember this decision" },
    h("option", { value: "", text: "Just this call" }),
    h("option", { value: "activation", text: "Remember for this activation" }),
    h("option", { value: "agent", text: `Remember for ${r.agentId}` }),
    h("option", { value: "project", text: "Remember for every agent" }),
  );
  const whole = h("input", { type: "checkbox", name: "allOfActivation" });
  const status = h("p", { class: "small", role: "status" });
  const decide = async (allow, buttons) => {
    for (const b of buttons) b.disabled = true;
    const body = { feedback: feedback.value.trim() || undefined, remember: remember.value || undefined, allOfActivation: whole.checked };
    try {
      await (allow ? ctx.api.allowApproval(r.id, body) : ctx.api.denyApproval(r.id, body));
      replace(status, allow ? "Allowed: the call runs now." : "Denied: the model is told why.");
      reload();
    } catch (err) {
      replace(status, errorBox(err, allow ? "Cannot allow" : "Cannot deny"));
      for (const b of buttons) b.disabled = false;
    }
  };
  const allowBtn = h("button", { type: "button", class: "primary", "data-action": "allow", text: "Allow" });
  const denyBtn = h("button", { type: "button", class: "danger", "data-action": "deny", text: "Deny" });
  allowBtn.addEventListener("click", () => decide(true, [allowBtn, denyBtn]));
  denyBtn.addEventListener("click", () => decide(false, [allowBtn, denyBtn]));
  const decision = r.decision || {};
  // The actions the decision offers, in order; a request of an older build offers them all.
  const actions = Array.isArray(decision.actions) ? decision.actions : ["allow_once", "allow_remember", "deny", "deny_with_feedback"];
  const offers = (a) => actions.includes(a);
  const categories = Array.isArray(decision.categories) ? decision.categories : [];
  return h(
    "article",
    { class: ["card", "approval", `risk-${decision.risk ?? "unknown"}`], "data-approval": r.id },
    h(
      "header",
      { class: "agent-head" },
      h(
        "div",
        {},
        h("h3", {}, h("code", { text: r.tool })),
        h(
          "div",
          { class: "muted small" },
          h("a", { href: ctx.href("history", r.agentId), text: r.agentId }),
          " · ",
          h("a", { href: ctx.href("activations", r.activationId), text: "activation" }),
          " · asked ",
          timeAgo(r.createdAt),
          " · expires ",
          timeAgo(r.expiresAt),
        ),
      ),
      h("span", { class: "badge warn", text: `risk ${decision.risk ?? "?"}` }),
    ),
    h(
      "p",
      { class: "approval-reason" },
      decision.code ? h("span", { class: "badge", "data-reason-code": decision.code, text: decision.code.replaceAll("_", " ") }) : null,
      decision.code ? " " : null,
      decision.reason ?? "",
      decision.source ? h("span", { class: "muted small", text: ` (${decision.source})` }) : null,
    ),
    categories.length
      ? h(
          "ul",
          { class: "risk-categories", "aria-label": "Risk categories" },
          categories.map((c) => h("li", { class: "badge warn", "data-category": c, text: c.replaceAll("_", " ") })),
        )
      : null,
    h("pre", { class: "approval-input", text: pretty(r.input) }),
    offers("deny_with_feedback") ? feedback : null,
    h(
      "div",
      { class: "approval-options" },
      offers("allow_remember") ? remember : null,
      h("label", {}, whole, " and every other call of this activation waiting"),
    ),
    h(
      "div",
      { class: "approval-actions", "data-actions": actions.join(" ") },
      offers("allow_once") || offers("allow_remember") ? allowBtn : null,
      " ",
      offers("deny") || offers("deny_with_feedback") ? denyBtn : null,
    ),
    status,
  );
}

function rulesTable(ctx, rules, reload) {
  if (!rules.length) return h("p", { class: "muted", "data-empty": "rules", text: "No remembered decisions." });
  const table = h(
    "table",
    { class: "grid rules" },
    h("thead", {}, h("tr", {}, ["Tool", "Decision", "Scope", "By", "When", "From request", ""].map((t) => h("th", { text: t })))),
    h(
      "tbody",
      {},
      rules.map((rule) => {
        const del = h("button", { type: "button", "data-delete-rule": rule.id, text: "Delete" });
        del.addEventListener("click", async () => {
          del.disabled = true;
          try {
            await ctx.api.deleteRule(rule.id);
            reload();
          } catch (err) {
            del.replaceWith(errorBox(err, "Cannot delete"));
          }
        });
        const whose = rule.activationId ?? rule.agentId;
        return h(
          "tr",
          { "data-rule": rule.id },
          h("td", {}, h("code", { text: rule.tool })),
          h("td", {}, pill(rule.decision)),
          h("td", { text: whose ? `${rule.scope} ${whose}` : rule.scope }),
          h("td", { text: rule.createdBy }),
          h("td", { text: timeAgo(rule.createdAt) }),
          h("td", {}, rule.requestId ? h("code", { text: rule.requestId }) : "—"),
          h("td", {}, del),
        );
      }),
    ),
  );
  return h("div", { class: "table-wrap" }, table);
}

function decidedList(decided, ctx) {
  return h(
    "ul",
    { class: "decided" },
    decided.map((r) =>
      h(
        "li",
        { "data-decided": r.id },
        pill(r.status),
        " ",
        h("code", { text: r.tool }),
        ` of ${r.agentId} by `,
        h("span", { "data-resolved-by": "", text: r.resolvedBy ?? "?" }),
        " ",
        timeAgo(r.resolvedAt),
        r.feedback ? h("span", { class: "muted", text: ` — “${r.feedback}”` }) : null,
        r.resolutionReason ? h("span", { class: "muted small", text: ` — ${r.resolutionReason}` }) : null,
        " ",
        h("a", { href: ctx.href("activations", r.activationId), text: "activation" }),
      ),
    ),
  );
}

function liveRulesTable(ctx, rules, reload) {
  if (!rules.length) return h("p", { class: "muted", "data-empty": "live-rules", text: "No live rules: suzumio.yaml's rules and each agent's mode decide." });
  const matcher = (r) =>
    r.paths?.length ? `paths ${r.paths.join(", ")}` : r.commands?.length ? `commands ${r.commands.join(", ")}` : r.hosts?.length ? `hosts ${r.hosts.join(", ")}` : "—";
  const table = h(
    "table",
    { class: "grid rules live-rules" },
    h("thead", {}, h("tr", {}, ["#", "For", "Tool", "Decision", "Matches", "Reason", "Source", ""].map((t) => h("th", { text: t })))),
    h(
      "tbody",
      {},
      rules.map((rule) => {
        const del = h("button", { type: "button", "data-remove-live-rule": rule.id, text: "Remove" });
        del.addEventListener("click", async () => {
          del.disabled = true;
          try {
            await ctx.api.deleteRule(String(rule.id));
            reload();
          } catch (err) {
            del.replaceWith(errorBox(err, "Cannot remove"));
          }
        });
        return h(
          "tr",
          { "data-live-rule": rule.id },
          h("td", { text: String(rule.id) }),
          h("td", { text: rule.agentId ?? "every agent" }),
          h("td", {}, h("code", { text: rule.tool })),
          h("td", {}, pill(rule.decision)),
          h("td", { text: matcher(rule) }),
          h("td", { text: rule.reason ?? "—" }),
          h("td", { class: "small", "data-source": "" }, rule.source ?? "", " ", timeAgo(rule.createdAt)),
          h("td", {}, del),
        );
      }),
    ),
  );
  return h("div", { class: "table-wrap" }, table);
}

/** Add a live rule: agent (or every agent), tool pattern, decision, one matcher, reason. */
function liveRuleForm(ctx, reload) {
  const agents = (ctx.state.agents || []).map((a) => a.id);
  const agent = h(
    "select",
    { name: "agent", "aria-label": "For" },
    h("option", { value: "", text: "every agent" }),
    agents.map((id) => h("option", { value: id, text: id })),
  );
  const tool = h("input", { name: "tool", placeholder: "tool pattern: file.write, file.*, *", required: true });
  const decision = h(
    "select",
    { name: "decision", "aria-label": "Decision" },
    ["deny", "ask", "allow"].map((d) => h("option", { value: d, text: d })),
  );
  const kind = h(
    "select",
    { name: "matcher", "aria-label": "Matcher" },
    h("option", { value: "", text: "every call" }),
    ["paths", "commands", "hosts"].map((k) => h("option", { value: k, text: k })),
  );
  const values = h("input", { name: "values", placeholder: "comma-separated: secrets/**, rm *, example.com" });
  const reason = h("input", { name: "reason", placeholder: "reason (what the model reads)" });
  const status = h("div", { class: "small", role: "status", "data-live-rule-status": "" });
  const submit = h("button", { type: "submit", class: "primary", text: "Add rule" });
  const form = h(
    "form",
    { class: "live-rule-form", "data-live-rule-form": "" },
    h("div", { class: "approval-options" }, agent, tool, decision, kind, values, reason, submit),
    status,
  );
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const body = { agent: agent.value || undefined, tool: tool.value.trim(), decision: decision.value, reason: reason.value.trim() || undefined };
    if (kind.value) body[kind.value] = values.value.split(",").map((v) => v.trim()).filter(Boolean);
    submit.disabled = true;
    try {
      const { rule } = await ctx.api.addRule(body);
      replace(status, `Added live rule ${rule.id}: it decides from the next tool call.`);
      tool.value = "";
      values.value = "";
      reason.value = "";
      reload();
    } catch (err) {
      replace(status, errorBox(err, "Cannot add the rule"));
    } finally {
      submit.disabled = false;
    }
  });
  return form;
}

function questionCard(ctx, q, reload) {
  const status = h("p", { class: "small", role: "status" });
  const buttons = [];
  const send = async (answer) => {
    for (const b of buttons) b.disabled = true;
    try {
      await ctx.api.answerQuestion(q.id, answer);
      replace(status, "Answered: the agent continues with your answer.");
      reload();
    } catch (err) {
      replace(status, errorBox(err, "Cannot answer"));
      for (const b of buttons) b.disabled = false;
    }
  };
  let answerEl;
  if (q.choices.length) {
    answerEl = h(
      "div",
      { class: "question-choices" },
      q.choices.map((choice, i) => {
        const isDefault = q.default === choice;
        const b = h("button", {
          type: "button",
          class: isDefault ? "primary" : null,
          "data-choice": String(i + 1),
          text: isDefault ? `${choice} (default)` : choice,
        });
        b.addEventListener("click", () => send({ choice: i + 1 }));
        buttons.push(b);
        return [b, " "];
      }),
    );
  } else {
    const text = h("textarea", { rows: 2, name: "answer", placeholder: q.default ? `Your answer (default: ${q.default})` : "Your answer" });
    const b = h("button", { type: "button", class: "primary", "data-action": "answer", text: "Answer" });
    b.addEventListener("click", () => send({ answer: text.value }));
    buttons.push(b);
    answerEl = h("div", { class: "question-free" }, text, h("div", { class: "approval-actions" }, b));
  }
  return h(
    "article",
    { class: ["card", "question"], "data-question": q.id },
    h(
      "header",
      { class: "agent-head" },
      h(
        "div",
        {},
        h("h3", { class: "question-text", text: q.question }),
        h(
          "div",
          { class: "muted small" },
          h("a", { href: ctx.href("history", q.agentId), text: q.agentId }),
          " · ",
          h("a", { href: ctx.href("activations", q.activationId), text: "activation" }),
          " · asked ",
          timeAgo(q.createdAt),
          " · expires ",
          timeAgo(q.expiresAt),
        ),
      ),
      h("span", { class: "badge warn", text: "waiting for you" }),
    ),
    answerEl,
    status,
  );
}

function answeredList(answered, ctx) {
  return h(
    "ul",
    { class: "decided answered" },
    answered.map((q) =>
      h(
        "li",
        { "data-answered": q.id },
        pill(q.status),
        " ",
        h("span", { text: `“${q.question}” of ${q.agentId}` }),
        q.answer != null ? h("span", { text: ` — ${q.answer}` }) : null,
        " by ",
        h("span", { "data-answered-by": "", text: q.answeredBy ?? "?" }),
        " ",
        timeAgo(q.answeredAt),
        q.resolutionReason ? h("span", { class: "muted small", text: ` — ${q.resolutionReason}` }) : null,
        " ",
        h("a", { href: ctx.href("activations", q.activationId), text: "activation" }),
      ),
    ),
  );
}
