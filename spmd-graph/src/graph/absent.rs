//! Ops whose optional inputs are absent (ATen's `native_layer_norm` with
//! `None` weight and bias): the graph lists only the present tensors, and
//! the op's rule is seen through [`AbsentSlots`], which puts placeholders in
//! the absent slots of every call and takes their answers out again. The
//! rest of the graph (propagation, the memo, the reshard plan, backward)
//! therefore never meets a tensor that is not there.

use std::sync::Arc;

use smallvec::SmallVec;
use spmd_core::{Absent, Call, Prepared, RuleResult, Spec, SpmdError, SpmdRule, TensorSet, Trace};

/// A rule whose input slots in `absent` are absent in every call: calls
/// give the present inputs only, in slot order, and answers come back the
/// same way (grad answers without the absent inputs' grads).
pub(crate) struct AbsentSlots {
    pub(crate) inner: Arc<dyn SpmdRule>,
    /// The absent input slots.
    pub(crate) absent: TensorSet,
    /// The rule's inputs without a gradient: a grad answer lists the grads
    /// of the other inputs, absent ones included, which are taken out here.
    pub(crate) no_grad: TensorSet,
}

impl AbsentSlots {
    /// The number of slots of a call with `present` inputs given.
    fn slots(&self, present: usize) -> usize {
        present + self.absent.bits().count_ones() as usize
    }

    /// The present inputs spread over the slots, placeholders in the
    /// absent ones.
    fn spread<T: Copy>(&self, present: &[T], placeholder: T) -> SmallVec<[T; 8]> {
        let mut given = present.iter();
        (0..self.slots(present.len()))
            .map(|i| match self.absent.contains(i) {
                true => placeholder,
                false => *given.next().expect("the slots hold every present input"),
            })
            .collect()
    }

    /// Removes the answers of the absent slots from an answer over `slots`
    /// input slots (and, for a grad call, their grads).
    fn compact(&self, slots: usize, grad: bool, result: &mut RuleResult) {
        let mut slot = 0;
        result.inputs.retain(|_| {
            slot += 1;
            slot > slots || !self.absent.contains(slot - 1)
        });
        if grad {
            let with_grad = (0..slots).filter(|&i| !self.no_grad.contains(i));
            let mut keep = with_grad.map(|i| !self.absent.contains(i));
            result.outputs.retain(|_| keep.next().unwrap_or(true));
        }
    }
}

impl SpmdRule for AbsentSlots {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn infer_into(
        &self,
        call: &Call<'_>,
        trace: Option<&mut dyn Trace>,
        result: &mut RuleResult,
    ) -> Result<(), SpmdError> {
        let mask = Absent::new(self.absent.bits(), 0);
        let (slots, grad) = match *call {
            Call::Forward {
                mesh,
                inputs,
                output_shapes,
                ..
            } => {
                let specs = self.spread(inputs, Spec::absent());
                let call = Call::forward_with_output_shapes(mesh, &specs, output_shapes);
                self.inner
                    .infer_into(&call.with_absent(mask), trace, result)?;
                (specs.len(), false)
            }
            Call::Backward {
                mesh,
                input_shapes,
                outputs,
                ..
            } => {
                let shapes = self.spread(input_shapes, &[][..]);
                let call = Call::backward(mesh, &shapes, outputs);
                self.inner
                    .infer_into(&call.with_absent(mask), trace, result)?;
                (shapes.len(), false)
            }
            Call::Grad {
                mesh,
                inputs,
                output_grads,
                ..
            } => {
                let specs = self.spread(inputs, Spec::absent());
                let call = Call::grad(mesh, &specs, output_grads);
                self.inner
                    .infer_into(&call.with_absent(mask), trace, result)?;
                (specs.len(), true)
            }
            // `Call` may grow directions: one this wrapper does not know is
            // passed through untouched rather than answered wrongly.
            _ => return self.inner.infer_into(call, trace, result),
        };
        self.compact(slots, grad, result);
        Ok(())
    }

    fn prepare(&self, _: &Call<'_>) -> Result<Prepared, SpmdError> {
        Ok(Prepared::NONE)
    }
}
