//! The agents' control sockets: each bound under `.suzumio/run/<agent>/`, and every accepted
//! connection checked before its hello (the peer's uid, the number waiting for a hello); each
//! refusal is a rate-limited `security.session_refused` event.

use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use tokio::net::UnixListener;

use super::{AgentRunners, MAX_PENDING_HELLOS, Slot};
use crate::backend::TOKEN_FILE;
use crate::store::Event;

/// Security events recorded per agent per window; more are counted into the next one.
const SECURITY_EVENTS_PER_WINDOW: u32 = 20;
const SECURITY_EVENT_WINDOW: Duration = Duration::from_secs(60);

impl AgentRunners {
    /// Create every agent's socket and accept its runner's connections.
    pub fn listen(&self) -> std::io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        if self.peer_uids.is_none() {
            tracing::warn!("the backend cannot say which uid its runners have: peer credentials are not checked");
        }
        for slot in self.slots.values() {
            let dir = &slot.run_dir;
            std::fs::create_dir_all(dir)?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
            let _ = std::fs::remove_file(dir.join(TOKEN_FILE));
            let path = dir.join("control.sock");
            let _ = std::fs::remove_file(&path);
            // Bound through the directory's descriptor: the kernel keeps the path as given, and
            // an accepted connection shows it in the peer's `/proc/net/unix` (in the container's
            // network namespace), so it must not be the host path.
            let dir_handle = std::fs::File::open(dir)?;
            let listener = UnixListener::bind(format!("/proc/self/fd/{}/control.sock", dir_handle.as_raw_fd()))?;
            drop(dir_handle);
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666))?;
            let me = self.me.clone();
            let slot = slot.clone();
            let stopping = self.stopping.clone();
            let tasks = self.tasks.clone();
            let peer_uids = self.peer_uids.clone();
            self.tasks.spawn(async move {
                loop {
                    let accepted = tokio::select! {
                        _ = stopping.cancelled() => return,
                        accepted = listener.accept() => accepted,
                    };
                    let stream = match accepted {
                        Ok((stream, _)) => stream,
                        // Out of file descriptors (EMFILE) and the like: wait and go on; one bad
                        // moment must not leave the agent without its socket.
                        Err(e) => {
                            tracing::warn!(agent = %slot.agent, "accepting a runner connection: {e}");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            continue;
                        }
                    };
                    let Some(runners) = me.upgrade() else { return };
                    let peer = stream.peer_cred().ok();
                    let (uid, pid) = (peer.map(|p| p.uid()), peer.and_then(|p| p.pid()));
                    if let Some(allowed) = &peer_uids
                        && !uid.is_some_and(|uid| allowed.contains(&uid))
                    {
                        let shown = uid.map_or("unknown".to_string(), |u| u.to_string());
                        let expected = allowed.iter().map(u32::to_string).collect::<Vec<_>>().join(" or ");
                        runners.refused(&slot, format!("peer uid {shown} is not the runner's ({expected})"), uid, pid);
                        continue;
                    }
                    let Ok(permit) = slot.pending_hellos.clone().try_acquire_owned() else {
                        let reason = format!("more than {MAX_PENDING_HELLOS} connections waiting for their hello");
                        runners.refused(&slot, reason, uid, pid);
                        continue;
                    };
                    let (slot, stopping) = (slot.clone(), stopping.clone());
                    tasks.spawn(async move {
                        let _permit = permit;
                        tokio::select! {
                            _ = stopping.cancelled() => {}
                            _ = runners.handshake(&slot, stream, uid, pid) => {}
                        }
                    });
                }
            });
        }
        Ok(())
    }

    /// Log a refused connection or hello and record it as a security event (at most
    /// [`SECURITY_EVENTS_PER_WINDOW`] per agent a minute; the rest are counted into the next).
    pub(super) fn refused(&self, slot: &Slot, reason: String, peer_uid: Option<u32>, peer_pid: Option<i32>) {
        let suppressed = {
            let mut log = slot.refusals.lock().unwrap_or_else(|e| e.into_inner());
            match log.admit(Instant::now()) {
                Some(suppressed) => suppressed,
                None => return,
            }
        };
        tracing::warn!(agent = %slot.agent, ?peer_uid, ?peer_pid, "refused a connection to the control socket: {reason}");
        let event =
            Event::SecuritySessionRefused { agent_id: slot.agent.clone(), reason, peer_uid, peer_pid, suppressed };
        if let Err(e) = self.tools.store.append_event(event) {
            tracing::warn!(agent = %slot.agent, "cannot record a security event: {e}");
        }
    }
}

/// Counts refusals in fixed windows, so that a flood cannot flood the timeline.
#[derive(Default)]
pub(super) struct RefusalLog {
    window_start: Option<Instant>,
    recorded: u32,
    suppressed: u64,
}

impl RefusalLog {
    /// `Some(suppressed since the last recorded one)` when this refusal is to be recorded.
    fn admit(&mut self, now: Instant) -> Option<u64> {
        if self.window_start.is_none_or(|start| now.duration_since(start) >= SECURITY_EVENT_WINDOW) {
            self.window_start = Some(now);
            self.recorded = 0;
        }
        if self.recorded >= SECURITY_EVENTS_PER_WINDOW {
            self.suppressed += 1;
            return None;
        }
        self.recorded += 1;
        Some(std::mem::take(&mut self.suppressed))
    }
}
