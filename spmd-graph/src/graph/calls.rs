//! Running an op's rule: forward (or grad, for a grad op) and backward, on
//! attrs given per tensor of the graph, through the op's preparation when it
//! has one.

use spmd_core::{DistAttr, Prepared, Spec, SpmdError};

use super::{Graph, OpId, OpKind};

impl Graph {
    /// Runs an op's rule in its own direction (forward, or grad for grad
    /// ops) on the given attrs, one per tensor of the graph.
    pub(crate) fn call_forward(
        &self,
        o: OpId,
        attrs: &[DistAttr],
    ) -> Result<spmd_core::RuleResult, SpmdError> {
        let mut r = spmd_core::RuleResult::default();
        self.call_seeing(o, attrs, None, &mut r)?;
        Ok(r)
    }

    /// [`Graph::call_forward`] into the caller's result (reused across
    /// calls: no result is moved or dropped per call), but when the rule
    /// rejects the combination of its inputs' attrs (a strict rule facing
    /// two disagreeing inputs), it runs again seeing only input `keep`'s
    /// attr, the others replicated: that input wins the conflict and the
    /// others are resharded to fit.
    pub(crate) fn call_resolving_into(
        &self,
        o: OpId,
        attrs: &[DistAttr],
        keep: usize,
        out: &mut spmd_core::RuleResult,
    ) -> Result<(), SpmdError> {
        self.call_seeing(o, attrs, None, out).or_else(|first| {
            self.call_seeing(o, attrs, Some(keep), out)
                .map_err(|_| first)
        })
    }

    /// Runs a forward op's reverse rule on its outputs' attrs (taken from
    /// `attrs`, one per tensor of the graph).
    pub(crate) fn call_backward(
        &self,
        o: OpId,
        attrs: &[DistAttr],
        out: &mut spmd_core::RuleResult,
    ) -> Result<(), SpmdError> {
        let (inputs, outputs) = self.io(o);
        let shapes: smallvec::SmallVec<[&[usize]; 8]> =
            inputs.iter().map(|&t| self.shape(t)).collect();
        let outs: smallvec::SmallVec<[Spec<'_>; 4]> = outputs
            .iter()
            .map(|&t| Spec::new(self.shape(t), &attrs[t.index()]))
            .collect();
        self.rules[o.index()].infer_into(
            &spmd_core::Call::backward(&self.mesh, &shapes, &outs),
            None,
            out,
        )
    }

    /// Op `o`'s forward calls prepared (see `prepared`).
    pub(super) fn prepare(&self, o: OpId) -> Prepared {
        if self.kind(o) != OpKind::Forward || self.shared[o.index()] {
            return Prepared::NONE;
        }
        let (inputs, outputs) = self.io(o);
        // Preparing reads shapes only: any layouts will do.
        let placeholders: smallvec::SmallVec<[DistAttr; 4]> = inputs
            .iter()
            .map(|&t| DistAttr::replicated(self.rank(t)))
            .collect();
        let specs: smallvec::SmallVec<[Spec<'_>; 8]> = inputs
            .iter()
            .zip(&placeholders)
            .map(|(&t, a)| Spec::new(self.shape(t), a))
            .collect();
        let output_shapes: smallvec::SmallVec<[&[usize]; 4]> =
            outputs.iter().map(|&t| self.shape(t)).collect();
        let call = spmd_core::Call::forward_with_output_shapes(&self.mesh, &specs, &output_shapes);
        // A rule that cannot prepare (or fails to) is called as usual.
        self.rules[o.index()]
            .prepare(&call)
            .unwrap_or(Prepared::NONE)
    }

    fn call_seeing(
        &self,
        o: OpId,
        attrs: &[DistAttr],
        only: Option<usize>,
        out: &mut spmd_core::RuleResult,
    ) -> Result<(), SpmdError> {
        let (inputs, outputs) = self.io(o);
        let replicated: smallvec::SmallVec<[DistAttr; 4]> = match only {
            None => smallvec::SmallVec::new(),
            Some(_) => inputs
                .iter()
                .map(|&t| DistAttr::replicated(self.rank(t)))
                .collect(),
        };
        // Pushed in a plain loop: `collect` into a SmallVec reserves and
        // checks its spill state per element.
        let mut specs: smallvec::SmallVec<[Spec<'_>; 8]> = smallvec::SmallVec::new();
        for (k, &t) in inputs.iter().enumerate() {
            let attr = match only {
                Some(keep) if keep != k => &replicated[k],
                _ => self.seen(o, t, attrs),
            };
            specs.push(Spec::new(self.shape(t), attr));
        }
        let rule = &*self.rules[o.index()];
        match self.kind(o) {
            // The graph declares every output's shape: rules that read them
            // (a replicated fallback, a creation-like op) need them, the
            // others check them.
            OpKind::Forward => {
                let mut output_shapes: smallvec::SmallVec<[&[usize]; 4]> =
                    smallvec::SmallVec::new();
                for &t in outputs {
                    output_shapes.push(self.shape(t));
                }
                let call =
                    spmd_core::Call::forward_with_output_shapes(&self.mesh, &specs, &output_shapes);
                // The prepared call answers where it applies, and asks the
                // rule otherwise (the replicated fallback included).
                match self.prepared.get(o.index()) {
                    Some(prepared) if only.is_none() => prepared.infer_into(rule, &call, out),
                    _ => rule.infer_into(&call, None, out),
                }
            }
            OpKind::Grad { forward_inputs } => {
                let (ins, grads) = specs.split_at(forward_inputs.min(specs.len()));
                rule.infer_into(&spmd_core::Call::grad(&self.mesh, ins, grads), None, out)
            }
        }
    }
}
