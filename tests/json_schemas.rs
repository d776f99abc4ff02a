//! The published JSON Schemas (`docs/schema/`) against the validator's own fixtures: every
//! project and manifest the validator accepts must be schema-valid, and the invalid fixtures whose
//! fault a schema can express (unknown keys, wrong types, bad enums, patterns, ranges) must be
//! rejected. Those only the validator's semantic checks catch (files on disk, cross-references,
//! JavaScript, uniqueness by key) are listed, with why, and must then be schema-valid: a schema
//! stricter than the validator would flag files `suzumio check` accepts.
//!
//! Configs are read with the repository's own loader, so what is validated is the document the
//! validator sees: `${VAR}` substituted (from the map below), `@import(...)` values replaced by
//! what they import and `extends` merged. An editor sees the file as written, where an
//! `@import(...)` value is a string; the schema documents that.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;
use support::repo_root;
use suzumio::config::load::{EnvSource, Loader};

struct FixtureEnv;

impl EnvSource for FixtureEnv {
    fn var(&self, name: &str) -> Option<String> {
        BTreeMap::from([("SUZUMIO_TEST_VALUE", "value"), ("WORKPACK_CONTROLLER_SECRET", "secret")])
            .get(name)
            .map(|v| v.to_string())
    }
}

/// Invalid fixtures whose `suzumio.yaml` the config schema rejects.
const CONFIG_REJECTED: &[&str] = &[
    "agent_count_too_large",                      // maximum
    "agent_count_zero",                           // minimum
    "agent_env_suzumio_prefix",                   // propertyNames
    "allowlist_invalid_pattern",                  // tool pattern
    "group_in_a_rule",                            // a group where a rule names tools
    "unknown_tool_group",                         // a group name in capitals
    "backend_kind_docker_chat",                   // enum
    "budget_limits",                              // types, ranges, unknown keys
    "collects_every_error",                       // unknown built-in pack, unknown key
    "communication_pm_routine_verifier_priority", // unknown (retired) key
    "communication_unknown_priority",             // enum
    "disk_quota_not_a_size",                      // size pattern
    "empty_agents",                               // minProperties
    "mcp_entries",                                // oneOf command | url, patterns
    "missing_name",                               // required
    "model_list_with_provider",                   // dependentSchemas
    "mount_target_relative",                      // pattern
    "observability_key",                          // unknown (retired) key
    "permissions_rules",                          // enums, patterns, unknown keys
    "permissions_reviewer_values",                // minimum, maximum, unknown keys
    "prewarm_unknown",                            // enum
    "provider_chunk_timeout",                     // minimum
    "reserved_agent_id_user",                     // propertyNames
    "reserved_mount_target",                      // pattern
    "reserved_mount_target_run_suzumio",          // pattern
    "runner_mode",                                // unknown (retired) key
    "runner_models_missing",                      // required
    "scheduler_kind",                             // unknown (retired) key
    "tool_loading_unknown",                       // enum
    "toolpack_path_http",                         // pattern
    "unknown_agent_key",                          // unknown key
    "unknown_builtin_toolpack",                   // enum
    "unknown_top_level_key",                      // unknown key, required
];

/// Invalid fixtures whose config is schema-valid and one of whose manifests the toolpack schema
/// rejects.
const MANIFEST_REJECTED: &[&str] = &[
    "manifest_id_bad_charset",     // pattern
    "manifest_id_missing",         // required
    "manifest_tools_not_array",    // type
    "manifest_two_schema_errors",  // the JSON Schema meta-schema, twice
    "pack_without_tools_or_webui", // anyOf minItems
    "runner_https",                // pattern
    "runner_js_module",            // pattern
    "runner_outside_root",         // pattern
    "schema_property_type_typo",   // the draft 2020-12 meta-schema
    "schema_type_typo",            // const "object"
    "tool_description_missing",    // required
    "tool_name_with_space",        // pattern
    "webui_bad_kind",              // enum
];

/// Invalid fixtures no schema can reject, and why. Their config and manifests must be
/// schema-valid (when they can be read at all).
const SEMANTIC_ONLY: &[(&str, &str)] = &[
    ("agent_id_collision_with_count", "ids produced by count expansion"),
    ("agent_unknown_model_preset", "cross-reference to presets"),
    ("agent_without_model", "depends on whether backend.runner.model is set"),
    ("controller_module_missing", "a file on disk"),
    ("coordinator_unknown", "cross-reference to agents"),
    ("disk_quota_too_small", "a size's magnitude (512k < 1m) in a string"),
    ("duplicate_tool_across_packs", "uniqueness across files"),
    ("duplicate_toolpack", "uniqueness of a list's entries by name"),
    ("local_pack_declares_where_it_runs", "the schema serves built-in manifests too, which may say where tools run"),
    ("manifest_id_mismatch", "cross-reference between suzumio.yaml and the manifest"),
    ("manifest_missing", "a file on disk"),
    ("mount_source_missing", "a file on disk"),
    ("no_coordinator_for_policy_or_nudge", "whether an agent called pm exists"),
    ("permissions_hook_pack", "cross-reference to the packs"),
    ("permissions_reviewer", "cross-reference to presets"),
    ("runner_module_missing", "a file on disk"),
    ("runner_syntax_error", "JavaScript"),
    ("runner_tool_without_handler", "JavaScript"),
    ("toolpack_path_is_file", "a file on disk"),
    ("toolpack_path_missing", "a file on disk"),
    ("webui_duplicate_entry_id", "uniqueness of a list's entries by key"),
];

/// Invalid fixtures the loader refuses before any schema could see a document.
const LOADER_REJECTED: &[&str] = &[
    "circular_import",
    "extends_not_list",
    "import_device",
    "import_https",
    "import_outside_project",
    "import_too_deep",
    "manifest_invalid_json",
    "yaml_alias_bomb",
    "yaml_syntax_error",
];

fn validator(name: &str) -> jsonschema::Validator {
    let path = repo_root().join("docs/schema").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let schema: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    jsonschema::draft202012::new(&schema).unwrap_or_else(|e| panic!("{name} does not compile: {e}"))
}

/// The document the validator sees, or `None` when the loader refuses the file.
fn load_config(file: &Path) -> Option<Value> {
    let mut loader = Loader::new(&FixtureEnv);
    let node = loader.load_root(file)?;
    loader.diags.errors.is_empty().then(|| node.to_json())
}

fn schema_errors(v: &jsonschema::Validator, doc: &Value) -> Vec<String> {
    v.iter_errors(doc).map(|e| format!("{}: {e}", e.instance_path())).collect()
}

fn manifests_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            manifests_under(&path, out);
        } else if path.file_name().is_some_and(|n| n == "suzumio.toolpack.json") {
            out.push(path);
        }
    }
}

fn subdirs(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> =
        std::fs::read_dir(dir).expect("read dir").flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect();
    out.sort();
    out
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn every_valid_config_matches_the_config_schema() {
    let schema = validator("suzumio.schema.json");
    let root = repo_root();
    let mut files: Vec<PathBuf> = Vec::new();
    for parent in ["tests/fixtures/valid", "tests/fixtures/projects", "projects"] {
        files.extend(subdirs(&root.join(parent)).into_iter().map(|d| d.join("suzumio.yaml")).filter(|f| f.is_file()));
    }
    assert!(files.len() >= 20, "expected the fixture projects, found {files:?}");
    for file in files {
        let doc = load_config(&file).unwrap_or_else(|| panic!("{} does not load", file.display()));
        let errors = schema_errors(&schema, &doc);
        assert!(errors.is_empty(), "{} is valid but the schema refuses it:\n{}", file.display(), errors.join("\n"));
    }
}

#[test]
fn every_valid_manifest_matches_the_toolpack_schema() {
    let schema = validator("toolpack.schema.json");
    let root = repo_root();
    let mut files = Vec::new();
    for parent in
        ["tests/fixtures/valid", "tests/fixtures/projects", "tests/fixtures/node-style", "toolpacks", "projects"]
    {
        manifests_under(&root.join(parent), &mut files);
    }
    let builtin = root.join("crates/core/src/toolpack/builtin");
    let mut builtins: Vec<PathBuf> =
        std::fs::read_dir(&builtin).expect("builtin dir").flatten().map(|e| e.path()).collect();
    builtins.retain(|p| p.extension().is_some_and(|e| e == "json"));
    assert!(builtins.len() >= 4, "the built-in manifests: {builtins:?}");
    files.extend(builtins);
    assert!(files.len() >= 20, "expected the fixture manifests, found {files:?}");
    for file in files {
        let errors = schema_errors(&schema, &read_json(&file));
        assert!(errors.is_empty(), "{} is valid but the schema refuses it:\n{}", file.display(), errors.join("\n"));
    }
}

#[test]
fn the_schemas_reject_the_invalid_fixtures_they_can_express() {
    let config_schema = validator("suzumio.schema.json");
    let manifest_schema = validator("toolpack.schema.json");
    let invalid = repo_root().join("tests/fixtures/invalid");
    let semantic: Vec<&str> = SEMANTIC_ONLY.iter().map(|(name, _)| *name).collect();
    for dir in subdirs(&invalid) {
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let lists = [CONFIG_REJECTED, MANIFEST_REJECTED, &semantic, LOADER_REJECTED];
        let listed = lists.iter().filter(|l| l.contains(&name.as_str())).count();
        assert_eq!(listed, 1, "{name}: list it in exactly one of the lists of this test");
        let mut manifests = Vec::new();
        manifests_under(&dir, &mut manifests);
        if LOADER_REJECTED.contains(&name.as_str()) {
            if !name.starts_with("manifest_") {
                assert!(load_config(&dir.join("suzumio.yaml")).is_none(), "{name}: the loader accepts it");
            }
            continue;
        }
        let config = load_config(&dir.join("suzumio.yaml")).unwrap_or_else(|| panic!("{name}: does not load"));
        let config_errors = schema_errors(&config_schema, &config);
        let manifest_errors: Vec<String> = manifests
            .iter()
            .flat_map(|m| {
                schema_errors(&manifest_schema, &read_json(m)).into_iter().map(move |e| format!("{}: {e}", m.display()))
            })
            .collect();
        if CONFIG_REJECTED.contains(&name.as_str()) {
            assert!(!config_errors.is_empty(), "{name}: the config schema accepts it");
        } else if MANIFEST_REJECTED.contains(&name.as_str()) {
            assert!(
                config_errors.is_empty(),
                "{name}: the config should be schema-valid:\n{}",
                config_errors.join("\n")
            );
            assert!(!manifest_errors.is_empty(), "{name}: the toolpack schema accepts every manifest");
        } else {
            assert!(
                config_errors.is_empty(),
                "{name}: config schema stricter than the validator:\n{}",
                config_errors.join("\n")
            );
            assert!(
                manifest_errors.is_empty(),
                "{name}: toolpack schema stricter than the validator:\n{}",
                manifest_errors.join("\n")
            );
        }
    }
}
