//! Partial results beyond the contracted axes: addends under a partial
//! output, and backward's Stage-II explanation of a given partial output.

use spmd_notation::AxisSet;

use super::cx::Cx;
use crate::dist_attr::{Partial, ReduceType, Sharding, Spec};
use crate::error::SpmdError;
use crate::mesh::MeshSet;
use crate::policy::{Conflicts, PartialInputs};
use crate::rule::{EinsumRule, RuleResult};
use crate::trace::Trace;

impl<'r, 'a> Cx<'r, 'a> {
    /// Partial Stage-II ([`BackwardPartial::Explain`]): for each mesh dim `d`
    /// a given output is partial over, the first contracted axis (in
    /// notation order) that reduces like the partial, may be sharded, is
    /// divided evenly by its mesh dims and `d`, while no axis holds `d` yet,
    /// takes `d` on the input side. Evenly, so that no device's block is
    /// empty or smaller than another's (a `Max` over an empty block, an
    /// `Avg` of unequal blocks' averages). Where no axis can, a rule that
    /// keeps partial inputs in forward explains a `Sum` (aligned: `Sum` or
    /// `Avg`) by partial inputs: that partial is returned. The rest is left
    /// unexplained: the output comes back not partial over it.
    pub(super) fn explain_partials<T: Trace + ?Sized>(
        &mut self,
        (input_shapes, input_present): (&[&[usize]], impl Fn(usize) -> bool),
        (outputs, present): (&[Spec<'_>], impl Fn(usize) -> bool),
        derived: &mut Option<[Sharding; 64]>,
        trace: &mut T,
    ) -> Partial {
        if !outputs
            .iter()
            .enumerate()
            .any(|(o, s)| present(o) && s.attr.partial.is_partial())
        {
            return Partial::NONE;
        }
        let plan = &self.rule.plan;
        let mut out_axes = AxisSet::EMPTY;
        for o in 0..plan.n_outputs() {
            out_axes = out_axes.union(self.term_axes(plan.output(o)));
        }
        // Contracted axes some present input really holds (not only as a
        // broadcast size-1 dim).
        let mut carried = AxisSet::EMPTY;
        for (i, shape) in input_shapes.iter().enumerate() {
            if input_present(i) {
                carried = carried.union(self.carried_axes(plan.input(i), shape));
            }
        }
        let contracted = carried.minus(out_axes);
        let table = derived.as_ref().unwrap_or(&self.map.sharding);
        let mut taken = table[..self.n_axes]
            .iter()
            .chain(&self.map.sharding[..self.n_axes])
            .fold(MeshSet::EMPTY, |m, s| m.union(s.mesh_set()));
        let linear = self.rule.policy.partial_inputs == PartialInputs::Linear;
        // Aligned operands keep a partial in forward only when some operand
        // has elements (see `merge_aligned`).
        let aligned = self.rule.policy.conflicts == Conflicts::Align
            && input_shapes
                .iter()
                .enumerate()
                .any(|(i, s)| input_present(i) && s.first().is_some_and(|&d| d != 0));
        let mut by_inputs = Partial::NONE;
        // An output that is no sum (`not_partial`) explains nothing.
        let explainable = |o: usize| present(o) && !self.rule.not_partial.contains(o);
        for (o, spec) in outputs.iter().enumerate().filter(|(o, _)| explainable(*o)) {
            for (d, r) in spec.attr.partial.iter() {
                if taken.contains(d) {
                    continue;
                }
                let axis = contracted.iter().find(|&a| {
                    let s = self.map.sharding[a as usize];
                    self.rule.reduce_of(a) == r
                        && !self.never.contains(a)
                        && self.divides(a, s.iter().chain([d]))
                });
                if let Some(a) = axis {
                    let mut s = self.map.sharding[a as usize];
                    s.push(d);
                    self.map.sharding[a as usize] = s;
                    if let Some(t) = derived.as_mut() {
                        t[a as usize] = s;
                    }
                    trace.explained(o, d, Some(self.axis_name(a)));
                } else if (linear && r == ReduceType::Sum)
                    || (aligned && matches!(r, ReduceType::Sum | ReduceType::Avg))
                {
                    by_inputs.set(d, r);
                    trace.explained(o, d, None);
                } else {
                    continue;
                }
                taken = taken.union(MeshSet::single(d));
            }
        }
        by_inputs
    }
}

/// Addends (`+n`) are added once to the true result: where the output is a
/// `Sum` over mesh dim `d`, each addend is required partial over `d` too
/// (one rank holds it, the others zeros: a local conversion from
/// replicated); a replicated addend commutes with `Avg`, `Max` and `Min`.
/// With `Prod`, `Any` or `All` no layout of the addend is right, so the call
/// is an error (the macro already refuses such a declaration).
pub(super) fn addend_partials(
    rule: &EinsumRule<'_>,
    result: &mut RuleResult,
    present: impl Fn(usize) -> bool,
) -> Result<(), SpmdError> {
    let plan = &rule.plan;
    if !plan.has_addends() {
        return Ok(());
    }
    // The parser allows addends only with one output.
    let Some(out) = result.outputs.first().map(|o| o.partial) else {
        return Ok(());
    };
    if let Some((d, r)) = out.iter().find(|(_, r)| {
        !matches!(
            r,
            ReduceType::Sum | ReduceType::Avg | ReduceType::Max | ReduceType::Min
        )
    }) {
        return Err(SpmdError::Rejected {
            op: rule.name,
            message: alloc::format!(
                "the output would be partial ({r}) over mesh dim {d}, and an added operand \
                 cannot be laid out to commute with a {r} reduction"
            ),
        });
    }
    let sums: Partial = out.iter().filter(|&(_, r)| r == ReduceType::Sum).collect();
    for (i, attr) in result.inputs.iter_mut().enumerate() {
        if plan.is_addend(i) && present(i) {
            let mut p = sums;
            p.remove(attr.dims_mapping.mesh_set());
            attr.partial = p;
        }
    }
    Ok(())
}
