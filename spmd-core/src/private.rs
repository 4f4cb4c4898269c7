//! What `#[spmd_rule]` expansions name, under one hidden path, so generated code
//! never depends on the caller's imports or prelude.

pub use core::default::Default;
pub use core::option::Option;
pub use core::result::Result::{self, Err, Ok};

pub use smallvec::SmallVec;
pub use spmd_notation::{AxisId, AxisSet, Dim, Plan, Term};

pub use crate::{
    Attrs, Call, Conflicts, Divisibility, Einsum, EinsumRule, Mesh, MissingAxis, Op, Policy,
    ReduceType, RuleResult, Spec, SpmdError, SpmdRule,
};

/// Runs `f` on the rule over a notation built at run time, with the options the
/// attribute gave by label resolved against that notation.
pub fn runtime_rule<R>(
    name: &'static str,
    plan: Plan<'_>,
    policy: Policy,
    reduce: ReduceType,
    never_sharded: &str,
    reduce_axes: &[(char, ReduceType)],
    grads: (u64, u64),
    f: impl FnOnce(&EinsumRule<'_>) -> Result<R, SpmdError>,
) -> Result<R, SpmdError> {
    let missing = |c: char| SpmdError::Rejected {
        op: name,
        message: alloc::format!(
            "label `{c}` named by the rule's options is not in the notation {:?} built at run time",
            plan.source
        ),
    };
    let mut never = AxisSet::EMPTY;
    for c in never_sharded.chars() {
        never = never.with(plan.axis(c).ok_or_else(|| missing(c))?);
    }
    let mut overrides: SmallVec<[(AxisId, ReduceType); 4]> = SmallVec::new();
    for &(c, r) in reduce_axes {
        overrides.push((plan.axis(c).ok_or_else(|| missing(c))?, r));
    }
    let rule = EinsumRule::new(name, plan)
        .with_policy(policy)
        .with_reduce(reduce)
        .with_never_sharded(never)
        .with_reduce_overrides(&overrides)
        .with_no_grad(grads.0)
        .with_grad_ignores(grads.1);
    f(&rule)
}
