//! The scheduler tick: signal delivery rules, nudges and monitors, toolpack scheduler hooks.
//!
//! Lands with issue [C]; nothing here yet.
