//! `GET /api/projects/:p/stream`: Server-Sent Events pushed as the store commits them (the
//! store's broadcast, not polling). Each event has `id:` = the event id, so a client that
//! reconnects with `Last-Event-ID` gets everything after it from the store first, then the live
//! stream, with no gap and no duplicate.
//!
//! Frames are plain `id:` + `data:` (the event record as JSON, its type in `type`), with no
//! `event:` line: a browser's `EventSource` delivers them all to `onmessage`, so a client needs
//! no list of event types to receive new ones.
//!
//! Ephemeral events (`activation.delta`, [`Store::publish_ephemeral`]) are interleaved as they
//! come, as `data:` only — `{type, data, ephemeral: true}`, no `id:` line, so `Last-Event-ID`
//! stays on the last stored event — and are not replayed after a reconnect. When both kinds are
//! waiting, the ephemeral one goes first: it was published before the stored event that ends
//! it (a model call's text before the recorded turn).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;
use tokio::sync::broadcast;

use crate::store::{Event as StoreEvent, EventRecord, Store};

struct State {
    store: Store,
    live: broadcast::Receiver<EventRecord>,
    ephemeral: broadcast::Receiver<StoreEvent>,
    backlog: VecDeque<EventRecord>,
    last: i64,
}

pub fn events(store: Store, after: i64) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    // Subscribe before reading the backlog: an event committed in between is then in one of the
    // two (or both: duplicates are dropped by id).
    let live = store.subscribe();
    let ephemeral = store.subscribe_ephemeral();
    let state = State { store, live, ephemeral, backlog: VecDeque::new(), last: after };
    let stream = futures_util::stream::unfold(state, |mut s| async move {
        loop {
            if s.backlog.is_empty() {
                // Published before the rows about to be read (the text before its turn), so first.
                match s.ephemeral.try_recv() {
                    Ok(event) => return Some((Ok(ephemeral_sse(&event)), s)),
                    Err(broadcast::error::TryRecvError::Lagged(_)) => continue,
                    Err(_) => {}
                }
                match s.store.events_after(s.last, 1000) {
                    Ok(page) => s.backlog.extend(page),
                    // The stream stays open; the next wake-up reads the backlog again.
                    Err(e) => tracing::warn!("reading events for a stream: {e}"),
                }
            }
            if let Some(event) = s.backlog.pop_front() {
                if event.id <= s.last {
                    continue;
                }
                s.last = event.id;
                return Some((Ok(to_sse(&event)), s));
            }
            let stored = tokio::select! {
                biased;
                passing = s.ephemeral.recv() => match passing {
                    Ok(event) => return Some((Ok(ephemeral_sse(&event)), s)),
                    // Lost pieces of live text are not worth a gap in the stored ones.
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return None,
                },
                stored = s.live.recv() => stored,
            };
            match stored {
                Ok(event) if event.id <= s.last => continue,
                Ok(event) if event.id == s.last + 1 => {
                    s.last = event.id;
                    return Some((Ok(to_sse(&event)), s));
                }
                // A gap (this subscriber fell behind, or an event id was skipped): read from the
                // store, which has them all.
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}

fn to_sse(event: &EventRecord) -> Event {
    Event::default().id(event.id.to_string()).data(serde_json::to_string(event).unwrap_or_default())
}

fn ephemeral_sse(event: &StoreEvent) -> Event {
    let (kind, data) = event.to_parts();
    Event::default().data(serde_json::json!({"type": kind, "data": data, "ephemeral": true}).to_string())
}
