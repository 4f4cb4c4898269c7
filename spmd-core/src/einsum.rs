//! Paddle's `einsum` op: a rule whose notation is the `equation` attribute,
//! parsed once when the op is built.

use spmd_notation::{AxisSet, Notation};

use crate::dist_attr::ReduceType;
use crate::engine::cache::RuleKey;
use crate::error::SpmdError;
use crate::policy::Policy;
use crate::rule::{EinsumRule, RuleOptions, RuleResult, SpmdRule};
use crate::trace::Trace;

/// A rule built at run time from a notation string.
#[derive(Clone, Debug)]
pub struct Einsum {
    notation: Notation,
    policy: Policy,
    /// The reduce type of contracted axes when the notation's builder
    /// chose one from the attributes (`reduce_base`'s `reduce_type`);
    /// otherwise the rule's declared one.
    reduce: Option<ReduceType>,
    /// Names its notation in the engine's cache (a clone shares it).
    key: RuleKey,
}

impl Einsum {
    /// Parses `equation` (all of its errors are reported at once). The rule uses
    /// Paddle einsum's classic policy.
    pub fn new(equation: &str) -> Result<Einsum, SpmdError> {
        Ok(Einsum {
            notation: spmd_notation::parse(equation)?,
            policy: Policy::CLASSIC,
            reduce: None,
            key: RuleKey::unique(),
        })
    }

    /// From the notation's terms (see [`spmd_notation::parse_terms`]): the
    /// one way to write a single scalar operand, which the text form reads
    /// as an empty operand list.
    ///
    /// ```
    /// use spmd_core::{DistAttr, Einsum, Mesh, Spec, SpmdRuleExt};
    ///
    /// // unsqueeze of a 0-d x to [1, 1], in reverse.
    /// let e = Einsum::from_terms(&[""], &["11"])?;
    /// let out = DistAttr::from_paddle(&[-1, -1]).unwrap();
    /// let r = e.backward(&Mesh::new(&[2])?, &[&[]], &[Spec::new(&[1, 1], &out)])?;
    /// assert_eq!(r.inputs[0].to_string(), "[]");
    /// assert!(Einsum::new("->11").is_err());
    /// # Ok::<(), spmd_core::SpmdError>(())
    /// ```
    pub fn from_terms(inputs: &[&str], outputs: &[&str]) -> Result<Einsum, SpmdError> {
        Ok(Einsum {
            notation: spmd_notation::parse_terms(inputs, outputs)?,
            policy: Policy::CLASSIC,
            reduce: None,
            key: RuleKey::unique(),
        })
    }

    /// From a plan built dim by dim ([`PlanBuilder`](spmd_notation::PlanBuilder)),
    /// for rules whose notation depends on shape values: no text is written
    /// or parsed.
    ///
    /// ```
    /// use spmd_core::notation::PlanBuilder;
    /// use spmd_core::{DistAttr, Einsum, Mesh, Spec, SpmdRuleExt};
    ///
    /// // reshape [4, 6] -> [24]: the major factor keeps its sharding.
    /// let mut b = PlanBuilder::new("reshape");
    /// b.label(b'a').label(b'b').end_input();
    /// b.compound(b"ab").end_output();
    /// let e = Einsum::from_plan("reshape", b)?;
    /// let x = DistAttr::from_paddle(&[0, -1]).unwrap();
    /// let r = e.forward(&Mesh::new(&[2])?, &[Spec::new(&[4, 6], &x)])?;
    /// assert_eq!(r.outputs[0].to_string(), "[0]");
    /// # Ok::<(), spmd_core::SpmdError>(())
    /// ```
    pub fn from_plan(
        op: &'static str,
        built: spmd_notation::PlanBuilder<'_>,
    ) -> Result<Einsum, SpmdError> {
        let buf = built
            .finish()
            .map_err(|e| crate::template::built_plan_error(op, e))?;
        Ok(Einsum {
            notation: Notation::from_plan(buf.plan()),
            policy: Policy::CLASSIC,
            reduce: None,
            key: RuleKey::unique(),
        })
    }

    pub fn with_policy(mut self, policy: Policy) -> Einsum {
        self.policy = policy;
        // A call compiles differently under another policy: the key names
        // what it compiles.
        self.key = RuleKey::unique();
        self
    }

    /// Contracted axes reduce with `reduce` (the default is `Sum`). A
    /// `#[spmd_rule(build = ..)]` builder sets it when an attribute names the
    /// reduce type, so that every direction sees it (no hook patches the
    /// answer).
    ///
    /// ```
    /// use spmd_core::{DistAttr, Einsum, Mesh, ReduceType, Spec, SpmdRuleExt};
    ///
    /// let e = Einsum::new("ab->a")?.with_reduce(ReduceType::Max);
    /// let x = DistAttr::from_paddle(&[-1, 0]).unwrap();
    /// let r = e.forward(&Mesh::new(&[2])?, &[Spec::new(&[4, 6], &x)])?;
    /// assert_eq!(r.outputs[0].to_string(), "[-1] partial{0: MAX}");
    /// # Ok::<(), spmd_core::SpmdError>(())
    /// ```
    pub fn with_reduce(mut self, reduce: ReduceType) -> Einsum {
        self.reduce = Some(reduce);
        self.key = RuleKey::unique();
        self
    }

    /// What names its notation in the engine's cache.
    #[doc(hidden)]
    pub fn key(&self) -> RuleKey {
        self.key
    }

    /// The reduce type [`Einsum::with_reduce`] set, if any.
    pub fn reduce(&self) -> Option<ReduceType> {
        self.reduce
    }

    pub fn notation(&self) -> &Notation {
        &self.notation
    }

    /// The compiled rule, borrowing this op's notation.
    #[inline]
    pub fn rule(&self) -> EinsumRule<'_> {
        // Field by field: a chain of `with_*` copies the whole rule at
        // each step, which the optimiser leaves as `memcpy` calls.
        EinsumRule {
            name: "einsum",
            plan: self.notation.plan(),
            reduce_overrides: &[],
            never_sharded: AxisSet::EMPTY,
            options: RuleOptions {
                policy: self.policy,
                reduce: self.reduce.unwrap_or(ReduceType::Sum),
                ..RuleOptions::DEFAULT
            },
        }
    }
}

impl SpmdRule for Einsum {
    fn name(&self) -> &'static str {
        "einsum"
    }
    fn prepare(&self, call: &crate::op::Call<'_>) -> Result<crate::Prepared, SpmdError> {
        self.rule().compile_forward(call, self.key)
    }
    #[inline]
    fn infer_into(
        &self,
        call: &crate::op::Call<'_>,
        trace: Option<&mut dyn Trace>,
        result: &mut RuleResult,
    ) -> Result<(), SpmdError> {
        match trace {
            None => self
                .rule()
                .run_keyed(self.key, call, &mut crate::trace::NoTrace, result),
            Some(t) => self.rule().run_keyed(self.key, call, t, result),
        }
    }
}
