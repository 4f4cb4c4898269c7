//! What `#[spmd_rule]` expansions name, under one hidden path, so generated code
//! never depends on the caller's imports or prelude.

pub use core::default::Default;
pub use core::option::Option;
pub use core::result::Result::{self, Err, Ok};

#[cfg(feature = "std")]
pub use crate::cache::{NotationCache, cached_notation};
pub use alloc::rc::Rc;
pub use smallvec::SmallVec;
pub use spmd_notation::{
    AxisId, AxisSet, Dim, Fate, Item, Plan, Pos, Repeat, Select, Side, Template, Term,
};

pub use crate::engine::cache::{KeySite, RuleKey};
pub use crate::template::{IntoPos, Positions};

pub use crate::{
    Absent, Attrs, BackwardPartial, Call, Compounds, Conflicts, Divisibility, Einsum, EinsumRule,
    FromAttr, GradSignature, GradTensor, Mesh, MissingAxis, NoTrace, Op, PartialInputs, Policy,
    Prepared, ReduceType, RuleOptions, RuleResult, Spec, SpmdError, SpmdRule, TensorSet, Trace,
    UnshardedClaims, fill_shapes, fill_specs,
};

/// What `#[spmd_rule(build = ...)]` knows at compile time about a rule whose
/// notation is built at run time: its options, and the labels that are
/// resolved once the notation exists.
pub struct RuntimeOptions<'o> {
    pub name: &'static str,
    /// Borrowed: the rule's `const`, not copied per call.
    pub options: &'o RuleOptions<'static>,
    /// A reduce type read from the attributes for this call
    /// (`partial(reduce = Self::method)`), over `options.reduce`.
    pub reduce: Option<ReduceType>,
    pub never_sharded: &'o str,
    pub reduce_axes: &'o [(char, ReduceType)],
}

/// Runs `f` on the rule over a notation built at run time, with the options
/// the attribute gave by label resolved against that notation.
/// `keyed`: whether the notation is kept between calls (its key then names
/// what it compiles; a notation built for one call has none).
pub fn runtime_rule<R>(
    o: &RuntimeOptions<'_>,
    einsum: &Einsum,
    keyed: bool,
    f: impl FnOnce(&EinsumRule<'_>, RuleKey) -> Result<R, SpmdError>,
) -> Result<R, SpmdError> {
    let key = if keyed { einsum.key() } else { RuleKey::NONE };
    rule_over(o, einsum.notation().plan(), einsum.reduce(), |rule| {
        f(rule, key)
    })
}

/// Binds a template for this call (docs/semantics.md §3) and runs `f` on
/// `base` (every option of the rule, made at compile time) over the bound
/// plan: no text is built or parsed, nothing allocated, and a call like the
/// last one reuses its binding (`slot`, one per template). `reduce`: a
/// reduce type read from the attributes; `reduce_axes`: per-label overrides.
#[allow(clippy::too_many_arguments)]
pub fn bound_rule<R>(
    base: &EinsumRule<'static>,
    reduce: Option<ReduceType>,
    reduce_axes: &[(char, ReduceType)],
    template: &Template<'static>,
    slot: &'static impl BindingSlot,
    selections: &[Pos<'_>],
    call: &Call<'_>,
    f: impl FnOnce(&EinsumRule<'_>, RuleKey) -> Result<R, SpmdError>,
) -> Result<R, SpmdError> {
    let rank = |side: Side, i: usize| match side {
        Side::Input => call.input_rank(i),
        Side::Output => call.output_shape(i).map(<[usize]>::len),
    };
    let given = [call.n_inputs(), call.n_outputs()];
    slot.with_binding(|binding| {
        let (bound, key) = binding
            .bind(template, selections, given, rank)
            .map_err(|e| crate::template::bind_error(base.name, template, call, e))?;
        let plan = bound.plan();
        // A label may be missing from a binding (the selected dim of a 0-d
        // tensor has no axis): it then overrides nothing.
        let mut overrides: SmallVec<[(AxisId, ReduceType); 4]> = SmallVec::new();
        for &(c, r) in reduce_axes {
            if let Some(a) = plan.axis(c) {
                overrides.push((a, r));
            }
        }
        let rule = EinsumRule {
            name: base.name,
            plan,
            // The never-sharded labels were resolved while binding.
            never_sharded: bound.never(),
            reduce_overrides: &overrides,
            options: RuleOptions {
                reduce: reduce.unwrap_or(base.options.reduce),
                ..base.options
            },
        };
        f(&rule, key)
    })
}

/// The rule over a notation built at run time, with the options resolved by label.
fn rule_over<R>(
    o: &RuntimeOptions<'_>,
    plan: Plan<'_>,
    reduce: Option<ReduceType>,
    f: impl FnOnce(&EinsumRule<'_>) -> Result<R, SpmdError>,
) -> Result<R, SpmdError> {
    let missing = |c: char| SpmdError::Rejected {
        op: o.name,
        message: alloc::format!(
            "label `{c}` named by the rule's options is not in the notation {:?} built at run time",
            plan.source
        ),
    };
    let mut never = AxisSet::EMPTY;
    for c in o.never_sharded.chars() {
        never = never.with(plan.axis(c).ok_or_else(|| missing(c))?);
    }
    let mut overrides: SmallVec<[(AxisId, ReduceType); 4]> = SmallVec::new();
    for &(c, r) in o.reduce_axes {
        overrides.push((plan.axis(c).ok_or_else(|| missing(c))?, r));
    }
    // Field by field: a chain of `with_*` copies the whole rule at each
    // step, which the optimiser leaves as `memcpy` calls.
    let rule = EinsumRule {
        name: o.name,
        plan,
        reduce_overrides: &overrides,
        never_sharded: never,
        options: RuleOptions {
            reduce: reduce.or(o.reduce).unwrap_or(o.options.reduce),
            ..*o.options
        },
    };
    f(&rule)
}

/// Submits a rule type to the collected registry (feature `inventory`);
/// without the feature it expands to nothing. The choice is made here, when
/// `spmd-core` is compiled, so the proc macro needs no feature of its own.
#[cfg(feature = "inventory")]
#[doc(hidden)]
#[macro_export]
macro_rules! __spmd_submit_rule {
    ($ty:ty) => {
        $crate::__private::inventory::submit! {
            $crate::__private::Collected(|| $crate::RuleInfo::of::<$ty>())
        }
    };
}

#[cfg(not(feature = "inventory"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __spmd_submit_rule {
    ($ty:ty) => {};
}

pub use crate::__spmd_binding_slot as binding_slot;
pub use crate::__spmd_submit_rule as submit_rule;
pub use crate::binding::{Binding, BindingSlot, NoSlot};
#[cfg(feature = "inventory")]
pub use crate::registry::Collected;
#[cfg(feature = "inventory")]
pub use inventory;
