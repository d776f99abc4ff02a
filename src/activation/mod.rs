//! Activations: prompt building (`prompt.rs`, reference §1.6); the model loop and providers
//! arrive with issue [E].

pub mod prompt;
pub mod providers;
