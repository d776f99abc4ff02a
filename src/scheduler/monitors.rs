//! Monitors (reference §1.4, §2.5): ordinary messages sent on behalf of a virtual sender when a
//! watched agent stays quiet, or stays failed, for too long. The first goes after
//! `initialDelayMs`, repeats every `repeatDelayMs`; dedupe keys are kept in events
//! (`scheduler.quiet_agent_monitor.message_sent`, `scheduler.failed_agent_monitor.message_sent`).

use chrono::{DateTime, Duration, Utc};
use serde_json::{Value, json};

use crate::clock::{iso, parse_iso};
use crate::config::MonitorRule;
use crate::store::{ActivationStatus, AgentStatus, SendMessage, StoreError};

use super::{Scheduler, TickReport};

const QUIET_EVENT: &str = "scheduler.quiet_agent_monitor.message_sent";
const FAILED_EVENT: &str = "scheduler.failed_agent_monitor.message_sent";
/// How many past monitor events are searched for a rule's last message.
const DEDUPE_WINDOW: usize = 1000;
const ERROR_CAP: usize = 700;

/// Replace `{{name}}` placeholders; unknown ones are left as they are.
pub fn render(template: &str, vars: &[(&str, String)]) -> String {
    let mut out = template.to_string();
    for (name, value) in vars {
        out = out.replace(&format!("{{{{{name}}}}}"), value);
    }
    out
}

pub(super) fn quiet_agent_monitor(s: &Scheduler, report: &mut TickReport) -> Result<(), StoreError> {
    let cfg = &s.tools.project.config.scheduler.quiet_agent_monitor;
    if !cfg.enabled {
        return Ok(());
    }
    for rule in cfg.rules.iter().filter(|r| r.enabled) {
        let Some(agent) = s.store().agent(&rule.agent)? else { continue };
        if agent.status != AgentStatus::Quiet {
            continue;
        }
        let Some(since) = parse_iso(&agent.updated_at) else { continue };
        let key = json!({ "ruleKey": rule.key, "agent": rule.agent, "quietSince": agent.updated_at });
        let template = rule.message.clone().unwrap_or_else(|| {
            "{{agent}} ({{agentId}}) has been quiet for {{quietMinutes}} minutes (since {{quietSince}}). \
             Check whether it needs new work."
                .to_string()
        });
        let display = agent.display_name.clone();
        fire(s, report, rule, QUIET_EVENT, key, since, &template, |now, attempt| {
            let quiet_ms = (now - since).num_milliseconds().max(0);
            vec![
                ("agent", display.clone()),
                ("quietMs", quiet_ms.to_string()),
                ("quietMinutes", (quiet_ms / 60_000).to_string()),
                ("quietSince", iso(since)),
                ("attempt", attempt.to_string()),
            ]
        })?;
    }
    Ok(())
}

pub(super) fn failed_agent_monitor(s: &Scheduler, report: &mut TickReport) -> Result<(), StoreError> {
    let cfg = &s.tools.project.config.scheduler.failed_agent_monitor;
    if !cfg.enabled {
        return Ok(());
    }
    for rule in cfg.rules.iter().filter(|r| r.enabled) {
        let Some(agent) = s.store().agent(&rule.agent)? else { continue };
        if agent.status != AgentStatus::Failed {
            continue;
        }
        let failed = s.store().latest_activation(&agent.id, Some(ActivationStatus::Failed))?;
        let activation_id = failed.as_ref().map(|a| a.id.clone()).unwrap_or_default();
        let since_text = failed.as_ref().and_then(|a| a.ended_at.clone()).unwrap_or_else(|| agent.updated_at.clone());
        let Some(since) = parse_iso(&since_text) else { continue };
        let error = failed.and_then(|a| a.error).unwrap_or_default();
        let error: String = error.split_whitespace().collect::<Vec<_>>().join(" ").chars().take(ERROR_CAP).collect();
        let key = json!({ "ruleKey": rule.key, "agent": rule.agent, "activationId": activation_id });
        let template = rule.message.clone().unwrap_or_else(|| {
            "{{agent}} ({{agentId}}) has been failed for {{failedMinutes}} minutes (activation {{activationId}}): \
             {{error}}"
                .to_string()
        });
        let display = agent.display_name.clone();
        fire(s, report, rule, FAILED_EVENT, key, since, &template, |now, attempt| {
            let failed_ms = (now - since).num_milliseconds().max(0);
            vec![
                ("agent", display.clone()),
                ("failedMs", failed_ms.to_string()),
                ("failedMinutes", (failed_ms / 60_000).to_string()),
                ("failedSince", iso(since)),
                ("activationId", activation_id.clone()),
                ("error", error.clone()),
                ("attempt", attempt.to_string()),
            ]
        })?;
    }
    Ok(())
}

/// Send the rule's message if it is due (first after `initialDelayMs` from `since`, then every
/// `repeatDelayMs` after the last one with the same dedupe key), or note when it will be.
#[allow(clippy::too_many_arguments)] // the two monitors differ only in these
fn fire(
    s: &Scheduler,
    report: &mut TickReport,
    rule: &MonitorRule,
    event_kind: &str,
    key: Value,
    since: DateTime<Utc>,
    template: &str,
    vars: impl Fn(DateTime<Utc>, u64) -> Vec<(&'static str, String)>,
) -> Result<(), StoreError> {
    let store = s.store();
    let now = store.now();
    let matches = |data: &Value| key.as_object().is_some_and(|k| k.iter().all(|(name, v)| data.get(name) == Some(v)));
    let last = store.events_of_kind(event_kind, DEDUPE_WINDOW)?.into_iter().find(|e| matches(&e.data));
    let (due, attempt) = match &last {
        None => (since + Duration::milliseconds(rule.initial_delay_ms as i64), 1),
        Some(e) => {
            let sent = e.data.get("sentAt").and_then(Value::as_str).and_then(parse_iso).unwrap_or(since);
            let attempt = e.data.get("attempt").and_then(Value::as_u64).unwrap_or(1) + 1;
            (sent + Duration::milliseconds(rule.repeat_delay_ms as i64), attempt)
        }
    };
    if now < due {
        report.due(Some(due));
        return Ok(());
    }
    let project = &s.tools.project.config;
    let mut all_vars = vec![
        ("project", project.name.clone()),
        ("agentId", rule.agent.clone()),
        ("recipient", rule.recipient.clone()),
        ("sender", rule.sender.clone()),
        ("now", iso(now)),
        ("initialDelayMs", rule.initial_delay_ms.to_string()),
        ("repeatDelayMs", rule.repeat_delay_ms.to_string()),
        ("ruleId", rule.key.clone()),
    ];
    all_vars.extend(vars(now, attempt));
    let body = render(template, &all_vars);
    let sent = store.send_message(SendMessage {
        sender: rule.sender.clone(),
        recipient: Some(rule.recipient.clone()),
        priority: Some(rule.priority.as_str().into()),
        body,
        ..Default::default()
    })?;
    let mut data = key;
    data["attempt"] = json!(attempt);
    data["messageId"] = json!(sent.message_id);
    data["sentAt"] = json!(iso(now));
    store.append_event(event_kind, data)?;
    report.monitor_messages.push(sent.message_id);
    report.due(Some(now + Duration::milliseconds(rule.repeat_delay_ms as i64)));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::render;

    #[test]
    fn templates_fill_known_placeholders_and_keep_unknown_ones() {
        let vars = [("agent", "Akari".to_string()), ("quietMinutes", "31".to_string())];
        assert_eq!(render("{{agent}} quiet {{quietMinutes}}m {{nope}}", &vars), "Akari quiet 31m {{nope}}");
    }
}
