//! Notations built at run time from attributes and ranks (softmax's axis,
//! reductions' axis lists).

use spmd_core::{Call, SpmdError};

/// The rank of input `i` of a call, whichever the direction.
pub(crate) fn input_rank(call: &Call<'_>, i: usize) -> Option<usize> {
    call.input_shape(i).map(<[usize]>::len)
}

/// Paddle's axis (negative counts from the end) as an index below `rank`.
pub(crate) fn normalize_axis(
    op: &'static str,
    attr: &str,
    axis: i64,
    rank: usize,
) -> Result<usize, SpmdError> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if (0..r.max(1)).contains(&a) {
        Ok(a as usize)
    } else {
        Err(SpmdError::InvalidAttr {
            op,
            attr: attr.into(),
            message: format!("axis {axis} is out of range for a tensor of rank {rank}"),
        })
    }
}

/// Labels for `rank` dims, `a`, `b`, ... (at most 52 dims).
pub(crate) fn labels(op: &'static str, rank: usize) -> Result<Vec<char>, SpmdError> {
    let letters = ('a'..='z').chain('A'..='Z');
    if rank > 52 {
        return Err(SpmdError::Rejected {
            op,
            message: format!("rank {rank} is above the 52 dims a notation can name"),
        });
    }
    Ok(letters.take(rank).collect())
}
