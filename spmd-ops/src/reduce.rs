//! Reductions: `sum`, `max`, `min`, `prod`, `amax`, `amin`, `all`, `any` and
//! `reduce_base` over an axis list. A sharded reduced axis leaves the output
//! partial with the op's own reduce type.

use spmd_core::{Call, Einsum, ReduceType, SpmdError, spmd_rule};

use crate::notation::{axis_flags, input_rank, labels};

/// The notation of a reduction of a rank-`rank` tensor over `axis` (every
/// axis when empty); kept dims become `1`.
fn reduce_notation(
    op: &'static str,
    axis: &[i64],
    keep_dim: bool,
    call: &Call<'_>,
) -> Result<Einsum, SpmdError> {
    reduce_notation_with(op, axis, keep_dim, false, call)
}

/// [`reduce_notation`], with the reduced dims of the input written `1`
/// (never sharded) when `whole` is set: for reductions whose partial
/// results no reduce type can finish.
fn reduce_notation_with(
    op: &'static str,
    axis: &[i64],
    keep_dim: bool,
    whole: bool,
    call: &Call<'_>,
) -> Result<Einsum, SpmdError> {
    let rank = input_rank(call, 0).unwrap_or(0);
    let names = labels(op, rank)?;
    let reduced = axis_flags(op, "axis", axis, rank, true)?;
    let input: String = names
        .iter()
        .zip(&reduced)
        .map(|(&c, &r)| if r && whole { '1' } else { c })
        .collect();
    let output: String = names
        .iter()
        .zip(&reduced)
        .filter_map(|(&c, &r)| match (r, keep_dim) {
            (false, _) => Some(c),
            (true, true) => Some('1'),
            (true, false) => None,
        })
        .collect();
    Einsum::new(&format!("{input}->{output}"))
}

macro_rules! reduction {
    ($(#[$doc:meta])* $ty:ident, $name:literal, $reduce:literal $(, $ignores:ident)?) => {
        $(#[$doc])*
        #[spmd_rule(
            name = $name,
            build = Self::notation,
            cache,
            reduce = $reduce,
            inputs(x),
            outputs(out)
            $(, grad_ignores($ignores))?
        )]
        #[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
        pub struct $ty {
            #[spmd(default)]
            pub axis: Vec<i64>,
            #[spmd(default)]
            pub keep_dim: bool,
        }

        impl $ty {
            fn notation(&self, call: &Call<'_>) -> Result<Einsum, SpmdError> {
                reduce_notation($name, &self.axis, self.keep_dim, call)
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
    build = Self::notation,
    cache,
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
    /// `a1c->ac` for axis 1 of a rank-3 input.
    fn notation(&self, call: &Call<'_>) -> Result<Einsum, SpmdError> {
        let axis: &[i64] = if self.reduce_all { &[] } else { &self.axis };
        reduce_notation_with("frobenius_norm", axis, self.keep_dim, true, call)
    }
}

/// Paddle's `logsumexp`: `log(sum(exp(x)))` over `axis` (every axis with
/// `reduce_all` or an empty list). Paddle 3.3.1 leaves the output partial
/// (`Sum`) over sharded reduced axes, but per-device results combine as a
/// log-sum-exp, not a sum; no reduce type finishes them, so the reduced
/// axes are never sharded here and the output is never partial.
#[spmd_rule(
    name = "logsumexp",
    build = Self::notation,
    cache,
    backward_partial = "reset",
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
    /// `a1c->ac` for axis 1 of a rank-3 input.
    fn notation(&self, call: &Call<'_>) -> Result<Einsum, SpmdError> {
        let axis: &[i64] = if self.reduce_all { &[] } else { &self.axis };
        reduce_notation_with("logsumexp", axis, self.keepdim, true, call)
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
    build = Self::notation,
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

    /// `abc->ab` for `p = 1` over the last axis, `ab1->ab` for `p = 2`.
    fn notation(&self, call: &Call<'_>) -> Result<Einsum, SpmdError> {
        let axis: &[i64] = if self.asvector { &[] } else { &[self.axis] };
        let e = reduce_notation_with("p_norm", axis, self.keepdim, self.reduce().is_none(), call)?;
        Ok(match self.reduce() {
            Some(r) => e.with_reduce(r),
            None => e,
        })
    }
}

/// Paddle's `reduce_base`: the generic reduction whose `reduce_type`
/// attribute (Paddle's `ReduceType` enum: 0 `Sum`, 1 `Max`, 2 `Min`, 3
/// `Prod`, 4 `Avg`, 5 `Any`, 6 `All`) names the reduce type of the partial
/// output; the built notation carries it, so backward explains a given
/// partial of that type alone.
#[spmd_rule(
    name = "reduce_base",
    build = Self::notation,
    cache,
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

    fn notation(&self, call: &Call<'_>) -> Result<Einsum, SpmdError> {
        // A mean's grad divides by the reduced extent: a device holding a
        // block of a reduced axis would divide by its block's. The grad
        // never shards a reduced axis of an `Avg` reduction.
        let r = self.reduce()?;
        let whole = r == ReduceType::Avg && matches!(call, Call::Grad { .. });
        let e = reduce_notation_with("reduce_base", &self.axis, self.keep_dim, whole, call)?;
        Ok(e.with_reduce(r))
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
