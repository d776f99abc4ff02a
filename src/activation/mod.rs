//! Activations: prompt building, the model loop and the model providers.
//!
//! Lands with issue [E]; nothing here yet.
