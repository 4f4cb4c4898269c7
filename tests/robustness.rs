//! Bad input never panics and never comes back silently corrupt (the guide:
//! "it gets a typed error"). Every conformance case of every op the library
//! registers is a template; each is mutated the ways a caller gets calls
//! wrong (a mesh dim out of range or used twice, a shape of the wrong rank or
//! with a zero extent, a mapping of the wrong length, a partial status on a
//! mesh dim that also shards, a tensor left out or added, a smaller mesh) and
//! run through the op's rule in the case's direction. No call may panic, and
//! an answer (`Ok`) must be well formed: one attr per given tensor with one
//! entry per dim, every mesh dim in range and used at most once per tensor,
//! never both partial and sharding.
//!
//! Deterministic (a fixed-seed generator), so a failure names the case id and
//! the mutations that reproduce it.

mod common;

use spmd_core::SpmdRuleExt;
use std::panic::{AssertUnwindSafe, catch_unwind};

use common::{Rng, load};
use spmd_conformance::{Direction, Parts};
use spmd_core::{
    Attrs, DimsMapping, DistAttr, Mesh, Partial, ReduceType, RuleResult, Sharding, Spec, SpmdError,
    SpmdRule,
};

/// Mutated calls per template: with ~2,900 templates, ~23,000 calls (48,
/// ~138,000 calls, was tried by hand and found nothing more).
const MUTANTS: u64 = 8;

/// One call: the mesh and the tensors, `None` where absent.
#[derive(Clone, Debug)]
struct Call {
    mesh: Vec<usize>,
    inputs: Vec<Option<Parts>>,
    outputs: Vec<Option<Parts>>,
}

/// Every tensor slot of a call, inputs first.
fn slots(call: &mut Call) -> Vec<&mut Option<Parts>> {
    call.inputs
        .iter_mut()
        .chain(call.outputs.iter_mut())
        .collect()
}

fn mapping_of(a: &DistAttr) -> Vec<Sharding> {
    a.dims_mapping.as_slice().to_vec()
}

fn with_mapping(a: &DistAttr, m: &[Sharding]) -> DistAttr {
    DistAttr::new(DimsMapping::from_shardings(m)).with_partial(a.partial)
}

/// Changes one attribute to a value a caller might get wrong (an axis out
/// of range, an empty or bogus list, a flipped flag, a bad string).
fn mutate_attr(rng: &mut Rng, attrs: &mut serde_json::Map<String, serde_json::Value>) -> String {
    use serde_json::{Value, json};
    let keys: Vec<String> = attrs.keys().cloned().collect();
    if keys.is_empty() {
        return "no attribute to change".into();
    }
    let key = &keys[rng.below(keys.len())];
    let ints = [-99, -9, -1, 0, 1, 2, 99];
    let new = match &attrs[key] {
        Value::Bool(b) => Value::Bool(!b),
        Value::Number(_) => json!(ints[rng.below(ints.len())]),
        Value::Array(_) => match rng.below(3) {
            0 => json!([]),
            1 => json!([ints[rng.below(ints.len())]]),
            _ => json!([0, 0]),
        },
        Value::String(_) => json!("bogus"),
        other => other.clone(),
    };
    let text = format!("attr {key} = {new}");
    attrs.insert(key.clone(), new);
    text
}

/// Applies one random mutation; returns what it did.
fn mutate(rng: &mut Rng, call: &mut Call) -> String {
    let mesh_rank = call.mesh.len();
    let kind = rng.below(11);
    if kind == 10 {
        // A smaller mesh: mesh dims the tensors use may now be out of range.
        if call.mesh.len() > 1 && rng.below(2) == 0 {
            call.mesh.pop();
            return "mesh loses its last dim".into();
        }
        let d = rng.below(call.mesh.len());
        call.mesh[d] = 1;
        return format!("mesh dim {d} has size 1");
    }
    if kind == 9 {
        // Arity: a tensor dropped or repeated.
        let list = if rng.below(2) == 0 || call.outputs.is_empty() {
            &mut call.inputs
        } else {
            &mut call.outputs
        };
        if rng.below(2) == 0 {
            list.pop();
            return "last tensor of a list dropped".into();
        }
        if let Some(t) = list.last().cloned() {
            list.push(t);
        }
        return "last tensor of a list repeated".into();
    }
    let mut all = slots(call);
    let n = all.len();
    if n == 0 {
        return "nothing to mutate".into();
    }
    let i = rng.below(n);
    let slot = &mut all[i];
    if kind == 8 {
        **slot = None;
        return format!("tensor {i} absent");
    }
    let Some((shape, attr)) = slot.as_mut() else {
        return format!("tensor {i} already absent");
    };
    let mut m = mapping_of(attr);
    // An earlier mutation may have left the mapping's length off the rank.
    let rank = shape.len().min(m.len());
    match kind {
        0 if rank > 0 => {
            // Any mesh dim, one past the mesh included.
            let d = rng.below(rank);
            let md = rng.below(mesh_rank + 2);
            m[d] = if md == 0 {
                Sharding::REPLICATED
            } else {
                Sharding::on((md - 1) as u8)
            };
            *attr = with_mapping(attr, &m);
            format!("tensor {i} dim {d} mapped to {m:?}")
        }
        1 if rank > 1 => {
            // One mesh dim on two dims of the tensor.
            let (a, b) = (rng.below(rank), rng.below(rank));
            let md = rng.below(mesh_rank.max(1)) as u8;
            m[a] = Sharding::on(md);
            m[b] = Sharding::on(md);
            *attr = with_mapping(attr, &m);
            format!("tensor {i} dims {a} and {b} both on mesh dim {md}")
        }
        2 if rank > 0 => {
            let d = rng.below(rank);
            shape[d] = [0, 1, 2, 3, 7, 1 << 20][rng.below(6)];
            format!("tensor {i} dim {d} has extent {}", shape[d])
        }
        3 if !shape.is_empty() => {
            shape.pop();
            m.pop();
            *attr = with_mapping(attr, &m);
            format!("tensor {i} loses its last dim")
        }
        4 => {
            shape.push(1 + rng.below(8));
            m.push(Sharding::REPLICATED);
            *attr = with_mapping(attr, &m);
            format!("tensor {i} gains a dim")
        }
        5 if !shape.is_empty() => {
            // The mapping alone gets shorter or longer than the shape.
            if rng.below(2) == 0 {
                m.pop();
            } else {
                m.push(Sharding::REPLICATED);
            }
            *attr = with_mapping(attr, &m);
            format!(
                "tensor {i} mapping length {} for rank {}",
                m.len(),
                shape.len()
            )
        }
        6 => {
            let md = rng.below(mesh_rank + 1) as u8;
            let mut p = attr.partial;
            p.set(md, ReduceType::Sum);
            *attr = with_mapping(attr, &m).with_partial(p);
            format!("tensor {i} partial on mesh dim {md}")
        }
        7 if rank > 0 && mesh_rank > 1 => {
            let d = rng.below(rank);
            m[d] = Sharding::co(&[0, 1]).expect("two mesh dims");
            *attr = with_mapping(attr, &m);
            format!("tensor {i} dim {d} co-sharded on mesh dims 0 and 1")
        }
        _ => {
            // A kind that does not apply to this tensor: clear its partial.
            *attr = with_mapping(attr, &m).with_partial(Partial::NONE);
            format!("tensor {i} not partial")
        }
    }
}

fn specs(parts: &[Option<Parts>]) -> Vec<Option<Spec<'_>>> {
    parts
        .iter()
        .map(|p| p.as_ref().map(|(s, a)| Spec::new(s, a)))
        .collect()
}

fn run(rule: &dyn SpmdRule, dir: Direction, call: &Call) -> Result<RuleResult, SpmdError> {
    let mesh = Mesh::new(&call.mesh)?;
    let (ins, outs) = (specs(&call.inputs), specs(&call.outputs));
    match dir {
        Direction::Forward => rule.forward_optional(&mesh, &ins),
        Direction::Backward => {
            let shapes: Vec<Option<&[usize]>> = call
                .inputs
                .iter()
                .map(|p| p.as_ref().map(|(s, _)| s.as_slice()))
                .collect();
            rule.backward_optional(&mesh, &shapes, &outs)
        }
        Direction::Grad => rule.grad_optional(&mesh, &ins, &outs),
    }
}

/// docs/semantics.md §2's invariants of one attr on a mesh of `mesh_rank` dims.
fn attr_problem(a: &DistAttr, rank: Option<usize>, mesh_rank: usize) -> Option<String> {
    if let Some(rank) = rank
        && a.dims_mapping.rank() != rank
    {
        return Some(format!("{} entries for rank {rank}", a.dims_mapping.rank()));
    }
    let mut seen = 0u32;
    for s in a.dims_mapping.as_slice() {
        for d in s.iter() {
            if d as usize >= mesh_rank {
                return Some(format!("mesh dim {d} out of range"));
            }
            if seen & (1 << d) != 0 {
                return Some(format!("mesh dim {d} used twice"));
            }
            seen |= 1 << d;
        }
    }
    for (d, _) in a.partial.iter() {
        if d as usize >= mesh_rank {
            return Some(format!("partial on mesh dim {d}, out of range"));
        }
        if seen & (1 << d) != 0 {
            return Some(format!("mesh dim {d} both partial and sharding"));
        }
    }
    None
}

/// What is wrong with an answer, if anything.
fn answer_problem(dir: Direction, call: &Call, r: &RuleResult) -> Option<String> {
    let mesh_rank = call.mesh.len();
    let rank = |p: &Option<Parts>| p.as_ref().map(|(s, _)| s.len());
    // Forward and backward answer for exactly the tensors given; grad's
    // slots follow the grad op's signature, so only the attrs are checked.
    let (in_ranks, out_ranks): (Vec<Option<usize>>, Vec<Option<usize>>) = match dir {
        Direction::Forward => (call.inputs.iter().map(rank).collect(), vec![]),
        Direction::Backward => (
            call.inputs.iter().map(rank).collect(),
            call.outputs.iter().map(rank).collect(),
        ),
        Direction::Grad => (vec![], vec![]),
    };
    if dir != Direction::Grad && r.inputs.len() != call.inputs.len() {
        return Some(format!(
            "{} input attrs for {} inputs",
            r.inputs.len(),
            call.inputs.len()
        ));
    }
    if dir == Direction::Backward && r.outputs.len() != call.outputs.len() {
        return Some(format!(
            "{} output attrs for {} outputs",
            r.outputs.len(),
            call.outputs.len()
        ));
    }
    for (k, a) in r.inputs.iter().enumerate() {
        // An absent tensor's placeholder answer has no rank to match.
        let rank = in_ranks.get(k).copied().flatten();
        if let Some(p) = attr_problem(a, rank, mesh_rank) {
            return Some(format!("input {k}: {p} ({a})"));
        }
    }
    for (k, a) in r.outputs.iter().enumerate() {
        let rank = out_ranks.get(k).copied().flatten();
        if let Some(p) = attr_problem(a, rank, mesh_rank) {
            return Some(format!("output {k}: {p} ({a})"));
        }
    }
    None
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// Fails listing the calls that went wrong (the first 400), if any.
fn assert_no_failures(kind: &str, calls: usize, failures: &[String]) {
    let shown: Vec<&str> = failures.iter().take(400).map(String::as_str).collect();
    assert!(
        failures.is_empty(),
        "{} of {calls} {kind} calls went wrong:\n{}",
        failures.len(),
        shown.join("\n")
    );
}

/// `f` under `catch_unwind`, without the default hook printing the panic
/// (the test reports it with the case that caused it).
fn quietly<T>(f: impl FnOnce() -> T) -> std::thread::Result<T> {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let outcome = catch_unwind(AssertUnwindSafe(f));
    std::panic::set_hook(hook);
    outcome
}

#[test]
fn mutated_calls_never_panic_and_answers_stay_well_formed() {
    let registry = spmd_ops::builtins();
    let mut failures = Vec::new();
    let (mut calls, mut answered, mut rejected) = (0usize, 0usize, 0usize);
    let mut ops_run = std::collections::BTreeSet::new();
    for file in ["paddle-suite.json", "paddle-3.3.1-random.json"] {
        for (n, case) in load(file).into_iter().enumerate() {
            if !registry.contains(&case.op) {
                continue; // einsum runs through the core, tested elsewhere
            }
            let (Ok(inputs), Ok(outputs)) = (case.input_slots(), case.output_slots()) else {
                continue;
            };
            // The unmutated attributes must build: the case is a valid call.
            let valid =
                Attrs::from_json("robustness", &serde_json::Value::Object(case.attrs.clone()));
            if valid.and_then(|a| registry.build(&case.op, &a)).is_err() {
                continue;
            }
            ops_run.insert(case.op.clone());
            let template = Call {
                mesh: case.mesh_shape.clone(),
                inputs,
                outputs,
            };
            for m in 0..MUTANTS {
                let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ ((n as u64) << 8 | m));
                let mut call = template.clone();
                let mut attrs = case.attrs.clone();
                let mut steps: Vec<String> = (0..1 + rng.below(3))
                    .map(|_| mutate(&mut rng, &mut call))
                    .collect();
                if rng.below(4) == 0 {
                    steps.push(mutate_attr(&mut rng, &mut attrs));
                }
                calls += 1;
                let outcome = quietly(|| {
                    let attrs = Attrs::from_json("robustness", &serde_json::Value::Object(attrs))?;
                    let rule = registry.build(&case.op, &attrs)?;
                    run(&*rule, case.direction, &call)
                });
                let problem = match outcome {
                    Err(payload) => Some(format!("panicked: {}", panic_message(&*payload))),
                    Ok(Err(_)) => {
                        rejected += 1;
                        None
                    }
                    Ok(Ok(r)) => {
                        answered += 1;
                        answer_problem(case.direction, &call, &r)
                    }
                };
                if let Some(p) = problem {
                    failures.push(format!(
                        "{} ({:?}) after [{}]: {p}\n    {call:?}",
                        case.id,
                        case.direction,
                        steps.join("; ")
                    ));
                }
            }
        }
    }
    println!(
        "{calls} mutated calls over {} ops: {answered} answered, {rejected} rejected",
        ops_run.len()
    );
    // The sweep means something only if it reaches most ops and both kinds
    // of outcome.
    assert!(ops_run.len() >= 55, "only {} ops ran", ops_run.len());
    assert!(
        answered > calls / 10 && rejected > calls / 10,
        "{answered} answered, {rejected} rejected of {calls}"
    );
    assert_no_failures("mutated", calls, &failures);
}

/// A random valid tensor: rank `rank`, small extents (1 included), each
/// dim on a distinct mesh dim or replicated.
fn random_tensor(rng: &mut Rng, rank: usize, mesh_rank: usize) -> Parts {
    let shape: Vec<usize> = (0..rank).map(|_| [1, 2, 4, 6, 8][rng.below(5)]).collect();
    let (mapping, free) = common::random_mapping(rng, rank, mesh_rank);
    let mut attr = DistAttr::new(DimsMapping::from_shardings(&mapping));
    if let Some(&d) = free.first()
        && rng.below(4) == 0
    {
        attr = attr.with_partial(Partial::over(spmd_core::MeshSet(1 << d), ReduceType::Sum));
    }
    (shape, attr)
}

/// Ops the vectors never reach (and those they do) get synthetic calls: the
/// declared number of tensors (two or three for variadic ops), one rank for
/// every tensor of a call so elementwise-like ops answer, random valid
/// layouts, in every direction, then the same mutations.
#[test]
fn synthetic_calls_of_every_registered_op_never_panic() {
    let registry = spmd_ops::builtins();
    let mut failures = Vec::new();
    let (mut calls, mut answered, mut ops) = (0usize, 0usize, 0usize);
    for (k, info) in registry.iter().enumerate() {
        let Ok(rule) = registry.build(info.name, &Attrs::new()) else {
            continue; // needs attributes; the vectors cover these
        };
        ops += 1;
        for m in 0..96u64 {
            let mut rng = Rng(0x2545_f491_4f6c_dd1d ^ ((k as u64) << 12 | m));
            let (mesh, rank, n_in, n_out) = common::call_frame(&mut rng, info);
            let mut tensors = |n: usize| -> Vec<Option<Parts>> {
                (0..n)
                    .map(|_| Some(random_tensor(&mut rng, rank, mesh.len())))
                    .collect()
            };
            let (inputs, outputs) = (tensors(n_in), tensors(n_out));
            let mut call = Call {
                mesh,
                inputs,
                outputs,
            };
            let mut steps = Vec::new();
            if rng.below(2) == 0 {
                steps.push(mutate(&mut rng, &mut call));
            }
            let dir = [Direction::Forward, Direction::Backward, Direction::Grad][rng.below(3)];
            calls += 1;
            let problem = match quietly(|| run(&*rule, dir, &call)) {
                Err(payload) => Some(format!("panicked: {}", panic_message(&*payload))),
                Ok(Err(_)) => None,
                Ok(Ok(r)) => {
                    answered += 1;
                    answer_problem(dir, &call, &r)
                }
            };
            if let Some(p) = problem {
                failures.push(format!(
                    "{} ({dir:?}) after [{}]: {p}\n    {call:?}",
                    info.name,
                    steps.join("; ")
                ));
            }
        }
    }
    println!("{calls} synthetic calls over {ops} ops: {answered} answered");
    assert!(ops >= 180, "only {ops} ops built without attributes");
    assert!(answered > calls / 10, "{answered} answered of {calls}");
    assert_no_failures("synthetic", calls, &failures);
}
