//! [`Conflicts::RolePriority`](crate::Conflicts::RolePriority)'s forward
//! merge: the axis map filled role by role (batch, free, contracted).

use core::cmp::Ordering;

use spmd_notation::AxisSet;

use super::state::Run;
use crate::dist_attr::Sharding;
use crate::mesh::MAX_MESH_RANK;
use crate::trace::Trace;

/// No axis owns the mesh dim yet, or no dim carries the axis.
const FREE: u8 = u8::MAX;

impl Run<'_, '_, '_> {
    /// Fills the axis map from the inputs (slots `0..n_in`) that `merges`
    /// (present ones that do not follow the others), role by role; see the
    /// policy's documentation. Each mesh dim has one owner: an axis that
    /// wants a mesh dim another axis owns loses it.
    #[inline(never)]
    pub(crate) fn merge_by_role<T: Trace + ?Sized>(
        &mut self,
        merges: impl Fn(usize) -> bool,
        trace: &mut T,
    ) {
        let n_in = usize::from(self.prog.n_inputs).min(8);
        let mut carried = [AxisSet::EMPTY; 8];
        for (i, c) in carried.iter_mut().enumerate().take(n_in) {
            if !merges(i) {
                continue;
            }
            *c = self.carried(i);
            if trace.enabled() {
                self.trace_unsharded(i, trace);
            }
        }
        // An input that takes no part carries nothing and does not make an
        // axis less than everywhere.
        let everywhere = (0..n_in)
            .filter(|&i| merges(i))
            .fold(AxisSet(u64::MAX), |acc, i| acc.intersect(carried[i]));
        let out_axes = self.prog.output_axes;
        let axes = carried[..n_in]
            .iter()
            .fold(AxisSet::EMPTY, |m, &c| m.union(c))
            .minus(self.prog.never);
        let batch = axes
            .intersect(out_axes)
            .intersect(everywhere.union(self.prog.ellipsis));
        let free = axes.intersect(out_axes).minus(batch);
        let contracted = axes.minus(out_axes);
        let mut owner = [FREE; MAX_MESH_RANK];

        // The axis each dim of each input carries, resolved once: the
        // passes below ask "which dim of input i carries axis a" many times.
        let mut carriers = [[FREE; 8]; 8];
        for (i, row) in carriers.iter_mut().enumerate().take(n_in) {
            let shape = self.specs[i].shape;
            if !merges(i) || shape.len() > 8 {
                continue;
            }
            for (dim, c) in row.iter_mut().enumerate().take(shape.len()) {
                *c = self.carrier(i, dim).unwrap_or(FREE);
            }
        }
        let given_on = |run: &Self, i: usize, a: u8| -> Option<(usize, Sharding)> {
            let spec = &run.specs[i];
            if spec.shape.len() > 8 {
                return run.given_on(i, spec, a);
            }
            let dim = carriers[i][..spec.shape.len()]
                .iter()
                .position(|&c| c == a)?;
            Some((dim, spec.attr.dims_mapping[dim]))
        };

        // Gives axis `a` the mesh dims input `i` shards it with that no
        // axis owns yet, in order; reports each merge and each loss.
        let take =
            |run: &mut Self, owner: &mut [u8; MAX_MESH_RANK], a: u8, i: usize, trace: &mut T| {
                let Some((dim, given)) = given_on(run, i, a) else {
                    return;
                };
                let before = run.map.sharding[a as usize];
                let mut s = before;
                for m in given.iter() {
                    match owner[m as usize] {
                        FREE => {
                            owner[m as usize] = a;
                            s.push(m);
                        }
                        o if o == a => {}
                        o => trace.conflict(m, run.axis_name(o), run.axis_name(a)),
                    }
                }
                run.map.sharding[a as usize] = s;
                // Reported when the axis gained mesh dims; what it could not
                // take was reported as a conflict above.
                if s != before && trace.enabled() {
                    trace.merged(run.axis_name(a), run.tensor(i), dim, given, s);
                }
            };

        // Batch: the input whose batch dims carry the most shards first
        // (tie: more batch dims, then the earlier input), the others
        // co-shard.
        let shards = |run: &Self, i: usize| -> (usize, u32) {
            let n = batch
                .iter()
                .filter_map(|a| given_on(run, i, a))
                .map(|(_, s)| s.len())
                .sum();
            (n, carried[i].intersect(batch).len())
        };
        let mut order = [((0usize, 0u32), 0u8); 8];
        let mut n_order = 0;
        for i in (0..n_in).filter(|&i| merges(i)) {
            let key = if batch.is_empty() {
                (0, 0)
            } else {
                shards(self, i)
            };
            order[n_order] = (key, i as u8);
            n_order += 1;
        }
        // Most shards first; the sort is stable, so input order on ties.
        insertion_sort_by(&mut order[..n_order], |x, y| y.0.cmp(&x.0));
        for &(_, i) in &order[..n_order] {
            for a in batch.iter() {
                take(self, &mut owner, a, usize::from(i), trace);
            }
        }
        for a in batch.iter() {
            self.fit_owned(a, &mut owner, trace);
        }

        // Free: each keeps the mesh dims no batch axis owns; a mesh dim two
        // free axes want goes to the larger extent (the earlier axis on a
        // tie).
        let mut by_extent = [0u8; 64];
        let mut n_free = 0;
        for a in free.iter() {
            by_extent[n_free] = a;
            n_free += 1;
        }
        insertion_sort_by(&mut by_extent[..n_free], |&x, &y| {
            self.extent(y).cmp(&self.extent(x))
        });
        for &a in &by_extent[..n_free] {
            if let Some(i) = (0..n_in).find(|&i| carried[i].contains(a)) {
                take(self, &mut owner, a, i, trace);
            }
        }

        // Contracted: the union of the inputs' shardings (most shards
        // first), minus the mesh dims already owned, trimmed until
        // divisible.
        for a in contracted.iter() {
            let mut order = [(0u8, 0u8); 8];
            let mut n = 0;
            for i in (0..n_in).filter(|&i| carried[i].contains(a)) {
                order[n] = (
                    i as u8,
                    given_on(self, i, a).map_or(0, |(_, s)| s.len() as u8),
                );
                n += 1;
            }
            insertion_sort_by(&mut order[..n], |x, y| y.1.cmp(&x.1).then(x.0.cmp(&y.0)));
            for &(i, _) in &order[..n] {
                take(self, &mut owner, a, usize::from(i), trace);
            }
            self.fit_owned(a, &mut owner, trace);
        }
    }

    /// Fits axis `a`'s sharding until divisible, freeing the mesh dims it
    /// drops.
    fn fit_owned<T: Trace + ?Sized>(
        &mut self,
        a: u8,
        owner: &mut [u8; MAX_MESH_RANK],
        trace: &mut T,
    ) {
        let s = self.map.sharding[a as usize];
        let fitted = self.fit_one(a, s, trace);
        for m in s.mesh_set().minus(fitted.mesh_set()).iter() {
            owner[m as usize] = FREE;
        }
        self.map.sharding[a as usize] = fitted;
    }
}

/// Sorts a few items stably in place (the lists here hold at most 64).
fn insertion_sort_by<T: Copy>(v: &mut [T], mut cmp: impl FnMut(&T, &T) -> Ordering) {
    for i in 1..v.len() {
        let x = v[i];
        let mut j = i;
        while j > 0 && cmp(&x, &v[j - 1]) == Ordering::Less {
            v[j] = v[j - 1];
            j -= 1;
        }
        v[j] = x;
    }
}
