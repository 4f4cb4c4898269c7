//! Is a tensor of a call well formed: its mapping against its shape and
//! the mesh, its rank against its term.

use spmd_notation::Term;

use crate::dist_attr::Spec;
use crate::error::{RankNeed, SpmdError, TensorRef};
use crate::mesh::{MAX_MESH_RANK, Mesh};
use crate::rule::EinsumRule;

/// Checks a given tensor's dist attr against its shape and the mesh.
#[inline(always)]
pub(crate) fn validate(
    op: &'static str,
    t: TensorRef,
    spec: &Spec<'_>,
    mesh: &Mesh,
) -> Result<(), SpmdError> {
    if plainly_valid(spec, mesh) {
        return Ok(());
    }
    validate_in_full(op, t, spec, mesh)
}

/// The common case in a few word operations: the rank matches, every dim is
/// replicated or split over one mesh dim, and the mesh dims (partial ones
/// included) are on the mesh and used once. `false` sends the tensor to
/// [`validate_in_full`], which also handles co-shardings and names the fault.
#[inline(always)]
fn plainly_valid(spec: &Spec<'_>, mesh: &Mesh) -> bool {
    let mapping = spec.attr.dims_mapping.as_slice();
    if mapping.len() != spec.shape.len() {
        return false;
    }
    let on_mesh = ((1u32 << mesh.rank().min(MAX_MESH_RANK)) - 1) as u8;
    let mut used = 0u8;
    for s in mapping {
        match s.single_bits() {
            Some(0) if s.is_replicated() => {}
            Some(bits) if bits != 0 && bits & !used & on_mesh == bits => used |= bits,
            // A co-sharding, a mesh dim off the mesh or used twice.
            _ => return false,
        }
    }
    let partial = spec.attr.partial.dims().0;
    partial & !used & on_mesh == partial
}

#[cold]
fn validate_in_full(
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
#[inline]
pub(crate) fn ellipsis_len(
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

#[cold]
pub(crate) fn rank_error(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dist_attr::{DimsMapping, DistAttr, Partial, ReduceType, Sharding};
    use crate::mesh::MeshSet;

    /// The quick check never accepts what the full check rejects, and the
    /// two agree on every answer, over every rank-2 mapping built from
    /// replicated, single, off-mesh and co-sharded dims, with every partial
    /// set, on a 3-d mesh (and rank-1 mappings of a rank-2 shape).
    #[test]
    fn quick_check_agrees_with_full_check() {
        let mesh = Mesh::new(&[2, 2, 2]).unwrap();
        let options = [
            Sharding::REPLICATED,
            Sharding::on(0),
            Sharding::on(1),
            Sharding::on(2),
            Sharding::on(3),
            Sharding::on(14),
            Sharding::co(&[0, 1]).unwrap(),
            Sharding::co(&[1, 0]).unwrap(),
            Sharding::co(&[2, 2]).unwrap(),
        ];
        let t = TensorRef::input(0);
        let shape = [4usize, 4];
        let (mut quick, mut rejected) = (0, 0);
        for a in options {
            for b in options {
                for mapping in [vec![a, b], vec![a]] {
                    for partial in 0u8..16 {
                        let mut attr = DistAttr::new(DimsMapping::from_shardings(&mapping));
                        attr.partial = Partial::over(MeshSet(partial), ReduceType::Sum);
                        let spec = Spec::new(&shape, &attr);
                        let full = validate_in_full("op", t, &spec, &mesh);
                        assert_eq!(validate("op", t, &spec, &mesh), full, "{attr:?}");
                        if plainly_valid(&spec, &mesh) {
                            assert!(full.is_ok(), "quick check passed {attr:?}");
                            quick += 1;
                        }
                        rejected += usize::from(full.is_err());
                    }
                }
            }
        }
        // Both paths were exercised.
        assert!(
            quick > 20 && rejected > 50,
            "{quick} quick, {rejected} rejected"
        );
    }
}
