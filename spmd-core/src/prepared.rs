//! Prepared calls: the shapes of a forward call read once, for a caller
//! that asks about many layouts of the same tensors.
//!
//! A strategy search, or a planner weighing each op of a graph, calls a
//! rule again and again with the same shapes and different layouts. What
//! the shapes decide (the `...` width, each axis's extent, which axis each
//! dim carries, whether the declared output shapes agree) is the same every
//! time; [`EinsumRule::prepare_forward`] works it out once, and
//! [`PreparedForward::forward_into`] reads only the layouts. The answer is
//! the rule's own: a call the one-pass engine cannot answer (a co-sharded
//! or partial-and-split input, a conflict the strict policy refuses, a
//! rule that is not plain) runs the general driver with the prepared
//! shapes, errors included.

use alloc::vec::Vec;

use smallvec::SmallVec;

use crate::dist_attr::{DistAttr, Spec};
use crate::error::{Role, SpmdError};
use crate::infer::plain::{Frame, rule_is_plain, run_forward};
use crate::mesh::Mesh;
use crate::optional::AllPresent;
use crate::rule::{EinsumRule, RuleResult};

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
    /// What the shapes decide; `None` when the rule or its shapes are not
    /// plain, and every call runs the general driver.
    frame: Option<Frame>,
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
        let mut frame = Frame::new(0, 0, 0);
        let plain = rule_is_plain(self)
            && frame.fill_forward(self, input_shapes.len(), |i| input_shapes[i], output_shapes);
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
            frame: plain.then_some(frame),
        }
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
        if let Some(f) = &self.frame
            && inputs.len() == self.input_shapes.len()
            && run_forward(&self.rule, f, mesh, |i| inputs[i], result)
        {
            return Ok(());
        }
        self.in_full(mesh, inputs, result)
    }

    /// Whether calls can take the one-pass engine (the rule and the shapes
    /// are plain); when not, every call runs the general driver.
    pub fn is_plain(&self) -> bool {
        self.frame.is_some()
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
