//! The live text of a model call: a streamed call's text pieces go out as ephemeral
//! `activation.delta` events (the WebUI shows them on the activation page and the agent card),
//! coalesced so that a fast stream costs a few events a second, not one per token. Nothing here
//! is stored: the turn is recorded by the loop when the call returns, as without streaming.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::providers::{DeltaSink, ModelProvider, ModelRequest, ModelResponse, ProviderError, ResolvedModel};
use crate::store::{Event, Store};

/// Pending text goes out at least this often while the call runs…
pub const FLUSH_EVERY: Duration = Duration::from_millis(80);
/// …and at once when this much has piled up.
pub const FLUSH_CHARS: usize = 512;

/// One model call for an activation: streamed when the preset says `stream` (its text published
/// live as it arrives), else a plain call. The result is the same either way.
pub async fn call_model(
    store: &Store,
    agent_id: &str,
    activation_id: &str,
    model: &ResolvedModel,
    provider: &dyn ModelProvider,
    request: ModelRequest,
) -> Result<ModelResponse, ProviderError> {
    if !model.preset.stream {
        return provider.complete(request).await;
    }
    let publisher = Publisher {
        store,
        agent_id,
        activation_id,
        state: Mutex::new(Pending { text: String::new(), offset: 0, flushed: Instant::now() }),
    };
    let result = {
        let call = provider.stream(request, &publisher);
        let mut call = std::pin::pin!(call);
        // Text that arrived just after a flush would otherwise wait for the next piece.
        let mut tick = tokio::time::interval(FLUSH_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                result = &mut call => break result,
                _ = tick.tick() => publisher.flush(false),
            }
        }
    };
    // Everything is out before the loop records the turn (whose event comes after it).
    publisher.flush(true);
    result
}

struct Publisher<'a> {
    store: &'a Store,
    agent_id: &'a str,
    activation_id: &'a str,
    state: Mutex<Pending>,
}

struct Pending {
    text: String,
    /// Characters of this call's text already published.
    offset: u64,
    flushed: Instant,
}

impl Publisher<'_> {
    /// Publish the pending text if there is any and it is due (or `now`).
    fn flush(&self, now: bool) {
        let mut pending = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if !pending.text.is_empty() && (now || pending.flushed.elapsed() >= FLUSH_EVERY) {
            self.publish(&mut pending);
        }
    }

    fn publish(&self, pending: &mut Pending) {
        let text = std::mem::take(&mut pending.text);
        let offset = pending.offset;
        pending.offset += text.chars().count() as u64;
        pending.flushed = Instant::now();
        self.store.publish_ephemeral(Event::ActivationDelta {
            activation_id: self.activation_id.to_string(),
            agent_id: self.agent_id.to_string(),
            offset,
            text,
        });
    }
}

impl DeltaSink for Publisher<'_> {
    fn text(&self, delta: &str) {
        let mut pending = self.state.lock().unwrap_or_else(|e| e.into_inner());
        pending.text.push_str(delta);
        if pending.text.len() >= FLUSH_CHARS || pending.flushed.elapsed() >= FLUSH_EVERY {
            self.publish(&mut pending);
        }
    }
}
