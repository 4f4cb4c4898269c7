//! Checking ops whose mathematics is an einsum: a case draws shapes, a
//! mesh and attrs ([`Layout`]: inputs maybe `Sum` partial, outputs not) and
//! the rule's answers are run against the einsum of the op's notation
//! (`spmd_check::EinsumCheck`), forward, backward and grad, with one
//! [`Tally`] per direction ([`Tallies`]).

use super::Tally;
use super::attr;
use super::mesh_shape;
use super::specs;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use spmd_check::EinsumCheck;
use spmd_core::{DistAttr, Mesh, ReduceType, SpmdRule};

/// Random attrs (no partial) for tensors of these shapes on a mesh of rank `m`.
pub fn attrs_for(shapes: &[Vec<usize>], m: usize, partial: bool) -> Vec<BoxedStrategy<DistAttr>> {
    shapes
        .iter()
        .map(|s| attr(s.len(), m, partial, ReduceType::Sum).boxed())
        .collect()
}

/// Shapes, a mesh, and attrs for the inputs and the outputs.
#[derive(Clone, Debug)]
pub struct Layout {
    pub mesh: Vec<usize>,
    pub inputs: Vec<DistAttr>,
    pub outputs: Vec<DistAttr>,
}

pub fn layout(
    in_shapes: Vec<Vec<usize>>,
    out_shapes: Vec<Vec<usize>>,
) -> impl Strategy<Value = Layout> {
    mesh_shape().prop_flat_map(move |mesh| {
        let m = mesh.len();
        (
            Just(mesh),
            attrs_for(&in_shapes, m, true),
            attrs_for(&out_shapes, m, false),
        )
            .prop_map(|(mesh, inputs, outputs)| Layout {
                mesh,
                inputs,
                outputs,
            })
    })
}

pub const LABELS: &str = "abcdefgh";

/// Forward, backward and grad tallies of one op family.
pub struct Tallies {
    pub fw: Tally,
    pub bw: Tally,
    pub gr: Tally,
}

impl Tallies {
    pub const fn new() -> Tallies {
        Tallies {
            fw: Tally::new(),
            bw: Tally::new(),
            gr: Tally::new(),
        }
    }
    pub fn assert_meaningful(&self, what: &str, grad: bool) {
        self.fw.assert_meaningful(&format!("{what} forward"));
        self.bw.assert_meaningful(&format!("{what} backward"));
        if grad {
            self.gr.assert_meaningful(&format!("{what} grad"));
        }
    }
}

/// A one-input op whose mathematics is the einsum `check`: forward from the
/// input attrs, backward from the output attrs, and (when `grad_rule` is
/// given, the op's grad rule) the `Sum` einsum's gradient.
pub fn check_unary_einsum(
    t: &Tallies,
    rule: &dyn SpmdRule,
    grad_rule: Option<&dyn SpmdRule>,
    check: &EinsumCheck,
    shape: &[usize],
    l: &Layout,
    backward: bool,
) -> Result<(), TestCaseError> {
    let mesh = Mesh::new(&l.mesh).unwrap();
    let shapes = vec![shape.to_vec()];
    t.fw.record(check.forward(rule, &mesh, &specs(&shapes, &l.inputs)))?;
    if backward {
        t.bw.record(check.backward(rule, &mesh, &[shape], &l.outputs))?;
    }
    if let Some(g) = grad_rule {
        t.gr.record(check.grad(g, &mesh, &specs(&shapes, &l.inputs), &l.outputs))?;
    }
    Ok(())
}

/// A shape of rank `ranks` with extents 1–4, size 1 more often than uniform.
pub fn shape_with_ones(
    ranks: std::ops::RangeInclusive<usize>,
) -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(prop::sample::select(vec![1usize, 1, 2, 3, 4]), ranks)
}

/// `axis` as Paddle may write it: sometimes counted from the end.
pub fn paddle_axis(a: usize, rank: usize, negative: bool) -> i64 {
    if negative {
        a as i64 - rank as i64
    } else {
        a as i64
    }
}

/// The term of dims `dims` (with these extents) merged into one: the
/// compound of their labels, size-1 dims left out (the checker reads an
/// empty block of a compound whose factor has extent 1 as a box of another
/// shape, so size-1 factors stay out); one left is plain, none is `1`.
pub fn compound(labels: &str, extents: &[usize]) -> String {
    let kept: String = labels
        .chars()
        .zip(extents)
        .filter(|&(_, &e)| e != 1)
        .map(|(c, _)| c)
        .collect();
    match kept.len() {
        0 => "1".into(),
        1 => kept,
        _ => format!("({kept})"),
    }
}

/// A plain term: one label per dim, `1` where the dim has size 1.
pub fn plain(labels: &str, extents: &[usize]) -> String {
    labels
        .chars()
        .zip(extents)
        .map(|(c, &e)| if e == 1 { '1' } else { c })
        .collect()
}

/// Batch dims for two operands broadcast against each other: a full batch
/// shape, and for each operand how many leading dims it drops and which of
/// its dims are size 1.
pub fn batches() -> impl Strategy<Value = (Vec<usize>, Vec<usize>)> {
    prop::collection::vec(1usize..=3, 0..=2).prop_flat_map(|full| {
        let n = full.len();
        let one = move |full: Vec<usize>| {
            (0..=n, prop::collection::vec(prop::bool::weighted(0.25), n)).prop_map(
                move |(drop, ones)| {
                    full[drop..]
                        .iter()
                        .zip(&ones[drop..])
                        .map(|(&e, &o)| if o { 1 } else { e })
                        .collect::<Vec<usize>>()
                },
            )
        };
        (one(full.clone()), one(full))
    })
}
