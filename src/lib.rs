//! Suzumio: a controller for multi-agent projects.
//!
//! Module map (layers call downward only; see ARCHITECTURE.md):
//! - [`commands`]: what each CLI command does, rendered as text or JSON.
//! - [`project`]: a loaded project = validated config + toolpack registry.
//! - [`config`]: `suzumio.yaml` loading and validation.
//! - [`toolpack`]: manifests, built-in packs, registry, allowlists, JSON Schemas.

#![forbid(unsafe_code)]

pub mod commands;
pub mod config;
pub mod project;
pub mod toolpack;

/// The version both binaries report (and the runner announces in its hello, from issue [D]).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
