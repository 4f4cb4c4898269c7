//! [`Conflicts::Align`](crate::Conflicts::Align): the operands aligned
//! rather than merged (`concat`, `stack`).

use smallvec::SmallVec;
use spmd_notation::AxisSet;

use super::state::Run;
use crate::dist_attr::{Partial, ReduceType};
use crate::mesh::MeshSet;

/// Where an operand puts one mesh dim.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    Rep,
    /// On a dim carrying this axis.
    Axis(u8),
    /// On a dim that carries no axis (compared by position).
    Dim(usize),
    Partial(ReduceType),
}

impl Run<'_, '_, '_> {
    /// Fills the axis map from the slots `ops`, one mesh dim at a time
    /// (see the policy's documentation), and returns the partial status
    /// they all share.
    #[inline(never)]
    pub(crate) fn merge_aligned(&mut self, ops: &[usize]) -> Partial {
        let place = |run: &Self, s: usize, m: u8| -> Place {
            let spec = &run.specs[s];
            for (dim, sharding) in spec.attr.dims_mapping.as_slice().iter().enumerate() {
                if sharding.mesh_set().contains(m) {
                    return match run.carrier(s, dim) {
                        Some(a) => Place::Axis(a),
                        None => Place::Dim(dim),
                    };
                }
            }
            spec.attr
                .partial
                .reduce_type(m)
                .map_or(Place::Rep, Place::Partial)
        };
        // Operands without elements (no dims, or none along the first) do
        // not vote.
        let live: SmallVec<[usize; 8]> = ops
            .iter()
            .copied()
            .filter(|&s| self.specs[s].shape.first().is_some_and(|&d| d != 0))
            .collect();
        let mut partial = Partial::NONE;
        let Some(&first) = live.first() else {
            return partial;
        };
        let mut aligned = AxisSet(u64::MAX);
        for &s in &live {
            aligned = aligned.intersect(self.carried(s));
        }
        aligned = aligned.minus(self.prog.never);
        // The aligned axes in the first live operand's dim order (ties of
        // the cost rule go to the earlier dim).
        let spec0 = self.specs[first];
        let order: SmallVec<[(u8, usize); 8]> = (0..spec0.shape.len())
            .filter_map(|dim| {
                let a = self.carrier(first, dim)?;
                aligned.contains(a).then_some((a, dim))
            })
            .collect();
        let n_mesh = self.mesh.rank() as u8;
        let mismatch = |run: &Self, m: u8| {
            live.iter()
                .any(|&s| place(run, s, m) != place(run, first, m))
        };
        let mut taken = AxisSet::EMPTY;
        let mut agreed = MeshSet::EMPTY;
        for m in 0..n_mesh {
            if mismatch(self, m) {
                continue;
            }
            match place(self, first, m) {
                Place::Axis(a) if aligned.contains(a) => {
                    taken = taken.with(a);
                    agreed = agreed.with(m);
                }
                Place::Partial(r @ (ReduceType::Sum | ReduceType::Avg)) => partial.set(m, r),
                _ => {}
            }
        }
        // A co-sharded dim's mesh dims are ordered (major first): each axis
        // takes the ones every operand agrees on in the first operand's
        // order.
        for &(a, dim) in &order {
            for m in spec0.attr.dims_mapping[dim].iter() {
                if agreed.contains(m) {
                    self.map.sharding[a as usize].push(m);
                }
            }
        }
        for m in 0..n_mesh {
            if !mismatch(self, m) || partial.reduce_type(m).is_some() {
                continue;
            }
            let size = self.mesh.dim(m);
            let mut best: Option<(f64, u8)> = None;
            for &(a, _) in order.iter().filter(|(a, _)| !taken.contains(*a)) {
                let mut cost = 0.0f64;
                for &s in &live {
                    let spec = &self.specs[s];
                    let rank = spec.shape.len();
                    let Some(dim) = (0..rank).find(|&d| self.carrier(s, d) == Some(a)) else {
                        continue;
                    };
                    if spec.shape[dim] < size {
                        cost = f64::INFINITY;
                        break;
                    }
                    if !spec.attr.dims_mapping[dim].is_replicated() {
                        continue;
                    }
                    let local: f64 = spec
                        .shape
                        .iter()
                        .zip(spec.attr.dims_mapping.as_slice())
                        .map(|(&n, s)| n.div_ceil(self.mesh.product(s.mesh_set()).max(1)) as f64)
                        .product();
                    cost += local * size as f64;
                }
                if cost.is_finite() && best.is_none_or(|(c, _)| cost < c) {
                    best = Some((cost, a));
                }
            }
            if let Some((_, a)) = best {
                taken = taken.with(a);
                self.map.sharding[a as usize].push(m);
            }
        }
        partial
    }
}
