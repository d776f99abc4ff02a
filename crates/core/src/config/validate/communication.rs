//! `channels` (declared once each, no spaces) and `communication` (the coordinator and the
//! priority policy `messages.send` enforces and the prompt states).

use super::priority;
use crate::config::diag::Diagnostics;
use crate::config::model::*;
use crate::config::node::Node;
use crate::config::read::{Obj, Retired, index};

const COMMUNICATION_KEYS: &[&str] =
    &["coordinatorAgent", "restrictNonCoordinatorToCoordinator", "nonCoordinatorMaxPriority"];
const COMMUNICATION_RETIRED: Retired =
    &[("pmRoutineVerifierPriority", "no rule reads it, in the reference either; remove it")];

pub(super) fn read_channels(top: &Obj, d: &mut Diagnostics) -> Vec<String> {
    let Some(list) = top.string_list("channels", d) else {
        return vec!["#project".to_string(), "#blocked".to_string()];
    };
    let mut out: Vec<String> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (i, (channel, loc)) in list.into_iter().enumerate() {
        let path = index("channels", i);
        if channel.is_empty() || channel.chars().any(char::is_whitespace) {
            d.error(Some(&loc), path, format!("channel names must be non-empty and contain no spaces: `{channel}`"));
        } else if !seen.insert(channel.clone()) {
            d.error(Some(&loc), path, format!("channel {channel} is declared twice"));
        } else {
            out.push(channel);
        }
    }
    out
}

pub(super) fn read(node: &Node, agents: &[&str], d: &mut Diagnostics) -> Option<CommunicationConfig> {
    let c = Obj::open(node, "communication", COMMUNICATION_KEYS, COMMUNICATION_RETIRED, d)?;
    let named = c.string("coordinatorAgent", d);
    if let Some(name) = &named
        && !agents.is_empty()
        && !agents.contains(&name.as_str())
    {
        let hint = crate::config::diag::did_you_mean(name, agents.iter().copied());
        d.error_hint(
            Some(&c.key_loc("coordinatorAgent")),
            "communication.coordinatorAgent",
            format!("`{name}` is not an agent of this project"),
            hint.or_else(|| Some(format!("agents: {}", agents.join(", ")))),
        );
    }
    // Unset: the reference's default, `pm`, which only counts if there is such an agent.
    let coordinator = named.or_else(|| agents.contains(&"pm").then(|| "pm".to_string()));
    let restrict = c.bool("restrictNonCoordinatorToCoordinator", d).unwrap_or(false);
    if restrict && coordinator.is_none() && !agents.is_empty() {
        d.error(
            Some(&c.key_loc("restrictNonCoordinatorToCoordinator")),
            "communication.restrictNonCoordinatorToCoordinator",
            format!(
                "this policy lets the other agents message only the coordinator, and the project has none: set \
                 communication.coordinatorAgent to one of {}, or turn the policy off",
                agents.join(", ")
            ),
        );
    }
    Some(CommunicationConfig {
        coordinator_agent: coordinator,
        restrict_non_coordinator_to_coordinator: restrict,
        non_coordinator_max_priority: priority(&c, "nonCoordinatorMaxPriority", Priority::P2, d),
    })
}
