//! Elementwise ops: unary and binary ops with numpy broadcasting (against
//! their einsum), `where` (against the op, its grad against its kernel),
//! `swiglu` (with `y`, broadcast, or without, halving the last dim),
//! `label_smooth` (with or without a prior) and `add_n`.
//!
//! All built through the registry with Paddle's attributes, on random
//! shapes, meshes and mappings. Default: 48–64 cases per property;
//! `SPMD_CHECK_CASES=N` for more.

mod common;

use proptest::prelude::*;
use spmd_check::{EinsumCheck, Input, Tensor, Values, check_backward, check_forward, check_grad};
use spmd_core::{Attrs, DistAttr, Mesh};

use common::einsum_check::{Tallies, batches};
use common::kernel_check::inputs;
use common::kernels::broadcast;
use common::kernels::elementwise::{
    SMOOTHING, label_smooth, select, select_grad, swiglu, swiglu_grad,
};
use common::nn::{Absent, small};
use common::op_check::{assert_meaningful, tallies};
use common::{CASES, CORE_CASES, Tally, build, registry, run, shape, specs};
use common::{einsum_check, kernel_check, op_check};

// ------------------------------------------------------------- elementwise

#[derive(Clone, Debug)]
struct ElementwiseCase {
    name: &'static str,
    shapes: Vec<Vec<usize>>,
    l: einsum_check::Layout,
}

fn elementwise_case() -> impl Strategy<Value = ElementwiseCase> {
    (
        prop::sample::select(vec![
            "relu",
            "exp",
            "cast",
            "scale",
            "add",
            "multiply",
            "maximum",
            "elementwise_mul",
        ]),
        batches(),
    )
        .prop_flat_map(|(name, (x, y))| {
            let unary = spmd_ops::UNARY.contains(&name);
            let shapes = if unary {
                vec![x.clone()]
            } else {
                vec![x.clone(), y.clone()]
            };
            let w = x.len().max(y.len());
            let pad = |b: &[usize]| -> Vec<usize> {
                let mut v = vec![1; w - b.len()];
                v.extend(b);
                v
            };
            let out: Vec<usize> = if unary {
                x.clone()
            } else {
                pad(&x)
                    .iter()
                    .zip(pad(&y))
                    .map(|(&a, b)| a.max(b))
                    .collect()
            };
            (
                Just((name, shapes.clone())),
                einsum_check::layout(shapes, vec![out]),
            )
        })
        .prop_map(|((name, shapes), l)| ElementwiseCase { name, shapes, l })
}

/// Elementwise ops on every device over its blocks: for the sharding claim
/// any elementwise function will do, so the einsum `...,...->...` (a
/// broadcasting product) stands for the binary ops and `...->...` for the
/// unary ones.
#[test]
fn elementwise_forward_backward_grad() {
    let (fw, bw, gr) = (Tally::new(), Tally::new(), Tally::new());
    run(CORE_CASES, elementwise_case(), |c| {
        let rule = build(c.name, &Attrs::new());
        let mesh = Mesh::new(&c.l.mesh).unwrap();
        let notation = if c.shapes.len() == 1 {
            "...->..."
        } else {
            "...,...->..."
        };
        let check = EinsumCheck::new(notation).unwrap();
        fw.record(check.forward(&*rule, &mesh, &specs(&c.shapes, &c.l.inputs)))?;
        let shapes: Vec<&[usize]> = c.shapes.iter().map(Vec::as_slice).collect();
        bw.record(check.backward(&*rule, &mesh, &shapes, &c.l.outputs))?;
        gr.record(check.grad(&*rule, &mesh, &specs(&c.shapes, &c.l.inputs), &c.l.outputs))?;
        Ok(())
    });
    fw.assert_meaningful("elementwise forward");
    bw.assert_meaningful("elementwise backward");
    gr.assert_meaningful("elementwise grad");
}

#[derive(Clone, Debug)]
struct WhereCase {
    shapes: Vec<Vec<usize>>,
    out: Vec<usize>,
    l: einsum_check::Layout,
}

/// Three shapes broadcast against each other: a full shape, and for each
/// operand how many leading dims it drops and which of its dims are size 1.
fn where_case() -> impl Strategy<Value = WhereCase> {
    prop::collection::vec(1usize..=4, 0..=3)
        .prop_flat_map(|full| {
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
            (one(full.clone()), one(full.clone()), one(full))
        })
        .prop_flat_map(|(c, x, y)| {
            let out = broadcast(&[&c, &x, &y]);
            let shapes = vec![c, x, y];
            (
                Just((shapes.clone(), out.clone())),
                einsum_check::layout(shapes, vec![out]),
            )
        })
        .prop_map(|((shapes, out), l)| WhereCase { shapes, out, l })
}

#[test]
fn where_against_the_op() {
    static T: Tallies = Tallies::new();
    run(CASES, where_case(), |c| {
        let rule = build("where", &Attrs::new());
        let mesh = Mesh::new(&c.l.mesh).unwrap();
        let values = [
            Tensor::probe(
                &c.shapes[0],
                1,
                Values::Bits {
                    ones_per_mille: 500,
                },
            ),
            Tensor::probe(&c.shapes[1], 2, Values::Integers),
            Tensor::probe(&c.shapes[2], 3, Values::Integers),
        ];
        let inputs: Vec<Input> = values
            .iter()
            .zip(&c.l.inputs)
            .map(|(v, a)| Input::new(v.clone(), a.clone()))
            .collect();
        T.fw.record(check_forward(&*rule, &mesh, &inputs, select))?;
        T.bw.record(check_backward(&*rule, &mesh, &values, &c.l.outputs, select))?;
        let grad = |x: &[Tensor], _: &[Tensor], dy: &[Tensor]| select_grad(x, &dy[0]);
        T.gr.record(check_grad(
            &*rule,
            &mesh,
            &inputs,
            &c.l.outputs,
            select,
            grad,
        ))?;
        let _ = &c.out;
        Ok(())
    });
    T.assert_meaningful("where", true);
}

#[test]
fn add_n_against_the_op() {
    let t = tallies();
    let dims = (shape(0..=3), 1usize..=3).prop_map(|(s, n)| (vec![s.clone(); n], s));
    run(CASES, op_check::case(dims), |c| {
        let rule = registry().build("add_n", &Attrs::new()).unwrap();
        let mesh = Mesh::new(&c.mesh).unwrap();
        let values: Vec<Tensor> = c
            .shapes
            .iter()
            .enumerate()
            .map(|(i, s)| Tensor::probe(s, i as u64 + 1, Values::Integers))
            .collect();
        let op = |v: &[Tensor]| {
            vec![Tensor::from_fn(v[0].shape(), |i| {
                v.iter().map(|x| x.get(i)).sum()
            })]
        };
        let inputs: Vec<Input> = values
            .iter()
            .zip(&c.inputs)
            .map(|(v, a)| Input::new(v.clone(), a.clone()))
            .collect();
        t[0].record(check_forward(&*rule, &mesh, &inputs, op))?;
        let outs: Vec<DistAttr> = c
            .outputs
            .iter()
            .map(|a| DistAttr::new(a.dims_mapping.clone()))
            .collect();
        t[1].record(check_backward(&*rule, &mesh, &values, &outs, op))?;
        let grad = |x: &[Tensor], _: &[Tensor], dy: &[Tensor]| vec![dy[0].clone(); x.len()];
        t[2].record(check_grad(&*rule, &mesh, &inputs, &c.outputs, op, grad))?;
        Ok(())
    });
    assert_meaningful("add_n", &t);
}

#[derive(Clone, Debug)]
struct PairP {
    x: Vec<usize>,
    /// The second operand: its rank (x's trailing dims), absent at 0.
    y_rank: usize,
}

fn pair_params(last_even: bool) -> impl Strategy<Value = PairP> {
    (
        shape(1..=3),
        any::<prop::sample::Index>(),
        prop::bool::weighted(0.3),
    )
        .prop_map(move |(mut x, y, absent)| {
            let r = x.len();
            if absent && last_even {
                x[r - 1] = 2 * x[r - 1].div_ceil(2);
            }
            let y_rank = if absent { 0 } else { 1 + y.index(r) };
            PairP { x, y_rank }
        })
}

/// x, y (rank 0 when absent: the placeholder's), out.
fn pair_layout(p: &PairP) -> kernel_check::Layout {
    let r = p.x.len();
    let x_dims: Vec<usize> = if p.y_rank == 0 {
        (0..r - 1).collect()
    } else {
        (0..r).collect()
    };
    (
        vec![r, p.y_rank, r],
        vec![
            (0, x_dims.clone()),
            (1, (0..p.y_rank).collect()),
            (2, x_dims),
        ],
    )
}

#[test]
fn swiglu_against_the_kernel() {
    let d = kernel_check::Dirs::new();
    run(
        CASES,
        kernel_check::case(pair_params(true), pair_layout),
        |c| {
            let built = registry().build("swiglu", &Attrs::new()).unwrap();
            let has_y = c.p.y_rank > 0;
            // y is input 1 of every call.
            let absent = u64::from(!has_y) << 1;
            let rule = Absent {
                rule: &*built,
                forward: absent,
                grad: absent,
                outputs: 0,
            };
            let mesh = Mesh::new(&c.mesh).unwrap();
            let x = small(&c.p.x, 1);
            let y = if has_y {
                small(&c.p.x[c.p.x.len() - c.p.y_rank..], 2)
            } else {
                Tensor::full(&[], 0.0)
            };
            let op = move |v: &[Tensor]| vec![swiglu(&v[0], has_y.then_some(&v[1]))];
            let ins = inputs(&[x, y], &[&c.a[0], &c.a[1]]);
            d.forward_backward(&rule, &mesh, &ins, &c.a[2..], &op)?;
            let vjp = move |v: &[Tensor], _: &[Tensor], dy: &[Tensor]| {
                let mut g = swiglu_grad(&v[0], has_y.then_some(&v[1]), &dy[0]);
                if !has_y {
                    // The placeholder's grad.
                    g.push(Tensor::full(&[], 0.0));
                }
                g
            };
            d.grad(true, &rule, &mesh, &ins, &c.a[2..], &op, &vjp)
        },
    );
    d.assert_meaningful("swiglu", None, true, &[]);
}

#[test]
fn label_smooth_against_the_kernel() {
    let d = kernel_check::Dirs::new();
    // The prior: [C] or [1, C] (pair_params' y of rank 1 or 2, its leading
    // dim made 1 below), or absent.
    let params = pair_params(false).prop_map(|mut p| {
        p.y_rank = p.y_rank.min(2);
        p
    });
    let layout = |p: &PairP| {
        let (ranks, mut forced) = pair_layout(p);
        // Only the prior's class dim can shard.
        forced[1].1 = p.y_rank.checked_sub(1).into_iter().collect();
        (ranks, forced)
    };
    run(CASES, kernel_check::case(params, layout), |c| {
        let built = registry()
            .build("label_smooth", &Attrs::new().with("epsilon", SMOOTHING))
            .unwrap();
        let has_prior = c.p.y_rank > 0;
        let absent = u64::from(!has_prior) << 1;
        // Without a prior the class dim given sharded must come back
        // gathered (the uniform prior needs the class count).
        let a = c.a.clone();
        let rule = Absent {
            rule: &*built,
            forward: absent,
            grad: absent,
            outputs: 0,
        };
        let mesh = Mesh::new(&c.mesh).unwrap();
        let r = c.p.x.len();
        let prior = match c.p.y_rank {
            0 => Tensor::full(&[], 0.0),
            1 => small(&c.p.x[r - 1..], 2),
            _ => small(&[1, c.p.x[r - 1]], 2),
        };
        let op = move |v: &[Tensor]| vec![label_smooth(&v[0], has_prior.then_some(&v[1]))];
        let ins = inputs(&[small(&c.p.x, 1), prior], &[&a[0], &a[1]]);
        d.forward_backward(&rule, &mesh, &ins, &a[2..], &op)?;
        // The prior has no grad (`no_grad`).
        let vjp =
            |_: &[Tensor], _: &[Tensor], dy: &[Tensor]| vec![dy[0].map(|g| (1.0 - SMOOTHING) * g)];
        d.grad(true, &rule, &mesh, &ins, &a[2..], &op, &vjp)
    });
    d.assert_meaningful("label_smooth", None, true, &[]);
}
