//! A call compiled: every check that the call is well formed for its rule
//! (arity, absent tensors, layouts against shapes and mesh, ranks against
//! terms), and flat tables of what each tensor dim is. The interpreter
//! reads these tables, the shapes and the layouts, and nothing of the
//! notation's own structure.
//!
//! The tensors of a call are *slots*, in the call's order: forward and
//! backward calls have the inputs, then the outputs; a grad call has the
//! grad op's tensors (its forward tensors, then its output grads), then
//! one answer slot per forward input with a gradient.

use smallvec::SmallVec;
use spmd_notation::{AxisSet, Dim, Term};

use super::check::{ellipsis_len, rank_error, validate};
use super::roles::RolePlan;
use crate::dist_attr::Spec;
use crate::error::{RankNeed, Role, SpmdError, TensorRef};
use crate::mesh::Mesh;
use crate::op::Call;
use crate::optional::Absent;
use crate::rule::EinsumRule;
use crate::signature::{GradSignature, GradTensor};

/// No axis: a `1` dim, or a dim that never carries a sharding.
pub(crate) const NONE: u8 = u8::MAX;
/// Axes a call may have (labels and `...` dims); one id (63) stands for the
/// dims that never carry a sharding in the merge's claims.
pub(crate) const MAX_AXES: usize = 63;

/// The direction of a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Direction {
    Forward,
    Backward,
    Grad,
}

/// What one tensor dim is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DimCode {
    /// Its plain axis (a label or a `...` dim); [`NONE`] for `1` and for a
    /// compound.
    pub(crate) axis: u8,
    /// The axis its sharding goes to when its size is not 1: the plain
    /// axis, or a compound's major factor; [`NONE`] for `1` and for an axis
    /// that is never sharded.
    pub(crate) carrier: u8,
    /// The axis its sharding goes to in this call: its carrier, unless the
    /// call gives its size as 1 (a size-1 dim holds no part of its axis).
    pub(crate) live: u8,
    /// A compound's factors are `compound_axes[start .. start + len]` of
    /// the plan; `len` is 0 for any other dim.
    pub(crate) start: u16,
    pub(crate) len: u8,
}

impl DimCode {
    /// A `1` dim.
    const ONE: DimCode = DimCode {
        axis: NONE,
        carrier: NONE,
        live: NONE,
        start: 0,
        len: 0,
    };

    /// A dim of plain axis `a`.
    #[inline(always)]
    fn axis(a: u8, never: AxisSet) -> DimCode {
        let carrier = if never.contains(a) { NONE } else { a };
        DimCode {
            axis: a,
            carrier,
            live: carrier,
            start: 0,
            len: 0,
        }
    }
}

/// What the call gives of a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Given {
    /// Its shape and layout.
    Layout,
    /// Its shape.
    Shape,
    /// Nothing: the tensor is an answer only (a forward output whose
    /// shape was not declared, an input grad the grad op does not take).
    Nothing,
}

/// One tensor of the call.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Slot {
    /// How errors and traces name it.
    pub(crate) t: TensorRef,
    pub(crate) term: Term,
    pub(crate) rank: u16,
    /// Its first dim in [`Program::dims`].
    pub(crate) at: u16,
    pub(crate) present: bool,
    pub(crate) given: Given,
    /// The forward input it is, when it is one (in a grad call, the
    /// signature says which).
    pub(crate) input: Option<u8>,
    /// The term's axes, the `...` dims included.
    pub(crate) axes: AxisSet,
    /// An input grad's slot: the grad op's slot of its forward input, when
    /// the grad op takes it ([`NONE`] otherwise, and for other slots).
    pub(crate) twin: u8,
    /// The axes it really holds in this call: its plain and compound dims,
    /// not its `1` dims nor its size-1 dims (with no shape given, its
    /// term's axes).
    pub(crate) carried: AxisSet,
}

/// A call compiled for its rule (see the module docs). Owned: a prepared
/// call keeps one. Its fields are in the order a run reads them (see
/// `Compiled`): the scalars and sets, the dims, then the slots.
#[derive(Clone, Debug)]
#[repr(C)]
pub(crate) struct Program {
    pub(crate) direction: Direction,
    pub(crate) n_labels: u8,
    /// How many dims `...` stands for.
    pub(crate) width: u8,
    pub(crate) n_axes: u8,
    /// The rule's forward inputs and outputs.
    pub(crate) n_inputs: u8,
    pub(crate) n_outputs: u8,
    /// Slots `0..n_given` are the call's tensors; in a grad call, the
    /// rest are its answers (input grads).
    pub(crate) n_given: u8,
    /// Forward and backward: slots of inputs are `0..n_inputs`, of
    /// outputs the rest. Grad: the grad op's tensors are `0..n_tensors`,
    /// its output grads `n_tensors..n_given`.
    pub(crate) n_tensors: u8,
    /// While compiling: whether layouts are checked.
    check_layouts: bool,
    /// Axes that never carry a sharding: declared, diagonals, minor
    /// compound factors.
    pub(crate) never: AxisSet,
    /// The dims `...` stands for.
    pub(crate) ellipsis: AxisSet,
    /// Every axis of the inputs' terms (the `...` dims when an input term
    /// has one), as [`Plan::input_axes`](spmd_notation::Plan::input_axes)
    /// counts them, and of the outputs' terms.
    pub(crate) input_axes: AxisSet,
    pub(crate) output_axes: AxisSet,
    /// The call's absent tensors (its own slots: a grad call's follow its
    /// signature).
    pub(crate) absent: Absent,
    pub(crate) dims: SmallVec<[DimCode; 16]>,
    pub(crate) slots: SmallVec<[Slot; 6]>,
    /// A forward call under role priority: its merge, settled from the
    /// shapes (empty otherwise).
    pub(crate) roles: RolePlan,
    /// Axes whose sharding must divide their extent whatever the
    /// divisibility policy, as the notation and conflict policy decide
    /// (see `merge::must_divide`).
    pub(crate) must_divide: AxisSet,
}

impl Program {
    /// The dims of slot `s`.
    #[inline(always)]
    pub(crate) fn dims_of(&self, s: usize) -> &[DimCode] {
        let slot = &self.slots[s];
        &self.dims[slot.at as usize..slot.at as usize + slot.rank as usize]
    }

    /// A term's axes, its `...` dims included.
    #[inline]
    pub(crate) fn term_axes(&self, rule: &EinsumRule<'_>, term: Term) -> AxisSet {
        let axes = rule.plan.axes_of(term);
        if term.ellipsis.is_some() {
            axes.union(self.ellipsis)
        } else {
            axes
        }
    }

    /// A program with nothing compiled yet (its tables' inline storage is
    /// not written until compiled: compiling fills it in place).
    #[inline(always)]
    pub(crate) fn empty() -> Program {
        Program {
            direction: Direction::Forward,
            n_labels: 0,
            width: 0,
            n_axes: 0,
            n_inputs: 0,
            n_outputs: 0,
            n_given: 0,
            n_tensors: 0,
            slots: SmallVec::new(),
            dims: SmallVec::new(),
            roles: RolePlan::default(),
            must_divide: AxisSet::EMPTY,
            never: AxisSet::EMPTY,
            ellipsis: AxisSet::EMPTY,
            input_axes: AxisSet::EMPTY,
            output_axes: AxisSet::EMPTY,
            absent: Absent::NONE,
            check_layouts: true,
        }
    }

    /// Starts compiling a call of `rule` in `direction`.
    #[inline(always)]
    fn start(&mut self, rule: &EinsumRule<'_>, direction: Direction, absent: Absent) {
        let plan = &rule.plan;
        self.direction = direction;
        self.n_labels = plan.n_axes() as u8;
        self.n_inputs = plan.n_inputs() as u8;
        self.n_outputs = plan.n_outputs() as u8;
        self.never = rule
            .never_sharded
            .union(plan.diagonal)
            .union(plan.compound_minor);
        self.absent = absent;
        self.slots.clear();
        self.dims.clear();
    }

    /// Checks a layout while compiling, unless only shapes are compiled.
    #[inline(always)]
    fn validate(
        &self,
        rule: &EinsumRule<'_>,
        t: TensorRef,
        spec: &Spec<'_>,
        mesh: &Mesh,
    ) -> Result<(), SpmdError> {
        if self.check_layouts {
            validate(rule.name, t, spec, mesh)
        } else {
            Ok(())
        }
    }

    /// Sets the `...` width, once every rank that decides it is read.
    fn set_width(&mut self, rule: &EinsumRule<'_>, width: usize) -> Result<(), SpmdError> {
        let n_axes = usize::from(self.n_labels) + width;
        if n_axes > MAX_AXES {
            return Err(SpmdError::TooManyAxes {
                op: rule.name,
                count: n_axes,
            });
        }
        self.width = width as u8;
        self.n_axes = n_axes as u8;
        self.ellipsis = if width == 0 {
            AxisSet::EMPTY
        } else {
            AxisSet((u64::MAX >> (64 - width)) << self.n_labels)
        };
        let plan = &rule.plan;
        self.input_axes = if plan.inputs_have_ellipsis() {
            plan.input_axes.union(self.ellipsis)
        } else {
            plan.input_axes
        };
        let mut out = AxisSet::EMPTY;
        for o in 0..plan.n_outputs() {
            out = out.union(self.term_axes(rule, plan.output(o)));
        }
        self.output_axes = out;
        Ok(())
    }

    /// The rank a term has with this call's `...` width.
    #[inline]
    pub(crate) fn rank_of(&self, term: Term) -> usize {
        term.len as usize
            + if term.ellipsis.is_some() {
                usize::from(self.width)
            } else {
                0
            }
    }

    /// Appends a slot for `term` at `rank` (already checked against the
    /// term); its dims are written by [`Program::fill_dims`].
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn push(
        &mut self,
        rule: &EinsumRule<'_>,
        t: TensorRef,
        term: Term,
        rank: usize,
        present: bool,
        given: Given,
        input: Option<u8>,
    ) {
        let at = match self.slots.last() {
            Some(last) => last.at + last.rank,
            None => 0,
        };
        let mut axes = rule.plan.axes_of(term);
        if term.ellipsis.is_some() {
            axes = axes.union(self.ellipsis);
        }
        self.slots.push(Slot {
            t,
            term,
            rank: if present { rank as u16 } else { 0 },
            at,
            present,
            given,
            input,
            axes,
            twin: NONE,
            carried: axes,
        });
    }

    /// Writes every present slot's dims, once the slots are pushed: the
    /// table is sized once and filled through one slice.
    fn fill_dims(&mut self, rule: &EinsumRule<'_>) {
        let total = self.slots.last().map_or(0, |s| usize::from(s.at + s.rank));
        self.dims.clear();
        self.dims.resize(total, DimCode::ONE);
        let first_ellipsis = usize::from(self.n_labels) + usize::from(self.width);
        let never = self.never;
        let dims = &mut self.dims[..];
        for slot in &self.slots[..] {
            if slot.present {
                let at = usize::from(slot.at);
                let out = &mut dims[at..at + usize::from(slot.rank)];
                write_dims(rule, slot.term, never, first_ellipsis, out);
            }
        }
    }

    /// Compiles a forward call: the inputs' layouts and ranks checked (in
    /// input order), the declared output shapes' ranks.
    fn forward(
        &mut self,
        rule: &EinsumRule<'_>,
        mesh: &Mesh,
        inputs: &[Spec<'_>],
        output_shapes: &[&[usize]],
        absent: Absent,
    ) -> Result<(), SpmdError> {
        let plan = &rule.plan;
        arity(rule, Role::Input, plan.n_inputs(), inputs.len())?;
        absent.within(rule.name, rule.options.optional)?;
        let p = self;
        p.start(rule, Direction::Forward, absent);
        let mut width = 0;
        for (i, spec) in inputs.iter().enumerate() {
            if absent.input(i) {
                continue;
            }
            let t = TensorRef::input(i);
            p.validate(rule, t, spec, mesh)?;
            width = width.max(ellipsis_len(rule, t, plan.input(i), spec.shape.len())?);
        }
        p.set_width(rule, width)?;
        for (i, spec) in inputs.iter().enumerate() {
            let present = !absent.input(i);
            let t = TensorRef::input(i);
            p.push(
                rule,
                t,
                plan.input(i),
                spec.shape.len(),
                present,
                Given::Layout,
                Some(i as u8),
            );
        }
        // Declared output shapes count only when there is one per output.
        let declared = output_shapes.len() == plan.n_outputs();
        for o in 0..plan.n_outputs() {
            let term = plan.output(o);
            let t = TensorRef::output(o);
            let rank = p.rank_of(term);
            // An absent output is answered all the same; only its declared
            // shape is not read.
            // (Its rank is checked with the extents, after the inputs'.)
            let given = if declared && !absent.output(o) {
                Given::Shape
            } else {
                Given::Nothing
            };
            p.push(rule, t, term, rank, true, given, None);
        }
        p.n_given = p.slots.len() as u8;
        p.n_tensors = plan.n_inputs() as u8;
        p.fill_dims(rule);
        Ok(())
    }

    /// Compiles a backward call: the inputs' shapes and the outputs'
    /// layouts and ranks checked.
    fn backward(
        &mut self,
        rule: &EinsumRule<'_>,
        mesh: &Mesh,
        input_shapes: &[&[usize]],
        outputs: &[Spec<'_>],
        absent: Absent,
    ) -> Result<(), SpmdError> {
        let plan = &rule.plan;
        arity(rule, Role::Input, plan.n_inputs(), input_shapes.len())?;
        arity(rule, Role::Output, plan.n_outputs(), outputs.len())?;
        absent.within(rule.name, rule.options.optional)?;
        let p = self;
        p.start(rule, Direction::Backward, absent);
        let mut width = 0;
        for (i, shape) in input_shapes.iter().enumerate() {
            if !absent.input(i) {
                let t = TensorRef::input(i);
                width = width.max(ellipsis_len(rule, t, plan.input(i), shape.len())?);
            }
        }
        for (o, spec) in outputs.iter().enumerate() {
            if absent.output(o) {
                continue;
            }
            let t = TensorRef::output(o);
            p.validate(rule, t, spec, mesh)?;
            let term = plan.output(o);
            let need = term.len as usize + if term.ellipsis.is_some() { width } else { 0 };
            if spec.shape.len() != need {
                return Err(rank_error(
                    rule,
                    t,
                    term,
                    spec.shape.len(),
                    RankNeed::Exactly(need),
                ));
            }
        }
        p.set_width(rule, width)?;
        for (i, shape) in input_shapes.iter().enumerate() {
            let present = !absent.input(i);
            p.push(
                rule,
                TensorRef::input(i),
                plan.input(i),
                shape.len(),
                present,
                Given::Shape,
                Some(i as u8),
            );
        }
        for (o, spec) in outputs.iter().enumerate() {
            let present = !absent.output(o);
            p.push(
                rule,
                TensorRef::output(o),
                plan.output(o),
                spec.shape.len(),
                present,
                Given::Layout,
                None,
            );
        }
        p.n_given = p.slots.len() as u8;
        p.n_tensors = plan.n_inputs() as u8;
        p.fill_dims(rule);
        Ok(())
    }

    /// Compiles a grad call: the grad op's tensors read in the rule's
    /// signature (or the derived one, when the counts do not fit it),
    /// their layouts and ranks checked, and one answer slot per input
    /// with a gradient.
    fn grad(
        &mut self,
        rule: &EinsumRule<'_>,
        mesh: &Mesh,
        inputs: &[Spec<'_>],
        output_grads: &[Spec<'_>],
        absent: Absent,
        signature: GradSignature<'_>,
    ) -> Result<(), SpmdError> {
        let plan = &rule.plan;
        let sig = signature.for_call(inputs.len(), output_grads.len());
        // The grad op's tensors are not the forward op's: no names to give.
        let arity = |role, expected, found| {
            if expected == found {
                Ok(())
            } else {
                Err(SpmdError::Arity {
                    op: rule.name,
                    role,
                    expected,
                    found,
                    names: &[],
                })
            }
        };
        arity(Role::Input, sig.n_tensors(plan.n_inputs()), inputs.len())?;
        arity(
            Role::Output,
            sig.n_grads(plan.n_outputs()),
            output_grads.len(),
        )?;
        // A grad call's slots follow its signature; which tensors may be
        // absent is declared on the forward tensors they stand for.
        let mut forward = Absent::NONE;
        for k in 0..inputs.len().min(64) {
            if absent.input(k) {
                match sig.tensor(k) {
                    GradTensor::Input(i) => forward.inputs |= bit(i.into()),
                    GradTensor::Output(o) => forward.outputs |= bit(o.into()),
                }
            }
        }
        for g in 0..output_grads.len().min(64) {
            if absent.output(g) {
                forward.outputs |= bit(sig.grad_of(g));
            }
        }
        forward.within(rule.name, rule.options.optional)?;
        let p = self;
        p.start(rule, Direction::Grad, absent);
        // Each tensor of the grad op: its term and the forward input it is.
        let term_of = |k: usize| match sig.tensor(k) {
            GradTensor::Input(i) => (plan.input(i as usize), Some(i)),
            GradTensor::Output(o) => (plan.output(o as usize), None),
        };
        // Forward inputs set the width of `...` (they may broadcast); when
        // the grad op takes none, the outputs and grads do.
        let mut width = 0;
        let mut from_inputs = false;
        for (k, spec) in inputs.iter().enumerate() {
            let (term, input) = term_of(k);
            if !absent.input(k) && input.is_some() {
                let t = TensorRef::input(k);
                p.validate(rule, t, spec, mesh)?;
                width = width.max(ellipsis_len(rule, t, term, spec.shape.len())?);
                from_inputs = true;
            }
        }
        let others = || {
            let values = inputs
                .iter()
                .enumerate()
                .filter(|&(k, _)| term_of(k).1.is_none())
                .map(|(k, s)| (TensorRef::input(k), term_of(k).0, s));
            let grads = output_grads
                .iter()
                .enumerate()
                .map(|(g, s)| (TensorRef::output(g), plan.output(sig.grad_of(g)), s));
            values.chain(grads)
        };
        let present = |t: TensorRef| match t.role {
            Role::Input => !absent.input(t.index),
            Role::Output => !absent.output(t.index),
        };
        for (t, term, spec) in others() {
            if !present(t) {
                continue;
            }
            p.validate(rule, t, spec, mesh)?;
            if !from_inputs {
                width = width.max(ellipsis_len(rule, t, term, spec.shape.len())?);
            }
        }
        for (t, term, spec) in others() {
            if !present(t) {
                continue;
            }
            let need = term.len as usize + if term.ellipsis.is_some() { width } else { 0 };
            if spec.shape.len() != need {
                return Err(rank_error(
                    rule,
                    t,
                    term,
                    spec.shape.len(),
                    RankNeed::Exactly(need),
                ));
            }
        }
        p.set_width(rule, width)?;
        for (k, spec) in inputs.iter().enumerate() {
            let (term, input) = term_of(k);
            let t = TensorRef::input(k);
            p.push(
                rule,
                t,
                term,
                spec.shape.len(),
                present(t),
                Given::Layout,
                input,
            );
        }
        for (g, spec) in output_grads.iter().enumerate() {
            let t = TensorRef::output(g);
            let term = plan.output(sig.grad_of(g));
            p.push(
                rule,
                t,
                term,
                spec.shape.len(),
                present(t),
                Given::Layout,
                None,
            );
        }
        p.n_given = p.slots.len() as u8;
        p.n_tensors = inputs.len() as u8;
        // The answers: one input grad per forward input with a gradient,
        // of its input's rank where the grad op takes the input.
        for j in 0..plan.n_inputs() {
            if rule.options.no_grad.contains(j) {
                continue;
            }
            let term = plan.input(j);
            let twin = sig.position(GradTensor::Input(j as u8), inputs.len());
            let (rank, given, present) = match twin {
                Some(k) => (p.slots[k].rank as usize, Given::Shape, p.slots[k].present),
                None => (p.rank_of(term), Given::Nothing, true),
            };
            p.push(
                rule,
                TensorRef::input(j),
                term,
                rank,
                present,
                given,
                Some(j as u8),
            );
            p.slots.last_mut().expect("just pushed").twin = twin.map_or(NONE, |k| k as u8);
        }
        p.fill_dims(rule);
        Ok(())
    }

    /// Reads the call's shapes (`shape(s)`, for slots it gives a shape
    /// of): which dims are size 1, and so which axes each slot carries.
    pub(crate) fn read_sizes<'s>(
        &mut self,
        rule: &EinsumRule<'_>,
        shape: impl Fn(usize) -> &'s [usize],
    ) {
        let plan = &rule.plan;
        let dims = &mut self.dims[..];
        for (s, slot) in self.slots.iter_mut().enumerate() {
            if !slot.present {
                slot.carried = AxisSet::EMPTY;
                continue;
            }
            if slot.given == Given::Nothing {
                continue;
            }
            let at = usize::from(slot.at);
            let mut carried = AxisSet::EMPTY;
            for (d, &size) in dims[at..at + usize::from(slot.rank)]
                .iter_mut()
                .zip(shape(s))
            {
                if size == 1 {
                    d.live = NONE;
                    continue;
                }
                if d.axis != NONE {
                    carried = carried.with(d.axis);
                } else if d.len > 0 {
                    for &a in plan.compound(d.start, d.len) {
                        carried = carried.with(a);
                    }
                }
            }
            slot.carried = carried;
        }
    }

    /// Checks the layouts of a call whose shapes this program was compiled
    /// for, in the order compiling checks them: the only errors such a
    /// call can have.
    #[inline]
    pub(crate) fn validate_layouts(
        &self,
        rule: &EinsumRule<'_>,
        call: &Call<'_>,
    ) -> Result<(), SpmdError> {
        let slots = &self.slots[..];
        let mesh = call.mesh();
        let checked = |s: usize| slots[s].present && slots[s].given == Given::Layout;
        match *call {
            Call::Forward { inputs, .. } => {
                for (i, spec) in inputs.iter().enumerate() {
                    if checked(i) {
                        validate(rule.name, slots[i].t, spec, mesh)?;
                    }
                }
            }
            Call::Backward { outputs, .. } => {
                let n_in = usize::from(self.n_inputs);
                for (o, spec) in outputs.iter().enumerate() {
                    if checked(n_in + o) {
                        validate(rule.name, slots[n_in + o].t, spec, mesh)?;
                    }
                }
            }
            Call::Grad {
                inputs,
                output_grads,
                ..
            } => {
                // The grad op's forward inputs first, then the rest.
                for (k, spec) in inputs.iter().enumerate() {
                    if checked(k) && slots[k].input.is_some() {
                        validate(rule.name, slots[k].t, spec, mesh)?;
                    }
                }
                for (k, spec) in inputs.iter().enumerate() {
                    if checked(k) && slots[k].input.is_none() {
                        validate(rule.name, slots[k].t, spec, mesh)?;
                    }
                }
                let n = inputs.len();
                for (g, spec) in output_grads.iter().enumerate() {
                    if checked(n + g) {
                        validate(rule.name, slots[n + g].t, spec, mesh)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Compiles `call` for `rule` into this program; `layouts`: whether
    /// the call's layouts are checked too (a preparation reads only
    /// shapes).
    pub(crate) fn compile(
        &mut self,
        rule: &EinsumRule<'_>,
        call: &Call<'_>,
        layouts: bool,
    ) -> Result<(), SpmdError> {
        self.check_layouts = layouts;
        match *call {
            Call::Forward {
                mesh,
                inputs,
                output_shapes,
                absent,
                ..
            } => self.forward(rule, mesh, inputs, output_shapes, absent),
            Call::Backward {
                mesh,
                input_shapes,
                outputs,
                absent,
            } => self.backward(rule, mesh, input_shapes, outputs, absent),
            Call::Grad {
                mesh,
                inputs,
                output_grads,
                absent,
                ..
            } => self.grad(
                rule,
                mesh,
                inputs,
                output_grads,
                absent,
                rule.options.grad_signature,
            ),
        }
    }
}

/// The dims of `term` into `out` (one per dim of its tensor): the `...`
/// dims are numbered after the labels, right-aligned, so that the last
/// `...` dim of every term is the same axis (`first_ellipsis` is one past
/// the last `...` axis).
#[inline]
fn write_dims(
    rule: &EinsumRule<'_>,
    term: Term,
    never: AxisSet,
    first_ellipsis: usize,
    out: &mut [DimCode],
) {
    let plan = &rule.plan;
    let dims = plan.dims_of(term);
    let code = |d: Dim| match d {
        Dim::Axis(a) => DimCode::axis(a, never),
        Dim::One => DimCode::ONE,
        Dim::Compound { start, len } => {
            let major = plan.compound_axes[start as usize];
            let carrier = if never.contains(major) { NONE } else { major };
            DimCode {
                axis: NONE,
                carrier,
                live: carrier,
                start,
                len,
            }
        }
    };
    match term.ellipsis {
        None => {
            for (o, &d) in out.iter_mut().zip(dims) {
                *o = code(d);
            }
        }
        Some(e) => {
            let e = e as usize;
            let ell = out.len() - dims.len();
            let (head, rest) = out.split_at_mut(e);
            let (middle, tail) = rest.split_at_mut(ell);
            for (o, &d) in head.iter_mut().zip(&dims[..e]) {
                *o = code(d);
            }
            for (k, o) in middle.iter_mut().enumerate() {
                *o = DimCode::axis((first_ellipsis - ell + k) as u8, never);
            }
            for (o, &d) in tail.iter_mut().zip(&dims[e..]) {
                *o = code(d);
            }
        }
    }
}

fn arity(
    rule: &EinsumRule<'_>,
    role: Role,
    expected: usize,
    found: usize,
) -> Result<(), SpmdError> {
    if expected == found {
        Ok(())
    } else {
        Err(SpmdError::Arity {
            op: rule.name,
            role,
            expected,
            found,
            names: match role {
                Role::Input => rule.options.input_names,
                Role::Output => rule.options.output_names,
            },
        })
    }
}

/// Bit `i` of a tensor mask; tensors past the 64th have none.
pub(crate) fn bit(i: usize) -> u64 {
    u32::try_from(i)
        .ok()
        .and_then(|i| 1u64.checked_shl(i))
        .unwrap_or(0)
}
