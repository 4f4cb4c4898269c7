//! The inference engine (docs/semantics.md §4): compile, then interpret.
//!
//! A call is first compiled for its rule into a [`Program`]
//! ([`program`]): every check that the call is well formed, with every
//! error it can give, and flat tables of what each tensor dim is (the axis
//! it belongs to, the axis its sharding goes to, its compound factors).
//! One interpreter then runs the same steps for forward, backward and grad
//! alike, reading only those tables, the shapes and the layouts:
//!
//! 1. learn every axis's extent from the shapes ([`state`]);
//! 2. merge the given side's layouts into an axis map, conflicts settled by
//!    the rule's policy ([`merge`]; role priority in [`roles`], aligned
//!    operands in [`align`]); with `Compounds::Absorb`, minor factors'
//!    shardings first move onto their majors ([`partial`]);
//! 3. fit the map to the divisibility policy;
//! 4. backward: explain the given outputs' partial status ([`partial`]);
//! 5. project the map onto every answer and mark partial status
//!    ([`answer`]).
//!
//! A prepared call keeps its program and extents and runs steps 2 to 5.

use smallvec::SmallVec;

use crate::dist_attr::{DistAttr, Partial, Spec};
use crate::error::{SpmdError, TensorRef};
use crate::op::Call;
use crate::policy::{BackwardPartial, Compounds, Conflicts, MissingAxis};
use crate::rule::EinsumRule;
use crate::trace::Trace;

mod align;
pub(crate) mod answer;
pub(crate) mod cache;
pub(crate) mod check;
mod merge;
mod partial;
pub(crate) mod program;
pub(crate) mod roles;
pub(crate) mod state;

pub(crate) use answer::Sink;
pub(crate) use program::{Direction, Given, Program};
use state::Run;

/// Answers `call` by `rule` into `sink`: compiles it, then runs it.
#[inline]
pub(crate) fn infer<T: Trace + ?Sized, S: Sink>(
    rule: &EinsumRule<'_>,
    call: &Call<'_>,
    trace: &mut T,
    sink: &mut S,
) -> Result<(), SpmdError> {
    if trace.enabled() {
        trace.plan(&rule.plan);
    }
    let mut compiled = Compiled::empty();
    compiled.compile(rule, call)?;
    compiled.run(rule, call, trace, sink)
}

/// Answers `call` by `rule`, named by `key` (see [`cache`]): by the
/// compiled form kept for its shapes, compiled and kept when there is none.
/// A traced call, or a rule without a key, is compiled afresh.
#[inline]
pub(crate) fn infer_keyed<T: Trace + ?Sized, S: Sink>(
    key: cache::RuleKey,
    rule: &EinsumRule<'_>,
    call: &Call<'_>,
    trace: &mut T,
    sink: &mut S,
) -> Result<(), SpmdError> {
    if key != cache::RuleKey::NONE
        && !trace.enabled()
        && let Some(c) = call.prepared().and_then(|p| p.for_call(key, call))
    {
        return c.run_fitting(rule, call, trace, sink);
    }
    #[cfg(feature = "std")]
    if key != cache::RuleKey::NONE && !trace.enabled() {
        return cache::with_compiled(key, rule, call, |c, fresh| match fresh {
            true => c.run(rule, call, trace, sink),
            false => c.run_fitting(rule, call, trace, sink),
        });
    }
    let _ = key;
    infer(rule, call, trace, sink)
}

/// A call's shapes compiled for a rule: the program, and the extents the
/// shapes give. What a prepared call keeps and the cache holds; it
/// answers every call with those shapes.
///
/// Laid out in the order a call reads it (`repr(C)` keeps the order): a
/// graph keeps one per op, and at 100k ops every cache line a call
/// touches is a miss.
#[derive(Clone, Debug)]
#[repr(C)]
pub(crate) struct Compiled {
    /// The call it was compiled for: its direction, absent tensors, and
    /// the shapes it gives (see `Call::push_shapes`).
    direction: Direction,
    absent: crate::optional::Absent,
    shapes: SmallVec<[usize; 16]>,
    /// Whether the run's merge reads every given tensor in the order they
    /// are checked, so that it can check their layouts as it reads them.
    merges_in_order: bool,
    pub(crate) prog: Program,
    /// Each axis's extent, one per axis of the program (compact: a
    /// prepared call keeps one per op of a graph).
    pub(crate) extent: SmallVec<[usize; 8]>,
}

impl Compiled {
    /// Nothing compiled yet.
    pub(crate) fn empty() -> Compiled {
        Compiled {
            prog: Program::empty(),
            extent: SmallVec::new(),
            direction: Direction::Forward,
            absent: crate::optional::Absent::NONE,
            shapes: SmallVec::new(),
            merges_in_order: false,
        }
    }

    /// Compiles `call` for `rule` (every error of the call's shapes and
    /// layouts reported, in the reference order).
    pub(crate) fn compile(
        &mut self,
        rule: &EinsumRule<'_>,
        call: &Call<'_>,
    ) -> Result<(), SpmdError> {
        self.compile_checked(rule, call, true)
    }

    /// Compiles `call`'s shapes for `rule`, its layouts unread (a
    /// preparation's).
    pub(crate) fn compile_shapes(
        &mut self,
        rule: &EinsumRule<'_>,
        call: &Call<'_>,
    ) -> Result<(), SpmdError> {
        self.compile_checked(rule, call, false)
    }

    fn compile_checked(
        &mut self,
        rule: &EinsumRule<'_>,
        call: &Call<'_>,
        layouts: bool,
    ) -> Result<(), SpmdError> {
        self.prog.compile(rule, call, layouts)?;
        let mut learner = state::Learner {
            rule,
            prog: &self.prog,
            extent: [state::UNKNOWN; 64],
        };
        learner.learn_all(|s| slot_shape(&self.prog, call, s))?;
        self.extent.clear();
        self.extent
            .extend_from_slice(&learner.extent[..usize::from(self.prog.n_axes)]);
        let prog = &mut self.prog;
        let shapes: SmallVec<[&[usize]; 8]> = (0..prog.slots.len())
            .map(|s| slot_shape(prog, call, s))
            .collect();
        prog.read_sizes(rule, |s| shapes[s]);
        prog.roles = match (prog.direction, rule.options.policy.conflicts) {
            (Direction::Forward, Conflicts::RolePriority) => {
                roles::RolePlan::build(rule, prog, &self.extent)
            }
            _ => roles::RolePlan::default(),
        };
        prog.must_divide = merge::must_divide(rule, prog);
        self.direction = self.prog.direction;
        self.merges_in_order = merges_in_order(rule, self.direction);
        self.absent = call.absent();
        self.shapes.clear();
        call.push_shapes(&mut self.shapes);
        Ok(())
    }

    /// Whether `call` has the shapes, direction and absent tensors this
    /// was compiled for (its layouts are not read).
    #[inline]
    pub(crate) fn fits(&self, call: &Call<'_>) -> bool {
        let direction = match call {
            Call::Forward { .. } => Direction::Forward,
            Call::Backward { .. } => Direction::Backward,
            Call::Grad { .. } => Direction::Grad,
        };
        direction == self.direction
            && call.absent() == self.absent
            && same_shapes(call, &self.shapes)
    }

    /// Runs on `call`, whose shapes this was compiled for and whose
    /// layouts are checked.
    #[inline]
    pub(crate) fn run<T: Trace + ?Sized, S: Sink>(
        &self,
        rule: &EinsumRule<'_>,
        call: &Call<'_>,
        trace: &mut T,
        sink: &mut S,
    ) -> Result<(), SpmdError> {
        run(rule, &self.prog, &self.extent, call, true, trace, sink)
    }

    /// Runs on `call`, which [`Compiled::fits`]: its layouts are checked
    /// first (the only errors such a call can have).
    #[inline]
    pub(crate) fn run_fitting<T: Trace + ?Sized, S: Sink>(
        &self,
        rule: &EinsumRule<'_>,
        call: &Call<'_>,
        trace: &mut T,
        sink: &mut S,
    ) -> Result<(), SpmdError> {
        let rule_merges_in_order = self.merges_in_order;
        if !rule_merges_in_order {
            self.prog.validate_layouts(rule, call)?;
        }
        run(
            rule,
            &self.prog,
            &self.extent,
            call,
            !rule_merges_in_order,
            trace,
            sink,
        )
    }
}

/// Whether a run in `direction` merges every given tensor in the order
/// their layouts are checked, so that it checks each as it merges it (else
/// the layouts are checked first). Absorbing compounds reads the layouts
/// before they merge.
fn merges_in_order(rule: &EinsumRule<'_>, direction: Direction) -> bool {
    let absorbs =
        rule.options.policy.compounds == Compounds::Absorb && !rule.plan.compound_minor.is_empty();
    !absorbs
        && match direction {
            Direction::Forward => matches!(
                rule.options.policy.conflicts,
                Conflicts::FirstWins | Conflicts::Strict
            ),
            Direction::Backward => rule.options.merge_first.is_empty(),
            Direction::Grad => false,
        }
}

/// Whether `call`'s shapes are `key`'s (see `Call::push_shapes`). Dim by dim,
/// by index: shapes are short, and a slice compare calls `memcmp`.
#[inline]
fn same_shapes(call: &Call<'_>, key: &[usize]) -> bool {
    /// Whether `key` starts with the list `shapes`; moves `key` past it.
    #[inline(always)]
    fn list<'s>(key: &mut &[usize], shapes: impl ExactSizeIterator<Item = &'s [usize]>) -> bool {
        let Some((&count, rest)) = key.split_first() else {
            return false;
        };
        if count != shapes.len() {
            return false;
        }
        *key = rest;
        for shape in shapes {
            let Some((&rank, rest)) = key.split_first() else {
                return false;
            };
            if rank != shape.len() || rest.len() < rank {
                return false;
            }
            let (dims, rest) = rest.split_at(rank);
            // Dim by dim: shapes are short, and a slice compare calls
            // `memcmp`.
            for i in 0..rank {
                if dims[i] != shape[i] {
                    return false;
                }
            }
            *key = rest;
        }
        true
    }
    let mut key = key;
    let same = match *call {
        Call::Forward {
            inputs,
            output_shapes,
            ..
        } => {
            list(&mut key, inputs.iter().map(|s| s.shape))
                && list(&mut key, output_shapes.iter().copied())
        }
        Call::Backward {
            input_shapes,
            outputs,
            ..
        } => {
            list(&mut key, input_shapes.iter().copied())
                && list(&mut key, outputs.iter().map(|s| s.shape))
        }
        Call::Grad {
            inputs,
            output_grads,
            ..
        } => {
            list(&mut key, inputs.iter().map(|s| s.shape))
                && list(&mut key, output_grads.iter().map(|s| s.shape))
        }
    };
    same && key.is_empty()
}

/// Slot `s`'s shape as `call` gives it (empty when it gives none).
fn slot_shape<'c>(prog: &Program, call: &Call<'c>, s: usize) -> &'c [usize] {
    let slot = &prog.slots[s];
    match (*call, slot.given) {
        (_, Given::Nothing) => &[],
        (Call::Forward { inputs, .. }, Given::Layout) => inputs[s].shape,
        (Call::Forward { output_shapes, .. }, Given::Shape) => {
            output_shapes[s - usize::from(prog.n_inputs)]
        }
        (Call::Backward { input_shapes, .. }, Given::Shape) => input_shapes[s],
        (Call::Backward { outputs, .. }, Given::Layout) => {
            outputs[s - usize::from(prog.n_inputs)].shape
        }
        (
            Call::Grad {
                inputs,
                output_grads,
                ..
            },
            _,
        ) => {
            let s = if slot.given == Given::Shape {
                usize::from(slot.twin)
            } else {
                s
            };
            let n = usize::from(prog.n_tensors);
            if s < n {
                inputs[s].shape
            } else {
                output_grads[s - n].shape
            }
        }
    }
}

/// Runs `prog` (compiled from `call`'s shapes for `rule`, with the
/// extents they give) on `call`; `checked`: whether its layouts are
/// checked already (else the merge checks them).
#[allow(clippy::too_many_arguments)]
pub(crate) fn run<T: Trace + ?Sized, S: Sink>(
    rule: &EinsumRule<'_>,
    prog: &Program,
    extent: &[usize],
    call: &Call<'_>,
    checked: bool,
    trace: &mut T,
    sink: &mut S,
) -> Result<(), SpmdError> {
    let mesh = call.mesh();
    // Compounds::Absorb: the given side's layouts with minor factors' mesh
    // dims moved onto their majors; they are what the run reads.
    let absorbing = absorbing(rule, prog, call);
    // A forward run reads only its inputs' specs: the call's own, unless
    // absorbing rewrites some.
    if let (Call::Forward { inputs, .. }, None) = (call, &absorbing) {
        let mut run = Run::new(rule, prog, mesh, inputs, extent);
        return run.go(checked, trace, sink);
    }
    let absorbed: SmallVec<[Option<DistAttr>; 2]> = match &absorbing {
        Some(range) => range
            .clone()
            .map(|s| {
                let present = prog.slots[s].present;
                present
                    .then(|| partial::absorbed(rule, prog, mesh, s, &slot_spec(prog, call, s)))
                    .flatten()
            })
            .collect(),
        None => SmallVec::new(),
    };
    // Every slot's shape and layout, as the call gives them: in a fixed
    // array for the common call of a few tensors, on the heap past it.
    let n = prog.slots.len();
    let mut inline = [BARE; INLINE_SPECS];
    let mut heap = alloc::vec::Vec::new();
    let specs: &mut [Spec<'_>] = if n <= INLINE_SPECS {
        fill_specs(prog, call, &mut inline[..n]);
        &mut inline[..n]
    } else {
        heap.resize(n, BARE);
        fill_specs(prog, call, &mut heap);
        &mut heap
    };
    if let Some(range) = absorbing {
        for (s, attr) in range.zip(&absorbed) {
            if let Some(attr) = attr {
                specs[s].attr = attr;
            }
        }
    }
    let mut run = Run::new(rule, prog, mesh, specs, extent);
    run.go(checked, trace, sink)
}

/// The given slots whose layouts `Compounds::Absorb` may change, when some
/// may change; `None` in the common case (no compound).
#[inline]
fn absorbing(
    rule: &EinsumRule<'_>,
    prog: &Program,
    call: &Call<'_>,
) -> Option<core::ops::Range<usize>> {
    if rule.options.policy.compounds != Compounds::Absorb || rule.plan.compound_minor.is_empty() {
        return None;
    }
    let n_in = usize::from(prog.n_inputs);
    let given = match prog.direction {
        Direction::Forward => 0..n_in,
        Direction::Backward => n_in..usize::from(prog.n_given),
        Direction::Grad => return None,
    };
    given
        .clone()
        .any(|s| {
            prog.slots[s].present && partial::may_absorb(rule, prog, s, &slot_spec(prog, call, s))
        })
        .then_some(given)
}

/// The placeholder layout of a tensor the call gives no layout of.
static NO_LAYOUT: DistAttr = DistAttr {
    dims_mapping: crate::dist_attr::DimsMapping::EMPTY,
    partial: Partial::NONE,
};

/// Slot `s`'s shape and layout, as the call gives them (an empty shape
/// and a placeholder layout where it gives none).
#[inline]
fn slot_spec<'c>(prog: &Program, call: &Call<'c>, s: usize) -> Spec<'c> {
    let bare = |shape: &'c [usize]| Spec {
        shape,
        attr: &NO_LAYOUT,
    };
    let slot = &prog.slots[s];
    match (*call, slot.given) {
        (_, Given::Nothing) => bare(&[]),
        (Call::Forward { inputs, .. }, Given::Layout) => inputs[s],
        (Call::Forward { output_shapes, .. }, Given::Shape) => {
            bare(output_shapes[s - usize::from(prog.n_inputs)])
        }
        (Call::Backward { input_shapes, .. }, Given::Shape) => bare(input_shapes[s]),
        (Call::Backward { outputs, .. }, Given::Layout) => outputs[s - usize::from(prog.n_inputs)],
        (Call::Grad { .. }, Given::Shape) => bare(slot_shape(prog, call, s)),
        (
            Call::Grad {
                inputs,
                output_grads,
                ..
            },
            Given::Layout,
        ) => {
            let n = usize::from(prog.n_tensors);
            if s < n {
                inputs[s]
            } else {
                output_grads[s - n]
            }
        }
    }
}

/// A slot the call gives nothing of.
const BARE: Spec<'static> = Spec {
    shape: &[],
    attr: &NO_LAYOUT,
};

/// Slots a call's specs hold without a heap allocation.
const INLINE_SPECS: usize = 8;

/// Writes every slot's shape and layout into `out` (bare on entry, one
/// per slot), as the call gives them.
#[inline(always)]
fn fill_specs<'c>(prog: &Program, call: &Call<'c>, out: &mut [Spec<'c>]) {
    let n_in = usize::from(prog.n_inputs);
    let given = |s: usize| prog.slots[s].given;
    match *call {
        // The common cases, without a match per slot: forward inputs as
        // given, outputs bare or shaped; backward inputs shaped, outputs
        // as given.
        Call::Forward {
            inputs,
            output_shapes,
            ..
        } if inputs.len() == n_in => {
            out[..n_in].copy_from_slice(inputs);
            if output_shapes.len() == out.len() - n_in {
                for (o, &shape) in out[n_in..].iter_mut().zip(output_shapes) {
                    o.shape = shape;
                }
            }
        }
        Call::Backward {
            input_shapes,
            outputs,
            ..
        } if input_shapes.len() == n_in && outputs.len() == out.len() - n_in => {
            for (s, (o, &shape)) in out[..n_in].iter_mut().zip(input_shapes).enumerate() {
                if given(s) == Given::Shape {
                    o.shape = shape;
                }
            }
            for (k, (o, spec)) in out[n_in..].iter_mut().zip(outputs).enumerate() {
                if given(n_in + k) == Given::Layout {
                    *o = *spec;
                }
            }
        }
        _ => {
            for (s, o) in out.iter_mut().enumerate() {
                *o = slot_spec(prog, call, s);
            }
        }
    }
}

impl<'c> Run<'_, '_, 'c> {
    /// Steps 2 to 5, once the extents are known; `checked`: whether the
    /// layouts are checked already.
    #[inline]
    pub(crate) fn go<T: Trace + ?Sized, S: Sink>(
        &mut self,
        checked: bool,
        trace: &mut T,
        sink: &mut S,
    ) -> Result<(), SpmdError> {
        match self.prog.direction {
            Direction::Forward => self.go_forward(checked, trace, sink),
            Direction::Backward => self.go_backward(checked, trace, sink),
            Direction::Grad => self.go_grad(trace, sink),
        }
    }

    /// Merges the present slots of `slots`, in order, that `merges`
    /// accepts; the other present ones are only checked (unless
    /// `checked`). Each unchecked layout is checked before any merge error
    /// a later one could hide.
    #[inline(always)]
    fn merge_in_order<T: Trace + ?Sized>(
        &mut self,
        slots: core::ops::Range<usize>,
        merges: impl Fn(usize) -> bool,
        checked: bool,
        trace: &mut T,
    ) -> Result<(), SpmdError> {
        let all = self.slots;
        let present = |s: &usize| all[*s].present;
        for s in slots.clone().filter(present) {
            let merged = if merges(s) {
                self.merge(s, !checked, trace)
            } else if !checked {
                self.check_layout(s)
            } else {
                Ok(())
            };
            if merged.is_err() && !checked {
                for t in (s + 1..slots.end).filter(present) {
                    self.check_layout(t)?;
                }
            }
            merged?;
        }
        Ok(())
    }

    #[inline(never)]
    fn go_forward<T: Trace + ?Sized, S: Sink>(
        &mut self,
        checked: bool,
        trace: &mut T,
        sink: &mut S,
    ) -> Result<(), SpmdError> {
        let rule = self.rule;
        let prog = self.prog;
        let n_in = usize::from(prog.n_inputs);
        let slots = self.slots;
        let present = |s: usize| slots[s].present;
        // First-wins settles an axis given two shardings as it settles a
        // mesh dim two axes claim: the first claim stays, the later input
        // is resharded (Paddle's elementwise merge answers these too).
        self.settle_clashes = rule.options.policy.conflicts == Conflicts::FirstWins;
        // What the merge reads: present inputs that do not follow
        // the others.
        let merged = |i: usize| present(i) && !rule.options.follows.contains(i);
        let mut aligned_partial = Partial::NONE;
        // The derived side's table, where it differs from the given side's.
        let mut derived = None;
        match rule.options.policy.conflicts {
            Conflicts::RolePriority => self.merge_by_role(trace),
            Conflicts::Align => {
                let ops: SmallVec<[usize; 8]> = (0..n_in).filter(|&i| merged(i)).collect();
                aligned_partial = self.merge_aligned(&ops);
            }
            _ => {
                self.merge_in_order(0..n_in, merged, checked, trace)?;
                self.resolve(trace)?;
                // Given side: the inputs; derived side: the outputs.
                self.fit(&mut derived, trace);
            }
        }
        let derived = derived.as_ref().unwrap_or(&self.map.sharding);
        self.answer_forward(derived, aligned_partial, trace, sink)
    }

    #[inline(never)]
    fn go_backward<T: Trace + ?Sized, S: Sink>(
        &mut self,
        checked: bool,
        trace: &mut T,
        sink: &mut S,
    ) -> Result<(), SpmdError> {
        let rule = self.rule;
        let prog = self.prog;
        let n_in = usize::from(prog.n_inputs);
        let slots = self.slots;
        let present = |s: usize| slots[s].present;
        let outputs = n_in..usize::from(prog.n_given);
        // As forward: first-wins keeps an axis's first claim among the
        // given outputs, and the later output is resharded.
        self.settle_clashes = rule.options.policy.conflicts == Conflicts::FirstWins;
        // The outputs declared `merge(first(..))`, then the others, each
        // in order; outputs that follow take no part.
        let merges = |s: usize| present(s) && !rule.options.follows_outputs.contains(s - n_in);
        let first = |s: usize| rule.options.merge_first.contains(s - n_in);
        if rule.options.merge_first.is_empty() {
            self.merge_in_order(outputs.clone(), merges, checked, trace)?;
        } else {
            for s in outputs.clone().filter(|&s| merges(s) && first(s)) {
                self.merge(s, false, trace)?;
            }
            for s in outputs.filter(|&s| merges(s) && !first(s)) {
                self.merge(s, false, trace)?;
            }
        }
        self.resolve(trace)?;
        // Given side: the outputs; derived side: the inputs.
        let mut derived = None;
        self.fit(&mut derived, trace);
        // Partial Stage-II: what explains the given outputs'
        // partial status.
        let by_inputs = if rule.options.policy.backward_partial == BackwardPartial::Explain {
            self.explain_partials(&mut derived, trace)
        } else {
            Partial::NONE
        };
        if rule.options.policy.missing_axis == MissingAxis::Error {
            self.check_no_missing_axis()?;
        }
        if trace.enabled() {
            self.trace_missing_axes(trace);
        }
        let derived = derived.as_ref().unwrap_or(&self.map.sharding);
        self.answer_backward(derived, by_inputs, sink)
    }

    #[inline(never)]
    fn go_grad<T: Trace + ?Sized, S: Sink>(
        &mut self,
        trace: &mut T,
        sink: &mut S,
    ) -> Result<(), SpmdError> {
        let rule = self.rule;
        let prog = self.prog;
        let slots = self.slots;
        let present = |s: usize| slots[s].present;
        let plan = &rule.plan;
        // What the grad op reads: not the inputs the rule says it
        // ignores, nor an addend (`d bias = Σ dy`, and no other
        // grad reads a bias). Inputs that follow the others are
        // read but do not merge.
        let merges = |s: usize| {
            present(s)
                && self.slots[s].input.is_none_or(|i| {
                    let i = usize::from(i);
                    !rule.options.grad_ignores.contains(i)
                        && !plan.is_addend(i)
                        && !rule.options.follows.contains(i)
                })
        };
        // An input the grad op reads for its shape alone
        // (`grad(ignores(..))`) claims its axes first: its grad comes out
        // in its own layout, and the operands the grad op reads are
        // resharded to agree (a sum's or an embedding's output grad, the
        // smaller side), rather than the input being gathered only to be
        // read for its shape and its grad resharded back.
        let shape_only = |s: usize| {
            present(s)
                && self.slots[s]
                    .input
                    .is_some_and(|i| rule.options.grad_ignores.contains(usize::from(i)))
        };
        let operands = 0..usize::from(prog.n_given);
        let order = operands
            .clone()
            .filter(|&s| shape_only(s))
            .chain(operands.filter(|&s| merges(s)));
        // The grad op's operands come in layouts nothing made agree (the
        // forward inputs as saved, output grads as the next op wrote
        // them): an axis given two shardings keeps the first, and the
        // later operand is required resharded to it, where forward would
        // have answered the call. Mesh dims claimed twice still settle by
        // the rule's policy.
        self.settle_clashes = true;
        if rule.options.policy.conflicts == Conflicts::Align {
            let ops: SmallVec<[usize; 8]> = order.collect();
            // The grads come back whole: a shared partial is not kept here.
            self.merge_aligned(&ops);
        } else {
            for s in order {
                self.merge(s, false, trace)?;
            }
            self.resolve(trace)?;
        }
        // Given side: the grad op's inputs; derived side: the
        // input grads.
        let mut derived = None;
        self.fit(&mut derived, trace);
        let derived = derived.as_ref().unwrap_or(&self.map.sharding);
        self.answer_grad(derived, trace, sink)
    }

    /// Backward, `MissingAxis::Error`: fails on the first input dim whose
    /// axis no output has.
    fn check_no_missing_axis(&self) -> Result<(), SpmdError> {
        let out_axes = self.prog.output_axes;
        for i in 0..usize::from(self.prog.n_inputs) {
            let shape = self.specs[i].shape;
            for dim in 0..shape.len() {
                if let Some(a) = self.carrier(i, dim)
                    && !out_axes.contains(a)
                {
                    return Err(SpmdError::MissingAxis {
                        op: self.rule.name,
                        tensor: TensorRef::input(i),
                        dim,
                        axis: self.axis_name(a),
                    });
                }
            }
        }
        Ok(())
    }

    /// Tells `trace` of every input dim whose axis no output has
    /// (backward's replicated fallback).
    fn trace_missing_axes<T: Trace + ?Sized>(&self, trace: &mut T) {
        let out_axes = self.prog.output_axes;
        for i in 0..usize::from(self.prog.n_inputs) {
            let shape = self.specs[i].shape;
            for dim in 0..shape.len() {
                if let Some(a) = self.carrier(i, dim)
                    && !out_axes.contains(a)
                {
                    trace.missing_axis(TensorRef::input(i), dim, self.axis_name(a));
                }
            }
        }
    }
}
