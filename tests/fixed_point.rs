//! Backward answers are fixed points of forward (`docs/semantics.md`,
//! "Backward"): for every registered rule, forward inference on the input
//! requirements backward returns gives exactly the outputs backward returns,
//! mappings and partial status alike. Otherwise a caller that reshards to
//! backward's requirements and runs the op would get other layouts than
//! backward promised.
//!
//! The calls: every backward vector of both conformance files, each again
//! with a partial status added to its outputs (`Sum`, and the op's other
//! reduce types), and synthetic calls of every registered op that builds
//! without attributes (random ranks, shapes, layouts and partial outputs on
//! random meshes). Calls the rule rejects are counted, not judged.

mod common;

use common::{Rng, load};
use spmd_conformance::{Case, Direction, Parts};
use spmd_core::SpmdRuleExt;
use spmd_core::{
    Attrs, DimsMapping, DistAttr, Einsum, Mesh, MeshSet, Partial, ReduceType, Registry, RuleResult,
    Spec, SpmdRule,
};

fn rule_for(case: &Case, registry: &Registry) -> Option<Box<dyn SpmdRule>> {
    if case.op == "einsum" {
        let e = Einsum::new(case.attr_str("equation")?).ok()?;
        return Some(Box::new(e));
    }
    let attrs = Attrs::from_json(
        "fixed_point",
        &serde_json::Value::Object(case.attrs.clone()),
    );
    registry.build(&case.op, &attrs.ok()?).ok()
}

/// One backward call: mesh, input shapes and output specs, `None` where absent.
#[derive(Clone, Debug)]
struct Call {
    mesh: Vec<usize>,
    inputs: Vec<Option<Vec<usize>>>,
    outputs: Vec<Option<Parts>>,
}

/// Why backward's answer is not a fixed point, if it is not.
fn problem(rule: &dyn SpmdRule, call: &Call, b: &RuleResult) -> Option<String> {
    let mesh = Mesh::new(&call.mesh).ok()?;
    let specs: Vec<Option<Spec<'_>>> = call
        .inputs
        .iter()
        .zip(&b.inputs)
        .map(|(s, a)| s.as_ref().map(|s| Spec::new(s, a)))
        .collect();
    let f = if specs.iter().all(Option::is_some) {
        let specs: Vec<Spec<'_>> = specs.into_iter().flatten().collect();
        let shapes: Vec<&[usize]> = call
            .outputs
            .iter()
            .map(|o| o.as_ref().map_or(&[][..], |(s, _)| s.as_slice()))
            .collect();
        rule.forward_with_output_shapes(&mesh, &specs, &shapes)
    } else {
        rule.forward_optional(&mesh, &specs)
    };
    let f = match f {
        Ok(f) => f,
        Err(e) => return Some(format!("forward rejects backward's requirements: {e}")),
    };
    for (o, out) in call.outputs.iter().enumerate() {
        if out.is_none() {
            continue;
        }
        match (b.outputs.get(o), f.outputs.get(o)) {
            (Some(bo), Some(fo)) if bo == fo => {}
            // A placeholder output (flash attention's 0-d `softmax` when it
            // is not returned) has a rank forward cannot know.
            (Some(bo), Some(fo)) if bo.dims_mapping.rank() != fo.dims_mapping.rank() => {
                return Some(PLACEHOLDER.into());
            }
            (bo, fo) => {
                return Some(format!(
                    "output {o}: backward answers {}, forward of its requirements {}",
                    bo.map_or("nothing".into(), ToString::to_string),
                    fo.map_or("nothing".into(), ToString::to_string)
                ));
            }
        }
    }
    None
}

const PLACEHOLDER: &str = "placeholder";

#[derive(Default)]
struct Tally {
    calls: usize,
    answered: usize,
    /// Calls whose given output is a placeholder of another rank than the
    /// op's (counted, not judged).
    placeholders: usize,
    failures: Vec<String>,
}

impl Tally {
    fn judge(&mut self, what: &str, rule: &dyn SpmdRule, call: &Call) {
        self.calls += 1;
        let Ok(mesh) = Mesh::new(&call.mesh) else {
            return;
        };
        let shapes: Vec<Option<&[usize]>> = call.inputs.iter().map(|s| s.as_deref()).collect();
        let outs: Vec<Option<Spec<'_>>> = call
            .outputs
            .iter()
            .map(|o| o.as_ref().map(|(s, a)| Spec::new(s, a)))
            .collect();
        let Ok(b) = rule.backward_optional(&mesh, &shapes, &outs) else {
            return;
        };
        self.answered += 1;
        match problem(rule, call, &b) {
            Some(p) if p == PLACEHOLDER => self.placeholders += 1,
            Some(p) => self.failures.push(format!("{what}: {p}\n    {call:?}")),
            None => {}
        }
    }

    fn assert_clean(&self, kind: &str, min_answered: usize) {
        println!(
            "{kind}: {} backward calls, {} answered, {} with a placeholder output not judged, {} not fixed points",
            self.calls,
            self.answered,
            self.placeholders,
            self.failures.len()
        );
        assert!(
            self.placeholders <= 12,
            "{kind}: {} placeholders",
            self.placeholders
        );
        assert!(
            self.answered >= min_answered,
            "{kind}: only {} answered",
            self.answered
        );
        for f in &self.failures {
            println!("{f}");
        }
        let shown: Vec<&String> = self.failures.iter().take(25).collect();
        assert!(
            self.failures.is_empty(),
            "{kind}: {} answers are not fixed points of forward:\n{}",
            self.failures.len(),
            shown
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

/// `a` with a partial status of `r` over every mesh dim it does not shard
/// (or over the first of them only).
fn with_partial(a: &DistAttr, mesh_rank: usize, r: ReduceType, all: bool) -> DistAttr {
    let free = MeshSet(((1u16 << mesh_rank) - 1) as u8).minus(a.dims_mapping.mesh_set());
    let dims = if all {
        free
    } else {
        free.iter().next().map_or(MeshSet::EMPTY, MeshSet::single)
    };
    a.clone().with_partial(Partial::over(dims, r))
}

#[test]
fn backward_vectors_are_fixed_points_of_forward() {
    let registry = spmd_ops::builtins();
    let mut tally = Tally::default();
    let mut inconsistent = Vec::new();
    for file in ["paddle-suite.json", "paddle-3.3.1-random.json"] {
        for case in load(file) {
            if case.direction != Direction::Backward {
                continue;
            }
            let Some(rule) = rule_for(&case, &registry) else {
                continue;
            };
            let (Ok(ins), Ok(outs)) = (case.input_slots(), case.output_slots()) else {
                continue;
            };
            let call = Call {
                mesh: case.mesh_shape.clone(),
                inputs: ins.into_iter().map(|p| p.map(|(s, _)| s)).collect(),
                outputs: outs,
            };
            if contradicts_its_target(&case, &call) {
                inconsistent.push(case.id.clone());
                continue;
            }
            tally.judge(&case.id, &*rule, &call);
            // The same call with partial outputs of every reduce type.
            for (r, all) in [
                (ReduceType::Sum, true),
                (ReduceType::Sum, false),
                (ReduceType::Max, true),
                (ReduceType::Min, false),
                (ReduceType::Avg, true),
            ] {
                let mut c = call.clone();
                for (_, a) in c.outputs.iter_mut().flatten() {
                    *a = with_partial(a, call.mesh.len(), r, all);
                }
                tally.judge(&format!("{} with partial {r} outputs", case.id), &*rule, &c);
            }
        }
    }
    // Counted, not judged: forward cannot reproduce an output whose shape
    // is not the op's.
    println!(
        "{} vectors not judged, their output shape contradicting their `shape` attribute: {}",
        inconsistent.len(),
        inconsistent.join(", ")
    );
    assert!(inconsistent.len() <= 8, "{inconsistent:?}");
    tally.assert_clean("vectors", 1500);
}

/// A reshape vector whose given output shape is not its `shape` attribute
/// (Paddle's suite reuses one attribute for several reverse cases; Paddle's
/// reverse rule reads the output tensor's shape).
fn contradicts_its_target(case: &Case, call: &Call) -> bool {
    let Some(target) = case.attrs.get("shape").and_then(|v| v.as_array()) else {
        return false;
    };
    let Some(Some((out, _))) = call.outputs.first() else {
        return false;
    };
    target.len() != out.len()
        || target
            .iter()
            .zip(out)
            .any(|(t, &o)| t.as_i64().is_some_and(|t| t > 0 && t as usize != o))
}

/// A tensor of rank `rank` with small extents, each dim replicated or on a
/// distinct mesh dim, maybe partial over a free mesh dim.
fn random_tensor(rng: &mut Rng, rank: usize, mesh_rank: usize) -> Parts {
    let shape: Vec<usize> = (0..rank).map(|_| [2, 3, 4, 6, 8][rng.below(5)]).collect();
    let (mapping, free) = common::random_mapping(rng, rank, mesh_rank);
    let mut attr = DistAttr::new(DimsMapping::from_shardings(&mapping));
    if !free.is_empty() && rng.below(2) == 0 {
        let r = [ReduceType::Sum, ReduceType::Max, ReduceType::Avg][rng.below(3)];
        let mut p = Partial::NONE;
        for d in free {
            if rng.below(2) == 0 {
                p.set(d, r);
            }
        }
        attr = attr.with_partial(p);
    }
    (shape, attr)
}

#[test]
fn synthetic_backward_calls_of_every_registered_op_are_fixed_points() {
    let registry = spmd_ops::builtins();
    let mut tally = Tally::default();
    let mut ops = 0;
    for (k, info) in registry.iter().enumerate() {
        let Ok(rule) = registry.build(info.name, &Attrs::new()) else {
            continue; // needs attributes: the vectors cover it
        };
        ops += 1;
        for m in 0..128u64 {
            let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ ((k as u64) << 12 | m));
            let (mesh, rank, n_in, n_out) = common::call_frame(&mut rng, info);
            // One shape for every tensor, so that the outputs' shapes are
            // the ones the op computes (elementwise-like ops answer; others
            // reject the ranks, which is counted).
            let shape = random_tensor(&mut rng, rank, mesh.len()).0;
            let inputs = (0..n_in).map(|_| Some(shape.clone())).collect();
            let outputs = (0..n_out)
                .map(|_| {
                    let (_, a) = random_tensor(&mut rng, rank, mesh.len());
                    Some((shape.clone(), a))
                })
                .collect();
            let call = Call {
                mesh,
                inputs,
                outputs,
            };
            // A reshape's target shape is a required attribute.
            if info.attrs.contains(&"shape") {
                let target: Vec<i64> = shape.iter().map(|&e| e as i64).collect();
                let attrs = Attrs::new().with("shape", target);
                let Ok(rule) = registry.build(info.name, &attrs) else {
                    continue;
                };
                tally.judge(info.name, &*rule, &call);
                continue;
            }
            tally.judge(info.name, &*rule, &call);
        }
    }
    println!("{ops} ops built without attributes");
    assert!(ops >= 180, "only {ops} ops built without attributes");
    tally.assert_clean("synthetic", 2000);
}
