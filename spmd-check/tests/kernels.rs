//! The reference kernels' own test: every hand-written grad kernel in
//! `common::kernels` must be its op's true gradient, checked against central
//! differences (else the properties would check the layouts of some other
//! function).

mod common;

use spmd_check::Tensor;

use common::kernels::along_axis::{
    cummax, cummax_grad, cumsum, log_softmax, log_softmax_grad, scatter_lines, top_k, tril_triu,
};
use common::kernels::attention::{attention, attention_grad, rope};
use common::kernels::drop_dim;
use common::kernels::elementwise::{swiglu, swiglu_grad};
use common::kernels::indexing::{gather, gather_grad, take};
use common::kernels::loss::CrossEntropy;
use common::kernels::norm::{
    EPSILON, layer_norm, layer_norm_grad, normalize, normalize_grad, rms_norm, rms_norm_grad,
};
use common::kernels::reduce::logsumexp;
use common::kernels::reduce::{p_norm, p_norm_grad, reduce, reduce_grad};
use common::kernels::shape::{
    SliceAttrs, concat, expand_as, expand_as_grad, pad, pad_grad, split, stack, tile, tile_grad,
};
use common::nn::{assert_gradient, numeric_grad, small};
use common::slot_check::probe;

// ------------------------------------ the reference grads are the gradients

/// The hand-written grad kernels the properties check layouts of must be
/// the ops' true gradients (else the properties would check the layout of
/// some other function).
#[test]
fn nn_grads_match_central_differences() {
    let check = |what: &str,
                 f: &dyn Fn(&[Tensor]) -> Vec<Tensor>,
                 inputs: &[Tensor],
                 grads: &[Tensor],
                 dys: &[Tensor]| {
        for (j, g) in grads.iter().enumerate() {
            assert_gradient(what, g, &numeric_grad(f, inputs, dys, j));
        }
    };
    let x = small(&[2, 3, 4], 1);
    let dy = |shape: &[usize]| small(shape, 9);

    // Selections: the grad of the selected values.
    for (axis, k) in [(1, 2), (2, 4)] {
        let f = move |v: &[Tensor]| vec![top_k(&v[0], axis, k, true).swap_remove(0)];
        let out = top_k(&x, axis, k, true);
        let g = dy(out[0].shape());
        let dx = scatter_lines(x.shape(), axis, &out[1], &g);
        check("topk", &f, std::slice::from_ref(&x), &[dx], &[g]);
    }
    // Along an axis, and reductions (their grads given the forward out).
    let f = |v: &[Tensor]| vec![log_softmax(&v[0], 1)];
    let g = dy(x.shape());
    check(
        "log_softmax",
        &f,
        std::slice::from_ref(&x),
        &[log_softmax_grad(&x, &g, 1)],
        &[g],
    );
    let flags = [false, true, true];
    for p in [2.0, 1.0, 3.0, f64::INFINITY, f64::NEG_INFINITY] {
        let f = move |v: &[Tensor]| vec![reduce(&v[0], &flags, false, |g| p_norm(p, g))];
        let out = f(std::slice::from_ref(&x)).swap_remove(0);
        let g = dy(out.shape());
        let dx = reduce_grad(&x, &flags, &out, &g, |v, j, n| p_norm_grad(p, v, j, n));
        check(
            &format!("p_norm {p}"),
            &f,
            std::slice::from_ref(&x),
            &[dx],
            &[g],
        );
    }
    let f = move |v: &[Tensor]| vec![reduce(&v[0], &flags, true, logsumexp)];
    let out = f(std::slice::from_ref(&x)).swap_remove(0);
    let g = dy(out.shape());
    let dx = reduce_grad(&x, &flags, &out, &g, |v, j, lse| (v[j] - lse).exp());
    check("logsumexp", &f, std::slice::from_ref(&x), &[dx], &[g]);

    // swiglu with y (broadcast), and halving x.
    let y = small(&[3, 4], 2);
    let f = |v: &[Tensor]| vec![swiglu(&v[0], Some(&v[1]))];
    let g = dy(x.shape());
    check(
        "swiglu",
        &f,
        &[x.clone(), y.clone()],
        &swiglu_grad(&x, Some(&y), &g),
        std::slice::from_ref(&g),
    );
    let f = |v: &[Tensor]| vec![swiglu(&v[0], None)];
    let g = dy(&[2, 3, 2]);
    check(
        "swiglu halves",
        &f,
        std::slice::from_ref(&x),
        &swiglu_grad(&x, None, &g),
        &[g],
    );

    // fused_rms_norm: out and invvar.
    let w = small(&[4], 3);
    let f = |v: &[Tensor]| rms_norm(&v[0], &v[1]);
    let (g, ginv) = (dy(x.shape()), small(&[2, 3], 4));
    let grads = rms_norm_grad(&x, &w, &g, &ginv);
    check(
        "fused_rms_norm",
        &f,
        &[x.clone(), w.clone()],
        &grads,
        &[g, ginv],
    );

    // Normalizations: in groups of the batch and the first two channels
    // (x as [N, C, L]), scaled per channel.
    let (scale, bias) = (small(&[3], 5), small(&[3], 6));
    let stat = |i: &[usize]| i[0] * 2 + i[1] / 2;
    let chan = |i: &[usize]| i[1];
    let f = |v: &[Tensor]| vec![normalize(&v[0], 4, &stat, &chan, &v[1], &v[2]).0];
    let (_, mean, var) = normalize(&x, 4, &stat, &chan, &scale, &bias);
    let inv = Tensor::new(
        &[4],
        var.iter().map(|v| 1.0 / (v + EPSILON).sqrt()).collect(),
    );
    let g = dy(x.shape());
    let grads = normalize_grad(&x, &g, &stat, &chan, &Tensor::new(&[4], mean), &inv, &scale);
    check("normalize", &f, &[x.clone(), scale, bias], &grads, &[g]);

    // Rope: its grad is the transpose (x is linear), both pairings, with
    // angles at given positions or computed.
    let q = small(&[2, 3, 1, 4], 7);
    let (sin, cos) = (small(&[1, 3, 1, 4], 8), small(&[1, 3, 1, 4], 10));
    let pos = Tensor::from_fn(&[2, 3], |i| ((i[0] + 2 * i[1] + 1) % 3) as f64);
    for neox in [true, false] {
        for angles in [true, false] {
            let (s, c, p) = if angles {
                (Some(&sin), Some(&cos), Some(&pos))
            } else {
                (None, None, None)
            };
            let f = move |v: &[Tensor]| vec![rope(&v[0], s, c, p, false, neox, false)];
            let g = dy(q.shape());
            let dq = rope(&g, s, c, p, false, neox, true);
            check(
                &format!("rope neox {neox}"),
                &f,
                std::slice::from_ref(&q),
                &[dq],
                &[g],
            );
        }
    }
}

// ------------------------------------ the reference grads are the gradients

/// The hand-written grad kernels must be the ops' true gradients (else the
/// properties would check the layout of some other function).
#[test]
fn shape_and_indexing_grads_match_central_differences() {
    /// `grad` (given the output grads) against central differences of `f`.
    fn check(
        what: &str,
        f: &dyn Fn(&[Tensor]) -> Vec<Tensor>,
        inputs: &[Tensor],
        grad: &dyn Fn(&[Tensor]) -> Vec<Tensor>,
    ) {
        let dys: Vec<Tensor> = f(inputs)
            .iter()
            .enumerate()
            .map(|(k, o)| probe(o.shape(), 10 + k as u64))
            .collect();
        let analytic = grad(&dys);
        assert_eq!(analytic.len(), inputs.len(), "{what}");
        for (j, a) in analytic.iter().enumerate() {
            assert_gradient(what, a, &numeric_grad(f, inputs, &dys, j));
        }
    }
    let x = probe(&[3, 4], 1);
    let xs = std::slice::from_ref(&x);

    let s = SliceAttrs {
        axes: vec![1, -2],
        starts: vec![3, 0],
        ends: vec![0, 1],
        strides: vec![-2, 1],
        decrease: vec![],
    };
    check("strided_slice", &|v| vec![s.apply(&v[0])], xs, &|dy| {
        vec![s.grad(x.shape(), &dy[0])]
    });
    let s = SliceAttrs {
        axes: vec![0, 1],
        starts: vec![1, -3],
        ends: vec![2, 100],
        strides: vec![],
        decrease: vec![0],
    };
    check("slice", &|v| vec![s.apply(&v[0])], xs, &|dy| {
        vec![s.grad(x.shape(), &dy[0])]
    });

    check("tile", &|v| vec![tile(&v[0], &[2, 1, 3])], xs, &|dy| {
        vec![tile_grad(x.shape(), &[2, 1, 3], &dy[0])]
    });

    let ins = [probe(&[1, 4], 2), probe(&[2, 3, 4], 3)];
    check(
        "expand_as",
        &|v| vec![expand_as(&v[0], v[1].shape(), &[1, 4])],
        &ins,
        &|dy| {
            vec![
                expand_as_grad(&[1, 4], &[1, 4], &dy[0]),
                Tensor::full(&[2, 3, 4], 0.0),
            ]
        },
    );

    let p = [1, 0, 2, 1];
    check("pad", &|v| vec![pad(&v[0], &p)], xs, &|dy| {
        vec![pad_grad(&p, &dy[0])]
    });

    for index in [
        Tensor::new(&[3], vec![3.0, 0.0, 3.0]),
        Tensor::new(&[], vec![2.0]),
    ] {
        check("gather", &|v| vec![gather(&v[0], &index, 1)], xs, &|dy| {
            vec![gather_grad(&dy[0], &index, 1, 4)]
        });
    }

    let ins = [x.clone(), probe(&[3, 2], 4)];
    check("concat", &|v| vec![concat(v, 1)], &ins, &|dy| {
        split(&dy[0], 1, &[4, 2])
    });
    check("split", &|v| split(&v[0], 1, &[1, 3]), xs, &|dy| {
        vec![concat(dy, 1)]
    });
    let ins = [x.clone(), probe(&[3, 4], 5)];
    check("stack", &|v| vec![stack(v, 2)], &ins, &|dy| {
        (0..2)
            .map(|k| drop_dim(&take(&dy[0], 2, &[k]), 2))
            .collect()
    });

    for (ex, rev) in [(false, false), (true, false), (false, true), (true, true)] {
        check("cumsum", &|v| vec![cumsum(&v[0], 0, ex, rev)], xs, &|dy| {
            vec![cumsum(&dy[0], 0, ex, !rev)]
        });
    }
    for lower in [false, true] {
        check(
            "tril_triu",
            &|v| vec![tril_triu(&v[0], -1, lower)],
            xs,
            &|dy| vec![tril_triu(&dy[0], -1, lower)],
        );
    }

    // cummax: only `out` has a gradient; the indices are fixed.
    let [_, indices] = cummax(&x, 1);
    check(
        "cummax",
        &|v| vec![cummax(&v[0], 1)[0].clone()],
        xs,
        &|dy| vec![cummax_grad(x.shape(), &indices, 1, &dy[0])],
    );
}

// ------------------------------------ the reference grads are the gradients

/// The hand-written grad kernels the properties check layouts of must be
/// the ops' true gradients (else the properties would check the layout of
/// some other function).
#[test]
fn layer_norm_and_attention_grads_match_central_differences() {
    // layer_norm, x [3, 4], normalized over dim 1.
    let (x, scale, bias) = (small(&[3, 4], 1), small(&[4], 2), small(&[4], 3));
    let f = |v: &[Tensor]| layer_norm(&v[0], Some(&v[1]), Some(&v[2]), 1);
    let inputs = [x.clone(), scale.clone(), bias];
    let stats = f(&inputs);
    let (dy, dmean, dvar) = (small(&[3, 4], 4), small(&[3], 5), small(&[3], 6));
    let zeros = Tensor::full(&[3], 0.0);
    let paddle = layer_norm_grad(&x, Some(&scale), &stats[1], &stats[2], &dy, None, 1);
    let dys = [dy.clone(), zeros.clone(), zeros];
    for (j, g) in paddle.iter().enumerate() {
        assert_gradient("layer_norm_grad", g, &numeric_grad(&f, &inputs, &dys, j));
    }
    let stats_grads = Some((&dmean, &dvar));
    let derived = layer_norm_grad(&x, Some(&scale), &stats[1], &stats[2], &dy, stats_grads, 1);
    let dys = [dy, dmean.clone(), dvar.clone()];
    for (j, g) in derived.iter().enumerate() {
        assert_gradient("layer_norm vjp", g, &numeric_grad(&f, &inputs, &dys, j));
    }

    // flash_attention, 4 query heads on 2 kv heads, both mask forms.
    for (mask_heads, causal) in [(1, false), (4, true), (4, false), (1, true)] {
        let (q, k, v) = (
            small(&[2, 3, 4, 2], 1),
            small(&[2, 4, 2, 2], 2),
            small(&[2, 4, 2, 3], 3),
        );
        let mask = small(&[2, mask_heads, 3, 4], 4);
        let f = move |t: &[Tensor]| attention(&t[0], &t[1], &t[2], Some(&t[3]), None, causal);
        let inputs = [q.clone(), k.clone(), v.clone(), mask.clone()];
        let outs = f(&inputs);
        let (dout, dsm, dlse) = (
            small(&[2, 3, 4, 3], 5),
            small(&[2, 4, 3, 4], 6),
            small(&[2, 4, 3], 7),
        );
        let none = |t: &Tensor| Tensor::full(t.shape(), 0.0);
        let what = format!("attention grad, mask heads {mask_heads}, causal {causal}");
        let paddle = attention_grad(
            &q,
            &k,
            &v,
            Some(&mask),
            causal,
            &outs[0],
            &outs[2],
            &dout,
            None,
        );
        let dys = [dout.clone(), none(&dsm), none(&dlse), none(&outs[3])];
        for (j, g) in paddle.iter().enumerate() {
            assert_gradient(&what, g, &numeric_grad(&f, &inputs, &dys, j));
        }
        let extra = Some((&dsm, &dlse));
        let derived = attention_grad(
            &q,
            &k,
            &v,
            Some(&mask),
            causal,
            &outs[0],
            &outs[2],
            &dout,
            extra,
        );
        let dys = [dout, dsm.clone(), dlse.clone(), none(&outs[3])];
        for (j, g) in derived.iter().enumerate() {
            assert_gradient(&what, g, &numeric_grad(&f, &inputs, &dys, j));
        }
    }
}

// ------------------------------------ the reference grad is the gradient

/// The hand-written grad kernel the properties check layouts of must be
/// the op's true gradient (else they would check the layout of some other
/// function).
#[test]
fn cross_entropy_grad_matches_central_differences() {
    // cross_entropy_with_softmax, [3, 4] on either axis, every label form.
    for (soft, use_softmax, axis) in [
        (false, true, 1),
        (false, false, 0),
        (true, true, 0),
        (true, false, 1),
    ] {
        let op = CrossEntropy {
            soft,
            use_softmax,
            axis,
            ignore_index: 2,
        };
        let mut row = vec![3, 4];
        row[axis] = 1;
        let logits = if use_softmax {
            small(&[3, 4], 1).map(|v| 3.0 * v)
        } else {
            small(&[3, 4], 1).map(|v| v.abs() + 0.1)
        };
        // Hard labels 0, 1, 2 (ignored), 0.
        let label = if soft {
            small(&[3, 4], 2).map(f64::abs)
        } else {
            Tensor::from_fn(&row, |i| ((i[0] + i[1]) % 3) as f64)
        };
        let f = move |t: &[Tensor]| op.forward(&t[0], &t[1]);
        let inputs = [logits, label.clone()];
        let y = f(&inputs).swap_remove(0);
        let dys = [small(&[3, 4], 3), small(&row, 4)];
        let g = op.grad(&label, &y, &dys[0], &dys[1]);
        let what = format!("cross entropy grad, {op:?}");
        assert_gradient(&what, &g[0], &numeric_grad(&f, &inputs, &dys, 0));
        // A hard label is an index: no differences to take.
        if soft {
            assert_gradient(&what, &g[1], &numeric_grad(&f, &inputs, &dys, 1));
        }
    }
}
