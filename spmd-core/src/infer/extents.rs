//! Learning every axis's extent from the shapes (compound dims included),
//! and `Compounds::Absorb`'s rewrite of given mappings.

use smallvec::SmallVec;
use spmd_notation::{AxisId, Dim, Term};

use super::cx::{Cx, UNKNOWN};
use crate::dist_attr::{DimsMapping, DistAttr, Sharding, Spec};
use crate::error::{SpmdError, TensorRef};
use crate::mesh::MAX_MESH_RANK;

impl<'r, 'a> Cx<'r, 'a> {
    /// Records the extent of every plain axis. An extent of 1 against a larger
    /// one is broadcasting; two different larger extents are an error.
    pub(super) fn learn_extents(
        &mut self,
        t: TensorRef,
        term: Term,
        shape: &[usize],
    ) -> Result<(), SpmdError> {
        for (dim, &size) in shape.iter().enumerate() {
            if let Dim::Axis(a) = self.slot(term, shape.len(), dim) {
                let known = self.extent[a as usize];
                if known == UNKNOWN || known == 1 {
                    self.extent[a as usize] = size;
                } else if size != known && size != 1 {
                    return Err(SpmdError::ShapeMismatch {
                        op: self.rule.name,
                        axis: self.axis_name(a),
                        tensor: t,
                        dim,
                        expected: known,
                        found: size,
                    });
                }
            }
        }
        Ok(())
    }

    /// Compound dims: a single factor of unknown extent is the quotient of the
    /// dim's size by the others; when all factors are known, their product must
    /// be the dim's size (or 1: broadcasting).
    #[inline]
    pub(super) fn learn_compound_extents(
        &mut self,
        t: TensorRef,
        term: Term,
        shape: &[usize],
    ) -> Result<(), SpmdError> {
        // By reference: a copy of the plan is a memcpy per call.
        let rule = self.rule;
        let plan = &rule.plan;
        if !plan.has_compound() {
            return Ok(());
        }
        for (dim, &size) in shape.iter().enumerate() {
            let Dim::Compound { start, len } = self.slot(term, shape.len(), dim) else {
                continue;
            };
            // A size-1 dim broadcasts, as a plain axis's does: it teaches
            // nothing and holds no part of its axes.
            if size == 1 {
                continue;
            }
            let factors = plan.compound(start, len);
            let mut known = 1usize;
            let mut unknown = None;
            let mut n_unknown = 0;
            for &f in factors {
                match self.extent[f as usize] {
                    UNKNOWN => {
                        unknown = Some(f);
                        n_unknown += 1;
                    }
                    e => known = known.saturating_mul(e),
                }
            }
            match (n_unknown, unknown) {
                (0, _) if known != size => {
                    return Err(SpmdError::ShapeMismatch {
                        op: self.rule.name,
                        axis: self.axis_name(factors[0]),
                        tensor: t,
                        dim,
                        expected: known,
                        found: size,
                    });
                }
                (1, Some(f)) if known != 0 && size % known == 0 => {
                    self.extent[f as usize] = size / known;
                }
                // The unknown factors cannot make up the rest.
                (1.., _) if known != 0 && size % known != 0 => {
                    let axes: alloc::vec::Vec<alloc::string::String> = factors
                        .iter()
                        .filter(|&&f| self.extent[f as usize] != UNKNOWN)
                        .map(|&f| alloc::format!("{}", self.axis_name(f)))
                        .collect();
                    return Err(SpmdError::CompoundExtent {
                        op: self.rule.name,
                        tensor: t,
                        dim,
                        axes: axes.join(" "),
                        known,
                        found: size,
                    });
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Whether [`Cx::absorbed`] may move something: some compound's major
    /// factor and first minor factor are both sharded dims of `spec` (the
    /// cheap test that keeps the common case from building anything).
    pub(super) fn may_absorb(&self, term: Term, spec: &Spec<'_>) -> bool {
        let plan = &self.rule.plan;
        let rank = spec.shape.len();
        let sharded = |a: AxisId| {
            (0..rank).any(|d| {
                self.slot(term, rank, d) == Dim::Axis(a)
                    && !spec.attr.dims_mapping[d].is_replicated()
            })
        };
        plan.dims.iter().any(|dim| match *dim {
            Dim::Compound { start, len } => {
                let factors = plan.compound(start, len);
                factors.len() > 1 && sharded(factors[0]) && sharded(factors[1])
            }
            _ => false,
        })
    }

    /// [`Compounds::Absorb`]: `spec`'s attr with, for each compound of the
    /// notation whose factors `term` holds as dims of their own, the minor
    /// factors' mesh dims appended to the major's sharding (in order, while
    /// the major's extent stays divisible; an unsharded minor stops it) and
    /// the minors replicated. `None` when nothing moves.
    pub(super) fn absorbed(&self, term: Term, spec: &Spec<'_>) -> Option<DistAttr> {
        let plan = &self.rule.plan;
        let rank = spec.shape.len();
        let dim_of = |a: AxisId| (0..rank).find(|&d| self.slot(term, rank, d) == Dim::Axis(a));
        let mut mapping: Option<SmallVec<[Sharding; 8]>> = None;
        for dim in plan.dims {
            let Dim::Compound { start, len } = *dim else {
                continue;
            };
            let factors = plan.compound(start, len);
            let Some(major) = factors.first().and_then(|&a| dim_of(a)) else {
                continue;
            };
            let current = |m: &Option<SmallVec<[Sharding; 8]>>, d: usize| {
                m.as_ref().map_or(spec.attr.dims_mapping[d], |m| m[d])
            };
            let mut s = current(&mapping, major);
            if s.is_replicated() {
                continue;
            }
            for &f in &factors[1..] {
                let Some(fd) = dim_of(f) else { break };
                let minor = current(&mapping, fd);
                if minor.is_replicated() || s.len() + minor.len() > MAX_MESH_RANK {
                    break;
                }
                let mut joined = s;
                for m in minor.iter() {
                    joined.push(m);
                }
                let product: usize = joined.iter().map(|m| self.mesh.dim(m)).product();
                if !spec.shape[major].is_multiple_of(product) {
                    break;
                }
                s = joined;
                let m = mapping.get_or_insert_with(|| {
                    spec.attr.dims_mapping.as_slice().iter().copied().collect()
                });
                m[major] = s;
                m[fd] = Sharding::REPLICATED;
            }
        }
        mapping.map(|m| DistAttr {
            dims_mapping: DimsMapping::from_shardings(&m),
            partial: spec.attr.partial,
        })
    }
}
