//! The JSON form of the conformance vectors (`tests/conformance/*.json`, schema in
//! `conformance/README.md`) and of rule results, behind the `serde` feature.
//!
//! The schema types keep what the file says ([`Mapping`] keeps the raw integers,
//! partial dims and reduce names stay as written), so one bad value in one case
//! never makes a whole file unreadable; the conversions to the core's types
//! ([`Tensor::to_parts`], [`Mapping::to_dims_mapping`], ...) check the values and
//! return a typed [`JsonError`]. Nothing here panics on any input.
//!
//! ```
//! use spmd_core::json::{self, Case};
//! use spmd_core::{Einsum, Mesh, Spec};
//!
//! let text = r#"[{"id": "dot", "op": "einsum", "attrs": {"equation": "ij,ij->i"},
//!   "mesh_shape": [2, 2], "direction": "forward",
//!   "inputs": [{"shape": [4, 2], "dims_mapping": [0, 1]},
//!              {"shape": [4, 2], "dims_mapping": [[0], []]}],
//!   "expected": {"inputs": [null, {"dims_mapping": [0, 1]}],
//!                "outputs": [{"dims_mapping": [0], "partial_dims": [1]}]}}]"#;
//! let cases: Vec<Case> = json::parse_cases(text)?;
//! let case = &cases[0];
//! let parts = case.input_parts()?;
//! let specs: Vec<Spec<'_>> = parts.iter().map(|(s, a)| Spec::new(s, a)).collect();
//! let rule = Einsum::new(case.attr_str("equation").unwrap())?;
//! let got = rule.forward(&Mesh::new(&case.mesh_shape)?, &specs);
//! assert!(case.check(&got).is_ok());
//! assert_eq!(
//!     serde_json::to_string(got.as_ref().unwrap())?,
//!     r#"{"inputs":[{"dims_mapping":[0,1],"partial_dims":[]},{"dims_mapping":[0,1],"partial_dims":[]}],"outputs":[{"dims_mapping":[0],"partial_dims":[1],"partial_reduce":{"1":"SUM"}}]}"#
//! );
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::ser::{SerializeSeq, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::dist_attr::{DimsMapping, DistAttr, Partial, ReduceType, Sharding};
use crate::error::SpmdError;
use crate::mesh::{MAX_MESH_RANK, MeshDim, MeshSet};
use crate::rule::RuleResult;

// ---------------------------------------------------------------------------
// Errors

/// What is wrong with a conformance file or with one value in it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JsonError {
    /// The text is not JSON, or does not have the schema's shape.
    #[error("malformed conformance JSON: {0}")]
    Parse(#[from] serde_json::Error),

    /// A dims-mapping value that is neither `-1` nor a mesh dim `0..=255`
    /// (inside a nested co-shard list, `-1` is not allowed either: write `[]`).
    #[error(
        "dims mapping entry {dim}: {value} is not a mesh dim (expected -1 or 0..=255, or a list of 0..=255)"
    )]
    BadMeshDim { dim: usize, value: i64 },

    /// A co-shard list with more mesh dims than a mesh can have.
    #[error("dims mapping entry {dim}: co-sharded over {count} mesh dims, at most 8 are possible")]
    TooManyMeshDims { dim: usize, count: usize },

    /// A partial mesh dim outside `0..8`.
    #[error("partial mesh dim {0} is out of range (a mesh has at most 8 dims)")]
    BadPartialDim(i64),

    /// A `partial_reduce` key that is not a mesh dim.
    #[error("partial_reduce key {0:?} is not a mesh dim")]
    BadPartialKey(String),

    /// A reduce-type name Paddle does not have.
    #[error("unknown reduce type {0:?} (expected SUM, AVG, MAX, MIN, PROD, ANY or ALL)")]
    UnknownReduce(String),

    /// A negative extent in a shape (Paddle's `-1`, an unknown extent).
    #[error("shape dim {dim} has extent {value}, which is not a known size")]
    BadExtent { dim: usize, value: i64 },

    /// A tensor whose `shape` is null (an absent optional tensor).
    #[error("the tensor has no shape (an absent optional tensor)")]
    MissingShape,

    /// An absent (`null`) tensor where the conversion needs one.
    #[error("{role} {index} is absent (null)")]
    AbsentTensor { role: &'static str, index: usize },

    /// A result entry without a dims mapping (only [`Outcome::to_rule_result`]).
    #[error("{role} {index} has no dims_mapping")]
    MissingMapping { role: &'static str, index: usize },
}

// ---------------------------------------------------------------------------
// Dims mappings

/// One entry of a JSON dims mapping, as written: Paddle's integer (`-1` or a
/// mesh dim) or the nested co-shard list (`[]` replicated, `[0, 1]` split over
/// mesh dims 0 then 1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MappingEntry {
    Dim(i64),
    Co(Vec<i64>),
}

/// A dims mapping as written in JSON: accepts Paddle's integer form `[-1, 0]`,
/// the nested form `[[0, 1], []]` and mixtures `[[0, 1], -1, 2]`. Not yet
/// validated: [`Mapping::to_dims_mapping`] checks the values.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Mapping(pub Vec<MappingEntry>);

impl Mapping {
    /// Checks the values and builds the core's mapping. Whether the mesh has
    /// these dims, whether a mesh dim is used twice and whether the length fits
    /// the tensor are left to inference, which reports them with context.
    pub fn to_dims_mapping(&self) -> Result<DimsMapping, JsonError> {
        let mut out = DimsMapping::default();
        for (dim, entry) in self.0.iter().enumerate() {
            let s = match entry {
                MappingEntry::Dim(-1) => Sharding::REPLICATED,
                MappingEntry::Dim(v) => Sharding::on(mesh_dim(dim, *v)?),
                MappingEntry::Co(list) => {
                    if list.len() > MAX_MESH_RANK {
                        return Err(JsonError::TooManyMeshDims {
                            dim,
                            count: list.len(),
                        });
                    }
                    let mut s = Sharding::REPLICATED;
                    for &v in list {
                        s.push(mesh_dim(dim, v)?);
                    }
                    s
                }
            };
            out.push(s);
        }
        Ok(out)
    }

    /// Paddle's integer form when no dim is co-sharded, the nested form (every
    /// entry a list) otherwise.
    pub fn from_dims_mapping(m: &DimsMapping) -> Mapping {
        match m.to_paddle() {
            Some(ints) => Mapping(ints.into_iter().map(MappingEntry::Dim).collect()),
            None => Mapping(
                m.as_slice()
                    .iter()
                    .map(|s| MappingEntry::Co(s.as_slice().iter().map(|&d| d as i64).collect()))
                    .collect(),
            ),
        }
    }
}

fn mesh_dim(dim: usize, v: i64) -> Result<MeshDim, JsonError> {
    MeshDim::try_from(v).map_err(|_| JsonError::BadMeshDim { dim, value: v })
}

impl From<&DimsMapping> for Mapping {
    fn from(m: &DimsMapping) -> Mapping {
        Mapping::from_dims_mapping(m)
    }
}

impl Serialize for MappingEntry {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            MappingEntry::Dim(d) => s.serialize_i64(*d),
            MappingEntry::Co(list) => {
                let mut seq = s.serialize_seq(Some(list.len()))?;
                for d in list {
                    seq.serialize_element(d)?;
                }
                seq.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for MappingEntry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = MappingEntry;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mesh dim (-1 for replicated) or a list of mesh dims")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<MappingEntry, E> {
                Ok(MappingEntry::Dim(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<MappingEntry, E> {
                i64::try_from(v)
                    .map(MappingEntry::Dim)
                    .map_err(|_| E::custom(format!("mesh dim {v} is out of range")))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<MappingEntry, A::Error> {
                let mut list = Vec::new();
                while let Some(v) = seq.next_element::<i64>()? {
                    list.push(v);
                }
                Ok(MappingEntry::Co(list))
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for Mapping {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Mapping {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Vec::<MappingEntry>::deserialize(d).map(Mapping)
    }
}

/// Serialized as [`Mapping::from_dims_mapping`] writes it.
impl Serialize for DimsMapping {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        Mapping::from_dims_mapping(self).serialize(s)
    }
}

/// Accepts every form [`Mapping`] does; a bad value is a deserialization error.
impl<'de> Deserialize<'de> for DimsMapping {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Mapping::deserialize(d)?
            .to_dims_mapping()
            .map_err(de::Error::custom)
    }
}

// ---------------------------------------------------------------------------
// Reduce types and partial status

/// A reduce type from Paddle's names: those of [`ReduceType::from_name`] plus
/// `PRODUCT` (how Paddle 3.3.1's Python binding prints `kRedProd`).
pub fn reduce_from_name(name: &str) -> Result<ReduceType, JsonError> {
    ReduceType::from_name(name)
        .or_else(|| {
            name.eq_ignore_ascii_case("PRODUCT")
                .then_some(ReduceType::Prod)
        })
        .ok_or_else(|| JsonError::UnknownReduce(name.to_string()))
}

impl Serialize for ReduceType {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.paddle_name())
    }
}

impl<'de> Deserialize<'de> for ReduceType {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        reduce_from_name(&name).map_err(de::Error::custom)
    }
}

fn partial_dim(v: i64) -> Result<MeshDim, JsonError> {
    match MeshDim::try_from(v) {
        Ok(d) if (d as usize) < MAX_MESH_RANK => Ok(d),
        _ => Err(JsonError::BadPartialDim(v)),
    }
}

fn partial_key(k: &str) -> Result<MeshDim, JsonError> {
    k.trim()
        .parse::<i64>()
        .ok()
        .and_then(|v| partial_dim(v).ok())
        .ok_or_else(|| JsonError::BadPartialKey(k.to_string()))
}

/// `partial_dims` plus `partial_reduce` as a [`Partial`]: every listed dim and
/// every key of the map is partial, with the map's reduce type or `Sum`.
fn build_partial(
    dims: &[i64],
    reduce: Option<&BTreeMap<String, String>>,
) -> Result<Partial, JsonError> {
    let mut p = Partial::NONE;
    for &d in dims {
        p.set(partial_dim(d)?, ReduceType::Sum);
    }
    for (k, r) in reduce.into_iter().flatten() {
        p.set(partial_key(k)?, reduce_from_name(r)?);
    }
    Ok(p)
}

fn partial_list(p: &Partial) -> Vec<i64> {
    p.dims().iter().map(|d| d as i64).collect()
}

fn reduce_map(p: &Partial) -> BTreeMap<String, String> {
    p.iter()
        .map(|(d, r)| (d.to_string(), r.paddle_name().to_string()))
        .collect()
}

// ---------------------------------------------------------------------------
// Cases

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

/// A given tensor (the README's `T`).
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Tensor {
    /// `null` for an absent optional tensor. Kept as written: some vectors
    /// carry Paddle's `-1` (unknown extent) in a shape.
    #[serde(default)]
    pub shape: Option<Vec<i64>>,
    /// `null` when the case does not set it (read as replicated).
    #[serde(default)]
    pub dims_mapping: Option<Mapping>,
    #[serde(default)]
    pub partial_dims: Vec<i64>,
    /// Reduce types of the partial dims (default `SUM`); not in the README's
    /// schema, accepted so that a non-Sum partial input can be written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial_reduce: Option<BTreeMap<String, String>>,
}

/// The README's name for [`Tensor`].
pub type T = Tensor;

impl Tensor {
    /// The global shape and the dist attr. A `null` dims mapping is
    /// replicated; partial dims get their `partial_reduce` type or `Sum`.
    pub fn to_parts(&self) -> Result<(Vec<usize>, DistAttr), JsonError> {
        let shape = self
            .shape
            .as_ref()
            .ok_or(JsonError::MissingShape)?
            .iter()
            .enumerate()
            .map(|(dim, &v)| usize::try_from(v).map_err(|_| JsonError::BadExtent { dim, value: v }))
            .collect::<Result<Vec<usize>, _>>()?;
        let mapping = match &self.dims_mapping {
            Some(m) => m.to_dims_mapping()?,
            None => DimsMapping::replicated(shape.len()),
        };
        let partial = build_partial(&self.partial_dims, self.partial_reduce.as_ref())?;
        Ok((shape, DistAttr::new(mapping).with_partial(partial)))
    }
}

/// What a case asserts about one tensor (the README's `E`). Every field is
/// optional; only those present are compared.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Expect {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dims_mapping: Option<Mapping>,
    /// Paddle's co-shard form of the same mapping; when present it is compared
    /// instead of `dims_mapping` (which then holds only Paddle's lossy form).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multi_dims_mapping: Option<Mapping>,
    /// Exactly this set of mesh dims is partial (`[]`: not partial).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial_dims: Option<Vec<i64>>,
    /// Mesh dim (as a string key) -> reduce type name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial_reduce: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_partial: Option<bool>,
}

/// The README's name for [`Expect`].
pub type E = Expect;

impl Expect {
    /// The full description of a dist attr, as results are printed:
    /// `dims_mapping`, `partial_dims`, and `partial_reduce` when partial.
    pub fn from_attr(a: &DistAttr) -> Expect {
        Expect {
            dims_mapping: Some(Mapping::from_dims_mapping(&a.dims_mapping)),
            multi_dims_mapping: None,
            partial_dims: Some(partial_list(&a.partial)),
            partial_reduce: a.partial.is_partial().then(|| reduce_map(&a.partial)),
            is_partial: None,
        }
    }

    /// The dist attr this entry describes; `dims_mapping` (or
    /// `multi_dims_mapping`) must be present.
    pub fn to_attr(&self) -> Result<Option<DistAttr>, JsonError> {
        let Some(m) = self
            .multi_dims_mapping
            .as_ref()
            .or(self.dims_mapping.as_ref())
        else {
            return Ok(None);
        };
        let partial = build_partial(
            self.partial_dims.as_deref().unwrap_or(&[]),
            self.partial_reduce.as_ref(),
        )?;
        Ok(Some(
            DistAttr::new(m.to_dims_mapping()?).with_partial(partial),
        ))
    }

    /// Compares `got` on the keys present; each difference is one line of
    /// `out`, prefixed with `what` (e.g. `output 0`).
    fn compare(&self, what: &str, got: &DistAttr, out: &mut Vec<String>) {
        let mapping = self
            .multi_dims_mapping
            .as_ref()
            .or(self.dims_mapping.as_ref());
        if let Some(m) = mapping {
            match m.to_dims_mapping() {
                Ok(want) if want == got.dims_mapping => {}
                Ok(want) => out.push(format!(
                    "{what}: dims_mapping expected {want}, got {}",
                    got.dims_mapping
                )),
                Err(e) => out.push(format!("{what}: the expected dims_mapping is invalid: {e}")),
            }
        }
        if let Some(dims) = &self.partial_dims {
            match dims
                .iter()
                .map(|&d| partial_dim(d))
                .collect::<Result<Vec<_>, _>>()
            {
                Ok(list) => {
                    let want = list.into_iter().fold(MeshSet::EMPTY, MeshSet::with);
                    if want != got.partial.dims() {
                        out.push(format!(
                            "{what}: partial_dims expected {want}, got {} (attr {got})",
                            got.partial.dims()
                        ));
                    }
                }
                Err(e) => out.push(format!(
                    "{what}: the expected partial_dims are invalid: {e}"
                )),
            }
        }
        for (k, r) in self.partial_reduce.iter().flatten() {
            match (partial_key(k), reduce_from_name(r)) {
                (Ok(d), Ok(want)) => match got.partial.reduce_type(d) {
                    Some(have) if have == want => {}
                    Some(have) => out.push(format!(
                        "{what}: partial over mesh dim {d} expected {want}, got {have}"
                    )),
                    None => out.push(format!(
                        "{what}: expected partial over mesh dim {d} ({want}), got not partial there (attr {got})"
                    )),
                },
                (Err(e), _) | (_, Err(e)) => {
                    out.push(format!("{what}: the expected partial_reduce is invalid: {e}"))
                }
            }
        }
        if let Some(want) = self.is_partial
            && want != got.partial.is_partial()
        {
            out.push(format!(
                "{what}: is_partial expected {want}, got {} (attr {got})",
                got.partial.is_partial()
            ));
        }
    }
}

/// The result form of `expected` (and the JSON form of a [`RuleResult`]).
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Outcome {
    #[serde(default)]
    pub inputs: Vec<Option<Expect>>,
    #[serde(default)]
    pub outputs: Vec<Option<Expect>>,
}

impl Outcome {
    /// Every tensor of `r`, fully described.
    pub fn from_result(r: &RuleResult) -> Outcome {
        Outcome {
            inputs: r
                .inputs
                .iter()
                .map(|a| Some(Expect::from_attr(a)))
                .collect(),
            outputs: r
                .outputs
                .iter()
                .map(|a| Some(Expect::from_attr(a)))
                .collect(),
        }
    }

    /// Back to a [`RuleResult`]; every entry must be present with a dims mapping.
    pub fn to_rule_result(&self) -> Result<RuleResult, JsonError> {
        fn attr(
            role: &'static str,
            index: usize,
            e: &Option<Expect>,
        ) -> Result<DistAttr, JsonError> {
            e.as_ref()
                .ok_or(JsonError::AbsentTensor { role, index })?
                .to_attr()?
                .ok_or(JsonError::MissingMapping { role, index })
        }
        let mut r = RuleResult::default();
        for (i, e) in self.inputs.iter().enumerate() {
            r.inputs.push(attr("input", i, e)?);
        }
        for (i, e) in self.outputs.iter().enumerate() {
            r.outputs.push(attr("output", i, e)?);
        }
        Ok(r)
    }

    /// Compares `got` with the entries present (a `null` entry, or one past the
    /// end of the list, is not asserted).
    pub fn check(&self, got: &RuleResult) -> Result<(), Mismatch> {
        let mut out = Vec::new();
        for (role, want, have) in [
            ("input", &self.inputs, got.inputs.as_slice()),
            ("output", &self.outputs, got.outputs.as_slice()),
        ] {
            for (i, e) in want.iter().enumerate() {
                let Some(e) = e else { continue };
                match have.get(i) {
                    Some(a) => e.compare(&format!("{role} {i}"), a, &mut out),
                    None => out.push(format!(
                        "{role} {i}: expected, but the result has only {} {role}(s)",
                        have.len()
                    )),
                }
            }
        }
        if out.is_empty() {
            Ok(())
        } else {
            Err(Mismatch { details: out })
        }
    }
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

impl Expected {
    pub fn is_error(&self) -> bool {
        matches!(self, Expected::Error(_))
    }

    /// Whether `got` satisfies this expectation: an error form is satisfied by
    /// any error, a result form by a result that matches every asserted key.
    pub fn check(&self, got: &Result<RuleResult, SpmdError>) -> Result<(), Mismatch> {
        match (self, got) {
            (Expected::Error(_), Err(_)) => Ok(()),
            (Expected::Error(e), Ok(r)) => Err(Mismatch {
                details: alloc::vec![format!(
                    "expected an error ({}), got a result {}",
                    e.message
                        .as_deref()
                        .or(e.error_type.as_deref())
                        .unwrap_or("any"),
                    Brief(r)
                )],
            }),
            (Expected::Result(_), Err(e)) => Err(Mismatch {
                details: alloc::vec![format!("expected a result, got the error: {e}")],
            }),
            (Expected::Result(o), Ok(r)) => o.check(r),
        }
    }
}

/// How a passing case matched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Agreement {
    /// With `expected`.
    Expected,
    /// With `alternatives[i].expected`.
    Alternative(usize),
}

/// Why a result does not match: one line per difference.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Mismatch {
    pub details: Vec<String>,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.details.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            f.write_str(d)?;
        }
        Ok(())
    }
}

impl core::error::Error for Mismatch {}

/// `RuleResult` in one line, for messages: `in [..] [..] -> out [..]`.
struct Brief<'a>(&'a RuleResult);

impl fmt::Display for Brief<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("in")?;
        for a in &self.0.inputs {
            write!(f, " {a}")?;
        }
        f.write_str(" -> out")?;
        for a in &self.0.outputs {
            write!(f, " {a}")?;
        }
        Ok(())
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
    /// of [`SpmdRule`](crate::SpmdRule).
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

    /// Passes when `got` matches `expected` or the `expected` of any
    /// alternative; otherwise the mismatch against `expected` (with a note on
    /// how many alternatives were tried).
    pub fn check(&self, got: &Result<RuleResult, SpmdError>) -> Result<Agreement, Mismatch> {
        check_against(&self.expected, &self.alternatives, got)
    }
}

/// Passes when `got` matches `expected` or the `expected` of any alternative;
/// otherwise the mismatch against `expected` (with a note on how many
/// alternatives were tried).
pub fn check_against(
    expected: &Expected,
    alternatives: &[Alternative],
    got: &Result<RuleResult, SpmdError>,
) -> Result<Agreement, Mismatch> {
    let mut first = match expected.check(got) {
        Ok(()) => return Ok(Agreement::Expected),
        Err(m) => m,
    };
    for (i, alt) in alternatives.iter().enumerate() {
        if alt.expected.check(got).is_ok() {
            return Ok(Agreement::Alternative(i));
        }
    }
    if !alternatives.is_empty() {
        first.details.push(format!(
            "no alternative matches either ({} tried)",
            alternatives.len()
        ));
    }
    Err(first)
}

/// The table of a deviations file (the project's `DEVIATIONS.md` format):
/// every table row whose first cell is a case id (backticks allowed), with the
/// reason from its last cell. An error names the line of a row without a
/// reason or of an id listed twice.
pub fn parse_deviations(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut out = alloc::collections::BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if !line.starts_with('|') {
            continue;
        }
        let cells: Vec<&str> = line
            .trim_matches('|')
            .split('|')
            .map(|c| c.trim().trim_matches('`').trim())
            .collect();
        let id = cells[0];
        if id.is_empty() || id == "case" || id.starts_with('-') || id.starts_with(':') {
            continue;
        }
        let reason = cells.last().copied().unwrap_or_default();
        if cells.len() < 2 || reason.is_empty() {
            return Err(format!(
                "line {}: a deviation needs a reason: {line}",
                n + 1
            ));
        }
        if out.insert(id.to_string(), reason.to_string()).is_some() {
            return Err(format!("line {}: {id} is listed twice", n + 1));
        }
    }
    Ok(out)
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

/// A conformance file: a JSON array of cases.
pub fn parse_cases(text: &str) -> Result<Vec<Case>, JsonError> {
    Ok(serde_json::from_str(text)?)
}

// ---------------------------------------------------------------------------
// Results

/// A dist attr as the schema's `E`: `{"dims_mapping": [...], "partial_dims":
/// [...], "partial_reduce": {...}}` (the last only when partial).
impl Serialize for DistAttr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        Expect::from_attr(self).serialize(s)
    }
}

impl<'de> Deserialize<'de> for DistAttr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Expect::deserialize(d)?
            .to_attr()
            .map_err(de::Error::custom)?
            .ok_or_else(|| de::Error::custom("a dist attr needs a dims_mapping"))
    }
}

/// `{"inputs": [E...], "outputs": [E...]}`, the schema's `expected` form.
impl Serialize for RuleResult {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        Outcome::from_result(self).serialize(s)
    }
}

impl<'de> Deserialize<'de> for RuleResult {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Outcome::deserialize(d)?
            .to_rule_result()
            .map_err(de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn deviations_table_rows_need_a_reason_and_one_listing() {
        let ok = "| case | kind | reason |\n|---|---|---|\n| `a_1` | k | because |\n";
        let t = super::parse_deviations(ok).unwrap();
        assert_eq!(t.get("a_1").map(String::as_str), Some("because"));
        let no_reason = "| `a_1` | k | |\n";
        assert!(
            super::parse_deviations(no_reason)
                .unwrap_err()
                .contains("line 1")
        );
        let twice = "| `a_1` | k | x |\n| `a_1` | k | y |\n";
        assert!(
            super::parse_deviations(twice)
                .unwrap_err()
                .contains("listed twice")
        );
    }

    use super::*;
    use crate::{Einsum, Mesh, Spec};
    use alloc::vec;

    fn mapping(text: &str) -> Result<DimsMapping, JsonError> {
        serde_json::from_str::<Mapping>(text)?.to_dims_mapping()
    }

    fn co(d: &[u8]) -> Sharding {
        Sharding::co(d).unwrap()
    }

    #[test]
    fn mappings_in_every_form() {
        let paddle = mapping("[-1, 0, 2]").unwrap();
        assert_eq!(paddle, DimsMapping::from_paddle(&[-1, 0, 2]).unwrap());
        let nested = mapping("[[], [0], [2]]").unwrap();
        assert_eq!(nested, paddle);
        let mixed = mapping("[[0, 1], -1, 2]").unwrap();
        assert_eq!(
            mixed,
            DimsMapping::from_shardings(&[co(&[0, 1]), Sharding::REPLICATED, Sharding::on(2)])
        );
        assert_eq!(mapping("[]").unwrap().rank(), 0);
    }

    #[test]
    fn mappings_serialize_to_paddle_form_unless_co_sharded() {
        let m = DimsMapping::from_paddle(&[-1, 1]).unwrap();
        assert_eq!(serde_json::to_string(&m).unwrap(), "[-1,1]");
        let c = DimsMapping::from_shardings(&[co(&[0, 1]), Sharding::REPLICATED, Sharding::on(2)]);
        assert_eq!(serde_json::to_string(&c).unwrap(), "[[0,1],[],[2]]");
        for m in [m, c] {
            let back: DimsMapping =
                serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
            assert_eq!(back, m);
        }
    }

    #[test]
    fn bad_mappings_are_typed_errors() {
        assert!(matches!(
            mapping("[-1, -2]"),
            Err(JsonError::BadMeshDim { dim: 1, value: -2 })
        ));
        assert!(matches!(
            mapping("[256]"),
            Err(JsonError::BadMeshDim { dim: 0, value: 256 })
        ));
        assert!(matches!(
            mapping("[[0, -1]]"),
            Err(JsonError::BadMeshDim { dim: 0, value: -1 })
        ));
        assert!(matches!(
            mapping("[[0,1,2,3,4,5,6,7,0]]"),
            Err(JsonError::TooManyMeshDims { dim: 0, count: 9 })
        ));
        // Not numbers at all: a parse error, never a panic.
        for text in [
            "[1.5]",
            "[\"0\"]",
            "[[[0]]]",
            "{}",
            "[18446744073709551615]",
            "[",
        ] {
            assert!(matches!(mapping(text), Err(JsonError::Parse(_))), "{text}");
        }
        // A bad value through `Deserialize for DimsMapping` is a serde error.
        assert!(serde_json::from_str::<DimsMapping>("[-3]").is_err());
    }

    #[test]
    fn reduce_names() {
        assert_eq!(reduce_from_name("SUM").unwrap(), ReduceType::Sum);
        assert_eq!(reduce_from_name("PRODUCT").unwrap(), ReduceType::Prod);
        assert_eq!(reduce_from_name("kRedMax").unwrap(), ReduceType::Max);
        assert!(matches!(
            reduce_from_name("MEDIAN"),
            Err(JsonError::UnknownReduce(_))
        ));
        assert_eq!(serde_json::to_string(&ReduceType::Avg).unwrap(), "\"AVG\"");
        assert_eq!(
            serde_json::from_str::<ReduceType>("\"min\"").unwrap(),
            ReduceType::Min
        );
    }

    const CASE: &str = r#"{
        "id": "x", "source": "s", "op": "einsum", "attrs": {"equation": "mk,kn->mn"},
        "mesh_shape": [2, 3], "direction": "forward",
        "inputs": [{"shape": [4, 6], "dims_mapping": [1, 0], "partial_dims": []},
                   {"shape": [6, 8], "dims_mapping": null}],
        "outputs": [],
        "expected": {"inputs": [{"dims_mapping": [1, 0]}, null],
                     "outputs": [{"dims_mapping": [1, -1], "partial_dims": [0],
                                  "partial_reduce": {"0": "SUM"}}]},
        "einsum": "...mk,...kn->...mn",
        "paddle_3_3_1": {"agrees": true}, "unknown": [1, 2]
    }"#;

    fn run(case: &Case) -> Result<RuleResult, SpmdError> {
        let parts = case.input_parts().unwrap();
        let specs: Vec<Spec<'_>> = parts.iter().map(|(s, a)| Spec::new(s, a)).collect();
        Einsum::new(case.attr_str("equation").unwrap())?
            .forward(&Mesh::new(&case.mesh_shape)?, &specs)
    }

    #[test]
    fn a_case_parses_runs_and_matches() {
        let case: Case = serde_json::from_str(CASE).unwrap();
        assert_eq!(case.direction, Direction::Forward);
        assert_eq!(case.einsum.as_deref(), Some("...mk,...kn->...mn"));
        assert!(case.alternatives.is_empty());
        let parts = case.input_parts().unwrap();
        assert_eq!(parts[1].0, vec![6, 8]);
        assert_eq!(parts[1].1, DistAttr::replicated(2));
        let got = run(&case);
        assert_eq!(case.check(&got), Ok(Agreement::Expected));
    }

    #[test]
    fn mismatches_are_described() {
        let mut case: Case = serde_json::from_str(CASE).unwrap();
        let Expected::Result(o) = &mut case.expected else {
            panic!()
        };
        let out = o.outputs[0].as_mut().unwrap();
        out.dims_mapping = Some(serde_json::from_str("[-1, 1]").unwrap());
        out.partial_dims = Some(vec![1]);
        out.partial_reduce = Some([("0".to_string(), "MAX".to_string())].into());
        out.is_partial = Some(false);
        let got = run(&case);
        let m = case.check(&got).unwrap_err();
        assert_eq!(m.details.len(), 4, "{m}");
        let text = m.to_string();
        assert!(
            text.contains("output 0: dims_mapping expected [-1, 1], got [1, -1]"),
            "{text}"
        );
        assert!(
            text.contains("partial_dims expected [1], got [0]"),
            "{text}"
        );
        assert!(text.contains("expected MAX, got SUM"), "{text}");
        assert!(
            text.contains("is_partial expected false, got true"),
            "{text}"
        );

        // An alternative that matches makes the case pass.
        let right: Expected = serde_json::from_str(
            r#"{"inputs": [], "outputs": [{"dims_mapping": [1, -1], "is_partial": true}]}"#,
        )
        .unwrap();
        case.alternatives.push(Alternative {
            reason: None,
            expected: right,
        });
        assert_eq!(case.check(&got), Ok(Agreement::Alternative(0)));
    }

    #[test]
    fn error_cases() {
        let e: Expected =
            serde_json::from_str(r#"{"error": true, "error_type": "ValueError"}"#).unwrap();
        assert!(e.is_error());
        let err: Result<RuleResult, SpmdError> = Err(SpmdError::InvalidMesh { shape: vec![] });
        assert!(e.check(&err).is_ok());
        let ok = Ok(RuleResult::default());
        assert!(
            e.check(&ok)
                .unwrap_err()
                .to_string()
                .contains("expected an error")
        );
        let r: Expected = serde_json::from_str(r#"{"inputs": [], "outputs": []}"#).unwrap();
        assert!(r.check(&ok).is_ok());
        assert!(
            r.check(&err)
                .unwrap_err()
                .to_string()
                .contains("got the error")
        );
        // Neither form.
        assert!(serde_json::from_str::<Expected>("{}").is_err());
        assert!(serde_json::from_str::<Expected>(r#"{"error": false}"#).is_err());
        // Round trip of the error form.
        let text = serde_json::to_string(&e).unwrap();
        assert_eq!(serde_json::from_str::<Expected>(&text).unwrap(), e);
    }

    #[test]
    fn missing_result_entries_and_nulls() {
        let o: Outcome =
            serde_json::from_str(r#"{"inputs": [null, {"dims_mapping": [0]}]}"#).unwrap();
        let got = RuleResult {
            inputs: [DistAttr::replicated(1)].into_iter().collect(),
            outputs: Default::default(),
        };
        let m = o.check(&got).unwrap_err();
        assert_eq!(
            m.details,
            vec!["input 1: expected, but the result has only 1 input(s)".to_string()]
        );
    }

    #[test]
    fn multi_dims_mapping_wins_over_the_lossy_one() {
        let e: Expect =
            serde_json::from_str(r#"{"dims_mapping": [1], "multi_dims_mapping": [[0, 1]]}"#)
                .unwrap();
        let got = DistAttr::new(DimsMapping::from_shardings(&[co(&[0, 1])]));
        let mut out = Vec::new();
        e.compare("input 0", &got, &mut out);
        assert!(out.is_empty(), "{out:?}");
    }

    #[test]
    fn tensor_conversions() {
        let t: Tensor = serde_json::from_str(
            r#"{"shape": [4, 6], "dims_mapping": [[0, 1], -1], "partial_dims": [2],
                "partial_reduce": {"3": "MAX"}}"#,
        )
        .unwrap();
        let (shape, attr) = t.to_parts().unwrap();
        assert_eq!(shape, vec![4, 6]);
        assert_eq!(attr.to_string(), "[[0,1], -1] partial{2: SUM, 3: MAX}");

        let absent: Tensor =
            serde_json::from_str(r#"{"shape": null, "dims_mapping": null}"#).unwrap();
        assert!(matches!(absent.to_parts(), Err(JsonError::MissingShape)));
        let dynamic: Tensor = serde_json::from_str(r#"{"shape": [0, -1]}"#).unwrap();
        assert!(matches!(
            dynamic.to_parts(),
            Err(JsonError::BadExtent { dim: 1, value: -1 })
        ));
        let bad: Tensor = serde_json::from_str(r#"{"shape": [4], "dims_mapping": [-7]}"#).unwrap();
        assert!(matches!(
            bad.to_parts(),
            Err(JsonError::BadMeshDim { dim: 0, value: -7 })
        ));
        for partial in [r#""partial_dims": [8]"#, r#""partial_dims": [-1]"#] {
            let t: Tensor =
                serde_json::from_str(&format!(r#"{{"shape": [4], {partial}}}"#)).unwrap();
            assert!(matches!(t.to_parts(), Err(JsonError::BadPartialDim(_))));
        }
        let t: Tensor =
            serde_json::from_str(r#"{"shape": [4], "partial_reduce": {"x": "SUM"}}"#).unwrap();
        assert!(matches!(t.to_parts(), Err(JsonError::BadPartialKey(_))));
        // A length that disagrees with the shape is inference's business.
        let t: Tensor = serde_json::from_str(r#"{"shape": [4], "dims_mapping": [0, 1]}"#).unwrap();
        assert_eq!(t.to_parts().unwrap().1.dims_mapping.rank(), 2);
    }

    #[test]
    fn rule_results_round_trip() {
        let mut p = Partial::NONE;
        p.set(1, ReduceType::Max);
        let r = RuleResult {
            inputs: [
                DistAttr::from_paddle(&[0, -1]).unwrap(),
                DistAttr::new(DimsMapping::from_shardings(&[
                    co(&[0, 2]),
                    Sharding::REPLICATED,
                ])),
            ]
            .into_iter()
            .collect(),
            outputs: [DistAttr::from_paddle(&[-1]).unwrap().with_partial(p)]
                .into_iter()
                .collect(),
        };
        let text = serde_json::to_string(&r).unwrap();
        assert_eq!(
            text,
            r#"{"inputs":[{"dims_mapping":[0,-1],"partial_dims":[]},{"dims_mapping":[[0,2],[]],"partial_dims":[]}],"outputs":[{"dims_mapping":[-1],"partial_dims":[1],"partial_reduce":{"1":"MAX"}}]}"#
        );
        assert_eq!(serde_json::from_str::<RuleResult>(&text).unwrap(), r);
        // Its own description always matches it.
        let o = Outcome::from_result(&r);
        assert!(o.check(&r).is_ok());
        assert!(serde_json::from_str::<RuleResult>(r#"{"inputs": [null]}"#).is_err());
        assert!(serde_json::from_str::<RuleResult>(r#"{"inputs": [{}]}"#).is_err());
    }

    #[test]
    fn malformed_files_are_errors() {
        for text in [
            "",
            "{",
            "{}",
            "[{}]",
            r#"[{"id": "x"}]"#,
            r#"[{"id": "x", "op": "a", "mesh_shape": [2], "direction": "sideways",
                 "expected": {"error": true}}]"#,
            r#"[{"id": "x", "op": "a", "mesh_shape": [-2], "direction": "forward",
                 "expected": {"error": true}}]"#,
            r#"[{"id": "x", "op": "a", "mesh_shape": [2], "direction": "forward",
                 "inputs": [{"shape": [2], "dims_mapping": ["a"]}],
                 "expected": {"error": true}}]"#,
        ] {
            assert!(
                matches!(parse_cases(text), Err(JsonError::Parse(_))),
                "{text}"
            );
        }
        let ok = parse_cases(
            r#"[{"id": "x", "op": "a", "mesh_shape": [2], "direction": "grad",
                 "expected": {"error": true}, "extra": {"anything": null}}]"#,
        )
        .unwrap();
        assert_eq!(ok[0].direction, Direction::Grad);
        assert!(ok[0].inputs.is_empty());
    }
}
