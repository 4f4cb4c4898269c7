//! `cross_entropy_with_softmax` / `softmax_with_cross_entropy`: a softmax over
//! `axis` fused with the cross entropy against a label; the vocab-parallel
//! `c_softmax_with_cross_entropy` and its multi-label form.

use spmd_core::{Call, SpmdError, spmd_rule};

use crate::notation::{input_rank, normalize_axis};

/// Which dims the softmax axis takes in each term.
fn axis_info(ce: &CrossEntropyWithSoftmax, call: &Call<'_>) -> Result<(usize, usize), SpmdError> {
    let rank = input_rank(call, 0).unwrap_or(0);
    let axis = normalize_axis(ce.op(), "axis", ce.axis, rank)?;
    Ok((rank, axis))
}

/// Paddle's `cross_entropy_with_softmax` (`logits`, `label` → `softmax`,
/// `loss`). The class axis `axis` is written `v` when it may stay sharded
/// (a hard label, `axis` the last dim and `use_softmax`: the vocab-parallel
/// kernel reduces across the shards itself), and `1` (never sharded)
/// otherwise. A hard label and the loss have size 1 there, which is never
/// sharded; the loss is not partial. Sharding the class axis of the logits
/// when it may not be is an error, as in Paddle 3.3.1's
/// `CrossEntropyWithSoftmaxInferSpmd`. Its reverse rule merges the loss
/// before the softmax output (first claim wins), which this rule reproduces
/// by merging in that order (`merge(first(loss))`).
#[spmd_rule(
    name = "cross_entropy_with_softmax",
    einsum = "@{axis:1},@{axis:1}->@{axis:1},@{axis:1}",
    case(when = self.shardable_in(&call), einsum = "@{axis:v},@{axis:1}->@{axis:v},@{axis:1}"),
    validate = Self::check,
    inputs(logits, label),
    outputs(softmax, loss),
    merge(first(loss)),
    // The kernel reduces the loss across the class dim's shards itself: a
    // given partial loss explains nothing.
    partial(none(loss))
)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CrossEntropyWithSoftmax {
    #[spmd(default)]
    pub soft_label: bool,
    #[spmd(default = true)]
    pub use_softmax: bool,
    #[spmd(default = -1)]
    pub axis: i64,
}

impl Default for CrossEntropyWithSoftmax {
    fn default() -> Self {
        CrossEntropyWithSoftmax {
            soft_label: false,
            use_softmax: true,
            axis: -1,
        }
    }
}

impl CrossEntropyWithSoftmax {
    fn op(&self) -> &'static str {
        "cross_entropy_with_softmax"
    }

    /// Whether the class axis of a rank-`rank` input may stay sharded.
    fn shardable(&self, rank: usize, axis: usize) -> bool {
        !self.soft_label && self.use_softmax && axis + 1 == rank
    }

    /// Whether this call's class axis may stay sharded (`v`); otherwise it
    /// is `1`, as a soft label's class axis (which a hard label and the
    /// loss have with size 1) is.
    fn shardable_in(&self, call: &Call<'_>) -> bool {
        axis_info(self, call).is_ok_and(|(rank, axis)| self.shardable(rank, axis))
    }

    /// Paddle refuses to shard the class axis of the logits unless the label
    /// is hard, the axis is last and the softmax is fused in.
    fn check(&self, call: &Call<'_>) -> Result<(), SpmdError> {
        let Call::Forward { inputs, .. } = *call else {
            return Ok(());
        };
        let (rank, axis) = axis_info(self, call)?;
        let Some(s) = inputs.first().and_then(|x| x.attr.dims_mapping.get(axis)) else {
            return Ok(());
        };
        if s.is_replicated() || self.shardable(rank, axis) {
            return Ok(());
        }
        let why = if self.soft_label {
            "soft_label = true".to_string()
        } else if !self.use_softmax {
            "use_softmax = false".to_string()
        } else {
            format!("axis {axis} is not the last of {rank} dims")
        };
        Err(SpmdError::Rejected {
            op: self.op(),
            message: format!(
                "input 0 (logits) dim {axis} (the class axis) is sharded on mesh dim {s}, which \
                 the vocab-parallel kernel supports only for a hard label on the last axis with \
                 the softmax fused in; here {why}"
            ),
        })
    }
}

/// Paddle's `c_softmax_with_cross_entropy` (`logits`, `label` → `softmax`,
/// `loss`): the vocab-parallel softmax cross entropy, whose kernel reduces
/// across the class dim's shards itself. The class dim (last) keeps its
/// sharding on `logits` and `softmax`; the hard label and the loss have size
/// 1 there (never sharded) and share the leading dims; the loss is not
/// partial. Paddle 3.3.1's `CSoftmaxWithCrossEntropyInferSpmd`. The grad
/// takes Paddle's `CSoftmaxWithCrossEntropyGradSpmd` arguments, `(softmax,
/// label; loss_grad)`, and returns `logits_grad`, laid out as `softmax`.
#[spmd_rule(
    name = "c_softmax_with_cross_entropy",
    einsum = "...v,...1->...v,...1",
    grad(inputs(softmax, label), of(loss), none(label)),
    inputs(logits, label),
    outputs(softmax, loss),
    // The kernel reduces the loss across the class dim's shards itself.
    partial(none(loss))
)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CSoftmaxWithCrossEntropy {
    #[spmd(default = -100)]
    pub ignore_index: i64,
}

/// Paddle's `c_softmax_with_multi_label_cross_entropy` (`logits`, `label`,
/// `smooth_weight` → `softmax`, `loss`): as
/// [`CSoftmaxWithCrossEntropy`] with several labels per row (the label and
/// its smoothing weights are `[..., num_labels]`, never sharded there).
/// Paddle 3.3.1's `CSoftmaxWithMultiLabelCrossEntropyInferSpmd`. The grad
/// takes `(softmax, label, smooth_weight; loss_grad)`.
#[spmd_rule(
    name = "c_softmax_with_multi_label_cross_entropy",
    einsum = "...v,...1,...1->...v,...1",
    grad(inputs(softmax, label, smooth_weight), of(loss), none(label, smooth_weight)),
    inputs(logits, label, smooth_weight),
    outputs(softmax, loss),
    // The kernel reduces the loss across the class dim's shards itself.
    partial(none(loss))
)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CSoftmaxWithMultiLabelCrossEntropy {
    #[spmd(default = -100)]
    pub ignore_index: i64,
    #[spmd(default)]
    pub sum_multi_label_loss: bool,
}
