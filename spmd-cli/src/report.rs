//! The answer of one call, as a terminal report or JSON: every input's given
//! and required layout with the reshard between them, every output with its
//! partial status and what finishes it.

use serde::Serialize;
use serde_json::{Value, json};
use spmd_conformance::{Agreement, Direction, Mismatch};
use spmd_core::json::{Expect, Outcome};
use spmd_core::{DistAttr, Mesh, RuleResult};

use crate::call::{Built, Request, Slot};
use crate::layout;
use crate::parse::{TensorArg, shape_text};
use crate::reshard::{self, Step};
use crate::shapes;
use crate::style::{self, COMM, DIM, HEADER, LOCAL, OK, PARTIAL, Table, paint};

/// One tensor of the answer.
#[derive(Clone, Debug)]
pub struct TensorRow {
    /// `input 0`, `output 0`, `out_grad 0`, `x_grad 0`.
    pub label: String,
    pub shape: Option<Vec<usize>>,
    /// What the caller gave (None: not given, or ignored by the rule).
    pub given: Option<DistAttr>,
    /// What the rule answers: the requirement of an input, the attr of an output.
    pub result: DistAttr,
    /// From `given` to `result`.
    pub reshard: Vec<Step>,
    /// What finishes a partial `result` (all-reduces).
    pub pending: Vec<Step>,
    /// An absent optional tensor: its row says so and nothing more (the
    /// rule's answer for it is a placeholder, never shown).
    pub absent: bool,
}

impl TensorRow {
    fn absent(label: String) -> TensorRow {
        TensorRow {
            label,
            shape: None,
            given: None,
            result: DistAttr::default(),
            reshard: Vec::new(),
            pending: Vec::new(),
            absent: true,
        }
    }
}

/// The answer of one call.
pub struct Report {
    pub title: String,
    pub id: Option<String>,
    pub direction: Direction,
    pub mesh: Mesh,
    pub attrs: Vec<(String, String)>,
    /// Requirements: forward and backward inputs; for grad, the inputs then the output grads.
    pub inputs: Vec<TensorRow>,
    /// Outputs; for grad, the input grads.
    pub outputs: Vec<TensorRow>,
    pub result: RuleResult,
    pub check: Option<std::result::Result<Agreement, Mismatch>>,
    /// Notes (how output shapes were found, ...).
    pub notes: Vec<String>,
}

fn row(
    mesh: &Mesh,
    label: String,
    shape: Option<Vec<usize>>,
    given: Option<DistAttr>,
    result: &DistAttr,
) -> TensorRow {
    let reshard = given
        .as_ref()
        .map(|g| match &shape {
            Some(sh) => reshard::classify_sized(g, result, sh, mesh.shape()),
            None => reshard::classify(g, result),
        })
        .unwrap_or_default();
    TensorRow {
        label,
        shape,
        given,
        pending: reshard::finish_partial(result),
        result: result.clone(),
        reshard,
        absent: false,
    }
}

/// The row of a tensor slot the caller filled: absent, or the tensor with
/// its attr as given (when `with_given`) and the rule's answer.
fn slot_row(
    mesh: &Mesh,
    label: String,
    slot: Option<&TensorArg>,
    with_given: bool,
    result: &DistAttr,
) -> TensorRow {
    match slot {
        None => TensorRow::absent(label),
        Some(t) => row(
            mesh,
            label,
            Some(t.shape.clone()),
            with_given.then(|| t.attr()),
            result,
        ),
    }
}

type Rows = (Vec<TensorRow>, Vec<TensorRow>);

fn forward_rows(req: &Request, result: &RuleResult, out_shapes: Option<Vec<Vec<usize>>>) -> Rows {
    let inputs = req
        .inputs
        .iter()
        .zip(&result.inputs)
        .enumerate()
        .map(|(i, (t, r))| slot_row(&req.mesh, format!("input {i}"), t.as_ref(), true, r))
        .collect();
    let outputs = result
        .outputs
        .iter()
        .enumerate()
        .map(|(o, r)| {
            let shape = out_shapes.as_ref().and_then(|s| s.get(o).cloned());
            row(&req.mesh, format!("output {o}"), shape, None, r)
        })
        .collect();
    (inputs, outputs)
}

/// Backward inputs count as given only with a mapping (the rule reads
/// their shapes alone).
fn backward_rows(req: &Request, result: &RuleResult) -> Rows {
    let inputs = req
        .inputs
        .iter()
        .zip(&result.inputs)
        .enumerate()
        .map(|(i, (t, r))| {
            let mapped = t.as_ref().is_some_and(|t| t.mapping.is_some());
            slot_row(&req.mesh, format!("input {i}"), t.as_ref(), mapped, r)
        })
        .collect();
    let outputs = req
        .outputs
        .iter()
        .zip(&result.outputs)
        .enumerate()
        .map(|(o, (t, r))| slot_row(&req.mesh, format!("output {o}"), t.as_ref(), true, r))
        .collect();
    (inputs, outputs)
}

/// Grad: the grad op's inputs (forward inputs, then output grads), and the
/// input grads, tied to their inputs only when there is one per input.
fn grad_rows(req: &Request, result: &RuleResult) -> Rows {
    let n_in = req.inputs.len();
    let given: Vec<&Slot> = req.inputs.iter().chain(&req.outputs).collect();
    let inputs = result
        .inputs
        .iter()
        .enumerate()
        .map(|(k, r)| {
            let label = if k < n_in {
                format!("input {k}")
            } else {
                format!("out_grad {}", k - n_in)
            };
            match given.get(k) {
                Some(t) => slot_row(&req.mesh, label, t.as_ref(), true, r),
                // Past the given tensors: the rule answers more than it took.
                None => row(&req.mesh, label, None, None, r),
            }
        })
        .collect();
    let aligned = result.outputs.len() == n_in;
    let outputs = result
        .outputs
        .iter()
        .enumerate()
        .map(|(o, r)| match req.inputs.get(o) {
            // An absent input has no grad: the answer is a placeholder.
            Some(None) if aligned => TensorRow::absent(format!("input {o} grad")),
            Some(Some(t)) if aligned => row(
                &req.mesh,
                format!("input {o} grad"),
                Some(t.shape.clone()),
                None,
                r,
            ),
            _ => row(&req.mesh, format!("grad {o}"), None, None, r),
        })
        .collect();
    (inputs, outputs)
}

/// Why the report's input grads are not tied to inputs, when they are not.
fn grad_notes(req: &Request, result: &RuleResult) -> Vec<String> {
    let n_in = req.inputs.len();
    if req.direction != Direction::Grad || result.outputs.is_empty() || result.outputs.len() == n_in
    {
        return Vec::new();
    }
    let mut notes = vec![format!(
        "the rule returns {} grad(s) for {} input(s) (inputs without a gradient are skipped); the core does not say which input each belongs to",
        result.outputs.len(),
        n_in
    )];
    if req.has_absent() {
        notes.push(
            "an absent input has no grad: the rule answers a placeholder in its place, and which grad above that is cannot be told here"
                .into(),
        );
    }
    notes
}

/// Forward outputs answered `[]` when a tensor is absent: an output that
/// exists only with an absent input (rotary embedding's `out_k`) gets that
/// placeholder, and the core does not say which outputs those are.
fn placeholder_note(req: &Request, result: &RuleResult) -> Option<String> {
    if req.direction != Direction::Forward || !req.has_absent() {
        return None;
    }
    let empty: Vec<String> = result
        .outputs
        .iter()
        .enumerate()
        .filter(|(_, r)| r.dims_mapping.rank() == 0 && !r.partial.is_partial())
        .map(|(o, _)| format!("output {o}"))
        .collect();
    (!empty.is_empty()).then(|| {
        format!(
            "{} answered `[]`, which is also what a rule answers for an output that exists only with an absent input (the core does not say which of the two this is)",
            empty.join(", ")
        )
    })
}

impl Report {
    /// Builds the report of a successful call.
    pub fn new(
        req: &Request,
        rule: &Built,
        result: RuleResult,
        out_shapes: Option<Vec<Vec<usize>>>,
    ) -> Report {
        let (inputs, outputs) = match req.direction {
            Direction::Forward => forward_rows(req, &result, out_shapes),
            Direction::Backward => backward_rows(req, &result),
            Direction::Grad => grad_rows(req, &result),
        };
        let mut notes = grad_notes(req, &result);
        notes.extend(placeholder_note(req, &result));
        let _ = rule;
        Report {
            title: req.source.title(),
            id: req.id.clone(),
            direction: req.direction,
            mesh: req.mesh.clone(),
            attrs: req
                .source
                .attrs()
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            check: req
                .expectation
                .as_ref()
                .map(|e| e.check(&Ok(result.clone()))),
            inputs,
            outputs,
            result,
            notes,
        }
    }

    /// The terminal report.
    pub fn text(&self) -> String {
        let mut s = String::new();
        let mut head = format!(
            "{} {} on mesh {} ({})",
            paint(HEADER, &self.title),
            self.direction,
            self.mesh,
            crate::report::devices(self.mesh.size())
        );
        if !self.attrs.is_empty() {
            let a: Vec<String> = self.attrs.iter().map(|(k, v)| format!("{k}={v}")).collect();
            head.push_str(&format!(", {}", a.join(" ")));
        }
        if let Some(id) = &self.id {
            head = format!("{}: {head}", paint(HEADER, id));
        }
        s.push_str(&head);
        s.push('\n');

        let (in_title, result_col) = match self.direction {
            Direction::Grad => ("grad op inputs", "required"),
            _ => ("inputs", "required"),
        };
        s.push('\n');
        s.push_str(&self.table(in_title, result_col, &self.inputs, false));
        let out_title = if self.direction == Direction::Grad {
            "input grads"
        } else {
            "outputs"
        };
        let out_col = if self.direction == Direction::Backward {
            "result"
        } else {
            "attr"
        };
        s.push('\n');
        s.push_str(&self.table(out_title, out_col, &self.outputs, true));
        for n in &self.notes {
            s.push_str(&format!("\n{}\n", paint(DIM, format!("note: {n}"))));
        }
        if let Some(check) = &self.check {
            s.push('\n');
            s.push_str(&check_line(check));
            s.push('\n');
        }
        s
    }

    fn table(&self, title: &str, result_col: &str, rows: &[TensorRow], outputs: bool) -> String {
        let mut t = Table::new();
        let any_given = rows.iter().any(|r| r.given.is_some());
        let mut header = vec![paint(HEADER, title), paint(HEADER, "shape")];
        if any_given {
            header.push(paint(HEADER, "given"));
        }
        header.push(paint(HEADER, result_col));
        header.push(paint(HEADER, "local"));
        // The last column: what a given tensor needs (inputs), or whether an
        // output is partial and what finishes it.
        if outputs && any_given {
            header.push(paint(HEADER, "notes"));
        } else if outputs {
            header.push(paint(HEADER, "partial"));
        } else if any_given {
            header.push(paint(HEADER, "reshard"));
        }
        let width = header.len();
        t.row(header);
        for r in rows {
            if r.absent {
                t.row(absent_cells(r, width));
                continue;
            }
            let mut cells = vec![
                r.label.clone(),
                r.shape.as_deref().map_or("?".into(), shape_text),
            ];
            if any_given {
                cells.push(r.given.as_ref().map_or("-".into(), |g| g.to_string()));
            }
            cells.push(if r.result.partial.is_partial() {
                paint(PARTIAL, &r.result)
            } else {
                r.result.to_string()
            });
            cells.push(r.shape.as_deref().map_or("?".into(), |sh| {
                shape_text(&layout::local_shape(&self.mesh, sh, &r.result))
            }));
            let mut last: Vec<String> = Vec::new();
            if r.given.is_some() {
                let verb = if outputs { "corrected: " } else { "" };
                for (i, step) in r.reshard.iter().enumerate() {
                    let text = format!("{}{step}", if i == 0 { verb } else { "then " });
                    last.push(paint(if step.communicates() { COMM } else { LOCAL }, text));
                }
                if r.reshard.is_empty() {
                    last.push(paint(OK, if outputs { "as given" } else { "none" }));
                }
            }
            if outputs {
                let (yes, no) = if r.given.is_some() {
                    ("partial: ", None)
                } else {
                    ("yes: ", Some("no"))
                };
                for step in &r.pending {
                    last.push(paint(PARTIAL, format!("{yes}{step} gives the full value")));
                }
                if let (true, Some(no)) = (r.pending.is_empty(), no) {
                    last.push(paint(OK, no));
                }
            }
            let mut last = last.into_iter();
            if let Some(first) = last.next() {
                cells.push(first);
            }
            t.row(cells);
            for more in last {
                let mut cont = vec![String::new(); width - 1];
                cont.push(more);
                t.row(cont);
            }
        }
        t.render("")
    }

    /// The JSON form.
    pub fn json(&self) -> Value {
        let rows = |rows: &[TensorRow]| -> Vec<Value> {
            rows.iter()
                .map(|r| {
                    if r.absent {
                        return absent_json(r);
                    }
                    json!({
                        "name": r.label,
                        "absent": false,
                        "shape": r.shape,
                        "given": r.given.as_ref().map(Expect::from_attr),
                        "result": Expect::from_attr(&r.result),
                        "local_shape": r.shape.as_deref().map(|sh| layout::local_shape(&self.mesh, sh, &r.result)),
                        "reshard": r.reshard,
                        "pending": r.pending,
                    })
                })
                .collect()
        };
        let attrs: serde_json::Map<String, Value> = self
            .attrs
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        let mut v = json!({
            "op": self.title,
            "direction": self.direction,
            "mesh_shape": self.mesh.shape(),
            "attrs": attrs,
            "result": self.result_json(),
            "inputs": rows(&self.inputs),
            "outputs": rows(&self.outputs),
        });
        if let Some(id) = &self.id {
            v["id"] = json!(id);
        }
        if let Some(check) = &self.check {
            v["check"] = check_json(check);
        }
        if !self.notes.is_empty() {
            v["notes"] = json!(self.notes);
        }
        v
    }

    /// The answer in the conformance schema's `expected` form, `null` in the
    /// slots of absent tensors (the schema's absent), not their placeholders.
    fn result_json(&self) -> Value {
        let mut outcome = Outcome::from_result(&self.result);
        for (slots, rows) in [
            (&mut outcome.inputs, &self.inputs),
            (&mut outcome.outputs, &self.outputs),
        ] {
            // Rows are in the result's order, from its first entry.
            for (slot, r) in slots.iter_mut().zip(rows) {
                if r.absent {
                    *slot = None;
                }
            }
        }
        json!(outcome)
    }
}

/// A table row saying the tensor is absent: no shape, attr, local block or
/// reshard to show.
fn absent_cells(r: &TensorRow, width: usize) -> Vec<String> {
    let mut cells = vec![r.label.clone(), paint(DIM, "absent")];
    cells.resize(width, paint(DIM, "-"));
    cells
}

fn absent_json(r: &TensorRow) -> Value {
    json!({
        "name": r.label,
        "absent": true,
        "shape": null,
        "given": null,
        "result": null,
        "local_shape": null,
        "reshard": [],
        "pending": [],
    })
}

/// `expected: matches` / `expected: differs: ...`.
pub fn check_line(check: &std::result::Result<Agreement, Mismatch>) -> String {
    match check {
        Ok(Agreement::Expected) => paint(OK, "expected: matches"),
        Ok(Agreement::Alternative(i)) => paint(OK, format!("expected: matches alternative {i}")),
        Err(m) => paint(style::BAD, format!("expected: differs: {m}")),
    }
}

pub fn check_json(check: &std::result::Result<Agreement, Mismatch>) -> Value {
    match check {
        Ok(Agreement::Expected) => json!({"passed": true, "matched": "expected"}),
        Ok(Agreement::Alternative(i)) => {
            json!({"passed": true, "matched": format!("alternative {i}")})
        }
        Err(m) => json!({"passed": false, "details": m.details}),
    }
}

/// Output shapes, when a notation for the call is known and every input is
/// present (a notation's shapes need all its inputs).
pub fn output_shapes(
    req: &Request,
    rule: &Built,
    notation: Option<&str>,
) -> Option<Vec<Vec<usize>>> {
    if req.direction != Direction::Forward {
        return None;
    }
    let shapes: Vec<&[usize]> = req
        .inputs
        .iter()
        .map(|t| t.as_ref().map(|t| t.shape.as_slice()))
        .collect::<Option<_>>()?;
    match rule {
        Built::Einsum(e) => shapes::output_shapes(&e.notation().plan(), &shapes),
        Built::Registered(..) => {
            let n = spmd_core::notation::parse(notation?).ok()?;
            shapes::output_shapes(&n.plan(), &shapes)
        }
    }
}

/// Serializes anything to a pretty JSON string.
/// "1 device", "8 devices".
pub fn devices(n: usize) -> String {
    if n == 1 {
        "1 device".to_string()
    } else {
        format!("{n} devices")
    }
}

pub fn to_json<T: Serialize>(v: &T) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}
