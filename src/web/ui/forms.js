// A form generated from a WebUI entry's `inputSchema` (a JSON-Schema-like object with
// `properties` and `required`). The schema alone decides the widgets, through standard keywords
// (`type`, `enum`, `format: "date-time"`, `maxLength`) and a few hints the validator ignores:
//
//   format: "agent-id"        a <select> of the project's agents
//   format: "participant-id"  the same, plus "user"
//   format: "channel"         a <select> of the project's channels (free text when none)
//   x-empty-label: "(auto)"   the label of the empty choice of an optional select
//   x-multiline: true | rows  a <textarea> (also for `maxLength` over 300)
//
// Schemas written before the hints keep working: the seed's roster fields (sender, recipient,
// agentA, agentB, targetAgent) and `channel` default to the hints below. The server checks the
// input again: its 400 `details[].path` (`/field`) are shown next to the fields they name.

import { channelLabel, h, uid } from "./dom.js";

/** The hints a string field of the seed's names has when its schema gives no `format`. */
const NAMED_DEFAULTS = {
  sender: { format: "participant-id" },
  agentA: { format: "participant-id" },
  agentB: { format: "participant-id" },
  recipient: { format: "participant-id", "x-empty-label": "(auto)" },
  targetAgent: { format: "agent-id", "x-empty-label": "(any)" },
  channel: { format: "channel" },
};

const ROSTER_FORMATS = new Set(["agent-id", "participant-id"]);

/** The field's schema with the name defaults filled in, and whether it is required. */
function withDefaults(name, raw, required) {
  const prop = raw && typeof raw === "object" ? raw : {};
  const type = Array.isArray(prop.type) ? prop.type.find((t) => t !== "null") : prop.type;
  const defaults = prop.format === undefined && (type === "string" || type === undefined) ? NAMED_DEFAULTS[name] : undefined;
  return { ...defaults, ...prop, __required: required };
}

function fieldKind(prop) {
  const type = Array.isArray(prop.type) ? prop.type.find((t) => t !== "null") : prop.type;
  const stringy = type === "string" || type === undefined;
  if (Array.isArray(prop.enum) && prop.enum.length) return "enum";
  if (stringy && ROSTER_FORMATS.has(prop.format)) return "roster";
  if (stringy && prop.format === "channel") return "channel";
  if (type === "boolean") return "boolean";
  if (type === "number" || type === "integer") return "number";
  if (type === "array" && (prop.items?.type === "string" || !prop.items)) return "lines";
  if (type === "object" || type === "array") return "json";
  if (prop.format === "date-time") return "datetime";
  if (prop["x-multiline"] || (prop.maxLength ?? 0) > 300) return "textarea";
  return "text";
}

/** Rows of a multi-line text field: `x-multiline: <rows>`, else 3. */
function textRows(prop) {
  const rows = prop["x-multiline"];
  return Number.isInteger(rows) && rows > 0 ? rows : 3;
}

/** `2025-01-31T09:00:00Z` → the `YYYY-MM-DDTHH:MM` a datetime-local input shows, in local time. */
export function isoToLocalInput(iso) {
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return "";
  const pad = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

/** A datetime-local value (local time) → ISO 8601 in UTC, or null when it is not a time. */
export function localInputToIso(value) {
  const d = new Date(value);
  return Number.isNaN(d.getTime()) ? null : d.toISOString();
}

function rosterOptions(prop, agents) {
  const options = [];
  const empty = prop["x-empty-label"];
  // An optional field with no default may be left out; say so instead of forcing a value.
  if (empty) options.push({ value: "", label: String(empty) });
  else if (!prop.__required && prop.default === undefined) options.push({ value: "", label: "(default)" });
  if (prop.format === "participant-id") options.push({ value: "user", label: "user" });
  for (const a of agents) {
    const label = a.displayName && a.displayName !== a.id ? `${a.displayName} (${a.id})` : a.id;
    options.push({ value: a.id, label });
  }
  if (prop.default !== undefined && !options.some((o) => o.value === prop.default)) {
    options.push({ value: String(prop.default), label: String(prop.default) });
  }
  return options;
}

function buildControl(name, prop, kind, id, agents, channels) {
  const empty = prop["x-empty-label"];
  const def = prop.default;
  switch (kind) {
    case "channel": {
      // The project's declared channels, when it has any; else free text.
      if (!channels.length) return h("input", { id, name, type: "text", value: def ?? "", autocomplete: "off" });
      const opts = prop.__required ? [] : [h("option", { value: "", text: empty ?? "(none)" })];
      for (const c of channels) opts.push(h("option", { value: c, selected: c === def, text: channelLabel(c) }));
      return h("select", { id, name }, opts);
    }
    case "enum": {
      const opts = [];
      if (!prop.__required && def === undefined) opts.push(h("option", { value: "", text: empty ?? "(any)" }));
      for (const v of prop.enum) opts.push(h("option", { value: String(v), selected: v === def, text: String(v) }));
      return h("select", { id, name }, opts);
    }
    case "roster": {
      if (!agents.length && prop.format !== "participant-id") return h("input", { id, name, type: "text", value: def ?? "" });
      const opts = rosterOptions(prop, agents).map((o) =>
        h("option", { value: o.value, selected: def !== undefined && o.value === String(def), text: o.label }),
      );
      return h("select", { id, name }, opts);
    }
    case "boolean":
      return h("input", { id, name, type: "checkbox", checked: def === true });
    case "number":
      return h("input", {
        id,
        name,
        type: "number",
        min: prop.minimum ?? (prop.exclusiveMinimum !== undefined ? prop.exclusiveMinimum : null),
        max: prop.maximum ?? (prop.exclusiveMaximum !== undefined ? prop.exclusiveMaximum : null),
        step: prop.type === "integer" ? "1" : "any",
        value: def ?? "",
        inputmode: prop.type === "integer" ? "numeric" : "decimal",
      });
    case "datetime":
      return h("input", { id, name, type: "datetime-local", value: def ? isoToLocalInput(def) : "" });
    case "lines":
      return h("textarea", {
        id,
        name,
        rows: 4,
        placeholder: "One per line",
        value: Array.isArray(def) ? def.join("\n") : "",
      });
    case "json":
      return h("textarea", {
        id,
        name,
        rows: 4,
        class: "mono",
        placeholder: "JSON",
        value: def !== undefined ? JSON.stringify(def, null, 2) : "",
      });
    case "textarea":
      return h("textarea", { id, name, rows: textRows(prop), value: def ?? "" });
    default:
      return h("input", {
        id,
        name,
        type: "text",
        value: def ?? "",
        placeholder: prop.examples?.[0] ?? (prop.pattern === "^[0-9]{1,2}:[0-9]{2}$" ? "HH:MM" : null),
        autocomplete: "off",
      });
  }
}

/**
 * Build the form for `schema`. Returns `{form, fields, values(), showErrors(details),
 * clearErrors()}`; `values()` returns `{input}` or `{errors}`: the client-side checks of the
 * schema (required fields, numbers and their bounds, lengths, patterns, allowed values, times,
 * JSON) before anything is sent. The server checks again; its 400 is shown the same way.
 */
export function schemaForm(schema, { agents = [], channels = [], idPrefix = "f", submit } = {}) {
  const props = schema && typeof schema.properties === "object" ? schema.properties : {};
  const required = new Set(Array.isArray(schema?.required) ? schema.required : []);
  const form = h("form", { class: "schema-form", novalidate: true, autocomplete: "off" });
  const fields = new Map();
  const grid = h("div", { class: "fields" });
  for (const [name, raw] of Object.entries(props)) {
    const prop = withDefaults(name, raw, required.has(name));
    const kind = fieldKind(prop);
    const id = uid(`${idPrefix}-${name}`.replace(/[^a-zA-Z0-9_-]/g, "_"));
    const control = buildControl(name, prop, kind, id, agents, channels);
    const helpId = `${id}-help`;
    const errorId = `${id}-error`;
    if (prop.__required) control.setAttribute("aria-required", "true");
    if (prop.description) control.setAttribute("aria-describedby", helpId);
    const label = h(
      "label",
      { for: id },
      name,
      prop.__required ? h("span", { class: "req", title: "required", "aria-hidden": "true", text: " *" }) : null,
    );
    const error = h("div", { class: "field-error", id: errorId, role: "alert", hidden: true });
    const help = prop.description ? h("div", { class: "help", id: helpId, text: prop.description }) : null;
    const wide = kind === "textarea" || kind === "lines" || kind === "json";
    const wrap =
      kind === "boolean"
        ? h("div", { class: ["field", "check"], "data-field": name }, h("div", { class: "check-row" }, control, label), error, help)
        : h("div", { class: ["field", wide ? "wide" : null], "data-field": name }, label, control, error, help);
    grid.append(wrap);
    fields.set(name, { name, prop, kind, control, wrap, error });
  }
  form.append(grid);
  if (submit) form.append(h("div", { class: "form-actions" }, submit));

  function values() {
    const input = {};
    const errors = [];
    for (const f of fields.values()) {
      const { name, prop, kind, control } = f;
      const required = prop.__required;
      if (kind === "boolean") {
        if (control.checked || required || prop.default !== undefined) input[name] = control.checked;
        continue;
      }
      const raw = control.value;
      if (raw === "" || raw.trim() === "") {
        // An empty number input whose text the browser could not parse is not "empty".
        if (kind === "number" && control.validity?.badInput) errors.push({ path: `/${name}`, message: "not a number" });
        else if (required) errors.push({ path: `/${name}`, message: "required: fill in this field" });
        continue;
      }
      switch (kind) {
        case "number": {
          const n = Number(raw);
          const problem = numberProblem(n, prop);
          if (problem) errors.push({ path: `/${name}`, message: problem });
          else input[name] = n;
          break;
        }
        case "datetime": {
          const iso = localInputToIso(raw);
          if (!iso) errors.push({ path: `/${name}`, message: "not a date and time" });
          else input[name] = iso;
          break;
        }
        case "lines": {
          const lines = raw.split("\n").map((l) => l.trim()).filter(Boolean);
          if (lines.length) input[name] = lines;
          break;
        }
        case "json": {
          try {
            input[name] = JSON.parse(raw);
          } catch (e) {
            errors.push({ path: `/${name}`, message: `not valid JSON (${e.message})` });
          }
          break;
        }
        case "textarea":
        default: {
          const problem = textProblem(raw, prop);
          if (problem) errors.push({ path: `/${name}`, message: problem });
          else input[name] = raw;
        }
      }
    }
    return errors.length ? { errors } : { input };
  }

  function clearErrors() {
    for (const f of fields.values()) {
      f.control.classList.remove("invalid");
      f.control.removeAttribute("aria-invalid");
      f.error.hidden = true;
      f.error.textContent = "";
      const described = (f.control.getAttribute("aria-describedby") || "").split(" ").filter((x) => x && x !== f.error.id);
      if (described.length) f.control.setAttribute("aria-describedby", described.join(" "));
      else f.control.removeAttribute("aria-describedby");
    }
  }

  /** Mark the fields named in `details`; returns the details that name no field. */
  function showErrors(details) {
    const unmatched = [];
    let first = null;
    for (const d of details || []) {
      const name = fieldFromDetail(d, fields);
      const f = name ? fields.get(name) : null;
      if (!f) {
        unmatched.push(d);
        continue;
      }
      f.control.classList.add("invalid");
      f.control.setAttribute("aria-invalid", "true");
      f.error.hidden = false;
      f.error.textContent = f.error.textContent ? `${f.error.textContent}; ${d.message}` : d.message ?? "invalid";
      const described = (f.control.getAttribute("aria-describedby") || "").split(" ").filter(Boolean);
      if (!described.includes(f.error.id)) f.control.setAttribute("aria-describedby", [f.error.id, ...described].join(" "));
      first ??= f.control;
    }
    first?.focus();
    return unmatched;
  }

  return { form, fields, values, showErrors, clearErrors };
}

/** What is wrong with number `n` for the schema `prop` (its type and bounds), or null. */
export function numberProblem(n, prop) {
  if (!Number.isFinite(n)) return "not a number";
  const type = Array.isArray(prop.type) ? prop.type.find((t) => t !== "null") : prop.type;
  if (type === "integer" && !Number.isInteger(n)) return "must be a whole number";
  if (typeof prop.minimum === "number" && n < prop.minimum) return `must be at least ${prop.minimum}`;
  if (typeof prop.maximum === "number" && n > prop.maximum) return `must be at most ${prop.maximum}`;
  if (typeof prop.exclusiveMinimum === "number" && n <= prop.exclusiveMinimum) return `must be more than ${prop.exclusiveMinimum}`;
  if (typeof prop.exclusiveMaximum === "number" && n >= prop.exclusiveMaximum) return `must be less than ${prop.exclusiveMaximum}`;
  return null;
}

/** What is wrong with text `raw` for the schema `prop` (length, pattern, allowed values), or null. */
export function textProblem(raw, prop) {
  const length = [...raw].length;
  if (typeof prop.minLength === "number" && length < prop.minLength) return `must be at least ${prop.minLength} characters`;
  if (typeof prop.maxLength === "number" && length > prop.maxLength) return `must be at most ${prop.maxLength} characters`;
  if (Array.isArray(prop.enum) && prop.enum.length && !prop.enum.map(String).includes(raw)) {
    return `must be one of ${prop.enum.join(", ")}`;
  }
  if (typeof prop.pattern === "string") {
    try {
      if (!new RegExp(prop.pattern, "u").test(raw)) return `must match ${prop.pattern}`;
    } catch {
      /* a pattern JavaScript cannot read is left to the server */
    }
  }
  return null;
}

/**
 * The field an error detail is about: the first segment of its JSON pointer (`/field/0` →
 * `field`), or, for a root-level "required" error, the property its message names.
 */
export function fieldFromDetail(detail, fields) {
  const path = String(detail?.path ?? "");
  if (path.startsWith("/")) {
    const first = path.slice(1).split("/")[0].replace(/~1/g, "/").replace(/~0/g, "~");
    if (fields.has(first)) return first;
  }
  const message = String(detail?.message ?? "");
  const m = message.match(/^"([^"]+)" is a required property/) || message.match(/^`?([A-Za-z0-9_.-]+)`? is required/);
  if (m && fields.has(m[1])) return m[1];
  return null;
}
