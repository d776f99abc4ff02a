//! Embedded JavaScript host (rquickjs): one runtime per toolpack on its own thread, a module
//! loader confined to the pack root, deadlines and memory limits on every call.
//!
//! Lands with issue [B]; nothing here yet.
