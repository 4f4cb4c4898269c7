//! `gather`: slices of `x` along `axis` picked by a 1-D (or 0-D) index.

use spmd_core::{
    Call, DimsMapping, DistAttr, Einsum, RuleResult, Sharding, Spec, SpmdError, SpmdRule, spmd_rule,
};

use crate::notation::{input_rank, labels, normalize_axis};

/// Paddle's `gather`: `out = x` with dim `axis` replaced by `index`'s dim
/// (or removed, for a 0-D index). The gathered axis of `x` is never sharded;
/// the index's dim and x's other dims keep their shardings. Paddle 3.3.1's
/// `GatherInferSpmd` / `GatherInferSpmdReverse`. Its grad
/// (`GatherGradInferSpmd`) scatters the output grad into zeros shaped like
/// `x`, reading neither `x` (`grad_ignores`) nor, for its layout, the index:
/// the index and the output grad's gathered dim are replicated there (the
/// grad notation writes them `1`), so `x_grad` is not partial.
#[spmd_rule(
    name = "gather",
    build = Self::notation,
    adjust = Self::free_gathered_axis,
    inputs(x, index),
    outputs(out),
    no_grad(index),
    grad_ignores(x)
)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Gather {
    #[spmd(default)]
    pub axis: i64,
}

impl Gather {
    /// For rank 3, axis 1 and a 1-D index: `a1c,i->aic` (`1` is the gathered
    /// axis); in the grad, `a1c,1->a1c`.
    fn notation(&self, call: &Call<'_>) -> Result<Einsum, SpmdError> {
        const OP: &str = "gather";
        let rank = input_rank(call, 0).unwrap_or(0);
        let axis = normalize_axis(OP, "axis", self.axis, rank)?;
        let index_rank = input_rank(call, 1).unwrap_or(1);
        if index_rank > 1 {
            return Err(SpmdError::Rejected {
                op: OP,
                message: format!(
                    "input 1 (index) has rank {index_rank}; gather takes a 1-D or 0-D index"
                ),
            });
        }
        let grad = matches!(call, Call::Grad { .. });
        let index = match (index_rank, grad) {
            (0, _) => "",
            (_, false) => "z",
            (_, true) => "1",
        };
        let names = labels(OP, rank)?;
        let x: String = names
            .iter()
            .enumerate()
            .map(|(i, &c)| if i == axis { '1' } else { c })
            .collect();
        let out: String = names
            .iter()
            .enumerate()
            .flat_map(|(i, &c)| {
                if i == axis {
                    index.chars().next()
                } else {
                    Some(c)
                }
            })
            .collect();
        Einsum::new(&format!("{x},{index}->{out}"))
    }

    /// Paddle replicates x's gathered dim *before* the merge, so the mesh
    /// dim it was sharded on is free for the index's dim. Forward from such
    /// an x, whose gathered dim claims nothing, gives that answer.
    fn free_gathered_axis(
        &self,
        call: &Call<'_>,
        result: &mut RuleResult,
    ) -> Result<(), SpmdError> {
        let Call::Forward { mesh, inputs, .. } = *call else {
            return Ok(());
        };
        let Some(x) = inputs.first() else {
            return Ok(());
        };
        let axis = normalize_axis("gather", "axis", self.axis, x.shape.len())?;
        let dims = x.attr.dims_mapping.as_slice();
        if dims.get(axis).is_none_or(|s| s.is_replicated()) {
            return Ok(());
        }
        let mut freed: Vec<Sharding> = dims.to_vec();
        freed[axis] = Sharding::REPLICATED;
        let attr = DistAttr {
            dims_mapping: DimsMapping::from_shardings(&freed),
            partial: x.attr.partial,
        };
        let mut specs: Vec<Spec<'_>> = inputs.to_vec();
        specs[0] = Spec::new(x.shape, &attr);
        *result = self.forward(mesh, &specs)?;
        Ok(())
    }
}
