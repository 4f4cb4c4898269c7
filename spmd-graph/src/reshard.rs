//! The resharding plan of a propagated graph: every place where a tensor's
//! attr is not what the op at hand needs, the collectives that fix it, and
//! their communication volume.
//!
//! Each op's answer for the final attrs of its inputs is read: the one
//! propagation saved when it was given those attrs, else the rule runs once
//! more. Two kinds of edge can need a reshard:
//! - an **input** edge, when the tensor's attr differs from the rule's
//!   requirement (a partial matmul output read by an `add` needs its
//!   all-reduce);
//! - an **output** edge, when what the rule produces differs from the
//!   tensor's final attr (the tensor is annotated, or an op downstream fixed
//!   it first);
//! - a **result** edge, when a result of the graph (what its user reads) is
//!   left partial: it is reduced once, in its layout otherwise.
//!
//! The same conversion of the same tensor (same source and target attrs) is
//! done once and shared by every consumer that needs it.
//!
//! # Volumes
//!
//! Bytes sent per device, ring algorithms, for a group of `n` devices (the
//! product of the mesh dims involved) and `L` = the bytes of the local block
//! before the step:
//!
//! | step | bytes per device |
//! |---|---|
//! | all-reduce | `2 (n-1)/n · L` (reduce-scatter then all-gather) |
//! | reduce-scatter | `(n-1)/n · L` |
//! | all-gather | `(n-1)/n · G`, `G = n · L` the gathered block |
//! | all-to-all | `(n-1)/n · L` |
//! | reorder (co-shard order) | `L` (every block moves once) |
//! | local slice, mark partial | 0 |
//!
//! Local blocks use ceiling division (uneven shards count as the largest
//! one). Steps of one reshard apply in order, each on the block the previous
//! one left.

use std::collections::HashSet;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use spmd_core::{DistAttr, Mesh, MeshDim, Sharding};

use crate::error::GraphError;
use crate::graph::{Graph, OpId, TensorId};
use crate::propagate::Propagation;
use crate::steps::{Step, classify_sized};

/// An element type, for volumes in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    F64,
    #[default]
    F32,
    F16,
    Bf16,
    I64,
    I32,
    I8,
}

impl DType {
    pub const ALL: [DType; 7] = [
        DType::F64,
        DType::F32,
        DType::F16,
        DType::Bf16,
        DType::I64,
        DType::I32,
        DType::I8,
    ];

    pub fn bytes(self) -> u64 {
        match self {
            DType::F64 | DType::I64 => 8,
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::Bf16 => 2,
            DType::I8 => 1,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            DType::F64 => "f64",
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::Bf16 => "bf16",
            DType::I64 => "i64",
            DType::I32 => "i32",
            DType::I8 => "i8",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DType {
    type Err = String;
    fn from_str(s: &str) -> Result<DType, String> {
        DType::ALL
            .into_iter()
            .find(|d| d.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                let names: Vec<&str> = DType::ALL.iter().map(|d| d.name()).collect();
                format!("unknown dtype `{s}` (one of {})", names.join(", "))
            })
    }
}

/// Which side of an op a reshard sits on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case", tag = "side", content = "index")]
pub enum Edge {
    /// Before the op reads its input `i`.
    Input(usize),
    /// After the op writes its output `i`, to reach the tensor's attr.
    Output(usize),
    /// The op's output `i` is a result of the graph (what the user reads)
    /// and is left partial: it is reduced once, after the graph.
    Result(usize),
}

/// One reshard of the plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reshard {
    pub op: OpId,
    pub edge: Edge,
    pub tensor: TensorId,
    pub from: DistAttr,
    pub to: DistAttr,
    /// The steps, with the bytes each sends per device.
    pub steps: Vec<(Step, u64)>,
}

impl Reshard {
    pub fn bytes(&self) -> u64 {
        self.steps.iter().map(|(_, b)| b).sum()
    }
}

/// Every reshard of a propagated graph, in op order (inputs before outputs).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ReshardPlan {
    pub dtype: DType,
    pub reshards: Vec<Reshard>,
}

impl ReshardPlan {
    /// How many steps of this kind (`"all-reduce"`, see [`Step::kind`]).
    pub fn count(&self, kind: &str) -> usize {
        self.steps().filter(|s| s.kind() == kind).count()
    }
    /// Every step, in plan order.
    pub fn steps(&self) -> impl Iterator<Item = &Step> {
        self.reshards
            .iter()
            .flat_map(|r| r.steps.iter().map(|(s, _)| s))
    }
    /// Total bytes sent per device.
    pub fn bytes(&self) -> u64 {
        self.reshards.iter().map(Reshard::bytes).sum()
    }
    /// Steps that move data (not slices or partial marks).
    pub fn collectives(&self) -> usize {
        self.steps().filter(|s| s.communicates()).count()
    }
}

/// What op `o`'s rule answers under `prop`'s final attrs, as the reshard
/// plan reads it: the layouts its inputs are resharded to (`inputs`) and
/// the layouts it produces (`outputs`).
///
/// ```
/// use spmd_core::{Attrs, DistAttr, Mesh};
/// use spmd_graph::{GraphBuilder, answer, propagate};
///
/// let mut b = GraphBuilder::new(Mesh::new(&[2])?);
/// let x = b.tensor("x", &[4, 6])?;
/// let w = b.tensor("w", &[6, 8])?;
/// b.annotate(x, DistAttr::from_paddle(&[-1, 0]).unwrap())?;
/// b.apply("mm", "matmul", Attrs::new(), &[x, w], ("y", &[4, 8]))?;
/// let graph = b.build(&spmd_ops::builtins())?;
/// let prop = propagate(&graph)?;
/// let mm = graph.op_ids().next().unwrap();
/// let r = answer(&graph, &prop, mm)?;
/// assert_eq!(r.inputs[1].to_string(), "[0, -1]");
/// assert_eq!(r.outputs[0].to_string(), "[-1, -1] partial{0: SUM}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn answer(
    graph: &Graph,
    prop: &Propagation,
    o: OpId,
) -> Result<spmd_core::RuleResult, GraphError> {
    if let Some((inputs, outputs)) = prop.answer(graph, o) {
        return Ok(spmd_core::RuleResult {
            inputs: inputs.iter().cloned().collect(),
            outputs: outputs.iter().cloned().collect(),
        });
    }
    let mut out = spmd_core::RuleResult::default();
    graph
        .call_resolving_into(o, &prop.attrs, 0, &mut out)
        .map_err(|source| GraphError::Rule {
            op: graph.op(o).name.clone(),
            source,
        })?;
    Ok(out)
}

/// The reshard plan of `graph` under the attrs of `prop`, volumes in `dtype`.
pub fn plan(graph: &Graph, prop: &Propagation, dtype: DType) -> Result<ReshardPlan, GraphError> {
    let mut reshards = Vec::new();
    let mut seen: HashSet<(TensorId, DistAttr, DistAttr), rustc_hash::FxBuildHasher> =
        HashSet::default();
    let mut memo = crate::memo::Memo::default();
    for o in graph.op_ids() {
        let op = graph.op(o);
        // Propagation's own answer when it was given the final attrs; the
        // rule runs again only for the ops it was not.
        let (needs, made) = match prop.answer(graph, o) {
            Some(answer) => answer,
            None => {
                let i =
                    memo.forward(graph, o, &prop.attrs, 0)
                        .map_err(|source| GraphError::Rule {
                            op: op.name.clone(),
                            source,
                        })?;
                let r = memo.result(i);
                (r.inputs.as_slice(), r.outputs.as_slice())
            }
        };
        let mut add = |edge: Edge, t: TensorId, from: &DistAttr, to: &DistAttr| {
            if from == to {
                return;
            }
            if !seen.insert((t, from.clone(), to.clone())) {
                return;
            }
            let shape = graph.shape(t);
            let steps = classify_sized(from, to, shape, graph.mesh().shape());
            let bytes = volumes(&steps, from, shape, graph.mesh(), dtype);
            reshards.push(Reshard {
                op: o,
                edge,
                tensor: t,
                from: from.clone(),
                to: to.clone(),
                steps: steps.into_iter().zip(bytes).collect(),
            });
        };
        for (i, (&t, need)) in graph.inputs(o).iter().zip(needs).enumerate() {
            add(Edge::Input(i), t, prop.attr(t), need);
        }
        for (i, (&t, made)) in graph.outputs(o).iter().zip(made).enumerate() {
            add(Edge::Output(i), t, made, prop.attr(t));
        }
        // A result the user reads partial would be read wrong: it is
        // reduced, in its layout otherwise.
        for (i, &t) in graph.outputs(o).iter().enumerate() {
            let attr = prop.attr(t);
            if attr.partial.is_partial() && graph.result_wanted_whole(t) {
                let mut whole = attr.clone();
                whole.partial = spmd_core::Partial::NONE;
                add(Edge::Result(i), t, attr, &whole);
            }
        }
    }
    Ok(ReshardPlan { dtype, reshards })
}

/// Bytes per device of each step turning `from` into its target, for a
/// tensor of global `shape` (see the module docs for the formulas).
pub fn volumes(
    steps: &[Step],
    from: &DistAttr,
    shape: &[usize],
    mesh: &Mesh,
    dtype: DType,
) -> Vec<u64> {
    // How many blocks each tensor dim is split into, as the steps go.
    let mut split: Vec<usize> = (0..shape.len())
        .map(|d| {
            from.dims_mapping
                .get(d)
                .map_or(1, |s| group(mesh, s.iter()))
        })
        .collect();
    let local = |split: &[usize]| -> f64 {
        let elems: usize = shape
            .iter()
            .zip(split)
            .map(|(&e, &n)| e.div_ceil(n.max(1)))
            .product();
        elems as f64 * dtype.bytes() as f64
    };
    let frac = |n: usize| (n.saturating_sub(1)) as f64 / n.max(1) as f64;
    steps
        .iter()
        .map(|step| {
            let l = local(&split);
            let b = match step {
                Step::AllReduce { mesh_dims, .. } => {
                    2.0 * frac(group(mesh, mesh_dims.iter().copied())) * l
                }
                Step::ReduceScatter {
                    tensor_dim,
                    mesh_dims,
                    ..
                } => {
                    let n = group(mesh, mesh_dims.iter().copied());
                    scale(&mut split, *tensor_dim, n, true);
                    frac(n) * l
                }
                Step::AllToAll {
                    mesh_dim,
                    from_dim,
                    to_dim,
                } => {
                    let n = mesh.dim(*mesh_dim);
                    scale(&mut split, *from_dim, n, false);
                    scale(&mut split, *to_dim, n, true);
                    frac(n) * l
                }
                Step::AllGather {
                    tensor_dim,
                    mesh_dims,
                } => {
                    let n = group(mesh, mesh_dims.iter().copied());
                    scale(&mut split, *tensor_dim, n, false);
                    frac(n) * local(&split)
                }
                Step::Reorder { .. } => l,
                Step::Slice {
                    tensor_dim,
                    mesh_dims,
                } => {
                    scale(
                        &mut split,
                        *tensor_dim,
                        group(mesh, mesh_dims.iter().copied()),
                        true,
                    );
                    0.0
                }
                Step::MakePartial { .. } => 0.0,
            };
            b.round() as u64
        })
        .collect()
}

/// The number of devices along these mesh dims.
fn group(mesh: &Mesh, dims: impl Iterator<Item = MeshDim>) -> usize {
    dims.filter(|&d| (d as usize) < mesh.rank())
        .map(|d| mesh.dim(d))
        .product()
}

/// Splits tensor dim `d` `n` times more (`finer`) or fewer.
fn scale(split: &mut [usize], d: usize, n: usize, finer: bool) {
    if let Some(s) = split.get_mut(d) {
        *s = if finer {
            *s * n
        } else {
            (*s / n.max(1)).max(1)
        };
    }
}

/// The local block's shape of a tensor under an attr.
pub fn local_shape(shape: &[usize], attr: &DistAttr, mesh: &Mesh) -> Vec<usize> {
    shape
        .iter()
        .enumerate()
        .map(|(d, &e)| {
            let s = attr
                .dims_mapping
                .get(d)
                .copied()
                .unwrap_or(Sharding::REPLICATED);
            e.div_ceil(group(mesh, s.iter()).max(1))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use spmd_core::{Partial, ReduceType};

    fn a(m: &[i64]) -> DistAttr {
        DistAttr::from_paddle(m).unwrap()
    }

    fn bytes(from: &DistAttr, to: &DistAttr, shape: &[usize], mesh: &[usize]) -> Vec<u64> {
        let mesh = Mesh::new(mesh).unwrap();
        volumes(
            &classify_sized(from, to, shape, mesh.shape()),
            from,
            shape,
            &mesh,
            DType::F32,
        )
    }

    #[test]
    fn ring_volumes_per_step_kind() {
        // 4 devices, a [8, 16] f32 tensor: 512 bytes in all.
        let p = a(&[-1, -1]).with_partial(Partial::over(
            spmd_core::MeshSet::EMPTY.with(0),
            ReduceType::Sum,
        ));
        // All-reduce of the whole 512 bytes: 2 * 3/4 * 512.
        assert_eq!(bytes(&p, &a(&[-1, -1]), &[8, 16], &[4]), [768]);
        // Reduce-scatter: 3/4 * 512.
        assert_eq!(bytes(&p, &a(&[0, -1]), &[8, 16], &[4]), [384]);
        // All-gather of a 128-byte block into 512: 3/4 * 512.
        assert_eq!(bytes(&a(&[0, -1]), &a(&[-1, -1]), &[8, 16], &[4]), [384]);
        // All-to-all of a 128-byte block: 3/4 * 128.
        assert_eq!(bytes(&a(&[0, -1]), &a(&[-1, 0]), &[8, 16], &[4]), [96]);
        // A slice sends nothing.
        assert_eq!(bytes(&a(&[-1, -1]), &a(&[0, -1]), &[8, 16], &[4]), [0]);
    }

    #[test]
    fn steps_apply_in_order_on_the_block_the_last_one_left() {
        // Partial on mesh dim 0 (2), split on mesh dim 1 (4) along dim 1:
        // the all-reduce works on a [8, 4] block (128 bytes), the gather
        // then builds the [8, 16] one.
        let mesh_dim0 = spmd_core::MeshSet::EMPTY.with(0);
        let from = a(&[-1, 1]).with_partial(Partial::over(mesh_dim0, ReduceType::Sum));
        let got = bytes(&from, &a(&[-1, -1]), &[8, 16], &[2, 4]);
        assert_eq!(got, [128, 384]);
    }

    #[test]
    fn dtypes_parse_by_name() {
        assert_eq!("bf16".parse::<DType>(), Ok(DType::Bf16));
        assert_eq!(DType::Bf16.bytes(), 2);
        assert!("f8".parse::<DType>().unwrap_err().contains("bf16"));
    }
}
