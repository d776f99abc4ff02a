// What the Tools panel shows: the tools (with their status counts) and the packs' WebUI
// entries, and which entries go on which tool page.
//
// Controls attach to tool pages through the manifests' `relatedTools` (falling back to an
// entry whose id is the tool's name), never through a list kept here. An entry that attaches
// to no tool gets a standalone page `control:<pack>/<entry>`.

export const CONTROL_PREFIX = "control:";

export const entryKey = (e) => `${e.toolpackId}/${e.id}`;

const itemsOf = (value) => (Array.isArray(value) ? value : value?.items ?? []);

/** Which tool pages each entry belongs on, and which entries stand alone. */
export function attachControls(toolNames, entries) {
  const names = new Set(toolNames);
  const byTool = new Map(toolNames.map((t) => [t, []]));
  const standalone = [];
  for (const entry of entries) {
    const related = (Array.isArray(entry.relatedTools) ? entry.relatedTools : []).filter((t) => names.has(t));
    const targets = related.length ? related : names.has(entry.id) ? [entry.id] : [];
    if (targets.length === 0) standalone.push(entry);
    for (const t of targets) byTool.get(t).push(entry);
  }
  return { byTool, standalone };
}

/** A catalogue `{toolStatus, entries, attached}` from the two lists. */
export function catalog(toolStatus, entries) {
  return { toolStatus, entries, attached: attachControls(toolStatus.map((t) => t.tool), entries) };
}

/** Fetch the catalogue; `errors` are `[what, error]` for the lists that failed to load. */
export async function loadCatalog(api) {
  const [status, ui, defs] = await Promise.allSettled([api.toolStatus(), api.toolUi(), api.toolCatalog()]);
  const errors = [];
  let toolStatus = [];
  let entries = [];
  if (status.status === "fulfilled") toolStatus = itemsOf(status.value);
  else errors.push(["Tool status", status.reason]);
  if (ui.status === "fulfilled") entries = itemsOf(ui.value);
  else errors.push(["WebUI controls", ui.reason]);
  if (status.status === "rejected") {
    // Without tool status, still offer a page per tool the controls name.
    const named = new Set(entries.flatMap((e) => (Array.isArray(e.relatedTools) ? e.relatedTools : [])));
    toolStatus = [...named].sort().map((tool) => ({ tool, presentation: entries.find((e) => e.id === tool)?.presentation }));
  }
  // The catalog (`GET …/tools`) says who may call each tool and how each call is decided.
  const definitions = new Map();
  if (defs.status === "fulfilled") for (const d of itemsOf(defs.value)) definitions.set(d.name, d);
  else errors.push(["Tool catalog", defs.reason]);
  return { ...catalog(toolStatus, entries), definitions, errors };
}

export async function loadToolStatus(api) {
  return itemsOf(await api.toolStatus());
}

/** The page shown when the route names none: the first standalone control, else the first tool. */
export function defaultKey({ attached, toolStatus }) {
  if (attached.standalone.length) return CONTROL_PREFIX + entryKey(attached.standalone[0]);
  return toolStatus[0]?.tool ?? "";
}

export function labelOf(presentation, fallback) {
  const p = presentation || {};
  const text = p.label || fallback;
  return p.icon ? `${p.icon} ${text}` : text;
}

/** Tools grouped by `presentation.group` (else their pack), in order of first appearance. */
export function groupTools(tools) {
  const groups = new Map();
  for (const t of tools) {
    const g = t.presentation?.group || t.toolpackId || "other";
    if (!groups.has(g)) groups.set(g, []);
    groups.get(g).push(t);
  }
  return groups;
}
