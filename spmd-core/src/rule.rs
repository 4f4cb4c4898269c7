//! Rules: the compiled [`EinsumRule`] that inference runs on, the result type,
//! and the object-safe [`SpmdRule`] trait that registries store.

use smallvec::SmallVec;
use spmd_notation::{AxisId, AxisSet, Plan};

use crate::attr::{DistAttr, ReduceType, Spec};
use crate::error::SpmdError;
use crate::mesh::Mesh;
use crate::policy::Policy;
use crate::trace::Trace;

/// What a rule answers: the dist attrs the inputs must have (a requirement that
/// differs from the given attr means "reshard first") and the outputs' attrs.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct RuleResult {
    pub inputs: SmallVec<[DistAttr; 4]>,
    pub outputs: SmallVec<[DistAttr; 2]>,
}

/// A notation plus everything a rule decides about it. Const-constructible, so
/// `#[spmd_rule]` emits one as a `const` and inference reads it directly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EinsumRule<'a> {
    /// The registry name, used in error messages.
    pub name: &'static str,
    pub plan: Plan<'a>,
    pub policy: Policy,
    /// Reduce type of partial results over contracted axes...
    pub reduce: ReduceType,
    /// ...except for these axes.
    pub reduce_overrides: &'a [(AxisId, ReduceType)],
    /// Axes the rule declares never sharded (on top of `1` dims, diagonals and
    /// minor compound factors, which the notation itself declares).
    pub never_sharded: AxisSet,
    /// Inputs (bit `i` = input `i`) that have no gradient: integer ids,
    /// boolean conditions. Grad inference returns grads for the others.
    pub no_grad: u64,
    /// Inputs the gradient computation does not read (an embedding's table,
    /// a sum's input): they take no part in the grad op's merge, and their
    /// requirement is their given attr.
    pub grad_ignores: u64,
}

impl<'a> EinsumRule<'a> {
    /// A rule over `plan` with the classic policy, `Sum` reductions and no
    /// never-sharded axes.
    pub const fn new(name: &'static str, plan: Plan<'a>) -> EinsumRule<'a> {
        EinsumRule {
            name,
            plan,
            policy: Policy::CLASSIC,
            reduce: ReduceType::Sum,
            reduce_overrides: &[],
            never_sharded: AxisSet::EMPTY,
            no_grad: 0,
            grad_ignores: 0,
        }
    }

    pub const fn with_no_grad(mut self, inputs: u64) -> Self {
        self.no_grad = inputs;
        self
    }
    pub const fn with_grad_ignores(mut self, inputs: u64) -> Self {
        self.grad_ignores = inputs;
        self
    }

    pub const fn with_policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }
    pub const fn with_reduce(mut self, reduce: ReduceType) -> Self {
        self.reduce = reduce;
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
    pub fn reduce_of(&self, a: AxisId) -> ReduceType {
        self.reduce_overrides
            .iter()
            .find(|(x, _)| *x == a)
            .map_or(self.reduce, |(_, r)| *r)
    }

    /// Forward inference: the inputs' specs give the requirements and outputs.
    pub fn forward(&self, mesh: &Mesh, inputs: &[Spec<'_>]) -> Result<RuleResult, SpmdError> {
        crate::infer::forward(self, mesh, inputs, &mut crate::trace::NoTrace)
    }

    /// Backward (reverse) inference: the outputs' specs and the inputs' shapes
    /// give the inputs' requirements and the (possibly corrected) outputs.
    pub fn backward(
        &self,
        mesh: &Mesh,
        input_shapes: &[&[usize]],
        outputs: &[Spec<'_>],
    ) -> Result<RuleResult, SpmdError> {
        crate::infer::backward(
            self,
            mesh,
            input_shapes,
            outputs,
            &mut crate::trace::NoTrace,
        )
    }
}

impl EinsumRule<'_> {
    /// Grad inference, derived from the notation (DESIGN §4): `inputs` are the
    /// forward inputs, `output_grads` one grad per output. The result's
    /// `inputs` are the requirements of (inputs..., output grads...) and its
    /// `outputs` the grads of the inputs that have one (see `no_grad`), each
    /// partial (`Sum`) over the mesh dims of sharded axes it lacks.
    pub fn grad(
        &self,
        mesh: &Mesh,
        inputs: &[Spec<'_>],
        output_grads: &[Spec<'_>],
    ) -> Result<RuleResult, SpmdError> {
        crate::infer::grad(self, mesh, inputs, output_grads, &mut crate::trace::NoTrace)
    }

    /// [`EinsumRule::forward`], reporting each step to `trace`.
    pub fn forward_traced<T: Trace + ?Sized>(
        &self,
        mesh: &Mesh,
        inputs: &[Spec<'_>],
        trace: &mut T,
    ) -> Result<RuleResult, SpmdError> {
        crate::infer::forward(self, mesh, inputs, trace)
    }

    /// [`EinsumRule::backward`], reporting each step to `trace`.
    pub fn backward_traced<T: Trace + ?Sized>(
        &self,
        mesh: &Mesh,
        input_shapes: &[&[usize]],
        outputs: &[Spec<'_>],
        trace: &mut T,
    ) -> Result<RuleResult, SpmdError> {
        crate::infer::backward(self, mesh, input_shapes, outputs, trace)
    }

    /// [`EinsumRule::grad`], reporting each step to `trace`.
    pub fn grad_traced<T: Trace + ?Sized>(
        &self,
        mesh: &Mesh,
        inputs: &[Spec<'_>],
        output_grads: &[Spec<'_>],
        trace: &mut T,
    ) -> Result<RuleResult, SpmdError> {
        crate::infer::grad(self, mesh, inputs, output_grads, trace)
    }
}

/// A sharding rule as registries and generic callers see it. Object safe; every
/// implementation is `Send + Sync` so one registry serves many threads.
pub trait SpmdRule: Send + Sync {
    /// The registry name (Paddle's name for built-ins).
    fn name(&self) -> &'static str;

    /// Forward inference (see [`EinsumRule::forward`]).
    fn forward(&self, mesh: &Mesh, inputs: &[Spec<'_>]) -> Result<RuleResult, SpmdError>;

    /// Backward inference (see [`EinsumRule::backward`]).
    fn backward(
        &self,
        mesh: &Mesh,
        input_shapes: &[&[usize]],
        outputs: &[Spec<'_>],
    ) -> Result<RuleResult, SpmdError>;

    /// Grad inference (see [`EinsumRule::grad`]). Rules without one answer
    /// [`SpmdError::NoGradRule`].
    fn grad(
        &self,
        mesh: &Mesh,
        inputs: &[Spec<'_>],
        output_grads: &[Spec<'_>],
    ) -> Result<RuleResult, SpmdError> {
        let _ = (mesh, inputs, output_grads);
        Err(SpmdError::NoGradRule { op: self.name() })
    }

    /// Forward inference reporting each step to `trace` (`explain`). The
    /// default runs untraced.
    fn forward_traced(
        &self,
        mesh: &Mesh,
        inputs: &[Spec<'_>],
        trace: &mut dyn Trace,
    ) -> Result<RuleResult, SpmdError> {
        let _ = trace;
        self.forward(mesh, inputs)
    }

    /// Backward inference reporting each step to `trace`.
    fn backward_traced(
        &self,
        mesh: &Mesh,
        input_shapes: &[&[usize]],
        outputs: &[Spec<'_>],
        trace: &mut dyn Trace,
    ) -> Result<RuleResult, SpmdError> {
        let _ = trace;
        self.backward(mesh, input_shapes, outputs)
    }

    /// Grad inference reporting each step to `trace`.
    fn grad_traced(
        &self,
        mesh: &Mesh,
        inputs: &[Spec<'_>],
        output_grads: &[Spec<'_>],
        trace: &mut dyn Trace,
    ) -> Result<RuleResult, SpmdError> {
        let _ = trace;
        self.grad(mesh, inputs, output_grads)
    }
}

impl SpmdRule for EinsumRule<'static> {
    fn name(&self) -> &'static str {
        self.name
    }
    fn forward(&self, mesh: &Mesh, inputs: &[Spec<'_>]) -> Result<RuleResult, SpmdError> {
        EinsumRule::forward(self, mesh, inputs)
    }
    fn backward(
        &self,
        mesh: &Mesh,
        input_shapes: &[&[usize]],
        outputs: &[Spec<'_>],
    ) -> Result<RuleResult, SpmdError> {
        EinsumRule::backward(self, mesh, input_shapes, outputs)
    }
    fn grad(
        &self,
        mesh: &Mesh,
        inputs: &[Spec<'_>],
        output_grads: &[Spec<'_>],
    ) -> Result<RuleResult, SpmdError> {
        EinsumRule::grad(self, mesh, inputs, output_grads)
    }
    fn forward_traced(
        &self,
        mesh: &Mesh,
        inputs: &[Spec<'_>],
        trace: &mut dyn Trace,
    ) -> Result<RuleResult, SpmdError> {
        EinsumRule::forward_traced(self, mesh, inputs, trace)
    }
    fn backward_traced(
        &self,
        mesh: &Mesh,
        input_shapes: &[&[usize]],
        outputs: &[Spec<'_>],
        trace: &mut dyn Trace,
    ) -> Result<RuleResult, SpmdError> {
        EinsumRule::backward_traced(self, mesh, input_shapes, outputs, trace)
    }
    fn grad_traced(
        &self,
        mesh: &Mesh,
        inputs: &[Spec<'_>],
        output_grads: &[Spec<'_>],
        trace: &mut dyn Trace,
    ) -> Result<RuleResult, SpmdError> {
        EinsumRule::grad_traced(self, mesh, inputs, output_grads, trace)
    }
}
