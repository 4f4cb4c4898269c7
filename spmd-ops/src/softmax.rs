//! `softmax`: normalizes along one axis, which therefore cannot stay sharded.

use spmd_core::{Call, Einsum, SpmdError, spmd_rule};

use crate::notation::{input_rank, labels, normalize_axis};

/// Paddle's `softmax`: the `axis` dim is replicated (its values depend on the
/// whole axis); every other dim keeps its sharding.
#[spmd_rule(
    name = "softmax",
    build = Self::notation,
    cache,
    never_sharded = "a",
    conflicts = "strict",
    backward_partial = "reset",
    inputs(x),
    outputs(out)
)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Softmax {
    #[spmd(default = -1)]
    pub axis: i64,
}

impl Softmax {
    /// `a` labels the softmax axis: for rank 3 and axis 1, `bac->bac`.
    fn notation(&self, call: &Call<'_>) -> Result<Einsum, SpmdError> {
        let rank = input_rank(call, 0).unwrap_or(0);
        let axis = normalize_axis("softmax", "axis", self.axis, rank)?;
        let term: String = labels("softmax", rank + 1)?[1..]
            .iter()
            .enumerate()
            .map(|(i, &c)| if i == axis { 'a' } else { c })
            .collect();
        Einsum::new(&format!("{term}->{term}"))
    }
}
