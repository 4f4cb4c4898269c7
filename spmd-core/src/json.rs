//! The JSON forms of the core's values, behind the `serde` feature: a dims
//! mapping in Paddle's integer form or the nested co-shard form
//! ([`Mapping`]), a reduce type by Paddle's name, a given tensor
//! ([`Tensor`]: shape, mapping, partial status), a dist attr as an expected
//! answer describes it ([`Expect`]) and a rule result ([`Outcome`]). The
//! conformance vectors built on these forms, and their runner, are the
//! `spmd-conformance` crate.
//!
//! The wire types keep what the text says ([`Mapping`] keeps the raw
//! integers, partial dims and reduce names stay as written), so one bad value
//! never makes a whole file unreadable; the conversions to the core's types
//! ([`Tensor::to_parts`], [`Mapping::to_dims_mapping`], ...) check the values
//! and return a typed [`JsonError`]. Nothing here panics on any input.
//!
//! ```
//! use spmd_core::json::Tensor;
//! use spmd_core::{DistAttr, RuleResult};
//!
//! let t: Tensor = serde_json::from_str(r#"{"shape": [4, 2], "dims_mapping": [[0, 1], -1]}"#)?;
//! let (shape, attr) = t.to_parts()?;
//! assert_eq!((shape, attr.to_string()), (vec![4, 2], "[[0,1], -1]".to_string()));
//! let r = RuleResult { inputs: [attr].into_iter().collect(), outputs: Default::default() };
//! assert_eq!(
//!     serde_json::to_string(&r)?,
//!     r#"{"inputs":[{"dims_mapping":[[0,1],[]],"partial_dims":[]}],"outputs":[]}"#
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

use crate::dist_attr::{DimsMapping, DistAttr, Partial, ReduceType, Sharding};
use crate::mesh::{MAX_MESH_RANK, MeshDim};
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

    /// As [`JsonError::Parse`], at `path` within the document (`[3].inputs[0].shape`).
    #[error("malformed conformance JSON: {path}: {source}")]
    ParseAt {
        path: String,
        source: serde_json::Error,
    },

    /// A dims-mapping value that is neither `-1` nor a mesh dim `0..=7` (a mesh has at most 8 dims)
    /// (inside a nested co-shard list, `-1` is not allowed either: write `[]`).
    #[error(
        "dims mapping entry {dim}: {value} is not a mesh dim (expected -1 or 0..=7, or a list of 0..=7: a mesh has at most 8 dims)"
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
                    .map(|s| MappingEntry::Co(s.iter().map(|d| d as i64).collect()))
                    .collect(),
            ),
        }
    }
}

fn mesh_dim(dim: usize, v: i64) -> Result<MeshDim, JsonError> {
    match MeshDim::try_from(v) {
        Ok(d) if (d as usize) < MAX_MESH_RANK => Ok(d),
        _ => Err(JsonError::BadMeshDim { dim, value: v }),
    }
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

/// A partial mesh dim as written (`0..8`).
pub fn partial_dim(v: i64) -> Result<MeshDim, JsonError> {
    match MeshDim::try_from(v) {
        Ok(d) if (d as usize) < MAX_MESH_RANK => Ok(d),
        _ => Err(JsonError::BadPartialDim(v)),
    }
}

/// A `partial_reduce` key: a mesh dim as a string.
pub fn partial_key(k: &str) -> Result<MeshDim, JsonError> {
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
// Tensors and results

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
    use super::*;
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
        assert_eq!(Outcome::from_result(&r).to_rule_result().unwrap(), r);
        assert!(serde_json::from_str::<RuleResult>(r#"{"inputs": [null]}"#).is_err());
        assert!(serde_json::from_str::<RuleResult>(r#"{"inputs": [{}]}"#).is_err());
    }
}
