//! Generators shared by the property tests: meshes of 1–3 dims with extents
//! 1–4, valid dims mappings (each mesh dim at most once per tensor, sometimes
//! co-sharded, in random major-to-minor order) and partial sets.

#![allow(dead_code)]

pub mod einsum_check;
pub mod kernel_check;
pub mod kernels;
pub mod nn;
pub mod op_check;
pub mod slot_check;

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use proptest::prelude::*;
use proptest::test_runner::{RngAlgorithm, TestCaseError, TestRng, TestRunner};
use spmd_check::Report;
use spmd_core::{
    Attrs, DimsMapping, DistAttr, MeshDim, Partial, ReduceType, Registry, Sharding, Spec, SpmdRule,
};

/// Cases per property of most families (`SPMD_CHECK_CASES` overrides).
pub const CASES: u32 = 48;
/// Cases per property of the core ops (matmul, embedding, softmax, the
/// plain reductions and elementwise ops), which are cheap to simulate.
pub const CORE_CASES: u32 = 64;

/// The library's registry, built once per test binary.
pub fn registry() -> &'static Registry {
    static R: OnceLock<Registry> = OnceLock::new();
    R.get_or_init(spmd_ops::builtins)
}

/// A library rule built with `attrs`.
pub fn build(name: &str, attrs: &Attrs) -> Box<dyn SpmdRule> {
    registry().build(name, attrs).unwrap()
}

/// Tensor specs of `shapes` with `attrs`, pairwise.
pub fn specs<'a>(shapes: &'a [Vec<usize>], attrs: &'a [DistAttr]) -> Vec<Spec<'a>> {
    shapes
        .iter()
        .zip(attrs)
        .map(|(s, a)| Spec::new(s, a))
        .collect()
}

/// A shape of rank in `ranks`, extents 1–4.
pub fn shape(ranks: std::ops::RangeInclusive<usize>) -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(1usize..=4, ranks)
}

/// Cases per property: `SPMD_CHECK_CASES` (default `default`).
pub fn cases(default: u32) -> u32 {
    std::env::var("SPMD_CHECK_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

pub fn config(default: u32) -> ProptestConfig {
    ProptestConfig {
        cases: cases(default),
        // Shrinking re-runs whole simulations: keep it bounded.
        max_shrink_iters: 512,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// A mesh shape: 1–3 dims of extent 1–4.
pub fn mesh_shape() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(1usize..=4, 1..=3)
}

/// A dims mapping for a tensor of rank `rank` on a mesh of rank `mesh_rank`,
/// with each unused mesh dim made partial (with `reduce`) when `partial`.
pub fn attr(
    rank: usize,
    mesh_rank: usize,
    partial: bool,
    reduce: ReduceType,
) -> impl Strategy<Value = DistAttr> {
    // Each mesh dim: which tensor dim it splits (`rank` or more = none), and
    // a random order of the mesh dims (major first within a tensor dim).
    let order = Just((0..mesh_rank as MeshDim).collect::<Vec<_>>()).prop_shuffle();
    (
        prop::collection::vec(0..rank + 2, mesh_rank),
        order,
        prop::collection::vec(prop::bool::weighted(0.3), mesh_rank),
    )
        .prop_map(move |(target, order, part)| {
            let mut dims = vec![Sharding::REPLICATED; rank];
            let mut p = Partial::NONE;
            for &m in &order {
                match target[m as usize] {
                    t if t < rank => dims[t].push(m),
                    _ if partial && part[m as usize] => p.set(m, reduce),
                    _ => {}
                }
            }
            DistAttr::new(DimsMapping::from_shardings(&dims)).with_partial(p)
        })
}

/// Attrs for tensors of the given ranks.
pub fn attrs(
    ranks: Vec<usize>,
    mesh_rank: usize,
    partial: bool,
) -> impl Strategy<Value = Vec<DistAttr>> {
    ranks
        .into_iter()
        .map(|r| attr(r, mesh_rank, partial, ReduceType::Sum).boxed())
        .collect::<Vec<_>>()
}

/// Counts of checked and refused cases, to keep the properties meaningful.
pub struct Tally {
    checked: AtomicUsize,
    refused: AtomicUsize,
    /// Cases the property cannot judge (never silently: counted, reported).
    skipped: AtomicUsize,
}

impl Tally {
    pub const fn new() -> Tally {
        Tally {
            checked: AtomicUsize::new(0),
            refused: AtomicUsize::new(0),
            skipped: AtomicUsize::new(0),
        }
    }
    /// Counts a case the property cannot judge; `assert_meaningful` reports it.
    pub fn skip(&self) -> Result<(), TestCaseError> {
        self.skipped.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
    pub fn record(&self, r: Result<(), Report>) -> Result<(), TestCaseError> {
        match r {
            Ok(()) => {
                self.checked.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err(rep) if !rep.is_unsound() => {
                if std::env::var("SPMD_CHECK_SHOW_REFUSED").is_ok() {
                    eprintln!("{}", rep.finding());
                }
                self.refused.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err(rep) => Err(TestCaseError::fail(format!("\n{rep}"))),
        }
    }
    /// Records a case a test checked by a simulation of its own: `Err` is
    /// the finding of an unsound answer.
    pub fn record_own(&self, r: Result<(), String>) -> Result<(), TestCaseError> {
        match r {
            Ok(()) => {
                self.checked.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err(finding) => Err(TestCaseError::fail(format!("\n{finding}"))),
        }
    }
    /// At least half of the cases must have been checked, not refused.
    pub fn assert_meaningful(&self, what: &str) {
        let (c, r, s) = (
            self.checked.load(Ordering::Relaxed),
            self.refused.load(Ordering::Relaxed),
            self.skipped.load(Ordering::Relaxed),
        );
        eprintln!(
            "{what}: {c} checked, {r} refused by the rule or not checkable, {s} skipped as not judgeable"
        );
        assert!(
            c >= r + s,
            "{what}: only {c} cases checked, {r} refused, {s} skipped"
        );
    }
}

/// A runner whose cases come from a fixed seed, so that every run (CI's
/// included) checks the same cases and the share checks cannot flake:
/// `SPMD_CHECK_SEED=N` picks another seed, `SPMD_CHECK_SEED=random` a fresh
/// one per run (to explore).
pub fn runner(default_cases: u32) -> TestRunner {
    let seed = match std::env::var("SPMD_CHECK_SEED").as_deref() {
        Ok("random") => return TestRunner::new(config(default_cases)),
        Ok(s) => s.parse::<u64>().unwrap_or(0x5eed),
        Err(_) => 0x5eed,
    };
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    TestRunner::new_with_rng(
        config(default_cases),
        TestRng::from_seed(RngAlgorithm::ChaCha, &bytes),
    )
}

pub fn run<S: Strategy>(
    default_cases: u32,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) where
    S::Value: std::fmt::Debug,
{
    let mut runner = runner(default_cases);
    if let Err(e) = runner.run(&strategy, test) {
        panic!("{e}");
    }
}

/// A test wrapper around a rule, written per direction; [`by_direction`]
/// is its `SpmdRuleExt::infer`.
#[allow(dead_code)]
pub trait Directions {
    fn op(&self) -> &'static str;
    fn fwd(
        &self,
        mesh: &spmd_core::Mesh,
        inputs: &[spmd_core::Spec<'_>],
    ) -> Result<spmd_core::RuleResult, spmd_core::SpmdError>;
    fn bwd(
        &self,
        mesh: &spmd_core::Mesh,
        shapes: &[&[usize]],
        outputs: &[spmd_core::Spec<'_>],
    ) -> Result<spmd_core::RuleResult, spmd_core::SpmdError>;
    fn grd(
        &self,
        _: &spmd_core::Mesh,
        _: &[spmd_core::Spec<'_>],
        _: &[spmd_core::Spec<'_>],
    ) -> Result<spmd_core::RuleResult, spmd_core::SpmdError> {
        Err(spmd_core::SpmdError::NoGradRule { op: self.op() })
    }
}

/// Answers `call` with the wrapper's method for its direction.
#[allow(dead_code)]
pub fn by_direction<D: Directions>(
    d: &D,
    call: &spmd_core::Call<'_>,
) -> Result<spmd_core::RuleResult, spmd_core::SpmdError> {
    use spmd_core::Call;
    match *call {
        Call::Forward { mesh, inputs, .. } => d.fwd(mesh, inputs),
        Call::Backward {
            mesh,
            input_shapes,
            outputs,
            ..
        } => d.bwd(mesh, input_shapes, outputs),
        Call::Grad {
            mesh,
            inputs,
            output_grads,
            ..
        } => d.grd(mesh, inputs, output_grads),
        _ => Err(spmd_core::SpmdError::NoGradRule { op: d.op() }),
    }
}
