//! What can go wrong building, reading or propagating a graph. Every error
//! names the tensor or op it is about.

use spmd_core::SpmdError;

/// A shape for a message: in full when short, else its rank, first dims and
/// last dim (a 300-dim shape is not a 1,000-character line).
fn short_shape(shape: &[usize]) -> String {
    if shape.len() <= 8 {
        return format!("{shape:?}");
    }
    let head: Vec<String> = shape[..4].iter().map(ToString::to_string).collect();
    format!(
        "[{}, ..., {}] (rank {})",
        head.join(", "),
        shape[shape.len() - 1],
        shape.len()
    )
}

/// An error about a graph.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GraphError {
    #[error("tensor `{name}` is defined twice")]
    DuplicateTensor { name: String },
    #[error(
        "op name `{name}` is used by op #{first} and op #{second}: op names must be unique (reports and plans name ops by them)"
    )]
    DuplicateOp {
        name: String,
        first: usize,
        second: usize,
    },
    #[error("the graph's `mesh` has no dims: give its shape, e.g. [2, 4] (one device is [1])")]
    EmptyMesh,
    #[error("op `{op}` refers to tensor `{name}`, which is not defined")]
    UnknownTensor { op: String, name: String },
    #[error("the graph's `outputs` list names tensor `{name}`, which is not defined")]
    UnknownOutput { name: String },
    #[error("tensor `{tensor}` is produced by op `{first}` and again by op `{second}`")]
    ProducedTwice {
        tensor: String,
        first: String,
        second: String,
    },
    #[error(
        "op `{op}` reads tensor `{tensor}`, which is produced later (by op `{producer}`): ops must come in a topological order"
    )]
    NotTopological {
        op: String,
        tensor: String,
        producer: String,
    },
    #[error(
        "no rule for {} op kind(s) ({} ops): {}",
        missing.len(),
        missing.iter().map(|m| m.ops).sum::<usize>(),
        missing.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
    )]
    MissingRules { missing: Vec<MissingRule> },
    #[error("plan pattern `{pattern}`: {message}")]
    BadPlan { pattern: String, message: String },
    #[error("op `{op}`: {source}")]
    Rule {
        op: String,
        #[source]
        source: SpmdError,
    },
    #[error(
        "op `{op}`: tensor `{tensor}` is declared with a shape its inputs do not give: {source}"
    )]
    DeclaredShape {
        op: String,
        tensor: String,
        // Boxed: the other variants stay small.
        #[source]
        source: Box<SpmdError>,
    },
    #[error("op `{op}` has {found} {what}, its rule `{rule}` {expected}")]
    Arity {
        op: String,
        rule: String,
        what: &'static str,
        found: usize,
        expected: String,
    },
    #[error("tensor `{tensor}`: {message}")]
    BadAnnotation { tensor: String, message: String },
    /// A shape whose bytes do not fit in 64 bits (at 8 bytes an element):
    /// no communication volume could be counted for it.
    #[error(
        "tensor `{tensor}` of shape {} holds more bytes than 64 bits count",
        short_shape(shape)
    )]
    TensorTooLarge { tensor: String, shape: Vec<usize> },
    /// A rank no rule call can hold (the axes of a call, labels and the
    /// dims `...` stands for, number at most [`GraphError::MAX_RANK`]).
    #[error("tensor `{tensor}` has rank {rank}; a rule call holds at most {max} dims", max = GraphError::MAX_RANK)]
    RankTooLarge { tensor: String, rank: usize },
    #[error(
        "op `{op}` gives tensor `{tensor}` (rank {expected}) an attr of rank {found}: the tensor's declared shape does not fit the op"
    )]
    RankMismatch {
        op: String,
        tensor: String,
        expected: usize,
        found: usize,
    },
    #[error("op `{op}` is a grad op: backward graphs are built from forward graphs")]
    GradOfGrad { op: String },
    /// An error outside any op (a bad mesh).
    #[error(transparent)]
    Core(#[from] SpmdError),
    #[error("graph JSON: {0}")]
    Json(String),
}

/// An op kind the registry has no rule for, as a graph uses it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MissingRule {
    /// The rule name the ops ask for (`aten.any.dim`).
    pub rule: String,
    /// How many ops of the graph ask for it.
    pub ops: usize,
    /// The first of them, in graph order.
    pub first_op: String,
    /// Registered names near it (a typo's correction).
    pub suggestions: Vec<String>,
}

impl std::fmt::Display for MissingRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "`{}` ({} op(s), first op `{}`",
            self.rule, self.ops, self.first_op
        )?;
        match self.suggestions.as_slice() {
            [] => f.write_str(")"),
            names => write!(f, "; did you mean `{}`?)", names.join("`, `")),
        }
    }
}

impl GraphError {
    /// The largest rank a graph's tensor may have: a rule call holds at most
    /// 63 axes (spmd-core's limit), and one tensor's dims are each an axis.
    pub const MAX_RANK: usize = 63;
}
