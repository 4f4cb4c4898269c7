//! Every gradient kernel against central differences of its forward
//! kernel, on whole tensors: a wrong reference gradient would make the
//! graph simulator's dense run wrong, so it is checked here first.

use spmd_core::{AttrValue, Attrs};

use super::{Arg, Call, Elem, GradCall, Want, erf, kernel, whole_block};
use crate::tensor::{Tensor, Values};

/// One op called on whole tensors: its attributes, its inputs (kind and
/// shape, `None` for an absent slot) and its outputs' shapes.
struct Case {
    op: &'static str,
    attrs: Attrs,
    inputs: Vec<Option<(Elem, Vec<usize>)>>,
    outputs: Vec<Vec<usize>>,
}

fn case(
    op: &'static str,
    attrs: &[(&str, AttrValue)],
    inputs: &[&[usize]],
    outputs: &[&[usize]],
) -> Case {
    let mut a = Attrs::new();
    for (k, v) in attrs {
        a = a.with(k, v.clone());
    }
    Case {
        op,
        attrs: a,
        inputs: inputs
            .iter()
            .map(|s| Some((Elem::Float, s.to_vec())))
            .collect(),
        outputs: outputs.iter().map(|s| s.to_vec()).collect(),
    }
}

fn int(v: i64) -> AttrValue {
    AttrValue::Int(v)
}
fn ints(v: &[i64]) -> AttrValue {
    AttrValue::Ints(v.to_vec())
}

/// Small values of both signs, distinct, away from kinks (relu at 0).
fn values(shape: &[usize], seed: u64, elem: Elem) -> Tensor {
    let t = Tensor::probe(shape, seed, Values::NearOne);
    match elem {
        Elem::Float => t.map(|v| v * 0.7),
        Elem::Int => Tensor::from_fn(shape, |i| (i.iter().sum::<usize>() % 3) as f64),
        Elem::Bool => Tensor::from_fn(shape, |i| {
            f64::from(u8::from(i.iter().sum::<usize>() % 4 != 3))
        }),
    }
}

fn forward(c: &Case, xs: &[Option<Tensor>]) -> Vec<Tensor> {
    let blocks: Vec<_> = c
        .inputs
        .iter()
        .map(|i| i.as_ref().map_or(Vec::new(), |(_, s)| whole_block(s)))
        .collect();
    let args: Vec<Option<Arg<'_>>> = c
        .inputs
        .iter()
        .zip(xs)
        .zip(&blocks)
        .map(|((i, x), b)| match (i, x) {
            (Some((e, s)), Some(x)) => Some(Arg {
                value: x,
                block: b,
                shape: s,
                elem: *e,
            }),
            _ => None,
        })
        .collect();
    let out_blocks: Vec<_> = c.outputs.iter().map(|s| whole_block(s)).collect();
    let wants: Vec<Want<'_>> = c
        .outputs
        .iter()
        .zip(&out_blocks)
        .map(|(s, b)| Want { shape: s, block: b })
        .collect();
    let k = kernel(c.op).unwrap_or_else(|| panic!("no kernel for {}", c.op));
    let out = (k.forward)(&Call {
        op: c.op,
        attrs: &c.attrs,
        inputs: &args,
        outputs: &wants,
    })
    .unwrap_or_else(|e| panic!("{}: {e}", c.op));
    for (t, s) in out.iter().zip(&c.outputs) {
        assert_eq!(t.shape(), s.as_slice(), "{}", c.op);
    }
    out
}

/// Σ dy · f(x): the scalar whose gradient the gradient kernel gives.
fn loss(c: &Case, xs: &[Option<Tensor>], dys: &[Tensor]) -> f64 {
    forward(c, xs)
        .iter()
        .zip(dys)
        .map(|(y, g)| {
            y.data()
                .iter()
                .zip(g.data())
                .map(|(a, b)| a * b)
                .sum::<f64>()
        })
        .sum()
}

fn check(c: Case) {
    let xs: Vec<Option<Tensor>> = c
        .inputs
        .iter()
        .enumerate()
        .map(|(k, i)| i.as_ref().map(|(e, s)| values(s, 7 + k as u64, *e)))
        .collect();
    let dys: Vec<Tensor> = c
        .outputs
        .iter()
        .enumerate()
        .map(|(k, s)| values(s, 101 + k as u64, Elem::Float))
        .collect();
    let blocks: Vec<_> = c
        .inputs
        .iter()
        .map(|i| i.as_ref().map_or(Vec::new(), |(_, s)| whole_block(s)))
        .collect();
    let args: Vec<Option<Arg<'_>>> = c
        .inputs
        .iter()
        .zip(&xs)
        .zip(&blocks)
        .map(|((i, x), b)| match (i, x) {
            (Some((e, s)), Some(x)) => Some(Arg {
                value: x,
                block: b,
                shape: s,
                elem: *e,
            }),
            _ => None,
        })
        .collect();
    let dy_blocks: Vec<_> = c.outputs.iter().map(|s| whole_block(s)).collect();
    let dy_args: Vec<Arg<'_>> = dys
        .iter()
        .zip(&c.outputs)
        .zip(&dy_blocks)
        .map(|((g, s), b)| Arg {
            value: g,
            block: b,
            shape: s,
            elem: Elem::Float,
        })
        .collect();
    let wants: Vec<Option<Want<'_>>> = c
        .inputs
        .iter()
        .zip(&blocks)
        .map(|(i, b)| match i {
            Some((Elem::Float, s)) => Some(Want { shape: s, block: b }),
            _ => None,
        })
        .collect();
    let k = kernel(c.op).unwrap();
    let grad = k
        .grad
        .unwrap_or_else(|| panic!("{} has no gradient kernel", c.op));
    let grads = grad(&GradCall {
        op: c.op,
        attrs: &c.attrs,
        inputs: &args,
        output_grads: &dy_args,
        input_grads: &wants,
    })
    .unwrap_or_else(|e| panic!("{} grad: {e}", c.op));
    let h = 1e-6;
    for (i, want) in wants.iter().enumerate() {
        if want.is_none() {
            continue;
        }
        let g = grads[i]
            .as_ref()
            .unwrap_or_else(|| panic!("{}: no gradient for input {i}", c.op));
        let x = xs[i].as_ref().unwrap();
        assert_eq!(g.shape(), x.shape(), "{} input {i}", c.op);
        for e in 0..x.len() {
            let mut up = xs.clone();
            let mut down = xs.clone();
            up[i].as_mut().unwrap().data_mut()[e] += h;
            down[i].as_mut().unwrap().data_mut()[e] -= h;
            let numeric = (loss(&c, &up, &dys) - loss(&c, &down, &dys)) / (2.0 * h);
            let analytic = g.data()[e];
            assert!(
                (numeric - analytic).abs() <= 1e-6 * (1.0 + numeric.abs()),
                "{} input {i} element {e}: gradient {analytic}, central difference {numeric}",
                c.op
            );
        }
    }
}

#[test]
fn erf_matches_known_values() {
    for (x, v) in [
        (0.0, 0.0),
        (0.5, 0.520_499_877_813_046_5),
        (1.0, 0.842_700_792_949_714_9),
        (2.0, 0.995_322_265_018_952_7),
        (3.0, 0.999_977_909_503_001_4),
        (-1.0, -0.842_700_792_949_714_9),
    ] {
        assert!((erf(x) - v).abs() < 1e-14, "erf({x}) = {}, not {v}", erf(x));
    }
}

#[test]
fn pointwise_and_broadcast_gradients_match_central_differences() {
    for c in [
        case(
            "aten.add.Tensor",
            &[("alpha", int(2))],
            &[&[2, 3], &[3]],
            &[&[2, 3]],
        ),
        case(
            "aten.sub.Tensor",
            &[],
            &[&[2, 1, 3], &[2, 3]],
            &[&[2, 2, 3]],
        ),
        case("aten.mul.Tensor", &[], &[&[2, 3], &[2, 1]], &[&[2, 3]]),
        case(
            "aten.add.Scalar",
            &[("other", int(2)), ("alpha", int(3))],
            &[&[4]],
            &[&[4]],
        ),
        case("aten.sub.Scalar", &[("other", int(1))], &[&[4]], &[&[4]]),
        case(
            "aten.mul.Scalar",
            &[("other", AttrValue::Float(1.5))],
            &[&[3]],
            &[&[3]],
        ),
        case("aten.cos", &[], &[&[3]], &[&[3]]),
        case("aten.sin", &[], &[&[3]], &[&[3]]),
        case("aten.neg", &[], &[&[3]], &[&[3]]),
        case("aten.tanh", &[], &[&[3]], &[&[3]]),
        case("aten.sigmoid", &[], &[&[3]], &[&[3]]),
        case("aten.relu", &[], &[&[4]], &[&[4]]),
        case("aten.gelu", &[], &[&[4]], &[&[4]]),
        case(
            "aten.gelu",
            &[("approximate", AttrValue::Str("tanh".into()))],
            &[&[4]],
            &[&[4]],
        ),
        case(
            "aten.pow.Tensor_Scalar",
            &[("exponent", int(2))],
            &[&[4]],
            &[&[4]],
        ),
        case("aten.clone", &[], &[&[2, 2]], &[&[2, 2]]),
        case("aten._to_copy", &[], &[&[2]], &[&[2]]),
        case("add", &[], &[&[2, 3], &[3]], &[&[2, 3]]),
        case(
            "scale",
            &[
                ("scale", AttrValue::Float(2.0)),
                ("bias", AttrValue::Float(1.0)),
            ],
            &[&[3]],
            &[&[3]],
        ),
        case("gelu", &[], &[&[3]], &[&[3]]),
        case("softmax", &[("axis", int(-1))], &[&[2, 3]], &[&[2, 3]]),
        case("mean_all", &[], &[&[2, 3]], &[&[]]),
    ] {
        check(c);
    }
}

#[test]
fn rsqrt_gradient_matches_central_differences() {
    // Positive inputs only.
    let c = case("aten.rsqrt", &[], &[&[3]], &[&[3]]);
    let x = Some(Tensor::new(&[3], vec![0.5, 1.3, 2.0]));
    let dys = vec![Tensor::new(&[3], vec![1.0, -0.5, 0.25])];
    let g = loss(&c, std::slice::from_ref(&x), &dys);
    assert!(g.is_finite());
    // (A shifted copy of `check`: positive probe values.)
    let b = whole_block(&[3]);
    let arg = Arg {
        value: x.as_ref().unwrap(),
        block: &b,
        shape: &[3],
        elem: Elem::Float,
    };
    let dyb = whole_block(&[3]);
    let dyarg = Arg {
        value: &dys[0],
        block: &dyb,
        shape: &[3],
        elem: Elem::Float,
    };
    let want = Want {
        shape: &[3],
        block: &b,
    };
    let grad = (kernel("aten.rsqrt").unwrap().grad.unwrap())(&GradCall {
        op: "aten.rsqrt",
        attrs: &c.attrs,
        inputs: &[Some(arg)],
        output_grads: &[dyarg],
        input_grads: &[Some(want)],
    })
    .unwrap();
    for e in 0..3 {
        let (mut up, mut down) = (x.clone(), x.clone());
        up.as_mut().unwrap().data_mut()[e] += 1e-6;
        down.as_mut().unwrap().data_mut()[e] -= 1e-6;
        let numeric = (loss(&c, &[up], &dys) - loss(&c, &[down], &dys)) / 2e-6;
        let analytic = grad[0].as_ref().unwrap().data()[e];
        assert!(
            (numeric - analytic).abs() <= 1e-6 * (1.0 + numeric.abs()),
            "{analytic} vs {numeric}"
        );
    }
}

#[test]
fn view_gradients_match_central_differences() {
    for c in [
        case(
            "aten.unsqueeze",
            &[("dim", int(1))],
            &[&[2, 3]],
            &[&[2, 1, 3]],
        ),
        case("aten.view", &[("size", ints(&[6]))], &[&[2, 3]], &[&[6]]),
        case(
            "aten.permute",
            &[("dims", ints(&[1, 0, 2]))],
            &[&[2, 3, 2]],
            &[&[3, 2, 2]],
        ),
        case(
            "aten.expand",
            &[("size", ints(&[2, -1, 3]))],
            &[&[1, 3]],
            &[&[2, 1, 3]],
        ),
        case(
            "aten.slice.Tensor",
            &[
                ("dim", int(1)),
                ("start", int(1)),
                ("end", int(4)),
                ("step", int(2)),
            ],
            &[&[2, 5]],
            &[&[2, 2]],
        ),
        case(
            "aten.cat",
            &[("dim", int(0))],
            &[&[1, 3], &[2, 3]],
            &[&[3, 3]],
        ),
        case(
            "aten.split_with_sizes",
            &[("split_sizes", ints(&[1, 2])), ("dim", int(1))],
            &[&[2, 3]],
            &[&[2, 1], &[2, 2]],
        ),
        case("aten.cumsum", &[("dim", int(1))], &[&[2, 3]], &[&[2, 3]]),
        case(
            "aten.mean.dim",
            &[("dim", ints(&[-1])), ("keepdim", AttrValue::Bool(true))],
            &[&[2, 3]],
            &[&[2, 1]],
        ),
        case("aten.mean.dim", &[("dim", ints(&[0]))], &[&[2, 3]], &[&[3]]),
        case(
            "transpose",
            &[("perm", ints(&[2, 0, 1]))],
            &[&[2, 3, 2]],
            &[&[2, 2, 3]],
        ),
        case(
            "reshape",
            &[("shape", ints(&[3, 2]))],
            &[&[2, 3]],
            &[&[3, 2]],
        ),
        case(
            "split",
            &[("axis", int(1)), ("sections", ints(&[1, 2]))],
            &[&[2, 3]],
            &[&[2, 1], &[2, 2]],
        ),
    ] {
        check(c);
    }
}

#[test]
fn product_gradients_match_central_differences() {
    for c in [
        case("aten.mm", &[], &[&[2, 3], &[3, 4]], &[&[2, 4]]),
        case("aten.addmm", &[], &[&[4], &[2, 3], &[3, 4]], &[&[2, 4]]),
        case(
            "aten.addmm",
            &[("beta", AttrValue::Float(0.5)), ("alpha", int(2))],
            &[&[2, 4], &[2, 3], &[3, 4]],
            &[&[2, 4]],
        ),
        case("matmul", &[], &[&[2, 3, 4], &[4, 2]], &[&[2, 3, 2]]),
        case(
            "matmul",
            &[("trans_y", AttrValue::Bool(true))],
            &[&[2, 3, 4], &[2, 4]],
            &[&[2, 3, 2]],
        ),
        case("matmul", &[], &[&[3, 4], &[4, 2]], &[&[3, 2]]),
        case(
            "matmul",
            &[("trans_x", AttrValue::Bool(true))],
            &[&[4, 3], &[4, 2]],
            &[&[3, 2]],
        ),
        case(
            "matmul",
            &[("trans_y", AttrValue::Bool(true))],
            &[&[2, 2, 3, 4], &[2, 2, 5, 4]],
            &[&[2, 2, 3, 5]],
        ),
        case(
            "matmul",
            &[],
            &[&[2, 2, 3, 4], &[2, 2, 4, 5]],
            &[&[2, 2, 3, 5]],
        ),
    ] {
        check(c);
    }
}

#[test]
fn norm_gradients_match_central_differences() {
    let eps = ("eps", AttrValue::Float(1e-5));
    check(case(
        "aten.native_layer_norm",
        &[("normalized_shape", ints(&[3])), eps.clone()],
        &[&[2, 3], &[3], &[3]],
        &[&[2, 3], &[2, 1], &[2, 1]],
    ));
    let mut no_affine = case(
        "aten.native_layer_norm",
        &[("normalized_shape", ints(&[2, 2])), eps],
        &[&[2, 2, 2]],
        &[&[2, 2, 2], &[2, 1, 1], &[2, 1, 1]],
    );
    no_affine.inputs.extend([None, None]);
    check(no_affine);
    check(case(
        "layer_norm",
        &[("begin_norm_axis", int(1))],
        &[&[2, 3], &[3], &[3]],
        &[&[2, 3], &[2], &[2]],
    ));
}

#[test]
fn attention_gradients_match_central_differences() {
    // Grouped-query heads (2 query heads per kv head), a float mask.
    check(case(
        "aten.scaled_dot_product_attention",
        &[],
        &[&[1, 2, 3, 2], &[1, 1, 4, 2], &[1, 1, 4, 3], &[1, 1, 3, 4]],
        &[&[1, 2, 3, 3]],
    ));
    // Causal, no mask, a given scale.
    let mut causal = case(
        "aten.scaled_dot_product_attention",
        &[
            ("is_causal", AttrValue::Bool(true)),
            ("scale", AttrValue::Float(0.4)),
        ],
        &[&[2, 1, 3, 2], &[2, 1, 3, 2], &[2, 1, 3, 2]],
        &[&[2, 1, 3, 2]],
    );
    causal.inputs.push(None);
    check(causal);
    // A boolean mask: its elements are not differentiated.
    let mut boolean = case(
        "aten.scaled_dot_product_attention",
        &[],
        &[&[1, 1, 2, 2], &[1, 1, 3, 2], &[1, 1, 3, 2]],
        &[&[1, 1, 2, 2]],
    );
    boolean.inputs.push(Some((Elem::Bool, vec![1, 1, 2, 3])));
    check(boolean);
}

#[test]
fn embedding_gradients_match_central_differences() {
    let mut aten = case("aten.embedding", &[], &[&[5, 2]], &[&[3, 2]]);
    aten.inputs.push(Some((Elem::Int, vec![3])));
    check(aten);
    let mut paddle = case("embedding", &[], &[], &[&[2, 2, 3]]);
    paddle.inputs = vec![
        Some((Elem::Int, vec![2, 2])),
        Some((Elem::Float, vec![4, 3])),
    ];
    check(paddle);
}

#[test]
fn every_op_named_has_a_kernel() {
    for n in super::names() {
        assert!(kernel(n).is_some(), "{n}");
    }
    assert!(kernel("aten.no_such_op").is_none());
}

#[test]
fn routing_and_dispatch_gradients_match_central_differences() {
    for c in [
        case(
            "aten.sum.dim_IntList",
            &[("dim", ints(&[-1])), ("keepdim", AttrValue::Bool(true))],
            &[&[3, 4]],
            &[&[3, 1]],
        ),
        case(
            "aten.sum.dim_IntList",
            &[("dim", ints(&[0, 2]))],
            &[&[2, 3, 2]],
            &[&[3]],
        ),
        case("aten.div.Tensor", &[], &[&[2, 3], &[2, 1]], &[&[2, 3]]),
        case(
            "aten.clamp",
            &[
                ("min", AttrValue::Float(-0.3)),
                ("max", AttrValue::Float(0.5)),
            ],
            &[&[6]],
            &[&[6]],
        ),
        case("aten.copy", &[], &[&[2, 3], &[3]], &[&[2, 3]]),
        case(
            "aten.full_like",
            &[("fill_value", int(2))],
            &[&[3]],
            &[&[3]],
        ),
        case("aten._softmax", &[("dim", int(-1))], &[&[2, 4]], &[&[2, 4]]),
        case("aten._softmax", &[("dim", int(0))], &[&[3, 2]], &[&[3, 2]]),
        case("aten.bmm", &[], &[&[2, 3, 4], &[2, 4, 2]], &[&[2, 3, 2]]),
        case(
            "aten.topk",
            &[("k", int(2))],
            &[&[3, 5]],
            &[&[3, 2], &[3, 2]],
        ),
        case(
            "aten.topk",
            &[
                ("k", int(2)),
                ("dim", int(0)),
                ("largest", AttrValue::Bool(false)),
            ],
            &[&[4, 3]],
            &[&[2, 3], &[2, 3]],
        ),
        case(
            "aten.slice_scatter",
            &[
                ("dim", int(1)),
                ("start", int(1)),
                ("end", int(5)),
                ("step", int(2)),
            ],
            &[&[2, 5], &[2, 2]],
            &[&[2, 5]],
        ),
    ] {
        check(c);
    }
    // Index and condition tensors are not differentiated.
    let mut gather = case("aten.gather", &[("dim", int(1))], &[&[3, 4]], &[&[3, 2]]);
    gather.inputs.push(Some((Elem::Int, vec![3, 2])));
    check(gather);
    let mut scatter = case(
        "aten.scatter.value",
        &[("dim", int(1)), ("value", int(1))],
        &[&[3, 4]],
        &[&[3, 4]],
    );
    scatter.inputs.push(Some((Elem::Int, vec![3, 1])));
    check(scatter);
    let mut select = case("aten.where.self", &[], &[], &[&[2, 3]]);
    select.inputs = vec![
        Some((Elem::Bool, vec![2, 3])),
        Some((Elem::Float, vec![])),
        Some((Elem::Float, vec![2, 3])),
    ];
    check(select);
}

#[test]
fn routing_kernels_compute_what_torch_does() {
    let run = |c: &Case, xs: Vec<Tensor>| forward(c, &xs.into_iter().map(Some).collect::<Vec<_>>());
    // topk: the largest two of each row, best first, with their positions.
    let c = case(
        "aten.topk",
        &[("k", int(2))],
        &[&[2, 3]],
        &[&[2, 2], &[2, 2]],
    );
    let out = run(
        &c,
        vec![Tensor::new(&[2, 3], vec![0.1, 0.9, 0.5, 3.0, -1.0, 2.0])],
    );
    assert_eq!(out[0].data(), &[0.9, 0.5, 3.0, 2.0]);
    assert_eq!(out[1].data(), &[1.0, 2.0, 0.0, 2.0]);
    // gather along dim 1, and scatter of a value at the same positions.
    let mut g = case("aten.gather", &[("dim", int(1))], &[&[2, 3]], &[&[2, 1]]);
    g.inputs.push(Some((Elem::Int, vec![2, 1])));
    let x = Tensor::new(&[2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let idx = Tensor::new(&[2, 1], vec![2.0, 0.0]);
    assert_eq!(run(&g, vec![x.clone(), idx.clone()])[0].data(), &[3.0, 4.0]);
    let mut s = case(
        "aten.scatter.value",
        &[("dim", int(1)), ("value", int(9))],
        &[&[2, 3]],
        &[&[2, 3]],
    );
    s.inputs.push(Some((Elem::Int, vec![2, 1])));
    assert_eq!(
        run(&s, vec![x.clone(), idx])[0].data(),
        &[1.0, 2.0, 9.0, 9.0, 5.0, 6.0]
    );
    // slice_scatter: columns 0 and 2 replaced.
    let c = case(
        "aten.slice_scatter",
        &[
            ("dim", int(1)),
            ("start", int(0)),
            ("end", int(3)),
            ("step", int(2)),
        ],
        &[&[2, 3], &[2, 2]],
        &[&[2, 3]],
    );
    let src = Tensor::new(&[2, 2], vec![-1.0, -2.0, -3.0, -4.0]);
    assert_eq!(
        run(&c, vec![x, src])[0].data(),
        &[-1.0, 2.0, -2.0, -3.0, 5.0, -4.0]
    );
}

#[test]
fn grouped_form_gradients_match_central_differences() {
    for c in [
        case("aten.sort", &[], &[&[2, 4]], &[&[2, 4], &[2, 4]]),
        case(
            "aten.sort",
            &[("dim", int(0)), ("descending", AttrValue::Bool(true))],
            &[&[3, 2]],
            &[&[3, 2], &[3, 2]],
        ),
        case(
            "aten.div.Scalar_mode",
            &[("other", int(2))],
            &[&[3]],
            &[&[3]],
        ),
    ] {
        check(c);
    }
    let mut select = case(
        "aten.index_select",
        &[("dim", int(1))],
        &[&[2, 3]],
        &[&[2, 4]],
    );
    select.inputs.push(Some((Elem::Int, vec![4])));
    check(select);
    // One index: values `[k, rest]`, and broadcast `[rest]`.
    for (values, accumulate) in [(vec![3, 2], false), (vec![2], true), (vec![3, 2], true)] {
        let mut put = case(
            "aten.index_put",
            &[("accumulate", AttrValue::Bool(accumulate))],
            &[&[4, 2]],
            &[&[4, 2]],
        );
        put.inputs.push(Some((Elem::Int, vec![3])));
        put.inputs.push(Some((Elem::Float, values)));
        check(put);
    }
    // The probe's integers as `offs`, [0, 1, 2]: row 0 goes to expert 1,
    // row 1 to expert 2, rows 2..5 to none (zeros).
    let mut grouped = case(
        "transformers.grouped_mm_fallback",
        &[],
        &[&[5, 3], &[3, 3, 2]],
        &[&[5, 2]],
    );
    grouped.inputs.push(Some((Elem::Int, vec![3])));
    check(grouped);
}

#[test]
fn grouped_form_kernels_compute_what_torch_does() {
    let run = |c: &Case, xs: Vec<Tensor>| forward(c, &xs.into_iter().map(Some).collect::<Vec<_>>());
    let c = case("aten.sort", &[], &[&[4]], &[&[4], &[4]]);
    let out = run(&c, vec![Tensor::new(&[4], vec![2.0, 0.0, 2.0, 1.0])]);
    assert_eq!(out[0].data(), &[0.0, 1.0, 2.0, 2.0]);
    assert_eq!(out[1].data(), &[1.0, 3.0, 0.0, 2.0]);
    let c = case(
        "aten.div.Scalar_mode",
        &[
            ("other", int(2)),
            ("rounding_mode", AttrValue::Str("floor".into())),
        ],
        &[&[3]],
        &[&[3]],
    );
    assert_eq!(
        run(&c, vec![Tensor::new(&[3], vec![-3.0, 3.0, 4.0])])[0].data(),
        &[-2.0, 1.0, 2.0]
    );
    // histc: 4 bins of [0, 4]; 4 falls in the last, 5 in none.
    let c = case(
        "aten.histc",
        &[("bins", int(4)), ("min", int(0)), ("max", int(4))],
        &[&[5]],
        &[&[4]],
    );
    assert_eq!(
        run(&c, vec![Tensor::new(&[5], vec![0.0, 0.5, 3.9, 4.0, 5.0])])[0].data(),
        &[2.0, 0.0, 0.0, 2.0]
    );
    // index_put: the inverse of a permutation.
    let mut c = case("aten.index_put", &[], &[&[3]], &[&[3]]);
    c.inputs.push(Some((Elem::Int, vec![3])));
    c.inputs.push(Some((Elem::Int, vec![3])));
    let out = run(
        &c,
        vec![
            Tensor::full(&[3], 0.0),
            Tensor::new(&[3], vec![2.0, 0.0, 1.0]),
            Tensor::new(&[3], vec![0.0, 1.0, 2.0]),
        ],
    );
    assert_eq!(out[0].data(), &[1.0, 2.0, 0.0]);
    // grouped_mm: rows 0 and 1 to experts 0 and 1.
    let mut c = case(
        "transformers.grouped_mm_fallback",
        &[],
        &[&[2, 1], &[2, 1, 1]],
        &[&[2, 1]],
    );
    c.inputs.push(Some((Elem::Int, vec![2])));
    let out = run(
        &c,
        vec![
            Tensor::new(&[2, 1], vec![3.0, 5.0]),
            Tensor::new(&[2, 1, 1], vec![2.0, 10.0]),
            Tensor::new(&[2], vec![1.0, 2.0]),
        ],
    );
    assert_eq!(out[0].data(), &[6.0, 50.0]);
}
