//! Generators shared by the property tests: meshes of 1–3 dims with extents
//! 1–4, valid dims mappings (each mesh dim at most once per tensor, sometimes
//! co-sharded, in random major-to-minor order) and partial sets.

#![allow(dead_code)]

use proptest::prelude::*;
use spmd_core::{DimsMapping, DistAttr, MeshDim, Partial, ReduceType, Sharding};

/// Cases per property: `SPMD_CHECK_CASES` (default `default`).
pub fn cases(default: u32) -> u32 {
    std::env::var("SPMD_CHECK_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

pub fn config(default: u32) -> ProptestConfig {
    ProptestConfig {
        cases: cases(default),
        // Shrinking re-runs whole simulations: keep it bounded.
        max_shrink_iters: 512,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// A mesh shape: 1–3 dims of extent 1–4.
pub fn mesh_shape() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(1usize..=4, 1..=3)
}

/// A dims mapping for a tensor of rank `rank` on a mesh of rank `mesh_rank`,
/// with each unused mesh dim made partial (with `reduce`) when `partial`.
pub fn attr(
    rank: usize,
    mesh_rank: usize,
    partial: bool,
    reduce: ReduceType,
) -> impl Strategy<Value = DistAttr> {
    // Each mesh dim: which tensor dim it splits (`rank` or more = none), and
    // a random order of the mesh dims (major first within a tensor dim).
    let order = Just((0..mesh_rank as MeshDim).collect::<Vec<_>>()).prop_shuffle();
    (
        prop::collection::vec(0..rank + 2, mesh_rank),
        order,
        prop::collection::vec(prop::bool::weighted(0.3), mesh_rank),
    )
        .prop_map(move |(target, order, part)| {
            let mut dims = vec![Sharding::REPLICATED; rank];
            let mut p = Partial::NONE;
            for &m in &order {
                match target[m as usize] {
                    t if t < rank => dims[t].push(m),
                    _ if partial && part[m as usize] => p.set(m, reduce),
                    _ => {}
                }
            }
            DistAttr::new(DimsMapping::from_shardings(&dims)).with_partial(p)
        })
}

/// Attrs for tensors of the given ranks.
pub fn attrs(
    ranks: Vec<usize>,
    mesh_rank: usize,
    partial: bool,
) -> impl Strategy<Value = Vec<DistAttr>> {
    ranks
        .into_iter()
        .map(|r| attr(r, mesh_rank, partial, ReduceType::Sum).boxed())
        .collect::<Vec<_>>()
}
