//! The public checks and their [`Report`].
//!
//! Each check runs a rule, lays the inputs out on the simulated mesh as the
//! rule *requires* them, computes the op on every device over the blocks it
//! holds, reduces partial results over their partial mesh dims with their
//! reduce types, and compares every device's result with the block of the
//! dense result that the rule's answer says the device holds.

use core::fmt;
use core::ops::Range;
use spmd_core::SpmdRuleExt;
use std::panic::{AssertUnwindSafe, catch_unwind};

use spmd_core::notation::Notation;
use spmd_core::{DistAttr, EinsumRule, Mesh, ReduceType, RuleResult, Spec, SpmdError, SpmdRule};

use crate::eval::{EvalError, Layout, Slot, contract, slots_shape};
use crate::mesh_sim::{
    self, Device, Operand, axis_ranges, block_of, box_of, compare, devices, local_value,
    reduce_partials,
};
use crate::tensor::{Tensor, Values};

/// Which inference a report is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    Forward,
    Backward,
    Grad,
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Direction::Forward => "forward",
            Direction::Backward => "backward",
            Direction::Grad => "grad",
        })
    }
}

/// One input of a generic check: its global value and its given dist attr.
#[derive(Clone, Debug, PartialEq)]
pub struct Input {
    pub value: Tensor,
    pub attr: DistAttr,
}

impl Input {
    pub fn new(value: Tensor, attr: DistAttr) -> Input {
        Input { value, attr }
    }

    /// An input of this shape holding [`Values::Integers`] probe values.
    pub fn probe(shape: &[usize], attr: DistAttr, seed: u64) -> Input {
        Input::new(Tensor::probe(shape, seed, Values::Integers), attr)
    }
}

/// Part of a dim that a device holds for one tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holding {
    pub tensor: String,
    pub dim: usize,
    pub range: Range<usize>,
}

impl fmt::Display for Holding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} dim {} holds [{}..{})",
            self.tensor, self.dim, self.range.start, self.range.end
        )
    }
}

/// What a check found.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Finding {
    /// The rule refused the call (an error): nothing to check, not unsound.
    Rejected(SpmdError),
    /// The checker could not set the case up (a notation, shapes, an
    /// unsupported feature): not about the rule.
    Setup(String),
    /// The rule's answer is malformed: a wrong number of attrs, a mapping
    /// whose length is not the tensor's rank, a mesh dim out of range or used
    /// twice, a mesh dim both partial and sharding.
    Malformed(String),
    /// A device cannot compute its part locally: two tensors it reads hold
    /// different parts of one axis (say an axis sharded differently in two
    /// required inputs).
    Inconsistent {
        device: Device,
        axis: String,
        first: Holding,
        second: Holding,
    },
    /// A device's block of a dim cannot be read as the axes of that dim: a
    /// size-1 (broadcast or `1`) dim split away, a compound dim's block that
    /// is not a box of its factors.
    Unreadable {
        device: Device,
        tensor: String,
        dim: usize,
        range: Range<usize>,
        why: String,
    },
    /// The local computation failed on a device.
    LocalFailed { device: Device, message: String },
    /// Devices reduced together for a partial result hold results of
    /// different shapes.
    PartialShapes {
        tensor: String,
        attr: DistAttr,
        first: (Device, Vec<usize>),
        second: (Device, Vec<usize>),
    },
    /// A device's result does not have the shape of the block the rule says
    /// it holds.
    WrongShape {
        tensor: String,
        attr: DistAttr,
        device: Device,
        block: Vec<Range<usize>>,
        expected: Vec<usize>,
        got: Vec<usize>,
    },
    /// A device's result differs from its block of the dense result.
    WrongValue {
        tensor: String,
        attr: DistAttr,
        device: Device,
        block: Vec<Range<usize>>,
        /// Global index of the first wrong value on `device`.
        index: Vec<usize>,
        expected: f64,
        got: f64,
        wrong_devices: usize,
        devices: usize,
    },
    /// Feeding backward's input requirements to forward gives another
    /// output attr than backward answered.
    Disagree {
        tensor: String,
        backward: DistAttr,
        forward: Result<DistAttr, SpmdError>,
    },
}

fn ranges(block: &[Range<usize>]) -> String {
    let parts: Vec<String> = block
        .iter()
        .map(|r| format!("{}..{}", r.start, r.end))
        .collect();
    format!("[{}]", parts.join(", "))
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Finding::Rejected(e) => write!(f, "the rule rejected the call: {e}"),
            Finding::Setup(m) => write!(f, "cannot check this case: {m}"),
            Finding::Malformed(m) => write!(f, "malformed answer: {m}"),
            Finding::Inconsistent {
                device,
                axis,
                first,
                second,
            } => write!(
                f,
                "{device} cannot compute locally: axis {axis} is split differently in the tensors it \
                 reads ({first}, but {second})"
            ),
            Finding::Unreadable {
                device,
                tensor,
                dim,
                range,
                why,
            } => write!(
                f,
                "{device} cannot compute locally: it holds [{}..{}) of {tensor} dim {dim}, and {why}",
                range.start, range.end
            ),
            Finding::LocalFailed { device, message } => {
                write!(f, "the local computation failed on {device}: {message}")
            }
            Finding::PartialShapes {
                tensor,
                attr,
                first,
                second,
            } => write!(
                f,
                "{tensor} is claimed {attr}, but the partial results to reduce have different \
                 shapes: {} holds {:?}, {} holds {:?}",
                first.0, first.1, second.0, second.1
            ),
            Finding::WrongShape {
                tensor,
                attr,
                device,
                block,
                expected,
                got,
            } => write!(
                f,
                "{tensor} is claimed {attr}: {device} should hold block {} (shape {expected:?}) \
                 but computes shape {got:?}",
                ranges(block)
            ),
            Finding::WrongValue {
                tensor,
                attr,
                device,
                block,
                index,
                expected,
                got,
                wrong_devices,
                devices,
            } => write!(
                f,
                "{tensor} is claimed {attr}: {device} holds block {}; at global index {index:?} \
                 expected {expected}, got {got} ({wrong_devices} of {devices} devices wrong)",
                ranges(block)
            ),
            Finding::Disagree {
                tensor,
                backward,
                forward,
            } => match forward {
                Ok(fw) => write!(
                    f,
                    "{tensor}: backward answered {backward}, but forward from backward's input \
                     requirements answers {fw}"
                ),
                Err(e) => write!(
                    f,
                    "{tensor}: backward answered {backward}, but forward rejects backward's input \
                     requirements: {e}"
                ),
            },
        }
    }
}

/// The outcome of a failed check: the call, the rule's answer, and the
/// finding. Pointer-sized, so `Result<_, Report>` stays cheap to return.
#[derive(Clone)]
pub struct Report {
    inner: Box<ReportData>,
}

#[derive(Clone)]
struct ReportData {
    rule: String,
    direction: Direction,
    mesh: Vec<usize>,
    notation: Option<String>,
    given: Vec<String>,
    answer: Vec<String>,
    finding: Finding,
}

impl Report {
    /// The rule's name.
    pub fn rule(&self) -> &str {
        &self.inner.rule
    }
    pub fn direction(&self) -> Direction {
        self.inner.direction
    }
    /// The mesh shape.
    pub fn mesh(&self) -> &[usize] {
        &self.inner.mesh
    }
    /// The einsum the op was checked against, if any.
    pub fn notation(&self) -> Option<&str> {
        self.inner.notation.as_deref()
    }
    /// The call, one line per given tensor.
    pub fn given(&self) -> &[String] {
        &self.inner.given
    }
    /// The rule's answer, one line per tensor (empty when it errored).
    pub fn answer(&self) -> &[String] {
        &self.inner.answer
    }
    pub fn finding(&self) -> &Finding {
        &self.inner.finding
    }
    pub fn into_finding(self) -> Finding {
        self.inner.finding
    }

    /// Whether the report shows the rule wrong (not a refusal nor a case the
    /// checker cannot set up).
    pub fn is_unsound(&self) -> bool {
        !matches!(self.inner.finding, Finding::Rejected(_) | Finding::Setup(_))
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mesh: Vec<String> = self.mesh().iter().map(usize::to_string).collect();
        let verdict = if self.is_unsound() {
            "UNSOUND"
        } else {
            "not checked"
        };
        writeln!(
            f,
            "{verdict}: rule `{}` ({}) on mesh {}",
            self.rule(),
            self.direction(),
            mesh.join("x")
        )?;
        if let Some(n) = self.notation() {
            writeln!(f, "  einsum   {n:?}")?;
        }
        for g in self.given() {
            writeln!(f, "  given    {g}")?;
        }
        for a in self.answer() {
            writeln!(f, "  answered {a}")?;
        }
        write!(f, "  {}", self.finding())
    }
}

impl fmt::Debug for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for Report {}

/// Builds reports for one call.
struct Ctx {
    rule: String,
    direction: Direction,
    mesh: Vec<usize>,
    notation: Option<String>,
    given: Vec<String>,
    answer: Vec<String>,
}

impl Ctx {
    fn new(rule: &str, direction: Direction, mesh: &Mesh) -> Ctx {
        Ctx {
            rule: rule.to_string(),
            direction,
            mesh: mesh.shape().to_vec(),
            notation: None,
            given: Vec::new(),
            answer: Vec::new(),
        }
    }
    fn with_notation(mut self, n: &str) -> Ctx {
        self.notation = Some(n.to_string());
        self
    }
    fn given(&mut self, name: &str, shape: &[usize], attr: Option<&DistAttr>) {
        match attr {
            Some(a) => self.given.push(format!("{name} {shape:?}: {a}")),
            None => self.given.push(format!("{name} {shape:?}")),
        }
    }
    fn answered(&mut self, r: &RuleResult, input_names: &[String], output_names: &[String]) {
        for (a, n) in r.inputs.iter().zip(input_names) {
            self.answer.push(format!("{n} required {a}"));
        }
        for (a, n) in r.outputs.iter().zip(output_names) {
            self.answer.push(format!("{n}: {a}"));
        }
    }
    fn report(&self, finding: Finding) -> Report {
        Report {
            inner: Box::new(ReportData {
                rule: self.rule.clone(),
                direction: self.direction,
                mesh: self.mesh.clone(),
                notation: self.notation.clone(),
                given: self.given.clone(),
                answer: self.answer.clone(),
                finding,
            }),
        }
    }
}

fn input_name(i: usize) -> String {
    format!("input {i}")
}
fn output_name(o: usize) -> String {
    format!("output {o}")
}

/// Checks the counts of a rule's answer.
fn check_counts(r: &RuleResult, inputs: usize, outputs: usize) -> Result<(), Finding> {
    if r.inputs.len() != inputs || r.outputs.len() != outputs {
        return Err(Finding::Malformed(format!(
            "{} input and {} output attrs for {inputs} inputs and {outputs} outputs",
            r.inputs.len(),
            r.outputs.len()
        )));
    }
    Ok(())
}

/// The grad layout rule (docs/semantics.md §4): a framework runs the grad op
/// on the inputs laid out as required and gives each input's grad the shape
/// of that input's block, so input `j` (for each `(j, k)`: its grad is
/// output `k`) must be required in its grad's dims mapping. An absent
/// input (empty attr on either side) has nothing to agree on.
fn check_grad_layouts(r: &RuleResult, with: &[(usize, usize)]) -> Result<(), Finding> {
    for &(j, k) in with {
        let (required, grad) = (&r.inputs[j], &r.outputs[k]);
        let absent = |a: &DistAttr| a.dims_mapping.rank() == 0 && a.partial.dims().is_empty();
        if absent(required) || absent(grad) {
            continue;
        }
        if required.dims_mapping != grad.dims_mapping {
            return Err(Finding::Malformed(format!(
                "input {j} is required {required} but its grad is claimed {grad}: a framework \
                 gives each input grad the shape of its input's block (the grad layout rule)"
            )));
        }
    }
    Ok(())
}

/// A device's local computation: its blocks (per tensor) and local values in,
/// its local results out.
type Local<'a> =
    dyn Fn(&Device, &[Vec<Range<usize>>], &[Tensor]) -> Result<Vec<Tensor>, Finding> + 'a;

/// One tensor the devices read: its name, global value and required attr.
struct Read<'a> {
    name: String,
    value: &'a Tensor,
    attr: &'a DistAttr,
}

/// One result: its name, claimed attr and dense value.
struct Claim<'a> {
    name: String,
    attr: &'a DistAttr,
    expected: &'a Tensor,
}

/// Lays `reads` out as required, runs `local` on every device, reduces the
/// partial results and compares them with the claims.
fn simulate(
    mesh: &Mesh,
    reads: &[Read<'_>],
    claims: &[Claim<'_>],
    local: &Local<'_>,
) -> Result<(), Finding> {
    for r in reads {
        mesh_sim::validate(&r.name, r.attr, r.value.rank(), mesh)?;
    }
    for c in claims {
        mesh_sim::validate(&c.name, c.attr, c.expected.rank(), mesh)?;
    }
    let devs = devices(mesh);
    let mut per_output: Vec<Vec<Tensor>> = vec![Vec::with_capacity(devs.len()); claims.len()];
    for dev in &devs {
        let blocks: Vec<Vec<Range<usize>>> = reads
            .iter()
            .map(|r| block_of(r.value.shape(), &r.attr.dims_mapping, mesh, &dev.coord))
            .collect();
        let locals: Vec<Tensor> = reads
            .iter()
            .enumerate()
            .map(|(i, r)| local_value(r.value, r.attr, mesh, dev, 0x5eed + i as u64))
            .collect();
        let outs = local(dev, &blocks, &locals)?;
        if outs.len() != claims.len() {
            return Err(Finding::LocalFailed {
                device: dev.clone(),
                message: format!("{} results for {} outputs", outs.len(), claims.len()),
            });
        }
        for (o, t) in outs.into_iter().enumerate() {
            per_output[o].push(t);
        }
    }
    for (c, locals) in claims.iter().zip(per_output) {
        let reduced = reduce_partials(&c.name, c.attr, mesh, &devs, locals)?;
        compare(&c.name, c.attr, mesh, &devs, &reduced, c.expected)?;
    }
    Ok(())
}

/// Runs a device's local computation, turning a panic (say a shape mismatch
/// between the blocks a reference function receives) into a finding.
fn catch(device: &Device, f: impl FnOnce() -> Vec<Tensor>) -> Result<Vec<Tensor>, Finding> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|p| {
        let message = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "panicked".into());
        Finding::LocalFailed {
            device: device.clone(),
            message,
        }
    })
}

/// Checks a rule's forward inference against a reference implementation of
/// the op: `reference` computes the op densely, and on every device over the
/// blocks the rule requires (the op's local kernel is the op itself, as for
/// every einsum-like op). The rule's required input attrs lay the inputs out
/// (a partial requirement hands each device a hashed contribution); every
/// device's result, reduced over the claimed partial mesh dims, must equal its
/// claimed block of the dense result, replicated results included.
///
/// ```
/// use spmd_check::{Input, Tensor, check_forward, einsum};
/// use spmd_core::{DistAttr, Einsum, Mesh, ReduceType};
///
/// let rule = Einsum::new("mk,kn->mn")?;
/// let mesh = Mesh::new(&[2, 2])?;
/// let x = Input::probe(&[4, 6], DistAttr::from_paddle(&[0, 1]).unwrap(), 1);
/// let y = Input::probe(&[6, 3], DistAttr::from_paddle(&[-1, -1]).unwrap(), 2);
/// check_forward(&rule, &mesh, &[x, y], |t| {
///     einsum("mk,kn->mn", &[&t[0], &t[1]], ReduceType::Sum).unwrap()
/// })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn check_forward<R, F>(
    rule: &R,
    mesh: &Mesh,
    inputs: &[Input],
    reference: F,
) -> Result<(), Report>
where
    R: SpmdRule + ?Sized,
    F: Fn(&[Tensor]) -> Vec<Tensor>,
{
    let mut cx = Ctx::new(rule.name(), Direction::Forward, mesh);
    for (i, x) in inputs.iter().enumerate() {
        cx.given(&input_name(i), x.value.shape(), Some(&x.attr));
    }
    let specs: Vec<Spec<'_>> = inputs
        .iter()
        .map(|x| Spec::new(x.value.shape(), &x.attr))
        .collect();
    let values: Vec<Tensor> = inputs.iter().map(|x| x.value.clone()).collect();
    let expected = reference(&values);
    let r = rule
        .forward(mesh, &specs)
        .map_err(|e| cx.report(Finding::Rejected(e)))?;
    let in_names: Vec<String> = (0..inputs.len()).map(input_name).collect();
    let out_names: Vec<String> = (0..expected.len()).map(output_name).collect();
    cx.answered(&r, &in_names, &out_names);
    check_counts(&r, inputs.len(), expected.len()).map_err(|f| cx.report(f))?;
    let values: Vec<&Tensor> = inputs.iter().map(|x| &x.value).collect();
    run_answer(mesh, &values, &r, &expected, &reference).map_err(|f| cx.report(f))
}

/// Runs a rule's answer on the mesh: every device reads its blocks of the
/// inputs as the answer requires them and runs `reference` on them; each
/// output must then hold, on every device, its block of `expected` as the
/// answer lays it out.
fn run_answer<F>(
    mesh: &Mesh,
    values: &[&Tensor],
    r: &RuleResult,
    expected: &[Tensor],
    reference: &F,
) -> Result<(), Finding>
where
    F: Fn(&[Tensor]) -> Vec<Tensor>,
{
    let (reads, claims) = reads_and_claims(values, r, expected);
    simulate(mesh, &reads, &claims, &|dev, _, locals| {
        catch(dev, || reference(locals))
    })
}

/// What the devices read (the inputs, laid out as `r` requires) and what
/// they must then hold (the outputs, laid out as `r` claims).
fn reads_and_claims<'a>(
    values: &[&'a Tensor],
    r: &'a RuleResult,
    expected: &'a [Tensor],
) -> (Vec<Read<'a>>, Vec<Claim<'a>>) {
    let reads = values
        .iter()
        .zip(&r.inputs)
        .enumerate()
        .map(|(i, (&value, attr))| Read {
            name: input_name(i),
            value,
            attr,
        })
        .collect();
    let claims = r
        .outputs
        .iter()
        .zip(expected)
        .enumerate()
        .map(|(o, (attr, e))| Claim {
            name: output_name(o),
            attr,
            expected: e,
        })
        .collect();
    (reads, claims)
}

/// What one device runs a kernel on in [`check_answer`]: its local values of
/// the inputs (laid out as the answer requires, partial ones as
/// contributions), the blocks of the global tensors they are, and the blocks
/// of the outputs the answer says it holds (for kernels whose local result
/// shape is not implied by their inputs, such as a reshape).
#[derive(Debug)]
pub struct LocalCall<'a> {
    pub device: &'a Device,
    pub inputs: &'a [Tensor],
    pub input_blocks: &'a [Vec<Range<usize>>],
    pub output_blocks: &'a [Vec<Range<usize>>],
}

/// Judges an answer given as data (any rule's, or another system's): lay
/// `inputs` out as `answer` requires, run `kernel` on every device, reduce
/// partial results and compare every device's result with its block of
/// `expected` as `answer` lays the outputs out. `op` and `direction` name
/// the report. This is how a conformance vector's expected answer (Paddle's)
/// and ours are both held to the same standard.
///
/// ```
/// use spmd_check::{Direction, LocalCall, Tensor, Values, check_answer};
/// use spmd_core::{DistAttr, Mesh, MeshSet, Partial, ReduceType, RuleResult};
///
/// let mesh = Mesh::new(&[2])?;
/// let x = Tensor::probe(&[4, 6], 1, Values::Integers);
/// let rows = |t: &Tensor| Tensor::from_fn(&[t.shape()[0]], |i| (0..t.shape()[1]).map(|j| t.get(&[i[0], j])).sum());
/// let expected = vec![rows(&x)];
/// let kernel = |c: &LocalCall<'_>| vec![rows(&c.inputs[0])];
/// // A row sum with its columns split: partial sums, claimed partial: sound.
/// let mut r = RuleResult::default();
/// r.inputs.push(DistAttr::from_paddle(&[-1, 0]).unwrap());
/// let sum_over_0 = Partial::over(MeshSet::single(0), ReduceType::Sum);
/// r.outputs.push(DistAttr::from_paddle(&[-1]).unwrap().with_partial(sum_over_0));
/// check_answer("row_sum", Direction::Forward, &mesh, &[x.clone()], &r, &expected, &kernel)?;
/// // Claimed complete: every device holds only its half of each sum.
/// r.outputs[0] = DistAttr::from_paddle(&[-1]).unwrap();
/// let report = check_answer("row_sum", Direction::Forward, &mesh, &[x], &r, &expected, &kernel)
///     .unwrap_err();
/// assert!(report.is_unsound());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn check_answer(
    op: &str,
    direction: Direction,
    mesh: &Mesh,
    inputs: &[Tensor],
    answer: &RuleResult,
    expected: &[Tensor],
    kernel: &dyn Fn(&LocalCall<'_>) -> Vec<Tensor>,
) -> Result<(), Report> {
    let mut cx = Ctx::new(op, direction, mesh);
    for (i, x) in inputs.iter().enumerate() {
        cx.given(&input_name(i), x.shape(), None);
    }
    let in_names: Vec<String> = (0..inputs.len()).map(input_name).collect();
    let out_names: Vec<String> = (0..expected.len()).map(output_name).collect();
    cx.answered(answer, &in_names, &out_names);
    check_counts(answer, inputs.len(), expected.len()).map_err(|f| cx.report(f))?;
    let values: Vec<&Tensor> = inputs.iter().collect();
    let (reads, claims) = reads_and_claims(&values, answer, expected);
    simulate(mesh, &reads, &claims, &|dev, blocks, locals| {
        let output_blocks: Vec<Vec<Range<usize>>> = claims
            .iter()
            .map(|c| block_of(c.expected.shape(), &c.attr.dims_mapping, mesh, &dev.coord))
            .collect();
        let call = LocalCall {
            device: dev,
            inputs: locals,
            input_blocks: blocks,
            output_blocks: &output_blocks,
        };
        catch(dev, || kernel(&call))
    })
    .map_err(|f| cx.report(f))
}

/// Checks a rule's backward inference against a reference implementation:
/// the outputs are laid out as `outputs` (their shapes are the reference's),
/// and the input requirements the rule derives must, fed forward, give the
/// outputs it answers: values on every device (as [`check_forward`] checks
/// them), and the same attrs from the rule's own forward inference.
pub fn check_backward<R, F>(
    rule: &R,
    mesh: &Mesh,
    inputs: &[Tensor],
    outputs: &[DistAttr],
    reference: F,
) -> Result<(), Report>
where
    R: SpmdRule + ?Sized,
    F: Fn(&[Tensor]) -> Vec<Tensor>,
{
    let mut cx = Ctx::new(rule.name(), Direction::Backward, mesh);
    let expected = reference(inputs);
    for (i, x) in inputs.iter().enumerate() {
        cx.given(&input_name(i), x.shape(), None);
    }
    for (o, (t, a)) in expected.iter().zip(outputs).enumerate() {
        cx.given(&output_name(o), t.shape(), Some(a));
    }
    if expected.len() != outputs.len() {
        return Err(cx.report(Finding::Setup(format!(
            "{} output attrs for {} reference outputs",
            outputs.len(),
            expected.len()
        ))));
    }
    let shapes: Vec<&[usize]> = inputs.iter().map(Tensor::shape).collect();
    let out_specs: Vec<Spec<'_>> = expected
        .iter()
        .zip(outputs)
        .map(|(t, a)| Spec::new(t.shape(), a))
        .collect();
    let r = rule
        .backward(mesh, &shapes, &out_specs)
        .map_err(|e| cx.report(Finding::Rejected(e)))?;
    let in_names: Vec<String> = (0..inputs.len()).map(input_name).collect();
    let out_names: Vec<String> = (0..expected.len()).map(output_name).collect();
    cx.answered(&r, &in_names, &out_names);
    check_counts(&r, inputs.len(), expected.len()).map_err(|f| cx.report(f))?;
    let values: Vec<&Tensor> = inputs.iter().collect();
    run_answer(mesh, &values, &r, &expected, &reference).map_err(|f| cx.report(f))?;
    agree(rule, mesh, &shapes, &r).map_err(|f| cx.report(f))
}

/// Forward inference from backward's input requirements must answer
/// backward's outputs.
fn agree<R: SpmdRule + ?Sized>(
    rule: &R,
    mesh: &Mesh,
    shapes: &[&[usize]],
    back: &RuleResult,
) -> Result<(), Finding> {
    let specs: Vec<Spec<'_>> = shapes
        .iter()
        .zip(&back.inputs)
        .map(|(s, a)| Spec::new(s, a))
        .collect();
    match rule.forward(mesh, &specs) {
        Ok(fw) => {
            for (o, (b, f)) in back.outputs.iter().zip(&fw.outputs).enumerate() {
                if b != f {
                    return Err(Finding::Disagree {
                        tensor: output_name(o),
                        backward: b.clone(),
                        forward: Ok(f.clone()),
                    });
                }
            }
            Ok(())
        }
        Err(e) => Err(Finding::Disagree {
            tensor: output_name(0),
            backward: back.outputs.first().cloned().unwrap_or_default(),
            forward: Err(e),
        }),
    }
}

/// Checks a rule's grad inference against the op's gradient kernel, in the
/// derived form: `inputs` are the forward inputs.
///
/// The rule answers requirements for (inputs…, output grads…) and the layout
/// of each input grad (see `SpmdRuleExt::grad`). `forward` computes the op's
/// outputs densely; the output grads get probe values. `grad(inputs, outputs,
/// output_grads)` computes the grads of the inputs that have one, densely and
/// on every device over the blocks the rule requires; a forward output is laid
/// out like its output grad's requirement (partial status cleared, as Paddle
/// hands `out` to `max_grad`), for kernels that read it. Each input must be
/// required in its grad's dims mapping (the grad layout rule).
pub fn check_grad<R, F, G>(
    rule: &R,
    mesh: &Mesh,
    inputs: &[Input],
    output_grads: &[DistAttr],
    forward: F,
    grad: G,
) -> Result<(), Report>
where
    R: SpmdRule + ?Sized,
    F: Fn(&[Tensor]) -> Vec<Tensor>,
    G: Fn(&[Tensor], &[Tensor], &[Tensor]) -> Vec<Tensor>,
{
    grad_against_kernel(rule, mesh, inputs, output_grads, forward, grad, true)
}

/// [`check_grad`] for a grad op with a signature of its own
/// (`GradSignature`): `inputs` are the tensors the grad op takes, which
/// need not be the forward inputs, so the input grads are checked by value
/// only, not against those tensors' layouts.
pub fn check_grad_of_signature<R, F, G>(
    rule: &R,
    mesh: &Mesh,
    inputs: &[Input],
    output_grads: &[DistAttr],
    forward: F,
    grad: G,
) -> Result<(), Report>
where
    R: SpmdRule + ?Sized,
    F: Fn(&[Tensor]) -> Vec<Tensor>,
    G: Fn(&[Tensor], &[Tensor], &[Tensor]) -> Vec<Tensor>,
{
    grad_against_kernel(rule, mesh, inputs, output_grads, forward, grad, false)
}

fn grad_against_kernel<R, F, G>(
    rule: &R,
    mesh: &Mesh,
    inputs: &[Input],
    output_grads: &[DistAttr],
    forward: F,
    grad: G,
    derived: bool,
) -> Result<(), Report>
where
    R: SpmdRule + ?Sized,
    F: Fn(&[Tensor]) -> Vec<Tensor>,
    G: Fn(&[Tensor], &[Tensor], &[Tensor]) -> Vec<Tensor>,
{
    let mut cx = Ctx::new(rule.name(), Direction::Grad, mesh);
    let n_in = inputs.len();
    let xs: Vec<Tensor> = inputs.iter().map(|x| x.value.clone()).collect();
    let outs = forward(&xs);
    for (i, x) in inputs.iter().enumerate() {
        cx.given(&input_name(i), x.value.shape(), Some(&x.attr));
    }
    for (o, (t, a)) in outs.iter().zip(output_grads).enumerate() {
        cx.given(&output_grad_name(o), t.shape(), Some(a));
    }
    if outs.len() != output_grads.len() {
        return Err(cx.report(Finding::Setup(format!(
            "{} output grad attrs for {} outputs",
            output_grads.len(),
            outs.len()
        ))));
    }
    let dys: Vec<Tensor> = outs
        .iter()
        .enumerate()
        .map(|(o, t)| Tensor::probe(t.shape(), 0xd7 + o as u64, Values::Integers))
        .collect();
    let expected = grad(&xs, &outs, &dys);
    let mut specs: Vec<Spec<'_>> = inputs
        .iter()
        .map(|x| Spec::new(x.value.shape(), &x.attr))
        .collect();
    let dy_specs: Vec<Spec<'_>> = dys
        .iter()
        .zip(output_grads)
        .map(|(t, a)| Spec::new(t.shape(), a))
        .collect();
    let r = rule
        .grad(mesh, &specs, &dy_specs)
        .map_err(|e| cx.report(Finding::Rejected(e)))?;
    specs.clear();
    let mut in_names: Vec<String> = (0..n_in).map(input_name).collect();
    in_names.extend((0..outs.len()).map(output_grad_name));
    let grad_names = grad_names(n_in, r.outputs.len(), &[]);
    cx.answered(&r, &in_names, &grad_names);
    check_counts(&r, n_in + outs.len(), expected.len()).map_err(|f| cx.report(f))?;
    if derived && expected.len() == n_in {
        let with: Vec<(usize, usize)> = (0..n_in).map(|j| (j, j)).collect();
        check_grad_layouts(&r, &with).map_err(|f| cx.report(f))?;
    }
    // Forward outputs laid out like their grads' requirements, not partial.
    let out_attrs: Vec<DistAttr> = r.inputs[n_in..]
        .iter()
        .map(|a| DistAttr::new(a.dims_mapping.clone()))
        .collect();
    let mut reads: Vec<Read<'_>> = Vec::new();
    for (i, x) in xs.iter().enumerate() {
        reads.push(Read {
            name: input_name(i),
            value: x,
            attr: &r.inputs[i],
        });
    }
    for (o, t) in outs.iter().enumerate() {
        reads.push(Read {
            name: format!("output {o} (forward value)"),
            value: t,
            attr: &out_attrs[o],
        });
    }
    for (o, t) in dys.iter().enumerate() {
        reads.push(Read {
            name: output_grad_name(o),
            value: t,
            attr: &r.inputs[n_in + o],
        });
    }
    let claims: Vec<Claim<'_>> = r
        .outputs
        .iter()
        .zip(&expected)
        .zip(&grad_names)
        .map(|((a, e), n)| Claim {
            name: n.clone(),
            attr: a,
            expected: e,
        })
        .collect();
    let n_out = outs.len();
    simulate(mesh, &reads, &claims, &|dev, _, locals| {
        catch(dev, || {
            grad(
                &locals[..n_in],
                &locals[n_in..n_in + n_out],
                &locals[n_in + n_out..],
            )
        })
    })
    .map_err(|f| cx.report(f))
}

fn output_grad_name(o: usize) -> String {
    format!("output grad {o}")
}

/// Names of the input grads: `grad of input j` when it is known which inputs
/// have one (all of them, or all but `no_grad`).
fn grad_names(n_in: usize, n_grads: usize, no_grad: &[usize]) -> Vec<String> {
    let with: Vec<usize> = (0..n_in).filter(|j| !no_grad.contains(j)).collect();
    if with.len() == n_grads {
        with.iter().map(|j| format!("grad of input {j}")).collect()
    } else {
        (0..n_grads).map(|k| format!("input grad {k}")).collect()
    }
}

/// A borrowed [`EinsumRule`] as a [`SpmdRule`], for rules over notations built
/// at run time (whose plans borrow a local [`Notation`]).
#[derive(Clone, Copy, Debug)]
pub struct RuleRef<'r, 'a>(pub &'r EinsumRule<'a>);

impl SpmdRule for RuleRef<'_, '_> {
    fn name(&self) -> &'static str {
        self.0.name
    }
    fn infer_into(
        &self,
        call: &spmd_core::Call<'_>,
        trace: Option<&mut dyn spmd_core::Trace>,
        result: &mut RuleResult,
    ) -> Result<(), SpmdError> {
        match trace {
            None => self.0.run_into(call, &mut spmd_core::NoTrace, result),
            Some(t) => self.0.run_into(call, t, result),
        }
    }
}

/// The probe values that exercise a reduce type.
pub fn values_for(reduce: ReduceType) -> Values {
    match reduce {
        ReduceType::Prod => Values::NearOne,
        ReduceType::Any => Values::Bits {
            ones_per_mille: 300,
        },
        ReduceType::All => Values::Bits {
            ones_per_mille: 800,
        },
        _ => Values::Integers,
    }
}

/// Checks a rule whose mathematics is an einsum (see [`crate::einsum`]): the
/// checker evaluates the notation densely and, on every device, over the
/// blocks it holds — after checking that the device's blocks agree on every
/// axis they share, so a rule that needs data a device does not hold is
/// reported even when the values would happen to match.
///
/// ```
/// use spmd_check::EinsumCheck;
/// use spmd_core::{DistAttr, Einsum, Mesh, Spec};
///
/// let rule = Einsum::new("mk,kn->mn")?;
/// let mesh = Mesh::new(&[2, 3])?;
/// let (x, y) = (DistAttr::from_paddle(&[1, 0]).unwrap(), DistAttr::from_paddle(&[-1, -1]).unwrap());
/// let check = EinsumCheck::new("mk,kn->mn")?;
/// check.forward(&rule, &mesh, &[Spec::new(&[5, 4], &x), Spec::new(&[4, 3], &y)])?;
/// check.backward(&rule, &mesh, &[&[5, 4], &[4, 3]], &[DistAttr::from_paddle(&[0, 1]).unwrap()])?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct EinsumCheck {
    notation: Notation,
    reduce: ReduceType,
    sizes: Vec<(char, usize)>,
    values: Option<Values>,
    seed: u64,
    no_grad: Vec<usize>,
    fixed: Vec<(usize, Tensor)>,
}

impl EinsumCheck {
    /// A check of `notation` with `Sum` contractions.
    pub fn new(notation: &str) -> Result<EinsumCheck, EvalError> {
        Ok(EinsumCheck {
            notation: spmd_core::notation::parse(notation).map_err(|e| EvalError(e.to_string()))?,
            reduce: ReduceType::Sum,
            sizes: Vec::new(),
            values: None,
            seed: 1,
            no_grad: Vec::new(),
            fixed: Vec::new(),
        })
    }

    /// A check of an einsum rule's own notation and reduce type. Rules whose
    /// contracted axes reduce with different types are not supported.
    pub fn for_rule(rule: &EinsumRule<'_>) -> Result<EinsumCheck, EvalError> {
        if let Some((a, r)) = rule
            .reduce_overrides
            .iter()
            .find(|(_, r)| *r != rule.options.reduce)
        {
            return Err(EvalError(format!(
                "axis {} reduces with {r} and the others with {}: mixed reductions are not supported",
                rule.plan.label(*a),
                rule.options.reduce
            )));
        }
        Ok(EinsumCheck::new(rule.plan.source)?.reduce(rule.options.reduce))
    }

    /// How contracted axes are combined (default `Sum`).
    pub fn reduce(mut self, reduce: ReduceType) -> Self {
        self.reduce = reduce;
        self
    }
    /// The extent of a label the shapes do not determine (a compound's factor).
    pub fn size(mut self, label: char, extent: usize) -> Self {
        self.sizes.push((label, extent));
        self
    }
    /// The probe values (default: [`values_for`] the reduce type).
    pub fn values(mut self, values: Values) -> Self {
        self.values = Some(values);
        self
    }
    /// The seed of the probe values.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }
    /// Inputs that have no gradient (grad checks).
    pub fn no_grad(mut self, inputs: &[usize]) -> Self {
        self.no_grad = inputs.to_vec();
        self
    }

    /// Fixes the values of input `input` (say one-hot ids, for a table
    /// lookup written as its einsum) instead of probe values.
    pub fn value(mut self, input: usize, value: Tensor) -> Self {
        self.fixed.retain(|(i, _)| *i != input);
        self.fixed.push((input, value));
        self
    }

    pub fn notation(&self) -> &str {
        self.notation.source()
    }

    /// The values of the inputs: fixed ones, else probes.
    fn input_values(&self, shapes: &[&[usize]]) -> Result<Vec<Tensor>, Finding> {
        shapes
            .iter()
            .enumerate()
            .map(|(i, s)| match self.fixed.iter().find(|(j, _)| *j == i) {
                Some((_, t)) if t.shape() == *s => Ok(t.clone()),
                Some((_, t)) => Err(Finding::Setup(format!(
                    "input {i} has shape {s:?}, its fixed value {:?}",
                    t.shape()
                ))),
                None => Ok(self.probe(s, i as u64)),
            })
            .collect()
    }

    fn probe(&self, shape: &[usize], k: u64) -> Tensor {
        let values = self.values.unwrap_or_else(|| values_for(self.reduce));
        Tensor::probe(shape, self.seed.wrapping_mul(0x100).wrapping_add(k), values)
    }

    fn layout(&self, shapes: &[&[usize]]) -> Result<(Layout, Vec<usize>), Finding> {
        let setup = |e: EvalError| Finding::Setup(e.0);
        let layout = Layout::new(
            &self.notation.plan(),
            &shapes.iter().map(|s| s.len()).collect::<Vec<_>>(),
        )
        .map_err(setup)?;
        let extent = layout.extents(shapes, &self.sizes).map_err(setup)?;
        Ok((layout, extent))
    }

    /// Checks `rule`'s forward inference for these inputs.
    pub fn forward<R: SpmdRule + ?Sized>(
        &self,
        rule: &R,
        mesh: &Mesh,
        inputs: &[Spec<'_>],
    ) -> Result<(), Report> {
        let mut cx = Ctx::new(rule.name(), Direction::Forward, mesh).with_notation(self.notation());
        for (i, s) in inputs.iter().enumerate() {
            cx.given(&input_name(i), s.shape, Some(s.attr));
        }
        let shapes: Vec<&[usize]> = inputs.iter().map(|s| s.shape).collect();
        let (layout, extent) = self.layout(&shapes).map_err(|f| cx.report(f))?;
        let values = self.input_values(&shapes).map_err(|f| cx.report(f))?;
        let expected = self
            .dense(&layout, &extent, &values)
            .map_err(|f| cx.report(f))?;
        let r = rule
            .forward(mesh, inputs)
            .map_err(|e| cx.report(Finding::Rejected(e)))?;
        let in_names: Vec<String> = (0..inputs.len()).map(input_name).collect();
        let out_names: Vec<String> = (0..expected.len()).map(output_name).collect();
        cx.answered(&r, &in_names, &out_names);
        check_counts(&r, inputs.len(), expected.len()).map_err(|f| cx.report(f))?;
        self.simulate_einsum(mesh, &layout, &extent, &values, &r, &expected)
            .map_err(|f| cx.report(f))
    }

    /// Checks `rule`'s backward inference for these input shapes and output
    /// attrs: the input requirements it derives, fed forward, must give the
    /// outputs it answers (values on every device, and the rule's own forward
    /// attrs).
    pub fn backward<R: SpmdRule + ?Sized>(
        &self,
        rule: &R,
        mesh: &Mesh,
        input_shapes: &[&[usize]],
        outputs: &[DistAttr],
    ) -> Result<(), Report> {
        let mut cx =
            Ctx::new(rule.name(), Direction::Backward, mesh).with_notation(self.notation());
        for (i, s) in input_shapes.iter().enumerate() {
            cx.given(&input_name(i), s, None);
        }
        let (layout, extent) = self.layout(input_shapes).map_err(|f| cx.report(f))?;
        let out_shapes: Vec<Vec<usize>> = layout
            .outputs
            .iter()
            .map(|o| slots_shape(o, &extent))
            .collect();
        for (o, (s, a)) in out_shapes.iter().zip(outputs).enumerate() {
            cx.given(&output_name(o), s, Some(a));
        }
        if outputs.len() != out_shapes.len() {
            return Err(cx.report(Finding::Setup(format!(
                "{} output attrs for {} outputs",
                outputs.len(),
                out_shapes.len()
            ))));
        }
        let values = self.input_values(input_shapes).map_err(|f| cx.report(f))?;
        let expected = self
            .dense(&layout, &extent, &values)
            .map_err(|f| cx.report(f))?;
        let specs: Vec<Spec<'_>> = out_shapes
            .iter()
            .zip(outputs)
            .map(|(s, a)| Spec::new(s, a))
            .collect();
        let r = rule
            .backward(mesh, input_shapes, &specs)
            .map_err(|e| cx.report(Finding::Rejected(e)))?;
        let in_names: Vec<String> = (0..input_shapes.len()).map(input_name).collect();
        let out_names: Vec<String> = (0..expected.len()).map(output_name).collect();
        cx.answered(&r, &in_names, &out_names);
        check_counts(&r, input_shapes.len(), expected.len()).map_err(|f| cx.report(f))?;
        self.simulate_einsum(mesh, &layout, &extent, &values, &r, &expected)
            .map_err(|f| cx.report(f))?;
        agree(rule, mesh, input_shapes, &r).map_err(|f| cx.report(f))
    }

    /// Checks `rule`'s grad inference: the rule answers requirements for
    /// (inputs…, output grads…) and each input grad's layout. The true
    /// gradient of input `j` of a `Sum` einsum is, for each output, the einsum
    /// of the other inputs and that output's grad onto `j`'s term (broadcast
    /// dims summed to size 1), summed over the outputs; every device computes
    /// it over its blocks (which must agree per axis), then the grads are
    /// reduced over their claimed partial mesh dims and compared.
    pub fn grad<R: SpmdRule + ?Sized>(
        &self,
        rule: &R,
        mesh: &Mesh,
        inputs: &[Spec<'_>],
        output_grads: &[DistAttr],
    ) -> Result<(), Report> {
        let mut cx = Ctx::new(rule.name(), Direction::Grad, mesh).with_notation(self.notation());
        for (i, s) in inputs.iter().enumerate() {
            cx.given(&input_name(i), s.shape, Some(s.attr));
        }
        let shapes: Vec<&[usize]> = inputs.iter().map(|s| s.shape).collect();
        let (layout, extent) = self.layout(&shapes).map_err(|f| cx.report(f))?;
        let out_shapes: Vec<Vec<usize>> = layout
            .outputs
            .iter()
            .map(|o| slots_shape(o, &extent))
            .collect();
        for (o, (s, a)) in out_shapes.iter().zip(output_grads).enumerate() {
            cx.given(&output_grad_name(o), s, Some(a));
        }
        if output_grads.len() != out_shapes.len() {
            return Err(cx.report(Finding::Setup(format!(
                "{} output grad attrs for {} outputs",
                output_grads.len(),
                out_shapes.len()
            ))));
        }
        if self.reduce != ReduceType::Sum {
            return Err(cx.report(Finding::Setup(format!(
                "the gradient of a {} contraction is not an einsum: check it with check_grad and the op's grad kernel",
                self.reduce
            ))));
        }
        let n_in = inputs.len();
        let mut values = self.input_values(&shapes).map_err(|f| cx.report(f))?;
        values.extend(
            out_shapes
                .iter()
                .enumerate()
                .map(|(o, s)| self.probe(s, 0xd7 + o as u64)),
        );
        let dy_specs: Vec<Spec<'_>> = out_shapes
            .iter()
            .zip(output_grads)
            .map(|(s, a)| Spec::new(s, a))
            .collect();
        let r = rule
            .grad(mesh, inputs, &dy_specs)
            .map_err(|e| cx.report(Finding::Rejected(e)))?;
        let mut names: Vec<String> = (0..n_in).map(input_name).collect();
        names.extend((0..out_shapes.len()).map(output_grad_name));
        let grad_names = grad_names(n_in, r.outputs.len(), &self.no_grad);
        cx.answered(&r, &names, &grad_names);
        let with: Vec<usize> = if r.outputs.len() == n_in {
            (0..n_in).collect()
        } else {
            (0..n_in).filter(|j| !self.no_grad.contains(j)).collect()
        };
        check_counts(&r, n_in + out_shapes.len(), with.len()).map_err(|f| cx.report(f))?;
        let pairs: Vec<(usize, usize)> = with.iter().enumerate().map(|(k, &j)| (j, k)).collect();
        check_grad_layouts(&r, &pairs).map_err(|f| cx.report(f))?;
        // Every tensor's slots: the inputs', then the outputs' (for the grads).
        let mut slots: Vec<&[Slot]> = layout.inputs.iter().map(Vec::as_slice).collect();
        slots.extend(layout.outputs.iter().map(Vec::as_slice));
        // Input j's grad has j's dims, its broadcast dims summed to size 1.
        let grad_slots: Vec<Vec<Slot>> = with
            .iter()
            .map(|&j| {
                layout.inputs[j]
                    .iter()
                    .zip(shapes[j])
                    .map(|(s, &size)| match s {
                        Slot::Axis(a) if size == 1 && extent[*a] != 1 => Slot::One,
                        s => s.clone(),
                    })
                    .collect()
            })
            .collect();
        // An addend's grad is the output grad summed onto its dims; a
        // product operand's grad reads the other product operands only.
        let plan = self.notation.plan();
        let parts = |j: usize| -> Vec<Vec<usize>> {
            (0..out_shapes.len())
                .map(|o| {
                    (0..n_in)
                        .filter(|&i| i != j && !plan.is_addend(j) && !plan.is_addend(i))
                        .chain([n_in + o])
                        .collect()
                })
                .collect()
        };
        let mut expected = Vec::new();
        for (k, &j) in with.iter().enumerate() {
            let mut sum: Option<Tensor> = None;
            for part in parts(j) {
                let ops: Vec<(&[Slot], &Tensor)> =
                    part.iter().map(|&t| (slots[t], &values[t])).collect();
                let g = contract(&ops, &grad_slots[k], &extent, ReduceType::Sum)
                    .map_err(|e| cx.report(Finding::Setup(e.0)))?;
                sum = Some(match sum {
                    None => g,
                    Some(s) => Tensor::new(
                        s.shape(),
                        s.data().iter().zip(g.data()).map(|(a, b)| a + b).collect(),
                    ),
                });
            }
            expected.push(
                sum.unwrap_or_else(|| Tensor::full(&slots_shape(&grad_slots[k], &extent), 0.0)),
            );
        }
        let reads: Vec<Read<'_>> = values
            .iter()
            .zip(&r.inputs)
            .zip(&names)
            .map(|((v, a), n)| Read {
                name: n.clone(),
                value: v,
                attr: a,
            })
            .collect();
        let claims: Vec<Claim<'_>> = r
            .outputs
            .iter()
            .zip(&expected)
            .zip(&grad_names)
            .map(|((a, e), n)| Claim {
                name: n.clone(),
                attr: a,
                expected: e,
            })
            .collect();
        let terms: Vec<Term<'_>> = with
            .iter()
            .enumerate()
            .map(|(k, &j)| Term {
                parts: parts(j),
                out: &grad_slots[k],
                claim: &r.outputs[k].dims_mapping,
            })
            .collect();
        let local = LocalEinsum {
            layout: &layout,
            extent: &extent,
            slots: &slots,
            names: &names,
            shapes: &values
                .iter()
                .map(|v| v.shape().to_vec())
                .collect::<Vec<_>>(),
            terms: &terms,
            reduce: ReduceType::Sum,
            mesh,
        };
        simulate(mesh, &reads, &claims, &|dev, blocks, locals| {
            local.run(dev, blocks, locals)
        })
        .map_err(|f| cx.report(f))
    }

    /// What each output sums: the einsum of the product operands, then each
    /// addend (`+n`) on its own, broadcast onto the output.
    fn forward_parts(&self, n_in: usize) -> Vec<Vec<usize>> {
        let plan = self.notation.plan();
        let products: Vec<usize> = (0..n_in).filter(|&i| !plan.is_addend(i)).collect();
        let addends = (0..n_in).filter(|&i| plan.is_addend(i)).map(|i| vec![i]);
        (!products.is_empty())
            .then_some(products)
            .into_iter()
            .chain(addends)
            .collect()
    }

    fn dense(
        &self,
        layout: &Layout,
        extent: &[usize],
        values: &[Tensor],
    ) -> Result<Vec<Tensor>, Finding> {
        let operands: Vec<(&[Slot], &Tensor)> = layout
            .inputs
            .iter()
            .map(Vec::as_slice)
            .zip(values)
            .collect();
        let parts = self.forward_parts(values.len());
        layout
            .outputs
            .iter()
            .map(|out| {
                let mut sum: Option<Tensor> = None;
                for part in &parts {
                    let ops: Vec<(&[Slot], &Tensor)> = part.iter().map(|&i| operands[i]).collect();
                    let v = contract(&ops, out, extent, self.reduce)
                        .map_err(|e| Finding::Setup(e.0))?;
                    sum = Some(match sum {
                        None => v,
                        Some(s) => s.zip_with(&v, |a, b| a + b),
                    });
                }
                Ok(sum.unwrap_or_else(|| Tensor::full(&slots_shape(out, extent), 0.0)))
            })
            .collect()
    }

    /// Every output sums its parts (the product operands' einsum, then each
    /// addend): the local einsums over the device's blocks.
    fn simulate_einsum(
        &self,
        mesh: &Mesh,
        layout: &Layout,
        extent: &[usize],
        values: &[Tensor],
        r: &RuleResult,
        expected: &[Tensor],
    ) -> Result<(), Finding> {
        let reads: Vec<Read<'_>> = values
            .iter()
            .zip(&r.inputs)
            .enumerate()
            .map(|(i, (v, a))| Read {
                name: input_name(i),
                value: v,
                attr: a,
            })
            .collect();
        let claims: Vec<Claim<'_>> = r
            .outputs
            .iter()
            .zip(expected)
            .enumerate()
            .map(|(o, (a, e))| Claim {
                name: output_name(o),
                attr: a,
                expected: e,
            })
            .collect();
        let terms: Vec<Term<'_>> = layout
            .outputs
            .iter()
            .zip(&r.outputs)
            .map(|(out, claim)| Term {
                parts: self.forward_parts(values.len()),
                out,
                claim: &claim.dims_mapping,
            })
            .collect();
        let slots: Vec<&[Slot]> = layout.inputs.iter().map(Vec::as_slice).collect();
        let local = LocalEinsum {
            layout,
            extent,
            slots: &slots,
            names: &reads.iter().map(|r| r.name.clone()).collect::<Vec<_>>(),
            shapes: &values
                .iter()
                .map(|v| v.shape().to_vec())
                .collect::<Vec<_>>(),
            terms: &terms,
            reduce: self.reduce,
            mesh,
        };
        simulate(mesh, &reads, &claims, &|dev, blocks, locals| {
            local.run(dev, blocks, locals)
        })
    }
}

/// One result of a local einsum computation: the sum of `parts` einsums
/// (each over a subset of the tensors) onto `out`, claimed laid out as `claim`.
struct Term<'a> {
    parts: Vec<Vec<usize>>,
    out: &'a [Slot],
    claim: &'a spmd_core::DimsMapping,
}

struct LocalEinsum<'a> {
    layout: &'a Layout,
    extent: &'a [usize],
    slots: &'a [&'a [Slot]],
    names: &'a [String],
    shapes: &'a [Vec<usize>],
    terms: &'a [Term<'a>],
    reduce: ReduceType,
    mesh: &'a Mesh,
}

impl LocalEinsum<'_> {
    fn run(
        &self,
        dev: &Device,
        blocks: &[Vec<Range<usize>>],
        locals: &[Tensor],
    ) -> Result<Vec<Tensor>, Finding> {
        let name = |a: usize| self.layout.axis_name(a);
        let mut results = Vec::with_capacity(self.terms.len());
        for term in self.terms {
            let out_shape = slots_shape(term.out, self.extent);
            let out_block = block_of(&out_shape, term.claim, self.mesh, &dev.coord);
            let mut sum: Option<Tensor> = None;
            for part in &term.parts {
                let operands: Vec<Operand<'_>> = part
                    .iter()
                    .map(|&t| Operand {
                        name: self.names[t].clone(),
                        slots: self.slots[t],
                        shape: &self.shapes[t],
                        block: blocks[t].clone(),
                    })
                    .collect();
                let held = axis_ranges(&operands, self.extent, &name, dev)?;
                let mut local_extent = self.extent.to_vec();
                for (a, h) in held.iter().enumerate() {
                    if let Some(h) = h {
                        local_extent[a] = h.range.len();
                    }
                }
                // Axes of the result that no operand carries (a gradient
                // broadcast over them): the device makes its claimed block.
                for (slot, r) in term.out.iter().zip(&out_block) {
                    let axes: Vec<(usize, Range<usize>)> = match slot {
                        Slot::Axis(a) => vec![(*a, r.clone())],
                        Slot::One => vec![],
                        Slot::Compound(f) => {
                            let ext: Vec<usize> = f.iter().map(|&a| self.extent[a]).collect();
                            box_of(r.clone(), &ext)
                                .map(|rs| f.iter().copied().zip(rs).collect())
                                .unwrap_or_default()
                        }
                    };
                    for (a, r) in axes {
                        if held[a].is_none() {
                            local_extent[a] = r.len();
                        }
                    }
                }
                let ops: Vec<(&[Slot], &Tensor)> =
                    part.iter().map(|&t| (self.slots[t], &locals[t])).collect();
                let value = contract(&ops, term.out, &local_extent, self.reduce).map_err(|e| {
                    Finding::LocalFailed {
                        device: dev.clone(),
                        message: e.0,
                    }
                })?;
                sum = Some(match sum {
                    None => value,
                    Some(s) if s.shape() == value.shape() => Tensor::new(
                        s.shape(),
                        s.data()
                            .iter()
                            .zip(value.data())
                            .map(|(a, b)| a + b)
                            .collect(),
                    ),
                    Some(s) => {
                        return Err(Finding::LocalFailed {
                            device: dev.clone(),
                            message: format!(
                                "the parts of one gradient have shapes {:?} and {:?}",
                                s.shape(),
                                value.shape()
                            ),
                        });
                    }
                });
            }
            results.push(sum.unwrap_or_else(|| Tensor::full(&out_shape, 0.0)));
        }
        Ok(results)
    }
}
