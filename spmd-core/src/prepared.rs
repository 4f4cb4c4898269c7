//! Prepared calls: the shapes of a forward call compiled once, for a
//! caller that asks about many layouts of the same tensors.
//!
//! A strategy search, or a planner weighing each op of a graph, calls a
//! rule again and again with the same shapes and different layouts. What
//! the shapes decide (the `...` width, each axis's extent, which axis each
//! dim carries, whether the declared output shapes agree) is the same every
//! time; preparing works it out once, and each call then reads only the
//! layouts. The answer is the rule's own: a call the compiled shapes do
//! not answer (a co-sharded or partial-and-split input, a conflict the
//! strict policy refuses) runs the rule's full inference, errors included.
//!
//! Two levels: any [`SpmdRule`] prepares through [`SpmdRule::prepare`]
//! into a [`Prepared`], which answers every call of that rule (what a
//! graph keeps per op; `#[spmd_rule]` runs the op's `validate` and
//! `adjust` hooks and chooses its `case` on every call); and
//! [`EinsumRule::prepare_forward`] keeps a compiled rule with its shapes
//! ([`PreparedForward`]) and can answer into the fixed arrays of an
//! [`InlineResult`], `Copy`, the cheapest answer to write and to keep.

use alloc::vec::Vec;

use smallvec::SmallVec;

use crate::dist_attr::{DimsMapping, DistAttr, Partial, Sharding, Spec};
use crate::error::{Role, SpmdError};
use crate::infer::plain::{Frame, MAX_PLAIN_TENSORS, RunOptions, rule_is_plain, run_forward};
use crate::mesh::Mesh;
use crate::op::Call;
use crate::optional::{Absent, AllPresent};
use crate::rule::{EinsumRule, RuleResult, SpmdRule};

/// A forward call's shapes compiled once ([`SpmdRule::prepare`]), for a
/// caller that asks about many layouts of the same tensors: owned (it
/// borrows no rule), so a caller keeps one per op.
///
/// It carries its own fallback: [`Prepared::infer_into`] answers every
/// call, by the compiled shapes where the call has exactly those (and
/// layouts the compiled answer takes), and by the rule's own inference
/// otherwise, errors included. It answers only for the rule that made it.
///
/// ```
/// use spmd_core::{Call, DistAttr, Einsum, Mesh, RuleResult, Spec, SpmdRule};
///
/// let matmul = Einsum::new("mk,kn->mn")?;
/// let mesh = Mesh::new(&[2, 4])?;
/// let (x, w) = (DistAttr::from_paddle(&[0, 1]).unwrap(), DistAttr::from_paddle(&[1, -1]).unwrap());
/// let specs = [Spec::new(&[1024, 512], &x), Spec::new(&[512, 256], &w)];
/// let prepared = matmul.prepare(&Call::forward(&mesh, &specs))?;
/// let mut out = RuleResult::default();
/// prepared.infer_into(&matmul, &Call::forward(&mesh, &specs), &mut out)?;
/// assert_eq!(out.outputs[0].to_string(), "[0, -1] partial{1: SUM}");
/// # Ok::<(), spmd_core::SpmdError>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct Prepared {
    compiled: Option<Compiled>,
}

/// What preparing a call compiled: the frame of its shapes, the options
/// the run reads, and the shapes themselves (a call with others is not
/// answered by it).
#[derive(Clone, Debug)]
struct Compiled {
    /// The rule that made it.
    op: &'static str,
    frame: Frame,
    options: RunOptions,
    /// Which of its notations the rule chose (`#[spmd_rule]`'s `case`s):
    /// a call that chooses another is not answered.
    case: u32,
    /// The inputs' dims, then the declared outputs' dims (their ranks are
    /// the frame's), and how many outputs were declared.
    dims: SmallVec<[usize; 16]>,
    declared: u8,
}

impl Prepared {
    /// Nothing compiled: every call is the rule's to answer.
    pub const NONE: Prepared = Prepared { compiled: None };

    /// The preparation of `rule` (chosen as notation `case` of its op) for
    /// forward calls with `call`'s shapes and declared output shapes (its
    /// layouts are not read); [`Prepared::NONE`] when the shapes or the
    /// rule do not compile, or the call is not a forward call with every
    /// tensor present.
    pub(crate) fn of(rule: &EinsumRule<'_>, call: &Call<'_>, case: u32) -> Prepared {
        let compiled = match *call {
            Call::Forward {
                inputs,
                output_shapes,
                absent,
                ..
            } if absent.is_none() => {
                Compiled::of_shapes(rule, inputs.len(), |i| inputs[i].shape, output_shapes)
            }
            _ => None,
        };
        Prepared {
            compiled: compiled.map(|c| Compiled { case, ..c }),
        }
    }

    /// The same preparation, for op `op`'s notation `case` (what
    /// `#[spmd_rule]` records, so that a call choosing another is left to
    /// the rule; its own name, so that the check is one compare of
    /// addresses).
    #[doc(hidden)]
    pub fn for_case(self, op: &'static str, case: u32) -> Prepared {
        Prepared {
            compiled: self.compiled.map(|c| Compiled { op, case, ..c }),
        }
    }

    /// The notation case it was made for (`None`: nothing compiled).
    #[doc(hidden)]
    pub fn case(&self) -> Option<u32> {
        self.compiled.as_ref().map(|c| c.case)
    }

    /// Whether anything was compiled (when not, every call runs the
    /// rule's full inference).
    pub fn is_compiled(&self) -> bool {
        self.compiled.is_some()
    }

    /// Answers `call` by `rule` (the rule that made this preparation),
    /// into `result`: what [`SpmdRule::infer_into`] answers, by the
    /// compiled shapes where they apply.
    #[inline]
    pub fn infer_into<R: SpmdRule + ?Sized>(
        &self,
        rule: &R,
        call: &Call<'_>,
        result: &mut RuleResult,
    ) -> Result<(), SpmdError> {
        rule.infer_into(&call.with_prepared(self), None, result)
    }

    /// Answers the forward `call` of op `op`, which chose notation
    /// `case`, into `result` when this preparation was made for them, the
    /// call has the prepared shapes, every tensor present, and layouts
    /// the compiled answer takes; otherwise `false`, `result` untouched,
    /// and the rule answers in full. What a rule's
    /// [`SpmdRule::infer_into`] calls first (`#[spmd_rule]`'s does).
    #[doc(hidden)]
    #[inline]
    pub fn answer(&self, op: &str, case: u32, call: &Call<'_>, result: &mut RuleResult) -> bool {
        match &self.compiled {
            Some(c) if c.case == case => c.answer(op, call, result),
            _ => false,
        }
    }
}

impl Compiled {
    /// The compilation of `rule` for forward calls with `n_inputs` shapes
    /// (input `i`'s is `shape(i)`) and the declared output shapes; `None`
    /// when the rule or the shapes are not plain.
    fn of_shapes<'s>(
        rule: &EinsumRule<'_>,
        n_inputs: usize,
        shape: impl Fn(usize) -> &'s [usize] + Copy,
        output_shapes: &[&[usize]],
    ) -> Option<Compiled> {
        if !rule_is_plain(rule) || output_shapes.len() > u8::MAX as usize {
            return None;
        }
        let mut frame = Frame::new(0, 0, 0);
        if !frame.fill_forward(rule, n_inputs, shape, output_shapes) {
            return None;
        }
        let mut dims = SmallVec::new();
        for i in 0..n_inputs {
            dims.extend_from_slice(shape(i));
        }
        for s in output_shapes {
            dims.extend_from_slice(s);
        }
        Some(Compiled {
            op: rule.name,
            frame,
            options: RunOptions::of(rule),
            case: 0,
            dims,
            declared: output_shapes.len() as u8,
        })
    }

    /// See [`Prepared::answer`].
    #[inline]
    fn answer(&self, op: &str, call: &Call<'_>, result: &mut RuleResult) -> bool {
        let Call::Forward {
            mesh,
            inputs,
            output_shapes,
            absent,
            ..
        } = *call
        else {
            return false;
        };
        absent == Absent::NONE
            && same_name(self.op, op)
            && self.has_shapes(inputs, output_shapes)
            && run_forward(&self.options, &self.frame, mesh, |i| inputs[i].attr, result)
    }

    /// Whether the call's shapes are the prepared ones.
    #[inline]
    fn has_shapes(&self, inputs: &[Spec<'_>], output_shapes: &[&[usize]]) -> bool {
        if inputs.len() != self.frame.n_inputs()
            || output_shapes.len() != usize::from(self.declared)
        {
            return false;
        }
        // Dim by dim: shapes are short, and a slice compare calls `memcmp`.
        let mut dims = self.dims.iter();
        for s in inputs
            .iter()
            .map(|s| s.shape)
            .chain(output_shapes.iter().copied())
        {
            for &d in s {
                if dims.next() != Some(&d) {
                    return false;
                }
            }
        }
        dims.next().is_none()
    }

    /// Answers with input `i` laid out as `attr(i)`: the shapes are the
    /// caller's guarantee ([`PreparedForward`] keeps them).
    #[inline]
    fn answer_layouts(&self, mesh: &Mesh, inputs: &[&DistAttr], result: &mut RuleResult) -> bool {
        inputs.len() == self.frame.n_inputs()
            && run_forward(&self.options, &self.frame, mesh, |i| inputs[i], result)
    }
}

/// Whether two op names are one: the same `'static` string nearly always
/// (compared by address first), or equal ones (compared byte by byte:
/// names are short, and `memcmp`'s setup costs more than the loop).
#[inline(always)]
fn same_name(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && (core::ptr::eq(a.as_ptr(), b.as_ptr()) || a.bytes().zip(b.bytes()).all(|(x, y)| x == y))
}

/// A rule's answer held in fixed arrays: at most
/// [`InlineResult::MAX_TENSORS`] tensors (inputs, then outputs), each of
/// rank [`InlineResult::MAX_RANK`] at most. `Copy`, with no heap and no
/// drop: what a search keeps per candidate layout, and the cheapest answer
/// to write ([`PreparedForward::forward_inline`]). Every prepared call the
/// one-pass engine takes fits; [`RuleResult`] holds any answer.
///
/// Past a tensor's rank, and past the last tensor, every entry is
/// replicated, so equal answers are equal words (`==` and `Hash` compare
/// the arrays).
///
/// ```
/// use spmd_core::{DistAttr, Einsum, InlineResult, Mesh};
///
/// let matmul = Einsum::new("mk,kn->mn")?;
/// let rule = matmul.rule();
/// let call = rule.prepare_forward(&[&[1024, 512], &[512, 256]], &[]);
/// let mesh = Mesh::new(&[2, 4])?;
/// let x = DistAttr::from_paddle(&[0, 1]).unwrap();
/// let w = DistAttr::from_paddle(&[1, -1]).unwrap();
/// let mut out = InlineResult::default();
/// call.forward_inline(&mesh, &[&x, &w], &mut out)?;
/// assert_eq!(out.output(0).unwrap().to_string(), "[0, -1] partial{1: SUM}");
/// assert_eq!(out.to_result().inputs[1].to_string(), "[1, -1]");
/// # Ok::<(), spmd_core::SpmdError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct InlineResult {
    pub(crate) n_inputs: u8,
    pub(crate) n_outputs: u8,
    pub(crate) ranks: [u8; MAX_PLAIN_TENSORS],
    pub(crate) dims: [[Sharding; InlineResult::MAX_RANK]; MAX_PLAIN_TENSORS],
    pub(crate) partial: [Partial; MAX_PLAIN_TENSORS],
}

impl Default for InlineResult {
    /// No tensors.
    fn default() -> InlineResult {
        InlineResult {
            n_inputs: 0,
            n_outputs: 0,
            ranks: [0; MAX_PLAIN_TENSORS],
            dims: [[Sharding::REPLICATED; InlineResult::MAX_RANK]; MAX_PLAIN_TENSORS],
            partial: [Partial::NONE; MAX_PLAIN_TENSORS],
        }
    }
}

impl InlineResult {
    /// Inputs and outputs together.
    pub const MAX_TENSORS: usize = MAX_PLAIN_TENSORS;
    /// Of each tensor.
    pub const MAX_RANK: usize = 8;

    pub fn n_inputs(&self) -> usize {
        usize::from(self.n_inputs)
    }

    pub fn n_outputs(&self) -> usize {
        usize::from(self.n_outputs)
    }

    /// Tensor `t` (inputs, then outputs): its dims and partial status.
    #[inline]
    fn tensor(&self, t: usize) -> (&[Sharding], Partial) {
        let rank = usize::from(self.ranks[t]);
        (&self.dims[t][..rank], self.partial[t])
    }

    /// Tensor `t`'s first `rank` dims, to overwrite: its rank is set, and
    /// dims an earlier answer left past it are reset.
    #[inline(always)]
    pub(crate) fn tensor_mut(&mut self, t: usize, rank: usize) -> &mut [Sharding] {
        let dims = &mut self.dims[t];
        if usize::from(self.ranks[t]) > rank {
            dims[rank..].fill(Sharding::REPLICATED);
        }
        self.ranks[t] = rank as u8;
        &mut dims[..rank]
    }

    /// Input `i`'s required dims, read in place.
    #[inline]
    pub fn input_dims(&self, i: usize) -> Option<&[Sharding]> {
        (i < self.n_inputs()).then(|| self.tensor(i).0)
    }

    /// Output `o`'s dims, read in place.
    #[inline]
    pub fn output_dims(&self, o: usize) -> Option<&[Sharding]> {
        (o < self.n_outputs()).then(|| self.tensor(self.n_inputs() + o).0)
    }

    /// Output `o`'s partial status.
    #[inline]
    pub fn output_partial(&self, o: usize) -> Option<Partial> {
        (o < self.n_outputs()).then(|| self.tensor(self.n_inputs() + o).1)
    }

    /// Input `i`'s requirement, as a [`DistAttr`].
    pub fn input(&self, i: usize) -> Option<DistAttr> {
        (i < self.n_inputs()).then(|| self.attr(i))
    }

    /// Output `o`'s layout, as a [`DistAttr`].
    pub fn output(&self, o: usize) -> Option<DistAttr> {
        (o < self.n_outputs()).then(|| self.attr(self.n_inputs() + o))
    }

    fn attr(&self, t: usize) -> DistAttr {
        let (dims, partial) = self.tensor(t);
        DistAttr::new(DimsMapping::from_shardings(dims)).with_partial(partial)
    }

    /// The same answer as a [`RuleResult`].
    pub fn to_result(&self) -> RuleResult {
        let n_in = self.n_inputs();
        RuleResult {
            inputs: (0..n_in).map(|t| self.attr(t)).collect(),
            outputs: (n_in..n_in + self.n_outputs())
                .map(|t| self.attr(t))
                .collect(),
        }
    }

    /// `result` in fixed arrays; `None` when it has more than
    /// [`InlineResult::MAX_TENSORS`] tensors or one of rank above
    /// [`InlineResult::MAX_RANK`].
    pub fn from_result(result: &RuleResult) -> Option<InlineResult> {
        let (n_in, n_out) = (result.inputs.len(), result.outputs.len());
        if n_in + n_out > Self::MAX_TENSORS {
            return None;
        }
        let mut inline = InlineResult {
            n_inputs: n_in as u8,
            n_outputs: n_out as u8,
            ..InlineResult::default()
        };
        for (t, attr) in result.inputs.iter().chain(&result.outputs).enumerate() {
            let dims = attr.dims_mapping.as_slice();
            if dims.len() > Self::MAX_RANK {
                return None;
            }
            inline.dims[t][..dims.len()].copy_from_slice(dims);
            inline.ranks[t] = dims.len() as u8;
            inline.partial[t] = attr.partial;
        }
        Some(inline)
    }
}

/// A forward call of one rule with fixed shapes, prepared by
/// [`EinsumRule::prepare_forward`].
///
/// ```
/// use spmd_core::{DistAttr, Einsum, Mesh, RuleResult};
///
/// let matmul = Einsum::new("mk,kn->mn")?;
/// let rule = matmul.rule();
/// let call = rule.prepare_forward(&[&[1024, 512], &[512, 256]], &[]);
/// let mesh = Mesh::new(&[2, 4])?;
/// let x = DistAttr::from_paddle(&[0, 1]).unwrap();
/// let w = DistAttr::from_paddle(&[1, -1]).unwrap();
/// let mut out = RuleResult::default();
/// call.forward_into(&mesh, &[&x, &w], &mut out)?;
/// assert_eq!(out.outputs[0].to_string(), "[0, -1] partial{1: SUM}");
/// # Ok::<(), spmd_core::SpmdError>(())
/// ```
#[derive(Clone, Debug)]
pub struct PreparedForward<'r> {
    rule: EinsumRule<'r>,
    input_shapes: Vec<SmallVec<[usize; 8]>>,
    output_shapes: Vec<SmallVec<[usize; 8]>>,
    /// `None` when the rule or its shapes do not compile, and every call
    /// runs the full inference.
    plain: Option<Compiled>,
}

impl<'r> EinsumRule<'r> {
    /// Prepares forward calls with inputs of `input_shapes` and, when the
    /// caller knows them, outputs of `output_shapes` (empty: not declared;
    /// one per output: checked against the inputs' extents, as
    /// [`Call::forward_with_output_shapes`]
    /// does). Bad shapes are not an error here: each call reports them, as
    /// an unprepared call would.
    pub fn prepare_forward(
        &self,
        input_shapes: &[&[usize]],
        output_shapes: &[&[usize]],
    ) -> PreparedForward<'r> {
        PreparedForward {
            rule: *self,
            input_shapes: input_shapes
                .iter()
                .map(|s| SmallVec::from_slice(s))
                .collect(),
            output_shapes: output_shapes
                .iter()
                .map(|s| SmallVec::from_slice(s))
                .collect(),
            plain: Compiled::of_shapes(
                self,
                input_shapes.len(),
                |i| input_shapes[i],
                output_shapes,
            ),
        }
    }

    /// The preparation of forward calls with `call`'s shapes (see
    /// [`Prepared`]). A `Result` so that `#[spmd_rule]`'s rule selection,
    /// which may fail, wraps it as it wraps every call.
    pub fn compile_forward(&self, call: &Call<'_>) -> Result<Prepared, SpmdError> {
        Ok(Prepared::of(self, call, 0))
    }
}

impl PreparedForward<'_> {
    /// Forward inference with input `i` laid out as `inputs[i]`, into
    /// `result` (cleared first): the answer, and the errors, of
    /// [`EinsumRule::forward`] on the prepared shapes. A call with another
    /// number of layouts than of prepared shapes is an arity error.
    #[inline]
    pub fn forward_into(
        &self,
        mesh: &Mesh,
        inputs: &[&DistAttr],
        result: &mut RuleResult,
    ) -> Result<(), SpmdError> {
        // (A preparation's input count is the prepared shapes'.)
        if let Some(p) = &self.plain
            && p.answer_layouts(mesh, inputs, result)
        {
            return Ok(());
        }
        self.in_full(mesh, inputs, result)
    }

    /// [`PreparedForward::forward_into`], answered into fixed arrays:
    /// the same answer and errors, and an
    /// [`SpmdError::InlineCapacity`] error for an answer that does not
    /// fit (never one the one-pass engine gives: see [`InlineResult`]).
    #[inline]
    pub fn forward_inline(
        &self,
        mesh: &Mesh,
        inputs: &[&DistAttr],
        result: &mut InlineResult,
    ) -> Result<(), SpmdError> {
        if let Some(p) = &self.plain
            && inputs.len() == p.frame.n_inputs()
            && run_forward(&p.options, &p.frame, mesh, |i| inputs[i], result)
        {
            return Ok(());
        }
        self.inline_in_full(mesh, inputs, result)
    }

    /// The general driver's answer, in fixed arrays.
    #[cold]
    fn inline_in_full(
        &self,
        mesh: &Mesh,
        inputs: &[&DistAttr],
        result: &mut InlineResult,
    ) -> Result<(), SpmdError> {
        let mut full = RuleResult::default();
        self.in_full(mesh, inputs, &mut full)?;
        *result = InlineResult::from_result(&full).ok_or_else(|| SpmdError::InlineCapacity {
            op: self.rule.name,
            tensors: full.inputs.len() + full.outputs.len(),
            rank: full
                .inputs
                .iter()
                .chain(&full.outputs)
                .map(|a| a.dims_mapping.rank())
                .max()
                .unwrap_or(0),
        })?;
        Ok(())
    }

    /// Whether calls can take the one-pass engine (the rule and the shapes
    /// are plain); when not, every call runs the general driver.
    pub fn is_plain(&self) -> bool {
        self.plain.is_some()
    }

    /// The general driver on the prepared shapes.
    #[cold]
    fn in_full(
        &self,
        mesh: &Mesh,
        inputs: &[&DistAttr],
        result: &mut RuleResult,
    ) -> Result<(), SpmdError> {
        if inputs.len() != self.input_shapes.len() {
            return Err(SpmdError::Arity {
                op: self.rule.name,
                role: Role::Input,
                expected: self.input_shapes.len(),
                found: inputs.len(),
                names: self.rule.input_names,
            });
        }
        let specs: SmallVec<[Spec<'_>; 8]> = self
            .input_shapes
            .iter()
            .zip(inputs)
            .map(|(s, a)| Spec::new(s, a))
            .collect();
        let outputs: SmallVec<[&[usize]; 4]> =
            self.output_shapes.iter().map(|s| s.as_slice()).collect();
        crate::infer::forward(
            &self.rule,
            mesh,
            &specs,
            &outputs,
            AllPresent,
            &mut crate::trace::NoTrace,
            result,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dist_attr::ReduceType;
    use crate::einsum::Einsum;

    fn attr(dims: &[i64]) -> DistAttr {
        DistAttr::from_paddle(dims).unwrap()
    }

    /// Another number of layouts than of prepared shapes is an arity
    /// error naming both counts, never a panic or a shorter call.
    #[test]
    fn a_wrong_number_of_layouts_is_an_arity_error() {
        let e = Einsum::new("mk,kn->mn").unwrap();
        let rule = e.rule();
        let call = rule.prepare_forward(&[&[4, 6], &[6, 8]], &[]);
        let mesh = Mesh::new(&[2]).unwrap();
        let x = attr(&[0, -1]);
        let mut out = RuleResult::default();
        for given in [&[&x][..], &[&x, &x, &x][..]] {
            match call.forward_into(&mesh, given, &mut out) {
                Err(SpmdError::Arity {
                    role: Role::Input,
                    expected: 2,
                    found,
                    ..
                }) => assert_eq!(found, given.len()),
                other => panic!("{other:?}"),
            }
            let mut inline = InlineResult::default();
            let e = call.forward_inline(&mesh, given, &mut inline).unwrap_err();
            assert!(matches!(e, SpmdError::Arity { expected: 2, .. }), "{e:?}");
        }
        assert_eq!(out, RuleResult::default());
    }

    /// A rule the one-pass engine does not take (here: a `Max` reduce)
    /// is prepared all the same, and every call gets the driver's answer.
    #[test]
    fn rules_that_are_not_plain_run_the_driver() {
        let e = Einsum::new("ab->a").unwrap().with_reduce(ReduceType::Max);
        let rule = e.rule();
        let call = rule.prepare_forward(&[&[4, 6]], &[]);
        assert!(!call.is_plain());
        let mesh = Mesh::new(&[2]).unwrap();
        let x = attr(&[-1, 0]);
        let mut out = RuleResult::default();
        call.forward_into(&mesh, &[&x], &mut out).unwrap();
        assert_eq!(out.outputs[0].to_string(), "[-1] partial{0: MAX}");
        assert_eq!(out, e.forward(&mesh, &[Spec::new(&[4, 6], &x)]).unwrap());
    }

    /// An answer into fixed arrays reads as the `RuleResult` answer, and
    /// reading past its tensors gives `None`, never a panic.
    #[test]
    fn inline_answers_read_as_the_rule_result() {
        let e = Einsum::new("mk,kn->mn").unwrap();
        let rule = e.rule();
        let call = rule.prepare_forward(&[&[4, 6], &[6, 8]], &[]);
        let mesh = Mesh::new(&[2, 2]).unwrap();
        let (x, w) = (attr(&[0, 1]), attr(&[1, -1]));
        let mut inline = InlineResult::default();
        call.forward_inline(&mesh, &[&x, &w], &mut inline).unwrap();
        let mut full = RuleResult::default();
        call.forward_into(&mesh, &[&x, &w], &mut full).unwrap();
        assert_eq!(inline.to_result(), full);
        assert_eq!((inline.n_inputs(), inline.n_outputs()), (2, 1));
        assert_eq!(inline.input(1), Some(w.clone()));
        assert_eq!(
            inline.output_dims(0),
            Some(full.outputs[0].dims_mapping.as_slice())
        );
        assert_eq!(inline.output_partial(0), Some(full.outputs[0].partial));
        assert_eq!(inline.input(2), None);
        assert_eq!(inline.output(1), None);
        assert_eq!(inline.input_dims(2), None);
        assert_eq!(inline.output_partial(1), None);
    }

    /// A prepared call whose answer does not fit fixed arrays (here a rank-9
    /// tensor, which the one-pass engine leaves to the driver) is a typed
    /// error naming the op, the tensor count and the rank; the same call
    /// into a `RuleResult` answers.
    #[test]
    fn an_answer_too_large_for_fixed_arrays_is_an_error() {
        let e = Einsum::new("abcdefghi->abcdefghi").unwrap();
        let rule = e.rule();
        let shape = [2usize; 9];
        let call = rule.prepare_forward(&[&shape], &[]);
        assert!(!call.is_plain());
        let mesh = Mesh::new(&[2]).unwrap();
        let x = attr(&[0, -1, -1, -1, -1, -1, -1, -1, -1]);
        let mut inline = InlineResult::default();
        let e = call.forward_inline(&mesh, &[&x], &mut inline).unwrap_err();
        assert_eq!(
            e,
            SpmdError::InlineCapacity {
                op: rule.name,
                tensors: 2,
                rank: 9
            }
        );
        assert_eq!(inline, InlineResult::default());
        let mut full = RuleResult::default();
        call.forward_into(&mesh, &[&x], &mut full).unwrap();
        assert_eq!(InlineResult::from_result(&full), None);
    }

    /// Shapes the rule rejects are reported by each call, as the
    /// unprepared call reports them.
    #[test]
    fn bad_shapes_fail_each_call_as_the_rule_does() {
        let e = Einsum::new("mk,kn->mn").unwrap();
        let rule = e.rule();
        let (x, w) = (&[4, 6][..], &[5, 8][..]);
        let call = rule.prepare_forward(&[x, w], &[]);
        assert!(!call.is_plain());
        let mesh = Mesh::new(&[2]).unwrap();
        let (a, b) = (attr(&[0, -1]), attr(&[-1, -1]));
        let mut out = RuleResult::default();
        let prepared = call.forward_into(&mesh, &[&a, &b], &mut out).unwrap_err();
        let direct = e
            .forward(&mesh, &[Spec::new(x, &a), Spec::new(w, &b)])
            .unwrap_err();
        assert_eq!(prepared, direct);
        assert!(
            matches!(prepared, SpmdError::ShapeMismatch { .. }),
            "{prepared:?}"
        );
    }
}
