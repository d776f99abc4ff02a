//! `suzumio.toolpack.json`: the manifest types and their validation.
//!
//! The same parser reads the built-in manifests (embedded in the binary) and local ones, so both
//! obey the same rules (reference §3.2 plus ours: tool-name charset, compiled schemas, optional
//! `annotations`, `requiresApproval`, UI-only `presentation`, `relatedTools` on WebUI entries).
//! Rules about module files on disk are checked by the registry, which knows the pack root.

use super::effects::ToolEffects;
use serde_json::Value as Json;

use crate::text::cap_chars;
use crate::toolpack::redact::redact_secrets;

use crate::config::diag::Diagnostics;
use crate::config::node::{Loc, Node, Value};
use crate::config::read::{Obj, index, join};
use crate::toolpack::{is_valid_pack_id, is_valid_tool_name, schema};

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ToolAnnotations {
    pub title: Option<String>,
    pub read_only_hint: Option<bool>,
    pub destructive_hint: Option<bool>,
    pub idempotent_hint: Option<bool>,
    pub open_world_hint: Option<bool>,
}

/// How the WebUI shows a tool or control. Never sent to a model.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Presentation {
    pub label: Option<String>,
    pub icon: Option<String>,
    pub group: Option<String>,
    pub tone: Option<String>,
    /// JSON pointers into a call's input naming what the call touched (a path, a command, a
    /// URL), shown in activity panels and tool-call lists instead of the input itself. A `*`
    /// segment expands an array. Values are joined with ` · `.
    pub target: Vec<String>,
}

/// Where a tool's handler runs. Every tool of a local pack runs in the agent's runner (its
/// `runner.mjs`); a built-in manifest says where each built-in runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunsIn {
    /// In the agent's container, by the runner (built-ins) or the pack's `runner.mjs`.
    Runner,
    /// In the controller, by a Rust handler next to the built-in's declaration.
    Controller,
}

impl RunsIn {
    pub fn as_str(self) -> &'static str {
        match self {
            RunsIn::Runner => "runner",
            RunsIn::Controller => "controller",
        }
    }
}

/// Which manifests may use the keys reserved for built-in packs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ManifestOrigin {
    Builtin,
    Local,
}

/// A call's `target` is capped at this many characters: a shell command can carry a whole heredoc.
pub const TARGET_CAP: usize = 300;

#[derive(Clone, Debug)]
pub struct ToolDefinition {
    pub name: String,
    pub description: String,
    pub input_schema: Json,
    pub annotations: ToolAnnotations,
    pub requires_approval: bool,
    pub presentation: Option<Presentation>,
    pub runs_in: RunsIn,
    /// A call of this tool ends the activation (reference §4.1 step 6).
    pub ends_activation: bool,
    /// `supportInputSchema`: what the pack's runner module may pass to `callSupport` for this
    /// tool (derived data, not the model's input). Without it a pack's `callSupport` input is
    /// not schema-checked.
    pub support_validator: Option<jsonschema::Validator>,
    /// `outputSchema`: what a result's `structuredContent` must match.
    pub output_schema: Option<Json>,
    pub output_validator: Option<jsonschema::Validator>,
    /// `deferrable` (default true): an agent with `toolLoading: deferred` may get it only
    /// through `tool_search`. Tools that end an activation are never deferred.
    pub deferrable: bool,
    /// What an untrusted MCP server claims of the tool: shown, never used for a decision
    /// (`annotations` holds what counts).
    pub server_annotations: Option<ToolAnnotations>,
    /// What a call touches and does (built-in tools declare it; see `effects.rs`).
    pub effects: ToolEffects,
    /// Where the manifest declares it (none for an MCP server's tools).
    pub declared_at: Option<Loc>,
}

impl ToolDefinition {
    /// Whether an agent's deferred loading may hold this tool back.
    pub fn may_defer(&self) -> bool {
        self.deferrable && !self.ends_activation
    }
}

impl ToolDefinition {
    /// What a call touched, from its input and the tool's declared `presentation.target`
    /// pointers: never contents, secrets masked ([`redact_secrets`]), capped at [`TARGET_CAP`]
    /// characters (after masking, so that a cut cannot split a secret from what gives it away).
    pub fn target(&self, input: &Json) -> Option<String> {
        let pointers = self.presentation.as_ref().map(|p| p.target.as_slice()).unwrap_or_default();
        let mut parts = Vec::new();
        for pointer in pointers {
            let values: Vec<String> = super::effects::values_at(input, pointer)
                .into_iter()
                .filter_map(|v| match v {
                    Json::String(s) if !s.is_empty() => Some(redact_secrets(s)),
                    Json::Number(n) => Some(n.to_string()),
                    _ => None,
                })
                .collect();
            if !values.is_empty() {
                parts.push(values.join(", "));
            }
        }
        if parts.is_empty() {
            return None;
        }
        Some(cap_chars(&parts.join(" · "), TARGET_CAP))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WebuiKind {
    Panel,
    Action,
}

impl WebuiKind {
    pub fn as_str(self) -> &'static str {
        match self {
            WebuiKind::Panel => "panel",
            WebuiKind::Action => "action",
        }
    }
}

#[derive(Clone, Debug)]
pub struct WebuiEntry {
    pub id: String,
    pub title: String,
    pub description: Option<String>,
    pub kind: WebuiKind,
    pub input_schema: Option<Json>,
    pub submit_label: Option<String>,
    /// Tool pages this control belongs on; empty = a standalone control page.
    pub related_tools: Vec<String>,
    pub presentation: Option<Presentation>,
    /// The compiled `inputSchema`, used to check every invocation before its handler runs.
    pub validator: Option<jsonschema::Validator>,
}

impl WebuiEntry {
    /// Check an invocation's input against the entry's schema (no schema: anything goes).
    pub fn check_input(&self, input: &Json) -> Result<(), Vec<schema::InputError>> {
        match &self.validator {
            Some(v) => schema::check_input(v, input),
            None => Ok(()),
        }
    }
}

/// A parsed manifest: contents only, module paths still as written.
#[derive(Clone, Debug)]
pub struct Manifest {
    pub id: String,
    pub description: Option<String>,
    pub tools: Vec<ToolDefinition>,
    /// The compiled validator of each tool, in the order of `tools`.
    pub validators: Vec<jsonschema::Validator>,
    pub webui: Vec<WebuiEntry>,
    pub runner: Option<(String, Loc)>,
    pub controller: Option<(String, Loc)>,
    pub loc: Loc,
}

/// `$schema` names the published JSON Schema (`docs/schema/toolpack.schema.json`) for editors;
/// nothing reads it.
const MANIFEST_KEYS: &[&str] = &["$schema", "id", "description", "tools", "webui", "runner", "controller"];
const TOOL_KEYS: &[&str] = &[
    "name",
    "description",
    "inputSchema",
    "annotations",
    "requiresApproval",
    "presentation",
    "runsIn",
    "endsActivation",
    "deferrable",
    "supportInputSchema",
    "outputSchema",
    "effects",
];
/// Keys only the built-in manifests may use: where a tool runs and what its calls do are the
/// binary's business (a pack could otherwise claim to be a harmless coordination tool).
const BUILTIN_ONLY_TOOL_KEYS: &[&str] = &["runsIn", "endsActivation", "effects"];
const WEBUI_KEYS: &[&str] =
    &["id", "title", "description", "kind", "inputSchema", "submitLabel", "relatedTools", "presentation"];
const RETIRED: &[(&str, &str)] = &[
    ("version", "manifests have no version field"),
    ("input_schema", "the key is inputSchema"),
    ("parameters", "the key is inputSchema"),
];

/// Parse a manifest tree. Every problem goes into `d`; `None` only when the document is not an
/// object at all or its id is unusable (the caller then has nothing to register).
pub fn parse_manifest(node: &Node, origin: ManifestOrigin, d: &mut Diagnostics) -> Option<Manifest> {
    if node.as_map().is_none() {
        d.error(Some(&node.loc), "", format!("a toolpack manifest must be a JSON object, got {}", node.kind_name()));
        return None;
    }
    let m = Obj::open(node, "", MANIFEST_KEYS, RETIRED, d)?;
    let id = match m.get("id") {
        Some(Node { value: Value::Str(id), .. }) if !id.is_empty() => id.clone(),
        _ => {
            d.error(Some(&m.key_loc("id")), "id", "Toolpack manifest id is required");
            return None;
        }
    };
    if !is_valid_pack_id(&id) {
        d.error(
            Some(&m.key_loc("id")),
            "id",
            format!("Toolpack id must contain only A-Z, a-z, 0-9, dot, underscore, or dash: {id}"),
        );
        return None;
    }
    let description = m.string("description", d);
    let (tools, validators) = parse_tools(&m, &id, origin, d);
    let webui = parse_webui(&m, d);
    let declared = |key: &str| match m.get(key) {
        Some(Node { value: Value::Seq(items), .. }) => items.len(),
        _ => 0,
    };
    let tools_is_list = m.get("tools").is_some_and(|t| matches!(t.value, Value::Seq(_)));
    if tools_is_list && declared("tools") == 0 && declared("webui") == 0 {
        d.error(Some(&node.loc), "", format!("Toolpack {id} declares no tools or WebUI entries"));
    }
    let module = |key: &str, d: &mut Diagnostics| m.string(key, d).map(|p| (p, m.key_loc(key)));
    let runner = module("runner", d);
    let controller = module("controller", d);
    Some(Manifest { id, description, tools, validators, webui, runner, controller, loc: node.loc.clone() })
}

fn parse_tools(
    m: &Obj,
    pack_id: &str,
    origin: ManifestOrigin,
    d: &mut Diagnostics,
) -> (Vec<ToolDefinition>, Vec<jsonschema::Validator>) {
    let mut tools: Vec<ToolDefinition> = Vec::new();
    let mut validators = Vec::new();
    let Some(Node { value: Value::Seq(items), .. }) = m.get("tools") else {
        d.error(Some(&m.key_loc("tools")), "tools", "Toolpack manifest tools must be an array");
        return (tools, validators);
    };
    for (i, item) in items.iter().enumerate() {
        let path = index("tools", i);
        if item.as_map().is_none() {
            d.error(Some(&item.loc), &path, "Tool definition must be an object");
            continue;
        }
        let Some(t) = Obj::open(item, &path, TOOL_KEYS, RETIRED, d) else {
            continue;
        };
        let name = non_empty(&t, "name", "Toolpack manifest tool.name is required", d);
        let description = non_empty(&t, "description", "Toolpack manifest tool.description is required", d);
        let name = name.filter(|n| {
            let ok = is_valid_tool_name(n);
            if !ok {
                d.error(
                    Some(&t.key_loc("name")),
                    t.path_of("name"),
                    format!("Tool name must be 1-128 characters of A-Z, a-z, 0-9, dot, underscore, or dash: {n}"),
                );
            }
            ok
        });
        if let Some(n) = &name
            && tools.iter().any(|existing| &existing.name == n)
        {
            d.error(
                Some(&t.key_loc("name")),
                t.path_of("name"),
                format!("Duplicate tool {n} in {pack_id} and {pack_id}"),
            );
            continue;
        }
        let input_schema = match t.get("inputSchema") {
            Some(s) if s.as_map().is_some() => {
                let json = s.to_json();
                match schema::compile(&json) {
                    Ok(v) => Some((json, v)),
                    Err(errors) => {
                        let what = format!("inputSchema for tool {}", name.as_deref().unwrap_or("?"));
                        schema_errors(s, &t.path_of("inputSchema"), &what, &errors, d);
                        None
                    }
                }
            }
            _ => {
                d.error(
                    Some(&t.key_loc("inputSchema")),
                    t.path_of("inputSchema"),
                    "Tool definition inputSchema must be an object",
                );
                None
            }
        };
        let tool_name = name.as_deref().unwrap_or("?").to_string();
        let support_schema = optional_schema(&t, "supportInputSchema", &tool_name, d);
        let output_schema = optional_schema(&t, "outputSchema", &tool_name, d);
        let annotations = parse_annotations(&t, d);
        let requires_approval = t.bool("requiresApproval", d).unwrap_or(false);
        let presentation = parse_presentation(&t, d);
        if origin == ManifestOrigin::Local {
            for key in BUILTIN_ONLY_TOOL_KEYS {
                if t.get(key).is_some() {
                    d.error(
                        Some(&t.key_loc(key)),
                        t.path_of(key),
                        format!("{key} is reserved for built-in packs: a local pack's tools run in its runner module"),
                    );
                }
            }
        }
        let runs_in = match t.one_of("runsIn", &["runner", "controller"], d).as_deref() {
            Some("controller") => RunsIn::Controller,
            _ => RunsIn::Runner,
        };
        let ends_activation = t.bool("endsActivation", d).unwrap_or(false);
        let effects =
            if origin == ManifestOrigin::Local { ToolEffects::default() } else { super::effects::parse(&t, d) };
        let deferrable = t.bool("deferrable", d).unwrap_or(true);
        if ends_activation && runs_in != RunsIn::Controller {
            d.error(
                Some(&t.key_loc("endsActivation")),
                t.path_of("endsActivation"),
                "only controller tools can end an activation",
            );
        }
        if let (Some(name), Some(description), Some((input_schema, validator))) = (name, description, input_schema) {
            tools.push(ToolDefinition {
                name,
                description,
                input_schema,
                annotations,
                requires_approval,
                presentation,
                runs_in,
                ends_activation,
                deferrable,
                support_validator: support_schema.map(|(_, v)| v),
                output_validator: output_schema.as_ref().map(|(_, v)| v.clone()),
                output_schema: output_schema.map(|(json, _)| json),
                server_annotations: None,
                effects,
                declared_at: Some(item.loc.clone()),
            });
            validators.push(validator);
        }
    }
    (tools, validators)
}

/// A tool's optional schema under `key` (`supportInputSchema`, `outputSchema`), compiled.
fn optional_schema(t: &Obj, key: &str, tool: &str, d: &mut Diagnostics) -> Option<(Json, jsonschema::Validator)> {
    let s = t.get(key)?;
    if s.as_map().is_none() {
        d.error(Some(&t.key_loc(key)), t.path_of(key), format!("Tool definition {key} must be an object"));
        return None;
    }
    let json = s.to_json();
    match schema::compile(&json) {
        Ok(v) => Some((json, v)),
        Err(errors) => {
            schema_errors(s, &t.path_of(key), &format!("{key} for tool {tool}"), &errors, d);
            None
        }
    }
}

/// Each mistake of a schema (`what`: "inputSchema for tool x") at its own place in the file.
fn schema_errors(s: &Node, path: &str, what: &str, errors: &[schema::SchemaError], d: &mut Diagnostics) {
    for e in errors {
        d.error(
            Some(&s.at_pointer(&e.pointer).unwrap_or(s).loc),
            path,
            format!("invalid {what} at {}: {}", e.pointer, e.message),
        );
    }
}

fn non_empty(o: &Obj, key: &str, message: &str, d: &mut Diagnostics) -> Option<String> {
    match o.get(key) {
        Some(Node { value: Value::Str(s), .. }) if !s.trim().is_empty() => Some(s.clone()),
        _ => {
            d.error(Some(&o.key_loc(key)), o.path_of(key), message);
            None
        }
    }
}

fn parse_annotations(t: &Obj, d: &mut Diagnostics) -> ToolAnnotations {
    let keys = &["title", "readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"];
    let Some(a) = t.get("annotations").and_then(|n| Obj::open(n, &t.path_of("annotations"), keys, &[], d)) else {
        return ToolAnnotations::default();
    };
    ToolAnnotations {
        title: a.string("title", d),
        read_only_hint: a.bool("readOnlyHint", d),
        destructive_hint: a.bool("destructiveHint", d),
        idempotent_hint: a.bool("idempotentHint", d),
        open_world_hint: a.bool("openWorldHint", d),
    }
}

fn parse_presentation(o: &Obj, d: &mut Diagnostics) -> Option<Presentation> {
    let keys = &["label", "icon", "group", "tone", "target"];
    let p = Obj::open(o.get("presentation")?, &o.path_of("presentation"), keys, &[], d)?;
    let tone = p.one_of("tone", &["info", "success", "warning", "error"], d);
    let mut target = Vec::new();
    for (pointer, loc) in p.string_list("target", d).unwrap_or_default() {
        if pointer.starts_with('/') {
            target.push(pointer);
        } else {
            d.error(
                Some(&loc),
                p.path_of("target"),
                format!("target must be JSON pointers like /path, got {pointer:?}"),
            );
        }
    }
    Some(Presentation {
        label: p.string("label", d),
        icon: p.string("icon", d),
        group: p.string("group", d),
        tone,
        target,
    })
}

fn parse_webui(m: &Obj, d: &mut Diagnostics) -> Vec<WebuiEntry> {
    let mut entries: Vec<WebuiEntry> = Vec::new();
    let Some(node) = m.get("webui") else {
        return entries;
    };
    let Value::Seq(items) = &node.value else {
        d.error(Some(&node.loc), "webui", "Toolpack manifest webui must be an array");
        return entries;
    };
    for (i, item) in items.iter().enumerate() {
        let path = index("webui", i);
        if item.as_map().is_none() {
            d.error(Some(&item.loc), &path, "Toolpack WebUI definition must be an object");
            continue;
        }
        let Some(w) = Obj::open(item, &path, WEBUI_KEYS, RETIRED, d) else {
            continue;
        };
        let id = non_empty(&w, "id", "Toolpack manifest webui.id is required", d).filter(|id| {
            let ok = is_valid_pack_id(id);
            if !ok {
                d.error(
                    Some(&w.key_loc("id")),
                    w.path_of("id"),
                    format!("WebUI entry id must contain only A-Z, a-z, 0-9, dot, underscore, or dash: {id}"),
                );
            }
            ok
        });
        if let Some(id) = &id
            && entries.iter().any(|e| &e.id == id)
        {
            d.error(Some(&w.key_loc("id")), w.path_of("id"), format!("Duplicate WebUI entry {id}"));
            continue;
        }
        let title = non_empty(&w, "title", "Toolpack manifest webui.title is required", d);
        let kind = match w.get("kind") {
            None => Some(WebuiKind::Panel),
            Some(Node { value: Value::Str(k), .. }) if k == "panel" => Some(WebuiKind::Panel),
            Some(Node { value: Value::Str(k), .. }) if k == "action" => Some(WebuiKind::Action),
            Some(other) => {
                let shown = other.as_str().map_or_else(|| other.to_json().to_string(), str::to_string);
                d.error(Some(&other.loc), w.path_of("kind"), format!("Invalid WebUI entry kind: {shown}"));
                None
            }
        };
        let input_schema = match w.get("inputSchema") {
            None => Some(None),
            Some(s) if s.as_map().is_some() => {
                let json = s.to_json();
                // WebUI inputs are validated like tool inputs, so the schema must compile.
                match schema::compile(&json) {
                    Ok(v) => Some(Some((json, v))),
                    Err(errors) => {
                        let what = format!("inputSchema for WebUI entry {}", id.as_deref().unwrap_or("?"));
                        schema_errors(s, &w.path_of("inputSchema"), &what, &errors, d);
                        None
                    }
                }
            }
            Some(s) => {
                d.error(Some(&s.loc), w.path_of("inputSchema"), "Toolpack WebUI inputSchema must be an object");
                None
            }
        };
        let related_tools = w.string_list("relatedTools", d).unwrap_or_default().into_iter().map(|(t, _)| t).collect();
        let submit_label = w.string("submitLabel", d);
        let description = w.string("description", d);
        let presentation = parse_presentation(&w, d);
        if let (Some(id), Some(title), Some(kind), Some(input_schema)) = (id, title, kind, input_schema) {
            let (input_schema, validator) = input_schema.unzip();
            entries.push(WebuiEntry {
                validator,
                id,
                title,
                description,
                kind,
                input_schema,
                submit_label,
                related_tools,
                presentation,
            });
        }
    }
    entries
}

/// Key path helper re-exported for the registry's messages.
pub fn tool_path(i: usize, key: &str) -> String {
    join(&index("tools", i), key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool_with_targets(pointers: &[&str]) -> ToolDefinition {
        ToolDefinition {
            name: "shell.exec".into(),
            description: String::new(),
            input_schema: json!({"type": "object"}),
            annotations: ToolAnnotations::default(),
            requires_approval: false,
            presentation: Some(Presentation {
                target: pointers.iter().map(|p| p.to_string()).collect(),
                ..Presentation::default()
            }),
            runs_in: RunsIn::Runner,
            ends_activation: false,
            deferrable: true,
            support_validator: None,
            output_schema: None,
            output_validator: None,
            server_annotations: None,
            effects: ToolEffects::default(),
            declared_at: None,
        }
    }

    #[test]
    fn a_manifest_may_name_its_json_schema() {
        let text = r#"{"$schema": "../../docs/schema/toolpack.schema.json", "id": "notes",
            "tools": [{"name": "notes.add", "description": "Add.", "inputSchema": {"type": "object"}}]}"#;
        let node = crate::config::node::parse_json(text, std::path::Path::new("m.json").into()).unwrap();
        let mut d = Diagnostics::default();
        let manifest = parse_manifest(&node, ManifestOrigin::Local, &mut d);
        assert!(d.errors.is_empty(), "{:?}", d.errors);
        assert_eq!(manifest.map(|m| m.tools.len()), Some(1));
    }

    #[test]
    fn a_target_is_masked_then_capped() {
        let def = tool_with_targets(&["/command", "/cwd"]);
        let input = json!({"command": "PGPASSWORD=s3cret psql -h db", "cwd": "/workspace"});
        assert_eq!(def.target(&input).as_deref(), Some("PGPASSWORD=*** psql -h db · /workspace"));
        let long = format!("curl https://bob:pw@x.example/{}", "a".repeat(400));
        let target = def.target(&json!({"command": long})).unwrap();
        assert!(target.starts_with("curl https://***@x.example/"), "{target}");
        assert_eq!(target.chars().count(), TARGET_CAP);
        assert_eq!(tool_with_targets(&["/url"]).target(&json!({"command": "x"})), None);
    }
}
