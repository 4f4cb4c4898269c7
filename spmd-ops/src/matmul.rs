//! `matmul` / `matmul_v2`: batched matrix product with optional transposes.

use spmd_core::spmd_rule;

/// Paddle's `matmul`: `x @ y` over the last two dims, batch dims broadcast.
/// `trans_x` / `trans_y` swap the last two dims of an operand.
#[spmd_rule(
    name = "matmul",
    einsum = "...mk,...kn->...mn",
    case(when = self.trans_x && !self.trans_y, einsum = "...km,...kn->...mn"),
    case(when = !self.trans_x && self.trans_y, einsum = "...mk,...nk->...mn"),
    case(when = self.trans_x && self.trans_y, einsum = "...km,...nk->...mn"),
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
