//! Activations: the prompt (`prompt.rs`, reference §1.6), the conversation each request carries
//! (`context.rs`: native history replay, token estimate, compaction), the model loop (`run.rs`),
//! budgets and the wake-loop guard (`budget.rs`), the model providers (`providers/`) and the
//! live text of streamed model calls (`live.rs`). The loop runs in the controller: model API keys
//! never reach a container. Providers are built once per run and shared (`ProviderPool`), so the
//! scripted provider's per-agent progress and HTTP connection pools survive across activations.

mod attempt;
pub mod budget;
mod context;
pub mod live;
pub mod prompt;
pub mod providers;
mod review;
pub mod run;
mod tool_list;

pub use run::Activations;
// The runner seam lives below the model loop; re-exported where callers have always found it.
pub use crate::calls::{NoRunner, RunnerTools};
