// The Tools panel: an index of standalone control pages and one page per tool (grouped by
// `presentation.group`), a status summary per tool, and the WebUI controls of the packs. The
// parts are components under `tools/`; this module loads the catalogue and keeps the counts
// fresh as tool calls happen.

import { debounce, errorBox, h } from "../dom.js";
import { catalog, defaultKey, loadCatalog, loadToolStatus } from "./tools/catalog.js";
import { toolIndex } from "./tools/tool-index.js";
import { toolPage } from "./tools/tool-page.js";

export const title = "Tools";

export function render(root, ctx, key) {
  const index = toolIndex(ctx);
  const page = toolPage(ctx, { onAction: () => reloadStatus() });
  root.append(h("div", { class: "tools-layout" }, index.el, page.el));
  let cat = catalog([], []);

  function draw() {
    const current = key || defaultKey(cat);
    index.render(cat, current);
    page.render(cat, current);
  }

  // Counts only: the page (and its forms) stay as they are.
  const reloadStatus = debounce(async () => {
    try {
      cat = { ...cat, toolStatus: await loadToolStatus(ctx.api) };
      if (cache) cache = cat;
      index.updateCounts(cat.toolStatus);
      page.statusChanged(cat.toolStatus);
    } catch {
      /* the next event tries again */
    }
  }, 500);

  ctx.onEvent((event) => {
    if (/^tool_call\./.test(event.type)) reloadStatus();
  });

  if (cache) {
    // Navigating between pages: draw at once from what was loaded, then refresh the counts.
    cat = { ...catalog(cache.toolStatus, cache.entries), definitions: cache.definitions };
    draw();
    reloadStatus();
  } else {
    loadCatalog(ctx.api).then(({ errors, ...loaded }) => {
      cat = loaded;
      if (!errors.length) cache = cat;
      draw();
      if (errors.length) page.el.prepend(...errors.map(([what, err]) => errorBox(err, what)));
    });
  }
}

/** The catalogue of the last visit; the packs only change when the controller restarts. */
let cache = null;
