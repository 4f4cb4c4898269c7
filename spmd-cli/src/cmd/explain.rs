//! `spmd explain`: the steps of one inference call, from the core's
//! [`Trace`](spmd_core::Trace) hooks.
//!
//! The core traces only `Einsum::forward_traced`. A registered op is
//! explained through the literal notation (from `RuleInfo::notations`) that
//! reproduces its answer, and the report says so; ops whose notation is built
//! at run time, and backward and grad calls, get an explanation read off the
//! answer instead.

use serde_json::{Value, json};
use spmd_core::json::Direction;
use spmd_core::{Einsum, Registry, RuleResult, Spec, SpmdError, TensorRef};

use crate::Output;
use crate::call::{Built, Request};
use crate::cli::InferArgs;
use crate::cmd::infer::output_shapes;
use crate::error::{CliError, Result};
use crate::parse::shape_text;
use crate::report::{self, Report};
use crate::reshard;
use crate::style::{BAD, COMM, DIM, HEADER, LOCAL, OK, PARTIAL, Table, paint};
use crate::trace::{Event, Recorder, matching_notations, mesh_dims_text};

/// How a call was (or could not be) traced.
struct Traced {
    notation: Option<String>,
    /// Why the notation stands in for the rule, or why there is no trace.
    note: String,
    events: Option<Vec<Event>>,
}

pub fn explain(args: &InferArgs) -> Result<Output> {
    let registry = spmd_ops::builtins();
    let requests = match (&args.json_input, &args.op) {
        (Some(path), _) => Request::from_json_file(path, &registry)?,
        (None, Some(op)) => vec![Request::from_args(op, &args.call, &registry)?],
        (None, None) => {
            return Err(CliError::usage(
                "give an OP (see `spmd ops`) or --json-input FILE",
            ));
        }
    };
    let mut texts = Vec::new();
    let mut values = Vec::new();
    let mut fail = None;
    for req in &requests {
        let (text, value, err) = explain_one(req, &registry)?;
        texts.push(text);
        values.push(value);
        if fail.is_none() {
            fail = err;
        }
    }
    let text = if args.call.json {
        let v = if values.len() == 1 {
            values.pop().unwrap_or(Value::Null)
        } else {
            Value::Array(values)
        };
        format!("{}\n", report::to_json(&v))
    } else {
        texts.join("\n")
    };
    Ok(Output { text, fail })
}

fn trace(req: &Request, rule: &Built, answer: &Result<RuleResult, SpmdError>) -> Traced {
    let no_api = "the core exposes traced inference only for einsum forward \
                  (Einsum::forward_traced); this explanation is read off the answer";
    if req.direction != Direction::Forward {
        return Traced {
            notation: None,
            note: format!(
                "no step-by-step trace for {} inference: {no_api}",
                req.direction
            ),
            events: None,
        };
    }
    let (ins, outs) = req.parts();
    let (einsum, notation, note) = match rule {
        Built::Einsum(e) => (
            Some(e.clone()),
            Some(e.notation().source().to_string()),
            String::new(),
        ),
        Built::Registered(_, info) => {
            let candidates: Vec<&str> = match answer {
                Ok(_) => matching_notations(info, &req.mesh, req.direction, &ins, &outs, answer),
                Err(_) if info.notations.len() == 1 => info.notations.to_vec(),
                Err(_) => Vec::new(),
            };
            match candidates.first() {
                Some(n) => {
                    let why = if answer.is_ok() {
                        "its answer on this call is the registered rule's"
                    } else {
                        "the op's only notation, traced with the classic policy (the registered rule may use another)"
                    };
                    (
                        Einsum::new(n).ok(),
                        Some(n.to_string()),
                        format!(
                            "`{}` is explained through its notation {n:?} ({why}); the core has no traced inference for registered rules",
                            info.name
                        ),
                    )
                }
                None if info.notations.is_empty() => (
                    None,
                    None,
                    format!(
                        "no step-by-step trace: `{}` builds its notation at run time from its attributes, and {no_api}",
                        info.name
                    ),
                ),
                None => (
                    None,
                    None,
                    format!(
                        "no step-by-step trace: no literal notation of `{}` reproduces its answer here, and {no_api}",
                        info.name
                    ),
                ),
            }
        }
    };
    let Some(e) = einsum else {
        return Traced {
            notation,
            note,
            events: None,
        };
    };
    let specs: Vec<Spec<'_>> = ins.iter().map(|(s, a)| Spec::new(s, a)).collect();
    let mut rec = Recorder::default();
    let _ = e.forward_traced(&req.mesh, &specs, &mut rec);
    Traced {
        notation,
        note,
        events: Some(rec.events),
    }
}

fn explain_one(req: &Request, registry: &Registry) -> Result<(String, Value, Option<CliError>)> {
    let rule = req.rule(registry)?;
    let answer = req.run(&rule);
    let traced = trace(req, &rule, &answer);
    let mut s = format!(
        "{} {} on mesh {} ({} devices)\n",
        paint(HEADER, req.source.title()),
        req.direction,
        req.mesh,
        req.mesh.size()
    );
    if !traced.note.is_empty() {
        s.push_str(&paint(DIM, format!("note: {}\n", traced.note)));
    }
    let terms: Vec<String> = traced
        .notation
        .as_deref()
        .and_then(|n| spmd_core::notation::parse(n).ok())
        .map(|n| {
            let p = n.plan();
            (0..p.n_inputs() + p.n_outputs())
                .map(|i| format!("`{}`", p.term_text(p.terms[i])))
                .collect()
        })
        .unwrap_or_default();
    let term = |t: TensorRef, n_in: usize| -> String {
        let k = match t.role {
            spmd_core::Role::Input => t.index,
            spmd_core::Role::Output => n_in + t.index,
        };
        terms.get(k).cloned().unwrap_or_default()
    };
    let n_in = req.inputs.len();

    let mut steps_json = Vec::new();
    s.push('\n');
    if let Some(events) = &traced.events {
        s.push_str(&paint(
            HEADER,
            "1. merge: each sharded input dim brings its mesh dims to its axis (inputs in order, dims left to right)\n",
        ));
        let mut any = false;
        for e in events.iter().filter(|e| matches!(e, Event::Merged { .. })) {
            s.push_str(&format!("   {}\n", e.text()));
            any = true;
        }
        // Sharded dims with no merge step: their axis never carries a sharding.
        let mut dropped = Vec::new();
        for (i, t) in req.inputs.iter().enumerate() {
            let attr = t.attr();
            for (d, sh) in attr.dims_mapping.as_slice().iter().enumerate() {
                let merged = events.iter().any(|e| {
                    matches!(e, Event::Merged { tensor, dim, .. } if *tensor == TensorRef::input(i) && *dim == d)
                });
                if !sh.is_replicated() && !merged {
                    dropped.push(format!(
                        "input {i} dim {d}: {} is dropped: this dim never carries a sharding (a `1`, a broadcast size-1 dim, a diagonal, a minor factor of a compound, or an axis the rule keeps whole)",
                        mesh_dims_text(sh.as_slice())
                    ));
                }
            }
        }
        for d in &dropped {
            s.push_str(&format!("   {}\n", paint(LOCAL, d)));
        }
        if !any && dropped.is_empty() {
            s.push_str("   every input is replicated: nothing to merge\n");
        }
        s.push_str(&paint(
            HEADER,
            "2. conflicts: a mesh dim may split only one axis\n",
        ));
        let conflicts: Vec<&Event> = events
            .iter()
            .filter(|e| matches!(e, Event::Conflict { .. } | Event::NotDivisible { .. }))
            .collect();
        if conflicts.is_empty() {
            s.push_str("   none\n");
        }
        for e in &conflicts {
            s.push_str(&format!("   {}\n", paint(COMM, e.text())));
        }
        steps_json.extend(events.iter().map(Event::json));
        steps_json.extend(
            dropped
                .iter()
                .map(|d| json!({"step": "dropped", "text": d})),
        );
    }

    let mut fail = None;
    let report_json;
    match &answer {
        Ok(result) => {
            let shapes = output_shapes(req, &rule, result);
            let report = Report::new(req, &rule, result.clone(), shapes);
            let mut step = 1;
            if traced.events.is_some() {
                step = 3;
            } else {
                step = untraced_steps(req, &report, &mut s, step);
            }
            s.push_str(&paint(
                HEADER,
                format!("{step}. projection: every tensor gets the shardings of its axes\n"),
            ));
            let mut t = Table::new();
            for r in report.inputs.iter().chain(&report.outputs) {
                let tref = if r.label.starts_with("output") {
                    TensorRef::output(r.label.trim_start_matches("output ").parse().unwrap_or(0))
                } else {
                    TensorRef::input(r.label.trim_start_matches("input ").parse().unwrap_or(0))
                };
                let arrow = match &r.given {
                    Some(g) => format!("{g} -> {}", r.result),
                    None => r.result.to_string(),
                };
                let what = if r.given.is_some() && r.reshard.is_empty() {
                    paint(OK, "as given")
                } else if !r.reshard.is_empty() {
                    let comm = r.reshard.iter().any(|x| x.communicates());
                    paint(
                        if comm { COMM } else { LOCAL },
                        reshard::summary(&r.reshard),
                    )
                } else {
                    String::new()
                };
                let mut row = vec![r.label.clone()];
                if !terms.is_empty() {
                    row.push(term(tref, n_in));
                }
                row.extend([
                    r.shape.as_deref().map_or("?".into(), shape_text),
                    arrow,
                    what,
                ]);
                t.row(row);
            }
            s.push_str(&t.render("   "));
            s.push_str(&paint(HEADER, format!("{}. partial outputs\n", step + 1)));
            let partial_events: Vec<&Event> = traced
                .events
                .iter()
                .flatten()
                .filter(|e| matches!(e, Event::Partial { .. }))
                .collect();
            if !partial_events.is_empty() {
                for e in &partial_events {
                    s.push_str(&format!("   {}\n", paint(PARTIAL, e.text())));
                }
                for r in report.outputs.iter().filter(|r| !r.pending.is_empty()) {
                    s.push_str(&format!(
                        "   {}: {} gives the full value\n",
                        r.label,
                        reshard::summary(&r.pending)
                    ));
                }
            } else {
                let mut any = false;
                for r in report
                    .outputs
                    .iter()
                    .filter(|r| r.result.partial.is_partial())
                {
                    any = true;
                    s.push_str(&format!(
                        "   {}\n",
                        paint(
                            PARTIAL,
                            format!(
                                "{} is partial {}: a sharded axis of the call is missing from it (contracted or reduced), so each device holds a partial result; {} gives the full value",
                                r.label,
                                r.result.partial,
                                reshard::summary(&r.pending)
                            )
                        )
                    ));
                }
                if !any {
                    s.push_str("   none: every sharded axis appears in the outputs\n");
                }
            }
            if req.direction == Direction::Backward {
                s.push_str(&paint(
                    DIM,
                    "   (backward: the outputs' shardings were merged, the inputs' mappings ignored; an input axis that no output has is replicated)\n",
                ));
            }
            if req.direction == Direction::Grad {
                s.push_str(&paint(
                    DIM,
                    "   (grad: the forward inputs the gradient reads and the output grads were merged; each input grad is partial over the sharded axes it lacks)\n",
                ));
            }
            report_json = report.json();
        }
        Err(e) => {
            s.push_str(&paint(BAD, format!("the rule rejects the call: {e}\n")));
            report_json = json!({"error": e.to_string()});
            let check = req.expectation.as_ref().map(|x| x.check(&Err(e.clone())));
            match check {
                Some(c) => {
                    s.push_str(&format!("\n{}\n", report::check_line(&c)));
                    if c.is_err() {
                        fail = Some(CliError::failed());
                    }
                }
                None => fail = Some(CliError::usage(e.to_string())),
            }
        }
    }
    let value = json!({
        "op": req.source.title(),
        "direction": req.direction,
        "traced": traced.events.is_some(),
        "notation": traced.notation,
        "note": traced.note,
        "steps": steps_json,
        "report": report_json,
    });
    Ok((s, value, fail))
}

/// Without a trace: what each input dim lost or gained, read off the answer.
/// Returns the number of the next step.
fn untraced_steps(req: &Request, report: &Report, s: &mut String, step: usize) -> usize {
    let mut lines = Vec::new();
    for r in report.inputs.iter().chain(&report.outputs) {
        let Some(given) = &r.given else { continue };
        let rank = given.dims_mapping.rank().min(r.result.dims_mapping.rank());
        for d in 0..rank {
            let (g, q) = (given.dims_mapping[d], r.result.dims_mapping[d]);
            if g == q {
                continue;
            }
            let why = if q.is_replicated() {
                "the rule does not keep this dim sharded (its axis is kept whole, is missing from the side it is merged with, or lost its mesh dims to another axis)"
            } else if g.is_replicated() {
                "another tensor's dim on the same axis is sharded"
            } else {
                "the merged sharding of its axis differs"
            };
            lines.push(format!(
                "{} dim {d}: given {}, required {}: {why}",
                r.label,
                mesh_dims_text(g.as_slice()),
                mesh_dims_text(q.as_slice())
            ));
        }
        if given.partial.is_partial() && given.partial != r.result.partial {
            lines.push(format!(
                "{}: given partial {}, required {}: the rule takes no partial inputs here (reduce first)",
                r.label,
                given.partial,
                if r.result.partial.is_partial() { r.result.partial.to_string() } else { "not partial".into() }
            ));
        }
    }
    let what = match req.direction {
        Direction::Backward => "what changed (backward merges the outputs only)",
        _ => "what changed between the given and the required layouts",
    };
    s.push_str(&paint(HEADER, format!("{step}. {what}\n")));
    if lines.is_empty() {
        s.push_str("   nothing: every given layout is kept\n");
    }
    for l in lines {
        s.push_str(&format!("   {}\n", paint(COMM, l)));
    }
    step + 1
}
