//! A graph file, optionally annotated from a plan file first: what
//! `propagate` and `check` read.

use spmd_core::Registry;
use spmd_graph::json::{self, GraphFile, Loaded};
use spmd_graph::{GraphError, annotations};

use crate::call::{display_path, read_input};
use crate::error::{CliError, Result};

/// The graph at `graph` (`-` = stdin, `.json.gz` read as `.json`) with the
/// plan file at `plan` applied (`overrides`: whether it may change the
/// graph's own annotations): the file as annotated, and the graph built.
pub fn load(
    graph: &str,
    plan: Option<&str>,
    overrides: annotations::Overrides,
    registry: &Registry,
) -> Result<(GraphFile, Loaded)> {
    let text = read_input(graph)?;
    let mut file: GraphFile = json::parse(&text)
        .map_err(|e| CliError::usage(format!("{}: graph JSON: {e}", display_path(graph))))?;
    if let Some(plan_path) = plan {
        let plan = annotations::AnnotationFile::from_json(&read_input(plan_path)?)
            .map_err(|e| CliError::usage(format!("{}: plan JSON: {e}", display_path(plan_path))))?;
        annotations::apply_with(&mut file, &plan, overrides)
            .map_err(|e| CliError::usage(format!("{}: {e}", display_path(plan_path))))?;
    }
    let loaded = json::from_file(&file, registry).map_err(|e| in_graph(graph, e))?;
    Ok((file, loaded))
}

/// A graph error, prefixed with the file it is about.
pub fn in_graph(graph: &str, e: GraphError) -> CliError {
    CliError::usage(format!("{}: {e}", display_path(graph)))
}

/// `--override` as the annotations' choice.
pub fn overrides(allow: bool) -> annotations::Overrides {
    if allow {
        annotations::Overrides::Allow
    } else {
        annotations::Overrides::Refuse
    }
}
