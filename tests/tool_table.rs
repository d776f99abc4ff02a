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
