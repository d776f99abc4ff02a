//! Suzumio's core: what the controller and the in-container runner share, and nothing else.
//!
//! - [`config`]: `suzumio.yaml` loading and validation, the typed config.
//! - [`toolpack`]: manifests, built-in packs, the registry, allowlists, JSON Schemas, the tool
//!   output and error types.
//! - [`rpc`]: the wire protocol between controller and runner.
//! - [`disk`]: what a directory tree holds on disk (the disk quota's measurement).
//! - [`js`]: the embedded JavaScript host (rquickjs) both sides run packs with.
//! - [`unified_diff`]: unified diffs read and applied (the runner applies, the controller
//!   reads their paths for the permission rules).
//!
//! Architecture invariant: this crate links no web server, no database and no HTTP client.

#![forbid(unsafe_code)]

pub mod config;
pub mod disk;
pub mod fsat;
pub mod hosts;
pub mod js;
pub mod rpc;
pub mod text;
pub mod toolpack;
pub mod unified_diff;

/// The version both binaries report (and the runner announces in its hello).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
