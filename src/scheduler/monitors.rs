//! Monitors (reference §1.4, §2.5): ordinary messages sent on behalf of a virtual sender when a
//! watched agent stays quiet, or stays failed, for too long. The first goes after
//! `initialDelayMs`, repeats every `repeatDelayMs`; dedupe keys are kept in events
//! (`scheduler.quiet_agent_monitor.message_sent`, `scheduler.failed_agent_monitor.message_sent`).

use chrono::{DateTime, Duration, Utc};
use serde_json::{Value, json};

use crate::clock::iso;
use crate::config::MonitorRule;
use crate::store::{ActivationStatus, AgentStatus, Event, MonitorSent, SendMessage, StoreError};

use super::{Scheduler, TickReport};

/// The two monitors; each records a typed event when it sends, which is also its dedupe record.
#[derive(Clone, Copy)]
enum Monitor {
    QuietAgent,
    FailedAgent,
}

impl Monitor {
    fn event(self, sent: MonitorSent) -> Event {
        match self {
            Monitor::QuietAgent => Event::QuietAgentMonitorSent(sent),
            Monitor::FailedAgent => Event::FailedAgentMonitorSent(sent),
        }
    }

    /// The stored type name of this monitor's events (what the dedupe query looks up).
    fn kind(self) -> String {
        let probe = MonitorSent {
            key: Default::default(),
            attempt: 0,
            message_id: String::new(),
            sent_at: DateTime::UNIX_EPOCH,
        };
        self.event(probe).to_parts().0
    }

    fn sent(event: &Event) -> Option<&MonitorSent> {
        match event {
            Event::QuietAgentMonitorSent(sent) | Event::FailedAgentMonitorSent(sent) => Some(sent),
            _ => None,
        }
    }
}
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
        let since = agent.updated_at;
        let key = json!({ "ruleKey": rule.key, "agent": rule.agent, "quietSince": iso(since) });
        let template = rule.message.clone().unwrap_or_else(|| {
            "{{agent}} ({{agentId}}) has been quiet for {{quietMinutes}} minutes (since {{quietSince}}). \
             Check whether it needs new work."
                .to_string()
        });
        let display = agent.display_name.clone();
        fire(s, report, rule, Monitor::QuietAgent, key, since, &template, |now, attempt| {
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
        let since = failed.as_ref().and_then(|a| a.ended_at).unwrap_or(agent.updated_at);
        let error = failed.and_then(|a| a.error).unwrap_or_default();
        let error: String = error.split_whitespace().collect::<Vec<_>>().join(" ").chars().take(ERROR_CAP).collect();
        let key = json!({ "ruleKey": rule.key, "agent": rule.agent, "activationId": activation_id });
        let template = rule.message.clone().unwrap_or_else(|| {
            "{{agent}} ({{agentId}}) has been failed for {{failedMinutes}} minutes (activation {{activationId}}): \
             {{error}}"
                .to_string()
        });
        let display = agent.display_name.clone();
        fire(s, report, rule, Monitor::FailedAgent, key, since, &template, |now, attempt| {
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
    monitor: Monitor,
    key: Value,
    since: DateTime<Utc>,
    template: &str,
    vars: impl Fn(DateTime<Utc>, u64) -> Vec<(&'static str, String)>,
) -> Result<(), StoreError> {
    let store = s.store();
    let now = store.now();
    let key = match key {
        Value::Object(map) => map,
        _ => Default::default(),
    };
    let matches = |sent: &MonitorSent| key.iter().all(|(name, v)| sent.key.get(name) == Some(v));
    let records = store.events_of_kind(&monitor.kind(), DEDUPE_WINDOW)?;
    let last = records.iter().filter_map(|e| Monitor::sent(&e.event)).find(|sent| matches(sent));
    let (due, attempt) = match last {
        None => (since + Duration::milliseconds(rule.initial_delay_ms as i64), 1),
        Some(last) => {
            let sent = last.sent_at;
            (sent + Duration::milliseconds(rule.repeat_delay_ms as i64), last.attempt + 1)
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
    store.append_event(monitor.event(MonitorSent {
        key,
        attempt,
        message_id: sent.message_id.clone(),
        sent_at: now,
    }))?;
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
