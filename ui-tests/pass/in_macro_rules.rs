//! An op declared inside `macro_rules!`, with the name, the reduce type and a
//! hook passed through metavariables: macro hygiene must not separate the
//! expansion's locals (`self`, `call`, `attrs`) from their uses.

use spmd_core::{Call, Op, SpmdError, spmd_rule};

macro_rules! reduction {
    ($ty:ident, $name:literal, $reduce:literal) => {
        #[spmd_rule(name = $name, einsum = "ij->i", partial(reduce = $reduce), validate = Self::check)]
        struct $ty {
            #[spmd(default)]
            keep_dim: bool,
        }

        impl $ty {
            fn check(&self, _call: &Call<'_>) -> Result<(), SpmdError> {
                let _ = self.keep_dim;
                Ok(())
            }
        }
    };
}

reduction!(RowMax, "row_max", "max");
reduction!(RowSum, "row_sum", "sum");

fn main() {
    assert_eq!(RowMax::NAME, "row_max");
    assert_eq!(RowSum::ATTRS, &["keep_dim"]);
}
