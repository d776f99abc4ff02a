//! `GET /metrics`: the project in the Prometheus (OpenMetrics) text format, for a scraper. It
//! sits behind the same guard as the API (loopback or allowed `Host`, then the token). Every
//! value is read from the store at scrape time (collect-on-scrape: nothing is kept in memory
//! but the runner start counts), and encoded by `prometheus-client`.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `suzumio_activations` | gauge | `agent`, `status` |
//! | `suzumio_tool_calls` (`_total`) | counter: finished calls | `tool`, `status` (`completed`, `failed`, `cancelled`) |
//! | `suzumio_tool_call_duration_seconds` | histogram: finished calls | `tool`, `status` |
//! | `suzumio_tool_calls_running` | gauge | `tool` |
//! | `suzumio_model_calls`, `suzumio_model_input_tokens`, `suzumio_model_cached_input_tokens`, `suzumio_model_output_tokens`, `suzumio_model_cost` (`_total`) | counter | `agent` |
//! | `suzumio_signals_pending` | gauge | `priority` |
//! | `suzumio_runner_starts`, `suzumio_runner_restarts` (`_total`) | counter: since this `suzumio run` started | `agent` |
//! | `suzumio_approvals_pending` | gauge | |
//! | `suzumio_agent_paused` | gauge: 1 while a budget or the loop guard pauses it | `agent`, `limit` |
//! | `suzumio_budget_tokens_today`, `suzumio_budget_cost_today` | gauge: used today (UTC) | `scope` (`agent`/`project`), `agent` |
//! | `suzumio_budget_tokens_per_day_limit`, `suzumio_budget_cost_per_day_limit` | gauge: when set | `scope`, `agent` |

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use super::{ApiError, AppState};
use crate::activation::budget::spent;
use crate::store::metrics::{LATENCY_BUCKETS, MetricCounts};
use crate::support::ToolHost;

pub fn routes() -> axum::Router<AppState> {
    axum::Router::new().route("/metrics", get(metrics))
}

async fn metrics(State(state): State<AppState>) -> Result<Response, ApiError> {
    let text = render(&state.tools)?;
    Ok(([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], text).into_response())
}

/// The whole exposition, as a scraper reads it.
pub fn render(host: &ToolHost) -> Result<String, ApiError> {
    let snapshot = Snapshot::read(host)?;
    let mut registry = Registry::default();
    registry.register_collector(Box::new(snapshot));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry)
        .map_err(|e| ApiError::Internal(format!("encoding metrics: {e}")))?;
    Ok(out)
}

type Labels = Vec<(&'static str, String)>;

/// A gauge or counter sample: its labels and value.
type Samples = Vec<(Labels, Num)>;

/// Counts print as integers, amounts (cost, seconds) as floats.
#[derive(Clone, Copy, Debug)]
enum Num {
    Int(u64),
    Float(f64),
}

/// What one scrape shows, read before encoding (the encoder cannot fail on a store error).
#[derive(Debug)]
struct Snapshot {
    counts: MetricCounts,
    runner_starts: Vec<(String, u64)>,
    paused: Samples,
    budget_tokens: Samples,
    budget_cost: Samples,
    tokens_limit: Samples,
    cost_limit: Samples,
}

impl Snapshot {
    fn read(host: &ToolHost) -> Result<Snapshot, ApiError> {
        let store = &host.store;
        let config = &host.project.config;
        let counts = store.metric_counts()?;
        let (mut paused, mut budget_tokens, mut budget_cost, mut tokens_limit, mut cost_limit) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut budget = |labels: Labels, today: crate::store::TokenUsage, limits: &crate::config::BudgetLimits| {
            budget_tokens.push((labels.clone(), Num::Int(today.tokens())));
            budget_cost.push((labels.clone(), Num::Float(today.cost)));
            if let Some(max) = limits.max_tokens_per_day {
                tokens_limit.push((labels.clone(), Num::Int(max)));
            }
            if let Some(max) = limits.max_cost_per_day {
                cost_limit.push((labels, Num::Float(max)));
            }
        };
        for a in store.agents()? {
            let Some(agent) = config.agent(&a.id) else { continue };
            let limit = a.paused.as_ref().map(|p| p.limit.clone()).unwrap_or_default();
            paused.push((vec![("agent", a.id.clone()), ("limit", limit)], Num::Int(u64::from(a.paused.is_some()))));
            let s = spent(store, Some(&a.id), a.resumed_at)?;
            budget(vec![("scope", "agent".into()), ("agent", a.id.clone())], s.today, &agent.budget);
        }
        let project = spent(store, None, None)?;
        budget(vec![("scope", "project".into()), ("agent", String::new())], project.today, &config.budgets.project);
        Ok(Snapshot {
            counts,
            runner_starts: host.runner_starts.snapshot().into_iter().collect(),
            paused,
            budget_tokens,
            budget_cost,
            tokens_limit,
            cost_limit,
        })
    }
}

/// One metric family: its descriptor, then a sample per label set.
fn family(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    kind: MetricType,
    samples: &[(Labels, Num)],
) -> Result<(), std::fmt::Error> {
    use prometheus_client::metrics::counter::ConstCounter;
    use prometheus_client::metrics::gauge::ConstGauge;
    let mut metric = encoder.encode_descriptor(name, help, None, kind)?;
    for (labels, value) in samples {
        let sample = metric.encode_family(labels)?;
        match (kind, *value) {
            (MetricType::Counter, Num::Int(n)) => ConstCounter::new(n).encode(sample)?,
            (MetricType::Counter, Num::Float(x)) => ConstCounter::new(x).encode(sample)?,
            (_, Num::Int(n)) => ConstGauge::new(n).encode(sample)?,
            (_, Num::Float(x)) => ConstGauge::new(x).encode(sample)?,
        }
    }
    Ok(())
}

impl Collector for Snapshot {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        use MetricType::{Counter, Gauge};
        let c = &self.counts;
        let activations: Samples = c
            .activations
            .iter()
            .map(|((agent, status), n)| (vec![("agent", agent.clone()), ("status", status.clone())], Num::Int(*n)))
            .collect();
        family(&mut encoder, "suzumio_activations", "Activations by agent and status.", Gauge, &activations)?;

        let finished: Samples = c
            .tool_latencies
            .iter()
            .map(|t| (vec![("tool", t.tool.clone()), ("status", t.status.clone())], Num::Int(t.count)))
            .collect();
        family(&mut encoder, "suzumio_tool_calls", "Finished tool calls by tool and status.", Counter, &finished)?;
        let mut metric = encoder.encode_descriptor(
            "suzumio_tool_call_duration_seconds",
            "How long finished tool calls took, by tool and status.",
            None,
            MetricType::Histogram,
        )?;
        for t in &c.tool_latencies {
            let labels: Labels = vec![("tool", t.tool.clone()), ("status", t.status.clone())];
            let buckets: Vec<(f64, u64)> =
                LATENCY_BUCKETS.iter().copied().chain([f64::INFINITY]).zip(t.buckets.iter().copied()).collect();
            metric.encode_family(&labels)?.encode_histogram::<prometheus_client::encoding::NoLabelSet>(
                t.sum_seconds,
                t.count,
                &buckets,
                None,
            )?;
        }
        let running: Samples =
            c.tool_calls_running.iter().map(|(t, n)| (vec![("tool", t.clone())], Num::Int(*n))).collect();
        family(&mut encoder, "suzumio_tool_calls_running", "Tool calls running now, by tool.", Gauge, &running)?;

        let usage = |f: fn(&crate::store::TokenUsage) -> Num| -> Samples {
            c.model_usage.iter().map(|(agent, u)| (vec![("agent", agent.clone())], f(u))).collect()
        };
        family(
            &mut encoder,
            "suzumio_model_calls",
            "Model calls by agent.",
            Counter,
            &usage(|u| Num::Int(u.model_calls)),
        )?;
        family(
            &mut encoder,
            "suzumio_model_input_tokens",
            "Input tokens sent to models (cached ones included), by agent.",
            Counter,
            &usage(|u| Num::Int(u.input_tokens)),
        )?;
        family(
            &mut encoder,
            "suzumio_model_cached_input_tokens",
            "Input tokens read from the providers' prompt caches, by agent.",
            Counter,
            &usage(|u| Num::Int(u.cached_input_tokens)),
        )?;
        family(
            &mut encoder,
            "suzumio_model_output_tokens",
            "Output tokens models produced, by agent.",
            Counter,
            &usage(|u| Num::Int(u.output_tokens)),
        )?;
        family(
            &mut encoder,
            "suzumio_model_cost",
            "Model cost from the presets' prices, by agent.",
            Counter,
            &usage(|u| Num::Float(u.cost)),
        )?;

        let pending: Samples =
            c.pending_signals.iter().map(|(p, n)| (vec![("priority", p.clone())], Num::Int(*n))).collect();
        family(&mut encoder, "suzumio_signals_pending", "Pending signals by priority.", Gauge, &pending)?;

        let starts: Samples =
            self.runner_starts.iter().map(|(a, n)| (vec![("agent", a.clone())], Num::Int(*n))).collect();
        let restarts: Samples = self
            .runner_starts
            .iter()
            .map(|(a, n)| (vec![("agent", a.clone())], Num::Int(n.saturating_sub(1))))
            .collect();
        family(
            &mut encoder,
            "suzumio_runner_starts",
            "Runners started by this controller, by agent.",
            Counter,
            &starts,
        )?;
        family(
            &mut encoder,
            "suzumio_runner_restarts",
            "Runners started again after the first, by agent.",
            Counter,
            &restarts,
        )?;
        family(
            &mut encoder,
            "suzumio_approvals_pending",
            "Tool calls waiting for an approval.",
            Gauge,
            &[(Vec::new(), Num::Int(c.approvals_pending))],
        )?;

        family(
            &mut encoder,
            "suzumio_agent_paused",
            "1 while a budget or the loop guard pauses the agent.",
            Gauge,
            &self.paused,
        )?;
        family(
            &mut encoder,
            "suzumio_budget_tokens_today",
            "Tokens used today (UTC; for an agent, since its last resume).",
            Gauge,
            &self.budget_tokens,
        )?;
        family(&mut encoder, "suzumio_budget_cost_today", "Cost today (UTC).", Gauge, &self.budget_cost)?;
        family(
            &mut encoder,
            "suzumio_budget_tokens_per_day_limit",
            "maxTokensPerDay, where set.",
            Gauge,
            &self.tokens_limit,
        )?;
        family(
            &mut encoder,
            "suzumio_budget_cost_per_day_limit",
            "maxCostPerDay, where set.",
            Gauge,
            &self.cost_limit,
        )?;
        Ok(())
    }
}
