//! Prepared calls: the shapes of a forward call compiled once, for a
//! caller that asks about many layouts of the same tensors.
//!
//! A strategy search, or a planner weighing each op of a graph, calls a
//! rule again and again with the same shapes and different layouts. What
//! the shapes decide (the `...` width, each axis's extent, which axis each
//! dim carries, whether the declared output shapes agree) is the same every
//! time; preparing works it out once, and each call then reads only the
//! layouts. The answer is the engine's own, errors included (a prepared
//! call's layouts are checked on every call); a call with other shapes is
//! compiled as any call is.
//!
//! Two levels: any [`SpmdRule`] prepares through [`SpmdRule::prepare`]
//! into a [`Prepared`], which answers every call of that rule (what a
//! graph keeps per op; `#[spmd_rule]` runs the op's `validate` and
//! `adjust` hooks and chooses its `case` on every call, and the
//! preparation answers only for the notation it was made for); and
//! [`EinsumRule::prepare_forward`] keeps a compiled rule with its shapes
//! ([`PreparedForward`]) and can answer into the fixed arrays of an
//! [`InlineResult`], `Copy`, the cheapest answer to write and to keep.

use alloc::boxed::Box;
use alloc::vec::Vec;

use smallvec::SmallVec;

use crate::dist_attr::{DimsMapping, DistAttr, Partial, Sharding, Spec};
use crate::engine::Compiled;
use crate::engine::cache::RuleKey;
use crate::error::{Role, SpmdError};
use crate::mesh::Mesh;
use crate::op::Call;
use crate::rule::{EinsumRule, RuleResult, SpmdRule};
use crate::trace::NoTrace;

/// A forward call's shapes compiled once ([`SpmdRule::prepare`]), for a
/// caller that asks about many layouts of the same tensors: owned (it
/// borrows no rule), so a caller keeps one per op.
///
/// It carries its own fallback: [`Prepared::infer_into`] answers every
/// call, by the compiled shapes where the call has exactly those, and by
/// the rule's own inference otherwise, errors included. It answers only
/// for the rule (and the notation of that rule) that made it.
///
/// ```
/// use spmd_core::{Call, DistAttr, Einsum, Mesh, RuleResult, Spec, SpmdRule};
///
/// let matmul = Einsum::new("mk,kn->mn")?;
/// let mesh = Mesh::new(&[2, 4])?;
/// let (x, w) = (DistAttr::from_paddle(&[0, 1]).unwrap(), DistAttr::from_paddle(&[1, -1]).unwrap());
/// let specs = [Spec::new(&[1024, 512], &x), Spec::new(&[512, 256], &w)];
/// let prepared = matmul.prepare(&Call::forward(&mesh, &specs))?;
/// assert!(prepared.is_compiled());
/// let mut out = RuleResult::default();
/// prepared.infer_into(&matmul, &Call::forward(&mesh, &specs), &mut out)?;
/// assert_eq!(out.outputs[0].to_string(), "[0, -1] partial{1: SUM}");
/// # Ok::<(), spmd_core::SpmdError>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct Prepared {
    compiled: Option<Box<Compiled>>,
    /// The key of the notation that compiled it.
    key: Option<RuleKey>,
}

impl Prepared {
    /// Nothing compiled: every call is the rule's to answer.
    pub const NONE: Prepared = Prepared {
        compiled: None,
        key: None,
    };

    /// The preparation of `rule` (named by `key`) for forward calls with
    /// `call`'s shapes and declared output shapes (its layouts are not
    /// read); [`Prepared::NONE`] for a rule without a key, or shapes the
    /// rule rejects (each call then reports them).
    pub(crate) fn of(rule: &EinsumRule<'_>, call: &Call<'_>, key: RuleKey) -> Prepared {
        if key == RuleKey::NONE || !call.is_forward() {
            return Prepared::NONE;
        }
        let mut compiled = Box::new(Compiled::empty());
        match compiled.compile_shapes(rule, call) {
            Ok(()) => Prepared {
                compiled: Some(compiled),
                key: Some(key),
            },
            Err(_) => Prepared::NONE,
        }
    }

    /// Whether anything was compiled (when not, every call runs the
    /// rule's full inference).
    pub fn is_compiled(&self) -> bool {
        self.compiled.is_some()
    }

    /// What answers a call of the notation named `key`: the compiled
    /// shapes, when they are the call's.
    #[inline]
    pub(crate) fn for_call(&self, key: RuleKey, call: &Call<'_>) -> Option<&Compiled> {
        match (&self.compiled, self.key) {
            (Some(c), Some(k)) if k == key && c.fits(call) => Some(c),
            _ => None,
        }
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
}

/// Tensors an [`InlineResult`] holds.
const MAX_INLINE_TENSORS: usize = 6;

/// A rule's answer held in fixed arrays: at most
/// [`InlineResult::MAX_TENSORS`] tensors (inputs, then outputs), each of
/// rank [`InlineResult::MAX_RANK`] at most. `Copy`, with no heap and no
/// drop: what a search keeps per candidate layout, and the cheapest answer
/// to write ([`PreparedForward::forward_inline`]). An answer of more
/// tensors or a larger rank is an error; [`RuleResult`] holds any answer.
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
    pub(crate) ranks: [u8; MAX_INLINE_TENSORS],
    pub(crate) dims: [[Sharding; InlineResult::MAX_RANK]; MAX_INLINE_TENSORS],
    pub(crate) partial: [Partial; MAX_INLINE_TENSORS],
}

impl Default for InlineResult {
    /// No tensors.
    fn default() -> InlineResult {
        InlineResult {
            n_inputs: 0,
            n_outputs: 0,
            ranks: [0; MAX_INLINE_TENSORS],
            dims: [[Sharding::REPLICATED; InlineResult::MAX_RANK]; MAX_INLINE_TENSORS],
            partial: [Partial::NONE; MAX_INLINE_TENSORS],
        }
    }
}

impl InlineResult {
    /// Inputs and outputs together.
    pub const MAX_TENSORS: usize = MAX_INLINE_TENSORS;
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
    /// `None` when the shapes do not compile: every call then reports
    /// their error.
    compiled: Option<Box<Compiled>>,
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
        let mut prepared = PreparedForward {
            rule: *self,
            input_shapes: input_shapes
                .iter()
                .map(|s| SmallVec::from_slice(s))
                .collect(),
            output_shapes: output_shapes
                .iter()
                .map(|s| SmallVec::from_slice(s))
                .collect(),
            compiled: None,
        };
        let mesh = Mesh::new(&[1]).expect("a one-device mesh is valid");
        prepared.compiled = prepared.with_call(&mesh, &[], |call| {
            let mut compiled = Box::new(Compiled::empty());
            compiled.compile_shapes(self, call).ok().map(|()| compiled)
        });
        prepared
    }

    /// The preparation of forward calls with `call`'s shapes (see
    /// [`Prepared`]), for the notation `key` names. A `Result` so that
    /// `#[spmd_rule]`'s rule selection, which may fail, wraps it as it
    /// wraps every call.
    #[doc(hidden)]
    pub fn compile_forward(&self, call: &Call<'_>, key: RuleKey) -> Result<Prepared, SpmdError> {
        Ok(Prepared::of(self, call, key))
    }
}

/// A layout placeholder for the inputs of a call that only compiles.
static ANY: DistAttr = DistAttr {
    dims_mapping: DimsMapping::EMPTY,
    partial: Partial::NONE,
};

impl PreparedForward<'_> {
    /// Calls `f` with the forward call of the prepared shapes, input `i`
    /// laid out as `inputs[i]` (a placeholder past them). The call's
    /// tensors go on the stack when there are few, on the heap past that:
    /// collecting them into a `SmallVec` costs a prepared matmul a tenth
    /// of its instructions.
    fn with_call<R>(&self, mesh: &Mesh, inputs: &[&DistAttr], f: impl FnOnce(&Call<'_>) -> R) -> R {
        const INLINE: usize = 8;
        let (n_in, n_out) = (self.input_shapes.len(), self.output_shapes.len());
        if n_in <= INLINE && n_out <= INLINE {
            let mut specs: [Spec<'_>; INLINE] = [Spec::new(&[], &ANY); INLINE];
            let mut outputs: [&[usize]; INLINE] = [&[]; INLINE];
            self.fill(inputs, &mut specs[..n_in], &mut outputs[..n_out]);
            f(&Call::forward_with_output_shapes(
                mesh,
                &specs[..n_in],
                &outputs[..n_out],
            ))
        } else {
            let mut specs = alloc::vec![Spec::new(&[], &ANY); n_in];
            let mut outputs: Vec<&[usize]> = alloc::vec![&[]; n_out];
            self.fill(inputs, &mut specs, &mut outputs);
            f(&Call::forward_with_output_shapes(mesh, &specs, &outputs))
        }
    }

    /// Writes the prepared shapes, with `inputs`' layouts, into `specs`
    /// and `outputs` (one entry per prepared shape).
    #[inline(always)]
    fn fill<'s>(
        &'s self,
        inputs: &[&'s DistAttr],
        specs: &mut [Spec<'s>],
        outputs: &mut [&'s [usize]],
    ) {
        for (i, (spec, shape)) in specs.iter_mut().zip(&self.input_shapes).enumerate() {
            *spec = Spec::new(shape, inputs.get(i).copied().unwrap_or(&ANY));
        }
        for (out, shape) in outputs.iter_mut().zip(&self.output_shapes) {
            *out = shape.as_slice();
        }
    }

    /// Forward inference with input `i` laid out as `inputs[i]`, into
    /// `result` (cleared first): the answer, and the errors, of
    /// [`SpmdRuleExt::forward`](crate::SpmdRuleExt::forward) on the prepared shapes. A call with another
    /// number of layouts than of prepared shapes is an arity error.
    #[inline]
    pub fn forward_into(
        &self,
        mesh: &Mesh,
        inputs: &[&DistAttr],
        result: &mut RuleResult,
    ) -> Result<(), SpmdError> {
        self.answer(mesh, inputs, result)
    }

    /// [`PreparedForward::forward_into`], answered into fixed arrays:
    /// the same answer and errors, and an [`SpmdError::InlineCapacity`]
    /// error for an answer that does not fit (see [`InlineResult`]).
    #[inline]
    pub fn forward_inline(
        &self,
        mesh: &Mesh,
        inputs: &[&DistAttr],
        result: &mut InlineResult,
    ) -> Result<(), SpmdError> {
        self.answer(mesh, inputs, result)
    }

    #[inline]
    fn answer<S: crate::engine::Sink>(
        &self,
        mesh: &Mesh,
        inputs: &[&DistAttr],
        result: &mut S,
    ) -> Result<(), SpmdError> {
        if inputs.len() != self.input_shapes.len() {
            return Err(SpmdError::Arity {
                op: self.rule.name,
                role: Role::Input,
                expected: self.input_shapes.len(),
                found: inputs.len(),
                names: self.rule.options.input_names,
            });
        }
        self.with_call(mesh, inputs, |call| match &self.compiled {
            Some(c) => c.run_fitting(&self.rule, call, &mut NoTrace, result),
            // The shapes do not compile: the call reports why.
            None => crate::engine::infer(&self.rule, call, &mut NoTrace, result),
        })
    }

    /// Whether the prepared shapes compiled (when not, every call reports
    /// their error).
    pub fn is_compiled(&self) -> bool {
        self.compiled.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dist_attr::ReduceType;
    use crate::einsum::Einsum;
    use crate::rule::SpmdRuleExt;

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

    /// Every rule prepares (here a `Max` reduce), and a prepared call
    /// answers what the unprepared call answers.
    #[test]
    fn a_prepared_call_answers_as_the_rule() {
        let e = Einsum::new("ab->a").unwrap().with_reduce(ReduceType::Max);
        let rule = e.rule();
        let call = rule.prepare_forward(&[&[4, 6]], &[]);
        assert!(call.is_compiled());
        let mesh = Mesh::new(&[2]).unwrap();
        let x = attr(&[-1, 0]);
        let mut out = RuleResult::default();
        call.forward_into(&mesh, &[&x], &mut out).unwrap();
        assert_eq!(out.outputs[0].to_string(), "[-1] partial{0: MAX}");
        assert_eq!(out, e.forward(&mesh, &[Spec::new(&[4, 6], &x)]).unwrap());
    }

    /// Past the tensors a call lays out on the stack (eight inputs), the
    /// call's tensors go on the heap: the answer is the same.
    #[test]
    fn a_call_of_many_inputs_answers_as_the_rule() {
        let e = Einsum::new("a,a,a,a,a,a,a,a,a,a->a").unwrap();
        let rule = e.rule();
        let shape: &[usize] = &[8];
        let call = rule.prepare_forward(&[shape; 10], &[shape]);
        assert!(call.is_compiled());
        let mesh = Mesh::new(&[2]).unwrap();
        let (split, whole) = (attr(&[0]), attr(&[-1]));
        let mut layouts = [&whole; 10];
        layouts[9] = &split;
        let mut out = RuleResult::default();
        call.forward_into(&mesh, &layouts, &mut out).unwrap();
        let specs: Vec<Spec<'_>> = layouts.iter().map(|a| Spec::new(shape, a)).collect();
        let by_rule = e
            .infer(
                &Call::forward_with_output_shapes(&mesh, &specs, &[shape]),
                None,
            )
            .unwrap();
        assert_eq!(out, by_rule);
        assert_eq!(out.outputs[0].to_string(), "[0]");
        assert_eq!(out.inputs.len(), 10);
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
    /// tensor) is a typed error naming the op, the tensor count and the
    /// rank; the same call into a `RuleResult` answers.
    #[test]
    fn an_answer_too_large_for_fixed_arrays_is_an_error() {
        let e = Einsum::new("abcdefghi->abcdefghi").unwrap();
        let rule = e.rule();
        let shape = [2usize; 9];
        let call = rule.prepare_forward(&[&shape], &[]);
        assert!(call.is_compiled());
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
        assert!(!call.is_compiled());
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
