//! `GET /api/projects/:p/stream`: Server-Sent Events pushed as the store commits them (the
//! store's broadcast, not polling). Each event has `id:` = the event id, so a client that
//! reconnects with `Last-Event-ID` gets everything after it from the store first, then the live
//! stream, with no gap and no duplicate.
//!
//! Frames are plain `id:` + `data:` (the event record as JSON, its type in `type`), with no
//! `event:` line: a browser's `EventSource` delivers them all to `onmessage`, so a client needs
//! no list of event types to receive new ones.
//!
//! Streams are bounded: at most [`StreamLimits::total`] at once and [`StreamLimits::per_client`]
//! per client address (an IPv6 client by its /64), each holding a [`Slot`] that is given back
//! when the stream is dropped (the client went away or the server stops); beyond that the
//! route answers 503 with `Retry-After`. A stream holds one page of backlog at a time and reads
//! the broadcast as the socket takes it, so its memory does not grow with the event log.
//!
//! Ephemeral events (`activation.delta`, [`Store::publish_ephemeral`]) are interleaved as they
//! come, as `data:` only — `{type, data, ephemeral: true}`, no `id:` line, so `Last-Event-ID`
//! stays on the last stored event — and are not replayed after a reconnect. When both kinds are
//! waiting, the ephemeral one goes first: it was published before the stored event that ends
//! it (a model call's text before the recorded turn).

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;
use tokio::sync::broadcast;

use crate::store::{Event as StoreEvent, EventRecord, Store};

/// How many streams may be open at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamLimits {
    pub total: usize,
    pub per_client: usize,
}

impl Default for StreamLimits {
    fn default() -> Self {
        StreamLimits { total: 64, per_client: 16 }
    }
}

/// The open streams, counted overall and per client.
#[derive(Debug, Default)]
pub struct StreamSlots {
    limits: StreamLimits,
    open: Mutex<Open>,
}

#[derive(Debug, Default)]
struct Open {
    total: usize,
    per_client: HashMap<IpAddr, usize>,
}

/// Why no stream was opened.
#[derive(Debug, PartialEq, Eq)]
pub enum Full {
    Total(usize),
    Client(usize),
}

/// One open stream's place; dropping it frees the place.
#[derive(Debug)]
pub struct Slot {
    slots: Arc<StreamSlots>,
    client: Option<IpAddr>,
}

impl StreamSlots {
    pub fn new(limits: StreamLimits) -> Arc<StreamSlots> {
        Arc::new(StreamSlots { limits, open: Mutex::default() })
    }

    /// A place for a stream of `client` (`None`: the address is unknown, only the total counts).
    pub fn acquire(self: &Arc<Self>, client: Option<IpAddr>) -> Result<Slot, Full> {
        let client = client.map(client_key);
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if open.total >= self.limits.total {
            return Err(Full::Total(self.limits.total));
        }
        if let Some(ip) = client {
            let count = open.per_client.entry(ip).or_insert(0);
            if *count >= self.limits.per_client {
                return Err(Full::Client(self.limits.per_client));
            }
            *count += 1;
        }
        open.total += 1;
        Ok(Slot { slots: self.clone(), client })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.slots.open.lock().unwrap_or_else(|e| e.into_inner());
        open.total = open.total.saturating_sub(1);
        if let Some(ip) = self.client
            && let Some(count) = open.per_client.get_mut(&ip)
        {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.per_client.remove(&ip);
            }
        }
    }
}

/// Who counts as one client: an IPv4 address, or an IPv6 /64 (one host usually has the whole
/// prefix to pick addresses from).
fn client_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let [a, b, c, d, ..] = v6.segments();
            IpAddr::V6(Ipv6Addr::new(a, b, c, d, 0, 0, 0, 0))
        }
        v4 => v4,
    }
}

/// Events read from the store per page while catching up: what one stream holds at most.
const PAGE: usize = 100;

struct State {
    _slot: Slot,
    store: Store,
    live: broadcast::Receiver<EventRecord>,
    ephemeral: broadcast::Receiver<StoreEvent>,
    backlog: VecDeque<EventRecord>,
    last: i64,
}

/// The stream of events after `after`; it holds `slot` until it is dropped.
pub fn events(store: Store, after: i64, slot: Slot) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    // Subscribe before reading the backlog: an event committed in between is then in one of the
    // two (or both: duplicates are dropped by id).
    let live = store.subscribe();
    let ephemeral = store.subscribe_ephemeral();
    let state = State { _slot: slot, store, live, ephemeral, backlog: VecDeque::new(), last: after };
    let stream = futures_util::stream::unfold(state, |mut s| async move {
        loop {
            if s.backlog.is_empty() {
                // Published before the rows about to be read (the text before its turn), so first.
                match s.ephemeral.try_recv() {
                    Ok(event) => return Some((Ok(ephemeral_sse(&event)), s)),
                    Err(broadcast::error::TryRecvError::Lagged(_)) => continue,
                    Err(_) => {}
                }
                match s.store.events_after(s.last, PAGE) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_capped_overall_and_per_client_and_given_back_on_drop() {
        let slots = StreamSlots::new(StreamLimits { total: 3, per_client: 2 });
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let b: IpAddr = "2001:db8::1".parse().unwrap();
        let first = slots.acquire(Some(a)).unwrap();
        let _second = slots.acquire(Some(a)).unwrap();
        assert_eq!(slots.acquire(Some(a)).unwrap_err(), Full::Client(2));
        let mapped: IpAddr = "::ffff:127.0.0.1".parse().unwrap();
        assert_eq!(
            slots.acquire(Some(mapped)).unwrap_err(),
            Full::Client(2),
            "an IPv4-mapped address is the same client"
        );
        let _third = slots.acquire(Some(b)).unwrap();
        assert_eq!(slots.acquire(None).unwrap_err(), Full::Total(3));
        drop(first);
        let _again = slots.acquire(Some(a)).unwrap();
        assert_eq!(client_key("2001:db8::1".parse().unwrap()), client_key("2001:db8::ffff:2".parse().unwrap()));
    }
}
