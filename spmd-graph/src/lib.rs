//! Whole-graph sharding propagation on spmd's per-op rules: a few user
//! annotations spread through a graph of registry ops, forward and backward,
//! until nothing changes; then the reshard plan says which collectives the
//! result needs and how many bytes they move.
//!
//! ```
//! use spmd_core::{Attrs, DistAttr, Mesh};
//! use spmd_graph::{DType, GraphBuilder, plan, propagate};
//!
//! // Megatron's MLP on 4 devices: w1 split by columns, w2 by rows.
//! let mut b = GraphBuilder::new(Mesh::new(&[4])?);
//! let x = b.tensor("x", &[8, 64])?;
//! let w1 = b.param("w1", &[64, 256], DistAttr::from_paddle(&[-1, 0]))?;
//! let w2 = b.param("w2", &[256, 64], DistAttr::from_paddle(&[0, -1]))?;
//! let h = b.apply("fc1", "matmul", Attrs::new(), &[x, w1], ("h", &[8, 256]))?;
//! let a = b.apply("act", "gelu", Attrs::new(), &[h], ("a", &[8, 256]))?;
//! let y = b.apply("fc2", "matmul", Attrs::new(), &[a, w2], ("y", &[8, 64]))?;
//! let z = b.apply("out", "relu", Attrs::new(), &[y], ("z", &[8, 64]))?;
//! let graph = b.build(&spmd_ops::builtins())?;
//!
//! let p = propagate(&graph)?;
//! assert_eq!(p.attr(a).to_string(), "[-1, 0]");
//! assert_eq!(p.attr(y).to_string(), "[-1, -1] partial{0: SUM}");
//! let plan = plan(&graph, &p, DType::F32)?;
//! assert_eq!(plan.count("all-reduce"), 1);   // before relu reads y
//! assert_eq!(plan.bytes(), 2 * 3 * 8 * 64 * 4 / 4);
//! # Ok::<(), spmd_graph::GraphError>(())
//! ```
//!
//! # The propagation
//!
//! **Lattice.** Each tensor's attr is *unknown* or *known*. Annotated
//! tensors become known when their priority's round starts and stay as
//! annotated: propagation never overrides a user annotation. Every other
//! tensor goes from unknown to known exactly once, by the first op that can
//! infer it, and never changes afterwards.
//!
//! **Steps.** An op can run *forward* (its own direction; the grad inference
//! for grad ops) when one of its inputs is known, and *backward* (the rule's
//! reverse inference; forward ops only) when one of its outputs is known.
//! Unknown tensors enter the rule as replicated, as Paddle promotes dense
//! tensors, and the answer fixes every unknown tensor of the op: outputs get
//! the attrs the rule derives, inputs the attrs the rule requires. An op
//! whose tensors are all known is done and never runs again.
//!
//! **Order** (deterministic; the first applicable step wins a conflict):
//! 1. user annotations, by priority as in Shardy: the annotations of
//!    priority 0 (the default) propagate to a fixed point, then those of
//!    priority 1 become known and propagation resumes, and so on. Until its
//!    round an annotated tensor is unknown to the rules (yet never
//!    overwritten);
//! 2. op stage, as in Shardy: pass-through ops ([`Stage::PassThrough`]:
//!    elementwise and layout ops) run to a fixed point first, then one
//!    sweep runs every op ([`Stage::Other`]: contractions, norms, gathers,
//!    grad ops); whenever that sweep learns something, propagation starts
//!    over from the first stage. (Because a later stage never runs twice in
//!    a row, what one connected component of the graph does never changes
//!    the order of another's steps: interleaving the ops of independent
//!    components in any way gives the same attrs.)
//! 3. within a stage, a sweep walks the ops forward in topological order
//!    (the builder's insertion order), then backward in reverse order;
//! 4. within an op, its inputs then its outputs, in order.
//!
//! When two producers or consumers disagree about a tensor, the tensor keeps
//! the attr of the step that came first in this order; the other side gets
//! a reshard in the plan. When an op's known inputs disagree and its rule
//! rejects the combination (Paddle's strict elementwise rules), the rule
//! runs again seeing only the first known input's attr (the others
//! replicated): that input wins, the others are resharded to fit.
//!
//! **Termination.** A sweep either makes an unknown tensor known or ends its
//! stage; a restart needs a tensor to become known. So there are at most
//! `(tensors + priorities) × stages` sweeps, each of `O(ops)` steps.
//! Tensors no annotation reaches stay unknown and are reported replicated
//! ([`Origin::Unreached`]).
//!
//! # The reshard plan
//!
//! See [`reshard`]: each op's answer for the final attrs (the one
//! propagation saved when it was given those attrs, else the rule runs
//! again); where a tensor's
//! attr differs from what the op requires (or an op's output from its
//! tensor's attr), the difference is decomposed per mesh dim into
//! all-reduce, reduce-scatter, all-gather, all-to-all and local slices
//! ([`steps`]), with ring-algorithm volumes in bytes per device. A result
//! of the graph (a graph file's `outputs`, or what [`Graph::mark_results`]
//! marks) that propagation leaves partial is reduced once more, after the
//! graph, since its user reads it whole: a loss averaged over split batch
//! rows costs its all-reduce. A result annotated partial (`partial_dims` in
//! a graph file) is wanted partial and left so.
//!
//! # Training
//!
//! [`backward_graph`] builds the gradient graph of a propagated forward
//! graph from the rules' grad inference, with gradient accumulation and the
//! optimizer's layout on each parameter's gradient, so the plan of the
//! backward graph shows the backward collectives and the data-parallel
//! gradient all-reduces. [`json`] reads and writes graphs. Models built with
//! the builder (a GPT with Megatron-LM's annotations) live in `spmd-models`.
#![forbid(unsafe_code)]

pub mod annotations;
mod backward;
mod error;
mod graph;
pub mod json;
mod memo;
mod propagate;
pub mod report;
pub mod reshard;
pub mod steps;

pub use backward::{Backward, Given, backward_graph};
pub use error::{GraphError, MissingRule};
pub use graph::{Graph, GraphBuilder, OpId, OpInfo, OpKind, Stage, TensorId, TensorInfo};
pub use propagate::{Origin, Propagation, Stats, propagate};
pub use reshard::{DType, Edge, Reshard, ReshardPlan, answer, plan};
