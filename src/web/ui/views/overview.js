// Overview: the project hero (status, task, lifecycle buttons, report), paused agents and today's
// usage against the budget, counters, the agent
// roster with live status, and a composer to send a message to an agent or a channel, the
// recent activity and who talks to whom. Each
// part is a component under `overview/`; this module lays them out and redraws them.

import { h } from "../dom.js";
import { activityFeed } from "./overview/activity.js";
import { budgetPanel } from "./overview/budget.js";
import { messageComposer } from "./overview/composer.js";
import { projectCounters } from "./overview/counters.js";
import { messageGraph } from "./overview/graph.js";
import { projectHero } from "./overview/hero.js";
import { agentRoster } from "./overview/roster.js";

export const title = "Overview";

export function render(root, ctx) {
  const hero = projectHero(ctx);
  const budget = budgetPanel(ctx);
  const counters = projectCounters(ctx);
  const roster = agentRoster(ctx);
  const composer = messageComposer(ctx);
  const activity = activityFeed(ctx);
  const graph = messageGraph(ctx);
  root.append(
    hero.el,
    budget.el,
    counters.el,
    h("div", { class: "overview-grid" }, roster.el, composer.el),
    h("div", { class: "overview-grid" }, activity.el, graph.el),
  );
  const redraw = () => {
    if (!hero.busy()) hero.render();
    budget.render();
    counters.render();
    roster.render();
    composer.refresh();
    activity.render();
  };
  redraw();
  ctx.onState(redraw);
  ctx.onLive(roster.live);
  ctx.onEvent(activity.render);
}
