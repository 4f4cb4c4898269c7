//! The state of one run: the call's tensors as the program numbers them,
//! each axis's extent, and the axis map being merged; and the questions
//! every step asks of a tensor dim (which axis carries its sharding, which
//! axes a tensor really holds).

use spmd_notation::AxisSet;

use super::program::{DimCode, Direction, Given, NONE, Program, Slot};
use crate::dist_attr::{DistAttr, Sharding, Spec};
use crate::error::{AxisName, SpmdError, TensorRef};
use crate::merge::{AxisMap, UNSHARDED};
use crate::mesh::{Mesh, MeshDim};
use crate::rule::EinsumRule;

/// Per axis: its sharding (an axis map, or one side of it).
pub(crate) type Table = [Sharding; 64];

/// An extent no shape has given yet.
pub(crate) const UNKNOWN: usize = usize::MAX;

/// One run of a program on a call.
pub(crate) struct Run<'r, 'a, 'c> {
    pub(crate) rule: &'r EinsumRule<'a>,
    pub(crate) prog: &'r Program,
    pub(crate) mesh: &'r Mesh,
    /// The program's slots and dims, as plain slices.
    pub(crate) slots: &'r [Slot],
    pub(crate) dims: &'r [DimCode],
    /// Per slot: its shape (empty when the call gives none) and layout (a
    /// placeholder when the call gives none). A forward run has its inputs'
    /// only (it reads no other).
    pub(crate) specs: &'r [Spec<'c>],
    /// Indexed by axis id (one per axis of the program); [`UNKNOWN`]
    /// where no shape gives it. Read through [`Run::extent`].
    extent: &'r [usize],
    pub(crate) map: AxisMap,
    /// An axis given two shardings keeps the first and the later tensor is
    /// resharded to it, rather than an error (grad: see `go_grad`).
    pub(crate) settle_clashes: bool,
}

/// Per axis id: its extent, as the call's shapes give it (while
/// compiling; a compiled call keeps its program's axes' only).
pub(crate) type Extents = [usize; 64];

impl<'r, 'a, 'c> Run<'r, 'a, 'c> {
    #[inline(always)]
    pub(crate) fn new(
        rule: &'r EinsumRule<'a>,
        prog: &'r Program,
        mesh: &'r Mesh,
        specs: &'r [Spec<'c>],
        extent: &'r [usize],
    ) -> Self {
        Run {
            rule,
            prog,
            mesh,
            slots: &prog.slots,
            dims: &prog.dims,
            specs,
            extent,
            map: AxisMap::new(),
            settle_clashes: false,
        }
    }

    /// Axis `a`'s extent, [`UNKNOWN`] when no shape gives it.
    #[inline(always)]
    pub(crate) fn extent(&self, a: u8) -> usize {
        self.extent.get(usize::from(a)).copied().unwrap_or(UNKNOWN)
    }

    pub(crate) fn axis_name(&self, a: u8) -> AxisName {
        axis_name(self.rule, self.prog, a)
    }

    /// The dims of slot `s`.
    #[inline(always)]
    pub(crate) fn dims_of(&self, s: usize) -> &'r [DimCode] {
        let slot = &self.slots[s];
        &self.dims[usize::from(slot.at)..usize::from(slot.at) + usize::from(slot.rank)]
    }

    /// Slot `s`'s shape, when the call gives it.
    #[inline(always)]
    pub(crate) fn shape(&self, s: usize) -> Option<&'c [usize]> {
        match self.slots[s].given {
            Given::Nothing => None,
            _ => Some(self.specs[s].shape),
        }
    }

    /// The axis dim `dim` of slot `s` carries a sharding to in this call:
    /// `None` for `1`, a size-1 dim and a never-sharded axis.
    #[inline(always)]
    pub(crate) fn carrier(&self, s: usize, dim: usize) -> Option<u8> {
        let c = self.dims_of(s)[dim].live;
        (c != NONE).then_some(c)
    }

    /// The axes slot `s` really holds: its plain and compound dims, not its
    /// `1` dims nor its size-1 dims.
    #[inline(always)]
    pub(crate) fn carried(&self, s: usize) -> AxisSet {
        self.slots[s].carried
    }

    /// Whether axis `a`'s extent is known and a multiple of the product of
    /// the sizes of `dims`.
    pub(crate) fn divides(&self, a: u8, dims: impl Iterator<Item = MeshDim>) -> bool {
        let extent = self.extent(a);
        let product: usize = dims.map(|m| self.mesh.dim(m)).product();
        extent != UNKNOWN && extent > 0 && extent.is_multiple_of(product)
    }

    /// Writes into `out` the mapping of slot `s` under `table`: each dim
    /// the sharding of the axis it carries (`sized`: a size-1 dim carries
    /// none, as the call's shapes say).
    #[inline(always)]
    pub(crate) fn project(&self, s: usize, sized: bool, table: &Table, out: &mut [Sharding]) {
        debug_assert!(table[usize::from(NONE) & 63].is_replicated());
        let dims = self.dims_of(s);
        // Axis ids are below 63; `NONE` masks to 63, an entry no step
        // writes: replicated. So the lookup needs no branch nor check.
        let n = out.len().min(dims.len());
        let (out, dims) = (&mut out[..n], &dims[..n]);
        if sized {
            for k in 0..n {
                out[k] = table[usize::from(dims[k].live) & 63];
            }
        } else {
            for k in 0..n {
                out[k] = table[usize::from(dims[k].carrier) & 63];
            }
        }
    }

    /// The layout of slot `s` as the call gives it.
    #[inline(always)]
    pub(crate) fn attr(&self, s: usize) -> &'c DistAttr {
        self.specs[s].attr
    }

    /// How errors and traces name slot `s`.
    #[inline(always)]
    pub(crate) fn tensor(&self, s: usize) -> TensorRef {
        self.slots[s].t
    }
}

/// Labels name themselves; the dims an ellipsis stands for are numbered.
pub(crate) fn axis_name(rule: &EinsumRule<'_>, prog: &Program, a: u8) -> AxisName {
    let n_labels = prog.n_labels;
    if a == UNSHARDED {
        AxisName::Unsharded
    } else if a < n_labels {
        AxisName::Label(rule.plan.label(a))
    } else {
        AxisName::Ellipsis(a - n_labels)
    }
}

/// Learns every axis's extent from a call's shapes.
pub(crate) struct Learner<'r, 'a> {
    pub(crate) rule: &'r EinsumRule<'a>,
    pub(crate) prog: &'r Program,
    pub(crate) extent: Extents,
}

impl Learner<'_, '_> {
    /// Records the extent of every plain axis of slot `s` (tensor `t`). An
    /// extent of 1 against a larger one is broadcasting; two different
    /// larger extents are an error.
    fn learn_extents(&mut self, s: usize, shape: &[usize]) -> Result<(), SpmdError> {
        for (dim, (d, &size)) in self.prog.dims_of(s).iter().zip(shape).enumerate() {
            let a = d.axis;
            if a == NONE {
                continue;
            }
            let known = self.extent[a as usize];
            if known == UNKNOWN || known == 1 {
                self.extent[a as usize] = size;
            } else if size != known && size != 1 {
                return Err(SpmdError::ShapeMismatch {
                    op: self.rule.name,
                    axis: axis_name(self.rule, self.prog, a),
                    tensor: self.prog.slots[s].t,
                    dim,
                    expected: known,
                    found: size,
                });
            }
        }
        Ok(())
    }

    /// Compound dims of slot `s`: a single factor of unknown extent is the
    /// quotient of the dim's size by the others; when all factors are
    /// known, their product must be the dim's size (or 1: broadcasting).
    fn learn_compound_extents(&mut self, s: usize, shape: &[usize]) -> Result<(), SpmdError> {
        let rule = self.rule;
        let plan = &rule.plan;
        if !plan.has_compound() {
            return Ok(());
        }
        let t = self.prog.slots[s].t;
        for (dim, (d, &size)) in self.prog.dims_of(s).iter().zip(shape).enumerate() {
            // A size-1 dim broadcasts, as a plain axis's does: it teaches
            // nothing and holds no part of its axes.
            if d.len == 0 || size == 1 {
                continue;
            }
            let factors = plan.compound(d.start, d.len);
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
                        op: rule.name,
                        axis: axis_name(self.rule, self.prog, factors[0]),
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
                        .map(|&f| alloc::format!("{}", axis_name(self.rule, self.prog, f)))
                        .collect();
                    return Err(SpmdError::CompoundExtent {
                        op: rule.name,
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

    /// Every axis's extent from the slots' shapes (`shape(s)`), in the
    /// order whose first disagreement is the one reported.
    pub(crate) fn learn_all<'s>(
        &mut self,
        shape: impl Fn(usize) -> &'s [usize],
    ) -> Result<(), SpmdError> {
        let prog = self.prog;
        let present = |s: usize| prog.slots[s].present;
        let n_in = usize::from(prog.n_inputs);
        match prog.direction {
            Direction::Forward => {
                for i in (0..n_in).filter(|&i| present(i)) {
                    self.learn_extents(i, shape(i))?;
                }
                for i in (0..n_in).filter(|&i| present(i)) {
                    self.learn_compound_extents(i, shape(i))?;
                }
                // Declared output shapes must agree with what the inputs
                // say: a rank its term takes, and every axis's extent.
                for s in n_in..prog.slots.len() {
                    let slot = &prog.slots[s];
                    if slot.given != Given::Shape {
                        continue;
                    }
                    let shape = shape(s);
                    let need = usize::from(slot.rank);
                    if shape.len() != need {
                        return Err(super::check::rank_error(
                            self.rule,
                            slot.t,
                            slot.term,
                            shape.len(),
                            crate::error::RankNeed::Exactly(need),
                        ));
                    }
                    self.learn_extents(s, shape)?;
                    self.learn_compound_extents(s, shape)?;
                }
            }
            Direction::Backward | Direction::Grad => {
                let all = 0..usize::from(prog.n_given);
                for s in all.clone().filter(|&s| present(s)) {
                    self.learn_extents(s, shape(s))?;
                }
                for s in all.filter(|&s| present(s)) {
                    self.learn_compound_extents(s, shape(s))?;
                }
            }
        }
        Ok(())
    }
}
