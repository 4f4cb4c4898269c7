//! What the notation's product alone does not say about layouts: the
//! minor factors' shardings a compound absorbs (`Compounds::Absorb`), and
//! backward's explanation of a given partial output (Partial Stage-II).

use smallvec::SmallVec;
use spmd_notation::{AxisId, AxisSet, Dim};

use super::program::Program;
use super::state::{Run, Table};
use crate::dist_attr::{DimsMapping, DistAttr, Partial, ReduceType, Sharding, Spec};
use crate::mesh::{MAX_MESH_RANK, Mesh, MeshSet};
use crate::policy::{Conflicts, PartialInputs};
use crate::rule::EinsumRule;
use crate::trace::Trace;

/// The first dim of slot `s` that is axis `a` as a dim of its own.
fn dim_of(prog: &Program, s: usize, a: AxisId) -> Option<usize> {
    prog.dims_of(s).iter().position(|d| d.axis == a)
}

/// Whether [`absorbed`] may move something for slot `s` (laid out as
/// `spec`): some compound's major factor and first minor factor are both
/// sharded dims of it (the cheap test that keeps the common case from
/// building anything).
pub(crate) fn may_absorb(rule: &EinsumRule<'_>, prog: &Program, s: usize, spec: &Spec<'_>) -> bool {
    let plan = &rule.plan;
    let mapping = &spec.attr.dims_mapping;
    let sharded = |a: AxisId| {
        prog.dims_of(s)
            .iter()
            .enumerate()
            .any(|(d, c)| c.axis == a && !mapping[d].is_replicated())
    };
    plan.dims.iter().any(|dim| match *dim {
        Dim::Compound { start, len } => {
            let factors = plan.compound(start, len);
            factors.len() > 1 && sharded(factors[0]) && sharded(factors[1])
        }
        _ => false,
    })
}

/// `Compounds::Absorb`: slot `s`'s layout `spec` with, for each compound
/// of the notation whose factors it holds as dims of their own, the minor
/// factors' mesh dims appended to the major's sharding (in order, while the
/// major's extent stays divisible; an unsharded minor stops it) and the
/// minors replicated. `None` when nothing moves.
pub(crate) fn absorbed(
    rule: &EinsumRule<'_>,
    prog: &Program,
    mesh: &Mesh,
    s: usize,
    spec: &Spec<'_>,
) -> Option<DistAttr> {
    let plan = &rule.plan;
    let mut mapping: Option<SmallVec<[Sharding; 8]>> = None;
    for dim in plan.dims {
        let Dim::Compound { start, len } = *dim else {
            continue;
        };
        let factors = plan.compound(start, len);
        let Some(major) = factors.first().and_then(|&a| dim_of(prog, s, a)) else {
            continue;
        };
        let current = |m: &Option<SmallVec<[Sharding; 8]>>, d: usize| {
            m.as_ref().map_or(spec.attr.dims_mapping[d], |m| m[d])
        };
        let mut sh = current(&mapping, major);
        if sh.is_replicated() {
            continue;
        }
        for &f in &factors[1..] {
            let Some(fd) = dim_of(prog, s, f) else { break };
            let minor = current(&mapping, fd);
            if minor.is_replicated() || sh.len() + minor.len() > MAX_MESH_RANK {
                break;
            }
            let mut joined = sh;
            for m in minor.iter() {
                joined.push(m);
            }
            let product: usize = joined.iter().map(|m| mesh.dim(m)).product();
            if !spec.shape[major].is_multiple_of(product) {
                break;
            }
            sh = joined;
            let m = mapping
                .get_or_insert_with(|| spec.attr.dims_mapping.as_slice().iter().copied().collect());
            m[major] = sh;
            m[fd] = Sharding::REPLICATED;
        }
    }
    mapping.map(|m| DistAttr {
        dims_mapping: DimsMapping::from_shardings(&m),
        partial: spec.attr.partial,
    })
}

impl Run<'_, '_, '_> {
    /// Partial Stage-II (`BackwardPartial::Explain`): for each mesh dim `d`
    /// a given output is partial over, the first contracted axis (in
    /// notation order) that reduces like the partial, may be sharded, is
    /// divided evenly by its mesh dims and `d`, while no axis holds `d`
    /// yet, takes `d` on the input side. Evenly, so that no device's block
    /// is empty or smaller than another's (a `Max` over an empty block, an
    /// `Avg` of unequal blocks' averages). Where no axis can, a rule that
    /// keeps partial inputs in forward explains a `Sum` (aligned: `Sum` or
    /// `Avg`) by partial inputs: that partial is returned. The rest is left
    /// unexplained: the output comes back not partial over it.
    #[inline(always)]
    pub(crate) fn explain_partials<T: Trace + ?Sized>(
        &mut self,
        derived: &mut Option<Table>,
        trace: &mut T,
    ) -> Partial {
        // The common case, checked inline: no given output is partial.
        let n_in = usize::from(self.prog.n_inputs);
        let outputs = n_in..usize::from(self.prog.n_given);
        if !outputs
            .clone()
            .any(|s| self.slots[s].present && self.attr(s).partial.is_partial())
        {
            return Partial::NONE;
        }
        self.explain_given_partials(derived, trace)
    }

    #[inline(never)]
    fn explain_given_partials<T: Trace + ?Sized>(
        &mut self,
        derived: &mut Option<Table>,
        trace: &mut T,
    ) -> Partial {
        let prog = self.prog;
        let n_in = usize::from(prog.n_inputs);
        let outputs = n_in..usize::from(prog.n_given);
        let out_axes = prog.output_axes;
        // Contracted axes some present input really holds (not only as a
        // broadcast size-1 dim).
        let mut carried = AxisSet::EMPTY;
        for i in 0..n_in {
            if self.slots[i].present {
                carried = carried.union(self.carried(i));
            }
        }
        let contracted = carried.minus(out_axes);
        let n_axes = usize::from(prog.n_axes);
        let table = derived.as_ref().unwrap_or(&self.map.sharding);
        let mut taken = table[..n_axes]
            .iter()
            .chain(&self.map.sharding[..n_axes])
            .fold(MeshSet::EMPTY, |m, s| m.union(s.mesh_set()));
        let rule = self.rule;
        let linear = rule.options.policy.partial_inputs == PartialInputs::Linear;
        // Aligned operands keep a partial in forward only when some operand
        // has elements (see `merge_aligned`).
        let aligned = rule.options.policy.conflicts == Conflicts::Align
            && (0..n_in).any(|i| {
                self.slots[i].present && self.specs[i].shape.first().is_some_and(|&d| d != 0)
            });
        let mut by_inputs = Partial::NONE;
        for s in outputs {
            // An output that is no sum (`not_partial`) explains nothing.
            let o = s - n_in;
            if !self.slots[s].present || rule.options.not_partial.contains(o) {
                continue;
            }
            for (d, r) in self.attr(s).partial.iter() {
                if taken.contains(d) {
                    continue;
                }
                let axis = contracted.iter().find(|&a| {
                    let sh = self.map.sharding[a as usize];
                    rule.reduce_of(a) == r
                        && !prog.never.contains(a)
                        && self.divides(a, sh.iter().chain([d]))
                });
                if let Some(a) = axis {
                    let mut sh = self.map.sharding[a as usize];
                    sh.push(d);
                    self.map.sharding[a as usize] = sh;
                    if let Some(t) = derived.as_mut() {
                        t[a as usize] = sh;
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
