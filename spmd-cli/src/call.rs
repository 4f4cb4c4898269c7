//! One rule call: which rule, on which mesh, in which direction, with which
//! tensors; built from the command line or from a JSON case, and run.

use std::io::Read as _;

use serde::Deserialize;
use serde_json::{Map, Value};
use spmd_conformance::{Agreement, Alternative, Direction, Expected, Mismatch};
use spmd_core::json::Tensor;
use spmd_core::{
    AttrValue, Attrs, Einsum, Mesh, Registry, RuleInfo, RuleResult, SpmdError, SpmdRule, Trace,
};

use crate::cli::CallArgs;
use crate::error::{CliError, Result};
use crate::parse::{self, TensorArg};

/// Which rule a call runs.
#[derive(Clone, Debug)]
pub enum RuleSource {
    /// A registered op and its attributes.
    Registered { name: String, attrs: Attrs },
    /// An einsum notation (the `einsum` op, or a notation given directly).
    Einsum { equation: String, attrs: Attrs },
}

impl RuleSource {
    /// How the rule is named in reports: `matmul`, `einsum "mk,kn->mn"`.
    pub fn title(&self) -> String {
        match self {
            RuleSource::Registered { name, .. } => name.clone(),
            RuleSource::Einsum { equation, .. } => format!("einsum {equation:?}"),
        }
    }
    pub fn attrs(&self) -> &Attrs {
        match self {
            RuleSource::Registered { attrs, .. } | RuleSource::Einsum { attrs, .. } => attrs,
        }
    }
}

/// What a JSON case says the answer should be.
#[derive(Clone, Debug)]
pub struct Expectation {
    pub expected: Expected,
    pub alternatives: Vec<Alternative>,
}

impl Expectation {
    pub fn check(
        &self,
        got: &std::result::Result<RuleResult, SpmdError>,
    ) -> std::result::Result<Agreement, Mismatch> {
        spmd_conformance::check_against(&self.expected, &self.alternatives, got)
    }
}

/// One tensor position of a call: `None` is an absent optional tensor.
pub type Slot = Option<TensorArg>;

/// One call, checked and ready to run.
#[derive(Clone, Debug)]
pub struct Request {
    pub id: Option<String>,
    pub source: RuleSource,
    pub mesh: Mesh,
    pub direction: Direction,
    /// Forward and grad: the inputs; backward: the inputs (shapes; mappings optional).
    pub inputs: Vec<Slot>,
    /// Backward: the given outputs; grad: the output grads.
    pub outputs: Vec<Slot>,
    pub expectation: Option<Expectation>,
}

/// Owned tensors: (shape, dist attr) per tensor.
pub type Parts = Vec<(Vec<usize>, spmd_core::DistAttr)>;

/// Owned tensors, `None` where one is absent.
pub type Slots = Vec<Option<(Vec<usize>, spmd_core::DistAttr)>>;

/// Whether `op` is an einsum notation rather than an op name.
pub fn is_notation(op: &str) -> bool {
    op.contains("->")
}

fn direction(call: &CallArgs) -> Direction {
    if call.grad {
        Direction::Grad
    } else if call.backward {
        Direction::Backward
    } else {
        Direction::Forward
    }
}

impl Request {
    /// From the command line: `op` is a registry name, `einsum` (with an
    /// `equation` attribute) or a notation.
    pub fn from_args(op: &str, call: &CallArgs, registry: &Registry) -> Result<Request> {
        let attrs = parse::attrs(&call.attrs)?;
        let source = if is_notation(op) {
            RuleSource::Einsum {
                equation: op.to_string(),
                attrs,
            }
        } else {
            source_for(op, attrs, registry)?
        };
        Request::build(source, call)
    }

    /// From the command line, with an explicit notation (`spmd einsum`).
    pub fn from_notation(notation: &str, call: &CallArgs) -> Result<Request> {
        let attrs = parse::attrs(&call.attrs)?;
        Request::build(
            RuleSource::Einsum {
                equation: notation.to_string(),
                attrs,
            },
            call,
        )
    }

    fn build(source: RuleSource, call: &CallArgs) -> Result<Request> {
        let mesh_text = call.mesh.as_deref().ok_or_else(|| {
            CliError::usage("--mesh is required (the device mesh, like --mesh 2x4)")
        })?;
        let mesh = parse::mesh(mesh_text).map_err(|e| CliError::usage(format!("--mesh: {e}")))?;
        let direction = direction(call);
        let tensors = |flag: &str, list: &[String]| -> Result<Vec<Slot>> {
            list.iter()
                .enumerate()
                .map(|(i, text)| {
                    parse::slot(text)
                        .map_err(|e| CliError::usage(format!("{flag} #{i} `{text}`: {e}")))
                })
                .collect()
        };
        let inputs = tensors("--in", &call.inputs)?;
        let outputs = tensors("--out", &call.outputs)?;
        if direction != Direction::Forward && outputs.is_empty() {
            let what = if direction == Direction::Grad {
                "the output grads"
            } else {
                "the outputs"
            };
            return Err(CliError::usage(format!(
                "--{direction} needs {what} as --out SHAPE:MAPPING (and the inputs as --in)"
            )));
        }
        if direction == Direction::Forward && !outputs.is_empty() {
            return Err(CliError::usage(
                "--out is for --backward (the given outputs) and --grad (the output grads); forward inference derives the outputs",
            ));
        }
        let req = Request {
            id: None,
            source,
            mesh,
            direction,
            inputs,
            outputs,
            expectation: None,
        };
        req.check_tensors("--in #", "--out #")?;
        Ok(req)
    }

    /// Checks every tensor against its shape and the mesh, naming it as
    /// `{prefix}{index}`. Backward inputs' mappings are not checked (the rule
    /// ignores them) unless one was given.
    fn check_tensors(&self, in_prefix: &str, out_prefix: &str) -> Result<()> {
        for (prefix, list) in [(in_prefix, &self.inputs), (out_prefix, &self.outputs)] {
            for (i, t) in list.iter().enumerate() {
                let Some(t) = t else { continue };
                t.check(&self.mesh)
                    .map_err(|e| CliError::usage(format!("{prefix}{i} `{}`: {e}", t.text)))?;
            }
        }
        Ok(())
    }

    /// From a JSON file (`-` = stdin): one call object or an array of them.
    pub fn from_json_file(path: &str, registry: &Registry) -> Result<Vec<Request>> {
        let text = read_input(path)?;
        Self::from_json_text(&text, display_path(path), registry)
    }

    /// From JSON text (`name` says where it came from in messages): one call
    /// object or an array of them.
    pub fn from_json_text(text: &str, name: &str, registry: &Registry) -> Result<Vec<Request>> {
        let value: Value = serde_json::from_str(text)
            .map_err(|e| CliError::usage(format!("{}: malformed JSON: {e}", name)))?;
        let items = match value {
            Value::Array(items) => items,
            v @ Value::Object(_) => vec![v],
            _ => {
                return Err(CliError::usage(format!(
                    "{}: expected a JSON object (one call) or an array of them",
                    name
                )));
            }
        };
        if items.is_empty() {
            return Err(CliError::usage(format!(
                "{}: the array holds no call",
                name
            )));
        }
        items
            .into_iter()
            .enumerate()
            .map(|(n, v)| {
                Request::from_json(v, registry)
                    .map_err(|e| CliError::usage(format!("{} (call {n}): {}", name, e.message)))
            })
            .collect()
    }

    fn from_json(v: Value, registry: &Registry) -> Result<Request> {
        let call: JsonCall = serde_json::from_value(v)
            .map_err(|e| CliError::usage(format!("not a call of the conformance schema: {e}")))?;
        let attrs = Attrs::from_json("spmd", &Value::Object(call.attrs.clone()))?;
        let source = if call.op == "einsum" {
            let equation = call
                .attrs
                .get("equation")
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    CliError::usage(
                        "op `einsum` needs an `equation` attribute (a string like \"mk,kn->mn\")",
                    )
                })?;
            RuleSource::Einsum {
                equation: equation.to_string(),
                attrs,
            }
        } else {
            source_for(&call.op, attrs, registry)?
        };
        let mesh =
            Mesh::new(&call.mesh_shape).map_err(|e| CliError::usage(format!("mesh_shape: {e}")))?;
        let tensors = |role: &str, list: &[Option<Tensor>]| -> Result<Vec<Slot>> {
            list.iter()
                .enumerate()
                .map(|(i, t)| {
                    json_slot(t.as_ref()).map_err(|e| CliError::usage(format!("{role} {i}: {e}")))
                })
                .collect()
        };
        let direction = call.direction.unwrap_or(Direction::Forward);
        let req = Request {
            id: call.id,
            source,
            mesh,
            direction,
            inputs: tensors("input", &call.inputs)?,
            outputs: tensors("output", &call.outputs)?,
            expectation: call.expected.map(|expected| Expectation {
                expected,
                alternatives: call.alternatives,
            }),
        };
        req.check_tensors("input ", "output ")?;
        Ok(req)
    }

    /// Builds the rule.
    pub fn rule(&self, registry: &Registry) -> std::result::Result<Built, SpmdError> {
        match &self.source {
            RuleSource::Einsum { equation, .. } => Einsum::new(equation).map(Built::Einsum),
            RuleSource::Registered { name, attrs } => {
                // Through the registry, which checks the attribute names.
                let info = *registry.get(name)?;
                Ok(Built::Registered(registry.build(name, attrs)?, info))
            }
        }
    }

    /// Whether some input or output is absent.
    pub fn has_absent(&self) -> bool {
        self.inputs.iter().chain(&self.outputs).any(Option::is_none)
    }

    /// The inputs and outputs as owned (shape, attr) pairs, `None` when a
    /// tensor is absent (see [`Request::slots`]).
    pub fn parts(&self) -> Option<(Parts, Parts)> {
        let (ins, outs) = self.slots();
        let all = |l: Slots| l.into_iter().collect::<Option<Parts>>();
        Some((all(ins)?, all(outs)?))
    }

    /// The inputs and outputs as owned (shape, attr) pairs, `None` where absent.
    pub fn slots(&self) -> (Slots, Slots) {
        let p = |l: &[Slot]| {
            l.iter()
                .map(|t| t.as_ref().map(|t| (t.shape.clone(), t.attr())))
                .collect()
        };
        (p(&self.inputs), p(&self.outputs))
    }

    /// Runs the call. `Err` when the rule rejects it (an absent tensor the
    /// rule does not declare optional among the reasons).
    pub fn run(&self, built: &Built) -> std::result::Result<RuleResult, SpmdError> {
        let (rule, mesh) = (built.as_rule(), &self.mesh);
        let r = match self.parts() {
            Some((ins, outs)) => run_parts(rule, mesh, self.direction, &ins, &outs),
            // Absent tensors go through the rule's `*_optional` entry points.
            None => {
                let (ins, outs) = self.slots();
                run_optional(rule, mesh, self.direction, &ins, &outs)
            }
        };
        r.map_err(|e| built.named(e))
    }

    /// [`Request::run`], reporting each step of the inference to `trace`.
    /// `None` when a tensor is absent: the core traces only calls whose
    /// tensors are all present.
    pub fn run_traced(
        &self,
        rule: &Built,
        trace: &mut dyn Trace,
    ) -> Option<std::result::Result<RuleResult, SpmdError>> {
        let (ins, outs) = self.parts()?;
        Some(
            run_traced(
                rule.as_rule(),
                &self.mesh,
                self.direction,
                &ins,
                &outs,
                trace,
            )
            .map_err(|e| rule.named(e)),
        )
    }
}

// One runner for the CLI and the project's tests.
pub use spmd_conformance::{run_optional, run_parts, run_traced};

/// A built rule: a registered op (with its registry entry) or an einsum.
pub enum Built {
    Registered(Box<dyn SpmdRule>, RuleInfo),
    Einsum(Einsum),
}

impl Built {
    pub fn as_rule(&self) -> &dyn SpmdRule {
        match self {
            Built::Registered(r, _) => r.as_ref(),
            Built::Einsum(e) => e,
        }
    }

    /// `e` naming the op as the user called it (`relu`, not the shared
    /// elementwise rule it is registered with).
    pub fn named(&self, mut e: SpmdError) -> SpmdError {
        if let Built::Registered(_, info) = self {
            e.set_op(info.name);
        }
        e
    }
}

/// The rule source of an op name: `einsum` needs its `equation` attribute.
/// It runs as a notation even though the built-ins register `einsum` too
/// (the same rule), so reports name its equation and a missing one gets
/// the hint.
fn source_for(op: &str, attrs: Attrs, registry: &Registry) -> Result<RuleSource> {
    if op == "einsum" {
        return match attrs.get("equation") {
            Some(AttrValue::Str(eq)) => Ok(RuleSource::Einsum {
                equation: eq.clone(),
                attrs,
            }),
            _ => Err(CliError::usage(
                "op `einsum` needs its notation: --attr equation=mk,kn->mn (or use `spmd einsum NOTATION`)",
            )),
        };
    }
    registry
        .get(op)
        .map_err(|e| CliError::usage(format!("{e}; `spmd ops` lists the registered rules")))?;
    Ok(RuleSource::Registered {
        name: op.to_string(),
        attrs,
    })
}

/// A call in the conformance schema (a case; `id`, `expected` and
/// `alternatives` optional, other fields ignored).
#[derive(Deserialize)]
struct JsonCall {
    #[serde(default)]
    id: Option<String>,
    op: String,
    #[serde(default)]
    attrs: Map<String, Value>,
    mesh_shape: Vec<usize>,
    #[serde(default)]
    direction: Option<Direction>,
    #[serde(default)]
    inputs: Vec<Option<Tensor>>,
    #[serde(default)]
    outputs: Vec<Option<Tensor>>,
    #[serde(default)]
    expected: Option<Expected>,
    #[serde(default)]
    alternatives: Vec<Alternative>,
}

/// A tensor of a JSON case as a slot: `null`, or a `null` shape, is absent
/// (as the conformance schema reads them).
fn json_slot(t: Option<&Tensor>) -> std::result::Result<Slot, spmd_core::json::JsonError> {
    let Some(t) = t.filter(|t| t.shape.is_some()) else {
        return Ok(None);
    };
    let (shape, attr) = t.to_parts()?;
    Ok(Some(TensorArg {
        text: serde_json::to_string(t).unwrap_or_default(),
        shape,
        mapping: t.dims_mapping.as_ref().map(|_| attr.dims_mapping.clone()),
        partial: attr.partial,
    }))
}

/// A file's text, or stdin's for `-`.
pub fn read_input(path: &str) -> Result<String> {
    if path == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .map_err(|e| CliError::usage(format!("cannot read stdin: {e}")))?;
        return Ok(s);
    }
    let raw =
        std::fs::read(path).map_err(|e| CliError::usage(format!("cannot read {path}: {e}")))?;
    // gzip's magic bytes: `.json.gz` is read wherever `.json` is.
    let raw = if raw.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&raw[..]), &mut out)
            .map_err(|e| CliError::usage(format!("cannot decompress {path}: {e}")))?;
        out
    } else {
        raw
    };
    // A UTF-8 byte-order mark, as some editors write: not part of the JSON.
    let raw = match raw.strip_prefix(b"\xef\xbb\xbf") {
        Some(text) => text.to_vec(),
        None => raw,
    };
    String::from_utf8(raw).map_err(|e| CliError::usage(format!("{path}: not UTF-8 text: {e}")))
}

pub fn display_path(path: &str) -> &str {
    if path == "-" { "<stdin>" } else { path }
}
