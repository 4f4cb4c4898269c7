//! Models written with [`spmd_graph`]'s builder, annotated as their parallel
//! training frameworks annotate them: workloads for propagation, for tests
//! and for benchmarks. The graph engine knows none of them.
//!
//! [`gpt()`] builds a GPT-style model with Megatron-LM's tensor-parallel
//! annotations (and, on a second mesh dim, data parallelism).
#![forbid(unsafe_code)]

pub mod gpt;

pub use gpt::{Gpt, GptConfig, gpt};
