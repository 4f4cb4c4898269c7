//! From the merged axis map back to tensors: each answer's mapping, its
//! partial status, and where answers are written ([`Sink`]: a
//! [`RuleResult`], or the fixed arrays of an [`InlineResult`]).

use spmd_notation::AxisSet;

use super::program::Program;
use super::state::{Run, Table};
use crate::dist_attr::{Partial, ReduceType, Sharding};
use crate::error::{Role, SpmdError};
use crate::mesh::MeshSet;
use crate::policy::{Conflicts, PartialInputs};
use crate::prepared::InlineResult;
use crate::rule::{EinsumRule, RuleResult};
use crate::trace::Trace;

/// Where a run writes its answer: requirements (tensors `0..n_in`) and
/// outputs (`n_in..`), each a mapping and a partial status.
pub(crate) trait Sink {
    /// Makes room for `n_in` requirements and `n_out` outputs of rank
    /// `max_rank()` at most; `false` when they do not fit.
    fn start(&mut self, n_in: usize, n_out: usize, max_rank: impl FnOnce() -> usize) -> bool;
    /// Tensor `t`'s dims, `rank` of them (to be overwritten, every one),
    /// and its partial status.
    fn tensor(&mut self, t: usize, rank: usize) -> (&mut [Sharding], &mut Partial);
    /// Tensor `t` as written.
    fn get(&self, t: usize) -> (&[Sharding], Partial);
}

impl Sink for RuleResult {
    #[inline(always)]
    fn start(&mut self, n_in: usize, n_out: usize, _: impl FnOnce() -> usize) -> bool {
        // In place where the counts match (a result reused for one op's
        // calls): nothing is moved or dropped.
        fit_len(&mut self.inputs, n_in);
        fit_len(&mut self.outputs, n_out);
        true
    }
    #[inline(always)]
    fn tensor(&mut self, t: usize, rank: usize) -> (&mut [Sharding], &mut Partial) {
        let n_in = self.inputs.len();
        let attr = if t < n_in {
            &mut self.inputs[t]
        } else {
            &mut self.outputs[t - n_in]
        };
        (attr.dims_mapping.overwrite(rank), &mut attr.partial)
    }
    #[inline]
    fn get(&self, t: usize) -> (&[Sharding], Partial) {
        let n_in = self.inputs.len();
        let attr = if t < n_in {
            &self.inputs[t]
        } else {
            &self.outputs[t - n_in]
        };
        (attr.dims_mapping.as_slice(), attr.partial)
    }
}

/// `v` with exactly `n` entries, the first ones kept.
#[inline(always)]
fn fit_len(v: &mut smallvec::SmallVec<[crate::DistAttr; 4]>, n: usize) {
    if v.len() > n {
        v.truncate(n);
    }
    while v.len() < n {
        v.push(crate::DistAttr::default());
    }
}

impl Sink for InlineResult {
    #[inline]
    fn start(&mut self, n_in: usize, n_out: usize, max_rank: impl FnOnce() -> usize) -> bool {
        if n_in + n_out > InlineResult::MAX_TENSORS || max_rank() > InlineResult::MAX_RANK {
            return false;
        }
        // Entries an earlier, larger answer left are reset, so that past a
        // tensor's rank and past the last tensor every entry is replicated
        // (equal answers are equal words).
        let before = usize::from(self.n_inputs) + usize::from(self.n_outputs);
        for t in n_in + n_out..before {
            self.tensor_mut(t, 0);
            self.partial[t] = Partial::NONE;
        }
        self.n_inputs = n_in as u8;
        self.n_outputs = n_out as u8;
        true
    }
    #[inline(always)]
    fn tensor(&mut self, t: usize, rank: usize) -> (&mut [Sharding], &mut Partial) {
        let dims = &mut self.dims[t];
        if usize::from(self.ranks[t]) > rank {
            dims[rank..].fill(Sharding::REPLICATED);
        }
        self.ranks[t] = rank as u8;
        (&mut dims[..rank], &mut self.partial[t])
    }
    #[inline]
    fn get(&self, t: usize) -> (&[Sharding], Partial) {
        (&self.dims[t][..usize::from(self.ranks[t])], self.partial[t])
    }
}

/// Writes an absent tensor's answer: its term's explicit dims, replicated
/// (the ellipsis stands for none; see `optional.rs`).
fn write_absent(sink: &mut impl Sink, t: usize, len: usize) {
    let (dims, partial) = sink.tensor(t, len);
    dims.fill(Sharding::REPLICATED);
    *partial = Partial::NONE;
}

/// The largest rank among a program's answers.
fn max_rank(prog: &Program) -> usize {
    prog.slots
        .iter()
        .map(|s| usize::from(s.rank).max(s.term.len as usize))
        .max()
        .unwrap_or(0)
}

/// The sink could not hold the answer.
#[cold]
fn too_large(rule: &EinsumRule<'_>, prog: &Program, n: usize) -> SpmdError {
    SpmdError::InlineCapacity {
        op: rule.name,
        tensors: n,
        rank: max_rank(prog),
    }
}

impl Run<'_, '_, '_> {
    /// Writes each input's requirement, projected through `table`, with
    /// the partial status `partial(i)`; an absent input gets its
    /// placeholder.
    #[inline(always)]
    fn write_inputs<S: Sink>(
        &self,
        sink: &mut S,
        table: &Table,
        partial: impl Fn(usize) -> Partial,
    ) {
        for i in 0..usize::from(self.prog.n_inputs) {
            let slot = &self.slots[i];
            if !slot.present {
                write_absent(sink, i, slot.term.len as usize);
                continue;
            }
            let (dims, p) = sink.tensor(i, self.specs[i].shape.len());
            self.project(i, true, table, dims);
            *p = partial(i);
        }
    }

    /// The forward answer: each present input's requirement under the
    /// given side's table, each output under the derived side's, partial
    /// over the mesh dims of the sharded input axes it lacks.
    pub(crate) fn answer_forward<T: Trace + ?Sized, S: Sink>(
        &self,
        derived: &Table,
        aligned_partial: Partial,
        trace: &mut T,
        sink: &mut S,
    ) -> Result<(), SpmdError> {
        let (rule, prog) = (self.rule, self.prog);
        let (n_in, n_out) = (usize::from(prog.n_inputs), usize::from(prog.n_outputs));
        if !sink.start(n_in, n_out, || max_rank(prog)) {
            return Err(too_large(rule, prog, n_in + n_out));
        }
        let given = &self.map.sharding;
        self.write_inputs(sink, given, |_| aligned_partial);
        // PartialInputs::Linear: the first input with a Sum partial keeps
        // it (on mesh dims no axis took) and passes it on to every output.
        let mut passed_on = aligned_partial;
        if rule.options.policy.partial_inputs == PartialInputs::Linear {
            let taken = given[..usize::from(prog.n_axes)]
                .iter()
                .fold(MeshSet::EMPTY, |m, s| m.union(s.mesh_set()));
            // An addend keeps no partial of its own: a product partial over
            // `d` makes it partial below, and alone it would be added on
            // every rank.
            if let Some(i) = (0..n_in).find(|&i| {
                self.slots[i].present
                    && !rule.plan.is_addend(i)
                    && self
                        .attr(i)
                        .partial
                        .iter()
                        .any(|(_, r)| r == ReduceType::Sum)
            }) {
                passed_on = self
                    .attr(i)
                    .partial
                    .iter()
                    .filter(|&(d, r)| r == ReduceType::Sum && !taken.contains(d))
                    .collect();
                *sink.tensor(i, self.specs[i].shape.len()).1 = passed_on;
            }
        }
        let input_axes = prog.input_axes;
        for o in 0..n_out {
            let s = n_in + o;
            let rank = usize::from(self.slots[s].rank);
            let (dims, partial) = sink.tensor(s, rank);
            self.project(s, false, derived, dims);
            *partial = Partial::NONE;
            if rule.options.not_partial.contains(o) {
                continue;
            }
            for a in input_axes.minus(self.slots[s].axes).iter() {
                let over = given[a as usize].mesh_set();
                if over.is_empty() {
                    continue;
                }
                let r = rule.reduce_of(a);
                if trace.enabled() {
                    trace.partial(o, self.axis_name(a), over, r);
                }
                for m in over.iter() {
                    partial.set(m, r);
                }
            }
            for (d, r) in passed_on.iter() {
                partial.set(d, r);
            }
            if partial.is_partial() {
                partial.remove(mesh_set(dims));
            }
        }
        if rule.plan.has_addends() {
            addend_partials(rule, sink, |i| self.slots[i].present)?;
        }
        Ok(())
    }

    /// The backward answer: each input's requirement under the derived
    /// side's table, each output under the given side's, partial as
    /// forward computes it from those requirements.
    // Called once, from `go_backward`: inlined there, as forward's is.
    #[inline(always)]
    pub(crate) fn answer_backward<S: Sink>(
        &self,
        derived: &Table,
        by_inputs: Partial,
        sink: &mut S,
    ) -> Result<(), SpmdError> {
        let (rule, prog) = (self.rule, self.prog);
        let (n_in, n_out) = (usize::from(prog.n_inputs), usize::from(prog.n_outputs));
        if !sink.start(n_in, n_out, || max_rank(prog)) {
            return Err(too_large(rule, prog, n_in + n_out));
        }
        let given = &self.map.sharding;
        // A partial explained by the inputs goes on the first present input
        // (linear in each operand) or on every one (aligned), as forward
        // keeps it.
        let aligned = rule.options.policy.conflicts == Conflicts::Align;
        let first_present = (0..n_in).find(|&i| self.slots[i].present && !rule.plan.is_addend(i));
        self.write_inputs(sink, derived, |i| {
            if aligned || first_present == Some(i) {
                by_inputs
            } else {
                Partial::NONE
            }
        });
        let input_axes = prog.input_axes;
        for o in 0..n_out {
            let s = n_in + o;
            let slot = &self.slots[s];
            if !slot.present {
                write_absent(sink, s, slot.term.len as usize);
                continue;
            }
            let shape = self.specs[s].shape;
            let (dims, partial) = sink.tensor(s, shape.len());
            self.project(s, true, given, dims);
            let own = mesh_set(dims);
            *partial = Partial::NONE;
            // The outputs are what forward computes from the requirements:
            // partial over the mesh dims of sharded input axes they lack
            // (contracted ones, or with several outputs an axis another
            // output carries), and over what partial inputs pass on; never
            // "as given".
            if rule.options.not_partial.contains(o) {
                continue;
            }
            for a in input_axes.minus(slot.axes).iter() {
                for m in derived[a as usize].mesh_set().iter() {
                    partial.set(m, rule.reduce_of(a));
                }
            }
            for (d, r) in by_inputs.iter() {
                partial.set(d, r);
            }
            partial.remove(own);
        }
        if rule.plan.has_addends() {
            addend_partials(rule, sink, |i| self.slots[i].present)?;
        }
        Ok(())
    }

    /// The grad answer: the grad op's tensors' requirements, and one grad
    /// per input with a gradient, partial over the sharded axes the other
    /// operands it reads carry and it lacks.
    pub(crate) fn answer_grad<T: Trace + ?Sized, S: Sink>(
        &self,
        derived: &Table,
        trace: &mut T,
        sink: &mut S,
    ) -> Result<(), SpmdError> {
        let (rule, prog) = (self.rule, self.prog);
        let plan = &rule.plan;
        let n_given = usize::from(prog.n_given);
        let n_grads = prog.slots.len() - n_given;
        if !sink.start(n_given, n_grads, || max_rank(prog)) {
            return Err(too_large(rule, prog, n_given + n_grads));
        }
        let given = &self.map.sharding;
        let read = |input: Option<u8>| {
            input.is_none_or(|i| {
                !rule.options.grad_ignores.contains(i.into()) && !plan.is_addend(i.into())
            })
        };
        // Whose values a grad reads: an input's own grad does not read it
        // (the derivative of a product by one factor is the others), so in
        // an op linear in each input, an input no other input's grad reads
        // is read for its layout only (a reshape's `x`).
        let linear = rule.options.policy.partial_inputs == PartialInputs::Linear;
        let factors = (0..plan.n_inputs())
            .filter(|&i| read(Some(i as u8)) && !prog.absent.input(i))
            .count();
        let values_read = |input: Option<u8>| read(input) && !(linear && factors <= 1);
        for s in 0..n_given {
            let slot = &self.slots[s];
            if !slot.present {
                write_absent(sink, s, slot.term.len as usize);
                continue;
            }
            let spec = &self.specs[s];
            let (dims, partial) = sink.tensor(s, spec.shape.len());
            if !read(slot.input) {
                // Not read: as given, a partial status included (no value
                // of it is used, so nothing needs reducing first).
                dims.copy_from_slice(spec.attr.dims_mapping.as_slice());
                *partial = spec.attr.partial;
                continue;
            }
            self.project(s, true, given, dims);
            *partial = match slot.input {
                // Read for its layout only: its partial status may stay.
                Some(_) if !values_read(slot.input) => {
                    let mut p = spec.attr.partial;
                    p.remove(mesh_set(dims));
                    p
                }
                _ => Partial::NONE,
            };
        }
        for (g, s) in (n_given..prog.slots.len()).enumerate() {
            let slot = &self.slots[s];
            let t = n_given + g;
            if !slot.present {
                // An absent input has no grad: Paddle's empty dist attr.
                write_absent(sink, t, slot.term.len as usize);
                continue;
            }
            let j = slot.input.expect("an input grad's slot names its input");
            // What computing x_j's grad reads: the other read operands.
            // Axes they carry that x_j lacks are summed over. An addend's
            // grad reads the output grads only (`db = sum dy`); a product
            // operand's grad reads no addend.
            let addend = plan.is_addend(j.into());
            let mut others = AxisSet::EMPTY;
            for k in 0..n_given {
                let other = &self.slots[k];
                if !other.present {
                    continue;
                }
                let reads = match other.input {
                    Some(i) => i != j && !addend && !plan.is_addend(i.into()) && read(other.input),
                    None => !addend || other.t.role == Role::Output,
                };
                if reads {
                    others = others.union(self.carried(k));
                }
            }
            let shape = self.shape(s);
            // Not given: its axes from its term.
            let own = self.carried(s);
            let (dims, partial) = sink.tensor(t, usize::from(slot.rank));
            self.project(s, shape.is_some(), derived, dims);
            let mine = mesh_set(dims);
            *partial = Partial::NONE;
            for a in others.minus(own).iter() {
                let over = given[a as usize].mesh_set();
                if !over.is_empty() {
                    trace.partial(j.into(), self.axis_name(a), over, ReduceType::Sum);
                    for m in over.iter() {
                        partial.set(m, ReduceType::Sum);
                    }
                }
            }
            partial.remove(mine);
            // The grad layout rule: a grad op runs on the forward inputs
            // resharded to its requirements and gives each input grad the
            // local shape of its input's block, so x_j is required laid out
            // as its grad (even where the grad reads x_j only for its
            // shape).
            if slot.twin != super::program::NONE {
                let twin = usize::from(slot.twin);
                let mut grad = [Sharding::REPLICATED; 8];
                let rank = usize::from(slot.rank);
                if rank <= 8 {
                    let (dims, _) = sink.get(t);
                    grad[..rank].copy_from_slice(dims);
                    let (required, partial) = sink.tensor(twin, rank);
                    required.copy_from_slice(&grad[..rank]);
                    // A partial status it keeps is not over a mesh dim that
                    // now shards it.
                    partial.remove(mine);
                } else {
                    let grad: smallvec::SmallVec<[Sharding; 16]> =
                        sink.get(t).0.iter().copied().collect();
                    let (required, partial) = sink.tensor(twin, rank);
                    required.copy_from_slice(&grad);
                    partial.remove(mine);
                }
            }
        }
        Ok(())
    }
}

/// Every mesh dim some dim of `dims` uses.
#[inline(always)]
pub(crate) fn mesh_set(dims: &[Sharding]) -> MeshSet {
    dims.iter()
        .fold(MeshSet::EMPTY, |m, s| m.union(s.mesh_set()))
}

/// Addends (`+n`) are added once to the true result: where the output is a
/// `Sum` over mesh dim `d`, each addend is required partial over `d` too
/// (one rank holds it, the others zeros: a local conversion from
/// replicated); a replicated addend commutes with `Avg`, `Max` and `Min`.
/// With `Prod`, `Any` or `All` no layout of the addend is right, so the call
/// is an error (the macro already refuses such a declaration).
fn addend_partials(
    rule: &EinsumRule<'_>,
    sink: &mut impl Sink,
    present: impl Fn(usize) -> bool,
) -> Result<(), SpmdError> {
    let plan = &rule.plan;
    if !plan.has_addends() {
        return Ok(());
    }
    let n_in = plan.n_inputs();
    // The parser allows addends only with one output.
    if plan.n_outputs() == 0 {
        return Ok(());
    }
    let out = sink.get(n_in).1;
    if let Some((d, r)) = out.iter().find(|(_, r)| {
        !matches!(
            r,
            ReduceType::Sum | ReduceType::Avg | ReduceType::Max | ReduceType::Min
        )
    }) {
        return Err(SpmdError::Rejected {
            op: rule.name,
            message: alloc::format!(
                "the output would be partial ({r}) over mesh dim {d}, and an added operand \
                 cannot be laid out to commute with a {r} reduction"
            ),
        });
    }
    let sums: Partial = out.iter().filter(|&(_, r)| r == ReduceType::Sum).collect();
    for i in 0..n_in {
        if plan.is_addend(i) && present(i) {
            let own = mesh_set(sink.get(i).0);
            let rank = sink.get(i).0.len();
            let mut p = sums;
            p.remove(own);
            *sink.tensor(i, rank).1 = p;
        }
    }
    Ok(())
}
