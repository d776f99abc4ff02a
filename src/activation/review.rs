//! The reviewer's model call (`permissions.reviewer`): the model loop's providers answer the
//! review the call pipeline asks for (`calls/review.rs`), through the
//! [`ReviewModel`] seam the tool host holds — the pipeline is below this layer and calls it
//! without importing it. The preset's `model-list` is tried in order; the usage of the call
//! that answered is counted with the reviewed call's activation, labelled `reviewer <preset>`.
//!
//! The scripted provider plays a review as the agent [`REVIEWER_AGENT`], each review as a new
//! activation of it, so a script answers reviews with entries of their own.

use std::sync::Arc;

use super::Activations;
use super::providers::{ChatMessage, resolve_presets};
use crate::permissions::reviewer::{ReviewFuture, ReviewModel, ReviewRequest};
use crate::store::TokenUsage;

/// Who a review is for, as the provider sees it (a script's `agent: reviewer`).
pub const REVIEWER_AGENT: &str = "reviewer";

impl ReviewModel for Activations {
    fn review(&self, request: ReviewRequest) -> ReviewFuture<'_> {
        Box::pin(async move {
            let project = self.tools.project.snapshot();
            let models = resolve_presets(&project.config.models, &request.preset)?;
            let play_as = format!("review-{}", uuid::Uuid::new_v4());
            let mut failed = Vec::new();
            for model in &models {
                let provider = match self.providers.get(model) {
                    Ok(provider) => provider,
                    Err(e) => {
                        failed.push(e.to_string());
                        continue;
                    }
                };
                let messages =
                    vec![ChatMessage::System(request.system.clone()), ChatMessage::User(request.user.clone())];
                let call = model.request(REVIEWER_AGENT, &play_as, messages, Vec::new());
                match provider.complete(call).await {
                    Ok(response) => {
                        let u = response.usage;
                        let prices = &model.preset.prices;
                        let usage = TokenUsage {
                            model_calls: 1,
                            input_tokens: u.input_tokens,
                            cached_input_tokens: u.cached_input_tokens.min(u.input_tokens),
                            output_tokens: u.output_tokens,
                            cost: prices.cost(u.input_tokens, u.cached_input_tokens, u.output_tokens),
                        };
                        let label = format!("reviewer {} ({})", model.preset_id(), model.api_model());
                        let counted = self.tools.store.record_model_usage(
                            &request.activation_id,
                            &request.agent_id,
                            &label,
                            &usage,
                            prices.is_set(),
                        );
                        if let Err(e) = counted {
                            tracing::warn!(agent = %request.agent_id, "counting the reviewer's usage: {e}");
                        }
                        return Ok(response.text);
                    }
                    Err(e) => failed.push(e.to_string()),
                }
            }
            Err(failed.join("; then "))
        })
    }
}

/// Installs `activations` as the reviewer of its tool host.
pub(super) fn install(activations: &Arc<Activations>) {
    let weak = Arc::downgrade(activations);
    activations.tools.reviewer.install(weak);
}
