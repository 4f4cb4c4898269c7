//! `where` (a three-way elementwise select), `mean_all`, and the
//! registration of this family (reductions, axis ops, `where`).

use spmd_core::{Call, Einsum, Registry, SpmdError, spmd_rule};

use crate::index::{ArgMax, ArgMin, ArgSort, Cumsum, OneHot, TopK, TrilTriu, Triu};
use crate::notation::input_rank;
use crate::reduce::{All, Amax, Amin, Any, ReduceBase};

/// Paddle's `where`: `out = condition ? x : y`, elementwise with numpy
/// broadcasting of the three inputs. The condition has no gradient. Paddle
/// 3.3.1 keeps uneven shardings and returns the reverse rule's output
/// non-partial.
#[spmd_rule(
    name = "where",
    einsum = "...,...,...->...",
    backward_partial = "reset",
    inputs(condition, x, y),
    outputs(out),
    no_grad(condition)
)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Where {}

/// Paddle's `mean_all`: the mean of every element, a 0-d output that is
/// partial (`Avg`) over the mesh dims sharding the input. Its gradient
/// broadcasts the output grad and never reads `x`.
#[spmd_rule(
    name = "mean_all",
    build = Self::notation,
    reduce = "avg",
    inputs(x),
    outputs(out),
    grad_ignores(x)
)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MeanAll {}

impl MeanAll {
    /// `abc->`.
    fn notation(&self, call: &Call<'_>) -> Result<Einsum, SpmdError> {
        let rank = input_rank(call, 0).unwrap_or(0);
        let term: String = crate::notation::labels("mean_all", rank)?
            .into_iter()
            .collect();
        Einsum::new(&format!("{term}->"))
    }
}

/// Registers the reductions `all`, `any`, `amax`, `amin`, `reduce_base`,
/// `mean_all`, the axis ops and `where`.
pub(crate) fn register(registry: &mut Registry) -> Result<(), SpmdError> {
    registry
        .register::<All>()?
        .register::<Any>()?
        .register::<Amax>()?
        .register::<Amin>()?
        .register::<ReduceBase>()?
        .register::<MeanAll>()?
        .register::<Cumsum>()?
        .register::<ArgMax>()?
        .register::<ArgMin>()?
        .register::<TopK>()?
        .register::<ArgSort>()?
        .register::<OneHot>()?
        .register::<Triu>()?
        .register::<TrilTriu>()?
        .register::<Where>()?;
    Ok(())
}
