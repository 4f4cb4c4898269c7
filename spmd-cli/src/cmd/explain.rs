//! `spmd explain`: the steps of one inference call (forward, backward or
//! grad), recorded through the core's [`Trace`](spmd_core::Trace) hooks,
//! which every registered rule and einsum implement.

use serde_json::{Value, json};
use spmd_conformance::Direction;
use spmd_core::{Registry, Role, TensorRef};

use crate::Output;
use crate::call::{Built, Request};
use crate::cli::InferArgs;
use crate::cmd::infer::output_shapes;
use crate::error::{CliError, Result};
use crate::parse::shape_text;
use crate::report::{self, Report};
use crate::reshard;
use crate::style::{BAD, COMM, DIM, HEADER, LOCAL, OK, PARTIAL, Table, paint};
use crate::trace::{Event, Labels, Recorder, mesh_dims_text};

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

/// The notation of the call when it is known (an einsum, or an op with one
/// literal notation), and a note on the op's notations otherwise.
fn notation(rule: &Built) -> (Option<String>, Option<String>) {
    match rule {
        Built::Einsum(e) => (Some(e.notation().source().to_string()), None),
        Built::Registered(_, info) => match info.notations {
            [] => (
                None,
                Some(format!(
                    "`{}` builds its notation at run time from its attributes",
                    info.name
                )),
            ),
            [n] if spmd_core::notation::is_template(n) => (
                Some(n.to_string()),
                Some(format!(
                    "`{}`'s notation is a template its attributes and the inputs' ranks bind per call",
                    info.name
                )),
            ),
            [n] => (Some(n.to_string()), None),
            ns => (
                None,
                Some(format!(
                    "`{}` picks one of its {} notations by its attributes and the inputs' ranks (the first is {:?}; `spmd ops` lists them)",
                    info.name,
                    ns.len(),
                    ns[0]
                )),
            ),
        },
    }
}

/// Whether the tensors a direction merges carry any sharding.
fn merges_something(req: &Request) -> bool {
    let sharded = |l: &[crate::call::Slot]| {
        l.iter().flatten().any(|t| {
            t.attr()
                .dims_mapping
                .as_slice()
                .iter()
                .any(|s| !s.is_replicated())
        })
    };
    match req.direction {
        Direction::Forward => sharded(&req.inputs),
        Direction::Backward => sharded(&req.outputs),
        Direction::Grad => sharded(&req.inputs) || sharded(&req.outputs),
    }
}

/// Forward: the input dims whose requirement differs from what was given,
/// read off the answer.
fn changes(req: &Request, result: &spmd_core::RuleResult, labels: &Labels) -> Vec<String> {
    let mut lines = Vec::new();
    if req.direction != Direction::Forward {
        return lines;
    }
    for (i, (t, r)) in req.inputs.iter().zip(&result.inputs).enumerate() {
        let Some(t) = t else { continue };
        let given = t.attr();
        for (d, (g, q)) in given
            .dims_mapping
            .as_slice()
            .iter()
            .zip(r.dims_mapping.as_slice())
            .enumerate()
        {
            if g != q {
                lines.push(format!(
                    "{} dim {d}: given {}, required {} (read off the answer)",
                    labels.input(i),
                    mesh_dims_text(&g.iter().collect::<Vec<_>>()),
                    mesh_dims_text(&q.iter().collect::<Vec<_>>())
                ));
            }
        }
    }
    lines
}

/// Why a call with absent tensors is not explained: the core traces only
/// its plain entry points, and an untraced answer would be no explanation.
fn untraceable(req: &Request) -> CliError {
    let id = req
        .id
        .as_deref()
        .map(|i| format!("{i}: "))
        .unwrap_or_default();
    CliError::usage(format!(
        "{id}`spmd explain` does not support absent tensors: the core traces only calls whose tensors are all present (run `spmd infer` with the same arguments for the answer)"
    ))
}

/// A forward call's output shapes from the notation it ran on (a bound
/// template's, or a builder's), its input shapes giving the extents; `None`
/// when an output has a `1` dim, whose extent a bound notation does not say
/// (layer_norm's `ab1` output is as wide as its input).
fn bound_output_shapes(req: &Request, notation: Option<&str>) -> Option<Vec<Vec<usize>>> {
    if req.direction != Direction::Forward {
        return None;
    }
    let parsed = spmd_core::notation::parse(notation?).ok()?;
    let plan = parsed.plan();
    let has_one = (0..plan.n_outputs()).any(|o| {
        plan.dims_of(plan.output(o))
            .iter()
            .any(|d| matches!(d, spmd_core::notation::Dim::One))
    });
    if has_one {
        return None;
    }
    let (ins, _) = req.parts()?;
    let inputs: Vec<&[usize]> = ins.iter().map(|(shape, _)| shape.as_slice()).collect();
    crate::shapes::output_shapes(&parsed.plan(), &inputs)
}

/// The text `spmd explain` prints for one call.
pub fn explain_text(req: &Request, registry: &Registry) -> Result<String> {
    let (text, _, fail) = explain_one(req, registry)?;
    match fail {
        Some(e) => Err(e),
        None => Ok(text),
    }
}

fn explain_one(req: &Request, registry: &Registry) -> Result<(String, Value, Option<CliError>)> {
    let rule = req.rule(registry)?;
    let mut rec = Recorder::default();
    let Some(answer) = req.run_traced(&rule, &mut rec) else {
        return Err(untraceable(req));
    };
    let rec_notation = rec.notation.take();
    let events = rec.events;
    let labels = match &rule {
        Built::Registered(_, info) => Labels::of(info, req.direction),
        Built::Einsum(_) => Labels::plain(req.direction),
    };
    let (declared, note) = notation(&rule);
    // What this call ran on: the declared notation, or the one a template
    // (or a builder) made for these attributes and ranks.
    let template = declared
        .as_deref()
        .filter(|d| spmd_core::notation::is_template(d));
    let notation = match (&declared, &rec_notation) {
        (Some(d), _) if template.is_none() => Some(d.clone()),
        (_, Some(b)) => Some(b.clone()),
        _ => None,
    };

    let mut s = format!(
        "{} {} on mesh {} ({})\n",
        paint(HEADER, req.source.title()),
        req.direction,
        req.mesh,
        crate::report::devices(req.mesh.size())
    );
    match (&notation, template) {
        (Some(n), Some(t)) => s.push_str(&format!(
            "notation: {n:?} (the template {t:?} bound for this call)\n"
        )),
        (Some(n), None) => s.push_str(&format!("notation: {n:?}\n")),
        _ => {}
    }
    if let Some(n) = &note {
        s.push_str(&paint(DIM, format!("note: {n}\n")));
    }
    // The terms of the notation, inputs then outputs, and the inputs' count.
    let (terms, n_terms_in): (Vec<String>, usize) = notation
        .as_deref()
        .and_then(|n| spmd_core::notation::parse(n).ok())
        .map(|n| {
            let p = n.plan();
            let terms = (0..p.n_inputs() + p.n_outputs())
                .map(|i| format!("`{}`", p.term_text(p.terms[i])))
                .collect();
            (terms, p.n_inputs())
        })
        .unwrap_or_default();
    let term = |t: TensorRef| -> String {
        let k = match t.role {
            Role::Input => t.index,
            Role::Output => n_terms_in + t.index,
        };
        terms.get(k).cloned().unwrap_or_default()
    };
    let show = |s: &mut String, style, e: &Event| {
        s.push_str(&format!("   {}\n", paint(style, e.text(&labels))));
    };

    s.push('\n');
    let merged_what = match req.direction {
        Direction::Forward => {
            "each sharded input dim brings its mesh dims to its axis (inputs in order, dims left to right)"
        }
        Direction::Backward => {
            "each sharded output dim brings its mesh dims to its axis (the inputs' mappings are ignored)"
        }
        Direction::Grad => {
            "each sharded dim of the forward inputs the gradient reads, then of the output grads, brings its mesh dims to its axis"
        }
    };
    s.push_str(&paint(HEADER, format!("1. merge: {merged_what}\n")));
    let merges: Vec<&Event> = events
        .iter()
        .filter(|e| matches!(e, Event::Merged { .. } | Event::Unsharded { .. }))
        .collect();
    for e in &merges {
        let style = if matches!(e, Event::Unsharded { .. }) {
            LOCAL
        } else {
            Default::default()
        };
        show(&mut s, style, e);
    }
    if merges.is_empty() && merges_something(req) {
        // A rule that settles its axes by role traces no merge; what its
        // answer changed is all there is to say.
        s.push_str("   no merge step reported: a rule that settles its axes by role (batch, then free, then contracted axes) reports only the conflicts between free axes and the mesh dims it drops for even shards\n");
        if let Ok(result) = &answer {
            for line in changes(req, result, &labels) {
                s.push_str(&format!("   {}\n", paint(COMM, line)));
            }
        }
    } else if merges.is_empty() {
        s.push_str("   nothing is sharded: nothing to merge\n");
    }
    s.push_str(&paint(
        HEADER,
        "2. conflicts: a mesh dim may split only one axis, and a dropped mesh dim leaves even shards\n",
    ));
    let conflicts: Vec<&Event> = events
        .iter()
        .filter(|e| matches!(e, Event::Conflict { .. } | Event::NotDivisible { .. }))
        .collect();
    if conflicts.is_empty() {
        s.push_str("   none\n");
    }
    for e in &conflicts {
        show(&mut s, COMM, e);
    }
    let mut step = 3;
    if req.direction == Direction::Backward {
        s.push_str(&paint(
            HEADER,
            "3. missing axes: an input axis no output has is replicated on the input\n",
        ));
        let missing: Vec<&Event> = events
            .iter()
            .filter(|e| matches!(e, Event::MissingAxis { .. }))
            .collect();
        if missing.is_empty() {
            s.push_str("   none: every input axis is in an output\n");
        }
        for e in &missing {
            show(&mut s, LOCAL, e);
        }
        step = 4;
    }

    let mut fail = None;
    let report_json;
    match &answer {
        Ok(result) => {
            // A template's outputs: their shapes from the notation it was
            // bound to for this call.
            let shapes = output_shapes(req, &rule, result)
                .or_else(|| bound_output_shapes(req, notation.as_deref()));
            let mut report = Report::new(req, &rule, result.clone(), shapes);
            // Each row's tensor: what it is called, and its term.
            let n_in = req.inputs.len();
            let grads = labels.grad_inputs(n_in);
            let aligned = grads.len() == report.outputs.len();
            let mut rows: Vec<(String, String)> = Vec::new();
            for k in 0..report.inputs.len() {
                let t = if k < n_in {
                    TensorRef::input(k)
                } else {
                    TensorRef::output(k - n_in)
                };
                rows.push((labels.tensor(t), term(t)));
            }
            for (o, r) in report.outputs.iter_mut().enumerate() {
                rows.push(match req.direction {
                    Direction::Grad if aligned => {
                        let j = grads[o];
                        r.shape = req
                            .inputs
                            .get(j)
                            .and_then(Option::as_ref)
                            .map(|t| t.shape.clone());
                        (labels.grad(j), term(TensorRef::input(j)))
                    }
                    Direction::Grad => (format!("grad {o}"), String::new()),
                    _ => (labels.output(o), term(TensorRef::output(o))),
                });
            }
            s.push_str(&paint(
                HEADER,
                format!("{step}. projection: every tensor gets the shardings of its axes\n"),
            ));
            let mut t = Table::new();
            for (r, (label, term)) in report.inputs.iter().chain(&report.outputs).zip(&rows) {
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
                let mut row = vec![label.clone()];
                if !terms.is_empty() {
                    row.push(term.clone());
                }
                row.extend([
                    r.shape.as_deref().map_or("?".into(), shape_text),
                    arrow,
                    what,
                ]);
                t.row(row);
            }
            s.push_str(&t.render("   "));

            let partial_title = if req.direction == Direction::Grad {
                "partial grads"
            } else {
                "partial outputs"
            };
            s.push_str(&paint(HEADER, format!("{}. {partial_title}\n", step + 1)));
            let mut any = false;
            for (o, (r, (label, _))) in report
                .outputs
                .iter()
                .zip(&rows[report.inputs.len()..])
                .enumerate()
            {
                // The partial events of this output (grad: of this input's grad).
                let which = match req.direction {
                    Direction::Grad if aligned => grads[o],
                    _ => o,
                };
                let mut explained = spmd_core::MeshSet::EMPTY;
                for e in &events {
                    if let Event::Partial {
                        output, mesh_dims, ..
                    } = e
                        && *output == which
                        && (req.direction != Direction::Grad || aligned)
                    {
                        show(&mut s, PARTIAL, e);
                        explained = explained.union(*mesh_dims);
                    }
                }
                let partial = &r.result.partial;
                if !partial.is_partial() {
                    continue;
                }
                any = true;
                let rest: Vec<_> = partial
                    .iter()
                    .filter(|(d, _)| !explained.contains(*d))
                    .collect();
                if !rest.is_empty() {
                    let why = match req.direction {
                        Direction::Backward => "the partial status the output was given is kept",
                        _ => "passed on from a partial input the op is linear in",
                    };
                    s.push_str(&format!(
                        "   {}\n",
                        paint(PARTIAL, format!("{label} is partial {partial}: {why}"))
                    ));
                }
                s.push_str(&format!(
                    "   {label}: {} gives the full value\n",
                    reshard::summary(&r.pending)
                ));
            }
            if !any {
                s.push_str("   none: every sharded axis appears in the outputs\n");
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
        "notation": notation,
        "note": note,
        "steps": events.iter().map(|e| e.json(&labels)).collect::<Vec<_>>(),
        "report": report_json,
    });
    Ok((s, value, fail))
}
