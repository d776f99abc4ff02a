//! The in-container runner: built-in runner tools (file.*, shell.exec) and runner.mjs hosting.
//!
//! Lands with issue [D]; nothing here yet.
