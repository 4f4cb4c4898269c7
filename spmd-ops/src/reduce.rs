//! Reductions: `sum`, `max`, `min`, `prod` over an axis list. A sharded
//! reduced axis leaves the output partial with the op's own reduce type.

use spmd_core::{Call, Einsum, SpmdError, spmd_rule};

use crate::notation::{input_rank, labels, normalize_axis};

/// The notation of a reduction of a rank-`rank` tensor over `axis` (every
/// axis when empty); kept dims become `1`.
fn reduce_notation(
    op: &'static str,
    axis: &[i64],
    keep_dim: bool,
    call: &Call<'_>,
) -> Result<Einsum, SpmdError> {
    let rank = input_rank(call, 0).unwrap_or(0);
    let names = labels(op, rank)?;
    let mut reduced = vec![axis.is_empty(); rank];
    for &a in axis {
        reduced[normalize_axis(op, "axis", a, rank)?] = true;
    }
    let input: String = names.iter().collect();
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
            reduce = $reduce,
            inputs(x),
            outputs(out)
            $(, grad_ignores($ignores))?
        )]
        #[derive(Clone, Debug, Default, PartialEq, Eq)]
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
