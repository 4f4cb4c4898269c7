//! Forward and backward inference over any plan (docs/semantics.md §4).
//!
//! One call: check the tensors against the notation, learn every axis's extent,
//! merge the given side's shardings per axis, settle conflicts, apply the
//! divisibility policy, then project the axis map onto every tensor and mark
//! outputs partial over the mesh dims of the axes they lack. All state is inline
//! (`SmallVec`s sized for common ranks): no allocation, no string work.
//!
//! This module holds the three drivers (`forward`, `backward`, `grad`), each
//! one pass through those steps; the steps live in their own modules:
//! [`check`] (is the call well formed), [`cx`] (the per-call context: axes,
//! slots, carriers), [`extents`] (extents and compound factors), [`merges`]
//! (the three merges and the divisibility policy), [`partial`] (addends and
//! backward's Stage-II) and [`project`] (from the axis map back to tensors).
//! [`plain`] answers the common forward and backward calls in one pass
//! (and prepared calls, from their compiled shapes), and hands every other
//! call to the driver.

use smallvec::SmallVec;
use spmd_notation::{AxisSet, Term};

use crate::dist_attr::{DimsMapping, DistAttr, Partial, ReduceType, Sharding, Spec};
use crate::error::{RankNeed, Role, SpmdError, TensorRef};
use crate::mesh::{Mesh, MeshSet};
use crate::optional::{Absent, Presence};
use crate::policy::{BackwardPartial, Compounds, Conflicts, MissingAxis, PartialInputs};
use crate::rule::{EinsumRule, RuleResult};
use crate::signature::GradTensor;
use crate::trace::Trace;

mod check;
mod cx;
mod extents;
mod merges;
mod partial;
pub(crate) mod plain;
mod project;

use check::*;
use cx::*;
use partial::addend_partials;

pub(crate) fn forward<T: Trace + ?Sized>(
    rule: &EinsumRule<'_>,
    mesh: &Mesh,
    inputs: &[Spec<'_>],
    output_shapes: &[&[usize]],
    absent: impl Presence,
    trace: &mut T,
    result: &mut RuleResult,
) -> Result<(), SpmdError> {
    let plan = &rule.plan;
    if trace.enabled() {
        trace.plan(plan);
    } else if absent.mask().is_none()
        && plain::rule_is_plain(rule)
        && plain::forward(rule, mesh, inputs, output_shapes, result)
    {
        return Ok(());
    }
    forward_in_full(rule, mesh, inputs, output_shapes, absent, trace, result)
}

/// [`forward`] through every step of the driver.
fn forward_in_full<T: Trace + ?Sized>(
    rule: &EinsumRule<'_>,
    mesh: &Mesh,
    inputs: &[Spec<'_>],
    output_shapes: &[&[usize]],
    absent: impl Presence,
    trace: &mut T,
    result: &mut RuleResult,
) -> Result<(), SpmdError> {
    let plan = &rule.plan;
    arity(rule, TensorRef::input(0), plan.n_inputs(), inputs.len())?;
    check_absent(rule, absent.mask())?;
    // Absent optional inputs take part in nothing; `present` skips them.
    let present = |i: usize| !absent.input(i);
    // What the merge reads: present inputs that do not follow the others.
    let merged = |i: usize| present(i) && !rule.follows.contains(i);
    let mut width = 0;
    for (i, spec) in inputs.iter().enumerate().filter(|(i, _)| present(*i)) {
        let t = TensorRef::input(i);
        validate(rule.name, t, spec, mesh)?;
        width = width.max(ellipsis_len(rule, t, plan.input(i), spec.shape.len())?);
    }
    let mut cx = Cx::new(rule, mesh, width)?;
    for (i, spec) in inputs.iter().enumerate().filter(|(i, _)| present(*i)) {
        cx.learn_extents(TensorRef::input(i), plan.input(i), spec.shape)?;
    }
    for (i, spec) in inputs.iter().enumerate().filter(|(i, _)| present(*i)) {
        cx.learn_compound_extents(TensorRef::input(i), plan.input(i), spec.shape)?;
    }
    // Declared output shapes (a graph's, or a caller's that knows them)
    // must agree with what the inputs say: a rank its term takes, and every
    // axis's extent.
    if output_shapes.len() == plan.n_outputs() {
        for (o, shape) in output_shapes.iter().enumerate() {
            if absent.output(o) {
                continue;
            }
            let t = TensorRef::output(o);
            let term = plan.output(o);
            let need = term.len as usize + if term.ellipsis.is_some() { width } else { 0 };
            if shape.len() != need {
                return Err(rank_error(
                    rule,
                    t,
                    term,
                    shape.len(),
                    RankNeed::Exactly(need),
                ));
            }
            cx.learn_extents(t, term, shape)?;
            cx.learn_compound_extents(t, term, shape)?;
        }
    }
    // Compounds::Absorb: the given inputs with minor factors' mesh dims
    // moved onto their majors; they are what the rule then reads.
    let absorbed: SmallVec<[Option<DistAttr>; 2]>;
    let absorbed_specs: SmallVec<[Spec<'_>; 8]>;
    let inputs: &[Spec<'_>] = if absorbs(rule)
        && inputs
            .iter()
            .enumerate()
            .any(|(i, s)| present(i) && cx.may_absorb(plan.input(i), s))
    {
        absorbed = inputs
            .iter()
            .enumerate()
            .map(|(i, s)| present(i).then(|| cx.absorbed(plan.input(i), s)).flatten())
            .collect();
        absorbed_specs = with_attrs(inputs, &absorbed);
        &absorbed_specs
    } else {
        inputs
    };
    // Conflicts::Align: the partial status every input shares, kept.
    let mut aligned_partial = Partial::NONE;
    let derived_table = if rule.policy.conflicts == Conflicts::RolePriority {
        // Followers are left out of the roles like absent inputs.
        cx.merge_by_role(
            inputs,
            Absent::new(absent.mask().inputs | rule.follows.bits(), 0),
            trace,
        );
        None
    } else if rule.policy.conflicts == Conflicts::Align {
        let ops: SmallVec<[(Term, Spec<'_>); 8]> = inputs
            .iter()
            .enumerate()
            .filter(|(i, _)| merged(*i))
            .map(|(i, s)| (plan.input(i), *s))
            .collect();
        aligned_partial = cx.merge_aligned(&ops);
        None
    } else {
        for (i, spec) in inputs.iter().enumerate().filter(|(i, _)| merged(*i)) {
            cx.merge(TensorRef::input(i), plan.input(i), spec, trace)?;
        }
        cx.resolve(trace)?;
        // Given side: the inputs; derived side: the outputs.
        cx.fit(trace)
    };
    let given: &[Sharding] = &cx.map.sharding;
    let derived: &[Sharding] = derived_table.as_ref().map_or(given, |d| d);

    // The caller's result, reused: no large value moves on the way out.
    result.inputs.clear();
    result.outputs.clear();
    for (i, spec) in inputs.iter().enumerate() {
        let mapping = if present(i) {
            cx.project(plan.input(i), spec.shape.len(), Some(spec.shape), given)
        } else {
            absent_mapping(plan.input(i))
        };
        result.inputs.push(DistAttr::new(mapping));
    }
    // PartialInputs::Linear: the first input with a Sum partial keeps it (on
    // mesh dims no axis took) and passes it on to every output.
    let mut passed_on = aligned_partial;
    if aligned_partial.is_partial() {
        for (i, r) in result.inputs.iter_mut().enumerate() {
            if present(i) {
                r.partial = aligned_partial;
            }
        }
    }
    if rule.policy.partial_inputs == PartialInputs::Linear {
        let taken = given[..cx.n_axes]
            .iter()
            .fold(MeshSet::EMPTY, |m, s| m.union(s.mesh_set()));
        // An addend keeps no partial of its own: a product partial over `d`
        // makes it partial below, and alone it would be added on every rank.
        if let Some((i, spec)) = inputs.iter().enumerate().find(|(i, s)| {
            present(*i)
                && !plan.is_addend(*i)
                && s.attr.partial.iter().any(|(_, r)| r == ReduceType::Sum)
        }) {
            passed_on = spec
                .attr
                .partial
                .iter()
                .filter(|&(d, r)| r == ReduceType::Sum && !taken.contains(d))
                .collect();
            result.inputs[i].partial = passed_on;
        }
    }
    let input_axes = cx.input_axes();
    for o in 0..plan.n_outputs() {
        let term = plan.output(o);
        let rank = term.len as usize + if term.ellipsis.is_some() { width } else { 0 };
        let mapping = cx.project(term, rank, None, derived);
        let mut partial = Partial::NONE;
        if rule.not_partial.contains(o) {
            result.outputs.push(DistAttr::new(mapping));
            continue;
        }
        for a in input_axes.minus(cx.term_axes(term)).iter() {
            let dims = given[a as usize].mesh_set();
            if dims.is_empty() {
                continue;
            }
            let r = rule.reduce_of(a);
            if trace.enabled() {
                trace.partial(o, cx.axis_name(a), dims, r);
            }
            for m in dims.iter() {
                partial.set(m, r);
            }
        }
        for (d, r) in passed_on.iter() {
            partial.set(d, r);
        }
        partial.remove(mapping.mesh_set());
        result.outputs.push(DistAttr {
            dims_mapping: mapping,
            partial,
        });
    }
    addend_partials(rule, result, present)?;
    Ok(())
}

pub(crate) fn backward<T: Trace + ?Sized>(
    rule: &EinsumRule<'_>,
    mesh: &Mesh,
    input_shapes: &[&[usize]],
    outputs: &[Spec<'_>],
    absent: impl Presence,
    trace: &mut T,
    result: &mut RuleResult,
) -> Result<(), SpmdError> {
    let plan = &rule.plan;
    if trace.enabled() {
        trace.plan(plan);
    } else if absent.mask().is_none()
        && plain::rule_is_plain(rule)
        && plain::backward(rule, mesh, input_shapes, outputs, result)
    {
        return Ok(());
    }
    backward_in_full(rule, mesh, input_shapes, outputs, absent, trace, result)
}

/// [`backward`] through every step of the driver.
fn backward_in_full<T: Trace + ?Sized>(
    rule: &EinsumRule<'_>,
    mesh: &Mesh,
    input_shapes: &[&[usize]],
    outputs: &[Spec<'_>],
    absent: impl Presence,
    trace: &mut T,
    result: &mut RuleResult,
) -> Result<(), SpmdError> {
    let plan = &rule.plan;
    arity(
        rule,
        TensorRef::input(0),
        plan.n_inputs(),
        input_shapes.len(),
    )?;
    arity(rule, TensorRef::output(0), plan.n_outputs(), outputs.len())?;
    check_absent(rule, absent.mask())?;
    let (input_present, output_present) =
        (|i: usize| !absent.input(i), |o: usize| !absent.output(o));
    let mut width = 0;
    for (i, shape) in input_shapes
        .iter()
        .enumerate()
        .filter(|(i, _)| input_present(*i))
    {
        width = width.max(ellipsis_len(
            rule,
            TensorRef::input(i),
            plan.input(i),
            shape.len(),
        )?);
    }
    for (o, spec) in outputs
        .iter()
        .enumerate()
        .filter(|(o, _)| output_present(*o))
    {
        let t = TensorRef::output(o);
        validate(rule.name, t, spec, mesh)?;
        let term = plan.output(o);
        let need = term.len as usize + if term.ellipsis.is_some() { width } else { 0 };
        if spec.shape.len() != need {
            return Err(rank_error(
                rule,
                t,
                term,
                spec.shape.len(),
                RankNeed::Exactly(need),
            ));
        }
    }
    let mut cx = Cx::new(rule, mesh, width)?;
    let present_inputs = || {
        input_shapes
            .iter()
            .enumerate()
            .filter(move |(i, _)| input_present(*i))
    };
    let present_outputs = || {
        outputs
            .iter()
            .enumerate()
            .filter(move |(o, _)| output_present(*o))
    };
    for (i, shape) in present_inputs() {
        cx.learn_extents(TensorRef::input(i), plan.input(i), shape)?;
    }
    for (o, spec) in present_outputs() {
        cx.learn_extents(TensorRef::output(o), plan.output(o), spec.shape)?;
    }
    for (i, shape) in present_inputs() {
        cx.learn_compound_extents(TensorRef::input(i), plan.input(i), shape)?;
    }
    for (o, spec) in present_outputs() {
        cx.learn_compound_extents(TensorRef::output(o), plan.output(o), spec.shape)?;
    }
    // Compounds::Absorb: the given outputs with minor factors' mesh dims
    // moved onto their majors, as in forward.
    let absorbed: SmallVec<[Option<DistAttr>; 2]>;
    let absorbed_specs: SmallVec<[Spec<'_>; 8]>;
    let outputs: &[Spec<'_>] = if absorbs(rule)
        && outputs
            .iter()
            .enumerate()
            .any(|(o, s)| output_present(o) && cx.may_absorb(plan.output(o), s))
    {
        absorbed = outputs
            .iter()
            .enumerate()
            .map(|(o, s)| {
                output_present(o)
                    .then(|| cx.absorbed(plan.output(o), s))
                    .flatten()
            })
            .collect();
        absorbed_specs = with_attrs(outputs, &absorbed);
        &absorbed_specs
    } else {
        outputs
    };
    let present_outputs = || {
        outputs
            .iter()
            .enumerate()
            .filter(move |(o, _)| output_present(*o))
    };
    if rule.merged_first.is_empty() && rule.follows_outputs.is_empty() {
        for (o, spec) in present_outputs() {
            cx.merge(TensorRef::output(o), plan.output(o), spec, trace)?;
        }
    } else {
        // The outputs declared `merged_first`, then the others, each in
        // order; outputs that follow take no part.
        let first = |o: &(usize, &Spec<'_>)| rule.merged_first.contains(o.0);
        let ordered = present_outputs()
            .filter(first)
            .chain(present_outputs().filter(|o| !first(o)))
            .filter(|o| !rule.follows_outputs.contains(o.0));
        for (o, spec) in ordered {
            cx.merge(TensorRef::output(o), plan.output(o), spec, trace)?;
        }
    }
    cx.resolve(trace)?;
    // Given side: the outputs; derived side: the inputs.
    let mut derived_table = cx.fit(trace);
    // Partial Stage-II: what explains the given outputs' partial status.
    let by_inputs = if rule.policy.backward_partial == BackwardPartial::Explain {
        cx.explain_partials(
            (input_shapes, input_present),
            (outputs, output_present),
            &mut derived_table,
            trace,
        )
    } else {
        Partial::NONE
    };
    let given: &[Sharding] = &cx.map.sharding;
    let derived: &[Sharding] = derived_table.as_ref().map_or(given, |d| d);

    if rule.policy.missing_axis == MissingAxis::Error {
        cx.check_no_missing_axis(input_shapes)?;
    }
    if trace.enabled() {
        // Absent inputs have no dims (placeholder shape `[]`): nothing to report.
        cx.trace_missing_axes(input_shapes, trace);
    }
    let input_axes = cx.input_axes();
    // The caller's result, reused: no large value moves on the way out.
    result.inputs.clear();
    result.outputs.clear();
    // A partial explained by the inputs goes on the first present input
    // (linear in each operand) or on every one (aligned), as forward keeps it.
    let aligned = rule.policy.conflicts == Conflicts::Align;
    let first_present = (0..input_shapes.len()).find(|&i| input_present(i) && !plan.is_addend(i));
    for (i, shape) in input_shapes.iter().enumerate() {
        let mapping = if input_present(i) {
            cx.project(plan.input(i), shape.len(), Some(shape), derived)
        } else {
            absent_mapping(plan.input(i))
        };
        let mut attr = DistAttr::new(mapping);
        if input_present(i) && (aligned || first_present == Some(i)) {
            attr.partial = by_inputs;
        }
        result.inputs.push(attr);
    }
    for (o, spec) in outputs.iter().enumerate() {
        if !output_present(o) {
            result
                .outputs
                .push(DistAttr::new(absent_mapping(plan.output(o))));
            continue;
        }
        let mapping = cx.project(plan.output(o), spec.shape.len(), Some(spec.shape), given);
        // The outputs are what forward computes from the requirements: an
        // output is partial over the mesh dims of sharded input axes it lacks
        // (contracted ones, or with several outputs an axis another output
        // carries), and over what partial inputs pass on; never "as given".
        if rule.not_partial.contains(o) {
            result.outputs.push(DistAttr::new(mapping));
            continue;
        }
        let mut partial = Partial::NONE;
        for a in input_axes.minus(cx.term_axes(plan.output(o))).iter() {
            for m in derived[a as usize].mesh_set().iter() {
                partial.set(m, rule.reduce_of(a));
            }
        }
        for (d, r) in by_inputs.iter() {
            partial.set(d, r);
        }
        partial.remove(mapping.mesh_set());
        result.outputs.push(DistAttr {
            dims_mapping: mapping,
            partial,
        });
    }
    addend_partials(rule, result, input_present)?;
    Ok(())
}

/// Grad inference: one merge over the grad op's operands (the forward
/// tensors it takes that the gradient reads, then every grad it takes),
/// requirements projected from it, and each input grad partial over the
/// sharded axes the other operands carry and it lacks (contracted on the
/// other side, or broadcast into it). The operands follow the rule's
/// [`GradSignature`](crate::GradSignature) (by default: the forward inputs,
/// one grad per output).
pub(crate) fn grad<T: Trace + ?Sized>(
    rule: &EinsumRule<'_>,
    mesh: &Mesh,
    inputs: &[Spec<'_>],
    output_grads: &[Spec<'_>],
    absent: impl Presence,
    trace: &mut T,
    result: &mut RuleResult,
) -> Result<(), SpmdError> {
    let plan = &rule.plan;
    if trace.enabled() {
        trace.plan(plan);
    }
    let sig = rule
        .grad_signature
        .for_call(inputs.len(), output_grads.len());
    // The grad op's tensors are not the forward op's: no names to give.
    let unnamed = EinsumRule {
        input_names: &[],
        output_names: &[],
        ..*rule
    };
    arity(
        &unnamed,
        TensorRef::input(0),
        sig.n_tensors(plan.n_inputs()),
        inputs.len(),
    )?;
    arity(
        &unnamed,
        TensorRef::output(0),
        sig.n_grads(plan.n_outputs()),
        output_grads.len(),
    )?;
    // A grad call's slots follow its signature; which tensors may be absent
    // is declared on the forward tensors they stand for.
    let mask = absent.mask();
    let mut forward_mask = Absent::NONE;
    for k in 0..inputs.len().min(64) {
        if mask.input(k) {
            match sig.tensor(k) {
                GradTensor::Input(i) => forward_mask.inputs |= bit(i.into()),
                GradTensor::Output(o) => forward_mask.outputs |= bit(o.into()),
            }
        }
    }
    for g in 0..output_grads.len().min(64) {
        if mask.output(g) {
            forward_mask.outputs |= bit(sig.grad_of(g));
        }
    }
    check_absent(rule, forward_mask)?;
    let present = |t: TensorRef| match t.role {
        Role::Input => !absent.input(t.index),
        Role::Output => !absent.output(t.index),
    };
    // Each operand of the grad op: where it is in the call, its term, and
    // the forward input it is (when it is one).
    let operand = |t: TensorRef| -> (Term, Option<usize>) {
        match t.role {
            Role::Input => match sig.tensor(t.index) {
                GradTensor::Input(i) => (plan.input(i as usize), Some(i as usize)),
                GradTensor::Output(o) => (plan.output(o as usize), None),
            },
            Role::Output => (plan.output(sig.grad_of(t.index)), None),
        }
    };
    let every = || {
        let ins = (0..inputs.len()).map(|k| (TensorRef::input(k), &inputs[k]));
        let outs = (0..output_grads.len()).map(|g| (TensorRef::output(g), &output_grads[g]));
        ins.chain(outs).map(move |(t, s)| {
            let (term, input) = operand(t);
            (t, term, input, s)
        })
    };
    // Forward inputs set the width of `...` (they may broadcast); when the
    // grad op takes none, the outputs and grads do.
    let mut width = 0;
    let mut from_inputs = false;
    for (t, term, input, spec) in every() {
        if present(t) && input.is_some() {
            validate(rule.name, t, spec, mesh)?;
            width = width.max(ellipsis_len(rule, t, term, spec.shape.len())?);
            from_inputs = true;
        }
    }
    for (t, term, input, spec) in every() {
        if !present(t) || input.is_some() {
            continue;
        }
        validate(rule.name, t, spec, mesh)?;
        if !from_inputs {
            width = width.max(ellipsis_len(rule, t, term, spec.shape.len())?);
        }
    }
    for (t, term, input, spec) in every() {
        if !present(t) || input.is_some() {
            continue;
        }
        let need = term.len as usize + if term.ellipsis.is_some() { width } else { 0 };
        if spec.shape.len() != need {
            return Err(rank_error(
                rule,
                t,
                term,
                spec.shape.len(),
                RankNeed::Exactly(need),
            ));
        }
    }
    // What the grad op reads: not the inputs the rule says it ignores, nor
    // an addend (`d bias = Σ dy`, and no other grad reads a bias).
    let read = |input: Option<usize>| {
        input.is_none_or(|i| !rule.grad_ignores.contains(i) && !plan.is_addend(i))
    };
    // Inputs that follow the others are read but do not merge.
    let merges =
        |input: Option<usize>| read(input) && input.is_none_or(|i| !rule.follows.contains(i));
    let mut cx = Cx::new(rule, mesh, width)?;
    let operands = || every().filter(|(t, ..)| present(*t));
    for (t, term, _, spec) in operands() {
        cx.learn_extents(t, term, spec.shape)?;
    }
    for (t, term, _, spec) in operands() {
        cx.learn_compound_extents(t, term, spec.shape)?;
    }
    if rule.policy.conflicts == Conflicts::Align {
        let ops: SmallVec<[(Term, Spec<'_>); 8]> = operands()
            .filter(|(_, _, input, _)| merges(*input))
            .map(|(_, term, _, spec)| (term, *spec))
            .collect();
        // The grads come back whole: a shared partial is not kept here.
        cx.merge_aligned(&ops);
    } else {
        for (t, term, input, spec) in operands() {
            if merges(input) {
                cx.merge(t, term, spec, trace)?;
            }
        }
        cx.resolve(trace)?;
    }
    // Given side: the grad op's inputs; derived side: the input grads.
    let derived_table = cx.fit(trace);
    let given: &[Sharding] = &cx.map.sharding;
    let derived: &[Sharding] = derived_table.as_ref().map_or(given, |d| d);

    // The caller's result, reused: no large value moves on the way out.
    result.inputs.clear();
    result.outputs.clear();
    // Whose values a grad reads: an input's own grad does not read it (the
    // derivative of a product by one factor is the others), so in an op
    // linear in each input, an input no other input's grad reads is read
    // for its layout only (a reshape's `x`).
    let linear = rule.policy.partial_inputs == PartialInputs::Linear;
    let factors = (0..plan.n_inputs())
        .filter(|&i| read(Some(i)) && present(TensorRef::input(i)))
        .count();
    let values_read = |input: Option<usize>| read(input) && !(linear && factors <= 1);
    for (t, term, input, spec) in every() {
        let attr = if !present(t) {
            DistAttr::new(absent_mapping(term))
        } else if !read(input) {
            // Not read: as given, a partial status included (no value of it
            // is used, so nothing needs reducing first).
            spec.attr.clone()
        } else {
            let mapping = cx.project(term, spec.shape.len(), Some(spec.shape), given);
            match input {
                // Read for its layout only: its partial status may stay.
                Some(_) if !values_read(input) => {
                    let mut partial = spec.attr.partial;
                    partial.remove(mapping.mesh_set());
                    DistAttr::new(mapping).with_partial(partial)
                }
                _ => DistAttr::new(mapping),
            }
        };
        result.inputs.push(attr);
    }
    for j in 0..plan.n_inputs() {
        if rule.no_grad.contains(j) {
            continue;
        }
        let term = plan.input(j);
        // x_j as the grad op gives it, if it does.
        let given_as = sig
            .position(GradTensor::Input(j as u8), plan.n_inputs())
            .map(|k| (TensorRef::input(k), &inputs[k]));
        let shape = match given_as {
            Some((t, _)) if !present(t) => {
                // An absent input has no grad: Paddle's empty dist attr.
                result.outputs.push(DistAttr::new(absent_mapping(term)));
                continue;
            }
            Some((_, spec)) => Some(spec.shape),
            None => None,
        };
        // What computing x_j's grad reads: the other read operands. Axes
        // they carry that x_j lacks are summed over.
        // An addend's grad reads the output grads only (`db = sum dy`);
        // a product operand's grad reads no addend.
        let addend = plan.is_addend(j);
        let reads_for_j = |t: TensorRef, input: Option<usize>| match input {
            Some(i) => i != j && !addend && !plan.is_addend(i) && read(input),
            None => !addend || t.role == Role::Output,
        };
        let mut others = AxisSet::EMPTY;
        for (t, term, input, spec) in operands() {
            if reads_for_j(t, input) {
                others = others.union(cx.carried_axes(term, spec.shape));
            }
        }
        let (rank, own) = match shape {
            Some(shape) => (shape.len(), cx.carried_axes(term, shape)),
            // Not given: its rank and axes from its term.
            None => (
                term.len as usize + if term.ellipsis.is_some() { width } else { 0 },
                cx.term_axes(term),
            ),
        };
        let mapping = cx.project(term, rank, shape, derived);
        let mut partial = Partial::NONE;
        for a in others.minus(own).iter() {
            let dims = given[a as usize].mesh_set();
            if !dims.is_empty() {
                trace.partial(j, cx.axis_name(a), dims, ReduceType::Sum);
                for m in dims.iter() {
                    partial.set(m, ReduceType::Sum);
                }
            }
        }
        partial.remove(mapping.mesh_set());
        // The grad layout rule: a grad op runs on the forward inputs
        // resharded to its requirements and gives each input grad the local
        // shape of its input's block, so x_j is required laid out as its
        // grad (even where the grad reads x_j only for its shape).
        if let Some((t, _)) = given_as {
            let required = &mut result.inputs[t.index];
            required.dims_mapping = mapping.clone();
            // A partial status it keeps is not over a mesh dim that now
            // shards it.
            required.partial.remove(mapping.mesh_set());
        }
        result.outputs.push(DistAttr {
            dims_mapping: mapping,
            partial,
        });
    }
    Ok(())
}

/// Whether the rule moves minor factors' shardings onto majors: the
/// policy, and a notation with a compound (the common case has none, and
/// skips the work).
fn absorbs(rule: &EinsumRule<'_>) -> bool {
    rule.policy.compounds == Compounds::Absorb && !rule.plan.compound_minor.is_empty()
}

/// `specs` with the attrs of `replaced` where it has one.
fn with_attrs<'s>(specs: &[Spec<'s>], replaced: &'s [Option<DistAttr>]) -> SmallVec<[Spec<'s>; 8]> {
    specs
        .iter()
        .enumerate()
        .map(|(k, s)| match replaced.get(k) {
            Some(Some(a)) => Spec::new(s.shape, a),
            _ => *s,
        })
        .collect()
}

/// The answer for an absent tensor: its term's explicit dims, replicated
/// (the ellipsis stands for none; see `optional.rs`).
fn absent_mapping(term: Term) -> DimsMapping {
    DimsMapping::replicated(term.len as usize)
}
