//! `spmd ops`: the registered rules.

use std::fmt::Write as _;

use serde_json::{Value, json};

use crate::Output;
use crate::cli::OpsArgs;
use crate::error::{CliError, Result};
use crate::style::{DIM, HEADER, Table, paint};

pub fn ops(args: &OpsArgs) -> Result<Output> {
    let registry = spmd_ops::builtins();
    let infos: Vec<_> =
        match &args.name {
            Some(name) => vec![*registry.get(name).map_err(|e| {
                CliError::usage(format!("{e}; `spmd ops` lists the registered rules"))
            })?],
            None => registry.iter().copied().collect(),
        };
    if args.json {
        let list: Vec<Value> = infos
            .iter()
            .map(|i| {
                json!({
                    "name": i.name,
                    "notations": i.notations,
                    "notation_built_at_run_time": i.notations.is_empty(),
                    "attrs": i.attrs,
                    "ignored_attrs": i.ignored,
                    "attr_types": i.attr_types,
                    "attr_defaults": i.attr_defaults,
                    "inputs": i.inputs,
                    "outputs": i.outputs,
                    "optional_inputs": (0..i.inputs.len()).filter(|&k| i.optional.input(k)).collect::<Vec<_>>(),
                    "optional_outputs": (0..i.outputs.len()).filter(|&k| i.optional.output(k)).collect::<Vec<_>>(),
                    "grad": grad_text(i),
                })
            })
            .collect();
        let v = if args.name.is_some() {
            list.into_iter().next().unwrap_or(Value::Null)
        } else {
            Value::Array(list)
        };
        return Ok(Output::ok(format!("{}\n", crate::report::to_json(&v))));
    }
    let mut t = Table::new();
    t.row(vec![
        paint(HEADER, "op"),
        paint(HEADER, "attributes"),
        paint(HEADER, "notations"),
    ]);
    for i in &infos {
        let notations = if i.notations.is_empty() {
            paint(DIM, "(built at run time)")
        } else {
            i.notations.join("  ")
        };
        let mut attrs = if i.attrs.is_empty() {
            "-".to_string()
        } else {
            i.attrs.join(", ")
        };
        if !i.ignored.is_empty() {
            // Taken, and accepted, but no layout depends on them.
            attrs.push_str(&format!(" (ignored: {})", i.ignored.join(", ")));
        }
        t.row(vec![i.name.to_string(), attrs, notations]);
    }
    let mut s = t.render("");
    if let [one] = infos.as_slice() {
        s.push_str(&signature(one));
    }
    if args.name.is_none() {
        let _ = writeln!(
            s,
            "\n{} rules. Any other notation runs with `spmd einsum NOTATION`; the `einsum` op takes --attr equation=...",
            infos.len()
        );
    }
    Ok(Output::ok(s))
}

/// The full signature of one op: its tensors by name (and which may be
/// absent), its attributes with what they take and their defaults, and the
/// grad op's tensors.
pub fn signature(i: &spmd_core::RuleInfo) -> String {
    let mut s = String::new();
    let tensors = |names: &[&str], optional: &dyn Fn(usize) -> bool| -> String {
        if names.is_empty() {
            return "not named by the rule".to_string();
        }
        let list: Vec<String> = names
            .iter()
            .enumerate()
            .map(|(k, n)| {
                if optional(k) {
                    format!("{n} (optional)")
                } else {
                    n.to_string()
                }
            })
            .collect();
        list.join(", ")
    };
    let _ = writeln!(
        s,
        "\ninputs: {}",
        tensors(i.inputs, &|k| i.optional.input(k))
    );
    let _ = writeln!(
        s,
        "outputs: {}",
        tensors(i.outputs, &|k| i.optional.output(k))
    );
    if i.attrs.is_empty() && i.ignored.is_empty() {
        let _ = writeln!(s, "attributes: none");
    } else {
        let _ = writeln!(s, "attributes:");
    }
    for (k, a) in i.attrs.iter().enumerate() {
        let ty = i.attr_types.get(k).copied().unwrap_or("a value");
        let default = match i.attr_defaults.get(k).copied().flatten() {
            None => "required".to_string(),
            Some("") => "default: its type's default".to_string(),
            Some(text) => format!("default: {text}"),
        };
        let _ = writeln!(s, "  {a}: {ty} ({default})");
    }
    for a in i.ignored {
        let _ = writeln!(s, "  {a}: accepted, and no layout depends on it");
    }
    if let [n] = i.notations
        && spmd_core::notation::is_template(n)
    {
        let _ = writeln!(
            s,
            "notation: a template, bound per call by the attributes and the inputs' ranks (`spmd explain` shows the bound notation)"
        );
    }
    let _ = writeln!(s, "grad op takes: {}", grad_text(i));
    s
}

/// What the grad op takes, by name where the rule names its tensors.
fn grad_text(i: &spmd_core::RuleInfo) -> String {
    use spmd_core::GradTensor;
    let input = |k: usize| {
        i.inputs
            .get(k)
            .map_or(format!("input {k}"), |n| n.to_string())
    };
    let output = |k: usize| {
        i.outputs
            .get(k)
            .map_or(format!("output {k}"), |n| n.to_string())
    };
    let tensors = match i.grad.tensors {
        None => "the forward inputs".to_string(),
        Some([]) => "no forward tensor".to_string(),
        Some(ts) => ts
            .iter()
            .map(|t| match *t {
                GradTensor::Input(k) => input(k.into()),
                GradTensor::Output(k) => output(k.into()),
            })
            .collect::<Vec<_>>()
            .join(", "),
    };
    let grads = match i.grad.grads {
        None => "a grad per output".to_string(),
        Some(gs) => gs
            .iter()
            .map(|&o| format!("{}'s grad", output(o.into())))
            .collect::<Vec<_>>()
            .join(", "),
    };
    let no_grad: Vec<String> = (0..64)
        .filter(|&k| i.no_grad.contains(k))
        .map(input)
        .collect();
    if no_grad.is_empty() {
        format!("{tensors}; {grads}")
    } else {
        format!("{tensors}; {grads} (no grad for {})", no_grad.join(", "))
    }
}
