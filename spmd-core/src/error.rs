//! The one error type of the crate (docs/semantics.md §9): every message names the op, the
//! tensor (role and position), the dim and the mesh dims involved.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use spmd_notation::NotationErrors;

use crate::dist_attr::Sharding;
use crate::mesh::MeshDim;

/// Whether a tensor is an input or an output of the op.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    Input,
    Output,
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::Input => "input",
            Role::Output => "output",
        })
    }
}

/// A tensor of a call: its role and position (`input 1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TensorRef {
    pub role: Role,
    pub index: usize,
}

impl TensorRef {
    pub const fn input(index: usize) -> TensorRef {
        TensorRef {
            role: Role::Input,
            index,
        }
    }
    pub const fn output(index: usize) -> TensorRef {
        TensorRef {
            role: Role::Output,
            index,
        }
    }
}

impl fmt::Display for TensorRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.role, self.index)
    }
}

/// An axis of a notation: a label, or the k-th dim an ellipsis stands for
/// (counted from the left of the broadcast block).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AxisName {
    Label(char),
    Ellipsis(u8),
    /// A dim that never carries a sharding (`1`, a broadcast size-1 dim, a
    /// never-sharded axis) but was given one.
    Unsharded,
}

impl fmt::Display for AxisName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AxisName::Label(c) => write!(f, "`{c}`"),
            // The k-th of the dims `...` stands for, from the left.
            AxisName::Ellipsis(k) => write!(f, "`...` dim {k}"),
            AxisName::Unsharded => f.write_str("(a never-sharded dim)"),
        }
    }
}

/// What a rule's rank requirement for a term is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RankNeed {
    Exactly(usize),
    AtLeast(usize),
}

impl fmt::Display for RankNeed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RankNeed::Exactly(n) => write!(f, "exactly {n}"),
            RankNeed::AtLeast(n) => write!(f, "at least {n}"),
        }
    }
}

/// Everything that can go wrong in the crate.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SpmdError {
    #[error(
        "invalid mesh shape {shape:?}: every extent must be at least 1, the rank at most 8, and explicit process ids one per device"
    )]
    InvalidMesh { shape: Vec<usize> },

    #[error("invalid einsum notation: {0}")]
    Notation(#[from] NotationErrors),

    #[error(
        "{op}: {found} {role}(s) given, the rule takes {expected}{}",
        named(names)
    )]
    Arity {
        op: &'static str,
        role: Role,
        expected: usize,
        found: usize,
        /// The tensors of that role the rule takes, when it names them.
        names: &'static [&'static str],
    },

    #[error("{op}: {tensor} has rank {rank}, but its term `{term}` needs {need}")]
    Rank {
        op: &'static str,
        tensor: TensorRef,
        rank: usize,
        term: String,
        need: RankNeed,
    },

    #[error("{op}: {tensor} has rank {rank} but its dims mapping has {len} entries")]
    MappingLength {
        op: &'static str,
        tensor: TensorRef,
        rank: usize,
        len: usize,
    },

    #[error(
        "{op}: {tensor} dim {dim} is sharded on mesh dim {mesh_dim}, but the mesh has {mesh_rank} dim(s)"
    )]
    MeshDimOutOfRange {
        op: &'static str,
        tensor: TensorRef,
        dim: usize,
        mesh_dim: MeshDim,
        mesh_rank: usize,
    },

    #[error(
        "{op}: {tensor} uses mesh dim {mesh_dim} on dim {first} and again on dim {second} (a mesh dim splits at most one dim of a tensor)"
    )]
    MeshDimReused {
        op: &'static str,
        tensor: TensorRef,
        mesh_dim: MeshDim,
        first: usize,
        second: usize,
    },

    #[error(
        "{op}: {tensor} is partial over mesh dim {mesh_dim}, but the mesh has {mesh_rank} dim(s)"
    )]
    PartialOutOfRange {
        op: &'static str,
        tensor: TensorRef,
        mesh_dim: MeshDim,
        mesh_rank: usize,
    },

    #[error("{op}: {tensor} is partial over mesh dim {mesh_dim}, which also shards its dim {dim}")]
    PartialAndSharded {
        op: &'static str,
        tensor: TensorRef,
        mesh_dim: MeshDim,
        dim: usize,
    },

    #[error("{op}: axis {axis} has extent {expected}, but {tensor} dim {dim} has extent {found}")]
    ShapeMismatch {
        op: &'static str,
        axis: AxisName,
        tensor: TensorRef,
        dim: usize,
        expected: usize,
        found: usize,
    },

    /// A compound dim whose extent its factors' known extents do not
    /// divide (30 query heads in groups over 8 key-value heads).
    #[error(
        "{op}: {tensor} dim {dim} has extent {found}, which its factor{} {axes} of extent {known} do{} not divide",
        if axes.contains(' ') { "s" } else { "" },
        if axes.contains(' ') { "" } else { "es" }
    )]
    CompoundExtent {
        op: &'static str,
        tensor: TensorRef,
        dim: usize,
        /// The known factors, e.g. "`h`" or "`h` `d`".
        axes: String,
        known: usize,
        found: usize,
    },

    #[error(
        "{op}: axis {axis} is sharded by two different mesh dims: {existing} earlier, {incoming} at {tensor} dim {dim}"
    )]
    AxisConflict {
        op: &'static str,
        axis: AxisName,
        tensor: TensorRef,
        dim: usize,
        existing: Sharding,
        incoming: Sharding,
    },

    #[error(
        "{op}: mesh dim {mesh_dim} shards both axis {first} and axis {second} (this rule does not resolve conflicts)"
    )]
    MeshDimConflict {
        op: &'static str,
        mesh_dim: MeshDim,
        first: AxisName,
        second: AxisName,
    },

    #[error(
        "{op}: {tensor} dim {dim} (axis {axis}) is in no output, and this rule has no replicated fallback for it"
    )]
    MissingAxis {
        op: &'static str,
        tensor: TensorRef,
        dim: usize,
        axis: AxisName,
    },

    #[error(
        "{op}: the call has {count} axes (labels plus the dims `...` stands for); at most 63 are supported"
    )]
    TooManyAxes { op: &'static str, count: usize },

    #[error("{op}: {tensor} is on mesh {found} but an earlier dist tensor is on mesh {expected}")]
    MeshMismatch {
        op: &'static str,
        tensor: TensorRef,
        expected: String,
        found: String,
    },

    #[error("{op}: attribute `{attr}`: {message}")]
    InvalidAttr {
        op: &'static str,
        attr: String,
        message: String,
    },

    #[error("{op}: {message}")]
    Rejected { op: &'static str, message: String },

    /// A prepared call's answer does not fit an
    /// [`InlineResult`](crate::InlineResult): answer into a
    /// [`RuleResult`](crate::RuleResult) instead.
    #[error(
        "{op}: the answer has {tensors} tensors, the largest of rank {rank}; an InlineResult holds at most {} tensors of rank {} at most (answer into a RuleResult)",
        crate::InlineResult::MAX_TENSORS,
        crate::InlineResult::MAX_RANK
    )]
    InlineCapacity {
        op: &'static str,
        tensors: usize,
        rank: usize,
    },

    /// An attribute the op does not take (a typo is never "the default").
    #[error(
        "{op}: unknown attribute `{attr}`{}; {op} takes: {}",
        did_you_mean(suggestions),
        if known.is_empty() { alloc::string::String::from("no attributes") } else { known.join(", ") }
    )]
    UnknownAttr {
        op: &'static str,
        attr: String,
        suggestions: Vec<String>,
        known: Vec<String>,
    },

    /// A rule whose forward inference reads the outputs' shapes, called
    /// without them.
    #[error(
        "{op}: forward inference needs the outputs' shapes (call `forward_with_output_shapes`)"
    )]
    OutputShapesNeeded { op: &'static str },

    /// An absent tensor the rule does not declare optional.
    #[error("{op}: {tensor} is absent, but the rule does not declare it optional")]
    AbsentTensor { op: &'static str, tensor: TensorRef },

    #[error("{op}: this rule has no grad inference")]
    NoGradRule { op: &'static str },

    #[error("no rule named `{name}`{}", did_you_mean(suggestions))]
    UnknownRule {
        name: String,
        suggestions: Vec<String>,
    },

    #[error("a rule named `{name}` is already registered")]
    DuplicateRule { name: String },
}

impl SpmdError {
    fn op_mut(&mut self) -> Option<&mut &'static str> {
        use SpmdError::*;
        match self {
            Arity { op, .. }
            | Rank { op, .. }
            | MappingLength { op, .. }
            | MeshDimOutOfRange { op, .. }
            | MeshDimReused { op, .. }
            | PartialOutOfRange { op, .. }
            | PartialAndSharded { op, .. }
            | ShapeMismatch { op, .. }
            | CompoundExtent { op, .. }
            | AxisConflict { op, .. }
            | MeshDimConflict { op, .. }
            | MissingAxis { op, .. }
            | TooManyAxes { op, .. }
            | MeshMismatch { op, .. }
            | InvalidAttr { op, .. }
            | Rejected { op, .. }
            | InlineCapacity { op, .. }
            | UnknownAttr { op, .. }
            | OutputShapesNeeded { op }
            | AbsentTensor { op, .. }
            | NoGradRule { op } => Some(op),
            _ => None,
        }
    }

    /// The same error naming `op`: a rule registered under several names
    /// (Paddle's `relu`, `gelu`, ... share one elementwise rule) reports the
    /// name it was called by.
    pub fn set_op(&mut self, name: &'static str) {
        if let Some(op) = self.op_mut() {
            *op = name;
        }
    }
}

fn did_you_mean(suggestions: &[String]) -> String {
    match suggestions {
        [] => String::new(),
        [one] => alloc::format!(" (did you mean `{one}`?)"),
        many => {
            let list: Vec<String> = many.iter().map(|s| alloc::format!("`{s}`")).collect();
            alloc::format!(" (did you mean one of {}?)", list.join(", "))
        }
    }
}

/// ` (x, weight, bias)`, or nothing for a rule that does not name its tensors.
fn named(names: &[&str]) -> String {
    if names.is_empty() {
        String::new()
    } else {
        alloc::format!(" ({})", names.join(", "))
    }
}
