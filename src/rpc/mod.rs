//! The controller ⇄ runner wire protocol: newline-delimited JSON-RPC 2.0 over a Unix socket.
//!
//! Lands with issue [D]; nothing here yet.
