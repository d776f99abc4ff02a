//! Runner lifecycle: one hardened Docker container per agent (bollard), or a local process in
//! development.
//!
//! Lands with issue [D]; nothing here yet.
