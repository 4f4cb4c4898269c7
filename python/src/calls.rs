//! One rule call from Python: `spmd.infer`, `spmd.explain`, the registry
//! (`spmd.ops`, `spmd.signature`) and rules declared at run time
//! (`spmd.Rule`). A call is the CLI's [`Request`], so Python, the CLI and
//! the conformance runner answer it by one path and report it alike.

use std::sync::OnceLock;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use spmd_cli::call::{Built, Request, RuleSource, Slot};
use spmd_cli::report::Report;
use spmd_conformance::Direction;
use spmd_core::{Attrs, Einsum, ReduceType, Registry, RuleResult};

use crate::errors::{self, Kind, guard, input};
use crate::layouts::{Layout, Mesh, mesh_of, tensor_arg};
use crate::plain;

/// The built-in rules, built once.
pub fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(spmd_ops::builtins)
}

/// A rule declared at run time from an einsum notation, as
/// `#[spmd_rule(einsum = "..")]` declares one at compile time.
///
/// >>> bias_matmul = spmd.Rule(einsum="bsk,kn,+n->bsn")
/// >>> spmd.infer(bias_matmul, spmd.Mesh([2]), inputs=[([4, 8, 16], [0, -1, -1]), ([16, 32], [-1, -1]), ([32], [-1])])
#[pyclass(module = "spmd", frozen)]
pub struct Rule {
    einsum: Einsum,
}

#[pymethods]
impl Rule {
    /// `einsum`: the notation (`"mk,kn->mn"`; `...` for batch dims, `+`
    /// for an addend). `reduce`: the reduce type of partial outputs
    /// (`"sum"` by default, `"max"`, `"min"`, `"avg"`, ...).
    #[new]
    #[pyo3(signature = (einsum, *, reduce = None))]
    fn new(einsum: &str, reduce: Option<&str>) -> PyResult<Rule> {
        guard(|| {
            let mut rule = Einsum::new(einsum).map_err(errors::core)?;
            if let Some(r) = reduce {
                let r = ReduceType::from_name(r).ok_or_else(|| {
                    errors::error(
                        Kind::Attr,
                        format!("reduce `{r}`: expected sum, avg, max, min, prod, any or all"),
                    )
                })?;
                rule = rule.with_reduce(r);
            }
            Ok(Rule { einsum: rule })
        })
    }

    /// The notation, as given.
    #[getter]
    fn einsum(&self) -> String {
        self.einsum.notation().source().to_string()
    }

    fn __repr__(&self) -> String {
        format!("Rule(einsum={:?})", self.einsum.notation().source())
    }
}

/// The answer of one call: each input's requirement, each output's layout
/// and partial status, and the reshards between what was given and what
/// the rule requires. `print(result)` shows it as `spmd infer` does.
#[pyclass(module = "spmd", frozen)]
pub struct InferResult {
    request: Request,
    result: RuleResult,
    /// The report, built when first read.
    report: OnceLock<Report>,
    /// The einsum of a run-time rule (registered ops are rebuilt by name).
    einsum: Option<Einsum>,
}

impl InferResult {
    fn report(&self) -> PyResult<&Report> {
        if let Some(r) = self.report.get() {
            return Ok(r);
        }
        let built = built(&self.request, self.einsum.as_ref())?;
        let shapes = spmd_cli::cmd::infer::output_shapes(&self.request, &built, &self.result);
        let report = Report::new(&self.request, &built, self.result.clone(), shapes);
        Ok(self.report.get_or_init(|| report))
    }

    fn layouts(&self, rows: &[spmd_cli::report::TensorRow]) -> Vec<Option<Layout>> {
        rows.iter()
            .map(|r| {
                (!r.absent).then(|| Layout {
                    attr: r.result.clone(),
                    shape: r.shape.clone(),
                    mesh: self.request.mesh.clone(),
                })
            })
            .collect()
    }
}

#[pymethods]
impl InferResult {
    /// The op (or `einsum "..."`).
    #[getter]
    fn op(&self) -> String {
        self.request.source.title()
    }

    /// `"forward"`, `"backward"` or `"grad"`.
    #[getter]
    fn direction(&self) -> String {
        self.request.direction.to_string()
    }

    #[getter]
    fn mesh(&self) -> Mesh {
        Mesh {
            inner: self.request.mesh.clone(),
        }
    }

    /// What the rule requires of each input (`None` for an absent one);
    /// for grad, of the forward inputs, then of the output grads.
    #[getter]
    fn inputs(&self) -> PyResult<Vec<Option<Layout>>> {
        guard(|| Ok(self.layouts(&self.report()?.inputs)))
    }

    /// Each output's layout and partial status; for grad, the input grads.
    #[getter]
    fn outputs(&self) -> PyResult<Vec<Option<Layout>>> {
        guard(|| Ok(self.layouts(&self.report()?.outputs)))
    }

    /// Per input, the reshard steps from the layout given to the one
    /// required (`[]`: none), as `spmd infer` prints them.
    #[getter]
    fn reshards(&self) -> PyResult<Vec<Vec<String>>> {
        guard(|| {
            Ok(self
                .report()?
                .inputs
                .iter()
                .map(|r| r.reshard.iter().map(|s| s.to_string()).collect())
                .collect())
        })
    }

    /// Per output, the reductions that would finish its partial values
    /// (`[]` when it holds none).
    #[getter]
    fn pending(&self) -> PyResult<Vec<Vec<String>>> {
        guard(|| {
            Ok(self
                .report()?
                .outputs
                .iter()
                .map(|r| r.pending.iter().map(|s| s.to_string()).collect())
                .collect())
        })
    }

    /// The report as JSON text (the schema of `spmd infer --json`).
    fn to_json(&self) -> PyResult<String> {
        guard(|| Ok(spmd_cli::report::to_json(&self.report()?.json())))
    }

    fn __repr__(&self) -> PyResult<String> {
        guard(|| Ok(plain(&self.report()?.text())))
    }

    /// In a notebook: the report, then each output's layout drawn.
    fn _repr_html_(&self) -> PyResult<String> {
        guard(|| {
            let report = self.report()?;
            let text = plain(&report.text())
                .replace('&', "&amp;")
                .replace('<', "&lt;")
                .replace('>', "&gt;");
            let mut html = format!("<pre>{text}</pre>");
            for l in self.layouts(&report.outputs).into_iter().flatten() {
                if let Some(shape) = &l.shape
                    && let Some(svg) = spmd_cli::cmd::show::svg_of(&l.mesh, shape, &l.attr)
                {
                    html.push_str(&svg);
                }
            }
            Ok(html)
        })
    }
}

fn built(request: &Request, einsum: Option<&Einsum>) -> PyResult<Built> {
    match einsum {
        Some(e) => Ok(Built::Einsum(e.clone())),
        None => request.rule(registry()).map_err(errors::core),
    }
}

/// The request a Python call describes.
fn request(
    op: &Bound<'_, PyAny>,
    mesh: &Bound<'_, PyAny>,
    inputs: &Bound<'_, PyAny>,
    attrs: Option<&Bound<'_, PyDict>>,
    outputs: Option<&Bound<'_, PyAny>>,
    direction: &str,
) -> PyResult<(Request, Option<Einsum>)> {
    let direction = match direction {
        "forward" => Direction::Forward,
        "backward" => Direction::Backward,
        "grad" => Direction::Grad,
        other => {
            return Err(input(
                "direction",
                format!("`{other}`: expected \"forward\", \"backward\" or \"grad\""),
            ));
        }
    };
    let attrs = match attrs {
        Some(d) => Attrs::from_json("spmd", &crate::json::value_of(d.as_any(), "attrs")?)
            .map_err(errors::core)?,
        None => Attrs::new(),
    };
    let (source, einsum) = if let Ok(rule) = op.cast::<Rule>() {
        let e = rule.get().einsum.clone();
        (
            RuleSource::Einsum {
                equation: e.notation().source().to_string(),
                attrs,
            },
            Some(e),
        )
    } else {
        let name: String = op.extract().map_err(|_| {
            input(
                "op",
                "expected an op name, an einsum notation or an spmd.Rule",
            )
        })?;
        if name.contains("->") {
            let e = Einsum::new(&name).map_err(errors::core)?;
            (
                RuleSource::Einsum {
                    equation: name,
                    attrs,
                },
                Some(e),
            )
        } else if name == "einsum" {
            let Some(spmd_core::AttrValue::Str(eq)) = attrs.get("equation").cloned() else {
                return Err(errors::error(
                    Kind::Attr,
                    "op `einsum` needs its notation: attrs={\"equation\": \"mk,kn->mn\"}",
                ));
            };
            let e = Einsum::new(&eq).map_err(errors::core)?;
            (
                RuleSource::Einsum {
                    equation: eq,
                    attrs,
                },
                Some(e),
            )
        } else {
            registry().get(&name).map_err(errors::core)?;
            (RuleSource::Registered { name, attrs }, None)
        }
    };
    let mesh = mesh_of(mesh)?;
    let inputs = slots(inputs, "input")?;
    let outputs = match outputs {
        Some(o) if !o.is_none() => slots(o, "output")?,
        _ => Vec::new(),
    };
    Ok((
        Request {
            id: None,
            source,
            mesh,
            direction,
            inputs,
            outputs,
            expectation: None,
        },
        einsum,
    ))
}

fn slots(list: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<Slot>> {
    let Some(items) = crate::layouts::sequence(list) else {
        return Err(input(
            &format!("{what}s"),
            "expected a list of tensors (each a (shape, dims_mapping) pair, a shape, an spmd.Tensor or None)",
        ));
    };
    items
        .iter()
        .enumerate()
        .map(|(i, t)| tensor_arg(t, &|| format!("{what} {i}")))
        .collect()
}

/// Runs one rule call and answers with the layouts it infers.
///
/// `op`: a registered op name (`spmd.ops()`), an einsum notation
/// (`"mk,kn->mn"`) or an `spmd.Rule`. `inputs`: per input, a `(shape,
/// dims_mapping)` pair, a `(shape, dims_mapping, partial)` triple, a bare
/// shape (replicated), an `spmd.Tensor`, or `None` for an absent optional
/// input. `attrs`: the op's attributes by Paddle's names. `direction`:
/// `"forward"` (default); `"backward"` (infer from `outputs`, the inputs
/// giving shapes); `"grad"` (the gradient op: `inputs` are the forward
/// inputs, `outputs` the output grads).
#[pyfunction]
#[pyo3(signature = (op, mesh, inputs, attrs = None, *, outputs = None, direction = "forward"))]
pub fn infer(
    op: &Bound<'_, PyAny>,
    mesh: &Bound<'_, PyAny>,
    inputs: &Bound<'_, PyAny>,
    attrs: Option<&Bound<'_, PyDict>>,
    outputs: Option<&Bound<'_, PyAny>>,
    direction: &str,
) -> PyResult<InferResult> {
    guard(|| {
        let (request, einsum) = request(op, mesh, inputs, attrs, outputs, direction)?;
        let rule = built(&request, einsum.as_ref())?;
        let result = request.run(&rule).map_err(errors::core)?;
        Ok(InferResult {
            request,
            result,
            report: OnceLock::new(),
            einsum,
        })
    })
}

/// Seconds the Rust side of `infer` takes for the same call, repeated
/// `n` times with the GIL released: building the rule through the registry
/// and running it, on arguments converted once. What `bench/overhead.py`
/// subtracts from `spmd.infer`'s time to find the Python call's overhead.
#[pyfunction]
#[pyo3(signature = (op, mesh, inputs, n, attrs = None))]
pub fn _rust_infer_seconds(
    py: Python<'_>,
    op: &Bound<'_, PyAny>,
    mesh: &Bound<'_, PyAny>,
    inputs: &Bound<'_, PyAny>,
    n: usize,
    attrs: Option<&Bound<'_, PyDict>>,
) -> PyResult<f64> {
    guard(|| {
        let (request, einsum) = request(op, mesh, inputs, attrs, None, "forward")?;
        py.detach(|| {
            let started = std::time::Instant::now();
            for _ in 0..n {
                let rule = built(&request, einsum.as_ref())?;
                std::hint::black_box(request.run(&rule).map_err(errors::core)?);
            }
            Ok(started.elapsed().as_secs_f64())
        })
    })
}

/// The steps of one call, as `spmd explain` prints them: every claim,
/// merge, conflict and fit the rule makes, then the answer. Takes the
/// arguments of [`infer`].
#[pyfunction]
#[pyo3(signature = (op, mesh, inputs, attrs = None, *, outputs = None, direction = "forward"))]
pub fn explain(
    op: &Bound<'_, PyAny>,
    mesh: &Bound<'_, PyAny>,
    inputs: &Bound<'_, PyAny>,
    attrs: Option<&Bound<'_, PyDict>>,
    outputs: Option<&Bound<'_, PyAny>>,
    direction: &str,
) -> PyResult<String> {
    guard(|| {
        let (request, einsum) = request(op, mesh, inputs, attrs, outputs, direction)?;
        // The typed error first, as `infer` raises it.
        let rule = built(&request, einsum.as_ref())?;
        request.run(&rule).map_err(errors::core)?;
        spmd_cli::cmd::explain::explain_text(&request, registry())
            .map(|t| plain(&t))
            .map_err(|e| errors::error(Kind::Rule, e.message))
    })
}

/// Every registered op name, sorted.
#[pyfunction]
pub fn ops() -> Vec<&'static str> {
    registry().iter().map(|i| i.name).collect()
}

/// An op's signature as `spmd ops NAME` prints it: notation, inputs,
/// outputs, attributes and grad.
#[pyfunction]
pub fn signature(name: &str) -> PyResult<String> {
    guard(|| {
        let info = registry().get(name).map_err(errors::core)?;
        Ok(plain(&spmd_cli::cmd::ops::signature(info)))
    })
}
