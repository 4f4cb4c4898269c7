//! One module per command. Each returns the text to print on stdout (styled;
//! the caller strips styles where colors are off) or a [`CliError`](crate::error::CliError).

pub mod autoshard;
pub mod check;
pub mod conformance;
pub mod explain;
pub mod infer;
pub mod ops;
pub mod propagate;
pub mod show;
