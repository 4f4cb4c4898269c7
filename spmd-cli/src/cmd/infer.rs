//! `spmd infer` and `spmd einsum`: run one rule call (or the calls of a JSON
//! file) and report requirements, outputs and reshards.

use serde_json::Value;
use spmd_conformance::Direction;
use spmd_core::{Einsum, Mesh, Registry, RuleInfo, RuleResult, SpmdError};

use crate::Output;
use crate::call::{Built, Request};
use crate::cli::{EinsumArgs, InferArgs};
use crate::error::{CliError, Result};
use crate::report::{self, Report, check_json, check_line};
use crate::style::{BAD, paint};

/// `spmd infer`.
pub fn infer(args: &InferArgs) -> Result<Output> {
    let registry = spmd_ops::builtins();
    let json = args.call.json;
    let requests = match (&args.json_input, &args.op) {
        (Some(path), _) => Request::from_json_file(path, &registry)?,
        (None, Some(op)) => vec![Request::from_args(op, &args.call, &registry)?],
        (None, None) => {
            return Err(CliError::usage(
                "give an OP (see `spmd ops`) or --json-input FILE",
            ));
        }
    };
    run_all(&requests, &registry, json)
}

/// `spmd einsum`.
pub fn einsum(args: &EinsumArgs) -> Result<Output> {
    let registry = spmd_ops::builtins();
    let req = Request::from_notation(&args.notation, &args.call)?;
    run_all(&[req], &registry, args.call.json)
}

fn run_all(requests: &[Request], registry: &Registry, json: bool) -> Result<Output> {
    let mut texts = Vec::new();
    let mut values = Vec::new();
    let mut failed = false;
    for req in requests {
        let rule = req
            .rule(registry)
            .map_err(|e| with_id(req, e.to_string()))?;
        match req.run(&rule) {
            Ok(result) => {
                let shapes = output_shapes(req, &rule, &result);
                let report = Report::new(req, &rule, result, shapes);
                failed |= matches!(report.check, Some(Err(_)));
                if json {
                    values.push(report.json());
                } else {
                    texts.push(report.text());
                }
            }
            Err(e) => {
                // A case that expects an error passes; otherwise the rule's
                // error is the command's error.
                let Some(exp) = &req.expectation else {
                    return Err(with_id(req, e.to_string()));
                };
                let check = exp.check(&Err(e.clone()));
                failed |= check.is_err();
                if json {
                    let mut v = serde_json::json!({
                        "op": req.source.title(),
                        "direction": req.direction,
                        "mesh_shape": req.mesh.shape(),
                        "error": e.to_string(),
                        "check": check_json(&check),
                    });
                    if let Some(id) = &req.id {
                        v["id"] = Value::String(id.clone());
                    }
                    values.push(v);
                } else {
                    let id = req
                        .id
                        .as_deref()
                        .map(|i| format!("{i}: "))
                        .unwrap_or_default();
                    texts.push(format!(
                        "{id}{} {} on mesh {}\n\n{}\n\n{}\n",
                        req.source.title(),
                        req.direction,
                        req.mesh,
                        paint(BAD, format!("the rule rejects the call: {e}")),
                        check_line(&check)
                    ));
                }
            }
        }
    }
    let text = if json {
        let v = if values.len() == 1 {
            values.pop().unwrap_or(Value::Null)
        } else {
            Value::Array(values)
        };
        format!("{}\n", report::to_json(&v))
    } else {
        texts.join("\n")
    };
    Ok(Output {
        text,
        fail: failed.then(CliError::failed),
    })
}

fn with_id(req: &Request, msg: String) -> CliError {
    match &req.id {
        Some(id) => CliError::usage(format!("{id}: {msg}")),
        None => CliError::usage(msg),
    }
}

/// Output shapes: from the notation of an einsum, or from the literal
/// notations of a registered op that reproduce its answer (when they agree).
pub fn output_shapes(
    req: &Request,
    rule: &Built,
    result: &spmd_core::RuleResult,
) -> Option<Vec<Vec<usize>>> {
    match rule {
        Built::Einsum(_) => report::output_shapes(req, rule, None),
        Built::Registered(_, info) => {
            // A call with absent tensors: the classic notations cannot
            // reproduce it, so its output shapes stay unknown.
            let (ins, outs) = req.parts()?;
            let found = matching_notations(
                info,
                &req.mesh,
                req.direction,
                &ins,
                &outs,
                &Ok(result.clone()),
            );
            let mut shapes = found
                .iter()
                .map(|n| report::output_shapes(req, rule, Some(n)));
            let first = shapes.next()??;
            shapes.all(|s| s.as_ref() == Some(&first)).then_some(first)
        }
    }
}

/// The literal notations of `info` whose classic einsum rule gives the same
/// answer as the registered rule on this call (a registered rule picks one of
/// its notations from its attributes, which the registry does not expose).
fn matching_notations(
    info: &RuleInfo,
    mesh: &Mesh,
    direction: Direction,
    ins: &[(Vec<usize>, spmd_core::DistAttr)],
    outs: &[(Vec<usize>, spmd_core::DistAttr)],
    answer: &std::result::Result<RuleResult, SpmdError>,
) -> Vec<&'static str> {
    info.notations
        .iter()
        .copied()
        .filter(|n| {
            let Ok(e) = Einsum::new(n) else { return false };
            let got = crate::call::run_parts(&e, mesh, direction, ins, outs);
            match (&got, answer) {
                (Ok(a), Ok(b)) => a == b,
                _ => false,
            }
        })
        .collect()
}
