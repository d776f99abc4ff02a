//! Budgets' scheduler step: resume every paused agent whose limit's period ended or whose
//! limit the config now raises or lifts. The checks before each model call are the model
//! loop's (`activation::budget`); both read the same pause records in the store.

use chrono::{DateTime, Utc};

use crate::config::{AgentConfig, ProjectConfig};
use crate::store::{Pause, StoreError};
use crate::support::ToolHost;
use crate::text::number;

/// The limit a pause names, as the config now sets it: `None` when there is none any more.
fn current_limit(config: &ProjectConfig, agent: &AgentConfig, pause: &Pause) -> Option<Option<f64>> {
    let limits = if pause.scope == "project" { &config.budgets.project } else { &agent.budget };
    Some(match pause.limit.as_str() {
        "maxActivationsPerHour" => limits.max_activations_per_hour.map(|v| v as f64),
        "maxTokensPerActivation" => limits.max_tokens_per_activation.map(|v| v as f64),
        "maxTokensPerDay" => limits.max_tokens_per_day.map(|v| v as f64),
        "maxCostPerDay" => limits.max_cost_per_day,
        "loopGuard" => {
            let guard = config.budgets.loop_guard;
            guard.enabled.then_some(guard.max_activations as f64)
        }
        // A limit this build does not know: only the user resumes it.
        _ => return None,
    })
}

/// What [`resume_due`] did.
#[derive(Debug, Default)]
pub struct Resumed {
    /// (agent, why) for every agent resumed.
    pub agents: Vec<(String, String)>,
    /// The earliest end of a period some paused agent waits for.
    pub next_due: Option<DateTime<Utc>>,
}

/// A scheduler step: resume every paused agent whose limit's period ended or whose limit the
/// config now raises or lifts.
pub fn resume_due(host: &ToolHost) -> Result<Resumed, StoreError> {
    let store = &host.store;
    let config = &host.project.config;
    let now = store.now();
    let mut out = Resumed::default();
    for record in store.agents()? {
        let (Some(pause), Some(agent)) = (&record.paused, config.agent(&record.id)) else { continue };
        let until = pause.until;
        let why = match (until, current_limit(config, agent, pause)) {
            (Some(at), _) if at <= now => Some(format!("the period of {} ended", pause.limit)),
            (_, Some(None)) => Some(format!("{} is no longer limited", pause.limit)),
            (_, Some(Some(v))) if v > pause.allowed => {
                Some(format!("{} was raised from {} to {}", pause.limit, number(pause.allowed), number(v)))
            }
            _ => None,
        };
        match why {
            Some(why) => {
                store.resume_agent(&record.id, &why)?;
                tracing::info!(agent = %record.id, "resumed: {why}");
                out.agents.push((record.id.clone(), why));
            }
            None => {
                if let Some(at) = until {
                    out.next_due = Some(out.next_due.map_or(at, |d: DateTime<Utc>| d.min(at)));
                }
            }
        }
    }
    Ok(out)
}
