// The project hero: name and status, the task (clamped when long), the lifecycle buttons for
// the current status, the request-changes form and the submitted report.

import { clip, errorBox, h, pill, pretty, replace, timeAgo, uid } from "../../dom.js";

const TASK_PREVIEW = 420;

/** The hero card. `render()` redraws it from `ctx.state`; `busy()` is true while an action runs. */
export function projectHero(ctx) {
  const el = h("section", { class: "hero card" });
  const ui = { taskExpanded: false, actionError: null, busy: false, requestOpen: false, report: null };
  // Built once: the hero is redrawn on every roster refresh, and a request being typed must
  // survive that.
  let requestForm = null;

  async function lifecycle(fn) {
    ui.busy = true;
    ui.actionError = null;
    render();
    try {
      await fn();
      ui.requestOpen = false;
      requestForm = null;
    } catch (err) {
      ui.actionError = err;
    }
    ui.busy = false;
    await ctx.refreshProject().catch(() => {});
    render();
  }

  async function toggleReport() {
    if (ui.report) {
      ui.report = null;
    } else {
      try {
        const r = await ctx.api.report();
        ui.report = h("pre", { class: "viewer report", text: typeof r === "string" ? r : r?.content ?? pretty(r) });
      } catch (err) {
        ui.report = errorBox(err, "Cannot load the report");
      }
    }
    render();
  }

  function render() {
    const p = ctx.state.project || {};
    const buttons = lifecycleButtons(p.status ?? "unknown", ctx.api, ui, {
      run: lifecycle,
      toggleRequest: () => {
        ui.requestOpen = !ui.requestOpen;
        render();
      },
    });
    if (ui.requestOpen) requestForm ??= requestChangesForm((body) => lifecycle(() => ctx.api.requestChanges(body)));
    replace(
      el,
      heroTop(p),
      taskBlock(String(p.task ?? ""), ui.taskExpanded, () => {
        ui.taskExpanded = !ui.taskExpanded;
        render();
      }),
      buttons.length ? h("div", { class: "actions" }, buttons) : null,
      ui.requestOpen ? requestForm : null,
      p.submittedReport ? reportLine(p.submittedReport, Boolean(ui.report), toggleReport) : null,
      ui.report,
      ui.actionError ? errorBox(ui.actionError) : null,
      ctx.state.projectError ? errorBox(ctx.state.projectError, "Project summary unavailable") : null,
    );
  }

  return { el, render, busy: () => ui.busy };
}

function heroTop(p) {
  return h(
    "div",
    { class: "hero-top" },
    h("div", {}, h("div", { class: "eyebrow", text: "Project" }), h("h1", { text: p.name ?? "" })),
    h(
      "div",
      { class: "hero-status" },
      pill(p.status ?? "unknown", "big"),
      p.updatedAt ? h("span", { class: "muted small" }, "updated ", timeAgo(p.updatedAt)) : null,
    ),
  );
}

/** The task, clamped to a preview when long, with a toggle to show all of it. */
function taskBlock(task, expanded, toggle) {
  const long = task.length > TASK_PREVIEW || task.split("\n").length > 6;
  const clamped = long && !expanded;
  return h(
    "div",
    { class: ["task", clamped ? "clamped" : null] },
    h("div", { class: "eyebrow", text: "Task" }),
    h("p", { class: "task-text", text: clamped ? clip(task, TASK_PREVIEW) : task || "—" }),
    long
      ? h("button", {
          type: "button",
          class: "link",
          "aria-expanded": String(expanded),
          onclick: toggle,
          text: expanded ? "Show less" : "Show the whole task",
        })
      : null,
  );
}

/** The buttons the project's status allows: start, stop, approve, request changes. */
function lifecycleButtons(status, api, ui, { run, toggleRequest }) {
  const act = (label, fn, cls = "secondary") =>
    h("button", { type: "button", class: cls, disabled: ui.busy, onclick: () => run(fn), text: label });
  const buttons = [];
  if (["initialized", "stopped", "failed"].includes(status)) buttons.push(act("Start project", () => api.start(), "primary"));
  if (status === "running") buttons.push(act("Stop", () => api.stop()));
  if (status === "submitted") buttons.push(act("Approve report", () => api.approve(), "primary"));
  if (["submitted", "completed"].includes(status)) {
    buttons.push(
      h("button", {
        type: "button",
        class: "secondary",
        "aria-expanded": String(ui.requestOpen),
        onclick: toggleRequest,
        text: "Request changes",
      }),
    );
  }
  return buttons;
}

/** The request-changes form; `send(body)` runs on submit with a non-empty text. */
function requestChangesForm(send) {
  const id = uid("changes");
  const text = h("textarea", { id, name: "body", rows: 4, placeholder: "What should change?" });
  const form = h(
    "form",
    { class: "request-changes", novalidate: true },
    h("label", { for: id, text: "Changes requested (sent to the coordinator as P2)" }),
    text,
    h("div", { class: "form-actions" }, h("button", { type: "submit", class: "primary", text: "Send request" })),
  );
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    if (!text.value.trim()) {
      text.classList.add("invalid");
      text.setAttribute("aria-invalid", "true");
      text.focus();
      return;
    }
    send(text.value);
  });
  return form;
}

function reportLine(path, shown, toggle) {
  return h(
    "div",
    { class: "report-line" },
    "Final report submitted: ",
    h("code", { text: String(path) }),
    " ",
    h("button", { type: "button", class: "link", onclick: toggle, text: shown ? "Hide report" : "View report" }),
  );
}
