//! A two-layer MLP, `gelu(x @ w1 + b1) @ w2 + b2`, forward and backward on a
//! 2x4 mesh: data parallel on mesh dim 0 (the batch), Megatron-style tensor
//! parallel on mesh dim 1 (w1 split by columns, w2 by rows).
//!
//! Every sharding comes from the built-in rules; the gradient rules are derived
//! from the same notations. The example checks the known result and exits with
//! an error if any claim fails:
//! - the activations between the two matmuls stay split on mesh dim 1 with no
//!   communication;
//! - the second matmul's output is partial over mesh dim 1 (one all-reduce);
//! - every weight gradient is partial over mesh dim 0 (the data-parallel
//!   all-reduce), and the input gradient over mesh dim 1 (Megatron's backward
//!   all-reduce).
//!
//! Run with `cargo run --example mlp`.

use spmd_core::SpmdRuleExt;
use std::process::ExitCode;

use spmd_core::{Attrs, DistAttr, Mesh, Registry, RuleResult, Spec, SpmdError};

const BATCH: usize = 32;
const HIDDEN: usize = 1024;
const FFN: usize = 4096;

fn attr(m: &[i64]) -> DistAttr {
    DistAttr::from_paddle(m).expect("literal mappings are valid")
}

/// One op of the model: its rule, its inputs' shapes and attrs.
struct Step<'a> {
    op: &'a str,
    what: &'a str,
    shapes: [&'a [usize]; 2],
    out_shape: &'a [usize],
}

fn describe(r: &RuleResult, names: [&str; 2], out: &str) {
    for (name, a) in names.iter().zip(&r.inputs) {
        println!("    {name:<6} {a}");
    }
    println!("    {out:<6} {}", r.outputs[0]);
}

fn partial_note(a: &DistAttr) -> String {
    let dims: Vec<String> = a
        .partial
        .iter()
        .map(|(d, r)| format!("{r} over mesh dim {d}"))
        .collect();
    if dims.is_empty() {
        "no communication".into()
    } else {
        format!("partial: all-reduce ({})", dims.join(", "))
    }
}

fn run(registry: &Registry) -> Result<Vec<String>, SpmdError> {
    let mesh = Mesh::new(&[2, 4])?;
    let none = Attrs::new();
    let mut failures = Vec::new();
    let mut check = |ok: bool, claim: &str| {
        println!("  [{}] {claim}", if ok { "ok" } else { "FAILED" });
        if !ok {
            failures.push(claim.to_string());
        }
    };

    // Parameters and the input, as the user annotates them.
    let x = attr(&[0, -1]);
    let w1 = attr(&[-1, 1]);
    let b1 = attr(&[1]);
    let w2 = attr(&[1, -1]);
    let b2 = attr(&[-1]);

    let steps = [
        Step {
            op: "matmul",
            what: "h = x @ w1",
            shapes: [&[BATCH, HIDDEN], &[HIDDEN, FFN]],
            out_shape: &[BATCH, FFN],
        },
        Step {
            op: "add",
            what: "h = h + b1",
            shapes: [&[BATCH, FFN], &[FFN]],
            out_shape: &[BATCH, FFN],
        },
        Step {
            op: "gelu",
            what: "a = gelu(h)",
            shapes: [&[BATCH, FFN], &[]],
            out_shape: &[BATCH, FFN],
        },
        Step {
            op: "matmul",
            what: "y = a @ w2",
            shapes: [&[BATCH, FFN], &[FFN, HIDDEN]],
            out_shape: &[BATCH, HIDDEN],
        },
        Step {
            op: "add",
            what: "y = y + b2",
            shapes: [&[BATCH, HIDDEN], &[HIDDEN]],
            out_shape: &[BATCH, HIDDEN],
        },
    ];
    let params = [Some(&w1), Some(&b1), None, Some(&w2), Some(&b2)];
    let names = [
        ["x", "w1"],
        ["h", "b1"],
        ["h", ""],
        ["a", "w2"],
        ["y", "b2"],
    ];

    println!("forward on mesh {mesh} (dim 0: data parallel, dim 1: tensor parallel)");
    let mut act = x.clone();
    let mut forward = Vec::new();
    for ((step, param), names) in steps.iter().zip(params).zip(names) {
        let rule = registry.build(step.op, &none)?;
        let mut specs = vec![Spec::new(step.shapes[0], &act)];
        if let Some(p) = param {
            specs.push(Spec::new(step.shapes[1], p));
        }
        let r = rule.forward(&mesh, &specs)?;
        println!("  {}  [{}]", step.what, step.op);
        describe(&r, names, "out");
        println!("    -> {}", partial_note(&r.outputs[0]));
        // The next op takes this output as it is (a partial one is reduced
        // first, which the next rule's requirement shows).
        act = r.outputs[0].clone();
        forward.push(r);
    }
    check(
        forward[0].outputs[0] == attr(&[0, 1])
            && forward[1].outputs[0] == attr(&[0, 1])
            && forward[2].outputs[0] == attr(&[0, 1])
            && forward[3].inputs[0] == attr(&[0, 1]),
        "activations between the matmuls stay split on mesh dim 1 (no communication)",
    );
    check(
        forward[3].outputs[0].partial.dims().0 == 0b10
            && forward[3].outputs[0].dims_mapping == attr(&[0, -1]).dims_mapping,
        "the second matmul's output is partial over mesh dim 1 (one all-reduce)",
    );

    println!("\nbackward (grad rules derived from the notations)");
    // The loss gradient arrives laid out like the model's output.
    let mut dy = DistAttr::new(forward[4].outputs[0].dims_mapping.clone());
    let mut weight_grads = Vec::new();
    let mut input_grad = None;
    for (i, ((step, param), names)) in steps.iter().zip(params).zip(names).enumerate().rev() {
        let rule = registry.build(step.op, &none)?;
        let fwd = &forward[i];
        let mut specs = vec![Spec::new(step.shapes[0], &fwd.inputs[0])];
        if param.is_some() {
            specs.push(Spec::new(step.shapes[1], &fwd.inputs[1]));
        }
        let g = rule.grad(&mesh, &specs, &[Spec::new(step.out_shape, &dy)])?;
        println!("  d({})  [{}]", step.what, step.op);
        for (k, grad) in g.outputs.iter().enumerate() {
            let name = names[k];
            println!("    d{name:<5} {grad}  ({})", partial_note(grad));
        }
        if param.is_some() {
            weight_grads.push((names[1], g.outputs[1].clone()));
        }
        // The gradient flowing on is complete before the next op uses it.
        dy = DistAttr::new(g.outputs[0].dims_mapping.clone());
        input_grad = Some(g.outputs[0].clone());
    }
    check(
        weight_grads
            .iter()
            .all(|(_, g)| g.partial.dims().0 & 0b01 != 0),
        "every weight and bias gradient is partial over mesh dim 0 (data-parallel all-reduce)",
    );
    check(
        input_grad.is_some_and(|g| g.partial.dims().0 == 0b10),
        "dx is partial over mesh dim 1 (the tensor-parallel all-reduce of backward)",
    );
    Ok(failures)
}

fn main() -> ExitCode {
    let registry = spmd_ops::builtins();
    match run(&registry) {
        Ok(failures) if failures.is_empty() => ExitCode::SUCCESS,
        Ok(failures) => {
            eprintln!("{} claim(s) failed: {failures:?}", failures.len());
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
