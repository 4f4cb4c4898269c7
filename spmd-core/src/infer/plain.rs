//! The plain forward: the common call answered in one pass over the dims.
//!
//! Most calls a strategy search makes are plain: a rule of labels, `1`s and
//! `...` (no compounds, diagonals, addends or followers) that drops partial
//! inputs and reduces by `Sum`, under first-wins, strict or role-priority
//! conflicts and any divisibility policy; and inputs whose dims are
//! replicated or split over one mesh dim each. For those the general
//! driver's steps collapse: a merge is one word per axis, the conflicts are
//! settled per mesh dim, and the roles are bit sets. This module answers
//! such a call in one pass (role priority needs a second over the axes).
//!
//! Anything else (and every call that must fail) gives `false` without a
//! word written, and the general driver answers from the start, errors
//! included. The answer is the general driver's own, not an approximation:
//! a unit test runs both on every mapping of a set of rules under each
//! policy and compares.

use smallvec::SmallVec;
use spmd_notation::Dim;

use crate::dist_attr::{DimsMapping, DistAttr, Partial, ReduceType, Sharding, Spec};
use crate::mesh::{Mesh, MeshSet};
use crate::policy::{Conflicts, Divisibility, MissingAxis, PartialInputs, UnshardedClaims};
use crate::prepared::InlineResult;
use crate::rule::{EinsumRule, RuleResult};

/// Axes a plain call may have, labels and `...` dims together (its tables
/// live on the stack).
const MAX_PLAIN_AXES: usize = 16;
// Role priority packs a mesh dim per axis in four bits of a word.
const _: () = assert!(MAX_PLAIN_AXES * 4 <= 64);
/// Tensors (inputs and outputs) a plain call may have.
pub(crate) const MAX_PLAIN_TENSORS: usize = 6;
/// No axis claimed the mesh dim yet.
const NOBODY: u8 = u8::MAX;
/// The claimant of a sharded dim that carries no axis (a `1`, a size-1
/// dim, a never-sharded axis): its bit in the claimant masks.
const UNSHARDED: u8 = 31;

/// Whether the rule itself is plain (see the module docs); the call is
/// checked by [`forward`].
#[inline]
pub(crate) fn rule_is_plain(rule: &EinsumRule<'_>) -> bool {
    let plan = &rule.plan;
    matches!(
        rule.policy.conflicts,
        Conflicts::FirstWins | Conflicts::Strict | Conflicts::RolePriority
    ) && rule.policy.partial_inputs == PartialInputs::Drop
        && rule.reduce == ReduceType::Sum
        && rule.reduce_overrides.is_empty()
        && rule.follows.is_empty()
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

/// Writes `n` answers into `v`: answer `t` has `rank(t)` (at most 8)
/// dims, set by `dims(t, ..)` (every one of them), and partial status
/// `partial(t)`. In place when `v` has `n` entries already (a caller that
/// reuses its result for one op's calls), so nothing is moved or dropped;
/// otherwise built afresh in arrays and pushed whole (a fresh result, as a
/// call by value has), not pushed as defaults and then overwritten.
#[inline(always)]
fn write_answers(
    v: &mut SmallVec<[DistAttr; 4]>,
    n: usize,
    rank: impl Fn(usize) -> usize,
    mut dims: impl FnMut(usize, &mut [Sharding]),
    partial: impl Fn(usize) -> Partial,
) {
    if v.len() == n {
        for (t, to) in v.iter_mut().enumerate() {
            dims(t, to.dims_mapping.overwrite(rank(t)));
            to.partial = partial(t);
        }
    } else {
        v.clear();
        for t in 0..n {
            let (mut buf, r) = ([Sharding::REPLICATED; 8], rank(t));
            dims(t, &mut buf[..r]);
            v.push(DistAttr {
                dims_mapping: DimsMapping::from_array(buf, r),
                partial: partial(t),
            });
        }
    }
}

/// Whether `product` (a product of mesh dims, at least 1) divides
/// `extent`: by a mask when it is a power of two, as mesh dims nearly
/// always are (a division takes tens of cycles).
#[inline(always)]
fn divides(product: usize, extent: usize) -> bool {
    if product.is_power_of_two() {
        extent & (product - 1) == 0
    } else {
        extent.is_multiple_of(product)
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
    let mut f = Frame::new(0, 0, 0);
    f.fill_forward(rule, inputs.len(), |i| inputs[i].shape, output_shapes)
        && run_forward(&RunOptions::of(rule), &f, mesh, |i| inputs[i].attr, result)
}

#[inline]
fn has_ellipsis(rule: &EinsumRule<'_>) -> bool {
    rule.plan.terms.iter().any(|t| t.ellipsis.is_some())
}

/// What the shapes of a plain forward call decide before any layout is
/// read: the `...` width, each axis's extent, and the axis of each dim. A
/// call builds one; a prepared call ([`crate::PreparedForward`]) keeps one
/// for every call with its shapes.
#[derive(Clone, Debug)]
pub(crate) struct Frame {
    /// Per axis: its extent (valid where `known` has its bit).
    extent: [usize; MAX_PLAIN_AXES],
    known: u32,
    /// Per tensor (inputs, then outputs) and dim: the axis it carries
    /// (`NOBODY`: a `1`, a size-1 dim or a never-sharded axis); per
    /// tensor: the set of them.
    carried: [[u8; 8]; MAX_PLAIN_TENSORS],
    carried_set: [u32; MAX_PLAIN_TENSORS],
    /// Every axis some input carries.
    input_axes: u32,
    /// Forward outputs: the axis each dim names (`NOBODY`: a `1`), and
    /// per output the set of them.
    named: [[u8; 8]; MAX_PLAIN_TENSORS],
    named_set: [u32; MAX_PLAIN_TENSORS],
    /// Per tensor (inputs, then outputs): its rank.
    ranks: [u8; MAX_PLAIN_TENSORS],
    n_in: u8,
    n_out: u8,
    width: u8,
    n_labels: u8,
}

impl Frame {
    pub(crate) fn new(n_in: usize, n_out: usize, n_labels: usize) -> Frame {
        Frame {
            extent: [0; MAX_PLAIN_AXES],
            known: 0,
            carried: [[NOBODY; 8]; MAX_PLAIN_TENSORS],
            carried_set: [0; MAX_PLAIN_TENSORS],
            input_axes: 0,
            named: [[NOBODY; 8]; MAX_PLAIN_TENSORS],
            named_set: [0; MAX_PLAIN_TENSORS],
            ranks: [0; MAX_PLAIN_TENSORS],
            n_in: n_in as u8,
            n_out: n_out as u8,
            width: 0,
            n_labels: n_labels as u8,
        }
    }

    /// Makes this (new) frame the frame of a forward call of a plain rule
    /// (see [`rule_is_plain`]) with `n_given` inputs of shapes `shape(i)`
    /// and the declared `output_shapes` (checked when there is one per
    /// output); `false` when the call is not plain by its shapes. Filled
    /// in place: a frame is a few hundred bytes, not worth a move per call.
    #[inline(always)]
    pub(crate) fn fill_forward<'s>(
        &mut self,
        rule: &EinsumRule<'_>,
        n_given: usize,
        shape: impl Fn(usize) -> &'s [usize],
        output_shapes: &[&[usize]],
    ) -> bool {
        if has_ellipsis(rule) {
            self.forward::<true>(rule, n_given, shape, output_shapes)
        } else {
            self.forward::<false>(rule, n_given, shape, output_shapes)
        }
    }

    /// [`Frame::fill_forward`], with the `...` handling compiled in only
    /// where a term has one.
    #[inline(always)]
    fn forward<'s, const ELLIPSIS: bool>(
        &mut self,
        rule: &EinsumRule<'_>,
        n_given: usize,
        shape: impl Fn(usize) -> &'s [usize],
        output_shapes: &[&[usize]],
    ) -> bool {
        let plan = &rule.plan;
        let (n_in, n_out) = (plan.n_inputs(), plan.n_outputs());
        if n_given != n_in || plan.terms.len() > MAX_PLAIN_TENSORS {
            return false;
        }
        let n_labels = plan.labels.len();
        // Every axis has a bit in a word (checked again with the `...`
        // width); never-sharded axes are labels (the ids of `...` dims are
        // this pass's own, numbered unlike the driver's).
        let never = rule.never_sharded;
        if n_labels > MAX_PLAIN_AXES || never.0 >> n_labels != 0 {
            return false;
        }
        let f = self;
        (f.n_in, f.n_out, f.n_labels) = (n_in as u8, n_out as u8, n_labels as u8);
        if f.read_inputs::<ELLIPSIS>(rule, shape).is_none() {
            return false;
        }
        let width = usize::from(f.width);
        // Outputs of rank 8 at most, as inputs (their mappings are built in
        // arrays of 8). Declared output shapes are checked as the general
        // driver does (when there is one per output): any disagreement is
        // its error to give.
        let check_shapes = output_shapes.len() == n_out;
        for (o, &term) in plan.terms[n_in..].iter().enumerate() {
            let rank = term.len as usize + if term.ellipsis.is_some() { width } else { 0 };
            let declared = output_shapes.get(o).filter(|_| check_shapes);
            if rank > 8 || declared.is_some_and(|shape| shape.len() != rank) {
                return false;
            }
            f.ranks[n_in + o] = rank as u8;
            let dims = plan.dims_of(term);
            for k in 0..rank {
                if let Ok(Some(a)) = axis_at::<ELLIPSIS>(dims, term.ellipsis, rank, k, n_labels) {
                    f.named[o][k] = a as u8;
                    f.named_set[o] |= 1 << a;
                    if declared.is_some_and(|shape| !f.learn(a, shape[k])) {
                        return false;
                    }
                }
            }
        }
        true
    }

    /// Reads the inputs' shapes (input `i`'s is `shape(i)`; the counts
    /// are set): the `...` width, the extents and the axis each dim
    /// carries. Gives the axes every input names (labels and `...` dims,
    /// for role priority), or `None` when the shapes are not plain.
    #[inline(always)]
    fn read_inputs<'s, const ELLIPSIS: bool>(
        &mut self,
        rule: &EinsumRule<'_>,
        shape: impl Fn(usize) -> &'s [usize],
    ) -> Option<u32> {
        let plan = &rule.plan;
        let never = rule.never_sharded;
        let n_labels = usize::from(self.n_labels);
        let mut width = 0;
        let mut in_every = u32::MAX;
        for i in 0..usize::from(self.n_in) {
            let term = plan.terms[i];
            let dims = plan.dims_of(term);
            let shape = shape(i);
            let rank = shape.len();
            match term.ellipsis {
                Some(_) if ELLIPSIS && rank >= dims.len() && rank <= 8 => {
                    width = width.max(rank - dims.len())
                }
                None if rank == dims.len() && rank <= 8 => {}
                _ => return None,
            }
            if n_labels + width > MAX_PLAIN_AXES {
                return None;
            }
            self.ranks[i] = rank as u8;
            let mut axes = 0u32;
            for (k, &size) in shape.iter().enumerate() {
                match axis_at::<ELLIPSIS>(dims, term.ellipsis, rank, k, n_labels) {
                    Ok(Some(a)) => {
                        axes |= 1 << a;
                        if !self.learn(a, size) {
                            return None;
                        }
                        // A size-1 dim holds no part of its axis.
                        if size != 1 && !never.contains(a as u8) {
                            self.carried[i][k] = a as u8;
                            self.carried_set[i] |= 1 << a;
                        }
                    }
                    Ok(None) => {}
                    Err(()) => return None,
                }
            }
            in_every &= axes;
            self.input_axes |= self.carried_set[i];
        }
        self.width = width as u8;
        Some(in_every)
    }

    /// The number of inputs it was made for.
    pub(crate) fn n_inputs(&self) -> usize {
        usize::from(self.n_in)
    }

    /// Learns an extent: an extent of 1 broadcasts against any other; two
    /// others must agree (`false`: the driver's error).
    #[inline(always)]
    fn learn(&mut self, a: usize, size: usize) -> bool {
        if self.known & (1 << a) == 0 || self.extent[a] == 1 {
            self.extent[a] = size;
            self.known |= 1 << a;
            true
        } else {
            self.extent[a] == size || size == 1
        }
    }
}

/// What a plain forward run reads of its rule besides the frame: owned,
/// so that a prepared call does not borrow the rule.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RunOptions {
    pub(crate) policy: crate::policy::Policy,
    pub(crate) not_partial: crate::TensorSet,
}

impl RunOptions {
    pub(crate) fn of(rule: &EinsumRule<'_>) -> RunOptions {
        RunOptions {
            policy: rule.policy,
            not_partial: rule.not_partial,
        }
    }
}

/// Answers a forward call of a rule with options `rule` whose shapes made
/// `f`, input `i` laid out as `attr(i)`, into `result`; `false` (and
/// `result` untouched) when the call is not plain by its layouts.
#[inline(always)]
pub(crate) fn run_forward<'a>(
    rule: &RunOptions,
    f: &Frame,
    mesh: &Mesh,
    attr: impl Fn(usize) -> &'a DistAttr,
    result: &mut impl ForwardAnswer,
) -> bool {
    let mut cx = Plain::new(f);
    let merged = if rule.policy.conflicts == Conflicts::RolePriority {
        merge_forward::<true>(rule, f, mesh, attr, &mut cx)
    } else {
        merge_forward::<false>(rule, f, mesh, attr, &mut cx)
    };
    if !merged {
        return false;
    }
    let merged = Merged {
        table: &cx.table,
        outputs: cx.derived.as_ref().unwrap_or(&cx.table),
    };
    result.write(rule, f, &merged);
    true
}

/// What a plain forward call's layouts merged to, per axis: the inputs'
/// side, and the outputs' side (the same table unless the divisibility
/// policy made them differ).
pub(crate) struct Merged<'a> {
    table: &'a [Sharding; MAX_PLAIN_AXES],
    outputs: &'a [Sharding; MAX_PLAIN_AXES],
}

impl Merged<'_> {
    /// Forward output `o`'s partial status: over the mesh dims of the
    /// sharded axes some input carries and it lacks (never ones its own
    /// dims split over: each mesh dim has one axis now).
    #[inline(always)]
    fn output_partial(&self, rule: &RunOptions, f: &Frame, o: usize) -> Partial {
        if rule.not_partial.contains(o) {
            return Partial::NONE;
        }
        let mut over = MeshSet::EMPTY;
        let mut lacked = f.input_axes & !f.named_set[o];
        while lacked != 0 {
            over = over.union(self.table[lacked.trailing_zeros() as usize].mesh_set());
            lacked &= lacked - 1;
        }
        Partial::sum_over(over)
    }
}

/// Where a plain forward answer is written: a [`RuleResult`], or a
/// prepared call's [`InlineResult`].
pub(crate) trait ForwardAnswer {
    /// Writes the answer of a call with frame `f` that merged to `m`.
    fn write(&mut self, rule: &RunOptions, f: &Frame, m: &Merged<'_>);
}

impl ForwardAnswer for RuleResult {
    #[inline(always)]
    fn write(&mut self, rule: &RunOptions, f: &Frame, m: &Merged<'_>) {
        let (n_in, n_out) = (usize::from(f.n_in), usize::from(f.n_out));
        write_requirements(&mut self.inputs, f, m.table);
        write_answers(
            &mut self.outputs,
            n_out,
            |o| usize::from(f.ranks[n_in + o]),
            |o, dims| {
                for (d, &a) in dims.iter_mut().zip(&f.named[o]) {
                    *d = sharding_of(m.outputs, a);
                }
            },
            |o| m.output_partial(rule, f, o),
        );
    }
}

impl ForwardAnswer for InlineResult {
    /// Only the answer's own dims are written; entries an earlier, larger
    /// answer left are reset, so that past a tensor's rank and past the
    /// last tensor every entry is replicated (equal answers are equal
    /// words).
    #[inline(always)]
    fn write(&mut self, rule: &RunOptions, f: &Frame, m: &Merged<'_>) {
        let (n_in, n_out) = (usize::from(f.n_in), usize::from(f.n_out));
        let before = usize::from(self.n_inputs) + usize::from(self.n_outputs);
        self.n_inputs = f.n_in;
        self.n_outputs = f.n_out;
        for t in 0..n_in {
            let dims = self.tensor_mut(t, usize::from(f.ranks[t]));
            for (d, &a) in dims.iter_mut().zip(&f.carried[t]) {
                *d = sharding_of(m.table, a);
            }
            self.partial[t] = Partial::NONE;
        }
        for o in 0..n_out {
            let t = n_in + o;
            let dims = self.tensor_mut(t, usize::from(f.ranks[t]));
            for (d, &a) in dims.iter_mut().zip(&f.named[o]) {
                *d = sharding_of(m.outputs, a);
            }
            self.partial[t] = m.output_partial(rule, f, o);
        }
        for t in n_in + n_out..before {
            self.tensor_mut(t, 0);
            self.partial[t] = Partial::NONE;
        }
    }
}

/// The inputs' requirements, in either direction: each dim takes the
/// sharding `table` gives the axis it carries, and none is partial.
#[inline(always)]
fn write_requirements(
    inputs: &mut SmallVec<[DistAttr; 4]>,
    f: &Frame,
    table: &[Sharding; MAX_PLAIN_AXES],
) {
    write_answers(
        inputs,
        usize::from(f.n_in),
        |i| usize::from(f.ranks[i]),
        |i, dims| {
            for (d, &a) in dims.iter_mut().zip(&f.carried[i]) {
                *d = sharding_of(table, a);
            }
        },
        |_| Partial::NONE,
    );
}

/// The sharding of a dim carrying axis `a` (`NOBODY`: replicated).
#[inline(always)]
fn sharding_of(table: &[Sharding; MAX_PLAIN_AXES], a: u8) -> Sharding {
    if a != NOBODY {
        table[a as usize]
    } else {
        Sharding::REPLICATED
    }
}

/// Merges a plain forward call's layouts (input `i` laid out as
/// `attr(i)`) into `cx`; `false` when the call is not plain by its
/// layouts. `BY_ROLE`: the rule's conflicts go by role priority.
#[inline(always)]
fn merge_forward<'a, const BY_ROLE: bool>(
    rule: &RunOptions,
    f: &Frame,
    mesh: &Mesh,
    attr: impl Fn(usize) -> &'a DistAttr,
    cx: &mut Plain<'_>,
) -> bool {
    let n_in = usize::from(f.n_in);
    let n_labels = usize::from(f.n_labels);
    let width = usize::from(f.width);
    let on_mesh = (1u32 << mesh.rank()) - 1;
    // First-wins and strict merges happen dim by dim as the inputs are
    // read; role priority needs every input's dims first.
    let mut roles = Roles {
        split: [0; MAX_PLAIN_TENSORS],
        split_on: [0; MAX_PLAIN_TENSORS],
    };
    let count_unsharded = rule.policy.unsharded_claims == UnshardedClaims::Count;
    // Every input's mapping checked.
    for i in 0..n_in {
        let attr = attr(i);
        let mapping = attr.dims_mapping.as_slice();
        if mapping.len() != usize::from(f.ranks[i]) {
            return false;
        }
        let mut used = 0u32;
        for (&a, &s) in f.carried[i].iter().zip(mapping) {
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
            if BY_ROLE {
                // Role priority reads each input's split axes after all
                // the inputs are read.
                if a != NOBODY {
                    roles.split[i] |= 1 << a;
                    roles.split_on[i] |= (m as u64) << (4 * a);
                }
            } else if !cx.claim(a, s, m, count_unsharded) {
                return false;
            }
        }
        // A partial input is valid on mesh dims of the mesh that it does not
        // split over; the policy then drops its partial status.
        if u32::from(attr.partial.dims().0) & (used | !on_mesh) != 0 {
            return false;
        }
    }
    // The merge's end, by the rule's policy.
    if BY_ROLE {
        let mut out_axes = 0u32;
        for &s in &f.named_set[..usize::from(f.n_out)] {
            out_axes |= s;
        }
        if !cx.merge_by_role(&roles, mesh, n_in, n_labels, out_axes) {
            return false;
        }
    } else {
        if !cx.settle(mesh, rule.policy.conflicts == Conflicts::Strict) {
            return false;
        }
        if rule.policy.divisibility != Divisibility::Uneven {
            cx.derived = cx.fit(mesh, n_labels + width, rule.policy.divisibility);
        }
    }
    true
}

/// Answers a plain backward (reverse) call of a plain rule into `result`:
/// the outputs' layouts given, none of them partial; `false` (and `result`
/// untouched) when the call is not plain. The outputs merge first-wins in
/// order (role priority settles conflicts the same way here), the
/// divisibility policy fits the inputs' side (under role priority, batch
/// axes must always divide), and each output is partial over the sharded
/// input axes it lacks.
#[inline]
pub(super) fn backward(
    rule: &EinsumRule<'_>,
    mesh: &Mesh,
    input_shapes: &[&[usize]],
    outputs: &[Spec<'_>],
    result: &mut RuleResult,
) -> bool {
    if !rule.merged_first.is_empty()
        || !rule.follows_outputs.is_empty()
        || rule.policy.missing_axis != MissingAxis::Replicate
    {
        return false;
    }
    if rule.plan.terms.iter().any(|t| t.ellipsis.is_some()) {
        backward_with::<true>(rule, mesh, input_shapes, outputs, result)
    } else {
        backward_with::<false>(rule, mesh, input_shapes, outputs, result)
    }
}

fn backward_with<const ELLIPSIS: bool>(
    rule: &EinsumRule<'_>,
    mesh: &Mesh,
    input_shapes: &[&[usize]],
    outputs: &[Spec<'_>],
    result: &mut RuleResult,
) -> bool {
    let plan = &rule.plan;
    let (n_in, n_out) = (plan.n_inputs(), plan.n_outputs());
    if input_shapes.len() != n_in || outputs.len() != n_out || plan.terms.len() > MAX_PLAIN_TENSORS
    {
        return false;
    }
    let n_labels = plan.labels.len();
    // Every axis has a bit in a word (checked again with the `...` width);
    // never-sharded axes are labels.
    let never = rule.never_sharded;
    if n_labels > MAX_PLAIN_AXES || never.0 >> n_labels != 0 {
        return false;
    }
    // The frame, from the shapes alone: the ellipsis width and the extents
    // from the inputs' shapes, then the outputs' (the axis each dim of
    // either carries kept).
    let mut f = Frame::new(n_in, n_out, n_labels);
    // The axes in every input (labels and `...` dims), for role priority.
    let Some(in_every) = f.read_inputs::<ELLIPSIS>(rule, |i| input_shapes[i]) else {
        return false;
    };
    let width = usize::from(f.width);
    // Each output's axes (labels and `...` dims), for its partial status.
    for (o, spec) in outputs.iter().enumerate() {
        let term = plan.terms[n_in + o];
        let dims = plan.dims_of(term);
        let rank = spec.shape.len();
        if rank != term.len as usize + if term.ellipsis.is_some() { width } else { 0 } || rank > 8 {
            return false;
        }
        f.ranks[n_in + o] = rank as u8;
        for (k, &size) in spec.shape.iter().enumerate() {
            match axis_at::<ELLIPSIS>(dims, term.ellipsis, rank, k, n_labels) {
                Ok(Some(a)) => {
                    f.named_set[o] |= 1 << a;
                    if !f.learn(a, size) {
                        return false;
                    }
                    if size != 1 && !never.contains(a as u8) {
                        f.carried[n_in + o][k] = a as u8;
                    }
                }
                Ok(None) => {}
                Err(()) => return false,
            }
        }
    }
    // The outputs' layouts: checked and merged in order.
    let on_mesh = (1u32 << mesh.rank()) - 1;
    let count_unsharded = rule.policy.unsharded_claims == UnshardedClaims::Count;
    let mut cx = Plain::new(&f);
    for (o, spec) in outputs.iter().enumerate() {
        let mapping = spec.attr.dims_mapping.as_slice();
        if mapping.len() != spec.shape.len() || spec.attr.partial.is_partial() {
            return false;
        }
        let mut used = 0u32;
        for (&a, &s) in f.carried[n_in + o].iter().zip(mapping) {
            if s.is_replicated() {
                continue;
            }
            let bits = u32::from(s.single_bits().unwrap_or(0));
            if bits == 0 || bits & (used | !on_mesh) != 0 {
                return false;
            }
            used |= bits;
            if !cx.claim(a, s, bits.trailing_zeros() as usize, count_unsharded) {
                return false;
            }
        }
    }
    if !cx.settle(mesh, rule.policy.conflicts == Conflicts::Strict) {
        return false;
    }
    // The divisibility policy on the inputs' side; under role priority the
    // batch axes (every input's and some output's labels, and `...`) must
    // divide whatever the policy.
    let ellipsis_axes = ((1u32 << width) - 1) << n_labels;
    let always = if rule.policy.conflicts == Conflicts::RolePriority {
        (in_every & plan.output_axes.0 as u32) | ellipsis_axes
    } else {
        0
    };
    let derived = cx.fit_always(mesh, n_labels + width, rule.policy.divisibility, always);
    let derived = derived.as_ref().unwrap_or(&cx.table);
    // The notation's input axes (not only the carried ones: an axis an
    // input holds as a size-1 dim may be split by the outputs). Labels fit
    // the word: a plain call has at most `MAX_PLAIN_AXES` axes.
    let mut input_axes = plan.input_axes.0 as u32;
    if plan.terms[..n_in].iter().any(|t| t.ellipsis.is_some()) {
        input_axes |= ellipsis_axes;
    }
    write_requirements(&mut result.inputs, &f, derived);
    let table = &cx.table;
    write_answers(
        &mut result.outputs,
        n_out,
        |o| usize::from(f.ranks[n_in + o]),
        |o, dims| {
            for (d, &a) in dims.iter_mut().zip(&f.carried[n_in + o]) {
                *d = sharding_of(table, a);
            }
        },
        // Partial over the mesh dims of the sharded input axes it lacks:
        // never ones its own dims split over, as after settling each mesh
        // dim has one axis, and fitting only drops an axis's trailing ones.
        |o| {
            let mut over = MeshSet::EMPTY;
            if !rule.not_partial.contains(o) {
                let mut lacked = input_axes & !f.named_set[o];
                while lacked != 0 {
                    over = over.union(derived[lacked.trailing_zeros() as usize].mesh_set());
                    lacked &= lacked - 1;
                }
            }
            Partial::sum_over(over)
        },
    );
    true
}

/// The state of one plain call, over its frame.
struct Plain<'f> {
    f: &'f Frame,
    /// Per axis: its merged sharding (the inputs' side).
    table: [Sharding; MAX_PLAIN_AXES],
    /// The outputs' side, when the divisibility policy made it differ.
    derived: Option<[Sharding; MAX_PLAIN_AXES]>,
    /// Per mesh dim (first-wins merges): the axis that claimed it first
    /// and every axis that claimed it.
    first: [u8; 8],
    claimants: [u32; 8],
    /// Whether some mesh dim has more than one claimant.
    contested: bool,
}

/// Role priority reads each input's split axes after all the inputs are
/// read: per input, the axes its given dims split, and the mesh dim each
/// is split over (four bits per axis, valid where `split` has its bit).
/// A local of [`merge_forward`], which is compiled apart for role
/// priority: the other policies never touch it, so their calls do not
/// clear it.
struct Roles {
    split: [u32; MAX_PLAIN_TENSORS],
    split_on: [u64; MAX_PLAIN_TENSORS],
}

impl<'f> Plain<'f> {
    fn new(f: &'f Frame) -> Plain<'f> {
        Plain {
            f,
            table: [Sharding::REPLICATED; MAX_PLAIN_AXES],
            derived: None,
            first: [NOBODY; 8],
            claimants: [0; 8],
            contested: false,
        }
    }

    /// The mesh dims of `s`, trailing ones dropped until their product
    /// divides the axis extent (an unknown extent keeps none).
    fn fit_one(&self, mesh: &Mesh, a: usize, mut s: Sharding) -> Sharding {
        while !s.is_replicated() {
            let product: usize = s.iter().map(|m| mesh.dim(m)).product();
            if self.f.known & (1 << a) != 0 && divides(product, self.f.extent[a]) {
                break;
            }
            s = s.without_last();
        }
        s
    }

    /// First wins (or strict), one given dim at a time, in input order:
    /// axis `a` (`NOBODY`: the dim carries none) takes `s`, on mesh dim `m`.
    /// A dim carrying no axis claims its mesh dim when `count_unsharded`.
    /// `false` when an axis is split two ways (the driver's error).
    #[inline(always)]
    fn claim(&mut self, a: u8, s: Sharding, m: usize, count_unsharded: bool) -> bool {
        if a == NOBODY {
            // Replicated in the end, but the claim may count.
            if count_unsharded {
                self.claim_mesh_dim(m, UNSHARDED);
            }
            return true;
        }
        let cur = self.table[a as usize];
        if cur.is_replicated() {
            self.table[a as usize] = s;
            self.claim_mesh_dim(m, a);
            true
        } else {
            cur == s
        }
    }

    /// Claimant `c` (an axis, or `UNSHARDED`) claims mesh dim `m`; a
    /// second claimant contests it.
    #[inline(always)]
    fn claim_mesh_dim(&mut self, m: usize, c: u8) {
        let first = self.first[m];
        if first == NOBODY {
            self.first[m] = c;
        } else if first != c {
            self.contested = true;
        }
        self.claimants[m] |= 1 << c;
    }

    /// After the claims: a mesh dim claimed by several axes stays with the
    /// first claim (strict: `false`, the driver's error). Nothing to do
    /// when no mesh dim was contested, as in most calls.
    #[inline(always)]
    fn settle(&mut self, mesh: &Mesh, strict: bool) -> bool {
        if !self.contested {
            return true;
        }
        self.settle_contested(mesh, strict)
    }

    fn settle_contested(&mut self, mesh: &Mesh, strict: bool) -> bool {
        for m in 0..mesh.rank() {
            let f = self.first[m];
            if f == NOBODY {
                continue;
            }
            let mut others = self.claimants[m] & !(1 << f);
            if others != 0 && strict {
                return false;
            }
            while others != 0 {
                let a = others.trailing_zeros() as usize;
                if a < MAX_PLAIN_AXES {
                    self.table[a] = Sharding::REPLICATED;
                }
                others &= others - 1;
            }
        }
        true
    }

    /// The divisibility policy after a first-wins merge: `Drop` drops a
    /// sharding that does not divide its axis on both sides, `DropDerived`
    /// on the outputs' side only (returned; the inputs' side is `table`).
    fn fit(
        &mut self,
        mesh: &Mesh,
        n_axes: usize,
        policy: Divisibility,
    ) -> Option<[Sharding; MAX_PLAIN_AXES]> {
        self.fit_always(mesh, n_axes, policy, 0)
    }

    /// [`Plain::fit`], where the axes of `always` are fitted on both sides
    /// whatever the policy.
    fn fit_always(
        &mut self,
        mesh: &Mesh,
        n_axes: usize,
        policy: Divisibility,
        always: u32,
    ) -> Option<[Sharding; MAX_PLAIN_AXES]> {
        if policy == Divisibility::Uneven && always == 0 {
            return None;
        }
        let mut derived = self.table;
        for (a, d) in derived.iter_mut().enumerate().take(n_axes) {
            let s = self.table[a];
            let always = always & (1 << a) != 0;
            if s.is_replicated() || (!always && policy == Divisibility::Uneven) {
                continue;
            }
            let fitted = self.fit_one(mesh, a, s);
            *d = fitted;
            if always || policy == Divisibility::Drop {
                self.table[a] = fitted;
            }
        }
        (policy == Divisibility::DropDerived).then_some(derived)
    }

    /// Role priority: batch axes (in every input and an output, or `...`
    /// dims of an output) first, from the input with the most batch shards
    /// first (the others co-shard), each trimmed until divisible; then free
    /// axes (an output's, not batch) by extent, each from the first input
    /// carrying it; then contracted axes (no output's), from the input with
    /// more shards first, trimmed until divisible. A mesh dim another axis
    /// owns is lost. `false` when a contracted axis is a `...` dim (their
    /// order would follow this pass's numbering, not the driver's).
    fn merge_by_role(
        &mut self,
        roles: &Roles,
        mesh: &Mesh,
        n_in: usize,
        n_labels: usize,
        out_axes: u32,
    ) -> bool {
        let ellipsis_axes = ((1u32 << self.f.width) - 1) << n_labels;
        let mut everywhere = u32::MAX;
        let mut axes = 0u32;
        for &c in &self.f.carried_set[..n_in] {
            everywhere &= c;
            axes |= c;
        }
        let batch = axes & out_axes & (everywhere | ellipsis_axes);
        let free = axes & out_axes & !batch;
        let contracted = axes & !out_axes;
        if contracted & ellipsis_axes != 0 {
            return false;
        }
        // Only axes some input splits can take a mesh dim: the loops below
        // visit those alone.
        let split = roles.split[..n_in].iter().fold(0, |m, &s| m | s);
        let every_batch = batch;
        let (batch, free, contracted) = (batch & split, free & split, contracted & split);
        let mut owner = [NOBODY; 8];
        // Axis `a` takes the mesh dim input `i` splits it over, unless
        // another axis owns that mesh dim.
        let take = |cx: &mut Plain, owner: &mut [u8; 8], a: usize, i: usize| {
            if roles.split[i] & (1 << a) != 0 {
                let m = ((roles.split_on[i] >> (4 * a)) & 15) as u8;
                if owner[m as usize] == NOBODY {
                    owner[m as usize] = a as u8;
                    cx.table[a].push(m);
                }
            }
        };
        let fit = |cx: &mut Plain, owner: &mut [u8; 8], a: usize| {
            let s = cx.table[a];
            let fitted = cx.fit_one(mesh, a, s);
            for m in s.iter().skip(fitted.len()) {
                owner[m as usize] = NOBODY;
            }
            cx.table[a] = fitted;
        };
        // Batch: inputs by batch shards, then batch axes carried, most
        // first (ties in input order).
        let mut order = [0usize; MAX_PLAIN_TENSORS];
        let mut key = [(0u32, 0u32); MAX_PLAIN_TENSORS];
        for i in (0..n_in).filter(|_| batch != 0) {
            let shards = (roles.split[i] & batch).count_ones();
            key[i] = (shards, (self.f.carried_set[i] & every_batch).count_ones());
            // Insertion, after every input with a key as large.
            let mut at = i;
            while at > 0 && key[order[at - 1]] < key[i] {
                order[at] = order[at - 1];
                at -= 1;
            }
            order[at] = i;
        }
        for &i in order[..n_in].iter().filter(|_| batch != 0) {
            let mut bits = batch;
            while bits != 0 {
                take(self, &mut owner, bits.trailing_zeros() as usize, i);
                bits &= bits - 1;
            }
        }
        let mut bits = batch;
        while bits != 0 {
            fit(self, &mut owner, bits.trailing_zeros() as usize);
            bits &= bits - 1;
        }
        // Free: the larger extent first (ties: the smaller axis).
        let mut by_extent = [0usize; MAX_PLAIN_AXES];
        let mut n_free = 0;
        let mut bits = free;
        while bits != 0 {
            let a = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            let mut at = n_free;
            while at > 0 && self.f.extent[by_extent[at - 1]] < self.f.extent[a] {
                by_extent[at] = by_extent[at - 1];
                at -= 1;
            }
            by_extent[at] = a;
            n_free += 1;
        }
        for &a in &by_extent[..n_free] {
            if let Some(i) = (0..n_in).find(|&i| self.f.carried_set[i] & (1 << a) != 0) {
                take(self, &mut owner, a, i);
            }
        }
        // Contracted: the inputs sharding it first (ties in input order).
        let mut bits = contracted;
        while bits != 0 {
            let a = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            // (With one mesh dim per dim, the sharded inputs in order; the
            // others give nothing.)
            for i in 0..n_in {
                if self.f.carried_set[i] & (1 << a) != 0 {
                    take(self, &mut owner, a, i);
                }
            }
            fit(self, &mut owner, a);
        }
        true
    }
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

    /// Notation, input shapes, output shapes.
    type Case = (
        &'static str,
        &'static [&'static [usize]],
        &'static [&'static [usize]],
    );
    type SetPolicy = fn(&mut EinsumRule<'_>);

    /// The rules and policies both tests run.
    fn rules_and_policies() -> (Vec<Case>, Vec<SetPolicy>) {
        let cases: Vec<Case> = vec![
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
            (
                "...mk,...kn->...mn",
                &[&[3, 2, 4, 6], &[2, 6, 5]],
                &[&[3, 2, 4, 5]],
            ),
            (
                "...mk,...kn->...mn",
                &[&[2, 4, 6], &[1, 6, 8]],
                &[&[2, 4, 8]],
            ),
            ("mk,kn->mn", &[&[3, 4], &[4, 6]], &[&[3, 6]]),
            ("mk,kn->mn", &[&[6, 6], &[6, 6]], &[&[6, 6]]),
            ("...k,...k->...", &[&[4, 3, 6], &[4, 3, 6]], &[&[4, 3]]),
            ("bk,bk,k->b", &[&[4, 6], &[4, 6], &[6]], &[&[4]]),
            ("...k,...k->k", &[&[4, 3, 6], &[3, 6]], &[&[6]]),
            ("...,...->", &[&[4, 6], &[4, 6]], &[&[]]),
            ("...j->...,j", &[&[4, 6, 8]], &[&[4, 6], &[8]]),
        ];
        let policies: Vec<SetPolicy> = vec![
            |r: &mut EinsumRule<'_>| r.policy = crate::policy::Policy::CLASSIC,
            |r: &mut EinsumRule<'_>| r.policy = crate::policy::Policy::STRICT,
            |r: &mut EinsumRule<'_>| r.never_sharded = AxisSet::EMPTY.with(0),
            |r: &mut EinsumRule<'_>| r.not_partial = crate::TensorSet::of(&[0]),
            |r: &mut EinsumRule<'_>| {
                r.policy.unsharded_claims = UnshardedClaims::Ignore;
                r.never_sharded = AxisSet::EMPTY.with(1);
            },
            |r: &mut EinsumRule<'_>| r.policy.divisibility = Divisibility::Drop,
            |r: &mut EinsumRule<'_>| r.policy.divisibility = Divisibility::DropDerived,
            |r: &mut EinsumRule<'_>| r.policy.conflicts = Conflicts::RolePriority,
            |r: &mut EinsumRule<'_>| {
                r.policy.conflicts = Conflicts::RolePriority;
                r.never_sharded = AxisSet::EMPTY.with(0);
            },
        ];
        (cases, policies)
    }

    /// What a differential test saw: calls the plain pass answered, and
    /// calls it left to the driver that the driver answered (the rest are
    /// errors, all left to it).
    #[derive(Default)]
    struct Tally {
        answered: usize,
        declined: usize,
    }

    impl Tally {
        /// One call: when the plain pass `took` it, its answer must be the
        /// driver's; otherwise the reused result must be as `before`.
        fn check(
            &mut self,
            took: bool,
            full_says: &Result<(), crate::error::SpmdError>,
            (plain, full, before): (&RuleResult, &RuleResult, &RuleResult),
            what: impl FnOnce() -> String,
        ) {
            if took {
                self.answered += 1;
                assert!(
                    full_says.is_ok() && plain == full,
                    "{}\nplain {plain:?}\nfull {full_says:?} {full:?}",
                    what()
                );
            } else {
                self.declined += usize::from(full_says.is_ok());
                assert_eq!(plain, before);
            }
        }

        /// Both paths are exercised, the plain one most.
        fn assert_both_paths(&self) {
            assert!(
                self.answered > self.declined && self.declined > 100,
                "{} {}",
                self.answered,
                self.declined
            );
        }
    }

    /// Calls `visit` with every mapping of tensors of `shapes` over `mesh`
    /// (each dim replicated or on one mesh dim) and its index, for the
    /// shapes as given, with their first dim 1, and with their last dim off
    /// by two; now and then (index `k % partial_every == 3`) the first
    /// tensor partial, or (`k % 11 == 5`) co-sharded. Shape sets with more
    /// than 20,000 mappings are skipped.
    fn for_each_given(
        shapes: &[&[usize]],
        mesh: &Mesh,
        partial_every: usize,
        mut visit: impl FnMut(&[Vec<usize>], &[DistAttr], usize),
    ) {
        for variant in 0..3 {
            let mut shapes: Vec<Vec<usize>> = shapes.iter().map(|s| s.to_vec()).collect();
            match variant {
                1 => shapes.iter_mut().flatten().take(1).for_each(|e| *e = 1),
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
                if k % partial_every == 3 {
                    let mut p = Partial::NONE;
                    p.set(mesh.rank() as u8 - 1, ReduceType::Sum);
                    attrs[0] = attrs[0].clone().with_partial(p);
                }
                if k % 11 == 5 && !shapes[0].is_empty() {
                    let mut m: Vec<Sharding> = attrs[0].dims_mapping.as_slice().to_vec();
                    m[0] = Sharding::co(&[0, 1]).unwrap();
                    attrs[0] = DistAttr::new(DimsMapping::from_shardings(&m));
                }
                visit(&shapes, &attrs, k);
            }
        }
    }

    /// The plain pass answers exactly what the full driver answers, on
    /// every mapping of a set of rules under each plain policy (with
    /// `...`, broadcasting, `1`s, size-1 dims, extent mismatches, partial
    /// inputs, co-shardings and declared output shapes); it answers most
    /// of the calls the driver answers, and leaves the rest alone. A
    /// prepared call (`EinsumRule::prepare_forward`) answers or fails
    /// exactly as the driver does, and takes the pass wherever the call
    /// does.
    #[test]
    fn plain_answers_are_the_drivers() {
        let (cases, policies) = rules_and_policies();
        let meshes = [Mesh::new(&[2, 2]).unwrap(), Mesh::new(&[2, 3, 2]).unwrap()];
        let mut tally = Tally::default();
        let mut plain = RuleResult::default();
        // The prepared calls' results, reused across rules of every arity
        // and rank (an entry a larger answer left must not show).
        let mut reused = RuleResult::default();
        let mut inline = InlineResult::default();
        for &(notation, shapes, outs) in &cases {
            let einsum = Einsum::new(notation).unwrap();
            for &set_policy in &policies {
                let mut rule = einsum.rule();
                set_policy(&mut rule);
                assert!(rule_is_plain(&rule), "{notation}");
                for mesh in &meshes {
                    for_each_given(shapes, mesh, 7, |shapes, attrs, k| {
                        let specs: Vec<Spec<'_>> = shapes
                            .iter()
                            .zip(attrs)
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
                        let took = forward(&rule, mesh, &specs, declared, &mut plain);
                        // Into a fresh result too (answers built, not
                        // overwritten, as a call by value has them).
                        let mut fresh = RuleResult::default();
                        let took_fresh = forward(&rule, mesh, &specs, declared, &mut fresh);
                        assert_eq!(took_fresh, took);
                        if took {
                            assert_eq!(fresh, plain);
                        }
                        let what = || {
                            format!(
                                "{notation} {:?} on {mesh:?}: {attrs:?} {shapes:?}",
                                rule.policy
                            )
                        };
                        // The same call prepared: the frame comes from the
                        // shapes alone, and the answer (or the error) is
                        // the driver's.
                        let shape_refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
                        let prepared = rule.prepare_forward(&shape_refs, declared);
                        assert!(!took || prepared.is_plain(), "{}", what());
                        let attr_refs: Vec<&DistAttr> = attrs.iter().collect();
                        let says = prepared.forward_into(mesh, &attr_refs, &mut reused);
                        match (&full_says, &says) {
                            (Ok(()), Ok(())) => assert_eq!(reused, full, "{}", what()),
                            (Err(a), Err(b)) => assert_eq!(a, b, "{}", what()),
                            _ => panic!("{}: {full_says:?} {says:?}", what()),
                        }
                        // Into fixed arrays: the same answer, and the same
                        // words as a fresh conversion of it.
                        let says = prepared.forward_inline(mesh, &attr_refs, &mut inline);
                        match (&full_says, &says) {
                            (Ok(()), Ok(())) => {
                                assert_eq!(inline.to_result(), full, "{}", what());
                                assert_eq!(Some(inline), InlineResult::from_result(&full));
                            }
                            (Err(a), Err(b)) => assert_eq!(a, b, "{}", what()),
                            _ => panic!("{}: {full_says:?} {says:?}", what()),
                        }
                        tally.check(took, &full_says, (&plain, &full, &before), what);
                    });
                }
            }
        }
        tally.assert_both_paths();
    }

    /// The same for backward (reverse) calls: every mapping of the outputs
    /// (now and then partial or co-sharded), the inputs' shapes given.
    #[test]
    fn plain_backward_answers_are_the_drivers() {
        let (cases, policies) = rules_and_policies();
        let meshes = [Mesh::new(&[2, 2]).unwrap(), Mesh::new(&[2, 3, 2]).unwrap()];
        let mut tally = Tally::default();
        let mut plain = RuleResult::default();
        for &(notation, shapes, outs) in &cases {
            let einsum = Einsum::new(notation).unwrap();
            for &set_policy in &policies {
                let mut rule = einsum.rule();
                set_policy(&mut rule);
                for mesh in &meshes {
                    let input_shapes: Vec<&[usize]> = shapes.to_vec();
                    for_each_given(outs, mesh, 13, |outs, attrs, _| {
                        let specs: Vec<Spec<'_>> = outs
                            .iter()
                            .zip(attrs)
                            .map(|(s, a)| Spec::new(s, a))
                            .collect();
                        let before = plain.clone();
                        let mut full = RuleResult::default();
                        let full_says = super::super::backward_in_full(
                            &rule,
                            mesh,
                            &input_shapes,
                            &specs,
                            AllPresent,
                            &mut NoTrace,
                            &mut full,
                        );
                        let took = rule_is_plain(&rule)
                            && backward(&rule, mesh, &input_shapes, &specs, &mut plain);
                        let mut fresh = RuleResult::default();
                        if took {
                            assert!(backward(&rule, mesh, &input_shapes, &specs, &mut fresh));
                            assert_eq!(fresh, plain);
                        }
                        tally.check(took, &full_says, (&plain, &full, &before), || {
                            format!(
                                "{notation} {:?} on {mesh:?}: {attrs:?} {input_shapes:?}",
                                rule.policy
                            )
                        });
                    });
                }
            }
        }
        tally.assert_both_paths();
    }

    /// Tensors of more than 8 dims (the pass's tables hold 8) are left to
    /// the driver in both directions, inputs and outputs alike, and the
    /// answer is the driver's.
    #[test]
    fn ranks_above_eight_are_the_drivers() {
        let mesh = Mesh::new(&[2, 2]).unwrap();
        let mut result = RuleResult::default();
        // An 8-d input unsqueezed to 9 dims, and a 9-d input.
        for (notation, shape, out_shape) in [
            (
                "abcdefgh->abcdefgh1",
                &[2usize; 8][..],
                &[2usize, 2, 2, 2, 2, 2, 2, 2, 1][..],
            ),
            ("abcdefghi->abcdefghi", &[2; 9], &[2; 9]),
        ] {
            let rule = Einsum::new(notation).unwrap();
            let mut dims = vec![-1_i64; shape.len()];
            dims[0] = 0;
            let x = DistAttr::from_paddle(&dims).unwrap();
            let specs = [Spec::new(shape, &x)];
            assert!(!forward(&rule.rule(), &mesh, &specs, &[], &mut result));
            let answer = rule.forward(&mesh, &specs).unwrap();
            assert_eq!(answer.outputs[0].dims_mapping.rank(), out_shape.len());
            let mut out_dims = vec![-1_i64; out_shape.len()];
            out_dims[0] = 0;
            let out = DistAttr::from_paddle(&out_dims).unwrap();
            let outs = [Spec::new(out_shape, &out)];
            assert!(!backward(&rule.rule(), &mesh, &[shape], &outs, &mut result));
            let answer = rule.backward(&mesh, &[shape], &outs).unwrap();
            assert_eq!(answer.inputs[0].to_string(), x.to_string(), "{notation}");
        }
        assert_eq!(result, RuleResult::default());
    }
}
