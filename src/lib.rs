//! Suzumio: a controller for multi-agent projects. This crate is the controller; what it shares
//! with the in-container runner lives in `suzumio-core` (re-exported here, so `crate::config`
//! and friends read the same everywhere), and the runner itself in `suzumio-runner`.
//!
//! Module map (layers call downward only; see ARCHITECTURE.md):
//! - [`commands`]: what each CLI command does, rendered as text or JSON.
//! - [`controller`]: `suzumio run`: serve, schedule, run activations, shut down.
//! - [`web`]: the HTTP API, the SSE stream and the embedded WebUI.
//! - [`scheduler`]: signal delivery, nudges, monitors, pack hooks.
//! - [`activation`]: the model loop, prompts, model providers.
//! - [`calls`]: the tool-call pipeline every caller goes through (allowlist, schema, hooks,
//!   decision, approval, dispatch, record, audit).
//! - [`support`]: controller-side tools and the `callSupport` broker, agent runners.
//! - [`store`]: SQLite state and pack state files.
//! - [`backend`]: runner containers (Docker) and local runner processes.
//! - [`project`]: a loaded project = validated config + toolpack registry.
//! - from the core: [`config`], [`toolpack`], [`rpc`], [`js`], [`text`].

#![forbid(unsafe_code)]

pub mod activation;
pub mod backend;
pub mod calls;
pub mod catalog;
pub mod clock;
pub mod commands;
pub mod controller;
pub mod mcp_serve;
pub mod permissions;
pub mod progress;
pub mod project;
pub mod scheduler;
pub mod store;
pub mod support;
pub mod web;

pub use suzumio_core::{VERSION, config, disk, fsat, hosts, js, rpc, text, toolpack, unified_diff};
