//! The callSupport broker: the verification chain, then dispatch to a built-in handler or a
//! pack's controller module.
//!
//! Lands with issue [D]; nothing here yet.
