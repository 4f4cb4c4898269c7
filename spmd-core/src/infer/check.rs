//! Is a call well formed for its plan: arity, absent tensors, each
//! tensor's mapping against its shape and the mesh, ranks against terms.

use spmd_notation::Term;

use crate::dist_attr::Spec;
use crate::error::{RankNeed, Role, SpmdError, TensorRef};
use crate::mesh::{MAX_MESH_RANK, Mesh};
use crate::optional::Absent;
use crate::rule::EinsumRule;

/// Fails on an absent tensor the rule does not declare optional.
pub(super) fn check_absent(rule: &EinsumRule<'_>, absent: Absent) -> Result<(), SpmdError> {
    let stray = Absent::new(
        absent.inputs & !rule.optional.inputs,
        absent.outputs & !rule.optional.outputs,
    );
    if stray.is_none() {
        return Ok(());
    }
    let tensor = if stray.inputs != 0 {
        TensorRef::input(stray.inputs.trailing_zeros() as usize)
    } else {
        TensorRef::output(stray.outputs.trailing_zeros() as usize)
    };
    Err(SpmdError::AbsentTensor {
        op: rule.name,
        tensor,
    })
}

pub(super) fn arity(
    rule: &EinsumRule<'_>,
    t: TensorRef,
    expected: usize,
    found: usize,
) -> Result<(), SpmdError> {
    if expected == found {
        Ok(())
    } else {
        Err(SpmdError::Arity {
            op: rule.name,
            role: t.role,
            expected,
            found,
            names: match t.role {
                Role::Input => rule.input_names,
                Role::Output => rule.output_names,
            },
        })
    }
}

/// Checks a given tensor's dist attr against its shape and the mesh.
pub(super) fn validate(
    op: &'static str,
    t: TensorRef,
    spec: &Spec<'_>,
    mesh: &Mesh,
) -> Result<(), SpmdError> {
    let mapping = &spec.attr.dims_mapping;
    if mapping.rank() != spec.shape.len() {
        return Err(SpmdError::MappingLength {
            op,
            tensor: t,
            rank: spec.shape.len(),
            len: mapping.rank(),
        });
    }
    let mut used = [usize::MAX; MAX_MESH_RANK];
    for (dim, s) in mapping.as_slice().iter().enumerate() {
        for m in s.iter() {
            if m as usize >= mesh.rank() {
                return Err(SpmdError::MeshDimOutOfRange {
                    op,
                    tensor: t,
                    dim,
                    mesh_dim: m,
                    mesh_rank: mesh.rank(),
                });
            }
            if used[m as usize] != usize::MAX {
                return Err(SpmdError::MeshDimReused {
                    op,
                    tensor: t,
                    mesh_dim: m,
                    first: used[m as usize],
                    second: dim,
                });
            }
            used[m as usize] = dim;
        }
    }
    for (m, _) in spec.attr.partial.iter() {
        if m as usize >= mesh.rank() {
            return Err(SpmdError::PartialOutOfRange {
                op,
                tensor: t,
                mesh_dim: m,
                mesh_rank: mesh.rank(),
            });
        }
        if used[m as usize] != usize::MAX {
            return Err(SpmdError::PartialAndSharded {
                op,
                tensor: t,
                mesh_dim: m,
                dim: used[m as usize],
            });
        }
    }
    Ok(())
}

/// How many dims the term's ellipsis stands for in a tensor of this rank.
pub(super) fn ellipsis_len(
    rule: &EinsumRule<'_>,
    t: TensorRef,
    term: Term,
    rank: usize,
) -> Result<usize, SpmdError> {
    let n = term.len as usize;
    match term.ellipsis {
        Some(_) if rank >= n => Ok(rank - n),
        Some(_) => Err(rank_error(rule, t, term, rank, RankNeed::AtLeast(n))),
        None if rank == n => Ok(0),
        None => Err(rank_error(rule, t, term, rank, RankNeed::Exactly(n))),
    }
}

pub(super) fn rank_error(
    rule: &EinsumRule<'_>,
    t: TensorRef,
    term: Term,
    rank: usize,
    need: RankNeed,
) -> SpmdError {
    SpmdError::Rank {
        op: rule.name,
        tensor: t,
        rank,
        term: rule.plan.term_text(term),
        need,
    }
}
