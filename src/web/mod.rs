//! The HTTP API (axum), the SSE stream and the embedded WebUI.
//!
//! Lands with issue [F]; nothing here yet.
