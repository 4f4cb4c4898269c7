//! Ops along one axis, where a sharded axis would compute over a block:
//! `softmax` (against the op, its grad against Paddle's kernel
//! `dx = y·(dy − Σ dy·y)`), `log_softmax`, `topk`, `argsort`, `cumsum`
//! (`exclusive`, `reverse`, `flatten`), `cummax` (grad in Paddle's form
//! `(x, indices; out_grad)`), `tril_triu` (both `lower`) and `triu`.
//!
//! Default: 48–64 cases per property; `SPMD_CHECK_CASES=N` for more.

mod common;

use proptest::prelude::*;
use spmd_check::{Input, Tensor, Values, check_backward, check_forward, check_grad};
use spmd_core::SpmdRuleExt;
use spmd_core::{Attrs, DistAttr, Mesh, Spec};

use common::kernel_check::{axis_attr, inputs, shape_axis, unshard};
use common::kernels::along_axis::{
    cummax, cummax_grad, cumsum, log_softmax, log_softmax_grad, scatter_lines, softmax,
    softmax_grad, top_k, tril_triu,
};
use common::kernels::others;
use common::nn::{Counts, complete, input_specs, small};
use common::slot_check::{axis, check_op, free, probe};
use common::{CASES, CORE_CASES, Tally, build, registry, run, shape};
use common::{einsum_check, kernel_check, slot_check};

#[derive(Clone, Debug)]
struct SoftmaxCase {
    shape: Vec<usize>,
    axis: i64,
    l: einsum_check::Layout,
}

fn softmax_case() -> impl Strategy<Value = SoftmaxCase> {
    prop::collection::vec(1usize..=5, 1..=3)
        .prop_flat_map(|shape| {
            let r = shape.len() as i64;
            (
                Just(shape.clone()),
                -r..r,
                einsum_check::layout(vec![shape.clone()], vec![shape]),
            )
        })
        .prop_map(|(shape, axis, l)| SoftmaxCase { shape, axis, l })
}

#[test]
fn softmax_against_the_op() {
    let (fw, bw, gr) = (Tally::new(), Tally::new(), Tally::new());
    run(CORE_CASES, softmax_case(), |c| {
        let rule = build("softmax", &Attrs::new().with("axis", c.axis));
        let mesh = Mesh::new(&c.l.mesh).unwrap();
        let axis = c.axis.rem_euclid(c.shape.len() as i64) as usize;
        // Small values keep exp() tame.
        let x = Tensor::probe(&c.shape, 3, Values::Integers).map(|v| v / 8.0);
        let op = |t: &[Tensor]| vec![softmax(&t[0], axis)];
        fw.record(check_forward(
            &*rule,
            &mesh,
            &[Input::new(x.clone(), c.l.inputs[0].clone())],
            op,
        ))?;
        bw.record(check_backward(
            &*rule,
            &mesh,
            std::slice::from_ref(&x),
            &c.l.outputs,
            op,
        ))?;
        let grad =
            |_: &[Tensor], y: &[Tensor], dy: &[Tensor]| vec![softmax_grad(&y[0], &dy[0], axis)];
        gr.record(check_grad(
            &*rule,
            &mesh,
            &[Input::new(x, c.l.inputs[0].clone())],
            &c.l.outputs,
            op,
            grad,
        ))?;
        Ok(())
    });
    fw.assert_meaningful("softmax forward");
    bw.assert_meaningful("softmax backward");
    gr.assert_meaningful("softmax grad");
}

#[derive(Clone, Debug)]
struct SelectP {
    x: Vec<usize>,
    axis: usize,
    negative: bool,
    k: usize,
    order: bool,
}

fn select_params() -> impl Strategy<Value = SelectP> {
    (
        shape_axis(1..=3),
        any::<prop::sample::Index>(),
        any::<bool>(),
    )
        .prop_map(|((x, axis, negative), k, order)| SelectP {
            k: 1 + k.index(x[axis]),
            x,
            axis,
            negative,
            order,
        })
}

/// x, out, indices.
fn select_layout(p: &SelectP) -> kernel_check::Layout {
    // x: a kept dim, then any dim, the axis too (the rule must gather it).
    let (r, keep) = (p.x.len(), others(p.x.len(), p.axis));
    (
        vec![r, r, r],
        vec![
            (0, keep.clone()),
            (0, (0..r).collect()),
            (1, keep.clone()),
            (2, keep),
        ],
    )
}

#[test]
fn topk_against_the_kernel() {
    let d = kernel_check::Dirs::new();
    run(
        CASES,
        kernel_check::case(select_params(), select_layout),
        |c| {
            let SelectP {
                ref x,
                axis,
                negative,
                k,
                order: largest,
            } = c.p;
            let attrs = Attrs::new()
                .with("k", k as i64)
                .with("axis", axis_attr(axis, x.len(), negative))
                .with("largest", largest);
            let rule = registry().build("topk", &attrs).unwrap();
            let mesh = Mesh::new(&c.mesh).unwrap();
            let op = move |v: &[Tensor]| top_k(&v[0], axis, k, largest);
            let values = [Tensor::probe(x, 1, Values::Integers)];
            let ins = inputs(&values, &[&c.a[0]]);
            d.forward_backward(&*rule, &mesh, &ins, &c.a[1..3], &op)?;

            // Paddle's topk_grad: (x, indices; out_grad).
            let dense = op(&values);
            // The grads get x's axis unsharded (forward checks the gather), so
            // that more of their answers split work.
            let x_attr = unshard(&c.a[0], axis);
            let ins = inputs(&values, &[&x_attr]);
            let sig = inputs(&[values[0].clone(), dense[1].clone()], &[&x_attr, &c.a[2]]);
            let forward = move |v: &[Tensor]| vec![op(&v[..1]).swap_remove(0)];
            let grad = move |v: &[Tensor], _: &[Tensor], dy: &[Tensor]| {
                vec![scatter_lines(v[0].shape(), axis, &v[1], &dy[0])]
            };
            d.grad(false, &*rule, &mesh, &sig, &c.a[1..2], &forward, &grad)?;

            // Derived: (x; out_grad, indices_grad), the indices recomputed.
            let vjp = move |v: &[Tensor], _: &[Tensor], dy: &[Tensor]| {
                let idx = op(v).swap_remove(1);
                vec![scatter_lines(v[0].shape(), axis, &idx, &dy[0])]
            };
            d.grad(true, &*rule, &mesh, &ins, &c.a[1..3], &op, &vjp)
        },
    );
    d.assert_meaningful("topk", Some("x, indices; out_grad"), true, &[]);
}

#[test]
fn argsort_against_the_kernel() {
    let d = kernel_check::Dirs::new();
    run(
        CASES,
        kernel_check::case(select_params(), select_layout),
        |c| {
            let SelectP {
                ref x,
                axis,
                negative,
                order: descending,
                ..
            } = c.p;
            let attrs = Attrs::new()
                .with("axis", axis_attr(axis, x.len(), negative))
                .with("descending", descending);
            let rule = registry().build("argsort", &attrs).unwrap();
            let mesh = Mesh::new(&c.mesh).unwrap();
            let op = move |v: &[Tensor]| top_k(&v[0], axis, v[0].shape()[axis], descending);
            let values = [Tensor::probe(x, 1, Values::Integers)];
            let ins = inputs(&values, &[&c.a[0]]);
            d.forward_backward(&*rule, &mesh, &ins, &c.a[1..3], &op)?;

            // Paddle's argsort_grad: (indices, x; out_grad).
            let dense = op(&values);
            // The grads get x's axis unsharded, as for topk.
            let x_attr = unshard(&c.a[0], axis);
            let ins = inputs(&values, &[&x_attr]);
            let sig = inputs(&[dense[1].clone(), values[0].clone()], &[&c.a[2], &x_attr]);
            let forward = move |v: &[Tensor]| vec![op(&v[1..]).swap_remove(0)];
            let grad = move |v: &[Tensor], _: &[Tensor], dy: &[Tensor]| {
                vec![scatter_lines(v[1].shape(), axis, &v[0], &dy[0])]
            };
            d.grad(false, &*rule, &mesh, &sig, &c.a[1..2], &forward, &grad)?;

            let vjp = move |v: &[Tensor], _: &[Tensor], dy: &[Tensor]| {
                let idx = op(v).swap_remove(1);
                vec![scatter_lines(v[0].shape(), axis, &idx, &dy[0])]
            };
            d.grad(true, &*rule, &mesh, &ins, &c.a[1..3], &op, &vjp)
        },
    );
    d.assert_meaningful("argsort", Some("indices, x; out_grad"), true, &[]);
}

#[test]
fn log_softmax_against_the_kernel() {
    let d = kernel_check::Dirs::new();
    let layout = |p: &((Vec<usize>, usize, bool), bool)| {
        let keep = others(p.0.0.len(), p.0.1);
        (vec![p.0.0.len(); 2], vec![(0, keep.clone()), (1, keep)])
    };
    run(
        CASES,
        kernel_check::case((shape_axis(1..=3), any::<bool>()), layout),
        |c| {
            let ((ref x, axis, negative), aligned) = c.p;
            let attrs = Attrs::new().with("axis", axis_attr(axis, x.len(), negative));
            let rule = registry().build("log_softmax", &attrs).unwrap();
            let mesh = Mesh::new(&c.mesh).unwrap();
            let op = move |v: &[Tensor]| vec![log_softmax(&v[0], axis)];
            let ins = inputs(&[small(x, 1)], &[&c.a[0]]);
            d.forward_backward(&*rule, &mesh, &ins, &c.a[1..], &op)?;
            let vjp = move |v: &[Tensor], _: &[Tensor], dy: &[Tensor]| {
                vec![log_softmax_grad(&v[0], &dy[0], axis)]
            };
            // The rule refuses conflicting x and out_grad (`strict`): half the
            // time, out_grad laid out as x.
            let dy = if aligned {
                DistAttr::new(c.a[0].dims_mapping.clone())
            } else {
                c.a[1].clone()
            };
            d.grad(true, &*rule, &mesh, &ins, &[dy], &op, &vjp)
        },
    );
    d.assert_meaningful("log_softmax", None, true, &[]);
}

// ---------------------------------------------------- tril_triu, triu

#[derive(Clone, Debug)]
struct TriCase {
    shape: Vec<usize>,
    diagonal: i64,
    lower: bool,
    l: slot_check::Layout,
}

fn tri_case() -> impl Strategy<Value = TriCase> {
    (
        prop_oneof![1 => shape(2..=2), 4 => shape(3..=4)],
        -2i64..=2,
        any::<bool>(),
    )
        .prop_flat_map(|(x, diagonal, lower)| {
            let r = x.len();
            let slot = (x.clone(), free(&x, &[r - 2, r - 1]));
            (
                Just((x, diagonal, lower)),
                slot_check::layout(vec![slot.clone()], vec![slot]),
            )
        })
        .prop_map(|((shape, diagonal, lower), l)| TriCase {
            shape,
            diagonal,
            lower,
            l,
        })
}

fn tri_property(name: &str) {
    let d = slot_check::Dirs::new();
    let triu = name == "triu";
    run(CASES, tri_case(), |c| {
        let lower = c.lower && !triu;
        let mut attrs = Attrs::new().with("diagonal", c.diagonal);
        if !triu {
            attrs = attrs.with("lower", lower);
        }
        let rule = build(name, &attrs);
        let diagonal = c.diagonal;
        let op = |v: &[Tensor]| vec![tril_triu(&v[0], diagonal, lower)];
        // Linear: the grad masks the output grad the same way.
        let grad =
            |_: &[Tensor], _: &[Tensor], dy: &[Tensor]| vec![tril_triu(&dy[0], diagonal, lower)];
        check_op(&d, &*rule, &c.l, &[probe(&c.shape, 1)], &op, Some(&grad))
    });
    d.assert_meaningful(name, true);
}

#[test]
fn tril_triu_against_the_kernel() {
    tri_property("tril_triu");
}

#[test]
fn triu_against_the_kernel() {
    tri_property("triu");
}

// ------------------------------------------------------- cumsum, cummax

#[derive(Clone, Debug)]
struct ScanCase {
    shape: Vec<usize>,
    axis: (i64, usize),
    exclusive: bool,
    reverse: bool,
    /// cumsum's `flatten`: scan `x` as one 1-D tensor.
    flatten: bool,
    /// Outputs: 1 (cumsum) or 2 (cummax: values and indices).
    l: slot_check::Layout,
}

fn scan_case(outputs: usize) -> impl Strategy<Value = ScanCase> {
    let flatten = prop::bool::weighted(if outputs == 1 { 0.2 } else { 0.0 });
    (shape(1..=3), flatten)
        .prop_flat_map(|(x, flatten)| {
            let r = x.len();
            (Just((x, flatten)), axis(r), any::<bool>(), any::<bool>())
        })
        .prop_flat_map(move |((x, flatten), axis, exclusive, reverse)| {
            let slot = (x.clone(), free(&x, &[axis.1]));
            let out = if flatten {
                // Nothing stays sharded.
                let n = vec![x.iter().product()];
                (n, vec![])
            } else {
                slot.clone()
            };
            let ins = if flatten { (x.clone(), vec![]) } else { slot };
            let l = slot_check::layout(vec![ins], vec![out; outputs]);
            (Just((x, axis, exclusive, reverse, flatten)), l)
        })
        .prop_map(|((shape, axis, exclusive, reverse, flatten), l)| ScanCase {
            shape,
            axis,
            exclusive,
            reverse,
            flatten,
            l,
        })
}

#[test]
fn cumsum_against_the_kernel() {
    static D: slot_check::Dirs = slot_check::Dirs::new();
    run(CASES, scan_case(1), |c| {
        let rule = build(
            "cumsum",
            &Attrs::new()
                .with("axis", c.axis.0)
                .with("flatten", c.flatten)
                .with("exclusive", c.exclusive)
                .with("reverse", c.reverse),
        );
        let (axis, ex, rev, flat) = (c.axis.1, c.exclusive, c.reverse, c.flatten);
        let op = |v: &[Tensor]| {
            if flat {
                let x = Tensor::new(&[v[0].len()], v[0].data().to_vec());
                vec![cumsum(&x, 0, ex, rev)]
            } else {
                vec![cumsum(&v[0], axis, ex, rev)]
            }
        };
        // The reverse scan of the output grad (shaped back like x when
        // flattened: x is replicated then, and not read).
        let x_shape = c.shape.clone();
        let grad = |_: &[Tensor], _: &[Tensor], dy: &[Tensor]| {
            if flat {
                let g = cumsum(&dy[0], 0, ex, !rev);
                vec![Tensor::new(&x_shape, g.data().to_vec())]
            } else {
                vec![cumsum(&dy[0], axis, ex, !rev)]
            }
        };
        check_op(&D, &*rule, &c.l, &[probe(&c.shape, 1)], &op, Some(&grad))
    });
    D.assert_meaningful("cumsum", true);
}

/// Forward and backward; the grad in Paddle's form `(x, indices;
/// out_grad)`, the derived form being refused (the grad notation has
/// Paddle's arity).
#[test]
fn cummax_against_the_kernel() {
    static D: slot_check::Dirs = slot_check::Dirs::new();
    static GRAD: Counts = Counts::new();
    run(CASES, scan_case(2), |c| {
        let rule = build("cummax", &Attrs::new().with("axis", c.axis.0));
        let axis = c.axis.1;
        let op = |v: &[Tensor]| cummax(&v[0], axis).to_vec();
        let x = probe(&c.shape, 1);
        check_op(&D, &*rule, &c.l, std::slice::from_ref(&x), &op, None)?;

        let mesh = Mesh::new(&c.l.mesh).unwrap();
        let [_, indices] = cummax(&x, axis);
        // indices laid out as given for the second output.
        let sig = [
            Input::new(x, c.l.ins[0].clone()),
            Input::new(indices, complete(&c.l.outs[1..])[0].clone()),
        ];
        let forward = |v: &[Tensor]| vec![cummax(&v[0], axis)[0].clone()];
        let grad = |v: &[Tensor], _: &[Tensor], dy: &[Tensor]| {
            vec![cummax_grad(v[0].shape(), &v[1], axis, &dy[0])]
        };
        let dy = [Spec::new(sig[0].value.shape(), &c.l.outs[0])];
        GRAD.record(
            &mesh,
            &rule.grad(&mesh, &input_specs(&sig), &dy),
            check_grad(&*rule, &mesh, &sig, &c.l.outs[..1], forward, grad),
        )
    });
    D.assert_meaningful("cummax", false);
    GRAD.assert_meaningful("cummax grad (Paddle's signature)");
}
