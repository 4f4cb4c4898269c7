//! The context of one inference: the rule, the mesh, each axis's extent
//! and the axis map being merged, and what each tensor dim is (its slot and
//! the axis that carries its sharding).

use spmd_notation::{AxisSet, Dim, Plan, Term};

use crate::dist_attr::{Sharding, Spec};
use crate::error::{AxisName, SpmdError};
use crate::merge::{AxisMap, UNSHARDED};
use crate::mesh::Mesh;
use crate::rule::EinsumRule;

/// An extent no shape has given yet.
pub(super) const UNKNOWN: usize = usize::MAX;
/// Axes a call may have; one id (63) is the claimant of dims that never
/// carry a sharding.
pub(super) const MAX_AXES: usize = 63;

/// Bit `i` of a tensor mask; tensors past the 64th have none (masks name
/// at most 64).
pub(super) fn bit(i: usize) -> u64 {
    u32::try_from(i)
        .ok()
        .and_then(|i| 1u64.checked_shl(i))
        .unwrap_or(0)
}

/// Per-call state: the axis table (labels, then the dims an ellipsis stands
/// for, right-aligned), each axis's extent and the merged axis map.
pub(super) struct Cx<'r, 'a> {
    pub(super) rule: &'r EinsumRule<'a>,
    pub(super) mesh: &'r Mesh,
    pub(super) n_labels: usize,
    pub(super) width: usize,
    /// Indexed by axis id; `UNKNOWN` until a shape gives it.
    pub(super) extent: [usize; 64],
    pub(super) n_axes: usize,
    pub(super) never: AxisSet,
    pub(super) map: AxisMap,
}

impl<'r, 'a> Cx<'r, 'a> {
    pub(super) fn new(
        rule: &'r EinsumRule<'a>,
        mesh: &'r Mesh,
        width: usize,
    ) -> Result<Self, SpmdError> {
        let plan = &rule.plan;
        let n_labels = plan.n_axes();
        let n_axes = n_labels + width;
        if n_axes > MAX_AXES {
            return Err(SpmdError::TooManyAxes {
                op: rule.name,
                count: n_axes,
            });
        }
        Ok(Cx {
            rule,
            mesh,
            n_labels,
            width,
            extent: [UNKNOWN; 64],
            n_axes,
            never: rule
                .never_sharded
                .union(plan.diagonal)
                .union(plan.compound_minor),
            map: AxisMap::new(),
        })
    }

    pub(super) fn axis_name(&self, a: u8) -> AxisName {
        axis_name(&self.rule.plan, self.n_labels, a)
    }

    /// The ellipsis axes as a set.
    pub(super) fn ellipsis_axes(&self) -> AxisSet {
        let all = if self.width == 0 {
            0
        } else {
            (u64::MAX >> (64 - self.width)) << self.n_labels
        };
        AxisSet(all)
    }

    pub(super) fn term_axes(&self, term: Term) -> AxisSet {
        let axes = self.rule.plan.axes_of(term);
        if term.ellipsis.is_some() {
            axes.union(self.ellipsis_axes())
        } else {
            axes
        }
    }

    /// The axes a tensor really holds: its plain and compound dims, not its
    /// `1` dims nor its size-1 dims broadcast against a larger extent.
    pub(super) fn carried_axes(&self, term: Term, shape: &[usize]) -> AxisSet {
        let mut set = AxisSet::EMPTY;
        for (dim, &size) in shape.iter().enumerate() {
            match self.slot(term, shape.len(), dim) {
                Dim::Axis(a) if !self.is_broadcast(a, size) => set = set.with(a),
                // A size-1 compound dim broadcasts and carries none of its
                // axes (see `carrier`).
                Dim::Compound { start, len } if size != 1 => {
                    for &a in self.rule.plan.compound(start, len) {
                        set = set.with(a);
                    }
                }
                _ => {}
            }
        }
        set
    }

    /// A size-1 dim holds no part of its axis: splitting it splits nothing
    /// (all but one device would hold an empty block), so it never carries a
    /// sharding, whether it is broadcast against a larger extent or the axis
    /// has extent 1 everywhere (docs/semantics.md §3).
    #[inline]
    pub(super) fn is_broadcast(&self, _a: u8, size: usize) -> bool {
        size == 1
    }

    /// The batch axes of role priority, from the notation alone: the dims `...`
    /// stands for, and labels every input and some output have.
    pub(super) fn batch_axes(&self) -> AxisSet {
        let plan = &self.rule.plan;
        let in_every = (0..plan.n_inputs())
            .map(|i| plan.axes_of(plan.input(i)))
            .fold(AxisSet(u64::MAX), AxisSet::intersect);
        in_every
            .intersect(plan.output_axes)
            .union(self.ellipsis_axes())
    }

    pub(super) fn input_axes(&self) -> AxisSet {
        let plan = &self.rule.plan;
        if plan.inputs_have_ellipsis() {
            plan.input_axes.union(self.ellipsis_axes())
        } else {
            plan.input_axes
        }
    }

    /// What tensor dim `dim` of a tensor of rank `rank` is: a plain axis (labels
    /// and ellipsis dims alike), `1`, or a compound.
    #[inline(always)]
    pub(super) fn slot(&self, term: Term, rank: usize, dim: usize) -> Dim {
        let dims = self.rule.plan.dims_of(term);
        match term.ellipsis {
            None => dims[dim],
            Some(e) => {
                let e = e as usize;
                let ell = rank - term.len as usize;
                if dim < e {
                    dims[dim]
                } else if dim < e + ell {
                    Dim::Axis((self.n_labels + self.width - ell + (dim - e)) as u8)
                } else {
                    dims[dim - ell]
                }
            }
        }
    }

    /// The axis a given tensor dim's sharding goes to, or `None` when that dim
    /// never carries one (`1`, a broadcast size-1 dim, a never-sharded axis).
    #[inline(always)]
    pub(super) fn carrier(&self, slot: Dim, size: Option<usize>) -> Option<u8> {
        let a = match slot {
            Dim::Axis(a) => {
                if size.is_some_and(|size| self.is_broadcast(a, size)) {
                    return None;
                }
                a
            }
            Dim::One => return None,
            // A size-1 compound dim broadcasts (a mask's heads against the
            // query's grouped heads): like a size-1 axis, it carries nothing.
            Dim::Compound { .. } if size == Some(1) => return None,
            Dim::Compound { start, .. } => self.rule.plan.compound_axes[start as usize],
        };
        (!self.never.contains(a)).then_some(a)
    }

    /// The first dim of input `spec` that carries axis `a`, with its sharding.
    pub(super) fn given_on(&self, term: Term, spec: &Spec<'_>, a: u8) -> Option<(usize, Sharding)> {
        let rank = spec.shape.len();
        (0..rank)
            .find(|&dim| self.carrier(self.slot(term, rank, dim), Some(spec.shape[dim])) == Some(a))
            .map(|dim| (dim, spec.attr.dims_mapping[dim]))
    }

    /// Whether axis `a`'s extent is known and a multiple of the product of
    /// the sizes of `dims`.
    pub(super) fn divides(&self, a: u8, dims: impl Iterator<Item = crate::mesh::MeshDim>) -> bool {
        let extent = self.extent[a as usize];
        let product: usize = dims.map(|m| self.mesh.dim(m)).product();
        extent != UNKNOWN && extent > 0 && extent.is_multiple_of(product)
    }
}

/// Labels name themselves; the dims an ellipsis stands for are numbered.
pub(super) fn axis_name(plan: &Plan<'_>, n_labels: usize, a: u8) -> AxisName {
    if a == UNSHARDED {
        AxisName::Unsharded
    } else if (a as usize) < n_labels {
        AxisName::Label(plan.label(a))
    } else {
        AxisName::Ellipsis(a - n_labels as u8)
    }
}
