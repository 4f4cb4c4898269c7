//! Ops that cut a tensor along an axis or join tensors along one: `split`,
//! `split_with_num`, `unbind`, `slice`, `strided_slice`, `concat`, `stack`.
//! The cut or joined axis is never sharded (its pieces would not line up
//! with the devices' blocks); every other dim keeps its sharding.

use spmd_core::notation::Pos;
use spmd_core::{Call, spmd_rule};

/// Paddle's `split`: cuts `x` along `axis` into pieces of the sizes in
/// `sections` (one of them may be -1), one output each. The split axis is
/// never sharded.
#[spmd_rule(
    name = "split",
    einsum = "@{axis:1}->@{axis:1}^sections()",
    partial(backward = "reset")
)]
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Split {
    pub sections: Vec<i64>,
    #[spmd(default)]
    pub axis: i64,
}

impl Split {
    /// One output per section.
    fn sections(&self) -> Pos<'_> {
        Pos::Int(i64::try_from(self.sections.len()).unwrap_or(i64::MAX))
    }
}

/// Paddle's `split_with_num`: cuts `x` along `axis` into `num` equal pieces.
/// The split axis is never sharded.
#[spmd_rule(
    name = "split_with_num",
    einsum = "@{axis:1}->@{axis:1}^num",
    partial(backward = "reset")
)]
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct SplitWithNum {
    pub num: i64,
    #[spmd(default)]
    pub axis: i64,
}

/// Paddle's `unbind`: one output per index of dim `axis`, which the outputs
/// lack. That dim is never sharded.
#[spmd_rule(
    name = "unbind",
    einsum = "@{axis:1}->@{axis:-}^pieces(call)",
    partial(backward = "reset")
)]
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Unbind {
    #[spmd(default)]
    pub axis: i64,
}

impl Unbind {
    /// One output per index of the unbound dim: its extent (a 0-d tensor has
    /// none, and `0` pieces is an error).
    fn pieces(&self, call: &Call<'_>) -> i64 {
        let shape = call.input_shape(0).unwrap_or(&[]);
        let axis = if self.axis < 0 {
            self.axis + shape.len() as i64
        } else {
            self.axis
        };
        usize::try_from(axis)
            .ok()
            .and_then(|a| shape.get(a))
            .map_or(0, |&n| i64::try_from(n.max(1)).unwrap_or(i64::MAX))
    }
}

/// Paddle's `slice`: takes `starts[i]..ends[i]` of each dim in `axes`;
/// those dims are never sharded (a device's block would not hold its part
/// of the slice), the dims in `decrease_axis` are dropped from the output.
#[spmd_rule(
    name = "slice",
    einsum = "@{axes:1}->@{axes:1; decrease_axis:-}",
    partial(backward = "reset"),
    inputs(input),
    outputs(out)
)]
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Slice {
    pub axes: Vec<i64>,
    #[spmd(default)]
    pub starts: Vec<i64>,
    #[spmd(default)]
    pub ends: Vec<i64>,
    #[spmd(default)]
    pub infer_flags: Vec<i64>,
    #[spmd(default)]
    pub decrease_axis: Vec<i64>,
}

/// Paddle's `strided_slice`: `slice` with `strides`; the sliced dims are
/// never sharded.
#[spmd_rule(
    name = "strided_slice",
    einsum = "@{axes:1}->@{axes:1}",
    partial(backward = "reset"),
    inputs(x),
    outputs(out)
)]
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct StridedSlice {
    pub axes: Vec<i64>,
    #[spmd(default)]
    pub starts: Vec<i64>,
    #[spmd(default)]
    pub ends: Vec<i64>,
    #[spmd(default)]
    pub strides: Vec<i64>,
}

/// Paddle's `concat`: joins its inputs along `axis`, which is never
/// sharded.
///
/// Forward and grad align the operands with Paddle's cost rule
/// (`AlignDimsSharding`; `merge(conflicts = "align")`, see
/// [`Conflicts::Align`](spmd_core::Conflicts::Align)) rather than merging
/// them: where two inputs shard a dim differently, Paddle moves the mesh dim
/// to the cheapest dim instead of failing. Backward is the classic merge of
/// the output.
#[spmd_rule(
    name = "concat",
    einsum = "@{axis:1}^->@{axis:1}",
    merge(conflicts = "align"),
    partial(backward = "explain")
)]
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Concat {
    #[spmd(default)]
    pub axis: i64,
}

/// Paddle's `stack`: joins its inputs along a new dim at `axis`, which is
/// never sharded. Forward aligns the inputs as `concat` does (every input
/// dim is aligned); backward is the classic merge of the output. The grad
/// op takes only `out_grad` (Paddle's `StackGradInferSpmd`): its `axis` dim
/// counts the inputs.
#[spmd_rule(
    name = "stack",
    einsum = "@^pieces(call)->@{axis:+1}",
    merge(conflicts = "align"),
    partial(backward = "explain"),
    grad(inputs())
)]
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Stack {
    #[spmd(default)]
    pub axis: i64,
}

impl Stack {
    /// How many tensors are stacked: the inputs given, or, for a grad call
    /// that gives only `out_grad`, the extent of its `axis` dim.
    fn pieces(&self, call: &Call<'_>) -> i64 {
        let n = match (call.n_inputs(), call.output_shape(0)) {
            (0, Some(out)) => {
                let rank = out.len() as i64;
                let axis = if self.axis < 0 {
                    self.axis + rank
                } else {
                    self.axis
                };
                usize::try_from(axis)
                    .ok()
                    .and_then(|a| out.get(a))
                    .copied()
                    .unwrap_or(0)
            }
            (n, _) => n,
        };
        i64::try_from(n).unwrap_or(i64::MAX)
    }
}
