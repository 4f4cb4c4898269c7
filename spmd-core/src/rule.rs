//! Rules: the compiled [`EinsumRule`] that inference runs on, the result type,
//! and the object-safe [`SpmdRule`] trait that registries store.

use smallvec::SmallVec;
use spmd_notation::{AxisId, AxisSet, Plan};

use crate::dist_attr::{DistAttr, ReduceType, Spec};
use crate::error::SpmdError;
use crate::mesh::Mesh;
use crate::op::Call;
use crate::optional::{Absent, fill_shapes, fill_specs};
use crate::policy::Policy;
use crate::prepared::Prepared;
use crate::signature::GradSignature;
use crate::tensor_set::TensorSet;
use crate::trace::Trace;

/// What a rule answers: the dist attrs the inputs must have (a requirement that
/// differs from the given attr means "reshard first") and the outputs' attrs.
/// Up to four of each are held inline (no allocation): layer_norm's three
/// outputs and flash attention's four fit.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct RuleResult {
    pub inputs: SmallVec<[DistAttr; 4]>,
    pub outputs: SmallVec<[DistAttr; 4]>,
}

/// What a rule declares besides its notation: the merge policy, the reduce
/// type, which tensors take which part, the grad op's tensors and the
/// tensors' names. None of it names a label, so `#[spmd_rule]` builds it as
/// one constant, whether the rule's notation is literal, bound per call from
/// a template or built at run time; the options that name labels
/// (never-sharded axes, per-axis reduce types) are resolved against the
/// notation and live on [`EinsumRule`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuleOptions<'a> {
    pub policy: Policy,
    /// Reduce type of partial results over contracted axes (except those
    /// [`EinsumRule::reduce_overrides`] names).
    pub reduce: ReduceType,
    /// Inputs (bit `i` = input `i`) that have no gradient: integer ids,
    /// boolean conditions (`grad(none(..))`). Grad inference returns grads
    /// for the others.
    pub no_grad: TensorSet,
    /// Inputs the gradient computation does not read (an embedding's table,
    /// a sum's input; `grad(ignores(..))`): they take no part in the grad
    /// op's merge, and are required laid out as their grads
    /// (docs/semantics.md §4, "Grad").
    pub grad_ignores: TensorSet,
    /// Inputs that follow the others (bit `i` = input `i`;
    /// `merge(follows(..))`): they take no part in the forward merge nor in
    /// the grad op's, and their requirement is the merged layout (rotary
    /// embedding's sin, cos and position ids follow q, k and v).
    pub follows: TensorSet,
    /// Outputs that follow (bit `o` = output `o`; `merge(follows(..))`):
    /// backward leaves them out of its merge, and answers them as the others
    /// settle (a debugging output whose given layout should not vote).
    pub follows_outputs: TensorSet,
    /// The tensors that may be absent (optional inputs, and outputs that
    /// exist only with them; `optional(..)`); see [`Absent`].
    pub optional: Absent,
    /// Outputs (bit `o` = output `o`; `partial(none(..))`) that inference
    /// never marks partial over the axes they lack: outputs that lack a
    /// sharded contracted axis without being a sum over it (a loss the
    /// kernel reduces across shards itself, a seed, a reserve buffer,
    /// routing indices). Backward still returns the partial status they were
    /// given, per [`BackwardPartial`](crate::BackwardPartial).
    pub not_partial: TensorSet,
    /// Outputs (bit `o` = output `o`; `merge(first(..))`) backward merges
    /// before the others, in output order: where two outputs shard one axis
    /// differently, or two axes claim one mesh dim, these win (Paddle's
    /// reverse cross entropy merges the loss before the softmax).
    pub merge_first: TensorSet,
    /// The tensors the grad op takes (default: forward inputs, one grad per
    /// output; `grad(inputs(..), of(..))`).
    pub grad_signature: GradSignature<'a>,
    /// The inputs' and outputs' names, when the rule declares them (for
    /// messages: an arity error lists them).
    pub input_names: &'static [&'static str],
    pub output_names: &'static [&'static str],
}

impl RuleOptions<'_> {
    /// The classic policy, `Sum` reductions, every tensor merged and
    /// present, the derived grad signature, no names.
    pub const DEFAULT: RuleOptions<'static> = RuleOptions {
        policy: Policy::CLASSIC,
        reduce: ReduceType::Sum,
        no_grad: TensorSet::EMPTY,
        grad_ignores: TensorSet::EMPTY,
        follows: TensorSet::EMPTY,
        follows_outputs: TensorSet::EMPTY,
        optional: Absent::NONE,
        not_partial: TensorSet::EMPTY,
        merge_first: TensorSet::EMPTY,
        grad_signature: GradSignature::DERIVED,
        input_names: &[],
        output_names: &[],
    };
}

impl Default for RuleOptions<'_> {
    fn default() -> Self {
        RuleOptions::DEFAULT
    }
}

/// A notation plus everything a rule decides about it. Const-constructible, so
/// `#[spmd_rule]` emits one as a `const` and inference reads it directly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EinsumRule<'a> {
    /// The registry name, used in error messages.
    pub name: &'static str,
    pub plan: Plan<'a>,
    /// Axes whose partial results reduce otherwise than
    /// [`RuleOptions::reduce`].
    pub reduce_overrides: &'a [(AxisId, ReduceType)],
    /// Axes the rule declares never sharded (on top of `1` dims, diagonals and
    /// minor compound factors, which the notation itself declares).
    pub never_sharded: AxisSet,
    /// Everything else the rule declares.
    pub options: RuleOptions<'a>,
}

impl<'a> EinsumRule<'a> {
    /// A rule over `plan` with the classic policy, `Sum` reductions and no
    /// never-sharded axes.
    pub const fn new(name: &'static str, plan: Plan<'a>) -> EinsumRule<'a> {
        EinsumRule {
            name,
            plan,
            reduce_overrides: &[],
            never_sharded: AxisSet::EMPTY,
            options: RuleOptions::DEFAULT,
        }
    }

    /// Replaces every option the rule declares (see [`RuleOptions`]).
    pub const fn with_options(mut self, options: RuleOptions<'a>) -> Self {
        self.options = options;
        self
    }

    /// Declares the tensors the grad op takes (see [`GradSignature`]).
    pub const fn with_grad_signature(mut self, signature: GradSignature<'a>) -> Self {
        self.options.grad_signature = signature;
        self
    }

    /// Declares which tensors may be absent (bit `i` of `optional.inputs` =
    /// input `i`, of `optional.outputs` = output `i`).
    pub const fn with_optional(mut self, optional: Absent) -> Self {
        self.options.optional = optional;
        self
    }

    /// Sets [`RuleOptions::policy`].
    pub const fn with_policy(mut self, policy: Policy) -> Self {
        self.options.policy = policy;
        self
    }
    /// Sets [`RuleOptions::reduce`].
    pub const fn with_reduce(mut self, reduce: ReduceType) -> Self {
        self.options.reduce = reduce;
        self
    }
    pub const fn with_never_sharded(mut self, axes: AxisSet) -> Self {
        self.never_sharded = axes;
        self
    }
    pub const fn with_reduce_overrides(mut self, o: &'a [(AxisId, ReduceType)]) -> Self {
        self.reduce_overrides = o;
        self
    }

    /// The reduce type of partial results over axis `a`.
    #[inline]
    pub fn reduce_of(&self, a: AxisId) -> ReduceType {
        if self.reduce_overrides.is_empty() {
            return self.options.reduce;
        }
        self.reduce_overrides
            .iter()
            .find(|(x, _)| *x == a)
            .map_or(self.options.reduce, |(_, r)| *r)
    }

    /// Answers a call in any direction (the engine's one entry point): the
    /// absent tensors and the grad op's tensors are read off the call. The
    /// answer is written into `result` (cleared first), which a caller that
    /// asks many questions reuses.
    pub fn run_into<T: Trace + ?Sized>(
        &self,
        call: &Call<'_>,
        trace: &mut T,
        result: &mut RuleResult,
    ) -> Result<(), SpmdError> {
        crate::engine::infer(self, call, trace, result)
    }

    /// [`EinsumRule::run_into`] for a rule named by `key`: a call with the
    /// shapes of an earlier one reuses what that call compiled (see
    /// `RuleKey`). What `#[spmd_rule]`'s expansions and [`Einsum`](crate::Einsum)
    /// call.
    #[doc(hidden)]
    #[inline]
    pub fn run_keyed<T: Trace + ?Sized>(
        &self,
        key: crate::engine::cache::RuleKey,
        call: &Call<'_>,
        trace: &mut T,
        result: &mut RuleResult,
    ) -> Result<(), SpmdError> {
        crate::engine::infer_keyed(key, self, call, trace, result)
    }

    /// [`EinsumRule::run_into`], answered by value.
    pub fn run<T: Trace + ?Sized>(
        &self,
        call: &Call<'_>,
        trace: &mut T,
    ) -> Result<RuleResult, SpmdError> {
        answer(|r| self.run_into(call, trace, r))
    }
}

/// Runs `f` on a fresh result and returns it: the by-value form of the
/// engine's `_into` entry points. The by-value entry points call it
/// directly (not through [`SpmdRuleExt::infer`]): each layer between the
/// result and the caller is one more copy of it.
#[inline(always)]
fn answer(
    f: impl FnOnce(&mut RuleResult) -> Result<(), SpmdError>,
) -> Result<RuleResult, SpmdError> {
    let mut r = RuleResult::default();
    f(&mut r)?;
    Ok(r)
}

/// A sharding rule as registries and generic callers see it. Object safe; every
/// implementation is `Send + Sync` so one registry serves many threads.
///
/// One method does the work: [`SpmdRule::infer_into`] answers a [`Call`]
/// (its direction, tensors, absent tensors, output shapes and preparation)
/// into the caller's result, reporting each step to a trace when one is
/// given. [`SpmdRule::prepare`] compiles a forward call's shapes once for
/// a caller that asks about many layouts of the same tensors. The
/// conveniences (`forward`, `backward`, `grad` and their variants) are
/// [`SpmdRuleExt`]'s, on every rule.
///
/// ```
/// use spmd_core::{Call, DistAttr, Mesh, RuleResult, Spec, SpmdError, SpmdRule, SpmdRuleExt, Trace};
///
/// /// Replicates everything (a rule written by hand).
/// struct Gather;
///
/// impl SpmdRule for Gather {
///     fn name(&self) -> &'static str {
///         "gather_all"
///     }
///     fn infer_into(
///         &self,
///         call: &Call<'_>,
///         _: Option<&mut dyn Trace>,
///         r: &mut RuleResult,
///     ) -> Result<(), SpmdError> {
///         let rank = |s: &Spec<'_>| DistAttr::replicated(s.shape.len());
///         if let Call::Forward { inputs, .. } = call {
///             r.inputs = inputs.iter().map(rank).collect();
///             r.outputs = inputs.iter().take(1).map(rank).collect();
///         }
///         Ok(())
///     }
/// }
///
/// let x = DistAttr::from_paddle(&[0, -1]).unwrap();
/// let r = Gather.forward(&Mesh::new(&[2])?, &[Spec::new(&[4, 4], &x)])?;
/// assert_eq!(r.inputs[0].to_string(), "[-1, -1]");
/// # Ok::<(), SpmdError>(())
/// ```
pub trait SpmdRule: Send + Sync {
    /// The registry name (Paddle's name for built-ins).
    fn name(&self) -> &'static str;

    /// Answers `call` into `result` (cleared first; a caller asking many
    /// questions reuses one), reporting each step to `trace` when one is
    /// given (`None`: untraced, at no cost). A forward call that carries
    /// this rule's [`Prepared`] for its shapes is answered by it.
    fn infer_into(
        &self,
        call: &Call<'_>,
        trace: Option<&mut dyn Trace>,
        result: &mut RuleResult,
    ) -> Result<(), SpmdError>;

    /// Compiles forward calls with `call`'s shapes and declared output
    /// shapes (its layouts are not read) into a [`Prepared`]: what a
    /// caller asking about many layouts of the same tensors keeps, as a
    /// graph keeps one per op. The default prepares nothing, and the
    /// [`Prepared`] then answers every call through
    /// [`SpmdRule::infer_into`]; `#[spmd_rule]` implements it.
    fn prepare(&self, call: &Call<'_>) -> Result<Prepared, SpmdError> {
        let _ = call;
        Ok(Prepared::NONE)
    }
}

/// The conveniences over [`SpmdRule::infer_into`], on every rule (a
/// blanket implementation: they are not a rule's to override). Each
/// builds its [`Call`] and answers it by value.
pub trait SpmdRuleExt: SpmdRule {
    /// Answers `call` (see [`SpmdRule::infer_into`]), by value.
    #[inline]
    fn infer(
        &self,
        call: &Call<'_>,
        trace: Option<&mut dyn Trace>,
    ) -> Result<RuleResult, SpmdError> {
        answer(|r| self.infer_into(call, trace, r))
    }

    /// Forward inference: the inputs' specs give the inputs' requirements
    /// and the outputs.
    #[inline]
    fn forward(&self, mesh: &Mesh, inputs: &[Spec<'_>]) -> Result<RuleResult, SpmdError> {
        answer(|r| self.infer_into(&Call::forward(mesh, inputs), None, r))
    }

    /// Forward inference into the caller's `result`: what a search that
    /// asks millions of questions calls, moving no result around.
    #[inline]
    fn forward_into(
        &self,
        mesh: &Mesh,
        inputs: &[Spec<'_>],
        result: &mut RuleResult,
    ) -> Result<(), SpmdError> {
        self.infer_into(&Call::forward(mesh, inputs), None, result)
    }

    /// Backward (reverse) inference: the outputs' specs and the inputs'
    /// shapes give the inputs' requirements and the (possibly corrected)
    /// outputs.
    #[inline]
    fn backward(
        &self,
        mesh: &Mesh,
        input_shapes: &[&[usize]],
        outputs: &[Spec<'_>],
    ) -> Result<RuleResult, SpmdError> {
        answer(|r| self.infer_into(&Call::backward(mesh, input_shapes, outputs), None, r))
    }

    /// Grad inference (docs/semantics.md §4): the tensors of the rule's grad
    /// op's signature (by default the forward inputs, then one grad per
    /// output). The result's `inputs` are their requirements, its `outputs`
    /// the grads of the inputs that have one, each partial over the mesh
    /// dims of sharded axes it lacks.
    #[inline]
    fn grad(
        &self,
        mesh: &Mesh,
        inputs: &[Spec<'_>],
        output_grads: &[Spec<'_>],
    ) -> Result<RuleResult, SpmdError> {
        answer(|r| self.infer_into(&Call::grad(mesh, inputs, output_grads), None, r))
    }

    /// Forward inference when the caller also knows the outputs' shapes
    /// (see [`Call::forward_with_output_shapes`]).
    fn forward_with_output_shapes(
        &self,
        mesh: &Mesh,
        inputs: &[Spec<'_>],
        output_shapes: &[&[usize]],
    ) -> Result<RuleResult, SpmdError> {
        self.infer(
            &Call::forward_with_output_shapes(mesh, inputs, output_shapes),
            None,
        )
    }

    /// Forward inference where optional inputs may be absent (`None`); a
    /// rule answers [`SpmdError::AbsentTensor`] for a tensor it does not
    /// declare optional.
    fn forward_optional(
        &self,
        mesh: &Mesh,
        inputs: &[Option<Spec<'_>>],
    ) -> Result<RuleResult, SpmdError> {
        let (specs, absent) = fill_specs(inputs);
        let call = Call::forward(mesh, &specs).with_absent(Absent::new(absent, 0));
        self.infer(&call, None)
    }

    /// Backward inference where optional tensors may be absent (see
    /// [`SpmdRuleExt::forward_optional`]).
    fn backward_optional(
        &self,
        mesh: &Mesh,
        input_shapes: &[Option<&[usize]>],
        outputs: &[Option<Spec<'_>>],
    ) -> Result<RuleResult, SpmdError> {
        let (shapes, a_in) = fill_shapes(input_shapes);
        let (specs, a_out) = fill_specs(outputs);
        let call = Call::backward(mesh, &shapes, &specs).with_absent(Absent::new(a_in, a_out));
        self.infer(&call, None)
    }

    /// Grad inference where optional tensors may be absent (see
    /// [`SpmdRuleExt::forward_optional`]).
    fn grad_optional(
        &self,
        mesh: &Mesh,
        inputs: &[Option<Spec<'_>>],
        output_grads: &[Option<Spec<'_>>],
    ) -> Result<RuleResult, SpmdError> {
        let (ins, a_in) = fill_specs(inputs);
        let (grads, a_out) = fill_specs(output_grads);
        let call = Call::grad(mesh, &ins, &grads).with_absent(Absent::new(a_in, a_out));
        self.infer(&call, None)
    }

    /// Forward inference reporting each step to `trace` (`explain`).
    fn forward_traced(
        &self,
        mesh: &Mesh,
        inputs: &[Spec<'_>],
        trace: &mut dyn Trace,
    ) -> Result<RuleResult, SpmdError> {
        self.infer(&Call::forward(mesh, inputs), Some(trace))
    }

    /// Backward inference reporting each step to `trace`.
    fn backward_traced(
        &self,
        mesh: &Mesh,
        input_shapes: &[&[usize]],
        outputs: &[Spec<'_>],
        trace: &mut dyn Trace,
    ) -> Result<RuleResult, SpmdError> {
        self.infer(&Call::backward(mesh, input_shapes, outputs), Some(trace))
    }

    /// Grad inference reporting each step to `trace`.
    fn grad_traced(
        &self,
        mesh: &Mesh,
        inputs: &[Spec<'_>],
        output_grads: &[Spec<'_>],
        trace: &mut dyn Trace,
    ) -> Result<RuleResult, SpmdError> {
        self.infer(&Call::grad(mesh, inputs, output_grads), Some(trace))
    }
}

impl<R: SpmdRule + ?Sized> SpmdRuleExt for R {}

impl SpmdRule for EinsumRule<'_> {
    fn name(&self) -> &'static str {
        self.name
    }
    #[inline]
    fn infer_into(
        &self,
        call: &Call<'_>,
        trace: Option<&mut dyn Trace>,
        result: &mut RuleResult,
    ) -> Result<(), SpmdError> {
        match trace {
            None => self.run_into(call, &mut crate::trace::NoTrace, result),
            Some(t) => self.run_into(call, t, result),
        }
    }
}
