//! Reductions: `sum`, `max`, `min`, `prod`, `amax`, `amin`, `all`, `any` and
//! `reduce_base` over an axis list. A sharded reduced axis leaves the output
//! partial with the op's own reduce type.

use spmd_core::notation::Pos;
use spmd_core::{Call, ReduceType, SpmdError, spmd_rule};

/// The positions a reduction's `axis` list selects: every dim when it is
/// empty (or `reduce_all` says so), as Paddle reduces.
fn reduced(axis: &[i64], all: bool) -> Pos<'_> {
    if all || axis.is_empty() {
        Pos::All
    } else {
        Pos::List(axis)
    }
}

macro_rules! reduction {
    ($(#[$doc:meta])* $ty:ident, $name:literal, $reduce:literal $(, $ignores:ident)?) => {
        $(#[$doc])*
        #[spmd_rule(
            name = $name,
            einsum = "@->@{axis():-}",
            case(when = self.keep_dim, einsum = "@->@{axis():1}"),
            partial(reduce = $reduce),
            inputs(x),
            outputs(out)
            $(, grad(ignores($ignores)))?
        )]
        #[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
        pub struct $ty {
            #[spmd(default)]
            pub axis: Vec<i64>,
            #[spmd(default)]
            pub keep_dim: bool,
            /// Paddle's legacy flag: reduce every dim, whatever `axis` says.
            #[spmd(default)]
            pub reduce_all: bool,
        }

        impl $ty {
            /// The reduced dims (every dim for an empty list or `reduce_all`).
            fn axis(&self) -> Pos<'_> {
                reduced(&self.axis, self.reduce_all)
            }
        }
    };
}

reduction!(
    /// Paddle's `sum`: partial outputs are `Sum`. Its gradient broadcasts the
    /// output grad back and never reads `x`, so `x` keeps its layout.
    Sum, "sum", "sum", x
);
reduction!(
    /// Paddle's `squared_l2_norm`: the sum of squares, registered in Paddle
    /// 3.3.1 with the reduction rule (`axis`, `keep_dim`). A sharded reduced
    /// axis leaves partial sums of squares, finished by a `Sum`.
    SquaredL2Norm, "squared_l2_norm", "sum"
);
reduction!(
    /// Paddle's `max`: partial outputs are `Max` (Paddle 3.3.1 reports `Sum`, a bug we do not copy).
    /// Its gradient reads `x` (where the maximum was), so `x` is laid out with it.
    Max, "max", "max"
);
reduction!(
    /// Paddle's `min`: partial outputs are `Min`.
    Min, "min", "min"
);
reduction!(
    /// Paddle's `prod`: partial outputs are `Prod`.
    Prod, "prod", "prod"
);
reduction!(
    /// Paddle's `amax`: partial outputs are `Max` (Paddle 3.3.1 reports `Sum`).
    Amax, "amax", "max"
);
reduction!(
    /// Paddle's `amin`: partial outputs are `Min` (Paddle 3.3.1 reports `Sum`).
    Amin, "amin", "min"
);
reduction!(
    /// Paddle's `all`: partial outputs are `All` (Paddle 3.3.1 reports `Sum`).
    /// Boolean: its gradient is never taken.
    All, "all", "all"
);
reduction!(
    /// Paddle's `any`: partial outputs are `Any` (Paddle 3.3.1 reports `Sum`).
    Any, "any", "any"
);

/// Paddle's `frobenius_norm`: `sqrt(sum(x²))` over `axis`, registered in
/// Paddle 3.3.1 with the reduction rule, which leaves the output partial
/// (`Sum`) over the mesh dims of sharded reduced axes. A sum of per-device
/// norms is not the norm, and no reduce type finishes it (the devices'
/// norms combine as `sqrt(Σ nᵢ²)`), so the reduced axes are never sharded
/// here: `x` is gathered along them and the output is never partial.
#[spmd_rule(
    name = "frobenius_norm",
    einsum = "@{axis():1}->@{axis():-}",
    case(when = self.keep_dim, einsum = "@{axis():1}->@{axis():1}"),
    inputs(x),
    outputs(out)
)]
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct FrobeniusNorm {
    #[spmd(default)]
    pub axis: Vec<i64>,
    #[spmd(default)]
    pub keep_dim: bool,
    #[spmd(default)]
    pub reduce_all: bool,
}

impl FrobeniusNorm {
    /// The reduced dims, written `1` in `x` (never sharded).
    fn axis(&self) -> Pos<'_> {
        reduced(&self.axis, self.reduce_all)
    }
}

/// Paddle's `logsumexp`: `log(sum(exp(x)))` over `axis` (every axis with
/// `reduce_all` or an empty list). Paddle 3.3.1 leaves the output partial
/// (`Sum`) over sharded reduced axes, but per-device results combine as a
/// log-sum-exp, not a sum; no reduce type finishes them, so the reduced
/// axes are never sharded here and the output is never partial.
#[spmd_rule(
    name = "logsumexp",
    einsum = "@{axis():1}->@{axis():-}",
    case(when = self.keepdim, einsum = "@{axis():1}->@{axis():1}"),
    partial(backward = "reset"),
    inputs(x),
    outputs(out)
)]
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct LogSumExp {
    #[spmd(default)]
    pub axis: Vec<i64>,
    #[spmd(default)]
    pub keepdim: bool,
    #[spmd(default)]
    pub reduce_all: bool,
}

impl LogSumExp {
    /// The reduced dims, written `1` in `x` (never sharded).
    fn axis(&self) -> Pos<'_> {
        reduced(&self.axis, self.reduce_all)
    }
}

/// Paddle's `p_norm`: `(sum |x|^p)^(1/p)` over `axis` (every axis with
/// `asvector`). The devices' partial norms combine with a reduce type only
/// for some `p`: `inf` (`Max`), `-inf` (`Min`), `0` (a count of non-zeros)
/// and `1` (`Sum`); for those a sharded reduced axis leaves the output
/// partial with that type. For any other `p` the reduced axis is never
/// sharded. Paddle 3.3.1 reports `Sum` for every `p`, which is wrong but for
/// `0` and `1`.
#[spmd_rule(
    name = "p_norm",
    einsum = "@->@{axis():-}",
    case(when = self.reduce().is_none() && self.keepdim, einsum = "@{axis():1}->@{axis():1}"),
    case(when = self.reduce().is_none(), einsum = "@{axis():1}->@{axis():-}"),
    case(when = self.keepdim, einsum = "@->@{axis():1}"),
    partial(reduce = Self::reduce_type),
    inputs(x),
    outputs(out)
)]
#[derive(Clone, Debug, PartialEq)]
pub struct PNorm {
    #[spmd(default = 2.0)]
    pub porder: f32,
    #[spmd(default = -1)]
    pub axis: i64,
    #[spmd(default)]
    pub keepdim: bool,
    #[spmd(default)]
    pub asvector: bool,
}

impl Default for PNorm {
    fn default() -> Self {
        PNorm {
            porder: 2.0,
            axis: -1,
            keepdim: false,
            asvector: false,
        }
    }
}

impl PNorm {
    /// The reduce type that finishes partial norms, if any.
    fn reduce(&self) -> Option<ReduceType> {
        match self.porder {
            p if p == f32::INFINITY => Some(ReduceType::Max),
            p if p == f32::NEG_INFINITY => Some(ReduceType::Min),
            p if p == 0.0 || p == 1.0 => Some(ReduceType::Sum),
            _ => None,
        }
    }

    /// Where no reduce type finishes partial norms the reduced dims are
    /// never sharded, so the type is never used.
    fn reduce_type(&self) -> Result<ReduceType, SpmdError> {
        Ok(self.reduce().unwrap_or(ReduceType::Sum))
    }

    /// The reduced dims: `axis`, or every dim with `asvector`.
    fn axis(&self) -> Pos<'_> {
        if self.asvector {
            Pos::All
        } else {
            Pos::Int(self.axis)
        }
    }
}

/// Paddle's `reduce_base`: the generic reduction whose `reduce_type`
/// attribute (Paddle's `ReduceType` enum: 0 `Sum`, 1 `Max`, 2 `Min`, 3
/// `Prod`, 4 `Avg`, 5 `Any`, 6 `All`) names the reduce type of the partial
/// output; the built notation carries it, so backward explains a given
/// partial of that type alone.
#[spmd_rule(
    name = "reduce_base",
    einsum = "@->@{axis():-}",
    case(when = self.mean_grad(&call) && self.keep_dim, einsum = "@{axis():1}->@{axis():1}"),
    case(when = self.mean_grad(&call), einsum = "@{axis():1}->@{axis():-}"),
    case(when = self.keep_dim, einsum = "@->@{axis():1}"),
    partial(reduce = Self::reduce_type),
    validate = Self::check_reduce_type,
    inputs(x),
    outputs(out)
)]
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ReduceBase {
    #[spmd(default)]
    pub axis: Vec<i64>,
    #[spmd(default)]
    pub keep_dim: bool,
    #[spmd(default)]
    pub reduce_type: i64,
}

impl ReduceBase {
    /// Paddle's `ReduceType` enum order.
    const TYPES: [ReduceType; 7] = [
        ReduceType::Sum,
        ReduceType::Max,
        ReduceType::Min,
        ReduceType::Prod,
        ReduceType::Avg,
        ReduceType::Any,
        ReduceType::All,
    ];

    /// A mean's grad divides by the reduced extent: a device holding a
    /// block of a reduced axis would divide by its block's. The grad never
    /// shards a reduced axis of an `Avg` reduction.
    fn mean_grad(&self, call: &Call<'_>) -> bool {
        matches!(call, Call::Grad { .. }) && self.reduce().ok() == Some(ReduceType::Avg)
    }

    fn reduce_type(&self) -> Result<ReduceType, SpmdError> {
        self.reduce()
    }

    /// The reduced dims (every dim for an empty list).
    fn axis(&self) -> Pos<'_> {
        reduced(&self.axis, false)
    }

    fn reduce(&self) -> Result<ReduceType, SpmdError> {
        usize::try_from(self.reduce_type)
            .ok()
            .and_then(|i| Self::TYPES.get(i).copied())
            .ok_or_else(|| SpmdError::InvalidAttr {
                op: "reduce_base",
                attr: "reduce_type".into(),
                message: format!(
                    "reduce_type {} is not one of Paddle's reduce types 0..=6 \
                     (sum, max, min, prod, avg, any, all)",
                    self.reduce_type
                ),
            })
    }

    fn check_reduce_type(&self, _call: &Call<'_>) -> Result<(), SpmdError> {
        self.reduce().map(drop)
    }
}
