//! The graph JSON format:
//!
//! ```json
//! {
//!   "mesh": [2, 4],
//!   "dtype": "bf16",
//!   "tensors": [
//!     {"name": "x", "shape": [8, 64]},
//!     {"name": "w", "shape": [64, 256], "dims_mapping": [-1, 1], "param": true},
//!     {"name": "y", "shape": [8, 256]}
//!   ],
//!   "ops": [
//!     {"name": "fc", "op": "matmul", "attrs": {"trans_y": false}, "inputs": ["x", "w"], "outputs": ["y"]}
//!   ],
//!   "outputs": ["y"]
//! }
//! ```
//!
//! - `tensors`: every tensor with its global shape; `dims_mapping` (Paddle's
//!   form, or nested lists for co-sharding) and `partial_dims` annotate it,
//!   `priority` ranks the annotation (0, the default, propagates first);
//!   `param` marks a trainable weight (it gets a gradient in the backward
//!   graph); `dtype` is the element type as the producer named it
//!   (informational); `init` says what a constant the graph creates holds
//!   (`{"full": 1.0}`, `{"arange": {"start": 0, "step": 1}}`: informational,
//!   for the plan simulator, which otherwise makes up values).
//! - `ops`: in a topological order; `op` is a registry name, `attrs` the
//!   rule's attributes; `name` is optional. Every op whose name has no rule
//!   is reported at once ([`GraphError::MissingRules`]), never replicated
//!   silently. `inputs` holds one entry per input slot of the rule, `null`
//!   for an absent optional one (`"inputs": ["x", null, null]`: ATen's
//!   `native_layer_norm` without weight and bias). A grad op has
//!   `"forward_inputs": n` (its first `n` entries are the forward op's
//!   inputs, the rest output grads, which are never `null`).
//! - `outputs` (optional): where the backward graph is seeded; by default
//!   every produced tensor no op reads.
//! - `dtype` (optional): the element type for volumes (default `f32`).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use spmd_core::json::Mapping;
use spmd_core::{AttrValue, Attrs, DistAttr, MeshSet, Partial, ReduceType, Registry};

use crate::error::GraphError;
use crate::graph::{Graph, GraphBuilder, OpKind, TensorId};
use crate::reshard::DType;

/// A graph file, as written.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GraphFile {
    pub mesh: Vec<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dtype: Option<DType>,
    pub tensors: Vec<TensorEntry>,
    pub ops: Vec<OpEntry>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outputs: Vec<String>,
}

/// One tensor of a [`GraphFile`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TensorEntry {
    pub name: String,
    pub shape: Vec<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dims_mapping: Option<Mapping>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partial_dims: Vec<u8>,
    /// The annotation's priority (0, the default, first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u32>,
    /// The layout every op that reads it is given (a dims mapping, never
    /// partial): the tensor keeps its own, and is resharded where read
    /// (see [`TensorInfo::read`](crate::graph::TensorInfo::read)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read: Option<Mapping>,
    /// Per op that reads it (by name), the layout that op is given instead
    /// (see [`TensorInfo::read_by`](crate::graph::TensorInfo::read_by)).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub read_by: std::collections::BTreeMap<String, Mapping>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub param: bool,
    /// The element type as the producer wrote it (`float32`, `int64`,
    /// `bool`: torch's names, from `tools/torch_export`). Volumes are
    /// counted in the graph's `dtype`; an integer or boolean tensor takes no
    /// gradient in the backward graph.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dtype: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init: Option<Init>,
}

/// What a constant tensor holds (the graph creates it from no tensor:
/// ATen's `full`, `ones`, `arange`, ...), row-major.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Init {
    /// Every element `value`.
    Full(f64),
    /// `start`, `start + step`, ... in row-major order.
    Arange { start: f64, step: f64 },
}

/// One op of a [`GraphFile`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpEntry {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    pub op: String,
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub attrs: Value,
    /// One entry per input slot; `None` (`null`) for an absent optional
    /// tensor.
    pub inputs: Vec<Option<String>>,
    pub outputs: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward_inputs: Option<usize>,
}

/// A graph read from JSON, with the file's backward seeds and dtype.
#[derive(Debug)]
pub struct Loaded {
    pub graph: Graph,
    /// The `outputs` of the file, or every produced tensor no op reads.
    pub outputs: Vec<TensorId>,
    pub dtype: DType,
}

/// Reads a graph from JSON text (see the module docs).
///
/// ```
/// let text = r#"{"mesh": [4],
///   "tensors": [{"name": "x", "shape": [8, 16], "dims_mapping": [0, -1]},
///               {"name": "y", "shape": [8, 16]}],
///   "ops": [{"op": "relu", "inputs": ["x"], "outputs": ["y"]}]}"#;
/// let loaded = spmd_graph::json::from_str(text, &spmd_ops::builtins())?;
/// let p = spmd_graph::propagate(&loaded.graph)?;
/// assert_eq!(p.attr(loaded.outputs[0]).to_string(), "[0, -1]");
/// # Ok::<(), spmd_graph::GraphError>(())
/// ```
pub fn from_str(text: &str, registry: &Registry) -> Result<Loaded, GraphError> {
    let file: GraphFile = parse(text).map_err(GraphError::Json)?;
    from_file(&file, registry)
}

/// Reads JSON `text` as a `T` (a [`GraphFile`], an annotation file). An
/// error names the place within the document where it went wrong, then
/// serde's message with its line and column:
///
/// ```
/// use spmd_graph::json::{GraphFile, parse};
///
/// let err = parse::<GraphFile>(r#"{"mesh": [2], "ops": [],
///   "tensors": [{"name": "x", "shape": [4]}, {"name": "y", "shape": "4"}]}"#)
///     .unwrap_err();
/// assert!(err.starts_with("tensors[1].shape: invalid type: string \"4\""), "{err}");
/// ```
pub fn parse<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, String> {
    let mut de = serde_json::Deserializer::from_str(text);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." {
            inner.to_string()
        } else {
            format!("{path}: {inner}")
        }
    })?;
    // Trailing characters after the document are an error, as in
    // `serde_json::from_str`.
    de.end().map_err(|e| e.to_string())?;
    Ok(value)
}

/// A tensor's annotation as a file writes it (`dims_mapping`, absent for
/// replicated, and `partial_dims`), checked against its shape and the mesh;
/// `None` when it has neither.
pub(crate) fn annotation(
    mesh: &spmd_core::Mesh,
    name: &str,
    shape: &[usize],
    dims_mapping: &Option<Mapping>,
    partial_dims: &[u8],
) -> Result<Option<DistAttr>, GraphError> {
    if dims_mapping.is_none() && partial_dims.is_empty() {
        return Ok(None);
    }
    let bad = |message: String| GraphError::BadAnnotation {
        tensor: name.into(),
        message,
    };
    let mapping = match dims_mapping {
        Some(m) => m.to_dims_mapping().map_err(|e| bad(e.to_string()))?,
        None => spmd_core::DimsMapping::replicated(shape.len()),
    };
    if let Some(&d) = partial_dims.iter().find(|&&d| d as usize >= mesh.rank()) {
        return Err(bad(format!(
            "partial over mesh dim {d}, but the mesh has rank {}",
            mesh.rank()
        )));
    }
    let partial = partial_dims.iter().fold(MeshSet::EMPTY, |m, &d| m.with(d));
    let attr = DistAttr::new(mapping).with_partial(Partial::over(partial, ReduceType::Sum));
    crate::graph::check_attr(mesh, name, shape, &attr)?;
    Ok(Some(attr))
}

/// Whether a tensor of element type `dtype` (torch's names) holds integers
/// or booleans, which take no gradient.
fn discrete(dtype: &str) -> bool {
    dtype == "bool" || dtype.starts_with("int") || dtype.starts_with("uint")
}

/// Builds the graph of a parsed file.
pub fn from_file(file: &GraphFile, registry: &Registry) -> Result<Loaded, GraphError> {
    if file.mesh.is_empty() {
        return Err(GraphError::EmptyMesh);
    }
    let mesh = spmd_core::Mesh::new(&file.mesh)?;
    let mut b = GraphBuilder::new(mesh);
    for t in &file.tensors {
        let id = b.tensor(&t.name, &t.shape)?;
        if t.param {
            b.mark_param(id);
        }
        if t.dtype.as_deref().is_some_and(discrete) {
            b.mark_not_differentiable(id);
        }
        if let Some(attr) = annotation(
            b.mesh(),
            &t.name,
            &t.shape,
            &t.dims_mapping,
            &t.partial_dims,
        )? {
            b.annotate_with_priority(id, attr, t.priority.unwrap_or(0))?;
        }
        if let Some(read) = &t.read
            && let Some(attr) = annotation(b.mesh(), &t.name, &t.shape, &Some(read.clone()), &[])?
        {
            b.read_as(id, attr)?;
        }
    }
    let mut named: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for (i, op) in file.ops.iter().enumerate() {
        let label = if op.name.is_empty() {
            format!("{}#{i}", op.op)
        } else {
            if let Some(&first) = named.get(op.name.as_str()) {
                return Err(GraphError::DuplicateOp {
                    name: op.name.clone(),
                    first,
                    second: i,
                });
            }
            named.insert(&op.name, i);
            op.name.clone()
        };
        let find = |n: &String| {
            b.find(n).ok_or_else(|| GraphError::UnknownTensor {
                op: label.clone(),
                name: n.clone(),
            })
        };
        let inputs = op
            .inputs
            .iter()
            .map(|n| n.as_ref().map(find).transpose())
            .collect::<Result<Vec<_>, _>>()?;
        let outputs = op.outputs.iter().map(find).collect::<Result<Vec<_>, _>>()?;
        let attrs = Attrs::from_json("graph op", &op.attrs).map_err(|source| GraphError::Rule {
            op: label.clone(),
            source,
        })?;
        let kind = match op.forward_inputs {
            Some(n) => {
                if inputs.iter().skip(n).any(Option::is_none) {
                    return Err(GraphError::Json(format!(
                        "op `{label}`: an output grad (input {n} on) is null; only forward inputs may be absent"
                    )));
                }
                let present = inputs.iter().take(n).flatten().count();
                OpKind::Grad {
                    forward_inputs: present,
                }
            }
            None => OpKind::Forward,
        };
        b.op_optional(&label, &op.op, attrs, kind, &inputs, &outputs)?;
    }
    let mut graph = b.build(registry)?;
    for t in file.tensors.iter().filter(|t| !t.read_by.is_empty()) {
        let id = graph.find(&t.name).expect("built from the file");
        let mut read_by = Vec::with_capacity(t.read_by.len());
        for (op, mapping) in &t.read_by {
            let o = graph.find_op(op).ok_or_else(|| GraphError::BadAnnotation {
                tensor: t.name.clone(),
                message: format!("a layout for op `{op}` to read it, but the graph has no such op"),
            })?;
            let attr = annotation(graph.mesh(), &t.name, &t.shape, &Some(mapping.clone()), &[])?
                .expect("a mapping is an annotation");
            read_by.push((o, attr));
        }
        graph.set_read_by(id, read_by)?;
    }
    let outputs: Vec<TensorId> = if file.outputs.is_empty() {
        graph
            .tensor_ids()
            .filter(|&t| {
                let info = graph.tensor(t);
                info.producer.is_some() && info.consumers.is_empty()
            })
            .collect()
    } else {
        file.outputs
            .iter()
            .map(|n| {
                graph
                    .find(n)
                    .ok_or_else(|| GraphError::UnknownOutput { name: n.clone() })
            })
            .collect::<Result<_, _>>()?
    };
    graph.mark_results(&outputs);
    Ok(Loaded {
        graph,
        outputs,
        dtype: file.dtype.unwrap_or_default(),
    })
}

/// The file of a graph (annotations, params and ops as built).
pub fn to_file(graph: &Graph, outputs: &[TensorId], dtype: Option<DType>) -> GraphFile {
    GraphFile {
        mesh: graph.mesh().shape().to_vec(),
        dtype,
        tensors: graph
            .tensor_ids()
            .map(|id| (id, graph.tensor(id)))
            .map(|(id, t)| TensorEntry {
                name: t.name.clone(),
                shape: graph.shape(id).to_vec(),
                dims_mapping: t
                    .annotation
                    .as_ref()
                    .map(|a| Mapping::from_dims_mapping(&a.dims_mapping)),
                partial_dims: t
                    .annotation
                    .as_ref()
                    .map(|a| a.partial.dims().iter().collect())
                    .unwrap_or_default(),
                priority: (t.annotation.is_some() && t.priority != 0).then_some(t.priority),
                read: t
                    .read
                    .as_ref()
                    .map(|a| Mapping::from_dims_mapping(&a.dims_mapping)),
                read_by: t
                    .read_by
                    .iter()
                    .map(|(o, a)| {
                        (
                            graph.op(*o).name.clone(),
                            Mapping::from_dims_mapping(&a.dims_mapping),
                        )
                    })
                    .collect(),
                param: t.param,
                // The graph keeps no element type or constant per tensor.
                dtype: None,
                init: None,
            })
            .collect(),
        ops: graph
            .op_ids()
            .map(|o| (o, graph.op(o)))
            .map(|(o, op)| OpEntry {
                name: op.name.clone(),
                op: op.rule.clone(),
                attrs: attrs_json(&op.attrs),
                inputs: {
                    let mut present = graph.inputs(o).iter();
                    let slots = graph.inputs(o).len() + op.absent.bits().count_ones() as usize;
                    (0..slots)
                        .map(|i| match op.absent.contains(i) {
                            true => None,
                            false => present.next().map(|&t| graph.tensor(t).name.clone()),
                        })
                        .collect()
                },
                outputs: graph
                    .outputs(o)
                    .iter()
                    .map(|&t| graph.tensor(t).name.clone())
                    .collect(),
                forward_inputs: match graph.kind(o) {
                    OpKind::Grad { forward_inputs } => {
                        Some(forward_inputs + op.absent.bits().count_ones() as usize)
                    }
                    OpKind::Forward => None,
                },
            })
            .collect(),
        outputs: outputs
            .iter()
            .map(|&t| graph.tensor(t).name.clone())
            .collect(),
    }
}

fn attrs_json(attrs: &Attrs) -> Value {
    if attrs.iter().next().is_none() {
        return Value::Null;
    }
    let map = attrs
        .iter()
        .map(|(k, v)| {
            let v = match v {
                AttrValue::Bool(b) => Value::from(*b),
                AttrValue::Int(i) => Value::from(*i),
                AttrValue::Float(x) => Value::from(*x),
                AttrValue::Str(s) => Value::from(s.clone()),
                AttrValue::Bools(v) => Value::from(v.clone()),
                AttrValue::Ints(v) => Value::from(v.clone()),
                AttrValue::Floats(v) => Value::from(v.clone()),
                AttrValue::Strs(v) => Value::from(v.clone()),
            };
            (k.to_string(), v)
        })
        .collect();
    Value::Object(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sample graph (a GPT layer, `spmd-models` writes it) loads, writes
    /// back to the same file and reloads to a graph that propagates alike.
    #[test]
    fn a_graph_survives_a_round_trip_through_json() {
        let registry = spmd_ops::builtins();
        let text = include_str!("../graphs/gpt_layer.json");
        let model = from_str(text, &registry).unwrap();
        let file = to_file(&model.graph, &model.outputs, Some(DType::Bf16));
        let text = serde_json::to_string_pretty(&file).unwrap();
        let back = from_str(&text, &registry).unwrap();
        assert_eq!(to_file(&back.graph, &back.outputs, Some(back.dtype)), file);
        assert_eq!(back.dtype, DType::Bf16);
        let (a, b) = (
            crate::propagate(&model.graph).unwrap(),
            crate::propagate(&back.graph).unwrap(),
        );
        assert_eq!(a.attrs, b.attrs);
    }

    /// A result of the graph left partial is reduced by the plan, once,
    /// and the report says why; a tensor that is not a result is not.
    #[test]
    fn a_partial_result_is_reduced() {
        let registry = spmd_ops::builtins();
        let text = r#"{"mesh": [2], "tensors": [
            {"name": "x", "shape": [8, 4], "dims_mapping": [-1, 0]},
            {"name": "w", "shape": [4, 6], "dims_mapping": [0, -1]},
            {"name": "y", "shape": [8, 6]}],
          "ops": [{"name": "mm", "op": "matmul", "inputs": ["x", "w"], "outputs": ["y"]}]}"#;
        let loaded = from_str(text, &registry).unwrap();
        let y = loaded.outputs[0];
        assert!(loaded.graph.is_result(y));
        let p = crate::propagate(&loaded.graph).unwrap();
        assert_eq!(p.attr(y).to_string(), "[-1, -1] partial{0: SUM}");
        let plan = crate::plan(&loaded.graph, &p, DType::F32).unwrap();
        assert_eq!(plan.count("all-reduce"), 1);
        assert_eq!(plan.reshards[0].edge, crate::reshard::Edge::Result(0));
        assert_eq!(plan.reshards[0].to.to_string(), "[-1, -1]");
        let report = crate::report::plan_text(&loaded.graph, &plan);
        assert!(
            report.contains("mm's output 0 is a result of the graph"),
            "{report}"
        );
        // A result annotated partial is wanted partial: nothing reduces it.
        let wanted = text.replace(
            r#"{"name": "y", "shape": [8, 6]}"#,
            r#"{"name": "y", "shape": [8, 6], "dims_mapping": [-1, -1], "partial_dims": [0]}"#,
        );
        let loaded = from_str(&wanted, &registry).unwrap();
        let p = crate::propagate(&loaded.graph).unwrap();
        assert_eq!(p.attr(y).to_string(), "[-1, -1] partial{0: SUM}");
        let plan = crate::plan(&loaded.graph, &p, DType::F32).unwrap();
        assert_eq!(plan.count("all-reduce"), 0, "{:?}", plan.reshards);
        // The same graph with `outputs` naming another tensor: y is no
        // result, and nothing reduces it.
        let other = text.replace(r#""ops":"#, r#""outputs": ["x"], "ops":"#);
        let loaded = from_str(&other, &registry).unwrap();
        assert!(!loaded.graph.is_result(y));
        let p = crate::propagate(&loaded.graph).unwrap();
        assert_eq!(
            crate::plan(&loaded.graph, &p, DType::F32)
                .unwrap()
                .count("all-reduce"),
            0
        );
    }

    #[test]
    fn bad_files_name_what_is_wrong() {
        let registry = spmd_ops::builtins();
        let err = |text: &str| from_str(text, &registry).unwrap_err().to_string();
        let base =
            r#""mesh": [2], "tensors": [{"name": "x", "shape": [4]}, {"name": "y", "shape": [4]}]"#;
        assert!(
            err(&format!(
                r#"{{{base}, "ops": [{{"op": "relu", "inputs": ["z"], "outputs": ["y"]}}]}}"#
            ))
            .contains("tensor `z`")
        );
        assert!(
            err(&format!(
                r#"{{{base}, "ops": [{{"op": "relux", "inputs": ["x"], "outputs": ["y"]}}]}}"#
            ))
            .contains("relu")
        );
        assert!(err(r#"{"mesh": [2], "tensors": [{"name": "x", "shape": [4], "dims_mapping": [3]}], "ops": []}"#)
            .contains("mesh dim 3"));
        assert!(err(r#"{"mesh": [2], "tensors": [], "ops": [], "extra": 1}"#).contains("extra"));
        // A rank no rule call can hold is named as a rank; a shape too
        // large to count is shown short.
        let shape = |rank: usize, e: usize| format!("[{}]", vec![e.to_string(); rank].join(", "));
        let big = err(&format!(
            r#"{{"mesh": [2], "tensors": [{{"name": "x", "shape": {}}}], "ops": []}}"#,
            shape(300, 2)
        ));
        assert_eq!(
            big,
            "tensor `x` has rank 300; a rule call holds at most 63 dims"
        );
        let huge = err(&format!(
            r#"{{"mesh": [2], "tensors": [{{"name": "x", "shape": {}}}], "ops": []}}"#,
            shape(40, 1 << 20)
        ));
        assert!(huge.len() < 200 && huge.contains("(rank 40)"), "{huge}");
        // A mesh of no dims, and two ops under one name, are errors, not a
        // graph "on mesh " or a report whose origins are ambiguous.
        assert!(err(r#"{"mesh": [], "tensors": [], "ops": []}"#).contains("`mesh` has no dims"));
        let two = r#"{"mesh": [2], "tensors": [{"name": "x", "shape": [4]}, {"name": "y", "shape": [4]}, {"name": "z", "shape": [4]}],
               "ops": [{"name": "act", "op": "relu", "inputs": ["x"], "outputs": ["y"]},
                       {"name": "act", "op": "relu", "inputs": ["y"], "outputs": ["z"]}]}"#;
        assert!(
            err(two).contains("op name `act` is used by op #0 and op #1"),
            "{}",
            err(two)
        );
        assert!(
            err(r#"{"mesh": [2], "tensors": [{"name": "x", "shape": [4], "partial_dims": [9]}], "ops": []}"#)
                .contains("mesh dim 9")
        );
        // The backward seeds name the graph's `outputs` list, not an op.
        let e = err(&format!(
            r#"{{{base}, "ops": [{{"op": "relu", "inputs": ["x"], "outputs": ["y"]}}], "outputs": ["q"]}}"#
        ));
        assert_eq!(
            e,
            "the graph's `outputs` list names tensor `q`, which is not defined"
        );
        // A declared output shape its inputs do not give: the op and the
        // tensor named, at load time (not at a later backward pass).
        let e = err(
            r#"{"mesh": [2], "tensors": [{"name": "x", "shape": [8, 4]}, {"name": "w", "shape": [4, 6]},
            {"name": "h", "shape": [9, 6]}], "ops": [{"name": "fc", "op": "matmul", "inputs": ["x", "w"], "outputs": ["h"]}]}"#,
        );
        assert!(
            e.starts_with("op `fc`: tensor `h` is declared with a shape its inputs do not give"),
            "{e}"
        );
        assert!(
            e.contains("axis `m` has extent 8, but output 0 dim 0 has extent 9"),
            "{e}"
        );
        // An op whose declared output rank does not fit its rule.
        assert!(err(r#"{"mesh": [2], "tensors": [{"name": "x", "shape": [4]}, {"name": "y", "shape": [4, 1]}],
            "ops": [{"op": "relu", "inputs": ["x"], "outputs": ["y"]}]}"#)
            .contains("rank"));
    }
}
