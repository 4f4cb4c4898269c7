//! `matmul` / `matmul_v2`: batched matrix product with optional transposes.

use spmd_core::{Call, SpmdError, spmd_rule};

/// Paddle's `matmul`: `x @ y` over the last two dims, batch dims broadcast.
/// `trans_x` / `trans_y` swap the last two dims of an operand; a 1-D operand
/// is a vector (its transpose flag does nothing), as in numpy.
///
/// Paddle 3.3.1's policy: axes settle by role (batch, then m and n, then k,
/// which co-shards both operands' k shardings) and non-divisible batch and k
/// shardings are dropped in forward (`PADDLE-3.3.1.md` §C). Backward and grad
/// keep uneven shards (the classic answer, which Paddle's own test suite
/// asserts); Paddle 3.3.1's reverse rule drops them on the inferred inputs
/// only and returns an output that forward from those inputs would not
/// produce (a listed deviation).
#[spmd_rule(
    name = "matmul",
    einsum = "...mk,...kn->...mn",
    case(when = call.input_rank(0) == Some(1) && call.input_rank(1) == Some(1), einsum = "k,k->"),
    case(when = call.input_rank(0) == Some(1) && self.trans_y, einsum = "k,...nk->...n"),
    case(when = call.input_rank(0) == Some(1), einsum = "k,...kn->...n"),
    case(when = call.input_rank(1) == Some(1) && self.trans_x, einsum = "...km,k->...m"),
    case(when = call.input_rank(1) == Some(1), einsum = "...mk,k->...m"),
    case(when = self.trans_x && !self.trans_y, einsum = "...km,...kn->...mn"),
    case(when = !self.trans_x && self.trans_y, einsum = "...mk,...nk->...mn"),
    case(when = self.trans_x && self.trans_y, einsum = "...km,...nk->...mn"),
    conflicts = "role_priority",
    validate = Self::check_transposes,
    inputs(x, y),
    outputs(out)
)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Matmul {
    #[spmd(default)]
    pub trans_x: bool,
    #[spmd(default)]
    pub trans_y: bool,
}

impl Matmul {
    /// A transpose flag on a 1-D operand is a caller error (Paddle rejects it
    /// rather than ignoring the flag).
    fn check_transposes(&self, call: &Call<'_>) -> Result<(), SpmdError> {
        for (i, (flag, attr)) in [(self.trans_x, "trans_x"), (self.trans_y, "trans_y")]
            .into_iter()
            .enumerate()
        {
            if flag && call.input_rank(i).is_some_and(|r| r < 2) {
                return Err(SpmdError::InvalidAttr {
                    op: "matmul",
                    attr: attr.into(),
                    message: format!(
                        "input {i} has rank {}, and only an operand of rank 2 or more can be transposed",
                        call.input_rank(i).unwrap_or(0)
                    ),
                });
            }
        }
        Ok(())
    }
}
