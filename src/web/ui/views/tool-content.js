// The images of a rich tool result (`images: [{mimeType, data}]` on a history row's content),
// shown as <img> elements from data URLs (the CSP allows `img-src data:`). Self-contained: any
// view that shows a tool result can append what `toolImages` returns.

import { h } from "../dom.js";

const TYPES = new Set(["image/png", "image/jpeg", "image/gif", "image/webp"]);

/** A `div.tool-images` with one <img> per image of a known type, or null when there are none. */
export function toolImages(images, label = "tool result") {
  const shown = (Array.isArray(images) ? images : []).filter((i) => i && TYPES.has(i.mimeType) && typeof i.data === "string");
  if (!shown.length) return null;
  return h(
    "div",
    { class: "tool-images" },
    shown.map((i, n) => h("img", { src: `data:${i.mimeType};base64,${i.data}`, alt: `image ${n + 1} of ${label}`, class: "tool-image" })),
  );
}
