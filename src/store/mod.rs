//! The project store: SQLite (WAL, one writer, migrations) for agents, activations, messages,
//! signals, tool calls and events; atomic toolpack state files. The only module that writes SQL.
//!
//! Lands with issue [B]; nothing here yet.
