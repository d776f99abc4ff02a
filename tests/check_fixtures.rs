//! `suzumio check` against fixture projects: each directory under `tests/fixtures/invalid/` is one
//! broken project whose exact error output is in its `expected.stderr` (exit code 2); each
//! directory under `tests/fixtures/valid/` is a project that must pass, with its `expected.stdout`
//! (and `expected.stderr` for warnings).

mod support;

use expect_test::expect_file;
use support::{fixture, suzumio, text};

fn check_invalid(name: &str) {
    let dir = fixture("invalid", name);
    let out = suzumio(&dir, &["check", "."]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{name}: expected exit 2; stdout:\n{}\nstderr:\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(out.stdout.is_empty(), "{name}: nothing goes to stdout on failure, got:\n{}", text(&out.stdout));
    expect_file![dir.join("expected.stderr")].assert_eq(&text(&out.stderr));
}

fn check_valid(name: &str) {
    let dir = fixture("valid", name);
    let out = suzumio(&dir, &["check", "."]);
    assert_eq!(out.status.code(), Some(0), "{name}: expected exit 0; stderr:\n{}", text(&out.stderr));
    expect_file![dir.join("expected.stdout")].assert_eq(&text(&out.stdout));
    expect_file![dir.join("expected.stderr")].assert_eq(&text(&out.stderr));
}

/// One `#[test]` per fixture name, plus `LIST` with all the names.
macro_rules! fixtures {
    ($check:ident: $($name:ident),* $(,)?) => {
        $( #[test] fn $name() { $check(stringify!($name)); } )*
        pub const LIST: &[&str] = &[$(stringify!($name)),*];
    };
}

mod invalid {
    use super::*;
    fixtures!(check_invalid:
        unknown_top_level_key,
        unknown_agent_key,
        missing_name,
        empty_agents,
        agent_count_zero,
        agent_id_collision_with_count,
        reserved_agent_id_user,
        agent_env_suzumio_prefix,
        allowlist_invalid_pattern,
        unknown_tool_group,
        group_in_a_rule,
        communication_unknown_priority,
        yaml_syntax_error,
        runner_models_missing,
        agent_unknown_model_preset,
        agent_without_model,
        model_list_with_provider,
        reserved_mount_target,
        reserved_mount_target_run_suzumio,
        mount_target_relative,
        mount_source_missing,
        circular_import,
        import_https,
        import_too_deep,
        extends_not_list,
        unknown_builtin_toolpack,
        duplicate_toolpack,
        toolpack_path_http,
        toolpack_path_missing,
        toolpack_path_is_file,
        manifest_missing,
        manifest_invalid_json,
        manifest_id_missing,
        manifest_id_bad_charset,
        manifest_id_mismatch,
        manifest_tools_not_array,
        tool_description_missing,
        local_pack_declares_where_it_runs,
        tool_name_with_space,
        schema_type_typo,
        schema_property_type_typo,
        pack_without_tools_or_webui,
        controller_module_missing,
        runner_module_missing,
        runner_outside_root,
        runner_https,
        runner_js_module,
        webui_bad_kind,
        webui_duplicate_entry_id,
        duplicate_tool_across_packs,
        collects_every_error,
        observability_key,
        provider_chunk_timeout,
        communication_pm_routine_verifier_priority,
        scheduler_kind,
        runner_mode,
        backend_kind_docker_chat,
        yaml_alias_bomb,
        agent_count_too_large,
        import_outside_project,
        import_device,
        coordinator_unknown,
        disk_quota_not_a_size,
        disk_quota_too_small,
        prewarm_unknown,
        budget_limits,
        tool_loading_unknown,
        permissions_rules,
        permissions_hook_pack,
        permissions_reviewer,
        permissions_reviewer_values,
        runner_syntax_error,
        runner_tool_without_handler,
        mcp_entries,
        manifest_two_schema_errors,
        no_coordinator_for_policy_or_nudge,
    );
}

mod valid {
    use super::*;
    fixtures!(check_valid:
        minimal,
        webui_only_pack,
        imports_and_extends,
        env_substitution,
        counted_agents_with_names,
        warnings_only,
        manifest_json_surrogates,
        allowlist_typo,
        deferred_tools,
        permissions,
        opaque,
        mcp_pinned,
        tool_allowed_to_nobody,
        script_calls_disallowed_tool,
        tool_groups,
    );
}

/// A fixture directory that no test names would silently never run.
#[test]
fn every_fixture_directory_has_a_test() {
    for (kind, listed) in [("invalid", invalid::LIST), ("valid", valid::LIST)] {
        let dir = support::repo_root().join("tests/fixtures").join(kind);
        let mut found: Vec<String> = std::fs::read_dir(&dir)
            .expect("fixture directory exists")
            .map(|e| e.expect("readable entry").file_name().to_string_lossy().into_owned())
            .collect();
        found.sort();
        let mut listed: Vec<String> = listed.iter().map(|s| s.to_string()).collect();
        listed.sort();
        assert_eq!(found, listed, "tests/fixtures/{kind} and the list in this file differ");
    }
}

/// An allowlist's `group:` entries decide calls as the tools they expand to: a group's tool
/// runs, a tool of no listed group is refused — through the real `suzumio tool call`.
#[test]
fn an_allowlist_group_is_honoured_by_calls() {
    let project = support::TempProject::copy_of_path(&fixture("valid", "tool_groups"));
    let dir = project.dir.to_str().unwrap();
    let refused = suzumio(
        &project.dir,
        &["tool", "call", dir, "--agent", "reviewer", "file.write", r#"{"path":"x","content":"y"}"#],
    );
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused.stderr));
    assert!(text(&refused.stderr).contains("Tool not allowed for reviewer: file.write"), "{}", text(&refused.stderr));
    let run = ["tool", "call", dir, "--agent", "reviewer", "--backend", "process", "git.status", "{}"];
    let ran = suzumio(&project.dir, &run);
    // It reached the runner: git.status ran and found no repository in the fresh workspace.
    assert_eq!(ran.status.code(), Some(1), "{}", text(&ran.stderr));
    assert!(text(&ran.stderr).contains("Not a git repository"), "{}", text(&ran.stderr));
    assert!(!project.dir.join("workspaces/reviewer/x").exists());
}
