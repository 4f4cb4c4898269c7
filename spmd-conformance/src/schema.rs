//! The case schema (`tests/conformance/README.md`): one rule call, with its
//! op, attributes, mesh, direction, tensors and what the answer should be.
//! Its tensors and expected answers are the core's JSON forms
//! ([`spmd_core::json`]); a bad value in one case is a typed error for that
//! case, never a panic.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use spmd_core::DistAttr;
use spmd_core::json::{Expect, JsonError, Outcome, Tensor};

/// Which inference a case exercises.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    Forward,
    Backward,
    Grad,
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Direction::Forward => "forward",
            Direction::Backward => "backward",
            Direction::Grad => "grad",
        })
    }
}

/// One conformance case. Fields the schema has but this type does not
/// (`paddle_3_3_1`, `source_commit`, ...) are ignored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Case {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Paddle's registry name.
    pub op: String,
    /// Paddle's attribute names and values.
    #[serde(default)]
    pub attrs: Map<String, Value>,
    pub mesh_shape: Vec<usize>,
    pub direction: Direction,
    /// `null` entries are absent optional inputs.
    #[serde(default)]
    pub inputs: Vec<Option<Tensor>>,
    #[serde(default)]
    pub outputs: Vec<Option<Tensor>>,
    pub expected: Expected,
    /// The op's notation, where it is einsum-expressible.
    #[serde(default)]
    pub einsum: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alternatives: Vec<Alternative>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notes: Option<String>,
}

/// Another accepted answer of a case, with why it is accepted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Alternative {
    #[serde(default)]
    pub reason: Option<String>,
    pub expected: Expected,
}

/// The error form of `expected`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ExpectedError {
    pub error_type: Option<String>,
    pub message: Option<String>,
}

/// A case's `expected`: a result to compare, or an error (any error passes;
/// the message need not match).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RawExpected", into = "RawExpected")]
pub enum Expected {
    Result(Outcome),
    Error(ExpectedError),
}

#[derive(Serialize, Deserialize)]
struct RawExpected {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    inputs: Option<Vec<Option<Expect>>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    outputs: Option<Vec<Option<Expect>>>,
}

impl TryFrom<RawExpected> for Expected {
    type Error = String;
    fn try_from(r: RawExpected) -> Result<Expected, String> {
        if r.error == Some(true) {
            return Ok(Expected::Error(ExpectedError {
                error_type: r.error_type,
                message: r.message,
            }));
        }
        if r.inputs.is_none() && r.outputs.is_none() {
            return Err(String::from(
                "`expected` has neither `inputs`/`outputs` nor `\"error\": true`",
            ));
        }
        Ok(Expected::Result(Outcome {
            inputs: r.inputs.unwrap_or_default(),
            outputs: r.outputs.unwrap_or_default(),
        }))
    }
}

impl From<Expected> for RawExpected {
    fn from(e: Expected) -> RawExpected {
        match e {
            Expected::Result(o) => RawExpected {
                error: None,
                error_type: None,
                message: None,
                inputs: Some(o.inputs),
                outputs: Some(o.outputs),
            },
            Expected::Error(e) => RawExpected {
                error: Some(true),
                error_type: e.error_type,
                message: e.message,
                inputs: None,
                outputs: None,
            },
        }
    }
}

impl Case {
    /// An attribute as a string (`equation` of einsum, ...).
    pub fn attr_str(&self, name: &str) -> Option<&str> {
        self.attrs.get(name).and_then(Value::as_str)
    }

    /// Every input's shape and dist attr (an absent input is an error).
    pub fn input_parts(&self) -> Result<Vec<(Vec<usize>, DistAttr)>, JsonError> {
        parts("input", &self.inputs)
    }

    /// Every output's shape and dist attr (an absent output is an error).
    pub fn output_parts(&self) -> Result<Vec<(Vec<usize>, DistAttr)>, JsonError> {
        parts("output", &self.outputs)
    }

    /// Every input's shape and dist attr, `None` for an absent optional one
    /// (a `null` entry, or a `null` shape), for the `*_optional` entry points
    /// of [`SpmdRule`](spmd_core::SpmdRule).
    pub fn input_slots(&self) -> Result<Vec<Option<Parts>>, JsonError> {
        slots(&self.inputs)
    }

    /// Every output's shape and dist attr, `None` for an absent one.
    pub fn output_slots(&self) -> Result<Vec<Option<Parts>>, JsonError> {
        slots(&self.outputs)
    }

    /// Whether some input or output is absent.
    pub fn has_absent(&self) -> bool {
        self.inputs
            .iter()
            .chain(&self.outputs)
            .any(|t| t.as_ref().is_none_or(|t| t.shape.is_none()))
    }
}

fn parts(
    role: &'static str,
    tensors: &[Option<Tensor>],
) -> Result<Vec<(Vec<usize>, DistAttr)>, JsonError> {
    tensors
        .iter()
        .enumerate()
        .map(|(index, t)| {
            t.as_ref()
                .ok_or(JsonError::AbsentTensor { role, index })?
                .to_parts()
        })
        .collect()
}

/// A tensor's global shape and dist attr.
pub type Parts = (Vec<usize>, DistAttr);

fn slots(tensors: &[Option<Tensor>]) -> Result<Vec<Option<Parts>>, JsonError> {
    tensors
        .iter()
        .map(|t| match t {
            Some(t) if t.shape.is_some() => t.to_parts().map(Some),
            _ => Ok(None),
        })
        .collect()
}

/// A conformance file: a JSON array of cases. An error names the case and
/// the field (`[3].inputs[0].shape`) where the file goes wrong.
pub fn parse_cases(text: &str) -> Result<Vec<Case>, JsonError> {
    let mut de = serde_json::Deserializer::from_str(text);
    let cases = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let source = e.into_inner();
        if path == "." {
            JsonError::Parse(source)
        } else {
            JsonError::ParseAt { path, source }
        }
    })?;
    de.end()?;
    Ok(cases)
}
