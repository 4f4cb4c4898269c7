//! Annotation files: a sharding plan written apart from the graph, as
//! tensor-name patterns and the layouts they get, so a user can try plans
//! on an exported model without editing it.
//!
//! ```json
//! {
//!   "mesh": [2, 4],
//!   "annotations": [
//!     {"tensors": "model.layers.*.self_attn.q_proj.weight", "dims_mapping": [1, -1]},
//!     {"tensors": "input_ids", "dims_mapping": [0, -1]}
//!   ]
//! }
//! ```
//!
//! - `mesh` (optional) replaces the graph's mesh.
//! - `annotations`: in `tensors`, `*` stands for any run of characters
//!   (dots included), everything else for itself; `dims_mapping`,
//!   `partial_dims` and `priority` are a graph tensor's annotation fields;
//!   `read` (a dims mapping) is the layout every op that reads the tensor
//!   is given, the tensor itself keeping its own: `{"tensors": "*.weight",
//!   "dims_mapping": [0, -1], "read": [-1, -1]}` stores weights split and
//!   gathers each where it is used (ZeRO-3); `read_by` (op name to dims
//!   mapping) gives single readers their own.
//!   Every pattern must match a tensor, and no tensor may match two
//!   patterns: a plan that silently annotates nothing, or annotates one
//!   tensor twice, is an error that names the pattern.

use serde::{Deserialize, Serialize};
use spmd_core::json::Mapping;

use crate::error::GraphError;
use crate::json::GraphFile;

/// A plan file (see the module docs).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnnotationFile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mesh: Option<Vec<usize>>,
    pub annotations: Vec<Annotation>,
}

impl AnnotationFile {
    /// Reads a plan file's text. A file that is a list of entries rather
    /// than an object gets a message that says where they go, not serde's.
    pub fn from_json(text: &str) -> Result<AnnotationFile, String> {
        if text.trim_start().starts_with('[') {
            return Err(
                "a plan file is an object, `{\"annotations\": [...]}` (and optionally `\"mesh\"`), not a list: put the entries under \"annotations\""
                    .into(),
            );
        }
        crate::json::parse(text)
    }
}

/// The tensors one pattern names, and their annotation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Annotation {
    pub tensors: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dims_mapping: Option<Mapping>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partial_dims: Vec<u8>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read: Option<Mapping>,
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub read_by: std::collections::BTreeMap<String, Mapping>,
}

/// Annotates `graph` as `plan` says; how many tensors it annotated.
///
/// ```
/// use spmd_graph::annotations::{AnnotationFile, apply};
/// use spmd_graph::json::GraphFile;
///
/// let mut graph: GraphFile = serde_json::from_str(r#"{"mesh": [4],
///   "tensors": [{"name": "l.0.w", "shape": [8, 8]}, {"name": "l.1.w", "shape": [8, 8]},
///               {"name": "x", "shape": [2, 8]}],
///   "ops": []}"#)?;
/// let plan: AnnotationFile = serde_json::from_str(r#"{"mesh": [2, 2],
///   "annotations": [{"tensors": "l.*.w", "dims_mapping": [-1, 1]}]}"#)?;
/// assert_eq!(apply(&mut graph, &plan)?, 2);
/// assert_eq!(graph.mesh, [2, 2]);
/// assert!(graph.tensors[2].dims_mapping.is_none());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn apply(graph: &mut GraphFile, plan: &AnnotationFile) -> Result<usize, GraphError> {
    apply_with(graph, plan, Overrides::Refuse)
}

/// What [`apply_with`] does with a planned layout for a tensor the graph
/// file annotates differently already.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overrides {
    /// An error naming the tensor and both layouts ([`apply`]): a plan
    /// adds annotations, it does not silently change one.
    Refuse,
    /// The plan's layout replaces the graph's (`spmd propagate --override`).
    Allow,
}

/// [`apply`], choosing what a plan entry that changes one of the graph
/// file's own annotations does.
pub fn apply_with(
    graph: &mut GraphFile,
    plan: &AnnotationFile,
    overrides: Overrides,
) -> Result<usize, GraphError> {
    if let Some(mesh) = &plan.mesh {
        graph.mesh = mesh.clone();
    }
    // The mesh the planned layouts are checked against, built once.
    let mesh = spmd_core::Mesh::new(&graph.mesh)?;
    // Which pattern annotated each tensor, to refuse a second.
    let mut by: Vec<Option<usize>> = vec![None; graph.tensors.len()];
    for (k, a) in plan.annotations.iter().enumerate() {
        let mut matched = 0;
        for (t, tensor) in graph.tensors.iter_mut().enumerate() {
            if !matches(&a.tensors, &tensor.name) {
                continue;
            }
            if let Some(first) = by[t] {
                return Err(GraphError::BadPlan {
                    pattern: a.tensors.clone(),
                    message: format!(
                        "tensor `{}` is annotated already, by pattern `{}`",
                        tensor.name, plan.annotations[first].tensors
                    ),
                });
            }
            by[t] = Some(k);
            let bad = |message: String| GraphError::BadPlan {
                pattern: a.tensors.clone(),
                message,
            };
            // The plan's layout checked here, so that its errors name the
            // plan's pattern, not the graph file.
            let planned = crate::json::annotation(
                &mesh,
                &tensor.name,
                &tensor.shape,
                &a.dims_mapping,
                &a.partial_dims,
            )
            .map_err(|e| bad(e.to_string()))?;
            for read in a.read.iter().chain(a.read_by.values()) {
                let attr = crate::json::annotation(
                    &mesh,
                    &tensor.name,
                    &tensor.shape,
                    &Some(read.clone()),
                    &[],
                )
                .map_err(|e| bad(e.to_string()))?;
                if let Some(attr) = attr {
                    crate::graph::check_read(&mesh, &tensor.name, &tensor.shape, &attr)
                        .map_err(|e| bad(e.to_string()))?;
                }
            }
            // A graph's own annotation stays unless the plan says the same.
            let own = crate::json::annotation(
                &mesh,
                &tensor.name,
                &tensor.shape,
                &tensor.dims_mapping,
                &tensor.partial_dims,
            )
            .ok()
            .flatten();
            if let Some(own) = own
                && planned.as_ref() != Some(&own)
                && overrides == Overrides::Refuse
            {
                return Err(bad(format!(
                    "tensor `{}` is annotated {own} in the graph file; a plan may add annotations but not change one (pass --override to let the plan win, or remove it from one of the two files)",
                    tensor.name
                )));
            }
            tensor.dims_mapping = a.dims_mapping.clone();
            tensor.partial_dims = a.partial_dims.clone();
            tensor.priority = a.priority;
            tensor.read = a.read.clone();
            tensor.read_by = a.read_by.clone();
            matched += 1;
        }
        if matched == 0 {
            return Err(GraphError::BadPlan {
                pattern: a.tensors.clone(),
                message: "matches no tensor of the graph".into(),
            });
        }
    }
    Ok(by.iter().filter(|b| b.is_some()).count())
}

/// Whether `name` is `pattern`, each `*` standing for any run of characters
/// (how a plan file's `tensors` names tensors).
pub fn matches(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = name.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        // No `*`: the whole name.
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stars_match_any_run_and_the_rest_itself() {
        assert!(matches("input_ids", "input_ids"));
        assert!(!matches("input_ids", "input_ids2"));
        assert!(matches(
            "*.q_proj.weight",
            "model.layers.0.self_attn.q_proj.weight"
        ));
        assert!(matches(
            "model.*.q_proj.*",
            "model.layers.1.self_attn.q_proj.weight"
        ));
        assert!(!matches(
            "model.*.q_proj.*",
            "model.layers.1.self_attn.k_proj.weight"
        ));
        assert!(matches("*", "anything"));
        assert!(matches("a*b*c", "abc"));
        assert!(!matches("a*bc*c", "abc"));
        // The last part must fit after the middle ones.
        assert!(!matches("ab*b", "ab"));
    }

    fn graph() -> GraphFile {
        serde_json::from_str(
            r#"{"mesh": [4], "ops": [],
              "tensors": [{"name": "a.w", "shape": [4]}, {"name": "b.w", "shape": [4]}]}"#,
        )
        .unwrap()
    }

    #[test]
    fn a_pattern_that_matches_nothing_or_twice_is_an_error() {
        let plan = |json: &str| -> AnnotationFile { serde_json::from_str(json).unwrap() };
        let e = apply(
            &mut graph(),
            &plan(r#"{"annotations": [{"tensors": "c.*", "dims_mapping": [0]}]}"#),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "plan pattern `c.*`: matches no tensor of the graph"
        );
        let e = apply(
            &mut graph(),
            &plan(
                r#"{"annotations": [{"tensors": "*.w", "dims_mapping": [0]},
                                    {"tensors": "a.*", "dims_mapping": [-1]}]}"#,
            ),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "plan pattern `a.*`: tensor `a.w` is annotated already, by pattern `*.w`"
        );
    }

    #[test]
    fn a_read_layout_is_checked_and_reaches_the_graph() {
        let plan = |json: &str| -> AnnotationFile { serde_json::from_str(json).unwrap() };
        let mut g = graph();
        apply(
            &mut g,
            &plan(r#"{"annotations": [{"tensors": "a.w", "dims_mapping": [0], "read": [-1]}]}"#),
        )
        .unwrap();
        assert!(g.tensors[0].read.is_some());
        assert_eq!(g.tensors[1].read, None);
        let built = crate::json::from_file(&g, &spmd_ops_free_registry())
            .unwrap()
            .graph;
        let a = built.find("a.w").unwrap();
        assert_eq!(built.tensor(a).read.as_ref().unwrap().to_string(), "[-1]");
        // The graph file written back keeps it.
        assert_eq!(
            crate::json::to_file(&built, &[], None).tensors[0].read,
            g.tensors[0].read
        );
        let e = apply(
            &mut graph(),
            &plan(r#"{"annotations": [{"tensors": "b.w", "dims_mapping": [0], "read": [3]}]}"#),
        )
        .unwrap_err();
        assert!(e.to_string().starts_with("plan pattern `b.w`: "), "{e}");
        assert!(e.to_string().contains("mesh dim 3"), "{e}");
    }

    #[test]
    fn a_partial_read_layout_is_refused() {
        let built = crate::json::from_file(&graph(), &spmd_ops_free_registry())
            .unwrap()
            .graph;
        let mut built = built;
        let a = built.find("a.w").unwrap();
        let partial = spmd_core::DistAttr::replicated(1).with_partial(spmd_core::Partial::over(
            spmd_core::MeshSet::EMPTY.with(0),
            spmd_core::ReduceType::Sum,
        ));
        let e = built.set_read(a, Some(partial)).unwrap_err();
        assert!(e.to_string().contains("partial"), "{e}");
        let whole = spmd_core::DistAttr::replicated(1);
        built.set_read(a, Some(whole.clone())).unwrap();
        assert_eq!(built.tensor(a).read, Some(whole));
        built.set_read(a, None).unwrap();
        assert_eq!(built.tensor(a).read, None);
    }

    /// A registry without ops: the test graphs have none.
    fn spmd_ops_free_registry() -> spmd_core::Registry {
        spmd_core::Registry::new()
    }

    #[test]
    fn a_reader_s_own_layout_names_an_op_that_reads_the_tensor() {
        let graph = || -> GraphFile {
            serde_json::from_str(
                r#"{"mesh": [4], "tensors": [{"name": "x", "shape": [8]}, {"name": "y", "shape": [8]}],
                  "ops": [{"name": "r", "op": "relu", "inputs": ["x"], "outputs": ["y"]}]}"#,
            )
            .unwrap()
        };
        let registry = spmd_ops_builtins();
        let load = |plan: &str| {
            let mut g = graph();
            let plan: AnnotationFile = serde_json::from_str(plan).unwrap();
            apply(&mut g, &plan).map_err(|e| e.to_string())?;
            crate::json::from_file(&g, &registry)
                .map(|l| l.graph)
                .map_err(|e| e.to_string())
        };
        let g = load(
            r#"{"annotations": [{"tensors": "x", "dims_mapping": [0], "read_by": {"r": [-1]}}]}"#,
        )
        .unwrap();
        let (x, r) = (g.find("x").unwrap(), g.find_op("r").unwrap());
        assert_eq!(
            g.tensor(x).read_by,
            [(r, spmd_core::DistAttr::replicated(1))]
        );
        let attrs = vec![spmd_core::DistAttr::replicated(1); 2];
        assert_eq!(g.seen(r, x, &attrs), &spmd_core::DistAttr::replicated(1));
        // Written back, the graph file names the op.
        let file = crate::json::to_file(&g, &[], None);
        assert_eq!(file.tensors[0].read_by.keys().collect::<Vec<_>>(), ["r"]);
        let e = load(
            r#"{"annotations": [{"tensors": "x", "dims_mapping": [0], "read_by": {"s": [-1]}}]}"#,
        )
        .unwrap_err();
        assert!(e.contains("no such op"), "{e}");
        let e = load(
            r#"{"annotations": [{"tensors": "y", "dims_mapping": [0], "read_by": {"r": [-1]}}]}"#,
        )
        .unwrap_err();
        assert!(e.contains("does not read it"), "{e}");
    }

    /// The built-in rules, for graphs with ops (spmd-ops is a dev
    /// dependency).
    fn spmd_ops_builtins() -> spmd_core::Registry {
        spmd_ops::builtins()
    }
}
