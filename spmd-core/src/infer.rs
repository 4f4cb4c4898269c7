//! Forward and backward inference over any plan (docs/semantics.md §4).
//!
//! One call: check the tensors against the notation, learn every axis's extent,
//! merge the given side's shardings per axis, settle conflicts, apply the
//! divisibility policy, then project the axis map onto every tensor and mark
//! outputs partial over the mesh dims of the axes they lack. All state is inline
//! (`SmallVec`s sized for common ranks): no allocation, no string work.

use smallvec::SmallVec;
use spmd_notation::{AxisId, AxisSet, Dim, Plan, Term};

use crate::attr::{DimsMapping, DistAttr, Partial, ReduceType, Sharding, Spec};
use crate::error::{AxisName, RankNeed, Role, SpmdError, TensorRef};
use crate::merge::{AxisClash, AxisMap, MeshDimClash, UNSHARDED};
use crate::mesh::{MAX_MESH_RANK, Mesh, MeshSet};
use crate::optional::{Absent, Presence};
use crate::policy::{
    BackwardPartial, Compounds, Conflicts, Divisibility, MissingAxis, PartialInputs,
    UnshardedClaims,
};
use crate::rule::{EinsumRule, RuleResult};
use crate::signature::GradTensor;
use crate::trace::Trace;

const UNKNOWN: usize = usize::MAX;
// One id (63) is the claimant of dims that never carry a sharding.
const MAX_AXES: usize = 63;

pub(crate) fn forward<T: Trace + ?Sized>(
    rule: &EinsumRule<'_>,
    mesh: &Mesh,
    inputs: &[Spec<'_>],
    absent: impl Presence,
    trace: &mut T,
    result: &mut RuleResult,
) -> Result<(), SpmdError> {
    let plan = &rule.plan;
    if trace.enabled() {
        trace.plan(plan);
    }
    arity(rule, TensorRef::input(0), plan.n_inputs(), inputs.len())?;
    check_absent(rule, absent.mask())?;
    // Absent optional inputs take part in nothing; `present` skips them.
    let present = |i: usize| !absent.input(i);
    // What the merge reads: present inputs that do not follow the others.
    let merged = |i: usize| present(i) && !has_bit(rule.follows, i);
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
            Absent::new(absent.mask().inputs | rule.follows, 0),
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
        if has_bit(rule.not_partial, o) {
            result.outputs.push(DistAttr::new(mapping));
            continue;
        }
        for a in input_axes.minus(cx.term_axes(term)).iter() {
            let dims = given[a as usize].mesh_set();
            if dims.is_empty() {
                continue;
            }
            let r = rule.reduce_of(a);
            trace.partial(o, cx.axis_name(a), dims, r);
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

/// Addends (`+n`) are added once to the true result: where the output is a
/// `Sum` over mesh dim `d`, each addend is required partial over `d` too
/// (one rank holds it, the others zeros: a local conversion from
/// replicated); a replicated addend commutes with `Avg`, `Max` and `Min`.
/// With `Prod`, `Any` or `All` no layout of the addend is right, so the call
/// is an error (the macro already refuses such a declaration).
fn addend_partials(
    rule: &EinsumRule<'_>,
    result: &mut RuleResult,
    present: impl Fn(usize) -> bool,
) -> Result<(), SpmdError> {
    let plan = &rule.plan;
    if !plan.has_addends() {
        return Ok(());
    }
    // The parser allows addends only with one output.
    let Some(out) = result.outputs.first().map(|o| o.partial) else {
        return Ok(());
    };
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
    for (i, attr) in result.inputs.iter_mut().enumerate() {
        if plan.is_addend(i) && present(i) {
            let mut p = sums;
            p.remove(attr.dims_mapping.mesh_set());
            attr.partial = p;
        }
    }
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
    }
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
    if rule.merged_first == 0 && rule.follows_outputs == 0 {
        for (o, spec) in present_outputs() {
            cx.merge(TensorRef::output(o), plan.output(o), spec, trace)?;
        }
    } else {
        // The outputs declared `merged_first`, then the others, each in
        // order; outputs that follow take no part.
        let first = |o: &(usize, &Spec<'_>)| has_bit(rule.merged_first, o.0);
        let ordered = present_outputs()
            .filter(first)
            .chain(present_outputs().filter(|o| !first(o)))
            .filter(|o| !has_bit(rule.follows_outputs, o.0));
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
        if has_bit(rule.not_partial, o) {
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
    arity(
        rule,
        TensorRef::input(0),
        sig.n_tensors(plan.n_inputs()),
        inputs.len(),
    )?;
    arity(
        rule,
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
    let read = |input: Option<usize>| input.is_none_or(|i| !has_bit(rule.grad_ignores, i));
    // Inputs that follow the others are read but do not merge.
    let merges =
        |input: Option<usize>| read(input) && input.is_none_or(|i| !has_bit(rule.follows, i));
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
    for (t, term, input, spec) in every() {
        let mapping = if !present(t) {
            absent_mapping(term)
        } else if !read(input) {
            spec.attr.dims_mapping.clone()
        } else {
            cx.project(term, spec.shape.len(), Some(spec.shape), given)
        };
        result.inputs.push(DistAttr::new(mapping));
    }
    for j in 0..plan.n_inputs() {
        if has_bit(rule.no_grad, j) {
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
            result.inputs[t.index].dims_mapping = mapping.clone();
        }
        result.outputs.push(DistAttr {
            dims_mapping: mapping,
            partial,
        });
    }
    Ok(())
}

/// Whether bit `i` of a per-tensor mask is set (tensors past 64 have none).
#[inline(always)]
fn has_bit(mask: u64, i: usize) -> bool {
    i < 64 && mask & (1u64 << i) != 0
}

/// Bit `i` of a tensor mask; tensors past the 64th have none (masks name
/// at most 64).
fn bit(i: usize) -> u64 {
    u32::try_from(i)
        .ok()
        .and_then(|i| 1u64.checked_shl(i))
        .unwrap_or(0)
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

/// Fails on an absent tensor the rule does not declare optional.
fn check_absent(rule: &EinsumRule<'_>, absent: Absent) -> Result<(), SpmdError> {
    let stray = Absent::new(
        absent.inputs & !rule.optional.inputs,
        absent.outputs & !rule.optional.outputs,
    );
    if stray.is_none() {
        return Ok(());
    }
    let tensor = if stray.inputs != 0 {
        TensorRef::input(stray.inputs.trailing_zeros() as usize)
    } else {
        TensorRef::output(stray.outputs.trailing_zeros() as usize)
    };
    Err(SpmdError::AbsentTensor {
        op: rule.name,
        tensor,
    })
}

/// The answer for an absent tensor: its term's explicit dims, replicated
/// (the ellipsis stands for none; see `optional.rs`).
fn absent_mapping(term: Term) -> DimsMapping {
    DimsMapping::replicated(term.len as usize)
}

fn arity(
    rule: &EinsumRule<'_>,
    t: TensorRef,
    expected: usize,
    found: usize,
) -> Result<(), SpmdError> {
    if expected == found {
        Ok(())
    } else {
        Err(SpmdError::Arity {
            op: rule.name,
            role: t.role,
            expected,
            found,
        })
    }
}

/// Checks a given tensor's dist attr against its shape and the mesh.
fn validate(op: &'static str, t: TensorRef, spec: &Spec<'_>, mesh: &Mesh) -> Result<(), SpmdError> {
    let mapping = &spec.attr.dims_mapping;
    if mapping.rank() != spec.shape.len() {
        return Err(SpmdError::MappingLength {
            op,
            tensor: t,
            rank: spec.shape.len(),
            len: mapping.rank(),
        });
    }
    let mut used = [usize::MAX; MAX_MESH_RANK];
    for (dim, s) in mapping.as_slice().iter().enumerate() {
        for &m in s.as_slice() {
            if m as usize >= mesh.rank() {
                return Err(SpmdError::MeshDimOutOfRange {
                    op,
                    tensor: t,
                    dim,
                    mesh_dim: m,
                    mesh_rank: mesh.rank(),
                });
            }
            if used[m as usize] != usize::MAX {
                return Err(SpmdError::MeshDimReused {
                    op,
                    tensor: t,
                    mesh_dim: m,
                    first: used[m as usize],
                    second: dim,
                });
            }
            used[m as usize] = dim;
        }
    }
    for (m, _) in spec.attr.partial.iter() {
        if m as usize >= mesh.rank() {
            return Err(SpmdError::PartialOutOfRange {
                op,
                tensor: t,
                mesh_dim: m,
                mesh_rank: mesh.rank(),
            });
        }
        if used[m as usize] != usize::MAX {
            return Err(SpmdError::PartialAndSharded {
                op,
                tensor: t,
                mesh_dim: m,
                dim: used[m as usize],
            });
        }
    }
    Ok(())
}

/// How many dims the term's ellipsis stands for in a tensor of this rank.
fn ellipsis_len(
    rule: &EinsumRule<'_>,
    t: TensorRef,
    term: Term,
    rank: usize,
) -> Result<usize, SpmdError> {
    let n = term.len as usize;
    match term.ellipsis {
        Some(_) if rank >= n => Ok(rank - n),
        Some(_) => Err(rank_error(rule, t, term, rank, RankNeed::AtLeast(n))),
        None if rank == n => Ok(0),
        None => Err(rank_error(rule, t, term, rank, RankNeed::Exactly(n))),
    }
}

fn rank_error(
    rule: &EinsumRule<'_>,
    t: TensorRef,
    term: Term,
    rank: usize,
    need: RankNeed,
) -> SpmdError {
    SpmdError::Rank {
        op: rule.name,
        tensor: t,
        rank,
        term: rule.plan.term_text(term),
        need,
    }
}

/// Per-call state: the axis table (labels, then the dims an ellipsis stands
/// for, right-aligned), each axis's extent and the merged axis map.
struct Cx<'r, 'a> {
    rule: &'r EinsumRule<'a>,
    mesh: &'r Mesh,
    n_labels: usize,
    width: usize,
    /// Indexed by axis id; `UNKNOWN` until a shape gives it.
    extent: [usize; 64],
    n_axes: usize,
    never: AxisSet,
    map: AxisMap,
}

impl<'r, 'a> Cx<'r, 'a> {
    fn new(rule: &'r EinsumRule<'a>, mesh: &'r Mesh, width: usize) -> Result<Self, SpmdError> {
        let plan = &rule.plan;
        let n_labels = plan.n_axes();
        let n_axes = n_labels + width;
        if n_axes > MAX_AXES {
            return Err(SpmdError::TooManyAxes {
                op: rule.name,
                count: n_axes,
            });
        }
        Ok(Cx {
            rule,
            mesh,
            n_labels,
            width,
            extent: [UNKNOWN; 64],
            n_axes,
            never: rule
                .never_sharded
                .union(plan.diagonal)
                .union(plan.compound_minor),
            map: AxisMap::new(),
        })
    }

    fn axis_name(&self, a: u8) -> AxisName {
        axis_name(&self.rule.plan, self.n_labels, a)
    }

    /// The ellipsis axes as a set.
    fn ellipsis_axes(&self) -> AxisSet {
        let all = if self.width == 0 {
            0
        } else {
            (u64::MAX >> (64 - self.width)) << self.n_labels
        };
        AxisSet(all)
    }

    fn term_axes(&self, term: Term) -> AxisSet {
        let axes = self.rule.plan.axes_of(term);
        if term.ellipsis.is_some() {
            axes.union(self.ellipsis_axes())
        } else {
            axes
        }
    }

    /// The axes a tensor really holds: its plain and compound dims, not its
    /// `1` dims nor its size-1 dims broadcast against a larger extent.
    fn carried_axes(&self, term: Term, shape: &[usize]) -> AxisSet {
        let mut set = AxisSet::EMPTY;
        for (dim, &size) in shape.iter().enumerate() {
            match self.slot(term, shape.len(), dim) {
                Dim::Axis(a) if !self.is_broadcast(a, size) => set = set.with(a),
                Dim::Compound { start, len } => {
                    for &a in self.rule.plan.compound(start, len) {
                        set = set.with(a);
                    }
                }
                _ => {}
            }
        }
        set
    }

    /// A size-1 dim that holds no part of its axis: broadcast against a
    /// larger extent, or any size-1 dim `...` stands for (Paddle's elementwise
    /// rule labels those `1`; splitting a size-1 dim splits nothing).
    #[inline]
    fn is_broadcast(&self, a: u8, size: usize) -> bool {
        let extent = self.extent[a as usize];
        size == 1 && ((a as usize) >= self.n_labels || (extent > 1 && extent != UNKNOWN))
    }

    /// The batch axes of role priority, from the notation alone: the dims `...`
    /// stands for, and labels every input and some output have.
    fn batch_axes(&self) -> AxisSet {
        let plan = &self.rule.plan;
        let in_every = (0..plan.n_inputs())
            .map(|i| plan.axes_of(plan.input(i)))
            .fold(AxisSet(u64::MAX), AxisSet::intersect);
        in_every
            .intersect(plan.output_axes)
            .union(self.ellipsis_axes())
    }

    fn input_axes(&self) -> AxisSet {
        let plan = &self.rule.plan;
        if plan.inputs_have_ellipsis() {
            plan.input_axes.union(self.ellipsis_axes())
        } else {
            plan.input_axes
        }
    }

    /// What tensor dim `dim` of a tensor of rank `rank` is: a plain axis (labels
    /// and ellipsis dims alike), `1`, or a compound.
    #[inline(always)]
    fn slot(&self, term: Term, rank: usize, dim: usize) -> Dim {
        let dims = self.rule.plan.dims_of(term);
        match term.ellipsis {
            None => dims[dim],
            Some(e) => {
                let e = e as usize;
                let ell = rank - term.len as usize;
                if dim < e {
                    dims[dim]
                } else if dim < e + ell {
                    Dim::Axis((self.n_labels + self.width - ell + (dim - e)) as u8)
                } else {
                    dims[dim - ell]
                }
            }
        }
    }

    /// Whether [`Cx::absorbed`] may move something: some compound's major
    /// factor and first minor factor are both sharded dims of `spec` (the
    /// cheap test that keeps the common case from building anything).
    fn may_absorb(&self, term: Term, spec: &Spec<'_>) -> bool {
        let plan = &self.rule.plan;
        let rank = spec.shape.len();
        let sharded = |a: AxisId| {
            (0..rank).any(|d| {
                self.slot(term, rank, d) == Dim::Axis(a)
                    && !spec.attr.dims_mapping[d].is_replicated()
            })
        };
        plan.dims.iter().any(|dim| match *dim {
            Dim::Compound { start, len } => {
                let factors = plan.compound(start, len);
                factors.len() > 1 && sharded(factors[0]) && sharded(factors[1])
            }
            _ => false,
        })
    }

    /// [`Compounds::Absorb`]: `spec`'s attr with, for each compound of the
    /// notation whose factors `term` holds as dims of their own, the minor
    /// factors' mesh dims appended to the major's sharding (in order, while
    /// the major's extent stays divisible; an unsharded minor stops it) and
    /// the minors replicated. `None` when nothing moves.
    fn absorbed(&self, term: Term, spec: &Spec<'_>) -> Option<DistAttr> {
        let plan = &self.rule.plan;
        let rank = spec.shape.len();
        let dim_of = |a: AxisId| (0..rank).find(|&d| self.slot(term, rank, d) == Dim::Axis(a));
        let mut mapping: Option<SmallVec<[Sharding; 8]>> = None;
        for dim in plan.dims {
            let Dim::Compound { start, len } = *dim else {
                continue;
            };
            let factors = plan.compound(start, len);
            let Some(major) = factors.first().and_then(|&a| dim_of(a)) else {
                continue;
            };
            let current = |m: &Option<SmallVec<[Sharding; 8]>>, d: usize| {
                m.as_ref().map_or(spec.attr.dims_mapping[d], |m| m[d])
            };
            let mut s = current(&mapping, major);
            if s.is_replicated() {
                continue;
            }
            for &f in &factors[1..] {
                let Some(fd) = dim_of(f) else { break };
                let minor = current(&mapping, fd);
                if minor.is_replicated()
                    || s.as_slice().len() + minor.as_slice().len() > MAX_MESH_RANK
                {
                    break;
                }
                let mut joined = s;
                for &m in minor.as_slice() {
                    joined.push(m);
                }
                let product: usize = joined
                    .as_slice()
                    .iter()
                    .map(|&m| self.mesh.dim(m))
                    .product();
                if !spec.shape[major].is_multiple_of(product) {
                    break;
                }
                s = joined;
                let m = mapping.get_or_insert_with(|| {
                    spec.attr.dims_mapping.as_slice().iter().copied().collect()
                });
                m[major] = s;
                m[fd] = Sharding::REPLICATED;
            }
        }
        mapping.map(|m| DistAttr {
            dims_mapping: DimsMapping::from_shardings(&m),
            partial: spec.attr.partial,
        })
    }

    /// Records the extent of every plain axis. An extent of 1 against a larger
    /// one is broadcasting; two different larger extents are an error.
    fn learn_extents(
        &mut self,
        t: TensorRef,
        term: Term,
        shape: &[usize],
    ) -> Result<(), SpmdError> {
        for (dim, &size) in shape.iter().enumerate() {
            if let Dim::Axis(a) = self.slot(term, shape.len(), dim) {
                let known = self.extent[a as usize];
                if known == UNKNOWN || known == 1 {
                    self.extent[a as usize] = size;
                } else if size != known && size != 1 {
                    return Err(SpmdError::ShapeMismatch {
                        op: self.rule.name,
                        axis: self.axis_name(a),
                        tensor: t,
                        dim,
                        expected: known,
                        found: size,
                    });
                }
            }
        }
        Ok(())
    }

    /// Compound dims: a single factor of unknown extent is the quotient of the
    /// dim's size by the others; when all factors are known, their product must
    /// be the dim's size.
    #[inline]
    fn learn_compound_extents(
        &mut self,
        t: TensorRef,
        term: Term,
        shape: &[usize],
    ) -> Result<(), SpmdError> {
        let plan = self.rule.plan;
        if !plan.has_compound() {
            return Ok(());
        }
        for (dim, &size) in shape.iter().enumerate() {
            let Dim::Compound { start, len } = self.slot(term, shape.len(), dim) else {
                continue;
            };
            let factors = plan.compound(start, len);
            let mut known = 1usize;
            let mut unknown = None;
            let mut n_unknown = 0;
            for &f in factors {
                match self.extent[f as usize] {
                    UNKNOWN => {
                        unknown = Some(f);
                        n_unknown += 1;
                    }
                    e => known = known.saturating_mul(e),
                }
            }
            match (n_unknown, unknown) {
                (0, _) if known != size => {
                    return Err(SpmdError::ShapeMismatch {
                        op: self.rule.name,
                        axis: self.axis_name(factors[0]),
                        tensor: t,
                        dim,
                        expected: known,
                        found: size,
                    });
                }
                (1, Some(f)) if known != 0 && size % known == 0 => {
                    self.extent[f as usize] = size / known;
                }
                // The unknown factors cannot make up the rest.
                (1.., _) if known != 0 && size % known != 0 => {
                    let axes: alloc::vec::Vec<alloc::string::String> = factors
                        .iter()
                        .filter(|&&f| self.extent[f as usize] != UNKNOWN)
                        .map(|&f| alloc::format!("{}", self.axis_name(f)))
                        .collect();
                    return Err(SpmdError::CompoundExtent {
                        op: self.rule.name,
                        tensor: t,
                        dim,
                        axes: axes.join(" "),
                        known,
                        found: size,
                    });
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The axis a given tensor dim's sharding goes to, or `None` when that dim
    /// never carries one (`1`, a broadcast size-1 dim, a never-sharded axis).
    #[inline(always)]
    fn carrier(&self, slot: Dim, size: Option<usize>) -> Option<u8> {
        let a = match slot {
            Dim::Axis(a) => {
                if size.is_some_and(|size| self.is_broadcast(a, size)) {
                    return None;
                }
                a
            }
            Dim::One => return None,
            Dim::Compound { start, .. } => self.rule.plan.compound_axes[start as usize],
        };
        (!self.never.contains(a)).then_some(a)
    }

    fn merge<T: Trace + ?Sized>(
        &mut self,
        t: TensorRef,
        term: Term,
        spec: &Spec<'_>,
        trace: &mut T,
    ) -> Result<(), SpmdError> {
        let rank = spec.shape.len();
        for dim in 0..rank {
            let given = spec.attr.dims_mapping[dim];
            if given.is_replicated() {
                continue;
            }
            let Some(a) = self.carrier(self.slot(term, rank, dim), Some(spec.shape[dim])) else {
                // Replicated in the end, but its claims count (docs/semantics.md §4
                // steps 2-3), unless the policy unshards such dims first.
                if self.rule.policy.unsharded_claims == UnshardedClaims::Count {
                    self.map.claim_unsharded(given);
                }
                trace.unsharded(t, dim, given);
                continue;
            };
            // A compound's major factor must divide its extent: the mesh
            // dims it could not keep are dropped before they claim, so they
            // stay free for the other axes (and, like a never-sharded dim's,
            // claim only under `UnshardedClaims::Count`).
            let given = if self.rule.plan.compound_major.contains(a) {
                let fitted = self.fit_one(a, given, trace);
                if fitted != given {
                    if self.rule.policy.unsharded_claims == UnshardedClaims::Count {
                        let mut dropped = Sharding::REPLICATED;
                        for &m in &given.as_slice()[fitted.len()..] {
                            dropped.push(m);
                        }
                        self.map.claim_unsharded(dropped);
                    }
                    if fitted.is_replicated() {
                        continue;
                    }
                }
                fitted
            } else {
                given
            };
            match self.map.merge(a, given) {
                Ok(now) => trace.merged(self.axis_name(a), t, dim, given, now),
                Err(AxisClash { existing }) => {
                    return Err(SpmdError::AxisConflict {
                        op: self.rule.name,
                        axis: self.axis_name(a),
                        tensor: t,
                        dim,
                        existing,
                        incoming: given,
                    });
                }
            }
        }
        Ok(())
    }

    fn resolve<T: Trace + ?Sized>(&mut self, trace: &mut T) -> Result<(), SpmdError> {
        let (plan, n_labels) = (self.rule.plan, self.n_labels);
        let name = move |a: u8| axis_name(&plan, n_labels, a);
        self.map
            .resolve(
                self.mesh.rank(),
                self.rule.policy.conflicts,
                |m, kept, lost| trace.conflict(m, name(kept), name(lost)),
            )
            .map_err(
                |MeshDimClash {
                     mesh_dim,
                     first,
                     second,
                 }| SpmdError::MeshDimConflict {
                    op: self.rule.name,
                    mesh_dim,
                    first: name(first),
                    second: name(second),
                },
            )
    }

    /// Applies the divisibility policy: the axis map becomes the given side's;
    /// the derived side's is returned when it differs. A compound's major factor must always divide (else
    /// the reshape could not carry its sharding), whatever the policy.
    fn fit<T: Trace + ?Sized>(&mut self, trace: &mut T) -> Option<[Sharding; 64]> {
        let policy = self.rule.policy.divisibility;
        // A compound's major factor must divide (else the reshape could not
        // carry it), and so must a contracted axis averaged over: devices
        // holding blocks of different sizes cannot average their averages.
        let mut always = self.rule.plan.compound_major;
        if self.rule.reduce == ReduceType::Avg {
            always = always.union(self.rule.plan.contracted());
        }
        for &(a, r) in self.rule.reduce_overrides {
            if r == ReduceType::Avg {
                always = always.with(a);
            }
        }
        // Role priority settles divisibility by role in every direction, as
        // its forward merge does: batch axes must divide, free axes need not.
        if self.rule.policy.conflicts == Conflicts::RolePriority {
            always = always.union(self.batch_axes());
        }
        // A contracted axis reduced by a max or a min must leave no device
        // an empty block: its kernel has no value to give for one (Paddle's
        // errors), so such an axis keeps only the mesh dims it outnumbers.
        let contracted = self.rule.plan.contracted();
        let nonempty = AxisSet(
            contracted
                .iter()
                .filter(|&a| matches!(self.rule.reduce_of(a), ReduceType::Max | ReduceType::Min))
                .fold(0u64, |m, a| m | 1 << a),
        );
        if policy == Divisibility::Uneven && always.is_empty() && nonempty.is_empty() {
            return None;
        }
        // The given side is edited in place; a derived table exists only
        // when the derived side differs (DropDerived dropped something).
        let mut derived: Option<[Sharding; 64]> = None;
        for a in 0..self.n_axes {
            let mut s = self.map.sharding[a];
            if nonempty.contains(a as u8) {
                let trimmed = self.trim_empty(a as u8, s, trace);
                if trimmed != s {
                    self.map.sharding[a] = trimmed;
                    if let Some(d) = derived.as_mut() {
                        d[a] = trimmed;
                    }
                    s = trimmed;
                }
            }
            let always = always.contains(a as u8);
            if s.is_replicated() || (!always && policy == Divisibility::Uneven) {
                continue;
            }
            let fitted = self.fit_one(a as u8, s, trace);
            if fitted == s {
                continue;
            }
            if always || policy == Divisibility::Drop {
                self.map.sharding[a] = fitted;
                if let Some(d) = derived.as_mut() {
                    d[a] = fitted;
                }
            } else {
                derived.get_or_insert(self.map.sharding)[a] = fitted;
            }
        }
        derived
    }

    /// Partial Stage-II ([`BackwardPartial::Explain`]): for each mesh dim `d`
    /// a given output is partial over, the first contracted axis (in
    /// notation order) that reduces like the partial, may be sharded, is
    /// divided evenly by its mesh dims and `d`, while no axis holds `d` yet,
    /// takes `d` on the input side. Evenly, so that no device's block is
    /// empty or smaller than another's (a `Max` over an empty block, an
    /// `Avg` of unequal blocks' averages). Where no axis can, a rule that
    /// keeps partial inputs in forward explains a `Sum` (aligned: `Sum` or
    /// `Avg`) by partial inputs: that partial is returned. The rest is left
    /// unexplained: the output comes back not partial over it.
    fn explain_partials<T: Trace + ?Sized>(
        &mut self,
        (input_shapes, input_present): (&[&[usize]], impl Fn(usize) -> bool),
        (outputs, present): (&[Spec<'_>], impl Fn(usize) -> bool),
        derived: &mut Option<[Sharding; 64]>,
        trace: &mut T,
    ) -> Partial {
        if !outputs
            .iter()
            .enumerate()
            .any(|(o, s)| present(o) && s.attr.partial.is_partial())
        {
            return Partial::NONE;
        }
        let plan = &self.rule.plan;
        let mut out_axes = AxisSet::EMPTY;
        for o in 0..plan.n_outputs() {
            out_axes = out_axes.union(self.term_axes(plan.output(o)));
        }
        // Contracted axes some present input really holds (not only as a
        // broadcast size-1 dim).
        let mut carried = AxisSet::EMPTY;
        for (i, shape) in input_shapes.iter().enumerate() {
            if input_present(i) {
                carried = carried.union(self.carried_axes(plan.input(i), shape));
            }
        }
        let contracted = carried.minus(out_axes);
        let table = derived.as_ref().unwrap_or(&self.map.sharding);
        let mut taken = table[..self.n_axes]
            .iter()
            .chain(&self.map.sharding[..self.n_axes])
            .fold(MeshSet::EMPTY, |m, s| m.union(s.mesh_set()));
        let linear = self.rule.policy.partial_inputs == PartialInputs::Linear;
        // Aligned operands keep a partial in forward only when some operand
        // has elements (see `merge_aligned`).
        let aligned = self.rule.policy.conflicts == Conflicts::Align
            && input_shapes
                .iter()
                .enumerate()
                .any(|(i, s)| input_present(i) && s.first().is_some_and(|&d| d != 0));
        let mut by_inputs = Partial::NONE;
        // An output that is no sum (`not_partial`) explains nothing.
        let explainable = |o: usize| present(o) && !has_bit(self.rule.not_partial, o);
        for (o, spec) in outputs.iter().enumerate().filter(|(o, _)| explainable(*o)) {
            for (d, r) in spec.attr.partial.iter() {
                if taken.contains(d) {
                    continue;
                }
                let axis = contracted.iter().find(|&a| {
                    let s = self.map.sharding[a as usize];
                    self.rule.reduce_of(a) == r
                        && !self.never.contains(a)
                        && self.divides(a, s.as_slice().iter().copied().chain([d]))
                });
                if let Some(a) = axis {
                    let mut s = self.map.sharding[a as usize];
                    s.push(d);
                    self.map.sharding[a as usize] = s;
                    if let Some(t) = derived.as_mut() {
                        t[a as usize] = s;
                    }
                    trace.explained(o, d, Some(self.axis_name(a)));
                } else if (linear && r == ReduceType::Sum)
                    || (aligned && matches!(r, ReduceType::Sum | ReduceType::Avg))
                {
                    by_inputs.set(d, r);
                    trace.explained(o, d, None);
                } else {
                    continue;
                }
                taken = taken.union(MeshSet::single(d));
            }
        }
        by_inputs
    }

    /// Whether axis `a`'s extent is known and a multiple of the product of
    /// the sizes of `dims`.
    fn divides(&self, a: u8, dims: impl Iterator<Item = crate::mesh::MeshDim>) -> bool {
        let extent = self.extent[a as usize];
        let product: usize = dims.map(|m| self.mesh.dim(m)).product();
        extent != UNKNOWN && extent > 0 && extent.is_multiple_of(product)
    }

    /// The first dim of input `spec` that carries axis `a`, with its sharding.
    fn given_on(&self, term: Term, spec: &Spec<'_>, a: u8) -> Option<(usize, Sharding)> {
        let rank = spec.shape.len();
        (0..rank)
            .find(|&dim| self.carrier(self.slot(term, rank, dim), Some(spec.shape[dim])) == Some(a))
            .map(|dim| (dim, spec.attr.dims_mapping[dim]))
    }

    /// [`Conflicts::RolePriority`]: fills the axis map role by role (batch,
    /// free, contracted); see the policy's documentation. Each mesh dim has
    /// one owner: an axis that wants a mesh dim another axis owns loses it.
    fn merge_by_role<T: Trace + ?Sized>(
        &mut self,
        inputs: &[Spec<'_>],
        absent: impl Presence,
        trace: &mut T,
    ) {
        let plan = self.rule.plan;
        let n_in = inputs.len().min(8);
        let mut carried = [AxisSet::EMPTY; 8];
        // `absent` here also names the inputs that follow the others: they
        // carry nothing into the merge.
        for (i, spec) in inputs.iter().enumerate().take(n_in) {
            if absent.input(i) {
                continue;
            }
            carried[i] = self.carried_axes(plan.input(i), spec.shape);
            if trace.enabled() {
                self.trace_unsharded(TensorRef::input(i), plan.input(i), spec, trace);
            }
        }
        // An absent input carries nothing and does not make an axis less
        // than everywhere.
        let everywhere = carried[..n_in]
            .iter()
            .enumerate()
            .filter(|(i, _)| !absent.input(*i))
            .fold(AxisSet(u64::MAX), |acc, (_, &c)| acc.intersect(c));
        let mut out_axes = AxisSet::EMPTY;
        for o in 0..plan.n_outputs() {
            out_axes = out_axes.union(self.term_axes(plan.output(o)));
        }
        let axes = carried[..n_in]
            .iter()
            .fold(AxisSet::EMPTY, |m, &c| m.union(c))
            .minus(self.never);
        let batch = axes
            .intersect(out_axes)
            .intersect(everywhere.union(self.ellipsis_axes()));
        let free = axes.intersect(out_axes).minus(batch);
        let contracted = axes.minus(out_axes);
        let mut owner = [u8::MAX; MAX_MESH_RANK];

        // The axis each dim of each input carries, resolved once: the passes
        // below ask "which dim of input i carries axis a" many times (the
        // batch order's sort key asks it per comparison).
        let mut carriers = [[u8::MAX; 8]; 8];
        for (i, spec) in inputs.iter().enumerate().take(n_in) {
            let rank = spec.shape.len();
            if absent.input(i) || rank > 8 {
                continue;
            }
            for (dim, c) in carriers[i].iter_mut().enumerate().take(rank) {
                let slot = self.slot(plan.input(i), rank, dim);
                *c = self.carrier(slot, Some(spec.shape[dim])).unwrap_or(u8::MAX);
            }
        }
        let given_on = |cx: &Self, i: usize, a: u8| -> Option<(usize, Sharding)> {
            let spec = &inputs[i];
            if spec.shape.len() > 8 {
                return cx.given_on(plan.input(i), spec, a);
            }
            let dim = carriers[i][..spec.shape.len()]
                .iter()
                .position(|&c| c == a)?;
            Some((dim, spec.attr.dims_mapping[dim]))
        };

        // Gives axis `a` the mesh dims input `i` shards it with that no axis
        // owns yet, in order; reports each merge and each loss.
        let take =
            |cx: &mut Self, owner: &mut [u8; MAX_MESH_RANK], a: u8, i: usize, trace: &mut T| {
                let Some((dim, given)) = given_on(cx, i, a) else {
                    return;
                };
                let before = cx.map.sharding[a as usize];
                let mut s = before;
                for &m in given.as_slice() {
                    match owner[m as usize] {
                        u8::MAX => {
                            owner[m as usize] = a;
                            s.push(m);
                        }
                        o if o == a => {}
                        o => trace.conflict(m, cx.axis_name(o), cx.axis_name(a)),
                    }
                }
                cx.map.sharding[a as usize] = s;
                // Reported when the axis gained mesh dims; what it could not
                // take was reported as a conflict above.
                if s != before {
                    trace.merged(cx.axis_name(a), TensorRef::input(i), dim, given, s);
                }
            };

        // Batch: the input whose batch dims carry the most shards first (tie:
        // more batch dims, then the earlier input), the others co-shard.
        let shards = |i: usize| -> (usize, u32) {
            let n = batch
                .iter()
                .filter_map(|a| given_on(self, i, a))
                .map(|(_, s)| s.len())
                .sum();
            (n, carried[i].intersect(batch).len())
        };
        let mut order: SmallVec<[usize; 8]> = (0..n_in).filter(|&i| !absent.input(i)).collect();
        order.sort_by_key(|&i| core::cmp::Reverse(shards(i)));
        for &i in &order {
            for a in batch.iter() {
                take(self, &mut owner, a, i, trace);
            }
        }
        for a in batch.iter() {
            let s = self.map.sharding[a as usize];
            let fitted = self.fit_one(a, s, trace);
            for m in s.mesh_set().minus(fitted.mesh_set()).iter() {
                owner[m as usize] = u8::MAX;
            }
            self.map.sharding[a as usize] = fitted;
        }

        // Free: each keeps the mesh dims no batch axis owns; a mesh dim two
        // free axes want goes to the larger extent (the earlier axis on a tie).
        let mut by_extent: SmallVec<[u8; 8]> = free.iter().collect();
        by_extent.sort_by_key(|&a| core::cmp::Reverse(self.extent[a as usize]));
        for &a in &by_extent {
            if let Some(i) = (0..n_in).find(|&i| carried[i].contains(a)) {
                take(self, &mut owner, a, i, trace);
            }
        }

        // Contracted: the union of the inputs' shardings (most shards first),
        // minus the mesh dims already owned, trimmed until divisible.
        for a in contracted.iter() {
            let mut order: SmallVec<[(usize, usize); 8]> = (0..n_in)
                .filter(|&i| carried[i].contains(a))
                .map(|i| (i, given_on(self, i, a).map_or(0, |(_, s)| s.len())))
                .collect();
            order.sort_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(&y.0)));
            for (i, _) in order {
                take(self, &mut owner, a, i, trace);
            }
            let s = self.map.sharding[a as usize];
            let fitted = self.fit_one(a, s, trace);
            for m in s.mesh_set().minus(fitted.mesh_set()).iter() {
                owner[m as usize] = u8::MAX;
            }
            self.map.sharding[a as usize] = fitted;
        }
    }

    /// [`Conflicts::Align`] (see the policy's documentation): fills the axis
    /// map from the operands, one mesh dim at a time, and returns the partial
    /// status they all share.
    fn merge_aligned(&mut self, ops: &[(Term, Spec<'_>)]) -> Partial {
        // Where operand `i` puts mesh dim `m`: on an axis, on a tensor dim
        // that carries none (compared by position), partial, or nowhere.
        #[derive(Clone, Copy, PartialEq, Eq)]
        enum Place {
            Rep,
            Axis(u8),
            Dim(usize),
            Partial(ReduceType),
        }
        let place = |cx: &Self, (term, spec): &(Term, Spec<'_>), m: u8| -> Place {
            let rank = spec.shape.len();
            for dim in 0..rank {
                if spec.attr.dims_mapping[dim].mesh_set().contains(m) {
                    let slot = cx.slot(*term, rank, dim);
                    return match cx.carrier(slot, Some(spec.shape[dim])) {
                        Some(a) => Place::Axis(a),
                        None => Place::Dim(dim),
                    };
                }
            }
            spec.attr
                .partial
                .reduce_type(m)
                .map_or(Place::Rep, Place::Partial)
        };
        // Operands without elements (no dims, or none along the first) do
        // not vote.
        let live: SmallVec<[usize; 8]> = (0..ops.len())
            .filter(|&i| ops[i].1.shape.first().is_some_and(|&d| d != 0))
            .collect();
        let mut partial = Partial::NONE;
        let Some(&first) = live.first() else {
            return partial;
        };
        let mut aligned = AxisSet(u64::MAX);
        for &i in &live {
            aligned = aligned.intersect(self.carried_axes(ops[i].0, ops[i].1.shape));
        }
        aligned = aligned.minus(self.never);
        // The aligned axes in the first live operand's dim order (ties of
        // the cost rule go to the earlier dim).
        let (term0, spec0) = &ops[first];
        let rank0 = spec0.shape.len();
        let order: SmallVec<[(u8, usize); 8]> = (0..rank0)
            .filter_map(|dim| {
                let a = self.carrier(self.slot(*term0, rank0, dim), Some(spec0.shape[dim]))?;
                aligned.contains(a).then_some((a, dim))
            })
            .collect();
        let n_mesh = self.mesh.rank() as u8;
        let mismatch = |cx: &Self, m: u8| {
            live.iter()
                .any(|&i| place(cx, &ops[i], m) != place(cx, &ops[first], m))
        };
        let mut taken = AxisSet::EMPTY;
        let mut agreed = MeshSet::EMPTY;
        for m in 0..n_mesh {
            if mismatch(self, m) {
                continue;
            }
            match place(self, &ops[first], m) {
                Place::Axis(a) if aligned.contains(a) => {
                    taken = taken.with(a);
                    agreed = agreed.with(m);
                }
                Place::Partial(r @ (ReduceType::Sum | ReduceType::Avg)) => partial.set(m, r),
                _ => {}
            }
        }
        // A co-sharded dim's mesh dims are ordered (major first): each axis
        // takes the ones every operand agrees on in the first operand's order.
        for &(a, dim) in &order {
            for &m in spec0.attr.dims_mapping[dim].as_slice() {
                if agreed.contains(m) {
                    self.map.sharding[a as usize].push(m);
                }
            }
        }
        for m in 0..n_mesh {
            if !mismatch(self, m) || partial.reduce_type(m).is_some() {
                continue;
            }
            let size = self.mesh.dim(m);
            let mut best: Option<(f64, u8)> = None;
            for &(a, _) in order.iter().filter(|(a, _)| !taken.contains(*a)) {
                let mut cost = 0.0f64;
                for &i in &live {
                    let (term, spec) = &ops[i];
                    let rank = spec.shape.len();
                    let Some(dim) = (0..rank).find(|&d| {
                        self.carrier(self.slot(*term, rank, d), Some(spec.shape[d])) == Some(a)
                    }) else {
                        continue;
                    };
                    if spec.shape[dim] < size {
                        cost = f64::INFINITY;
                        break;
                    }
                    if !spec.attr.dims_mapping[dim].is_replicated() {
                        continue;
                    }
                    let local: f64 = spec
                        .shape
                        .iter()
                        .zip(spec.attr.dims_mapping.as_slice())
                        .map(|(&n, s)| n.div_ceil(self.mesh.product(s.mesh_set()).max(1)) as f64)
                        .product();
                    cost += local * size as f64;
                }
                if cost.is_finite() && best.is_none_or(|(c, _)| cost < c) {
                    best = Some((cost, a));
                }
            }
            if let Some((_, a)) = best {
                taken = taken.with(a);
                self.map.sharding[a as usize].push(m);
            }
        }
        partial
    }

    /// Reports the dims of an input that never carry a sharding but were given one.
    fn trace_unsharded<T: Trace + ?Sized>(
        &self,
        t: TensorRef,
        term: Term,
        spec: &Spec<'_>,
        trace: &mut T,
    ) {
        let rank = spec.shape.len();
        for dim in 0..rank {
            let given = spec.attr.dims_mapping[dim];
            if !given.is_replicated()
                && self
                    .carrier(self.slot(term, rank, dim), Some(spec.shape[dim]))
                    .is_none()
            {
                trace.unsharded(t, dim, given);
            }
        }
    }

    /// Drops trailing mesh dims until their product divides the axis extent.
    fn fit_one<T: Trace + ?Sized>(&self, a: u8, mut s: Sharding, trace: &mut T) -> Sharding {
        let extent = self.extent[a as usize];
        while let Some(&last) = s.as_slice().last() {
            // Mesh::new guarantees the whole mesh's product fits in a usize.
            let product: usize = s.as_slice().iter().map(|&m| self.mesh.dim(m)).product();
            if extent != UNKNOWN && extent.is_multiple_of(product) {
                break;
            }
            trace.not_divisible(self.axis_name(a), extent, last);
            s = s.without_last();
        }
        s
    }

    /// `s` without its trailing mesh dims until every device's block of
    /// axis `a` holds at least one element (extent ≥ shards).
    fn trim_empty<T: Trace + ?Sized>(&self, a: u8, mut s: Sharding, trace: &mut T) -> Sharding {
        let extent = self.extent[a as usize];
        while let Some(&last) = s.as_slice().last() {
            let product: usize = s.as_slice().iter().map(|&m| self.mesh.dim(m)).product();
            if extent != UNKNOWN && extent >= product {
                break;
            }
            trace.not_divisible(self.axis_name(a), extent, last);
            s = s.without_last();
        }
        s
    }

    /// The mapping of one tensor under an axis map.
    fn project(
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
    fn trace_missing_axes<T: Trace + ?Sized>(&self, input_shapes: &[&[usize]], trace: &mut T) {
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
    fn check_no_missing_axis(&self, input_shapes: &[&[usize]]) -> Result<(), SpmdError> {
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

/// Labels name themselves; the dims an ellipsis stands for are numbered.
fn axis_name(plan: &Plan<'_>, n_labels: usize, a: u8) -> AxisName {
    if a == UNSHARDED {
        AxisName::Unsharded
    } else if (a as usize) < n_labels {
        AxisName::Label(plan.label(a))
    } else {
        AxisName::Ellipsis(a - n_labels as u8)
    }
}
