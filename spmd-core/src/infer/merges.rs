//! The merges (docs/semantics.md §4): first-wins per axis with conflicts
//! settled afterwards, by role (`Conflicts::RolePriority`), or aligned
//! (`Conflicts::Align`); and the divisibility policy that fits the result.

use smallvec::SmallVec;
use spmd_notation::{AxisSet, Term};

use super::cx::{Cx, UNKNOWN, axis_name};
use crate::dist_attr::{Partial, ReduceType, Sharding, Spec};
use crate::error::{SpmdError, TensorRef};
use crate::merge::{AxisClash, MeshDimClash};
use crate::mesh::{MAX_MESH_RANK, MeshSet};
use crate::optional::Presence;
use crate::policy::{Conflicts, Divisibility, UnshardedClaims};
use crate::trace::Trace;

impl<'r, 'a> Cx<'r, 'a> {
    pub(super) fn merge<T: Trace + ?Sized>(
        &mut self,
        t: TensorRef,
        term: Term,
        spec: &Spec<'_>,
        trace: &mut T,
    ) -> Result<(), SpmdError> {
        let rank = spec.shape.len();
        for dim in 0..rank {
            let given = spec.attr.dims_mapping[dim];
            if given.is_replicated() {
                continue;
            }
            let Some(a) = self.carrier(self.slot(term, rank, dim), Some(spec.shape[dim])) else {
                // Replicated in the end, but its claims count (docs/semantics.md §4
                // steps 2-3), unless the policy unshards such dims first.
                if self.rule.policy.unsharded_claims == UnshardedClaims::Count {
                    self.map.claim_unsharded(given);
                }
                trace.unsharded(t, dim, given);
                continue;
            };
            // A compound's major factor must divide its extent: the mesh
            // dims it could not keep are dropped before they claim, so they
            // stay free for the other axes (and, like a never-sharded dim's,
            // claim only under `UnshardedClaims::Count`).
            let given = if self.rule.plan.compound_major.contains(a) {
                let fitted = self.fit_one(a, given, trace);
                if fitted != given {
                    if self.rule.policy.unsharded_claims == UnshardedClaims::Count {
                        let mut dropped = Sharding::REPLICATED;
                        for m in given.iter().skip(fitted.len()) {
                            dropped.push(m);
                        }
                        self.map.claim_unsharded(dropped);
                    }
                    if fitted.is_replicated() {
                        continue;
                    }
                }
                fitted
            } else {
                given
            };
            match self.map.merge(a, given) {
                Ok(now) => {
                    if trace.enabled() {
                        trace.merged(self.axis_name(a), t, dim, given, now);
                    }
                }
                Err(AxisClash { existing }) => {
                    return Err(SpmdError::AxisConflict {
                        op: self.rule.name,
                        axis: self.axis_name(a),
                        tensor: t,
                        dim,
                        existing,
                        incoming: given,
                    });
                }
            }
        }
        Ok(())
    }

    pub(super) fn resolve<T: Trace + ?Sized>(&mut self, trace: &mut T) -> Result<(), SpmdError> {
        // The rule by reference: copying its plan was a memcpy per call.
        let (rule, n_labels) = (self.rule, self.n_labels);
        let name = move |a: u8| axis_name(&rule.plan, n_labels, a);
        self.map
            .resolve(
                self.mesh.rank(),
                self.rule.policy.conflicts,
                |m, kept, lost| trace.conflict(m, name(kept), name(lost)),
            )
            .map_err(
                |MeshDimClash {
                     mesh_dim,
                     first,
                     second,
                 }| SpmdError::MeshDimConflict {
                    op: self.rule.name,
                    mesh_dim,
                    first: name(first),
                    second: name(second),
                },
            )
    }

    /// Applies the divisibility policy: the axis map becomes the given side's;
    /// the derived side's is returned when it differs. A compound's major factor must always divide (else
    /// the reshape could not carry its sharding), whatever the policy.
    pub(super) fn fit<T: Trace + ?Sized>(&mut self, trace: &mut T) -> Option<[Sharding; 64]> {
        let policy = self.rule.policy.divisibility;
        // A compound's major factor must divide (else the reshape could not
        // carry it), and so must a contracted axis averaged over: devices
        // holding blocks of different sizes cannot average their averages.
        let mut always = self.rule.plan.compound_major;
        if self.rule.reduce == ReduceType::Avg {
            always = always.union(self.rule.plan.contracted());
        }
        for &(a, r) in self.rule.reduce_overrides {
            if r == ReduceType::Avg {
                always = always.with(a);
            }
        }
        // Role priority settles divisibility by role in every direction, as
        // its forward merge does: batch axes must divide, free axes need not.
        if self.rule.policy.conflicts == Conflicts::RolePriority {
            always = always.union(self.batch_axes());
        }
        // A contracted axis reduced by a max or a min must leave no device
        // an empty block: its kernel has no value to give for one (Paddle's
        // errors), so such an axis keeps only the mesh dims it outnumbers.
        let contracted = self.rule.plan.contracted();
        let nonempty = AxisSet(
            contracted
                .iter()
                .filter(|&a| matches!(self.rule.reduce_of(a), ReduceType::Max | ReduceType::Min))
                .fold(0u64, |m, a| m | 1 << a),
        );
        if policy == Divisibility::Uneven && always.is_empty() && nonempty.is_empty() {
            return None;
        }
        // The given side is edited in place; a derived table exists only
        // when the derived side differs (DropDerived dropped something).
        let mut derived: Option<[Sharding; 64]> = None;
        for a in 0..self.n_axes {
            let mut s = self.map.sharding[a];
            if nonempty.contains(a as u8) {
                let trimmed = self.trim_empty(a as u8, s, trace);
                if trimmed != s {
                    self.map.sharding[a] = trimmed;
                    if let Some(d) = derived.as_mut() {
                        d[a] = trimmed;
                    }
                    s = trimmed;
                }
            }
            let always = always.contains(a as u8);
            if s.is_replicated() || (!always && policy == Divisibility::Uneven) {
                continue;
            }
            let fitted = self.fit_one(a as u8, s, trace);
            if fitted == s {
                continue;
            }
            if always || policy == Divisibility::Drop {
                self.map.sharding[a] = fitted;
                if let Some(d) = derived.as_mut() {
                    d[a] = fitted;
                }
            } else {
                derived.get_or_insert(self.map.sharding)[a] = fitted;
            }
        }
        derived
    }

    /// Drops trailing mesh dims until their product divides the axis extent.
    pub(super) fn fit_one<T: Trace + ?Sized>(
        &self,
        a: u8,
        mut s: Sharding,
        trace: &mut T,
    ) -> Sharding {
        let extent = self.extent[a as usize];
        while let Some(last) = s.last() {
            // Mesh::new guarantees the whole mesh's product fits in a usize.
            let product: usize = s.iter().map(|m| self.mesh.dim(m)).product();
            if extent != UNKNOWN && extent.is_multiple_of(product) {
                break;
            }
            trace.not_divisible(self.axis_name(a), extent, last);
            s = s.without_last();
        }
        s
    }

    /// `s` without its trailing mesh dims until every device's block of
    /// axis `a` holds at least one element (extent ≥ shards).
    pub(super) fn trim_empty<T: Trace + ?Sized>(
        &self,
        a: u8,
        mut s: Sharding,
        trace: &mut T,
    ) -> Sharding {
        let extent = self.extent[a as usize];
        while let Some(last) = s.last() {
            let product: usize = s.iter().map(|m| self.mesh.dim(m)).product();
            if extent != UNKNOWN && extent >= product {
                break;
            }
            trace.not_divisible(self.axis_name(a), extent, last);
            s = s.without_last();
        }
        s
    }

    /// Reports the dims of an input that never carry a sharding but were given one.
    pub(super) fn trace_unsharded<T: Trace + ?Sized>(
        &self,
        t: TensorRef,
        term: Term,
        spec: &Spec<'_>,
        trace: &mut T,
    ) {
        let rank = spec.shape.len();
        for dim in 0..rank {
            let given = spec.attr.dims_mapping[dim];
            if !given.is_replicated()
                && self
                    .carrier(self.slot(term, rank, dim), Some(spec.shape[dim]))
                    .is_none()
            {
                trace.unsharded(t, dim, given);
            }
        }
    }

    /// [`Conflicts::RolePriority`]: fills the axis map role by role (batch,
    /// free, contracted); see the policy's documentation. Each mesh dim has
    /// one owner: an axis that wants a mesh dim another axis owns loses it.
    pub(super) fn merge_by_role<T: Trace + ?Sized>(
        &mut self,
        inputs: &[Spec<'_>],
        absent: impl Presence,
        trace: &mut T,
    ) {
        // By reference: a copy of the plan is a memcpy per call.
        let rule = self.rule;
        let plan = &rule.plan;
        let n_in = inputs.len().min(8);
        let mut carried = [AxisSet::EMPTY; 8];
        // `absent` here also names the inputs that follow the others: they
        // carry nothing into the merge.
        for (i, spec) in inputs.iter().enumerate().take(n_in) {
            if absent.input(i) {
                continue;
            }
            carried[i] = self.carried_axes(plan.input(i), spec.shape);
            if trace.enabled() {
                self.trace_unsharded(TensorRef::input(i), plan.input(i), spec, trace);
            }
        }
        // An absent input carries nothing and does not make an axis less
        // than everywhere.
        let everywhere = carried[..n_in]
            .iter()
            .enumerate()
            .filter(|(i, _)| !absent.input(*i))
            .fold(AxisSet(u64::MAX), |acc, (_, &c)| acc.intersect(c));
        let mut out_axes = AxisSet::EMPTY;
        for o in 0..plan.n_outputs() {
            out_axes = out_axes.union(self.term_axes(plan.output(o)));
        }
        let axes = carried[..n_in]
            .iter()
            .fold(AxisSet::EMPTY, |m, &c| m.union(c))
            .minus(self.never);
        let batch = axes
            .intersect(out_axes)
            .intersect(everywhere.union(self.ellipsis_axes()));
        let free = axes.intersect(out_axes).minus(batch);
        let contracted = axes.minus(out_axes);
        let mut owner = [u8::MAX; MAX_MESH_RANK];

        // The axis each dim of each input carries, resolved once: the passes
        // below ask "which dim of input i carries axis a" many times (the
        // batch order's sort key asks it per comparison).
        let mut carriers = [[u8::MAX; 8]; 8];
        for (i, spec) in inputs.iter().enumerate().take(n_in) {
            let rank = spec.shape.len();
            if absent.input(i) || rank > 8 {
                continue;
            }
            for (dim, c) in carriers[i].iter_mut().enumerate().take(rank) {
                let slot = self.slot(plan.input(i), rank, dim);
                *c = self.carrier(slot, Some(spec.shape[dim])).unwrap_or(u8::MAX);
            }
        }
        let given_on = |cx: &Self, i: usize, a: u8| -> Option<(usize, Sharding)> {
            let spec = &inputs[i];
            if spec.shape.len() > 8 {
                return cx.given_on(plan.input(i), spec, a);
            }
            let dim = carriers[i][..spec.shape.len()]
                .iter()
                .position(|&c| c == a)?;
            Some((dim, spec.attr.dims_mapping[dim]))
        };

        // Gives axis `a` the mesh dims input `i` shards it with that no axis
        // owns yet, in order; reports each merge and each loss.
        let take =
            |cx: &mut Self, owner: &mut [u8; MAX_MESH_RANK], a: u8, i: usize, trace: &mut T| {
                let Some((dim, given)) = given_on(cx, i, a) else {
                    return;
                };
                let before = cx.map.sharding[a as usize];
                let mut s = before;
                for m in given.iter() {
                    match owner[m as usize] {
                        u8::MAX => {
                            owner[m as usize] = a;
                            s.push(m);
                        }
                        o if o == a => {}
                        o => trace.conflict(m, cx.axis_name(o), cx.axis_name(a)),
                    }
                }
                cx.map.sharding[a as usize] = s;
                // Reported when the axis gained mesh dims; what it could not
                // take was reported as a conflict above.
                if s != before && trace.enabled() {
                    trace.merged(cx.axis_name(a), TensorRef::input(i), dim, given, s);
                }
            };

        // Batch: the input whose batch dims carry the most shards first (tie:
        // more batch dims, then the earlier input), the others co-shard.
        let shards = |i: usize| -> (usize, u32) {
            let n = batch
                .iter()
                .filter_map(|a| given_on(self, i, a))
                .map(|(_, s)| s.len())
                .sum();
            (n, carried[i].intersect(batch).len())
        };
        let mut order: SmallVec<[usize; 8]> = (0..n_in).filter(|&i| !absent.input(i)).collect();
        order.sort_by_key(|&i| core::cmp::Reverse(shards(i)));
        for &i in &order {
            for a in batch.iter() {
                take(self, &mut owner, a, i, trace);
            }
        }
        for a in batch.iter() {
            let s = self.map.sharding[a as usize];
            let fitted = self.fit_one(a, s, trace);
            for m in s.mesh_set().minus(fitted.mesh_set()).iter() {
                owner[m as usize] = u8::MAX;
            }
            self.map.sharding[a as usize] = fitted;
        }

        // Free: each keeps the mesh dims no batch axis owns; a mesh dim two
        // free axes want goes to the larger extent (the earlier axis on a tie).
        let mut by_extent: SmallVec<[u8; 8]> = free.iter().collect();
        by_extent.sort_by_key(|&a| core::cmp::Reverse(self.extent[a as usize]));
        for &a in &by_extent {
            if let Some(i) = (0..n_in).find(|&i| carried[i].contains(a)) {
                take(self, &mut owner, a, i, trace);
            }
        }

        // Contracted: the union of the inputs' shardings (most shards first),
        // minus the mesh dims already owned, trimmed until divisible.
        for a in contracted.iter() {
            let mut order: SmallVec<[(usize, usize); 8]> = (0..n_in)
                .filter(|&i| carried[i].contains(a))
                .map(|i| (i, given_on(self, i, a).map_or(0, |(_, s)| s.len())))
                .collect();
            order.sort_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(&y.0)));
            for &(i, _) in &order {
                take(self, &mut owner, a, i, trace);
            }
            let s = self.map.sharding[a as usize];
            let fitted = self.fit_one(a, s, trace);
            for m in s.mesh_set().minus(fitted.mesh_set()).iter() {
                owner[m as usize] = u8::MAX;
            }
            self.map.sharding[a as usize] = fitted;
        }
    }

    /// [`Conflicts::Align`] (see the policy's documentation): fills the axis
    /// map from the operands, one mesh dim at a time, and returns the partial
    /// status they all share.
    pub(super) fn merge_aligned(&mut self, ops: &[(Term, Spec<'_>)]) -> Partial {
        // Where operand `i` puts mesh dim `m`: on an axis, on a tensor dim
        // that carries none (compared by position), partial, or nowhere.
        #[derive(Clone, Copy, PartialEq, Eq)]
        enum Place {
            Rep,
            Axis(u8),
            Dim(usize),
            Partial(ReduceType),
        }
        let place = |cx: &Self, (term, spec): &(Term, Spec<'_>), m: u8| -> Place {
            let rank = spec.shape.len();
            for dim in 0..rank {
                if spec.attr.dims_mapping[dim].mesh_set().contains(m) {
                    let slot = cx.slot(*term, rank, dim);
                    return match cx.carrier(slot, Some(spec.shape[dim])) {
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
        let live: SmallVec<[usize; 8]> = (0..ops.len())
            .filter(|&i| ops[i].1.shape.first().is_some_and(|&d| d != 0))
            .collect();
        let mut partial = Partial::NONE;
        let Some(&first) = live.first() else {
            return partial;
        };
        let mut aligned = AxisSet(u64::MAX);
        for &i in &live {
            aligned = aligned.intersect(self.carried_axes(ops[i].0, ops[i].1.shape));
        }
        aligned = aligned.minus(self.never);
        // The aligned axes in the first live operand's dim order (ties of
        // the cost rule go to the earlier dim).
        let (term0, spec0) = &ops[first];
        let rank0 = spec0.shape.len();
        let order: SmallVec<[(u8, usize); 8]> = (0..rank0)
            .filter_map(|dim| {
                let a = self.carrier(self.slot(*term0, rank0, dim), Some(spec0.shape[dim]))?;
                aligned.contains(a).then_some((a, dim))
            })
            .collect();
        let n_mesh = self.mesh.rank() as u8;
        let mismatch = |cx: &Self, m: u8| {
            live.iter()
                .any(|&i| place(cx, &ops[i], m) != place(cx, &ops[first], m))
        };
        let mut taken = AxisSet::EMPTY;
        let mut agreed = MeshSet::EMPTY;
        for m in 0..n_mesh {
            if mismatch(self, m) {
                continue;
            }
            match place(self, &ops[first], m) {
                Place::Axis(a) if aligned.contains(a) => {
                    taken = taken.with(a);
                    agreed = agreed.with(m);
                }
                Place::Partial(r @ (ReduceType::Sum | ReduceType::Avg)) => partial.set(m, r),
                _ => {}
            }
        }
        // A co-sharded dim's mesh dims are ordered (major first): each axis
        // takes the ones every operand agrees on in the first operand's order.
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
                for &i in &live {
                    let (term, spec) = &ops[i];
                    let rank = spec.shape.len();
                    let Some(dim) = (0..rank).find(|&d| {
                        self.carrier(self.slot(*term, rank, d), Some(spec.shape[d])) == Some(a)
                    }) else {
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
