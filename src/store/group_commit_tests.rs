//! Group commit against a real SQLite file: callers that queue while one holds the writer share
//! its commit, a failing (or panicking) caller loses only its own part, and the broadcast stays
//! in id order across batches. The kill -9 durability check is `tests/group_commit.rs`.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use chrono::{TimeZone, Utc};
use tempfile::TempDir;

use crate::clock::ManualClock;
use crate::store::{Durability, Event, EventRecord, Store, StoreError};

fn store() -> (TempDir, Store) {
    let dir = tempfile::Builder::new().prefix("suzumio-group-commit-").tempdir().expect("temp dir");
    std::fs::write(
        dir.path().join("suzumio.yaml"),
        "name: g\ntask: T.\nagents:\n  pm: {}\nbackend:\n  runner:\n    model: main\n    models:\n      \
         providers: {local: {type: scripted}}\n      presets: {main: {provider: local}}\n",
    )
    .expect("config written");
    let loaded = crate::config::load_config(dir.path(), &crate::config::load::ProcessEnv).expect("config");
    let config = loaded.config.expect("a valid config");
    let clock = Arc::new(ManualClock::new(Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).single().expect("a time")));
    let store = Store::open(&config, clock).expect("store");
    (dir, store)
}

fn marker(key: String) -> Event {
    Event::Unrecognized { kind: "test.group_commit".into(), data: serde_json::json!({ "key": key }) }
}

/// One write of caller `key`: an event, then success or (when `fail`) its own error.
fn write(store: &Store, key: String, fail: bool) -> Result<EventRecord, StoreError> {
    store.write(|w| {
        let record = w.event(marker(key))?;
        if fail { Err(StoreError::KindRequired) } else { Ok(record) }
    })
}

fn keys_in_store(store: &Store) -> Vec<String> {
    let mut all = Vec::new();
    loop {
        let page = store.events_after(all.last().map_or(0, |e: &EventRecord| e.id), 1000).expect("events read");
        if page.is_empty() {
            break;
        }
        all.extend(page);
    }
    all.into_iter()
        .filter_map(|e| match e.event {
            Event::Unrecognized { kind, data } if kind == "test.group_commit" => {
                data.get("key").and_then(|k| k.as_str()).map(str::to_string)
            }
            _ => None,
        })
        .collect()
}

/// Run `f(store, t)` on `threads` threads that start together; their results in thread order.
fn at_once<T: Send + 'static>(
    store: &Store,
    threads: usize,
    f: impl Fn(&Store, usize) -> T + Send + Sync + Copy + 'static,
) -> Vec<T> {
    let start = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (store, start) = (store.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                f(&store, t)
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().expect("writer thread")).collect()
}

/// Wait (a deadline only guards against hanging) until `n` callers queue for the writer.
fn until_queued(store: &Store, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while store.inner.queued.load(Ordering::SeqCst) < n {
        assert!(Instant::now() < deadline, "{n} writers never queued for the writer");
        std::thread::yield_now();
    }
}

/// A writer (its row keyed `leader`) that holds the writer lock until `queued` callers wait
/// behind it, who then form its batch; returned once it is inside its write.
fn leading_a_batch(store: &Store, queued: usize) -> std::thread::JoinHandle<Result<EventRecord, StoreError>> {
    leading_a_batch_with(store, queued, Durability::Now)
}

fn leading_a_batch_with(
    store: &Store,
    queued: usize,
    durability: Durability,
) -> std::thread::JoinHandle<Result<EventRecord, StoreError>> {
    let inside = Arc::new(Barrier::new(2));
    let leader = {
        let (store, inside) = (store.clone(), inside.clone());
        std::thread::spawn(move || {
            store.write_with(durability, |w| {
                let record = w.event(marker("leader".into()))?;
                inside.wait();
                until_queued(&store, queued);
                Ok(record)
            })
        })
    };
    inside.wait();
    leader
}

#[test]
fn callers_queued_behind_a_write_share_one_commit_and_a_failing_one_loses_only_its_own_part() {
    let (_dir, store) = store();
    let mut events = store.subscribe();
    let before = store.commits();
    // The first caller holds the writer until the 15 others queue: they then form its batch.
    let others = 15;
    let leader = leading_a_batch(&store, others);
    let followers: Vec<_> = (0..others)
        .map(|i| {
            let store = store.clone();
            std::thread::spawn(move || write(&store, format!("w{i}"), i % 3 == 0))
        })
        .collect();
    let leader = leader.join().expect("leader thread").expect("leader's write");
    let mut ok = vec![leader.id];
    for (i, t) in followers.into_iter().enumerate() {
        match (i % 3 == 0, t.join().expect("writer thread")) {
            (false, Ok(record)) => ok.push(record.id),
            (true, Err(StoreError::KindRequired)) => {}
            (fail, other) => panic!("writer {i} (fail: {fail}) got {other:?}"),
        }
    }
    assert_eq!(store.commits() - before, 1, "the 16 writes shared one commit");

    let mut expected: Vec<String> = std::iter::once("leader".to_string())
        .chain((0..others).filter(|i| i % 3 != 0).map(|i| format!("w{i}")))
        .collect();
    let mut found = keys_in_store(&store);
    expected.sort();
    found.sort();
    assert_eq!(found, expected, "every successful caller's row, no failed caller's");

    // Broadcast after the commit, in id order, exactly the parts that stand.
    ok.sort();
    let sent: Vec<i64> = std::iter::from_fn(|| events.try_recv().ok()).map(|e| e.id).collect();
    assert_eq!(sent, ok);
}

#[test]
fn a_panicking_caller_loses_its_part_and_its_batch_mates_are_still_answered() {
    let (_dir, store) = store();
    let leader = leading_a_batch(&store, 2);
    let panicking = {
        let store = store.clone();
        std::thread::spawn(move || {
            store.write(|w| -> Result<(), StoreError> {
                w.event(marker("panicked".into()))?;
                panic!("a caller's closure panics mid-write");
            })
        })
    };
    let other = {
        let store = store.clone();
        std::thread::spawn(move || write(&store, "other".into(), false))
    };
    assert!(leader.join().expect("leader thread").is_ok());
    assert!(panicking.join().is_err(), "the panic reaches its own caller");
    assert!(other.join().expect("other thread").is_ok());
    let mut found = keys_in_store(&store);
    found.sort();
    assert_eq!(found, ["leader", "other"]);
}

#[test]
fn the_broadcast_is_in_id_order_under_16_concurrent_writers() {
    let (_dir, store) = store();
    let mut events = store.subscribe();
    let each = 40;
    let mut ok: Vec<i64> = at_once(&store, 16, move |store, t| {
        (0..each)
            .filter_map(|i| write(store, format!("{t}/{i}"), (t + i) % 5 == 0).ok().map(|r| r.id))
            .collect::<Vec<_>>()
    })
    .into_iter()
    .flatten()
    .collect();
    ok.sort();
    let sent: Vec<i64> = std::iter::from_fn(|| events.try_recv().ok()).map(|e| e.id).collect();
    assert_eq!(sent, ok, "every committed event once, in id order");
    assert_eq!(keys_in_store(&store).len(), ok.len());
    assert_eq!(store.inner.published.load(Ordering::SeqCst), *ok.last().expect("some writes"));
}

#[test]
fn a_lone_writer_commits_each_write_itself() {
    let (_dir, store) = store();
    let before = store.commits();
    for i in 0..5 {
        write(&store, format!("{i}"), false).expect("write");
        assert_eq!(store.commits() - before, i + 1, "committed before it returned");
    }
}

#[test]
fn a_checkpoint_commits_an_open_batch_first() {
    let (_dir, store) = store();
    // A batch left open for a queued caller is committed by whoever needs the writer idle.
    let mut guard = super::lock_writer(&store.inner.writer);
    guard.conn.execute_batch("BEGIN IMMEDIATE").expect("begin");
    guard.batch = Some(super::Batch::default());
    let outcome = guard.batch.as_ref().map(|b| b.outcome.clone()).expect("a batch");
    super::run_member(&mut guard, Utc::now(), |w| w.event(marker("open".into()))).0.expect("member");
    drop(guard);
    store.checkpoint().expect("checkpoint");
    outcome.wait().expect("the open batch committed");
    assert_eq!(keys_in_store(&store), ["open"]);
}

#[test]
fn another_process_still_gets_the_write_lock_while_16_writers_stream() {
    let (_dir, store) = store();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = (0..16)
        .map(|t| {
            let (store, stop) = (store.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut i = 0;
                while !stop.load(Ordering::SeqCst) {
                    write(&store, format!("{t}/{i}"), false).expect("in-process write");
                    i += 1;
                }
            })
        })
        .collect();
    // What a CLI command does: its own connection, BEGIN IMMEDIATE under busy_timeout.
    let other = rusqlite::Connection::open(store.path()).expect("second connection");
    other.busy_timeout(super::BUSY_TIMEOUT).expect("busy timeout");
    let result = (0..20).try_for_each(|i| {
        other.execute_batch("BEGIN IMMEDIATE")?;
        other.execute(
            "INSERT INTO events (type, data_json, created_at) VALUES ('test.group_commit', ?1, '2026-03-01T12:00:00.000Z')",
            [format!("{{\"key\":\"cli/{i}\"}}")],
        )?;
        other.execute_batch("COMMIT")
    });
    stop.store(true, Ordering::SeqCst);
    for w in writers {
        w.join().expect("writer thread");
    }
    result.expect("the other connection's 20 transactions got the write lock within busy_timeout");
    assert_eq!(keys_in_store(&store).iter().filter(|k| k.starts_with("cli/")).count(), 20);
}

#[test]
fn a_deferred_write_commits_without_a_sync_and_the_next_durable_one_syncs_both() {
    let (_dir, store) = store();
    let syncs = store.syncs();
    store.write_with(Durability::WithNextCommit, |w| w.event(marker("deferred".into()))).expect("deferred write");
    assert_eq!(store.syncs(), syncs, "a deferred write's commit does not sync");
    write(&store, "durable".into(), false).expect("durable write");
    assert_eq!(store.syncs(), syncs + 1, "the durable write's commit syncs the WAL");
    assert_eq!(keys_in_store(&store), ["deferred", "durable"]);
}

#[test]
fn a_durable_member_makes_its_whole_batch_durable() {
    let (_dir, store) = store();
    let (commits, syncs) = (store.commits(), store.syncs());
    // A deferred leader holds the writer until a deferred and a durable caller queue: all three
    // share one commit, which syncs because one of them asked for it.
    let leader = leading_a_batch_with(&store, 2, Durability::WithNextCommit);
    let deferred = {
        let store = store.clone();
        std::thread::spawn(move || store.write_with(Durability::WithNextCommit, |w| w.event(marker("deferred".into()))))
    };
    let durable = {
        let store = store.clone();
        std::thread::spawn(move || write(&store, "durable".into(), false))
    };
    leader.join().expect("leader thread").expect("leader's write");
    deferred.join().expect("deferred thread").expect("deferred write");
    durable.join().expect("durable thread").expect("durable write");
    assert_eq!((store.commits() - commits, store.syncs() - syncs), (1, 1), "one commit, synced");
    let before = store.syncs();
    store.make_durable().expect("nothing left");
    assert_eq!(store.syncs(), before, "the last commit was synced: nothing to do");
    let mut found = keys_in_store(&store);
    found.sort();
    assert_eq!(found, ["deferred", "durable", "leader"]);
}

#[test]
fn make_durable_syncs_what_a_deferring_handle_wrote() {
    let (_dir, store) = store();
    write(&store, "durable".into(), false).expect("durable write");
    let syncs = store.syncs();
    store.make_durable().expect("nothing to sync");
    assert_eq!(store.syncs(), syncs, "the last commit was synced: no sync");

    store.deferring().write(|w| w.event(marker("deferred".into()))).expect("deferred write");
    assert_eq!(store.syncs(), syncs, "a deferring handle's write commits without a sync");
    store.make_durable().expect("sync");
    assert_eq!(store.syncs(), syncs + 1, "one sync");
    store.make_durable().expect("nothing left");
    assert_eq!(store.syncs(), syncs + 1, "synced already: no second sync");
    assert_eq!(keys_in_store(&store), ["durable", "deferred"]);
}

#[test]
fn sixteen_threads_syncing_their_deferred_writes_keep_every_write_and_end_synced() {
    let (_dir, store) = store();
    let (threads, each) = (16, 20);
    at_once(&store, threads, move |store, t| {
        for i in 0..each {
            store.deferring().write(|w| w.event(marker(format!("{t}/{i}")))).expect("deferred write");
            store.make_durable().expect("sync");
        }
    });
    assert_eq!(keys_in_store(&store).len(), threads * each);
    assert!(!store.inner.unsynced.load(Ordering::SeqCst), "everything synced at the end");
}
