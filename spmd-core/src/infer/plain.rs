//! The plain forward: the common call answered in one pass over the dims.
//!
//! Most calls a strategy search makes are plain: a rule of labels, `1`s and
//! `...` (no compounds, diagonals, addends or followers) under first-wins or
//! strict conflicts, uneven shards allowed and partial inputs dropped,
//! reducing by `Sum`; and inputs whose dims are replicated or split over one
//! mesh dim each. For those the general driver's steps collapse: the merge
//! is one word per axis, the conflicts are settled per mesh dim, and the
//! divisibility policy has nothing to do. This module answers such a call
//! in one pass.
//!
//! Anything else (and every call that must fail) gives `false` without a
//! word written, and the general driver answers from the start, errors
//! included. The answer is the general driver's own, not an approximation:
//! a unit test runs both on every mapping of a set of plain rules and
//! compares.

use spmd_notation::{Dim, Term};

use super::cx::has_bit;
use crate::dist_attr::{DimsMapping, DistAttr, Partial, ReduceType, Sharding, Spec};
use crate::mesh::Mesh;
use crate::policy::{Conflicts, Divisibility, PartialInputs, UnshardedClaims};
use crate::rule::{EinsumRule, RuleResult};

/// Axes a plain call may have, labels and `...` dims together (its tables
/// live on the stack).
const MAX_PLAIN_AXES: usize = 16;
/// Tensors (inputs and outputs) a plain call may have.
const MAX_PLAIN_TENSORS: usize = 6;
/// No axis claimed the mesh dim yet.
const NOBODY: u8 = u8::MAX;
/// The claimant of a sharded dim that carries no axis (a `1`, a size-1
/// dim, a never-sharded axis): its bit in the claimant masks.
const UNSHARDED: u8 = 31;

/// Whether the rule itself is plain (see the module docs); the call is
/// checked by [`forward`].
#[inline]
pub(super) fn rule_is_plain(rule: &EinsumRule<'_>) -> bool {
    let plan = &rule.plan;
    matches!(
        rule.policy.conflicts,
        Conflicts::FirstWins | Conflicts::Strict
    ) && rule.policy.divisibility == Divisibility::Uneven
        && rule.policy.partial_inputs == PartialInputs::Drop
        && rule.reduce == ReduceType::Sum
        && rule.reduce_overrides.is_empty()
        && rule.follows == 0
        && plan.compound_axes.is_empty()
        && plan.diagonal.is_empty()
        && plan.addends == 0
}

/// The axis of dim `k` of a tensor of rank `rank` under `term`: its label's
/// id, `None` for a `1`. The dims `...` stands for are numbered from the
/// right past the labels (`n_labels` is the last one), so that the id needs
/// no ellipsis width: the ids are this pass's own, never shown.
#[inline(always)]
fn axis_at<const ELLIPSIS: bool>(
    dims: &[Dim],
    ellipsis: Option<u16>,
    rank: usize,
    k: usize,
    n_labels: usize,
) -> Result<Option<usize>, ()> {
    let d = match ellipsis {
        Some(e) if ELLIPSIS => {
            let (e, ell) = (e as usize, rank - dims.len());
            if k < e {
                dims[k]
            } else if k < e + ell {
                return Ok(Some(n_labels + (e + ell - 1 - k)));
            } else {
                dims[k - ell]
            }
        }
        _ => dims[k],
    };
    match d {
        Dim::Axis(a) => Ok(Some(a as usize)),
        Dim::One => Ok(None),
        Dim::Compound { .. } => Err(()),
    }
}

/// Answers a plain call of a plain rule into `result`; `false` (and
/// `result` untouched) when the call is not plain.
#[inline]
pub(super) fn forward(
    rule: &EinsumRule<'_>,
    mesh: &Mesh,
    inputs: &[Spec<'_>],
    output_shapes: &[&[usize]],
    result: &mut RuleResult,
) -> bool {
    if rule.plan.terms.iter().any(|t| t.ellipsis.is_some()) {
        forward_with::<true>(rule, mesh, inputs, output_shapes, result)
    } else {
        forward_with::<false>(rule, mesh, inputs, output_shapes, result)
    }
}

/// [`forward`], with the `...` handling compiled in only where a term has
/// one.
fn forward_with<const ELLIPSIS: bool>(
    rule: &EinsumRule<'_>,
    mesh: &Mesh,
    inputs: &[Spec<'_>],
    output_shapes: &[&[usize]],
    result: &mut RuleResult,
) -> bool {
    let plan = &rule.plan;
    let n_in = plan.n_inputs();
    if inputs.len() != n_in || plan.terms.len() > MAX_PLAIN_TENSORS {
        return false;
    }
    let n_labels = plan.labels.len();
    // Never-sharded axes are labels (the ids of `...` dims are this pass's
    // own, numbered unlike the driver's).
    let never = rule.never_sharded;
    if n_labels < 64 && never.0 >> n_labels != 0 {
        return false;
    }
    let count_unsharded = rule.policy.unsharded_claims == UnshardedClaims::Count;
    let on_mesh = (1u32 << mesh.rank()) - 1;
    // Per axis: its extent (valid where `known` has its bit) and its merged
    // sharding; per mesh dim: the axis that claimed it first and every axis
    // that claimed it. Per input dim: the axis it carries (`NOBODY`: none).
    let mut extent = [0usize; MAX_PLAIN_AXES];
    let mut known = 0u32;
    let mut table = [Sharding::REPLICATED; MAX_PLAIN_AXES];
    let mut first = [NOBODY; 8];
    let mut claimants = [0u32; 8];
    let mut carried = [[NOBODY; 8]; MAX_PLAIN_TENSORS];
    // The ellipsis width: the most dims any input's `...` stands for.
    let mut width = 0;
    for (i, spec) in inputs.iter().enumerate() {
        let term = plan.terms[i];
        let dims = plan.dims_of(term);
        let rank = spec.shape.len();
        let mapping = spec.attr.dims_mapping.as_slice();
        match term.ellipsis {
            Some(_) if ELLIPSIS && rank >= dims.len() && rank <= 8 => {
                width = width.max(rank - dims.len())
            }
            None if rank == dims.len() && rank <= 8 => {}
            _ => return false,
        }
        if mapping.len() != rank || n_labels + width > MAX_PLAIN_AXES {
            return false;
        }
        let mut used = 0u32;
        for k in 0..rank {
            let (size, s) = (spec.shape[k], mapping[k]);
            let axis = match axis_at::<ELLIPSIS>(dims, term.ellipsis, rank, k, n_labels) {
                Ok(Some(a)) => {
                    // An extent of 1 broadcasts against any other.
                    if known & (1 << a) == 0 || extent[a] == 1 {
                        extent[a] = size;
                        known |= 1 << a;
                    } else if extent[a] != size && size != 1 {
                        return false;
                    }
                    // A size-1 dim holds no part of its axis.
                    if size != 1 && !never.contains(a as u8) {
                        carried[i][k] = a as u8;
                        Some(a)
                    } else {
                        None
                    }
                }
                Ok(None) => None,
                Err(()) => return false,
            };
            if s.is_replicated() {
                continue;
            }
            // One mesh dim, on the mesh, not used twice by this tensor.
            let bits = u32::from(s.single_bits().unwrap_or(0));
            if bits == 0 || bits & (used | !on_mesh) != 0 {
                return false;
            }
            used |= bits;
            let m = bits.trailing_zeros() as usize;
            let Some(a) = axis else {
                // Replicated in the end, but the claim may count.
                if count_unsharded {
                    if first[m] == NOBODY {
                        first[m] = UNSHARDED;
                    }
                    claimants[m] |= 1 << UNSHARDED;
                }
                continue;
            };
            let cur = table[a];
            if cur.is_replicated() {
                table[a] = s;
                if first[m] == NOBODY {
                    first[m] = a as u8;
                }
                claimants[m] |= 1 << a;
            } else if cur != s {
                // One axis split two ways: the general driver's error.
                return false;
            }
        }
        // A partial input is valid on mesh dims of the mesh that it does not
        // split over; the policy then drops its partial status.
        if u32::from(spec.attr.partial.dims().0) & (used | !on_mesh) != 0 {
            return false;
        }
    }
    let out_rank = |term: Term| term.len as usize + if term.ellipsis.is_some() { width } else { 0 };
    // Declared output shapes are checked as the general driver does (when
    // there is one per output): any disagreement is its error to give.
    if output_shapes.len() == plan.n_outputs() {
        for (o, shape) in output_shapes.iter().enumerate() {
            let term = plan.terms[n_in + o];
            let rank = out_rank(term);
            if shape.len() != rank {
                return false;
            }
            for (k, &size) in shape.iter().enumerate() {
                let dims = plan.dims_of(term);
                if let Ok(Some(a)) = axis_at::<ELLIPSIS>(dims, term.ellipsis, rank, k, n_labels) {
                    if known & (1 << a) == 0 || extent[a] == 1 {
                        extent[a] = size;
                        known |= 1 << a;
                    } else if extent[a] != size && size != 1 {
                        return false;
                    }
                }
            }
        }
    }
    // A mesh dim claimed by several axes stays with the first (strict
    // conflicts fail: the general driver's error).
    let strict = rule.policy.conflicts == Conflicts::Strict;
    for m in 0..mesh.rank() {
        let f = first[m];
        if f == NOBODY {
            continue;
        }
        let mut others = claimants[m] & !(1 << f);
        if others != 0 && strict {
            return false;
        }
        while others != 0 {
            let a = others.trailing_zeros() as usize;
            if a < MAX_PLAIN_AXES {
                table[a] = Sharding::REPLICATED;
            }
            others &= others - 1;
        }
    }
    // Every axis some input carries, for the outputs' partial status.
    let mut input_axes = 0u32;
    result.inputs.clear();
    result.outputs.clear();
    for (i, spec) in inputs.iter().enumerate() {
        let mut mapping = DimsMapping::default();
        for &a in &carried[i][..spec.shape.len()] {
            mapping.push_inlined(if a == NOBODY {
                Sharding::REPLICATED
            } else {
                input_axes |= 1 << a;
                table[a as usize]
            });
        }
        result.inputs.push(DistAttr::new(mapping));
    }
    for o in 0..plan.n_outputs() {
        let term = plan.terms[n_in + o];
        let rank = out_rank(term);
        let dims = plan.dims_of(term);
        let mut mapping = DimsMapping::default();
        let mut axes = 0u32;
        for k in 0..rank {
            mapping.push_inlined(
                match axis_at::<ELLIPSIS>(dims, term.ellipsis, rank, k, n_labels) {
                    Ok(Some(a)) => {
                        axes |= 1 << a;
                        table[a]
                    }
                    _ => Sharding::REPLICATED,
                },
            );
        }
        // Partial over the mesh dims of the sharded axes it lacks (never
        // ones its own dims split over: each mesh dim has one axis now).
        let mut partial = Partial::NONE;
        if !has_bit(rule.not_partial, o) {
            let mut lacked = input_axes & !axes;
            while lacked != 0 {
                if let Some(m) = table[lacked.trailing_zeros() as usize].first() {
                    partial.set(m, ReduceType::Sum);
                }
                lacked &= lacked - 1;
            }
        }
        result.outputs.push(DistAttr {
            dims_mapping: mapping,
            partial,
        });
    }
    true
}

#[cfg(test)]
mod tests {
    use alloc::vec::Vec;

    use super::*;
    use crate::einsum::Einsum;
    use crate::optional::AllPresent;
    use crate::trace::NoTrace;
    use spmd_notation::AxisSet;

    /// Every mapping of `rank` dims over `mesh_rank` mesh dims (each dim
    /// replicated or on one mesh dim), plus one co-sharding.
    fn mappings(rank: usize, mesh_rank: usize) -> Vec<Vec<i64>> {
        let mut all = vec![Vec::new()];
        for _ in 0..rank {
            all = all
                .into_iter()
                .flat_map(|m: Vec<i64>| {
                    (-1..mesh_rank as i64).map(move |d| {
                        let mut m = m.clone();
                        m.push(d);
                        m
                    })
                })
                .collect();
        }
        all
    }

    /// The plain pass answers exactly what the full driver answers, on
    /// every mapping of a set of rules under each plain policy (with
    /// `...`, broadcasting, `1`s, size-1 dims, extent mismatches, partial
    /// inputs, co-shardings and declared output shapes); it answers most
    /// of the calls the driver answers, and leaves the rest alone.
    #[test]
    fn plain_answers_are_the_drivers() {
        // Notation, input shapes, output shapes.
        type Case = (
            &'static str,
            &'static [&'static [usize]],
            &'static [&'static [usize]],
        );
        let cases: &[Case] = &[
            ("mk,kn->mn", &[&[4, 6], &[6, 8]], &[&[4, 8]]),
            ("bmk,bkn->bmn", &[&[2, 4, 6], &[2, 6, 8]], &[&[2, 4, 8]]),
            ("ij,jk,kl->il", &[&[4, 6], &[6, 8], &[8, 2]], &[&[4, 2]]),
            ("ij->ji", &[&[4, 6]], &[&[6, 4]]),
            ("ij->i", &[&[4, 6]], &[&[4]]),
            ("ijk->", &[&[4, 6, 2]], &[&[]]),
            ("i,j->ij", &[&[4], &[6]], &[&[4, 6]]),
            ("ij,j->i", &[&[4, 6], &[6]], &[&[4]]),
            ("ik,1j->ijk", &[&[4, 6], &[1, 8]], &[&[4, 8, 6]]),
            ("ij->ij,i", &[&[4, 6]], &[&[4, 6], &[4]]),
            ("...mk,...kn->...mn", &[&[2, 4, 6], &[6, 8]], &[&[2, 4, 8]]),
            ("...,...->...", &[&[4, 6, 8], &[8]], &[&[4, 6, 8]]),
            ("...,...->...", &[&[4, 1, 8], &[6, 8]], &[&[4, 6, 8]]),
            ("...,...->...", &[&[4, 6], &[1]], &[&[4, 6]]),
            ("...,jk->...k", &[&[4, 6], &[8, 2]], &[&[4, 6, 2]]),
            ("...j->...", &[&[4, 6, 8]], &[&[4, 6]]),
            ("...ij->...ji", &[&[2, 4, 6]], &[&[2, 6, 4]]),
        ];
        let policies = [
            |r: &mut EinsumRule<'_>| r.policy = crate::policy::Policy::CLASSIC,
            |r: &mut EinsumRule<'_>| r.policy = crate::policy::Policy::STRICT,
            |r: &mut EinsumRule<'_>| r.never_sharded = AxisSet::EMPTY.with(0),
            |r: &mut EinsumRule<'_>| r.not_partial = 1,
            |r: &mut EinsumRule<'_>| {
                r.policy.unsharded_claims = UnshardedClaims::Ignore;
                r.never_sharded = AxisSet::EMPTY.with(1);
            },
        ];
        let meshes = [Mesh::new(&[2, 2]).unwrap(), Mesh::new(&[2, 3, 2]).unwrap()];
        // Calls the plain pass answered; calls it left to the driver that
        // the driver answered (the rest are errors, all left to it).
        let (mut answered, mut declined) = (0usize, 0usize);
        // One result for every plain answer, as a search reuses one: a
        // stale slot of an earlier answer must never show through.
        let mut plain = RuleResult::default();
        for &(notation, shapes, outs) in cases {
            let einsum = Einsum::new(notation).unwrap();
            for set_policy in policies {
                let mut rule = einsum.rule();
                set_policy(&mut rule);
                assert!(rule_is_plain(&rule), "{notation}");
                for mesh in &meshes {
                    for variant in 0..3 {
                        let mut shapes: Vec<Vec<usize>> =
                            shapes.iter().map(|s| s.to_vec()).collect();
                        match variant {
                            // A size-1 dim, or a last dim off by two.
                            1 => shapes
                                .iter_mut()
                                .take(1)
                                .flatten()
                                .take(1)
                                .for_each(|e| *e = 1),
                            2 => shapes
                                .iter_mut()
                                .last()
                                .and_then(|s| s.last_mut())
                                .into_iter()
                                .for_each(|e| *e += 2),
                            _ => {}
                        }
                        let total: usize = shapes.iter().map(|s| s.len()).sum();
                        if (mesh.rank() + 1).pow(total as u32) > 20_000 {
                            continue;
                        }
                        for (k, flat) in mappings(total, mesh.rank()).into_iter().enumerate() {
                            let mut at = 0;
                            let mut attrs: Vec<DistAttr> = shapes
                                .iter()
                                .map(|s| {
                                    at += s.len();
                                    DistAttr::from_paddle(&flat[at - s.len()..at]).unwrap()
                                })
                                .collect();
                            // Now and then a partial input or a co-sharding.
                            if k % 7 == 3 {
                                let mut p = Partial::NONE;
                                p.set(mesh.rank() as u8 - 1, ReduceType::Sum);
                                attrs[0] = attrs[0].clone().with_partial(p);
                            }
                            if k % 11 == 5 && !shapes[0].is_empty() {
                                let mut m: Vec<Sharding> =
                                    attrs[0].dims_mapping.as_slice().to_vec();
                                m[0] = Sharding::co(&[0, 1]).unwrap();
                                attrs[0] = DistAttr::new(DimsMapping::from_shardings(&m));
                            }
                            let specs: Vec<Spec<'_>> = shapes
                                .iter()
                                .zip(&attrs)
                                .map(|(s, a)| Spec::new(s, a))
                                .collect();
                            let declared: &[&[usize]] = if k % 2 == 0 { outs } else { &[] };
                            let before = plain.clone();
                            let mut full = RuleResult::default();
                            let full_says = super::super::forward_in_full(
                                &rule,
                                mesh,
                                &specs,
                                declared,
                                AllPresent,
                                &mut NoTrace,
                                &mut full,
                            );
                            if forward(&rule, mesh, &specs, declared, &mut plain) {
                                answered += 1;
                                assert!(
                                    full_says.is_ok() && plain == full,
                                    "{notation} {:?} on {mesh:?}: {attrs:?} {shapes:?}\n\
                                     plain {plain:?}\nfull {full_says:?} {full:?}",
                                    rule.policy
                                );
                            } else {
                                declined += usize::from(full_says.is_ok());
                                assert_eq!(plain, before);
                            }
                        }
                    }
                }
            }
        }
        // Both paths are exercised, the plain one most.
        assert!(
            answered > declined && declined > 100,
            "{answered} {declined}"
        );
    }
}
