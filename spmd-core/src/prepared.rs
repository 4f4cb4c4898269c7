//! Prepared calls: the shapes of a forward call read once, for a caller
//! that asks about many layouts of the same tensors.
//!
//! A strategy search, or a planner weighing each op of a graph, calls a
//! rule again and again with the same shapes and different layouts. What
//! the shapes decide (the `...` width, each axis's extent, which axis each
//! dim carries, whether the declared output shapes agree) is the same every
//! time; preparing works it out once ([`PlainForward`]), and each call
//! then reads only the layouts. The answer is the rule's own: a call the
//! one-pass engine cannot answer (a co-sharded or partial-and-split input,
//! a conflict the strict policy refuses, a rule that is not plain) goes to
//! the general driver, errors included.
//!
//! Two levels: [`EinsumRule::prepare_forward`] prepares a compiled rule and
//! keeps the shapes ([`PreparedForward`]); any [`SpmdRule`] prepares
//! through [`SpmdRule::prepare_plain_forward`] and answers through
//! [`SpmdRule::forward_plain`] (what a graph keeps per op; `#[spmd_rule]`
//! implements both, running the op's `validate` and `adjust` hooks and
//! choosing its `case` on every call as `infer_into` does).

use alloc::vec::Vec;

use smallvec::SmallVec;

use crate::dist_attr::{DistAttr, Spec};
use crate::error::{Role, SpmdError};
use crate::infer::plain::{Frame, RunOptions, rule_is_plain, run_forward};
use crate::mesh::Mesh;
use crate::op::Call;
use crate::optional::{Absent, AllPresent};
use crate::rule::{EinsumRule, RuleResult};

/// A forward call's shapes read for the one-pass engine: owned (it borrows
/// no rule), so a caller keeps one per op. It holds the shapes it was made
/// for and answers only a call with exactly those ([`PlainForward::answer`]
/// gives `false` for any other), so it cannot answer for the wrong tensors.
#[derive(Clone, Debug)]
pub struct PlainForward {
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

impl PlainForward {
    /// The preparation of `rule` for forward calls with `call`'s shapes
    /// and declared output shapes (its layouts are not read); `None` when
    /// the rule or the shapes are not plain, or the call is not a forward
    /// call with every tensor present.
    pub(crate) fn of(rule: &EinsumRule<'_>, call: &Call<'_>) -> Option<PlainForward> {
        match *call {
            Call::Forward {
                inputs,
                output_shapes,
                absent,
                ..
            } if absent.is_none() => {
                PlainForward::of_shapes(rule, inputs.len(), |i| inputs[i].shape, output_shapes)
            }
            _ => None,
        }
    }

    /// [`PlainForward::of`], from `n_inputs` shapes (input `i`'s is
    /// `shape(i)`) and the declared output shapes.
    fn of_shapes<'s>(
        rule: &EinsumRule<'_>,
        n_inputs: usize,
        shape: impl Fn(usize) -> &'s [usize] + Copy,
        output_shapes: &[&[usize]],
    ) -> Option<PlainForward> {
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
        Some(PlainForward {
            frame,
            options: RunOptions::of(rule),
            case: 0,
            dims,
            declared: output_shapes.len() as u8,
        })
    }

    /// The same preparation, for the rule's notation `case` (what
    /// `#[spmd_rule]` records, so that a call choosing another is left to
    /// the rule).
    pub fn with_case(self, case: u32) -> PlainForward {
        PlainForward { case, ..self }
    }

    /// The notation case it was made for.
    pub fn case(&self) -> u32 {
        self.case
    }

    /// Answers the forward `call` into `result` when it has the prepared
    /// shapes, every tensor present, and layouts the one-pass engine
    /// takes; otherwise `false`, `result` untouched, and the caller asks
    /// the rule ([`SpmdRule::infer_into`](crate::SpmdRule::infer_into)), which answers or fails.
    #[inline]
    pub fn answer(&self, call: &Call<'_>, result: &mut RuleResult) -> bool {
        let Call::Forward {
            mesh,
            inputs,
            output_shapes,
            absent,
        } = *call
        else {
            return false;
        };
        absent == Absent::NONE
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
    /// `None` when the rule or its shapes are not plain, and every call
    /// runs the general driver.
    plain: Option<PlainForward>,
}

impl<'r> EinsumRule<'r> {
    /// Prepares forward calls with inputs of `input_shapes` and, when the
    /// caller knows them, outputs of `output_shapes` (empty: not declared;
    /// one per output: checked against the inputs' extents, as
    /// [`SpmdRule::forward_with_output_shapes`](crate::SpmdRule::forward_with_output_shapes)
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
            plain: PlainForward::of_shapes(
                self,
                input_shapes.len(),
                |i| input_shapes[i],
                output_shapes,
            ),
        }
    }

    /// The one-pass engine's preparation of forward calls with `call`'s
    /// shapes (see [`PlainForward`]); `Ok(None)` when the rule or the
    /// shapes are not plain. A `Result` so that `#[spmd_rule]`'s rule
    /// selection, which may fail, wraps it as it wraps every call.
    pub fn plain_forward(&self, call: &Call<'_>) -> Result<Option<PlainForward>, SpmdError> {
        Ok(PlainForward::of(self, call))
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
