//! Notations built at run time from attributes and ranks (softmax's axis,
//! reductions' axis lists).

use spmd_core::{Call, SpmdError};

/// The rank of input `i` of a call, whichever the direction.
pub(crate) fn input_rank(call: &Call<'_>, i: usize) -> Option<usize> {
    call.input_shape(i).map(<[usize]>::len)
}

/// For the `_nd` index ops (`gather_nd`, `scatter_nd_add`): x's rank, the
/// index's shape and the length `k` of its coordinate tuples (its last dim),
/// which cannot exceed x's rank.
pub(crate) fn nd_index<'c>(
    op: &'static str,
    call: &Call<'c>,
) -> Result<(usize, &'c [usize], usize), SpmdError> {
    let rank = input_rank(call, 0).unwrap_or(0);
    let index = call.input_shape(1).unwrap_or(&[]);
    let k = index.last().copied().unwrap_or(0);
    if k > rank {
        return Err(SpmdError::Rejected {
            op,
            message: format!(
                "input 1 (index) holds {k}-tuples of coordinates, and input 0 (x) has only {rank} dims"
            ),
        });
    }
    Ok((rank, index, k))
}

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

/// For a grad op whose arguments are more than the forward inputs (Paddle's
/// grad signatures that also take forward outputs such as statistics or
/// indices, listed after the inputs): only the first `n` of them have
/// gradients, so the derived grads of the others are dropped.
pub(crate) fn keep_first_grads(call: &Call<'_>, result: &mut spmd_core::RuleResult, n: usize) {
    if matches!(call, Call::Grad { .. }) {
        result.outputs.truncate(n);
    }
}

/// `attr` with `dims` replicated, or `None` when none of them was sharded
/// (scatter's grad answers `updates`, which it never reads, as given with
/// its scattered dim replicated). Freeing dims *before* a merge is not done
/// with this: rules declare `merge(unsharded_claims = "ignore")`.
pub(crate) fn replicate_dims(
    attr: &spmd_core::DistAttr,
    dims: &[usize],
) -> Option<spmd_core::DistAttr> {
    let mapping = attr.dims_mapping.as_slice();
    if dims
        .iter()
        .all(|&d| mapping.get(d).is_none_or(|s| s.is_replicated()))
    {
        return None;
    }
    let freed: Vec<spmd_core::Sharding> = mapping
        .iter()
        .enumerate()
        .map(|(i, s)| {
            if dims.contains(&i) {
                spmd_core::Sharding::REPLICATED
            } else {
                *s
            }
        })
        .collect();
    Some(spmd_core::DistAttr {
        dims_mapping: spmd_core::DimsMapping::from_shardings(&freed),
        partial: attr.partial,
    })
}

/// One dim of a term that a shape-dependent rule builds at run time: a
/// label, `1`, or a compound of labels (major first). No text is written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum BuiltDim {
    Label(u8),
    One,
    Compound(Vec<u8>),
}

/// The rule over terms built dim by dim ([`spmd_core::notation::PlanBuilder`]).
pub(crate) fn built(
    op: &'static str,
    inputs: &[&[BuiltDim]],
    outputs: &[&[BuiltDim]],
) -> Result<spmd_core::Einsum, SpmdError> {
    let mut b = spmd_core::notation::PlanBuilder::new(op);
    let dims = |b: &mut spmd_core::notation::PlanBuilder<'_>, term: &[BuiltDim]| {
        for d in term {
            match d {
                BuiltDim::Label(c) => b.label(*c),
                BuiltDim::One => b.one(),
                BuiltDim::Compound(cs) => b.compound(cs),
            };
        }
    };
    for term in inputs {
        dims(&mut b, term);
        b.end_input();
    }
    for term in outputs {
        dims(&mut b, term);
        b.end_output();
    }
    spmd_core::Einsum::from_plan(op, b)
}

/// The labels `a`, `b`, ... for `n` dims (at most 52).
pub(crate) fn letters(op: &'static str, n: usize) -> Result<Vec<u8>, SpmdError> {
    Ok(labels(op, n)?.into_iter().map(|c| c as u8).collect())
}
