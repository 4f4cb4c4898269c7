//! Helpers of the properties that check ops against hand-written reference
//! kernels (`common::kernel_check`, `common::slot_check`, `loss.rs`): small meshes, mappings
//! forced to split work, counts of the answers that do, and gradients by
//! central differences.

use std::sync::atomic::{AtomicUsize, Ordering};

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use spmd_check::{Input, Report, Tensor, Values};
use spmd_core::{
    DimsMapping, DistAttr, Mesh, MeshDim, MeshSet, RuleResult, Sharding, Spec, SpmdError, SpmdRule,
};

use super::Tally;

/// A mesh of 1–3 dims with at most 4 devices (the kernels run once per
/// device), mostly with more than one.
pub fn small_mesh() -> impl Strategy<Value = Vec<usize>> {
    prop::sample::select(vec![
        vec![1],
        vec![2],
        vec![3],
        vec![4],
        vec![2, 2],
        vec![1, 2],
        vec![2, 1],
        vec![1, 4],
        vec![3, 1],
        vec![2, 1, 2],
        vec![1, 2, 2],
        vec![2, 2, 1],
    ])
}

pub fn input_specs(inputs: &[Input]) -> Vec<Spec<'_>> {
    inputs
        .iter()
        .map(|x| Spec::new(x.value.shape(), &x.attr))
        .collect()
}

/// `attrs` without their partial status (what backward is given: keeping a
/// given partial output is unsound by decision, see `known_unsound.rs`).
pub fn complete(attrs: &[DistAttr]) -> Vec<DistAttr> {
    attrs
        .iter()
        .map(|a| DistAttr::new(a.dims_mapping.clone()))
        .collect()
}

/// Probe values scaled into [-1, 1], so that exp() stays tame.
pub fn small(shape: &[usize], seed: u64) -> Tensor {
    let n = shape.iter().product::<usize>().max(1) as f64;
    Tensor::probe(shape, seed, Values::Integers).map(|v| v / n)
}

/// `attr` with mesh dim `m` moved to shard `dim` (as its major mesh dim),
/// and not partial over it.
pub fn shard_on(attr: &DistAttr, dim: usize, m: MeshDim) -> DistAttr {
    let mut dims: Vec<Sharding> = attr
        .dims_mapping
        .as_slice()
        .iter()
        .map(|s| s.without(m))
        .collect();
    let mut major = Sharding::on(m);
    for d in dims[dim].iter() {
        major.push(d);
    }
    dims[dim] = major;
    let mut partial = attr.partial;
    partial.remove(MeshSet::single(m));
    DistAttr::new(DimsMapping::from_shardings(&dims)).with_partial(partial)
}

/// With `force`, `attr` sharding one of `dims` (picked by `dim`) on a mesh
/// dim of extent > 1 (picked by `m`), when there are such: random mappings
/// alone too rarely shard the few dims a rule can keep sharded.
pub fn force_split(
    attr: &DistAttr,
    mesh: &[usize],
    dims: &[usize],
    (force, dim, m): (bool, prop::sample::Index, prop::sample::Index),
) -> DistAttr {
    let big: Vec<MeshDim> = (0..mesh.len() as MeshDim)
        .filter(|&d| mesh[usize::from(d)] > 1)
        .collect();
    if !force || dims.is_empty() || big.is_empty() {
        return attr.clone();
    }
    let dim = dims[dim.index(dims.len())];
    shard_on(attr, dim, big[m.index(big.len())])
}

/// A draw for [`force_split`]: forced 80% of the time.
pub fn force() -> impl Strategy<Value = (bool, prop::sample::Index, prop::sample::Index)> {
    (
        prop::bool::weighted(0.8),
        any::<prop::sample::Index>(),
        any::<prop::sample::Index>(),
    )
}

// ---------------------------------------------------------------- counting

/// Whether an answer splits work: some tensor sharded, or partial, over a
/// mesh dim of extent > 1.
pub fn splits(r: &RuleResult, mesh: &Mesh) -> bool {
    let big = |m: MeshDim| mesh.shape().get(usize::from(m)).is_some_and(|&n| n > 1);
    r.inputs.iter().chain(&r.outputs).any(|a| {
        a.dims_mapping
            .as_slice()
            .iter()
            .flat_map(Sharding::iter)
            .any(big)
            || a.partial.iter().any(|(m, _)| big(m))
    })
}

/// One direction's outcomes (checked or refused) and how many of the
/// checked answers split work.
pub struct Counts {
    tally: Tally,
    checked: AtomicUsize,
    split: AtomicUsize,
}

impl Counts {
    pub const fn new() -> Counts {
        Counts {
            tally: Tally::new(),
            checked: AtomicUsize::new(0),
            split: AtomicUsize::new(0),
        }
    }

    /// Records a check by the checker; `answer` is the rule's answer to the
    /// same call (asked once more, to see whether it splits work).
    pub fn record(
        &self,
        mesh: &Mesh,
        answer: &Result<RuleResult, SpmdError>,
        r: Result<(), Report>,
    ) -> Result<(), TestCaseError> {
        let checked = r.is_ok();
        self.tally.record(r)?;
        if let (true, Ok(a)) = (checked, answer) {
            self.note(mesh, a);
        }
        Ok(())
    }

    /// Records an answer checked by a test's own simulation (`Err`: the
    /// finding).
    pub fn record_own(
        &self,
        mesh: &Mesh,
        answer: &RuleResult,
        r: Result<(), String>,
    ) -> Result<(), TestCaseError> {
        self.tally.record_own(r)?;
        self.note(mesh, answer);
        Ok(())
    }

    pub fn note(&self, mesh: &Mesh, answer: &RuleResult) {
        self.checked.fetch_add(1, Ordering::Relaxed);
        if splits(answer, mesh) {
            self.split.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// At least half the cases checked, whether or not they split work:
    /// for a direction that cannot (say backward from a 0-d output alone).
    pub fn assert_checked(&self, what: &str) {
        self.tally.assert_meaningful(what);
    }

    /// At least half the cases checked, and a sixth of those splitting
    /// work: a property whose answers all replicate proves nothing. (The
    /// generators split work in about half the cases or more: a sixth
    /// leaves room for the random draws.)
    pub fn assert_meaningful(&self, what: &str) {
        self.tally.assert_meaningful(what);
        let (c, s) = (
            self.checked.load(Ordering::Relaxed),
            self.split.load(Ordering::Relaxed),
        );
        eprintln!("{what}: {s} of {c} checked answers split work");
        assert!(
            s > 0 && 6 * s >= c,
            "{what}: only {s} of {c} checked answers split work"
        );
    }
}

// ------------------------------------------------------ central differences

/// The gradient of `Σ_o <dys[o], f(inputs)[o]>` with respect to input `j`,
/// by central differences.
pub fn numeric_grad(
    f: &dyn Fn(&[Tensor]) -> Vec<Tensor>,
    inputs: &[Tensor],
    dys: &[Tensor],
    j: usize,
) -> Tensor {
    let step = 1e-6;
    let dot = |v: &[Tensor]| -> f64 {
        f(v).iter()
            .zip(dys)
            .map(|(o, d)| {
                o.data()
                    .iter()
                    .zip(d.data())
                    .map(|(a, b)| a * b)
                    .sum::<f64>()
            })
            .sum()
    };
    let mut g = Tensor::full(inputs[j].shape(), 0.0);
    for k in 0..inputs[j].len() {
        let (mut plus, mut minus) = (inputs.to_vec(), inputs.to_vec());
        plus[j].data_mut()[k] += step;
        minus[j].data_mut()[k] -= step;
        g.data_mut()[k] = (dot(&plus) - dot(&minus)) / (2.0 * step);
    }
    g
}

pub fn assert_gradient(what: &str, analytic: &Tensor, numeric: &Tensor) {
    assert_eq!(analytic.shape(), numeric.shape(), "{what}");
    for (k, (a, n)) in analytic.data().iter().zip(numeric.data()).enumerate() {
        assert!(
            (a - n).abs() <= 1e-4 * a.abs().max(1.0),
            "{what}: value {k} is {a}, central differences give {n}"
        );
    }
}

// ------------------------------------------------------ optional inputs

/// `rule` with some inputs absent, as a framework passes a missing optional
/// input (`None`): bit `i` of `forward` is input `i` of forward and
/// backward calls, of `grad` input `i` of grad calls, of `outputs` output
/// `i` of backward calls and output grad `i` of grad calls. The checker
/// hands the absent slots a placeholder, which this passes on as `None`.
pub struct Absent<'r> {
    pub rule: &'r dyn SpmdRule,
    pub forward: u64,
    pub grad: u64,
    pub outputs: u64,
}

fn present(i: usize, absent: u64) -> bool {
    absent >> i & 1 == 0
}

fn optional<'a>(specs: &[Spec<'a>], absent: u64) -> Vec<Option<Spec<'a>>> {
    specs
        .iter()
        .enumerate()
        .map(|(i, s)| present(i, absent).then_some(*s))
        .collect()
}

impl SpmdRule for Absent<'_> {
    fn name(&self) -> &'static str {
        self.rule.name()
    }
    /// The same call with the absent slots marked (they already hold the
    /// checker's placeholders).
    fn infer_into(
        &self,
        call: &spmd_core::Call<'_>,
        trace: Option<&mut dyn spmd_core::Trace>,
        result: &mut RuleResult,
    ) -> Result<(), SpmdError> {
        use spmd_core::{Absent, Call};
        let absent = match call {
            Call::Forward { .. } => Absent::new(self.forward, 0),
            Call::Backward { .. } => Absent::new(self.forward, self.outputs),
            _ => Absent::new(self.grad, self.outputs),
        };
        let call = call.with_absent(absent);
        self.rule.infer_into(&call, trace, result)
    }
}
