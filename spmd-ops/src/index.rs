//! Ops that work along one axis, which therefore is never sharded: scans
//! (`cumsum`), arg-reductions (`argmax`, `argmin`), selections (`topk`,
//! `argsort`), and the ops that pin the last dims (`one_hot`, `triu`,
//! `tril_triu`).

use spmd_core::notation::Pos;
use spmd_core::{Call, SpmdError, spmd_rule};

/// Paddle's `cumsum`: a running sum along `axis`, which is never sharded
/// (each element depends on every element before it). With `flatten` the
/// input is scanned as one 1-D tensor, so nothing stays sharded. `exclusive`
/// and `reverse` do not affect sharding. Paddle 3.3.1's reverse rule returns
/// the output non-partial; its grad rule follows the output grad (the grad is
/// a reverse scan of it) and leaves `x`, which it does not read, as given.
#[spmd_rule(
    name = "cumsum",
    einsum = "@{axis:a}->@{axis:a}",
    case(when = self.flatten, einsum = "*->1"),
    merge(never_sharded = "a"),
    partial(backward = "reset"),
    inputs(x),
    outputs(out),
    grad(ignores(x))
)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Cumsum {
    #[spmd(default = -1)]
    pub axis: i64,
    #[spmd(default)]
    pub flatten: bool,
    #[spmd(default)]
    pub exclusive: bool,
    #[spmd(default)]
    pub reverse: bool,
}

/// An arg-reduction over `axis` (`bac->bc`, `bac->b1c` with `keepdims`);
/// with `flatten` every dim is replicated and the output is 0-d (with
/// `keepdims`, the input's rank of `1`s). Paddle 3.3.1 answers a one-entry
/// mapping for the flattened 0-d output, which we never do (a mapping has
/// one entry per dim).
macro_rules! arg_reduction {
    ($(#[$doc:meta])* $ty:ident, $name:literal) => {
        $(#[$doc])*
        #[spmd_rule(
            name = $name,
            einsum = "@{axis:a}->@{axis:-}",
            case(when = self.flatten && self.keepdims, einsum = "@{..:1}->@{..:1}"),
            case(when = self.flatten, einsum = "@{..:1}->"),
            case(when = self.keepdims, einsum = "@{axis:a}->@{axis:1}"),
            merge(never_sharded = "a"),
            partial(backward = "reset"),
            inputs(x),
            outputs(out)
        )]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
        pub struct $ty {
            #[spmd(default)]
            pub axis: i64,
            #[spmd(default)]
            pub keepdims: bool,
            #[spmd(default)]
            pub flatten: bool,
        }
    };
}

arg_reduction!(
    /// Paddle's `argmax`: the index of the largest element along `axis`,
    /// which is replicated (an index is not a partial value that a reduction
    /// across devices could finish). Other dims keep their sharding; the
    /// reverse rule returns the output non-partial, as Paddle 3.3.1 does.
    ArgMax, "argmax"
);
arg_reduction!(
    /// Paddle's `argmin`: as `argmax`, for the smallest element.
    ArgMin, "argmin"
);

/// Paddle's `topk`: the `k` largest (or smallest) elements along `axis` and
/// their indices. The axis is replicated on the input and never sharded on
/// the outputs (whose extent there is `k`); other dims keep their sharding.
#[spmd_rule(
    name = "topk",
    einsum = "@{axis:a}->@{axis:1},@{axis:1}",
    merge(never_sharded = "a"),
    partial(backward = "reset"),
    inputs(x),
    outputs(out, indices),
    grad(inputs(x, indices), of(out))
)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TopK {
    #[spmd(default = 1)]
    pub k: i64,
    #[spmd(default = -1)]
    pub axis: i64,
    #[spmd(default = true)]
    pub largest: bool,
    #[spmd(default = true)]
    pub sorted: bool,
}

/// Paddle's `argsort`: the sorted values along `axis` and their indices. The
/// sort axis is never sharded; other dims keep their sharding.
#[spmd_rule(
    name = "argsort",
    einsum = "@{axis:a}->@{axis:a},@{axis:a}",
    merge(never_sharded = "a"),
    partial(backward = "reset"),
    inputs(x),
    outputs(out, indices),
    grad(inputs(indices, x), of(out))
)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ArgSort {
    #[spmd(default = -1)]
    pub axis: i64,
    #[spmd(default)]
    pub descending: bool,
    #[spmd(default)]
    pub stable: bool,
}

/// Paddle's `one_hot`: appends a class dim of `num_classes`, which is never
/// sharded; the ids' dims keep their sharding. The ids have no gradient.
#[spmd_rule(
    name = "one_hot",
    einsum = "...->...1",
    partial(backward = "reset"),
    inputs(x),
    outputs(out),
    grad(none(x))
)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct OneHot {
    #[spmd(default)]
    pub num_classes: i64,
}

/// Paddle's `triu`: zeroes the elements below the `diagonal`-th diagonal of
/// the last two dims, which are never sharded (Paddle 3.3.1 replicates them:
/// which elements survive depends on the global row and column indices).
#[spmd_rule(
    name = "triu",
    einsum = "...ij->...ij",
    merge(never_sharded = "ij"),
    partial(backward = "reset"),
    inputs(x),
    outputs(out),
    grad(inputs())
)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Triu {
    #[spmd(default)]
    pub diagonal: i64,
}

/// Paddle's `tril_triu`: `triu`, or `tril` when `lower`; the same rule.
#[spmd_rule(
    name = "tril_triu",
    einsum = "...ij->...ij",
    merge(never_sharded = "ij"),
    partial(backward = "reset"),
    inputs(x),
    outputs(out)
)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TrilTriu {
    #[spmd(default)]
    pub diagonal: i64,
    #[spmd(default)]
    pub lower: bool,
}

macro_rules! cumulative_extremum {
    ($(#[$doc:meta])* $ty:ident, $name:literal) => {
        $(#[$doc])*
        #[spmd_rule(
            name = $name,
            einsum = "@{axis:a}->@{axis:a},@{axis:a}",
            merge(never_sharded = "a"),
            partial(backward = "reset"),
            inputs(x),
            outputs(out, indices),
            grad(inputs(x, indices), of(out))
        )]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub struct $ty {
            #[spmd(default = -1)]
            pub axis: i64,
        }

        impl Default for $ty {
            fn default() -> Self {
                $ty { axis: -1 }
            }
        }

    };
}

cumulative_extremum!(
    /// Paddle's `cummax` (`x` → `out`, `indices`): the running maximum along
    /// `axis` and where it was, so the axis is never sharded (each element
    /// depends on all before it); other dims keep their sharding. Forward
    /// takes `x` only; the grad takes Paddle's `CummaxGradInferSpmd`
    /// arguments, `(x, indices; out_grad)`, and returns `x_grad` (the
    /// indices have none).
    Cummax, "cummax"
);
cumulative_extremum!(
    /// Paddle's `cummin`: as [`Cummax`], for the running minimum.
    Cummin, "cummin"
);

/// Paddle's `roll`: shifts the elements along each dim of `axis` by
/// `shifts`, wrapping around; with no `axis` the tensor is rolled as one
/// flat vector. A rolled dim is never sharded (an element moves to
/// another device's block); the others keep their sharding. Paddle 3.3.1's
/// `RollInferSpmd`; the gradient rolls the output grad back and never reads
/// `x`.
#[spmd_rule(
    name = "roll",
    einsum = "@{axis():1}->@{axis():1}",
    partial(backward = "reset"),
    inputs(x),
    outputs(out),
    grad(ignores(x))
)]
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Roll {
    #[spmd(default)]
    pub shifts: Vec<i64>,
    #[spmd(default)]
    pub axis: Vec<i64>,
}

impl Roll {
    /// The rolled dims: `axis`, or every dim (one flat vector) without it.
    fn axis(&self) -> Pos<'_> {
        if self.axis.is_empty() {
            Pos::All
        } else {
            Pos::List(&self.axis)
        }
    }
}

/// Paddle's `pad`: `paddings` holds a `(before, after)` pair per dim, in dim
/// order. A padded dim is never sharded (the padding lands at the global
/// edges, which only the first and last blocks hold); an unpadded dim keeps
/// its sharding. Paddle 3.3.1's `PadInferSpmd`; the gradient slices the
/// output grad and never reads `x`.
#[spmd_rule(
    name = "pad",
    einsum = "@{padded():1}->@{padded():1}",
    validate = Self::check,
    partial(backward = "reset"),
    inputs(x),
    outputs(out),
    grad(ignores(x))
)]
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Pad {
    #[spmd(default)]
    pub paddings: Vec<i64>,
}

impl Pad {
    /// The padded dims (a pair with a nonzero side): never sharded, since a
    /// device's block would not line up with its part of the padded dim.
    fn padded(&self) -> Pos<'_> {
        let mask = self
            .paddings
            .chunks(2)
            .enumerate()
            .filter(|(d, pair)| *d < 64 && pair.iter().any(|&p| p != 0))
            .fold(0u64, |m, (d, _)| m | 1 << d);
        Pos::Mask(mask)
    }

    /// A (before, after) pair per dim of x.
    fn check(&self, call: &Call<'_>) -> Result<(), SpmdError> {
        let rank = call.input_rank(0).unwrap_or(0);
        if self.paddings.len() != 2 * rank {
            return Err(SpmdError::InvalidAttr {
                op: "pad",
                attr: "paddings".into(),
                message: format!(
                    "{} values for input 0 (x) of rank {rank}; pad takes a (before, after) pair per dim",
                    self.paddings.len()
                ),
            });
        }
        Ok(())
    }
}
