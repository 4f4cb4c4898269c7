//! [`Conflicts::RolePriority`](crate::Conflicts::RolePriority)'s forward
//! merge: the axis map filled role by role (batch, free, contracted).
//!
//! Which axes are batch, free or contracted, which dim of which input
//! carries each, and the order of the free axes depend on the shapes
//! alone: [`RolePlan`] settles them when the call compiles, and the run
//! reads only the layouts.

use core::cmp::Ordering;

use smallvec::SmallVec;
use spmd_notation::AxisSet;

use super::program::Program;
use super::state::Run;
use crate::dist_attr::Sharding;
use crate::mesh::MAX_MESH_RANK;
use crate::rule::EinsumRule;
use crate::trace::Trace;

/// No axis owns the mesh dim yet.
const FREE: u8 = u8::MAX;

/// Axis `axis` takes what dim `dim` of input `input` gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Take {
    axis: u8,
    input: u8,
    dim: u8,
}

/// One input's batch takes, with its sort key (shards given, batch dims).
type BatchGroup<'t> = ((usize, usize), &'t [Take]);

/// The role-priority merge of one call's shapes (see the module docs).
#[derive(Clone, Debug, Default)]
pub(crate) struct RolePlan {
    /// The batch axes.
    batch: AxisSet,
    /// The takes, by phase: batch (grouped by input, in input order, each
    /// group's axes ascending), free (larger extent first), contracted
    /// (grouped by axis, ascending; each group in input order).
    takes: SmallVec<[Take; 8]>,
    n_batch: u8,
    n_free: u8,
}

impl RolePlan {
    /// The plan of `prog`'s forward call for `rule`, with the extents its
    /// shapes give. Inputs that are absent or follow the others take no
    /// part.
    pub(crate) fn build(rule: &EinsumRule<'_>, prog: &Program, extent: &[usize]) -> RolePlan {
        let n_in = usize::from(prog.n_inputs);
        let merges = |i: usize| prog.slots[i].present && !rule.options.follows.contains(i);
        let carried = |i: usize| {
            if merges(i) {
                prog.slots[i].carried
            } else {
                AxisSet::EMPTY
            }
        };
        // An input that takes no part carries nothing and does not make an
        // axis less than everywhere.
        let everywhere = (0..n_in)
            .filter(|&i| merges(i))
            .fold(AxisSet(u64::MAX), |acc, i| acc.intersect(carried(i)));
        let out_axes = prog.output_axes;
        let axes = (0..n_in)
            .fold(AxisSet::EMPTY, |m, i| m.union(carried(i)))
            .minus(prog.never);
        let batch = axes
            .intersect(out_axes)
            .intersect(everywhere.union(prog.ellipsis));
        let free = axes.intersect(out_axes).minus(batch);
        let contracted = axes.minus(out_axes);
        // The first dim of input `i` that carries axis `a`.
        let dim_of = |i: usize, a: u8| {
            prog.dims_of(i)
                .iter()
                .position(|d| d.live == a)
                .map(|dim| Take {
                    axis: a,
                    input: i as u8,
                    dim: dim as u8,
                })
        };
        let mut takes = SmallVec::new();
        for i in (0..n_in).filter(|&i| merges(i)) {
            takes.extend(batch.iter().filter_map(|a| dim_of(i, a)));
        }
        let n_batch = takes.len() as u8;
        // A mesh dim two free axes want goes to the larger extent (the
        // earlier axis on a tie); each free axis reads the first input
        // that carries it.
        let mut by_extent: SmallVec<[u8; 8]> = free.iter().collect();
        let extent_of = |a: u8| extent.get(usize::from(a)).copied().unwrap_or(0);
        by_extent.sort_by_key(|&a| core::cmp::Reverse(extent_of(a)));
        for a in by_extent {
            if let Some(i) = (0..n_in).find(|&i| carried(i).contains(a)) {
                takes.extend(dim_of(i, a));
            }
        }
        let n_free = takes.len() as u8 - n_batch;
        for a in contracted.iter() {
            takes.extend(
                (0..n_in)
                    .filter(|&i| carried(i).contains(a))
                    .filter_map(|i| dim_of(i, a)),
            );
        }
        RolePlan {
            batch,
            takes,
            n_batch,
            n_free,
        }
    }
}

impl Run<'_, '_, '_> {
    /// Fills the axis map from the inputs by the compiled [`RolePlan`];
    /// see the policy's documentation. Each mesh dim has one owner: an
    /// axis that wants a mesh dim another axis owns loses it.
    #[inline(never)]
    pub(crate) fn merge_by_role<T: Trace + ?Sized>(&mut self, trace: &mut T) {
        let plan = &self.prog.roles;
        if trace.enabled() {
            let rule = self.rule;
            for i in 0..usize::from(self.prog.n_inputs) {
                if self.slots[i].present && !rule.options.follows.contains(i) {
                    self.trace_unsharded(i, trace);
                }
            }
        }
        let mut owner = [FREE; MAX_MESH_RANK];
        let (batch, rest) = plan.takes.split_at(usize::from(plan.n_batch));
        let (free, contracted) = rest.split_at(usize::from(plan.n_free));

        // Batch: the input whose batch dims carry the most shards first
        // (tie: more batch dims, then the earlier input), the others
        // co-shard. `batch` holds each input's takes in one run.
        let key = |group: &[Take]| -> (usize, usize) {
            let shards = group.iter().map(|t| self.given(t).len()).sum();
            (shards, group.len())
        };
        let (first, rest) = input_group(batch);
        let (second, rest) = if rest.is_empty() {
            (rest, rest)
        } else {
            input_group(rest)
        };
        if rest.is_empty() {
            // One or two inputs with batch dims (the common case): no list.
            let (a, b) = if !second.is_empty() && key(second) > key(first) {
                (second, first)
            } else {
                (first, second)
            };
            for t in a.iter().chain(b) {
                self.take(&mut owner, t, trace);
            }
        } else {
            let mut groups: SmallVec<[BatchGroup<'_>; 4]> = SmallVec::new();
            let mut rest = batch;
            while !rest.is_empty() {
                let (group, tail) = input_group(rest);
                groups.push((key(group), group));
                rest = tail;
            }
            // Most shards first; the sort is stable, so input order on ties.
            insertion_sort_by(&mut groups, |x, y| y.0.cmp(&x.0));
            for (_, group) in &groups {
                for t in group.iter() {
                    self.take(&mut owner, t, trace);
                }
            }
        }
        for a in plan.batch.iter() {
            self.fit_owned(a, &mut owner, trace);
        }

        // Free: each keeps the mesh dims no batch axis owns, larger extent
        // first.
        for t in free {
            self.take(&mut owner, t, trace);
        }

        // Contracted: the union of the inputs' shardings (most shards
        // first), minus the mesh dims already owned, trimmed until
        // divisible.
        let mut rest = contracted;
        while let Some(first) = rest.first() {
            let n = rest.iter().take_while(|t| t.axis == first.axis).count();
            let (group, tail) = rest.split_at(n);
            if let [x, y] = group {
                // Two inputs hold the axis (the common case): no list.
                let (x, y) = if self.given(y).len() > self.given(x).len() {
                    (y, x)
                } else {
                    (x, y)
                };
                self.take(&mut owner, x, trace);
                self.take(&mut owner, y, trace);
            } else {
                let mut order: SmallVec<[(u8, &Take); 4]> = group
                    .iter()
                    .map(|t| (self.given(t).len() as u8, t))
                    .collect();
                // Stable: input order on ties.
                insertion_sort_by(&mut order, |x, y| y.0.cmp(&x.0));
                for (_, t) in order {
                    self.take(&mut owner, t, trace);
                }
            }
            self.fit_owned(first.axis, &mut owner, trace);
            rest = tail;
        }
    }

    /// The sharding `t`'s input gives its dim.
    #[inline(always)]
    fn given(&self, t: &Take) -> Sharding {
        self.specs[usize::from(t.input)].attr.dims_mapping[usize::from(t.dim)]
    }

    /// Gives `t`'s axis the mesh dims its input's dim is sharded over that
    /// no axis owns yet, in order; reports each merge and each loss.
    #[inline(always)]
    fn take<T: Trace + ?Sized>(
        &mut self,
        owner: &mut [u8; MAX_MESH_RANK],
        t: &Take,
        trace: &mut T,
    ) {
        let given = self.given(t);
        let a = t.axis;
        let before = self.map.sharding[usize::from(a)];
        let mut s = before;
        for m in given.iter() {
            match owner[usize::from(m)] {
                FREE => {
                    owner[usize::from(m)] = a;
                    s.push(m);
                }
                o if o == a => {}
                o => trace.conflict(m, self.axis_name(o), self.axis_name(a)),
            }
        }
        self.map.sharding[usize::from(a)] = s;
        // Reported when the axis gained mesh dims; what it could not take
        // was reported as a conflict above.
        if s != before && trace.enabled() {
            let i = usize::from(t.input);
            trace.merged(
                self.axis_name(a),
                self.tensor(i),
                usize::from(t.dim),
                given,
                s,
            );
        }
    }

    /// Fits axis `a`'s sharding until divisible, freeing the mesh dims it
    /// drops.
    #[inline(always)]
    fn fit_owned<T: Trace + ?Sized>(
        &mut self,
        a: u8,
        owner: &mut [u8; MAX_MESH_RANK],
        trace: &mut T,
    ) {
        let s = self.map.sharding[a as usize];
        if s.is_replicated() {
            return;
        }
        let fitted = self.fit_one(a, s, trace);
        if fitted == s {
            return;
        }
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

/// The first input's takes at the head of `takes`, and the rest.
#[inline(always)]
fn input_group(takes: &[Take]) -> (&[Take], &[Take]) {
    let n = takes
        .iter()
        .take_while(|t| t.input == takes[0].input)
        .count();
    takes.split_at(n)
}
