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
            paint(DIM, "(built at run time from the attributes)")
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
    if args.name.is_none() {
        let _ = writeln!(
            s,
            "\n{} rules. Any other notation runs with `spmd einsum NOTATION`; the `einsum` op takes --attr equation=...",
            infos.len()
        );
    }
    Ok(Output::ok(s))
}
