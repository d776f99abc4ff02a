//! `backend`: which backend runs the runners (`kind`), the Docker section (`image` and
//! `backend.docker`) and the runner section (`backend.runner`: the activation limits, the
//! default model and the models, read in `models.rs`).

use super::{models, mounts};
use crate::config::diag::Diagnostics;
use crate::config::model::*;
use crate::config::node::{Node, Value};
use crate::config::read::{Obj, Retired};

const BACKEND_KEYS: &[&str] = &["kind", "image", "docker", "runner"];
const BACKEND_RETIRED: Retired =
    &[("controllerUrl", "runners reach the controller over a Unix socket; no URL is needed")];
const DOCKER_KEYS: &[&str] = &["network", "mounts", "memory", "cpus", "pidsLimit", "diskQuota", "prewarm"];
const DOCKER_RETIRED: Retired =
    &[("proxy", "containers have no network by default; set backend.docker.network to give them one")];
const RUNNER_KEYS: &[&str] = &["model", "maxIterations", "maxToolCalls", "models"];
const RUNNER_RETIRED: Retired =
    &[("mode", "there is one runner mode, the model loop the reference calls `ai`; remove it")];

/// The reference's `backend.kind`, which names the same Docker backend.
const REFERENCE_DOCKER_KIND: &str = "docker-chat";

const DEFAULT_NETWORK: &str = "none";
const DEFAULT_MEMORY: u64 = 1024 * 1024 * 1024;
const DEFAULT_CPUS: f64 = 1.0;
const DEFAULT_PIDS_LIMIT: u64 = 256;
const DEFAULT_DISK_QUOTA: u64 = 5 * 1024 * 1024 * 1024;

/// The backend (`None` when `backend` is not a mapping), the activation limits and the models,
/// which live under `backend.runner` in the file.
pub(super) fn read(node: &Node, d: &mut Diagnostics) -> (Option<BackendConfig>, ActivationLimits, ModelsConfig) {
    let Some(b) = Obj::open(node, "backend", BACKEND_KEYS, BACKEND_RETIRED, d) else {
        return (None, ActivationLimits::default(), ModelsConfig::default());
    };
    let kind = read_kind(&b, d);
    let null = Node::new(Value::Null, b.node.loc.clone());
    let docker = read_docker(&b, b.get("docker").unwrap_or(&null), d);
    let (activation, models) =
        match Obj::open(b.get("runner").unwrap_or(&null), "backend.runner", RUNNER_KEYS, RUNNER_RETIRED, d) {
            Some(r) => {
                let activation = ActivationLimits {
                    max_iterations: r.int_at_least("maxIterations", 1, d).map(|v| v as u64),
                    max_tool_calls: r.int_at_least("maxToolCalls", 1, d).map(|v| v as u64),
                };
                (activation, models::read(&r, d))
            }
            None => (ActivationLimits::default(), ModelsConfig::default()),
        };
    (Some(BackendConfig { kind, docker }), activation, models)
}

fn read_kind(b: &Obj, d: &mut Diagnostics) -> BackendKind {
    if let Some(node) = b.get("kind")
        && node.as_str() == Some(REFERENCE_DOCKER_KIND)
    {
        d.error(
            Some(&node.loc),
            "backend.kind",
            format!("`{REFERENCE_DOCKER_KIND}` is the reference's name for the Docker backend; write `docker`"),
        );
        return BackendKind::Docker;
    }
    b.one_of("kind", BackendKind::NAMES, d).and_then(|k| k.parse().ok()).unwrap_or(BackendKind::Docker)
}

/// `backend.image` and `backend.docker`; the defaults when `backend.docker` is not a mapping.
fn read_docker(b: &Obj, node: &Node, d: &mut Diagnostics) -> DockerConfig {
    let image = b.string("image", d).unwrap_or_else(|| DEFAULT_IMAGE.to_string());
    let Some(k) = Obj::open(node, "backend.docker", DOCKER_KEYS, DOCKER_RETIRED, d) else {
        return DockerConfig {
            image,
            network: DEFAULT_NETWORK.to_string(),
            mounts: Vec::new(),
            memory_bytes: DEFAULT_MEMORY,
            cpus: DEFAULT_CPUS,
            pids_limit: DEFAULT_PIDS_LIMIT,
            disk_quota_bytes: DEFAULT_DISK_QUOTA,
            prewarm: Prewarm::default(),
        };
    };
    DockerConfig {
        image,
        network: k.string("network", d).unwrap_or_else(|| DEFAULT_NETWORK.to_string()),
        mounts: k.get("mounts").map(|n| mounts::read(n, "backend.docker.mounts", d)).unwrap_or_default(),
        memory_bytes: read_size(&k, "memory", DEFAULT_MEMORY, 6 << 20, "6m", d),
        cpus: match k.number("cpus", d) {
            Some(c) if c <= 0.0 => {
                d.error(Some(&k.key_loc("cpus")), "backend.docker.cpus", format!("must be greater than 0, got {c}"));
                DEFAULT_CPUS
            }
            Some(c) => c,
            None => DEFAULT_CPUS,
        },
        pids_limit: k.int_at_least("pidsLimit", 1, d).map_or(DEFAULT_PIDS_LIMIT, |v| v as u64),
        disk_quota_bytes: read_size(&k, "diskQuota", DEFAULT_DISK_QUOTA, 1 << 20, "1m", d),
        prewarm: read_prewarm(&k, d),
    }
}

/// `prewarm`: `pending`, `all` or `off`; `true` and `false` read as `pending` and `off`.
fn read_prewarm(k: &Obj, d: &mut Diagnostics) -> Prewarm {
    match k.get("prewarm").map(|n| &n.value) {
        Some(Value::Bool(true)) => Prewarm::Pending,
        Some(Value::Bool(false)) => Prewarm::Off,
        _ => k.one_of("prewarm", Prewarm::NAMES, d).and_then(|p| p.parse().ok()).unwrap_or_default(),
    }
}

/// A size such as `memory: 512m` / `2g` / `1048576`, at least `min` (written `min_text`).
fn read_size(k: &Obj, key: &str, default: u64, min: u64, min_text: &str, d: &mut Diagnostics) -> u64 {
    let Some(node) = k.get(key) else {
        return default;
    };
    let parsed = match &node.value {
        Value::Int(i) if *i > 0 => Some(*i as u64),
        Value::Str(s) => parse_size(s),
        _ => None,
    };
    match parsed {
        Some(bytes) if bytes >= min => bytes,
        _ => {
            d.error(
                Some(&node.loc),
                format!("backend.docker.{key}"),
                format!("must be a size of at least {min_text}, such as 512m or 2g (or a number of bytes)"),
            );
            default
        }
    }
}

fn parse_size(text: &str) -> Option<u64> {
    let t = text.trim().to_ascii_lowercase();
    let t = t.strip_suffix('b').unwrap_or(&t);
    let (digits, factor) = match t.chars().last()? {
        'k' => (&t[..t.len() - 1], 1u64 << 10),
        'm' => (&t[..t.len() - 1], 1 << 20),
        'g' => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    digits.trim().parse::<u64>().ok().and_then(|n| n.checked_mul(factor))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_units() {
        assert_eq!(parse_size("512m"), Some(512 << 20));
        assert_eq!(parse_size("2G"), Some(2 << 30));
        assert_eq!(parse_size("64kb"), Some(64 << 10));
        assert_eq!(parse_size("lots"), None);
    }
}
