//! Graphs from Python: load, propagate under a plan (forward and
//! backward, with the reshard plans) and choose a plan (`autoshard`).
//! The work runs with the GIL released.

use pyo3::prelude::*;
use pyo3::types::PyDict;
use spmd_autoshard::{Device, Options};
use spmd_graph::annotations::{self, AnnotationFile, Overrides};
use spmd_graph::json::GraphFile;
use spmd_graph::{DType, backward_graph, plan, propagate as run, report};

use crate::calls::registry;
use crate::errors::{self, Kind, guard, input};
use crate::layouts::mesh_of;

/// A tensor program in spmd's graph format: ops with their inputs,
/// outputs and attributes, tensors with their shapes, parameters marked,
/// and the annotations a plan gives.
///
/// >>> g = spmd.Graph.load("spmd-graph/graphs/hf/llama.json")
/// >>> print(g.propagate(plan="spmd-graph/graphs/hf/llama_tp.plan.json", backward=True))
#[pyclass(module = "spmd", frozen)]
pub struct Graph {
    file: GraphFile,
    /// Where it came from, for messages.
    name: String,
}

/// A plan argument: a path to a plan file, or the plan itself as a dict
/// (`{"mesh": [4], "annotations": [...]}`).
fn plan_of(obj: &Bound<'_, PyAny>) -> PyResult<AnnotationFile> {
    let text = if obj.cast::<PyDict>().is_ok() {
        crate::json::value_of(obj, "plan")?.to_string()
    } else {
        let path: String = obj
            .extract()
            .map_err(|_| input("plan", "expected a path or a dict"))?;
        spmd_cli::call::read_input(&path).map_err(|e| errors::error(Kind::Plan, e.message))?
    };
    AnnotationFile::from_json(&text).map_err(|e| errors::error(Kind::Plan, format!("plan: {e}")))
}

#[pymethods]
impl Graph {
    /// A graph file (`.json`, or `.json.gz`).
    #[staticmethod]
    fn load(path: &str) -> PyResult<Graph> {
        guard(|| {
            let text = spmd_cli::call::read_input(path)
                .map_err(|e| errors::error(Kind::Graph, e.message))?;
            Graph::parse(&text, path)
        })
    }

    /// A graph from its JSON text.
    #[staticmethod]
    fn from_json(text: &str) -> PyResult<Graph> {
        guard(|| Graph::parse(text, "<json>"))
    }

    /// The graph as JSON text (with the annotations it carries).
    fn to_json(&self) -> PyResult<String> {
        guard(|| {
            serde_json::to_string(&self.file)
                .map_err(|e| errors::error(Kind::Graph, format!("{}: {e}", self.name)))
        })
    }

    /// The number of ops.
    fn __len__(&self) -> usize {
        self.file.ops.len()
    }

    fn __repr__(&self) -> String {
        format!(
            "Graph({:?}: {} ops, {} tensors, mesh {:?})",
            self.name,
            self.file.ops.len(),
            self.file.tensors.len(),
            self.file.mesh
        )
    }

    /// Propagates layouts through the graph under `plan` (a plan file's
    /// path or a dict; `None`: the graph's own annotations), with the
    /// reshard plan, and with `backward=True` the backward graph's too.
    /// `override=True` lets the plan change annotations the graph already
    /// has.
    #[pyo3(signature = (plan = None, *, backward = false, r#override = false))]
    fn propagate(
        &self,
        py: Python<'_>,
        plan: Option<&Bound<'_, PyAny>>,
        backward: bool,
        r#override: bool,
    ) -> PyResult<Propagation> {
        guard(|| {
            let plan = match plan.filter(|p| !p.is_none()) {
                Some(p) => Some(plan_of(p)?),
                None => None,
            };
            let overrides = if r#override {
                Overrides::Allow
            } else {
                Overrides::Refuse
            };
            let file = &self.file;
            let name = &self.name;
            py.detach(|| propagate(file, plan.as_ref(), overrides, backward))
                .map_err(|(kind, e)| errors::error(kind, format!("{name}: {e}")))
        })
    }

    /// Chooses a plan for `mesh` (see `spmd autoshard`): `memory`, the
    /// budget per device (`"24GiB"`, `"80GB"` or bytes; default the
    /// device's memory); `device`, `"a100"`, `"h100"` or `"h200"`;
    /// `starts`, the number of descents; `solver_nodes` and `solver_time`,
    /// the MIP solver's node limit and its safety limit in seconds (either
    /// `0`: no solver). Raises `NoPlanFitsError` when no plan fits.
    #[pyo3(signature = (
        mesh,
        *,
        memory = None,
        device = "h100",
        starts = 1,
        solver_nodes = Options::SOLVER_NODES,
        solver_time = Options::SOLVER_TIME,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn autoshard(
        &self,
        py: Python<'_>,
        mesh: &Bound<'_, PyAny>,
        memory: Option<&Bound<'_, PyAny>>,
        device: &str,
        starts: usize,
        solver_nodes: u64,
        solver_time: f64,
    ) -> PyResult<Autoshard> {
        guard(|| {
            let mesh = mesh_of(mesh)?;
            let mut options = Options::new(mesh.shape().to_vec());
            options.device = device.parse::<Device>().map_err(|e| input("device", e))?;
            options.memory = Some(match memory.filter(|m| !m.is_none()) {
                Some(m) => match m.extract::<u64>() {
                    Ok(b) => b,
                    Err(_) => {
                        let text: String = m.extract().map_err(|_| {
                            input("memory", "expected bytes (an int) or a size like \"24GiB\"")
                        })?;
                        spmd_autoshard::parse_bytes(&text).map_err(|e| input("memory", e))?
                    }
                },
                None => options.device.memory,
            });
            if starts == 0 {
                return Err(input("starts", "the search needs at least one start"));
            }
            options.starts = starts;
            if !(solver_time >= 0.0 && solver_time.is_finite()) {
                return Err(input("solver_time", "a number of seconds, 0 or more"));
            }
            options.solver_nodes = solver_nodes;
            options.solver_time = solver_time;
            let file = &self.file;
            let outcome = py
                .detach(|| spmd_autoshard::autoshard(file, registry(), &options, &mut |_| {}))
                .map_err(errors::autoshard)?;
            let json = serde_json::to_string(&outcome)
                .map_err(|e| errors::error(Kind::Internal, e.to_string()))?;
            Ok(Autoshard {
                text: spmd_autoshard::report::text(&outcome),
                json,
                plan: spmd_autoshard::report::plan_json(&outcome.plan),
                step_time: outcome.figures.step_time,
            })
        })
    }
}

impl Graph {
    fn parse(text: &str, name: &str) -> PyResult<Graph> {
        let file: GraphFile = spmd_graph::json::parse(text)
            .map_err(|e| errors::error(Kind::Graph, format!("{name}: graph JSON: {e}")))?;
        Ok(Graph {
            file,
            name: name.to_string(),
        })
    }
}

type Failed = (Kind, String);

fn graph_err(e: spmd_graph::GraphError) -> Failed {
    (errors::graph_kind(&e), e.to_string())
}

fn propagate(
    file: &GraphFile,
    plan_file: Option<&AnnotationFile>,
    overrides: Overrides,
    backward: bool,
) -> Result<Propagation, Failed> {
    let registry = registry();
    let mut file = file.clone();
    if let Some(p) = plan_file {
        annotations::apply_with(&mut file, p, overrides).map_err(graph_err)?;
    }
    let loaded = spmd_graph::json::from_file(&file, registry).map_err(graph_err)?;
    let dtype: DType = loaded.dtype;
    let graph = &loaded.graph;
    let p = run(graph).map_err(graph_err)?;
    let forward = plan(graph, &p, dtype).map_err(graph_err)?;
    let mut text = report::text(graph, &p, &forward);
    let mut json = report::json(graph, &p, &forward);
    let forward_counts = report::counts(&forward)
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    let mut backward_counts = Vec::new();
    let mut program = None;
    if backward {
        let bw = backward_graph(graph, &p, registry, &loaded.outputs).map_err(graph_err)?;
        let bp = run(&bw.graph).map_err(graph_err)?;
        let bplan = plan(&bw.graph, &bp, dtype).map_err(graph_err)?;
        text.push_str("\nbackward graph:\n");
        text.push_str(&report::plan_text(&bw.graph, &bplan));
        if let serde_json::Value::Object(m) = &mut json {
            let mut b = report::json(&bw.graph, &bp, &bplan);
            if let serde_json::Value::Object(bm) = &mut b {
                bm.remove("schema_version");
            }
            m.insert("backward".into(), b);
        }
        backward_counts = report::counts(&bplan)
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        program = Some(backward_program(graph, &bw, registry).to_string());
    }
    Ok(Propagation {
        text,
        json: json.to_string(),
        forward_counts,
        backward_counts,
        program,
    })
}

/// The backward graph as a program a runtime can execute: its ops in
/// order (a grad op names its forward op, and the forward input each of
/// its outputs is the gradient of), what each tensor no op produces
/// holds, and each parameter's gradient.
fn backward_program(
    forward: &spmd_graph::Graph,
    bw: &spmd_graph::Backward,
    registry: &spmd_core::Registry,
) -> serde_json::Value {
    use serde_json::json;
    use spmd_graph::{Given, OpKind};
    let bg = &bw.graph;
    let name = |t: spmd_graph::TensorId| bg.tensor(t).name.clone();
    let ops: Vec<serde_json::Value> = bg
        .op_ids()
        .map(|o| {
            let op = bg.op(o);
            let mut v = json!({
                "name": op.name,
                "rule": op.rule,
                "inputs": bg.inputs(o).iter().map(|&t| name(t)).collect::<Vec<_>>(),
                "outputs": bg.outputs(o).iter().map(|&t| name(t)).collect::<Vec<_>>(),
            });
            if let OpKind::Grad { forward_inputs } = bg.kind(o) {
                let fwd = op.name.strip_suffix("_grad").unwrap_or(&op.name);
                let no_grad = registry
                    .get(&op.rule)
                    .map(|i| i.no_grad)
                    .unwrap_or_default();
                let of: Vec<usize> = (0..forward_inputs)
                    .filter(|&i| !no_grad.contains(op.slot(i)))
                    .collect();
                v["grad_of"] = json!({"op": fwd, "inputs": of});
            }
            v
        })
        .collect();
    let given: Vec<serde_json::Value> = bw
        .given()
        .into_iter()
        .map(|(t, g)| match g {
            Given::Saved { op, input } => {
                json!({"tensor": name(t), "saved": {"op": forward.op(op).name, "input": input}})
            }
            Given::Seed { output } => {
                json!({"tensor": name(t), "seed": forward.tensor(output).name})
            }
            Given::Zero => json!({"tensor": name(t), "zero": true}),
        })
        .collect();
    let param_grads: serde_json::Map<String, serde_json::Value> = bw
        .param_grads
        .iter()
        .map(|&(p, g)| (forward.tensor(p).name.clone(), name(g).into()))
        .collect();
    json!({"ops": ops, "given": given, "param_grads": param_grads})
}

/// A propagated graph: `print(p)` shows every tensor and collective as
/// `spmd propagate` does; `collectives` counts them by kind.
#[pyclass(module = "spmd", frozen)]
pub struct Propagation {
    text: String,
    json: String,
    forward_counts: Vec<(String, usize)>,
    backward_counts: Vec<(String, usize)>,
    /// The backward graph as a program, when propagated with `backward`.
    program: Option<String>,
}

#[pymethods]
impl Propagation {
    /// The forward reshard plan's steps by kind: `{"all_reduce": 4, ...}`.
    #[getter]
    fn collectives<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        counts(py, &self.forward_counts)
    }

    /// The backward graph's, when propagated with `backward=True`.
    #[getter]
    fn backward_collectives<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        counts(py, &self.backward_counts)
    }

    /// The whole answer as JSON text (the schema of `spmd propagate --json`).
    fn to_json(&self) -> String {
        self.json.clone()
    }

    /// The backward graph as JSON text a runtime executes (`None` unless
    /// propagated with `backward=True`): `ops` in order, each with `rule`,
    /// `inputs` and `outputs`, and for a grad op `grad_of` (its forward
    /// op, and the forward input each output is the gradient of); `given`,
    /// what each tensor no op produces holds (`saved`: a forward op's
    /// input as that op read it; `seed`: the gradient of a forward output;
    /// `zero`); `param_grads`, each parameter's gradient.
    fn backward_program(&self) -> Option<String> {
        self.program.clone()
    }

    fn __str__(&self) -> String {
        crate::plain(&self.text)
    }

    fn __repr__(&self) -> String {
        crate::plain(&self.text)
    }
}

fn counts<'py>(py: Python<'py>, list: &[(String, usize)]) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (k, v) in list {
        // The names of the JSON report: `all_reduce`, `all_gather`, ...
        d.set_item(k.replace('-', "_"), v)?;
    }
    Ok(d)
}

/// The plan `Graph.autoshard` chose, and its report.
#[pyclass(module = "spmd", frozen)]
pub struct Autoshard {
    text: String,
    json: String,
    plan: String,
    step_time: f64,
}

#[pymethods]
impl Autoshard {
    /// The plan file's text: what `Graph.propagate(plan=...)` and `spmd
    /// propagate --plan` read.
    #[getter]
    fn plan_json(&self) -> String {
        self.plan.clone()
    }

    /// The modelled step time, seconds.
    #[getter]
    fn step_time(&self) -> f64 {
        self.step_time
    }

    /// The report as JSON text (the schema of `spmd autoshard --json`).
    fn to_json(&self) -> String {
        self.json.clone()
    }

    fn __str__(&self) -> String {
        crate::plain(&self.text)
    }

    fn __repr__(&self) -> String {
        crate::plain(&self.text)
    }
}
