//! Checking shape and indexing ops against the reference kernels of
//! [`super::kernels`]: each tensor has a *slot* (its shape and the dims a
//! rule must not keep sharded), [`layout`] draws attrs forced to shard the
//! other dims often, and [`check_op`] runs forward, backward and the derived
//! grad against a kernel, counting per direction ([`Dirs`]) the answers that
//! split work.

use super::attr;
use super::nn::Counts;
use super::nn::complete;
use super::nn::force;
use super::nn::force_split;
use super::nn::input_specs;
use super::nn::small_mesh;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use spmd_check::{Input, Tensor, Values, check_backward, check_forward, check_grad};
use spmd_core::SpmdRuleExt;
use spmd_core::{DistAttr, Mesh, Spec, SpmdRule};

// ------------------------------------------------------------ generators

/// An axis of a rank-`rank` tensor: as given (negative half the time) and
/// normalized.
pub fn axis(rank: usize) -> impl Strategy<Value = (i64, usize)> {
    (0..rank.max(1), any::<bool>()).prop_map(move |(a, neg)| {
        let given = if neg {
            a as i64 - rank as i64
        } else {
            a as i64
        };
        (given, a)
    })
}

/// The dims of `shape` a rule may keep sharded: not in `fixed`, not of
/// size 1 (forcing those would split no work).
pub fn free(shape: &[usize], fixed: &[usize]) -> Vec<usize> {
    (0..shape.len())
        .filter(|d| !fixed.contains(d) && shape[*d] > 1)
        .collect()
}

/// A mesh and attrs for the inputs (forward; maybe `Sum` partial) and the
/// outputs (backward, without their partial status; the grad's output
/// grads, with it).
#[derive(Clone, Debug)]
pub struct Layout {
    pub mesh: Vec<usize>,
    pub ins: Vec<DistAttr>,
    pub outs: Vec<DistAttr>,
}

/// A tensor of a layout: its shape, and the dims to force a split on.
pub type Slot = (Vec<usize>, Vec<usize>);

/// Random attrs for `ins` and `outs` on a small mesh, each tensor forced
/// (80%) to shard one of its free dims; half the time (per side) aligned
/// (see [`finish`]).
pub fn layout(ins: Vec<Slot>, outs: Vec<Slot>) -> impl Strategy<Value = Layout> {
    small_mesh().prop_flat_map(move |mesh| {
        let m = mesh.len();
        let side = |slots: &[Slot]| {
            let attrs: Vec<_> = slots
                .iter()
                .map(|(s, _)| attr(s.len(), m, true, spmd_core::ReduceType::Sum).boxed())
                .collect();
            (
                attrs,
                prop::collection::vec(force(), slots.len()),
                any::<bool>(),
            )
        };
        (
            Just(mesh),
            Just(ins.clone()),
            side(&ins),
            Just(outs.clone()),
            side(&outs),
        )
            .prop_map(
                |(mesh, ins, (a_in, f_in, al_in), outs, (a_out, f_out, al_out))| Layout {
                    ins: finish(&mesh, &ins, a_in, f_in, al_in),
                    outs: finish(&mesh, &outs, a_out, f_out, al_out),
                    mesh,
                },
            )
    })
}

pub type Force = (bool, prop::sample::Index, prop::sample::Index);

/// The attrs of one side of a layout, forced to split work; with `aligned`,
/// the tensors of the first one's rank copy its mapping: independent random
/// mappings of the inputs of a concat, or of the outputs of a split, mostly
/// conflict, and the rules then drop most shardings.
pub fn finish(
    mesh: &[usize],
    slots: &[Slot],
    attrs: Vec<DistAttr>,
    forces: Vec<Force>,
    aligned: bool,
) -> Vec<DistAttr> {
    let mut attrs: Vec<DistAttr> = attrs
        .iter()
        .zip(slots)
        .zip(forces)
        .map(|((a, (_, dims)), f)| force_split(a, mesh, dims, f))
        .collect();
    if aligned && !attrs.is_empty() {
        let first = attrs[0].dims_mapping.clone();
        for a in attrs.iter_mut().skip(1) {
            if a.dims_mapping.rank() == first.rank() {
                a.dims_mapping = first.clone();
            }
        }
    }
    attrs
}

// ------------------------------------------------------------- the driver

/// The counts of the three directions of one op.
pub struct Dirs {
    pub fw: Counts,
    pub bw: Counts,
    pub gr: Counts,
}

impl Dirs {
    pub const fn new() -> Dirs {
        Dirs {
            fw: Counts::new(),
            bw: Counts::new(),
            gr: Counts::new(),
        }
    }

    pub fn assert_meaningful(&self, op: &str, grad: bool) {
        self.fw.assert_meaningful(&format!("{op} forward"));
        self.bw.assert_meaningful(&format!("{op} backward"));
        if grad {
            self.gr.assert_meaningful(&format!("{op} grad"));
        }
    }
}

/// An op's kernel (every output), and its grad kernel `(inputs, outputs,
/// output grads) -> input grads`, as `check_forward` / `check_grad` take them.
pub type Kernel<'a> = &'a dyn Fn(&[Tensor]) -> Vec<Tensor>;

pub type GradKernel<'a> = &'a dyn Fn(&[Tensor], &[Tensor], &[Tensor]) -> Vec<Tensor>;

/// Forward from the layout's inputs, backward from its outputs (not
/// partial), and with `grad` the derived grad from both, each checked
/// against the kernels and counted.
pub fn check_op(
    d: &Dirs,
    rule: &dyn SpmdRule,
    l: &Layout,
    values: &[Tensor],
    op: Kernel<'_>,
    grad: Option<GradKernel<'_>>,
) -> Result<(), TestCaseError> {
    let mesh = Mesh::new(&l.mesh).unwrap();
    let inputs: Vec<Input> = values
        .iter()
        .zip(&l.ins)
        .map(|(v, a)| Input::new(v.clone(), a.clone()))
        .collect();
    d.fw.record(
        &mesh,
        &rule.forward(&mesh, &input_specs(&inputs)),
        check_forward(rule, &mesh, &inputs, op),
    )?;

    let dense = op(values);
    let outs = complete(&l.outs);
    let shapes: Vec<&[usize]> = values.iter().map(Tensor::shape).collect();
    let out_specs: Vec<Spec<'_>> = dense
        .iter()
        .zip(&outs)
        .map(|(t, a)| Spec::new(t.shape(), a))
        .collect();
    d.bw.record(
        &mesh,
        &rule.backward(&mesh, &shapes, &out_specs),
        check_backward(rule, &mesh, values, &outs, op),
    )?;

    if let Some(grad) = grad {
        let dy_specs: Vec<Spec<'_>> = dense
            .iter()
            .zip(&l.outs)
            .map(|(t, a)| Spec::new(t.shape(), a))
            .collect();
        d.gr.record(
            &mesh,
            &rule.grad(&mesh, &input_specs(&inputs), &dy_specs),
            check_grad(rule, &mesh, &inputs, &l.outs, op, grad),
        )?;
    }
    Ok(())
}

pub fn probe(shape: &[usize], seed: u64) -> Tensor {
    Tensor::probe(shape, seed, Values::Integers)
}
