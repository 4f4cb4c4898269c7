//! From the axis map back to tensors: each tensor's mapping, and
//! backward's input axes that no output has.

use spmd_notation::{AxisSet, Term};

use super::cx::Cx;
use crate::dist_attr::{DimsMapping, Sharding};
use crate::error::{SpmdError, TensorRef};
use crate::trace::Trace;

impl<'r, 'a> Cx<'r, 'a> {
    /// The mapping of one tensor under an axis map.
    pub(super) fn project(
        &self,
        term: Term,
        rank: usize,
        shape: Option<&[usize]>,
        table: &[Sharding],
    ) -> DimsMapping {
        let mut mapping = DimsMapping::default();
        for dim in 0..rank {
            let size = shape.map(|s| s[dim]);
            let s = match self.carrier(self.slot(term, rank, dim), size) {
                Some(a) => table[a as usize],
                None => Sharding::REPLICATED,
            };
            mapping.push(s);
        }
        mapping
    }

    /// Tells `trace` of every input dim whose axis no output has (backward's
    /// replicated fallback).
    pub(super) fn trace_missing_axes<T: Trace + ?Sized>(
        &self,
        input_shapes: &[&[usize]],
        trace: &mut T,
    ) {
        let plan = &self.rule.plan;
        let mut out_axes = AxisSet::EMPTY;
        for o in 0..plan.n_outputs() {
            out_axes = out_axes.union(self.term_axes(plan.output(o)));
        }
        for (i, shape) in input_shapes.iter().enumerate() {
            for dim in 0..shape.len() {
                let slot = self.slot(plan.input(i), shape.len(), dim);
                if let Some(a) = self.carrier(slot, Some(shape[dim]))
                    && !out_axes.contains(a)
                {
                    trace.missing_axis(TensorRef::input(i), dim, self.axis_name(a));
                }
            }
        }
    }

    /// For [`MissingAxis::Error`]: fails on the first input dim whose axis no
    /// output has.
    pub(super) fn check_no_missing_axis(&self, input_shapes: &[&[usize]]) -> Result<(), SpmdError> {
        let plan = &self.rule.plan;
        let mut out_axes = AxisSet::EMPTY;
        for o in 0..plan.n_outputs() {
            out_axes = out_axes.union(self.term_axes(plan.output(o)));
        }
        for (i, shape) in input_shapes.iter().enumerate() {
            for dim in 0..shape.len() {
                let slot = self.slot(plan.input(i), shape.len(), dim);
                if let Some(a) = self.carrier(slot, Some(shape[dim]))
                    && !out_axes.contains(a)
                {
                    return Err(SpmdError::MissingAxis {
                        op: self.rule.name,
                        tensor: TensorRef::input(i),
                        dim,
                        axis: self.axis_name(a),
                    });
                }
            }
        }
        Ok(())
    }
}
