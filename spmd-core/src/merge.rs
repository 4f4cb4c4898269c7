//! The merge (Paddle's `ShardingMergeForTensors`): axis -> mesh dims, built
//! tensor by tensor, dim by dim; then one pass that settles mesh dims claimed by
//! several axes according to the rule's [`Conflicts`] policy.

use crate::dist_attr::Sharding;
use crate::mesh::{MAX_MESH_RANK, MeshDim};
use crate::policy::Conflicts;

const NOBODY: u8 = u8::MAX;

/// The claimant standing for every dim that never carries a sharding (`1`, a
/// broadcast size-1 dim, a never-sharded axis). Such a dim still claims the
/// mesh dims it is given, in order (Paddle's `'1'` label does), so an axis
/// that claims them later loses them; it never conflicts as an axis.
pub(crate) const UNSHARDED: u8 = 63;

/// Axis -> sharding, plus for each mesh dim which axes claimed it and which
/// claimed it first.
pub(crate) struct AxisMap {
    /// Indexed by axis id (at most 63 axes; 63 is [`UNSHARDED`]'s, unused).
    pub(crate) sharding: [Sharding; 64],
    first: [u8; MAX_MESH_RANK],
    claimants: [u64; MAX_MESH_RANK],
    /// Whether some mesh dim has more than one claimant (otherwise there is
    /// nothing to settle).
    contested: bool,
}

/// A merge failure: the axis already had `existing`, which neither equals nor
/// extends the incoming sharding. The caller adds the op, tensor and dim.
#[derive(Debug)]
pub(crate) struct AxisClash {
    pub(crate) existing: Sharding,
}

/// A strict-policy failure: `mesh_dim` is claimed by axes `first` and `second`.
#[derive(Debug)]
pub(crate) struct MeshDimClash {
    pub(crate) mesh_dim: MeshDim,
    pub(crate) first: u8,
    pub(crate) second: u8,
}

impl AxisMap {
    /// A fixed-size table: no allocation and no spill checks on the hot path.
    #[inline(always)]
    pub(crate) fn new() -> AxisMap {
        AxisMap {
            sharding: [Sharding::REPLICATED; 64],
            first: [NOBODY; MAX_MESH_RANK],
            claimants: [0; MAX_MESH_RANK],
            contested: false,
        }
    }

    /// Merges one tensor dim's sharding into axis `a`. Replicated merges with
    /// anything, equal shardings merge, and a co-sharding that extends the other
    /// (one is a prefix of the other) merges into the longer one.
    #[inline(always)]
    pub(crate) fn merge(&mut self, a: u8, given: Sharding) -> Result<Sharding, AxisClash> {
        if given.is_replicated() {
            return Ok(self.sharding[a as usize]);
        }
        let cur = self.sharding[a as usize];
        // The common case: one mesh dim, on an axis that has none yet.
        if cur.is_replicated()
            && let Some(bits) = given.single_bits()
        {
            let m = bits.trailing_zeros() as usize;
            if m < MAX_MESH_RANK {
                self.claim(m, a);
                self.sharding[a as usize] = given;
                return Ok(given);
            }
        }
        let merged = if cur.starts_with(&given) {
            cur
        } else if given.starts_with(&cur) {
            given
        } else {
            return Err(AxisClash { existing: cur });
        };
        // Mesh dims new to this axis are claimed now: that moment orders them.
        for m in merged.iter().skip(cur.len()) {
            self.claim(m as usize, a);
        }
        self.sharding[a as usize] = merged;
        Ok(merged)
    }

    /// Axis (or claimant) `a` claims mesh dim `m`.
    #[inline(always)]
    fn claim(&mut self, m: usize, a: u8) {
        if self.first[m] == NOBODY {
            self.first[m] = a;
        }
        let bit = 1u64 << a;
        self.contested |= self.claimants[m] & !bit != 0;
        self.claimants[m] |= bit;
    }

    /// Whether some mesh dim has several claimants.
    #[inline(always)]
    pub(crate) fn contested(&self) -> bool {
        self.contested
    }

    /// Records the claims of a dim that carries no sharding (see [`UNSHARDED`]).
    #[inline]
    pub(crate) fn claim_unsharded(&mut self, given: Sharding) {
        for m in given.iter() {
            self.claim(m as usize, UNSHARDED);
        }
    }

    /// Settles every mesh dim claimed by more than one axis. `lost(m, kept, lost)`
    /// is told of each mesh dim an axis gives up.
    pub(crate) fn resolve(
        &mut self,
        mesh_rank: usize,
        policy: Conflicts,
        mut lost: impl FnMut(MeshDim, u8, u8),
    ) -> Result<(), MeshDimClash> {
        for m in 0..mesh_rank {
            let first = self.first[m];
            if first == NOBODY {
                continue;
            }
            let others = self.claimants[m] & !(1u64 << first);
            if others == 0 {
                continue;
            }
            match policy {
                Conflicts::Strict => {
                    return Err(MeshDimClash {
                        mesh_dim: m as MeshDim,
                        first,
                        second: others.trailing_zeros() as u8,
                    });
                }
                // Role priority's own merge runs in forward only; backward
                // and grad settle their operands first-wins.
                Conflicts::FirstWins | Conflicts::RolePriority | Conflicts::Align => {
                    let mut bits = others;
                    while bits != 0 {
                        let a = bits.trailing_zeros() as u8;
                        bits &= bits - 1;
                        if a != UNSHARDED {
                            let s = &mut self.sharding[a as usize];
                            *s = s.without(m as MeshDim);
                        }
                        lost(m as MeshDim, first, a);
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn co(d: &[u8]) -> Sharding {
        Sharding::co(d).unwrap()
    }

    #[test]
    fn replicated_merges_with_anything_and_sharding_wins() {
        let mut m = AxisMap::new();
        assert_eq!(
            m.merge(0, Sharding::REPLICATED).unwrap(),
            Sharding::REPLICATED
        );
        assert_eq!(m.merge(0, Sharding::on(1)).unwrap(), Sharding::on(1));
        assert_eq!(m.merge(0, Sharding::REPLICATED).unwrap(), Sharding::on(1));
        assert_eq!(m.merge(0, Sharding::on(1)).unwrap(), Sharding::on(1));
    }

    #[test]
    fn different_shardings_of_one_axis_conflict() {
        let mut m = AxisMap::new();
        m.merge(0, Sharding::on(1)).unwrap();
        match m.merge(0, Sharding::on(0)) {
            Err(AxisClash { existing }) => assert_eq!(existing, Sharding::on(1)),
            other => panic!("expected an axis conflict, got {other:?}"),
        }
    }

    #[test]
    fn co_sharding_prefix_merges_into_the_longer_either_way() {
        let mut m = AxisMap::new();
        m.merge(0, co(&[0])).unwrap();
        assert_eq!(m.merge(0, co(&[0, 1])).unwrap(), co(&[0, 1]));
        assert_eq!(m.merge(0, co(&[0])).unwrap(), co(&[0, 1]));
        // [1] is not a prefix of [0, 1]: a conflict, not a merge.
        assert!(m.merge(0, co(&[1])).is_err());
    }

    #[test]
    fn first_claim_wins_in_claim_order_not_axis_order() {
        // Axis 1 claims mesh dim 0 before axis 0 does.
        let mut m = AxisMap::new();
        m.merge(1, Sharding::on(0)).unwrap();
        m.merge(0, Sharding::on(0)).unwrap();
        let mut events = Vec::new();
        m.resolve(2, Conflicts::FirstWins, |md, k, l| events.push((md, k, l)))
            .unwrap();
        assert_eq!(m.sharding[1], Sharding::on(0));
        assert_eq!(m.sharding[0], Sharding::REPLICATED);
        assert_eq!(events, vec![(0, 1, 0)]);
    }

    #[test]
    fn a_loser_keeps_its_other_co_shard_dims() {
        let mut m = AxisMap::new();
        m.merge(0, Sharding::on(1)).unwrap();
        m.merge(1, co(&[0, 1])).unwrap();
        m.resolve(2, Conflicts::FirstWins, |_, _, _| {}).unwrap();
        assert_eq!(m.sharding[0], Sharding::on(1));
        assert_eq!(m.sharding[1], Sharding::on(0));
    }

    #[test]
    fn an_unsharded_dim_that_claims_first_takes_the_mesh_dim_from_later_axes() {
        let mut m = AxisMap::new();
        m.claim_unsharded(Sharding::on(0));
        m.merge(0, Sharding::on(0)).unwrap();
        m.merge(1, Sharding::on(1)).unwrap();
        m.resolve(2, Conflicts::FirstWins, |_, _, _| {}).unwrap();
        assert_eq!(m.sharding[0], Sharding::REPLICATED);
        assert_eq!(m.sharding[1], Sharding::on(1));
    }

    #[test]
    fn unsharded_dims_claiming_different_mesh_dims_do_not_conflict() {
        let mut m = AxisMap::new();
        m.claim_unsharded(Sharding::on(0));
        m.claim_unsharded(Sharding::on(1));
        m.merge(0, Sharding::on(1)).unwrap();
        m.resolve(2, Conflicts::FirstWins, |_, _, _| {}).unwrap();
        assert_eq!(m.sharding[0], Sharding::REPLICATED);
    }

    #[test]
    fn strict_names_both_axes() {
        let mut m = AxisMap::new();
        m.merge(2, Sharding::on(1)).unwrap();
        m.merge(0, Sharding::on(1)).unwrap();
        match m.resolve(2, Conflicts::Strict, |_, _, _| {}) {
            Err(MeshDimClash {
                mesh_dim,
                first,
                second,
            }) => assert_eq!((mesh_dim, first, second), (1, 2, 0)),
            other => panic!("expected a strict conflict, got {other:?}"),
        }
    }
}
