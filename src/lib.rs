//! Suzumio: a controller for multi-agent projects.
//!
//! Module map (layers call downward only; see ARCHITECTURE.md):
//! - [`commands`]: what each CLI command does, rendered as text or JSON.
//! - [`project`]: a loaded project = validated config + toolpack registry.
//! - [`config`]: `suzumio.yaml` loading and validation.
//! - [`toolpack`]: manifests, built-in packs, registry, allowlists, JSON Schemas.
//! - Later layers, filled by the issues named in their headers: [`web`], [`scheduler`],
//!   [`activation`], [`support`], [`js`], [`store`], [`backend`], [`rpc`], [`runner`].

#![forbid(unsafe_code)]

pub mod activation;
pub mod backend;
pub mod clock;
pub mod commands;
pub mod config;
pub mod controller;
pub mod js;
pub mod progress;
pub mod project;
pub mod rpc;
pub mod runner;
pub mod scheduler;
pub mod store;
pub mod support;
pub mod text;
pub mod toolpack;
pub mod web;

/// The version both binaries report (and the runner announces in its hello, from issue [D]).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
