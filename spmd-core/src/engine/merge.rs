//! The merge of the given side (docs/semantics.md §4): each given dim's
//! sharding claimed by the axis it carries, first-wins, conflicts settled
//! by the rule's policy; and the divisibility policy that fits the result.

use spmd_notation::AxisSet;

use super::program::{NONE, Program};
use super::state::{Run, Table, UNKNOWN};
use crate::dist_attr::{ReduceType, Sharding};
use crate::error::SpmdError;
use crate::merge::{AxisClash, MeshDimClash};
use crate::policy::{Conflicts, Divisibility, UnshardedClaims};
use crate::rule::EinsumRule;
use crate::trace::Trace;

/// The axes whose sharding must divide their extent whatever the
/// divisibility policy, as far as the notation and the conflict policy
/// decide them (what a rule's key names): a compound's major factor (else
/// the reshape could not carry its sharding) and, under role priority, the
/// batch axes (the dims `...` stands for, and labels every input and some
/// output have), as its forward merge settles them. Settled when the call
/// compiles; the reduce type's share is added per call (see
/// [`Run::fit`]), since an attribute may set it.
pub(crate) fn must_divide(rule: &EinsumRule<'_>, prog: &Program) -> AxisSet {
    let plan = &rule.plan;
    let mut always = plan.compound_major;
    if rule.options.policy.conflicts == Conflicts::RolePriority {
        let in_every = (0..plan.n_inputs())
            .map(|i| plan.axes_of(plan.input(i)))
            .fold(AxisSet(u64::MAX), AxisSet::intersect);
        always = always.union(in_every.intersect(plan.output_axes).union(prog.ellipsis));
    }
    always
}

impl Run<'_, '_, '_> {
    /// Merges slot `s`'s layout into the axis map; with `check`, its
    /// layout is checked on the way (the checks of
    /// [`validate`](super::check::validate), in the same pass).
    #[inline(always)]
    pub(crate) fn merge<T: Trace + ?Sized>(
        &mut self,
        s: usize,
        check: bool,
        trace: &mut T,
    ) -> Result<(), SpmdError> {
        let spec = self.specs[s];
        let dims = self.dims_of(s);
        let mapping = spec.attr.dims_mapping.as_slice();
        if check && mapping.len() != dims.len() {
            return self.check_layout(s);
        }
        let on_mesh = self.mesh.on_mesh_bits();
        let mut used = 0u8;
        let mut single = true;
        let n = mapping.len().min(dims.len());
        let (mapping, dims) = (&mapping[..n], &dims[..n]);
        for dim in 0..n {
            let given = mapping[dim];
            if given.is_replicated() {
                continue;
            }
            let d = &dims[dim];
            if check && single {
                match given.single_bits() {
                    Some(bits) if bits != 0 && bits & !used & on_mesh == bits => used |= bits,
                    // A co-sharding, or a fault: the full check says which.
                    _ => {
                        self.check_layout(s)?;
                        single = false;
                    }
                }
            }
            // The axis the dim carries: none for `1`, a size-1 dim or a
            // never-sharded axis.
            let a = d.live;
            if a == NONE {
                self.merge_unsharded(s, dim, given, trace);
                continue;
            }
            if self.rule.plan.compound_major.contains(a) {
                self.merge_major(s, dim, a, given, trace)?;
                continue;
            }
            self.claim(s, dim, a, given, trace)?;
        }
        if check && single {
            let partial = spec.attr.partial.dims().0;
            if partial & !used & on_mesh != partial {
                return self.check_layout(s);
            }
        }
        Ok(())
    }

    /// Checks slot `s`'s layout in full: the error naming its fault.
    #[cold]
    pub(crate) fn check_layout(&self, s: usize) -> Result<(), SpmdError> {
        super::check::validate(self.rule.name, self.tensor(s), &self.specs[s], self.mesh)
    }

    /// A sharded dim that carries no axis: replicated in the end, but its
    /// claims count (docs/semantics.md §4 steps 2-3), unless the policy
    /// unshards such dims first.
    #[cold]
    fn merge_unsharded<T: Trace + ?Sized>(
        &mut self,
        s: usize,
        dim: usize,
        given: Sharding,
        trace: &mut T,
    ) {
        if self.rule.options.policy.unsharded_claims == UnshardedClaims::Count {
            self.map.claim_unsharded(given);
        }
        trace.unsharded(self.tensor(s), dim, given);
    }

    /// A compound's major factor must divide its extent: the mesh dims it
    /// could not keep are dropped before they claim, so they stay free for
    /// the other axes (and, like a never-sharded dim's, claim only under
    /// `UnshardedClaims::Count`).
    #[cold]
    fn merge_major<T: Trace + ?Sized>(
        &mut self,
        s: usize,
        dim: usize,
        a: u8,
        given: Sharding,
        trace: &mut T,
    ) -> Result<(), SpmdError> {
        let fitted = self.fit_one(a, given, trace);
        if fitted != given {
            if self.rule.options.policy.unsharded_claims == UnshardedClaims::Count {
                let mut dropped = Sharding::REPLICATED;
                for m in given.iter().skip(fitted.len()) {
                    dropped.push(m);
                }
                self.map.claim_unsharded(dropped);
            }
            if fitted.is_replicated() {
                return Ok(());
            }
        }
        self.claim(s, dim, a, fitted, trace)
    }

    /// Axis `a` claims `given` from dim `dim` of slot `s`.
    #[inline(always)]
    fn claim<T: Trace + ?Sized>(
        &mut self,
        s: usize,
        dim: usize,
        a: u8,
        given: Sharding,
        trace: &mut T,
    ) -> Result<(), SpmdError> {
        match self.map.merge(a, given) {
            Ok(now) => {
                if trace.enabled() {
                    trace.merged(self.axis_name(a), self.tensor(s), dim, given, now);
                }
                Ok(())
            }
            Err(AxisClash { existing }) if self.settle_clashes => {
                if trace.enabled() {
                    trace.merged(self.axis_name(a), self.tensor(s), dim, given, existing);
                }
                Ok(())
            }
            Err(AxisClash { existing }) => Err(SpmdError::AxisConflict {
                op: self.rule.name,
                axis: self.axis_name(a),
                tensor: self.tensor(s),
                dim,
                existing,
                incoming: given,
            }),
        }
    }

    /// Settles every mesh dim several axes claimed, by the rule's policy.
    #[inline(always)]
    pub(crate) fn resolve<T: Trace + ?Sized>(&mut self, trace: &mut T) -> Result<(), SpmdError> {
        if !self.map.contested() {
            return Ok(());
        }
        self.resolve_contested(trace)
    }

    #[cold]
    fn resolve_contested<T: Trace + ?Sized>(&mut self, trace: &mut T) -> Result<(), SpmdError> {
        let (rule, prog) = (self.rule, self.prog);
        let name = move |a: u8| super::state::axis_name(rule, prog, a);
        // Operands that nothing made agree (a grad's) settle first-wins even
        // under a strict policy: a sound answer exists, their reshards.
        let policy = match rule.options.policy.conflicts {
            Conflicts::Strict if self.settle_clashes => Conflicts::FirstWins,
            p => p,
        };
        self.map
            .resolve(self.mesh.rank(), policy, |m, kept, lost| {
                trace.conflict(m, name(kept), name(lost))
            })
            .map_err(
                |MeshDimClash {
                     mesh_dim,
                     first,
                     second,
                 }| SpmdError::MeshDimConflict {
                    op: rule.name,
                    mesh_dim,
                    first: name(first),
                    second: name(second),
                },
            )
    }

    /// Applies the divisibility policy: the axis map becomes the given
    /// side's; the derived side's is written to `derived` when it differs
    /// (`derived` is `None` on entry). A compound's major factor must
    /// always divide (else the reshape could not carry its sharding),
    /// whatever the policy.
    #[inline(always)]
    pub(crate) fn fit<T: Trace + ?Sized>(&mut self, derived: &mut Option<Table>, trace: &mut T) {
        // The common case: uneven shards allowed, no axis that must divide,
        // and contractions summed (no axis that must divide or must leave
        // every block nonempty for its reduce type).
        let rule = self.rule;
        if rule.options.policy.divisibility == Divisibility::Uneven
            && self.prog.must_divide.is_empty()
            && rule.options.reduce == ReduceType::Sum
            && rule.reduce_overrides.is_empty()
        {
            return;
        }
        self.fit_all(derived, trace)
    }

    fn fit_all<T: Trace + ?Sized>(&mut self, derived: &mut Option<Table>, trace: &mut T) {
        let rule = self.rule;
        let policy = rule.options.policy.divisibility;
        let mut always = self.prog.must_divide;
        // A contracted axis averaged over must divide: devices holding
        // blocks of different sizes cannot average their averages.
        if rule.options.reduce == ReduceType::Avg {
            always = always.union(rule.plan.contracted());
        }
        for &(a, r) in rule.reduce_overrides {
            if r == ReduceType::Avg {
                always = always.with(a);
            }
        }
        // A contracted axis reduced by a max or a min must leave no device
        // an empty block: its kernel has no value to give for one, so such
        // an axis keeps only the mesh dims it outnumbers.
        let mut nonempty = AxisSet::EMPTY;
        if rule.options.reduce != ReduceType::Sum || !rule.reduce_overrides.is_empty() {
            for a in rule.plan.contracted().iter() {
                if matches!(rule.reduce_of(a), ReduceType::Max | ReduceType::Min) {
                    nonempty = nonempty.with(a);
                }
            }
        }
        // Uneven shards allowed: only the axes that must divide or stay
        // nonempty can change.
        let n_axes = u32::from(self.prog.n_axes);
        let axes = match policy {
            Divisibility::Uneven => always.union(nonempty),
            _ => AxisSet(u64::MAX.checked_shr(64 - n_axes).unwrap_or(0)),
        };
        for a in axes.iter() {
            let a = usize::from(a);
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
    }

    /// Drops trailing mesh dims until their product divides the axis extent.
    #[inline(always)]
    pub(crate) fn fit_one<T: Trace + ?Sized>(&self, a: u8, s: Sharding, trace: &mut T) -> Sharding {
        if s.is_replicated() {
            return s;
        }
        let extent = self.extent(a);
        // The common case: one mesh dim, dividing the extent.
        if let Some(bits) = s.single_bits()
            && let Some(&n) = self.mesh.shape().get(bits.trailing_zeros() as usize)
            && extent != UNKNOWN
            && extent.is_multiple_of(n)
        {
            return s;
        }
        self.drop_until_divisible(a, s, extent, trace)
    }

    #[inline(never)]
    fn drop_until_divisible<T: Trace + ?Sized>(
        &self,
        a: u8,
        mut s: Sharding,
        extent: usize,
        trace: &mut T,
    ) -> Sharding {
        // Mesh::new guarantees the whole mesh's product fits in a usize.
        let mut product: usize = s.iter().map(|m| self.mesh.dim(m)).product();
        while let Some(last) = s.last() {
            if extent != UNKNOWN && extent.is_multiple_of(product) {
                break;
            }
            trace.not_divisible(self.axis_name(a), extent, last);
            product /= self.mesh.dim(last);
            s = s.without_last();
        }
        s
    }

    /// `s` without its trailing mesh dims until every device's block of
    /// axis `a` holds at least one element (extent ≥ shards).
    fn trim_empty<T: Trace + ?Sized>(&self, a: u8, mut s: Sharding, trace: &mut T) -> Sharding {
        let extent = self.extent(a);
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

    /// Reports the dims of slot `s` that never carry a sharding but were
    /// given one.
    pub(crate) fn trace_unsharded<T: Trace + ?Sized>(&self, s: usize, trace: &mut T) {
        let spec = self.specs[s];
        for (dim, &given) in spec.attr.dims_mapping.as_slice().iter().enumerate() {
            if !given.is_replicated() && self.carrier(s, dim).is_none() {
                trace.unsharded(self.tensor(s), dim, given);
            }
        }
    }
}
