//! The compact command-line syntax: meshes (`2x4`), tensors
//! (`64x32:[1,-1]:partial(0:sum)`) and attributes (`trans_x=true`).
//!
//! Every error is one line saying what was wrong and what was expected; the
//! caller prefixes it with the argument it came from.
//!
//! Tensor grammar (whitespace anywhere is ignored):
//!
//! ```text
//! tensor  := shape [":" mapping] [":" partial]
//! shape   := "" | "scalar" | extent ("x" extent)*        64x32, 8, scalar
//! mapping := "[" [entry ("," entry)*] "]"                [1,-1]  [[0,1],-1]  []
//! entry   := "-1" | meshdim | "[" [meshdim ("," meshdim)*] "]"
//! partial := "partial(" pdim ("," pdim)* ")"             partial(0)  partial(0:sum,1:max)
//! pdim    := meshdim [":" reduce]                        reduce: sum avg max min prod any all
//! ```
//!
//! A missing mapping means replicated; a missing reduce type means `sum`.

use spmd_notation::edit_distance;
use std::fmt;

use spmd_core::{
    AttrValue, Attrs, DimsMapping, DistAttr, Mesh, MeshDim, Partial, ReduceType, Sharding,
};

/// A parse error: what is wrong, and what was expected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyntaxError(pub String);

impl fmt::Display for SyntaxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn err<T>(msg: impl Into<String>) -> Result<T, SyntaxError> {
    Err(SyntaxError(msg.into()))
}

/// The tensor syntax in one phrase, for error messages.
pub const TENSOR_HINT: &str =
    "expected SHAPE[:MAPPING][:partial(...)] like 64x32:[1,-1] or 8:[[0,1]]:partial(2:max)";

/// The `--in` / `--out` keyword for an absent optional tensor.
pub const ABSENT: &str = "absent";

/// Words other tools use for "no tensor": read as tries at [`ABSENT`].
const ABSENT_LOOKALIKES: &[&str] = &["none", "null", "nil", "missing", "empty", "_", "-"];

/// A `--in` / `--out` value: a tensor, or `None` for [`ABSENT`].
pub fn slot(text: &str) -> Result<Option<TensorArg>, SyntaxError> {
    let t = text.trim();
    if t == ABSENT {
        return Ok(None);
    }
    // Only the shape part can be a try at the keyword (`absent:[0]`).
    let head = t.split(':').next().unwrap_or(t);
    if near_absent(head) {
        return err(format!(
            "`{t}` is not a tensor; an absent optional tensor is written `{ABSENT}` exactly (lowercase, nothing after it)"
        ));
    }
    tensor(text).map(Some)
}

/// Whether `word` looks like a try at [`ABSENT`]. Never true of a valid
/// shape: those are digits and `x`, empty, or `scalar`.
fn near_absent(word: &str) -> bool {
    let lower = word.trim().to_ascii_lowercase();
    if lower.is_empty() || lower == "scalar" {
        return false;
    }
    ABSENT_LOOKALIKES.contains(&lower.as_str())
        || (lower.chars().all(|c| c.is_ascii_alphabetic()) && edit_distance(&lower, ABSENT) <= 2)
}

/// A mesh: `2x4`, `8`, also `[2,4]` and `2,4`.
pub fn mesh(text: &str) -> Result<Mesh, SyntaxError> {
    let t: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    let inner = t
        .strip_prefix('[')
        .and_then(|s| s.strip_suffix(']'))
        .unwrap_or(&t);
    if inner.is_empty() {
        return err("empty mesh shape (expected extents like 2x4)");
    }
    let mut shape = Vec::new();
    for part in inner.split(['x', ',']) {
        match part.parse::<usize>() {
            Ok(0) => {
                return err(format!(
                    "mesh extent 0 in `{text}` (every extent must be at least 1)"
                ));
            }
            Ok(n) => shape.push(n),
            Err(_) => {
                return err(format!(
                    "`{part}` in `{text}` is not a mesh extent (expected positive integers joined by `x`, like 2x4)"
                ));
            }
        }
    }
    Mesh::new(&shape).map_err(|_| {
        SyntaxError(format!(
            "mesh `{text}` is not valid (at most 8 dims, and the device count must fit in memory)"
        ))
    })
}

/// One tensor as given on the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorArg {
    /// The text it was parsed from (for messages).
    pub text: String,
    pub shape: Vec<usize>,
    /// `None` when the text has no mapping (read as replicated).
    pub mapping: Option<DimsMapping>,
    pub partial: Partial,
}

impl TensorArg {
    /// The dist attr: the mapping (replicated when none was given) plus the partial status.
    pub fn attr(&self) -> DistAttr {
        let mapping = self
            .mapping
            .clone()
            .unwrap_or_else(|| DimsMapping::replicated(self.shape.len()));
        DistAttr::new(mapping).with_partial(self.partial)
    }

    /// Checks the mapping against the shape's rank and the mesh: one entry per
    /// dim, mesh dims in range, each at most once, partial dims in range and
    /// not also sharding.
    pub fn check(&self, mesh: &Mesh) -> Result<(), SyntaxError> {
        let attr = self.attr();
        let m = &attr.dims_mapping;
        if m.rank() != self.shape.len() {
            return err(format!(
                "the mapping {m} has {} entr{} but the shape {} has rank {} (expected one mapping entry per dim)",
                m.rank(),
                if m.rank() == 1 { "y" } else { "ies" },
                shape_text(&self.shape),
                self.shape.len()
            ));
        }
        let mut used: [Option<usize>; 8] = [None; 8];
        for (dim, s) in m.as_slice().iter().enumerate() {
            for d in s.iter() {
                if d as usize >= mesh.rank() {
                    return err(format!(
                        "dim {dim} is sharded on mesh dim {d}, but mesh {mesh} has {} ({})",
                        plural(mesh.rank(), "dim"),
                        mesh_dims_phrase(mesh.rank())
                    ));
                }
                if let Some(first) = used[d as usize] {
                    return err(format!(
                        "mesh dim {d} splits dim {first} and again dim {dim} (a mesh dim may split at most one dim of a tensor)"
                    ));
                }
                used[d as usize] = Some(dim);
            }
        }
        for (d, _) in self.partial.iter() {
            if d as usize >= mesh.rank() {
                return err(format!(
                    "partial over mesh dim {d}, but mesh {mesh} has {} ({})",
                    plural(mesh.rank(), "dim"),
                    mesh_dims_phrase(mesh.rank())
                ));
            }
            if let Some(dim) = used[d as usize] {
                return err(format!(
                    "partial over mesh dim {d}, which also splits dim {dim} (a mesh dim is either partial or sharding, not both)"
                ));
            }
        }
        Ok(())
    }
}

pub(crate) fn plural(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

fn mesh_dims_phrase(rank: usize) -> String {
    match rank {
        0 => "no mesh dim".into(),
        1 => "only mesh dim 0".into(),
        n => format!("mesh dims 0..={}", n - 1),
    }
}

/// `64x32`, or `scalar` for rank 0.
pub fn shape_text(shape: &[usize]) -> String {
    if shape.is_empty() {
        return "scalar".into();
    }
    shape
        .iter()
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join("x")
}

/// A tensor in the compact syntax (see the module docs).
pub fn tensor(text: &str) -> Result<TensorArg, SyntaxError> {
    let t = text.trim();
    let (shape_part, rest) = match t.find(':') {
        Some(i) => (&t[..i], Some(&t[i + 1..])),
        None => (t, None),
    };
    let shape = parse_shape(shape_part)?;
    let mut mapping = None;
    let mut partial = Partial::NONE;
    if let Some(rest) = rest {
        let mut cur = Cursor { s: rest, pos: 0 };
        if cur.peek() == Some('[') {
            mapping = Some(cur.mapping()?);
            if !cur.done() && !cur.eat(':') {
                return err(format!(
                    "unexpected `{}` after the mapping (expected `:partial(...)` or the end)",
                    cur.rest()
                ));
            }
        } else if cur.done() {
            return err(format!("nothing after `:` in `{text}` ({TENSOR_HINT})"));
        } else if !cur.rest().starts_with("partial(") {
            return err(format!(
                "expected `[` to start the mapping (like [1,-1]) or partial(...) after `:`, found `{}`",
                cur.rest()
            ));
        }
        if !cur.done() {
            partial = cur.partial()?;
            if !cur.done() {
                return err(format!(
                    "unexpected `{}` after the partial status (expected the end)",
                    cur.rest()
                ));
            }
        }
    }
    Ok(TensorArg {
        text: text.to_string(),
        shape,
        mapping,
        partial,
    })
}

fn parse_shape(s: &str) -> Result<Vec<usize>, SyntaxError> {
    let s = s.trim();
    if s.is_empty() || s.eq_ignore_ascii_case("scalar") || s == "[]" || s == "()" {
        return Ok(Vec::new());
    }
    if s.starts_with('[') {
        return err(format!(
            "`{s}` is not a shape: a tensor starts with its shape, like 64x32:[1,-1] ({TENSOR_HINT})"
        ));
    }
    s.split('x')
        .map(str::trim)
        .map(|p| {
            p.parse::<usize>().map_err(|_| {
                SyntaxError(format!(
                    "`{p}` in shape `{s}` is not an extent (expected non-negative integers joined by `x`, like 64x32, or `scalar`)"
                ))
            })
        })
        .collect()
}

/// A mapping alone, in Paddle's form `[1,-1]` or nested `[[0,1],[]]`.
pub fn mapping(text: &str) -> Result<DimsMapping, SyntaxError> {
    let mut cur = Cursor { s: text, pos: 0 };
    let m = cur.mapping()?;
    if !cur.done() {
        return err(format!("unexpected `{}` after the mapping", cur.rest()));
    }
    Ok(m)
}

struct Cursor<'a> {
    s: &'a str,
    pos: usize,
}

/// Whitespace between tokens is skipped; inside a number it ends the number.
impl Cursor<'_> {
    fn ws(&mut self) {
        let rest = &self.s[self.pos..];
        self.pos += rest.len() - rest.trim_start().len();
    }
    fn peek(&mut self) -> Option<char> {
        self.ws();
        self.s[self.pos..].chars().next()
    }
    fn done(&mut self) -> bool {
        self.ws();
        self.pos >= self.s.len()
    }
    fn rest(&mut self) -> &str {
        self.ws();
        &self.s[self.pos..]
    }
    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(c) {
            self.pos += c.len_utf8();
            true
        } else {
            false
        }
    }
    fn found(&mut self) -> String {
        match self.peek() {
            Some(c) => format!("`{c}` at column {}", self.pos + 1),
            None => "the end".into(),
        }
    }
    fn int(&mut self) -> Option<i64> {
        self.ws();
        let start = self.pos;
        if self.s[self.pos..].starts_with('-') {
            self.pos += 1;
        }
        while self.s[self.pos..].starts_with(|c: char| c.is_ascii_digit()) {
            self.pos += 1;
        }
        let v = self.s[start..self.pos].parse().ok();
        if v.is_none() {
            self.pos = start;
        }
        v
    }
    fn mesh_dim(&mut self, ctx: &str) -> Result<MeshDim, SyntaxError> {
        match self.int() {
            Some(v) => match MeshDim::try_from(v) {
                Ok(d) if (d as usize) < 8 => Ok(d),
                _ => err(format!("{v} is not a mesh dim in {ctx} (expected 0..=7)")),
            },
            None => err(format!(
                "expected a mesh dim in {ctx}, found {}",
                self.found()
            )),
        }
    }

    fn mapping(&mut self) -> Result<DimsMapping, SyntaxError> {
        let ctx = "the mapping";
        if !self.eat('[') {
            return err(format!(
                "expected `[` to start the mapping, found {} (a mapping looks like [1,-1] or [[0,1],-1])",
                self.found()
            ));
        }
        let mut out = DimsMapping::default();
        if self.eat(']') {
            return Ok(out);
        }
        loop {
            let dim = out.rank();
            let s = if self.eat('[') {
                let mut s = Sharding::REPLICATED;
                if !self.eat(']') {
                    loop {
                        let d = self.mesh_dim(&format!("the co-shard list of dim {dim}"))?;
                        if s.contains(d) {
                            return err(format!(
                                "mesh dim {d} is listed twice in the co-shard list of dim {dim}"
                            ));
                        }
                        s.push(d);
                        if self.eat(']') {
                            break;
                        }
                        if !self.eat(',') {
                            return err(format!(
                                "expected `,` or `]` in the co-shard list of dim {dim}, found {}",
                                self.found()
                            ));
                        }
                    }
                }
                s
            } else {
                match self.int() {
                    Some(-1) => Sharding::REPLICATED,
                    Some(v) if (0..8).contains(&v) => Sharding::on(v as MeshDim),
                    Some(v) => {
                        return err(format!(
                            "{v} is not a valid mapping entry for dim {dim} (expected -1 for replicated, a mesh dim 0..=7, or a list like [0,1])"
                        ));
                    }
                    None => {
                        return err(format!(
                            "expected a mesh dim, -1 or a co-shard list for dim {dim} of {ctx}, found {}",
                            self.found()
                        ));
                    }
                }
            };
            out.push(s);
            if self.eat(']') {
                return Ok(out);
            }
            if !self.eat(',') {
                return err(format!(
                    "expected `,` or `]` after dim {dim} of {ctx}, found {}",
                    self.found()
                ));
            }
        }
    }

    fn partial(&mut self) -> Result<Partial, SyntaxError> {
        if !self.rest().starts_with("partial(") {
            return err(format!(
                "`{}` is not a partial status (expected partial(0) or partial(0:sum,1:max))",
                self.rest()
            ));
        }
        self.pos += "partial(".len();
        let mut p = Partial::NONE;
        loop {
            let d = self.mesh_dim("partial(...)")?;
            let r = if self.eat(':') {
                self.ws();
                let start = self.pos;
                while self.s[self.pos..].starts_with(|c: char| c.is_ascii_alphabetic()) {
                    self.pos += 1;
                }
                let name = &self.s[start..self.pos];
                ReduceType::from_name(name).ok_or_else(|| {
                    SyntaxError(format!(
                        "unknown reduce type `{name}` (expected sum, avg, max, min, prod, any or all)"
                    ))
                })?
            } else {
                ReduceType::Sum
            };
            if p.reduce_type(d).is_some() {
                return err(format!("mesh dim {d} is listed twice in partial(...)"));
            }
            p.set(d, r);
            if self.eat(')') {
                return Ok(p);
            }
            if !self.eat(',') {
                return err(format!(
                    "expected `,` or `)` in partial(...), found {}",
                    self.found()
                ));
            }
        }
    }
}

/// An attribute `name=value`. The value is read as, in order: `true`/`false`,
/// an integer, a number, a list `[...]` (of bools, integers, numbers or
/// strings; `[]` is an empty list), a quoted string, or else a bare string.
pub fn attr(text: &str) -> Result<(String, AttrValue), SyntaxError> {
    let Some((name, value)) = text.split_once('=') else {
        return err(format!(
            "`{text}` is not an attribute (expected NAME=VALUE, like trans_x=true or axis=[-1])"
        ));
    };
    let name = name.trim();
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return err(format!(
            "`{name}` is not an attribute name (expected letters, digits and `_`, like trans_x)"
        ));
    }
    Ok((name.to_string(), attr_value(value.trim())?))
}

fn attr_value(v: &str) -> Result<AttrValue, SyntaxError> {
    if let Some(inner) = v.strip_prefix('[') {
        let Some(inner) = inner.strip_suffix(']') else {
            return err(format!("unclosed list `{v}` (expected `]` at the end)"));
        };
        let items: Vec<&str> = if inner.trim().is_empty() {
            Vec::new()
        } else {
            inner.split(',').map(str::trim).collect()
        };
        if items.is_empty() {
            return Ok(AttrValue::Ints(Vec::new()));
        }
        if let Some(b) = items
            .iter()
            .map(|s| parse_bool(s))
            .collect::<Option<Vec<_>>>()
        {
            return Ok(AttrValue::Bools(b));
        }
        if let Ok(i) = items
            .iter()
            .map(|s| s.parse::<i64>())
            .collect::<Result<Vec<_>, _>>()
        {
            return Ok(AttrValue::Ints(i));
        }
        if let Ok(f) = items
            .iter()
            .map(|s| s.parse::<f64>())
            .collect::<Result<Vec<_>, _>>()
        {
            return Ok(AttrValue::Floats(f));
        }
        if items.iter().any(|s| s.is_empty()) {
            return err(format!("empty item in list `{v}`"));
        }
        return Ok(AttrValue::Strs(
            items.iter().map(|s| unquote(s).to_string()).collect(),
        ));
    }
    if let Some(b) = parse_bool(v) {
        return Ok(AttrValue::Bool(b));
    }
    if let Ok(i) = v.parse::<i64>() {
        return Ok(AttrValue::Int(i));
    }
    if let Ok(f) = v.parse::<f64>()
        && f.is_finite()
    {
        return Ok(AttrValue::Float(f));
    }
    Ok(AttrValue::Str(unquote(v).to_string()))
}

fn parse_bool(s: &str) -> Option<bool> {
    match s {
        "true" | "True" => Some(true),
        "false" | "False" => Some(false),
        _ => None,
    }
}

fn unquote(s: &str) -> &str {
    for q in ['"', '\''] {
        if let Some(inner) = s.strip_prefix(q).and_then(|x| x.strip_suffix(q)) {
            return inner;
        }
    }
    s
}

/// Several `--attr` values into one set; an attribute given twice is an
/// error (which one was meant is not for the tool to guess).
pub fn attrs(items: &[String]) -> Result<Attrs, SyntaxError> {
    let mut a = Attrs::new();
    for item in items {
        let (k, v) = attr(item).map_err(|e| SyntaxError(format!("--attr `{item}`: {e}")))?;
        if let Some(first) = a.get(&k) {
            return Err(SyntaxError(format!(
                "--attr `{item}`: `{k}` is given twice (first as {first}); give it once"
            )));
        }
        a.set(&k, v);
    }
    Ok(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> TensorArg {
        tensor(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn absent_slots_and_near_misses() {
        assert_eq!(slot("absent"), Ok(None));
        assert_eq!(slot(" absent "), Ok(None));
        assert_eq!(slot("8x4:[0,-1]").unwrap().unwrap().shape, [8, 4]);
        assert!(slot("scalar").unwrap().unwrap().shape.is_empty());
        assert!(slot("").unwrap().unwrap().shape.is_empty());
        for miss in [
            "Absent",
            "ABSENT",
            "absnet",
            "absen",
            "absence",
            "none",
            "None",
            "null",
            "-",
            "absent:[0]",
            "absent:partial(0)",
        ] {
            let e = slot(miss).unwrap_err().0;
            assert!(e.contains("written `absent` exactly"), "{miss}: {e}");
        }
        // Far from the keyword: the plain shape error.
        let e = slot("banana").unwrap_err().0;
        assert!(e.contains("is not an extent"), "{e}");
        assert_eq!(edit_distance("absent", "absent"), 0);
        assert_eq!(edit_distance("absnet", "absent"), 1);
        assert_eq!(edit_distance("", "absent"), 6);
    }

    /// A mesh of rank 0 (a JSON call's `mesh_shape: []`) has no mesh dim to
    /// name; the phrase must not subtract one from zero (the fuzzer's find).
    #[test]
    fn mesh_dims_phrase_of_every_rank() {
        assert_eq!(mesh_dims_phrase(0), "no mesh dim");
        assert_eq!(mesh_dims_phrase(1), "only mesh dim 0");
        assert_eq!(mesh_dims_phrase(3), "mesh dims 0..=2");
    }

    #[test]
    fn meshes() {
        assert_eq!(mesh("2x4").unwrap().shape(), [2, 4]);
        assert_eq!(mesh("8").unwrap().shape(), [8]);
        assert_eq!(mesh("[2, 4]").unwrap().shape(), [2, 4]);
        assert_eq!(mesh("2,2,2").unwrap().shape(), [2, 2, 2]);
        assert!(mesh("").unwrap_err().0.contains("empty"));
        assert!(mesh("2x0").unwrap_err().0.contains("at least 1"));
        assert!(mesh("2xa").unwrap_err().0.contains("`a`"));
        assert!(mesh("2x2x2x2x2x2x2x2x2").is_err());
    }

    #[test]
    fn tensors_in_every_form() {
        let a = t("64x32:[1,0]");
        assert_eq!(a.shape, [64, 32]);
        assert_eq!(a.attr().to_string(), "[1, 0]");
        let b = t("32x48:[-1,-1]");
        assert_eq!(b.attr(), DistAttr::replicated(2));
        let c = t(" 8 x 4 : [[0, 1], -1] ");
        assert_eq!(c.attr().to_string(), "[[0,1], -1]");
        let d = t("8x4:[-1,-1]:partial(0:max,1)");
        assert_eq!(d.attr().to_string(), "[-1, -1] partial{0: MAX, 1: SUM}");
        let e = t("8x4:partial(1:avg)");
        assert_eq!(e.mapping, None);
        assert_eq!(e.attr().to_string(), "[-1, -1] partial{1: AVG}");
        let f = t("8x4");
        assert_eq!(f.mapping, None);
        assert_eq!(f.attr(), DistAttr::replicated(2));
        for s in ["scalar", "", ":[]", "scalar:[]", "scalar:partial(0)"] {
            assert!(t(s).shape.is_empty(), "{s}");
        }
        assert_eq!(t("4:[[]]").attr(), DistAttr::replicated(1));
    }

    #[test]
    fn malformed_tensors_say_what_was_expected() {
        let cases = [
            (
                "64x32:[1,",
                "expected a mesh dim, -1 or a co-shard list for dim 1",
            ),
            ("64x32:[1 0]", "expected `,` or `]` after dim 0"),
            ("6 4:[1]", "`6 4` in shape `6 4` is not an extent"),
            ("64x32:1,0", "expected `[`"),
            ("64xq:[1]", "`q` in shape `64xq` is not an extent"),
            ("[1,0]", "a tensor starts with its shape"),
            ("4:[-2]", "-2 is not a valid mapping entry"),
            ("4:[9]", "9 is not a valid mapping entry"),
            ("4:[[0,0]]", "listed twice in the co-shard list"),
            (
                "4:[[0,]]",
                "expected a mesh dim in the co-shard list of dim 0",
            ),
            ("4:[0]x", "unexpected `x` after the mapping"),
            ("4:[0]:sum(1)", "is not a partial status"),
            ("4:[0]:partial(1:median)", "unknown reduce type `median`"),
            ("4:[0]:partial(1", "expected `,` or `)`"),
            ("4:[0]:partial(1,1)", "listed twice in partial"),
            ("4:", "nothing after `:`"),
        ];
        for (text, want) in cases {
            let e = tensor(text).unwrap_err().0;
            assert!(e.contains(want), "{text}: {e}");
        }
    }

    #[test]
    fn checks_against_shape_and_mesh() {
        let m = mesh("2x4").unwrap();
        assert!(t("64x32:[1,0]").check(&m).is_ok());
        let e = t("64x32:[1]").check(&m).unwrap_err().0;
        assert!(
            e.contains("has 1 entry but the shape 64x32 has rank 2"),
            "{e}"
        );
        let e = t("64x32:[2,-1]").check(&m).unwrap_err().0;
        assert!(e.contains("mesh dim 2, but mesh 2x4 has 2 dims"), "{e}");
        let e = t("64x32:[0,0]").check(&m).unwrap_err().0;
        assert!(e.contains("splits dim 0 and again dim 1"), "{e}");
        let e = t("64x32:[0,-1]:partial(0)").check(&m).unwrap_err().0;
        assert!(e.contains("either partial or sharding"), "{e}");
        let e = t("64x32:partial(3)").check(&m).unwrap_err().0;
        assert!(e.contains("partial over mesh dim 3"), "{e}");
        assert!(t("scalar:partial(1)").check(&m).is_ok());
    }

    #[test]
    fn attribute_values() {
        let cases = [
            ("trans_x=true", AttrValue::Bool(true)),
            ("keep_dim=False", AttrValue::Bool(false)),
            ("axis=-1", AttrValue::Int(-1)),
            ("eps=1e-5", AttrValue::Float(1e-5)),
            ("axis=[0, 1]", AttrValue::Ints(vec![0, 1])),
            ("axis=[]", AttrValue::Ints(vec![])),
            ("flags=[true,false]", AttrValue::Bools(vec![true, false])),
            ("w=[0.5,1]", AttrValue::Floats(vec![0.5, 1.0])),
            (
                "names=[a, 'b']",
                AttrValue::Strs(vec!["a".into(), "b".into()]),
            ),
            ("equation=mk,kn->mn", AttrValue::Str("mk,kn->mn".into())),
            ("s=\"x y\"", AttrValue::Str("x y".into())),
            ("mode=nan", AttrValue::Str("nan".into())),
        ];
        for (text, want) in cases {
            assert_eq!(attr(text).unwrap().1, want, "{text}");
        }
        assert!(attr("novalue").unwrap_err().0.contains("NAME=VALUE"));
        assert!(attr("=1").unwrap_err().0.contains("not an attribute name"));
        assert!(attr("a=[1").unwrap_err().0.contains("unclosed"));
        let a = attrs(&["x=1".into(), "y=2".into()]).unwrap();
        assert_eq!(a.get("y"), Some(&AttrValue::Int(2)));
        // The same attribute twice: an error, not the last one silently.
        let twice = attrs(&["x=true".into(), "x=false".into()]).unwrap_err();
        assert!(
            twice.0.contains("`x` is given twice (first as true)"),
            "{}",
            twice.0
        );
    }

    #[test]
    fn mappings_alone() {
        assert_eq!(mapping("[1,-1]").unwrap().to_string(), "[1, -1]");
        assert_eq!(mapping("[[0,1],[]]").unwrap().to_string(), "[[0,1], -1]");
        assert!(mapping("[1]]").is_err());
    }
}
