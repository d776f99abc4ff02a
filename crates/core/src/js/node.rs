//! The Node-compatible modules packs may import (`node:path`, `node:fs`, …; bare `path`, `fs`
//! name the same ones), as embedded JavaScript served by the loader, and the private
//! `suzumio:runtime`/`suzumio:fs`/`suzumio:exec` modules they are built on. The native functions
//! they need (hashes, random bytes, UTF-8, timers) are installed by the engine; file and process
//! operations go through [`HostOps`](super::HostOps) (`fs.*`, `exec`), so each side confines them.

/// The `suzumio:` module every runtime evaluates before its glue: it installs the web globals
/// and takes the native functions off `globalThis`.
pub(super) const RUNTIME_MODULE: &str = "suzumio:runtime";

/// Every module a pack may import by name, with its source.
const PUBLIC: &[(&str, &str)] = &[
    ("node:buffer", include_str!("node/buffer.mjs")),
    ("node:child_process", include_str!("node/child_process.mjs")),
    ("node:crypto", include_str!("node/crypto.mjs")),
    ("node:events", include_str!("node/events.mjs")),
    ("node:fs", include_str!("node/fs.mjs")),
    ("node:fs/promises", include_str!("node/fs_promises.mjs")),
    ("node:os", include_str!("node/os.mjs")),
    ("node:path", include_str!("node/path.mjs")),
    ("node:path/posix", include_str!("node/path.mjs")),
    ("node:timers", include_str!("node/timers.mjs")),
    ("node:timers/promises", include_str!("node/timers_promises.mjs")),
    ("node:url", include_str!("node/url.mjs")),
    ("node:util", include_str!("node/util.mjs")),
];

/// The host's own modules, importable only by the glue and the modules above.
const PRIVATE: &[(&str, &str)] = &[
    (RUNTIME_MODULE, include_str!("node/runtime.mjs")),
    ("suzumio:fs", include_str!("node/fs_core.mjs")),
    ("suzumio:exec", include_str!("node/exec_core.mjs")),
];

/// The module `name` imports (`node:path` for `path` or `node:path`), if it is one of ours.
pub(super) fn canonical(name: &str) -> Option<&'static str> {
    let wanted = if name.starts_with("node:") { name.to_string() } else { format!("node:{name}") };
    PUBLIC.iter().map(|(n, _)| *n).find(|n| *n == wanted)
}

/// Whether `name` looks like a module name rather than a path or URL (`lodash`, `node:net`).
pub(super) fn is_module_name(name: &str) -> bool {
    name.starts_with("node:") || !(name.starts_with('.') || name.starts_with('/') || name.contains("://"))
}

/// What a pack can import by name, for the error that refuses anything else.
pub(super) fn supported() -> String {
    PUBLIC.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
}

/// Every embedded module by name, for the loader.
pub(super) fn sources() -> impl Iterator<Item = (&'static str, &'static str)> {
    PUBLIC.iter().chain(PRIVATE).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_and_prefixed_names_are_the_same_module() {
        assert_eq!(canonical("path"), Some("node:path"));
        assert_eq!(canonical("node:fs/promises"), Some("node:fs/promises"));
        assert_eq!(canonical("fs/promises"), Some("node:fs/promises"));
        assert_eq!(canonical("node:net"), None);
        assert_eq!(canonical("lodash"), None);
    }

    #[test]
    fn module_names_are_not_paths() {
        assert!(is_module_name("lodash"));
        assert!(is_module_name("node:net"));
        assert!(!is_module_name("./lib.mjs"));
        assert!(!is_module_name("/abs.mjs"));
        assert!(!is_module_name("https://x/y.mjs"));
    }
}
