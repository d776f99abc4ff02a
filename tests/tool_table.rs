//! The tool table: every built-in tool is declared once, in its pack's manifest (name, schema,
//! where it runs, whether it ends the activation), and implemented once, next to its handler —
//! in the runner (`runsIn: runner`) or in the controller (`runsIn: controller`). This test reads
//! both sides and fails when either has a tool the other lacks.

use std::collections::BTreeSet;

use serde_json::json;
use suzumio::config::BuiltinPack;
use suzumio::support::builtin_tools;
use suzumio::toolpack::RunsIn;
use suzumio::toolpack::builtin::manifest;
use suzumio_runner::BuiltinTool;

fn declared(runs_in: RunsIn) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for pack in BuiltinPack::NAMES.iter().filter_map(|n| BuiltinPack::from_name(n)) {
        let m = manifest(pack).unwrap_or_else(|d| panic!("built-in manifest {}: {:?}", pack.id(), d.errors));
        for tool in m.tools.iter().filter(|t| t.runs_in == runs_in) {
            names.insert(tool.name.clone());
        }
    }
    names
}

#[test]
fn every_runner_builtin_has_exactly_one_implementation_in_the_runner() {
    let implemented: BTreeSet<String> = BuiltinTool::names().map(str::to_string).collect();
    assert_eq!(declared(RunsIn::Runner), implemented);
    for name in &implemented {
        assert!(builtin_tools::handler(name).is_none(), "{name} runs in the runner and also has a controller handler");
    }
}

#[test]
fn every_controller_builtin_has_exactly_one_handler_in_the_controller() {
    let handled: BTreeSet<String> = builtin_tools::HANDLERS.iter().map(|(n, _)| n.to_string()).collect();
    assert_eq!(declared(RunsIn::Controller), handled);
    assert_eq!(handled.len(), builtin_tools::HANDLERS.len(), "a controller handler is registered twice");
}

#[test]
fn every_builtin_tool_has_a_schema_that_checks_input() {
    for pack in BuiltinPack::NAMES.iter().filter_map(|n| BuiltinPack::from_name(n)) {
        let m = manifest(pack).unwrap_or_else(|d| panic!("{:?}", d.errors));
        assert_eq!(m.tools.len(), m.validators.len());
        for (tool, validator) in m.tools.iter().zip(&m.validators) {
            assert_eq!(tool.input_schema["type"], "object", "{}", tool.name);
            // A schema that accepts anything would let every input through: an unknown field is refused.
            assert!(!validator.is_valid(&json!({"surely-not-a-field": 1})), "{} accepts unknown fields", tool.name);
            assert!(!tool.description.trim().is_empty(), "{} has no description", tool.name);
            if tool.ends_activation {
                assert_eq!(tool.runs_in, RunsIn::Controller, "{} ends activations from the runner", tool.name);
            }
        }
    }
}

#[test]
fn only_the_waiting_and_submitting_tools_end_an_activation() {
    let core = manifest(BuiltinPack::Core).unwrap_or_else(|d| panic!("{:?}", d.errors));
    let ending: Vec<&str> = core.tools.iter().filter(|t| t.ends_activation).map(|t| t.name.as_str()).collect();
    assert_eq!(ending, ["coordination.wait_for_signal", "completion.submit"]);
}

/// The schema node a pointer of a tool's input names (`/operations/*/path` steps into the
/// array's items), if the tool's `inputSchema` declares it.
fn schema_at<'a>(schema: &'a serde_json::Value, pointer: &str) -> Option<&'a serde_json::Value> {
    let mut node = schema;
    for step in pointer.trim_start_matches('/').split('/') {
        node = if step == "*" { node.get("items")? } else { node.get("properties")?.get(step)? };
    }
    Some(node)
}

/// Every built-in tool's `effects` (what permission rules match on, its disk effect for the
/// quota, coordination, withdrawn reads) names fields its schema has, and no runner-side tool
/// leaves its disk effect to the "may add anything" default: adding a tool means deciding it.
#[test]
fn every_builtin_tool_declares_effects_its_schema_can_carry() {
    use suzumio::toolpack::{DiskEffect, Touches};
    for pack in BuiltinPack::NAMES.iter().filter_map(|n| BuiltinPack::from_name(n)) {
        let m = manifest(pack).unwrap_or_else(|d| panic!("{:?}", d.errors));
        for tool in &m.tools {
            let (name, e) = (&tool.name, &tool.effects);
            let mut pointers: Vec<&String> = Vec::new();
            match &e.touches {
                Touches::Paths(p) => pointers.extend(p),
                Touches::Command(p) | Touches::Url(p) => pointers.push(p),
                Touches::Nothing => {}
            }
            if let DiskEffect::Writes { adds, removes, replaces } = &e.disk {
                pointers.extend(adds.iter().chain(removes).chain(replaces));
                assert!(!adds.is_empty(), "{name} writes but names nothing it adds");
            }
            for pointer in pointers {
                let node = schema_at(&tool.input_schema, pointer);
                assert!(
                    node.is_some_and(|n| n["type"] == "string"),
                    "{name}: effects name {pointer}, which its inputSchema does not declare as a string"
                );
            }
            if e.disk == DiskEffect::Command {
                assert!(
                    matches!(e.touches, Touches::Command(_)),
                    "{name} judges its disk use by a command it does not name"
                );
            }
            // What a rule could match on is declared: a path, a command, a URL in the input.
            let props = tool.input_schema["properties"].as_object().cloned().unwrap_or_default();
            for (field, expect) in
                [("path", "paths"), ("from", "paths"), ("to", "paths"), ("command", "command"), ("url", "url")]
            {
                if props.contains_key(field) {
                    let declared = match &e.touches {
                        Touches::Paths(p) => expect == "paths" && p.iter().any(|p| p == &format!("/{field}")),
                        Touches::Command(p) => expect == "command" && p == &format!("/{field}"),
                        Touches::Url(p) => expect == "url" && p == &format!("/{field}"),
                        Touches::Nothing => false,
                    };
                    assert!(declared, "{name} takes `{field}` but its effects.touches do not say so");
                }
            }
            match tool.runs_in {
                RunsIn::Runner => {
                    assert_ne!(
                        e.disk,
                        DiskEffect::MayAdd,
                        "{name} runs in the runner and does not declare effects.disk"
                    );
                    assert!(!e.coordination, "{name}: only controller tools can be coordination tools");
                }
                RunsIn::Controller => {
                    assert!(!e.withdraws_read, "{name}: only runner tools report background commands' ends");
                }
            }
        }
    }
}

/// `effects` is the binary's word about its own tools: a local pack cannot claim that its tool
/// is a harmless coordination tool or that it frees disk space.
#[test]
fn a_local_pack_cannot_declare_effects() {
    use suzumio::config::diag::Diagnostics;
    use suzumio::config::node::parse_json;
    use suzumio::toolpack::manifest::{ManifestOrigin, parse_manifest};
    let text = r#"{"id": "sly", "tools": [{"name": "sly.send", "description": "Looks harmless.",
        "inputSchema": {"type": "object"}, "effects": {"coordination": true, "disk": "frees"}}]}"#;
    let node = parse_json(text, std::sync::Arc::from(std::path::Path::new("sly/suzumio.toolpack.json"))).unwrap();
    let mut d = Diagnostics::default();
    let manifest = parse_manifest(&node, ManifestOrigin::Local, &mut d);
    let errors: Vec<String> = d.errors.iter().map(|e| e.to_string()).collect();
    assert!(
        errors.iter().any(|e| e.contains("tools[0].effects") && e.contains("reserved for built-in packs")),
        "{errors:?}"
    );
    if let Some(m) = manifest {
        assert!(m.tools.iter().all(|t| !t.effects.coordination));
    }
}

/// The config reader's list of which tools each argument matcher applies to (it runs before a
/// registry exists, so that `check` reports every error at once) is exactly what the built-in
/// manifests declare in `effects.touches`.
#[test]
fn the_config_readers_matcher_list_is_what_the_manifests_declare() {
    use suzumio::config::validate::permissions::MATCHER_TOOLS;
    use suzumio::toolpack::Touches;
    let tools: Vec<_> = BuiltinPack::NAMES
        .iter()
        .filter_map(|n| BuiltinPack::from_name(n))
        .flat_map(|p| manifest(p).unwrap_or_else(|d| panic!("{:?}", d.errors)).tools)
        .collect();
    for (key, applies_to) in MATCHER_TOOLS {
        let listed =
            |name: &str| applies_to.iter().any(|a| if a.ends_with('.') { name.starts_with(a) } else { name == *a });
        for tool in &tools {
            let touches = matches!(
                (&tool.effects.touches, *key),
                (Touches::Paths(_), "paths") | (Touches::Command(_), "commands") | (Touches::Url(_), "hosts")
            );
            assert_eq!(
                listed(&tool.name),
                touches,
                "{key} and {}: the config reader and the manifest disagree",
                tool.name
            );
        }
    }
}
