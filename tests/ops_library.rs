//! The op families added to reach Paddle 3.3.1's registry: each test pins a
//! behaviour that could be wrong. Where the expected answer is Paddle's, it
//! was measured with the Paddle 3.3.1 oracle (Paddle's own rules run from Python);
//! where we deliberately differ (docs/semantics.md §4), the test says why.

use spmd_core::SpmdRuleExt;
use spmd_core::{Attrs, DistAttr, Mesh, Partial, ReduceType, RuleResult, Spec, SpmdError};

fn attr(m: &[i64]) -> DistAttr {
    DistAttr::from_paddle(m).unwrap()
}

fn partial(m: &[i64], dims: &[u8]) -> DistAttr {
    let mut p = Partial::NONE;
    for &d in dims {
        p.set(d, ReduceType::Sum);
    }
    attr(m).with_partial(p)
}

/// `(shape, paddle mapping)` per tensor.
type T<'a> = (&'a [usize], &'a [i64]);

fn forward(op: &str, attrs: Attrs, mesh: &[usize], ins: &[T<'_>]) -> Result<RuleResult, SpmdError> {
    let rule = spmd_ops::builtins().build(op, &attrs)?;
    let attrs: Vec<DistAttr> = ins.iter().map(|(_, m)| attr(m)).collect();
    let specs: Vec<Spec<'_>> = ins
        .iter()
        .zip(&attrs)
        .map(|((s, _), a)| Spec::new(s, a))
        .collect();
    rule.forward(&Mesh::new(mesh)?, &specs)
}

/// Inputs then outputs, as strings (`[0, -1] partial{1: SUM}`).
fn show(r: &RuleResult) -> (Vec<String>, Vec<String>) {
    (
        r.inputs.iter().map(ToString::to_string).collect(),
        r.outputs.iter().map(ToString::to_string).collect(),
    )
}

#[test]
fn cummax_grad_takes_paddle_signature_and_returns_one_grad() {
    let m = Mesh::new(&[2, 2]).unwrap();
    let rule = spmd_ops::builtins()
        .build("cummax", &Attrs::new().with("axis", 1i64))
        .unwrap();
    let (x, idx, dy) = (attr(&[0, -1, -1]), attr(&[0, -1, -1]), attr(&[-1, -1, 1]));
    let s: &[usize] = &[16, 16, 16];
    let r = rule
        .grad(
            &m,
            &[Spec::new(s, &x), Spec::new(s, &idx)],
            &[Spec::new(s, &dy)],
        )
        .unwrap();
    // The output grad's dim 2 on mesh dim 1 reaches x, the indices and
    // x_grad; the indices get no grad of their own.
    let (ins, outs) = show(&r);
    assert_eq!(ins, ["[0, -1, 1]", "[0, -1, 1]", "[0, -1, 1]"]);
    assert_eq!(outs, ["[0, -1, 1]"]);
    // Forward: values and indices, the scan axis replicated.
    let x = attr(&[0, 1, -1]);
    let r = rule.forward(&m, &[Spec::new(s, &x)]).unwrap();
    assert_eq!(show(&r).1, ["[0, -1, -1]", "[0, -1, -1]"]);
}

#[test]
fn normalizations_keep_only_the_dims_their_statistics_do_not_span() {
    // group_norm: only the batch; mean and variance are [N, groups].
    let r = forward(
        "group_norm",
        Attrs::new().with("groups", 2i64),
        &[2, 3],
        &[(&[8, 6, 4, 4], &[0, 1, -1, -1]), (&[6], &[1]), (&[6], &[0])],
    )
    .unwrap();
    assert_eq!(show(&r).0, ["[0, -1, -1, -1]", "[-1]", "[-1]"]);
    assert_eq!(show(&r).1, ["[0, -1, -1, -1]", "[0, -1]", "[0, -1]"]);
    // batch_norm: the channel, never the batch; the running and saved
    // statistics by channel, and scale and bias too (Paddle replicates them,
    // which leaves a device no way to pick its channels' scales).
    let bn = [
        (&[8usize, 6, 4, 4][..], &[0i64, 1, -1, -1][..]),
        (&[6], &[1]),
        (&[6], &[-1]),
        (&[6], &[0]),
        (&[6], &[-1]),
    ];
    let r = forward("batch_norm", Attrs::new(), &[2, 3], &bn).unwrap();
    assert_eq!(show(&r).0, ["[-1, 1, -1, -1]", "[1]", "[1]", "[1]", "[1]"]);
    assert_eq!(
        show(&r).1,
        ["[-1, 1, -1, -1]", "[1]", "[1]", "[1]", "[1]", "[-1]"]
    );
    // In NHWC the channels are last (Paddle 3.3.1 reads dim 1 regardless).
    let bn = [
        (&[8usize, 4, 4, 6][..], &[0i64, -1, -1, 1][..]),
        (&[6], &[-1]),
        (&[6], &[-1]),
        (&[6], &[-1]),
        (&[6], &[-1]),
    ];
    let r = forward(
        "batch_norm",
        Attrs::new().with("data_format", "NHWC"),
        &[2, 3],
        &bn,
    )
    .unwrap();
    assert_eq!(show(&r).1[0], "[-1, -1, -1, 1]");
    // instance_norm: the saved statistics are [N * C], batch-major, so only
    // whole samples split: the channels' mesh dim moves onto the batch when
    // the batch divides by both (8 by 2x2), else it is gathered (8 by 2x3).
    let inorm = |mesh: &[usize]| {
        forward(
            "instance_norm",
            Attrs::new(),
            mesh,
            &[(&[8, 6, 4, 4], &[0, 1, -1, -1]), (&[6], &[1]), (&[6], &[0])],
        )
        .unwrap()
    };
    assert_eq!(
        show(&inorm(&[2, 2])).1,
        ["[[0,1], -1, -1, -1]", "[[0,1]]", "[[0,1]]"]
    );
    assert_eq!(show(&inorm(&[2, 3])).1, ["[0, -1, -1, -1]", "[0]", "[0]"]);
}

#[test]
fn group_norm_grad_leaves_scale_and_bias_grads_partial_over_the_batch() {
    let rule = spmd_ops::builtins()
        .build("group_norm", &Attrs::new())
        .unwrap();
    let m = Mesh::new(&[2, 3]).unwrap();
    let (x, w, stat) = (attr(&[0, 1, -1, -1]), attr(&[-1]), attr(&[0, -1]));
    let s: &[usize] = &[8, 6, 4, 4];
    let ins = [
        Spec::new(s, &x),
        Spec::new(&[6], &w),
        Spec::new(&[6], &w),
        Spec::new(s, &x),
        Spec::new(&[8, 2], &stat),
        Spec::new(&[8, 2], &stat),
    ];
    let r = rule.grad(&m, &ins, &[Spec::new(s, &x)]).unwrap();
    assert_eq!(
        show(&r).1,
        [
            "[0, -1, -1, -1]",
            "[-1] partial{0: SUM}",
            "[-1] partial{0: SUM}"
        ]
    );
}

#[test]
fn batch_norm_grad_returns_per_channel_grads_sharded_with_the_channels() {
    let rule = spmd_ops::builtins()
        .build("batch_norm", &Attrs::new())
        .unwrap();
    let m = Mesh::new(&[2, 3]).unwrap();
    // The batch's mesh dim 0 is gathered (statistics span the batch); the
    // channels' mesh dim 1 reaches every per-channel tensor and grad.
    let (x, c, none) = (attr(&[0, 1, -1, -1]), attr(&[1]), attr(&[-1]));
    let s: &[usize] = &[8, 6, 4, 4];
    // (x, scale, bias, mean_out, variance_out, saved_mean, saved_variance,
    // reserve_space; out_grad)
    let ins = [
        Spec::new(s, &x),
        Spec::new(&[6], &none),
        Spec::new(&[6], &none),
        Spec::new(&[6], &c),
        Spec::new(&[6], &c),
        Spec::new(&[6], &c),
        Spec::new(&[6], &c),
        Spec::new(&[1], &none),
    ];
    let r = rule.grad(&m, &ins, &[Spec::new(s, &x)]).unwrap();
    assert_eq!(show(&r).1, ["[-1, 1, -1, -1]", "[1]", "[1]"]);
    assert_eq!(show(&r).0[0], "[-1, 1, -1, -1]");
    // A layout that is neither channels-first nor channels-last is an error.
    let bad = spmd_ops::builtins()
        .build("batch_norm", &Attrs::new().with("data_format", "NCWH"))
        .unwrap();
    let e = bad.grad(&m, &ins, &[Spec::new(s, &x)]).unwrap_err();
    assert!(e.to_string().contains("NCWH"), "{e}");
}

#[test]
fn gathers_replicate_indexed_dims_and_keep_the_rest() {
    // gather_nd (Paddle's answer): x's indexed dims are freed before the
    // merge, so the index's batch dim keeps mesh dim 1.
    let r = forward(
        "gather_nd",
        Attrs::new(),
        &[2, 3],
        &[(&[8, 6, 4], &[0, 1, -1]), (&[5, 2], &[1, -1])],
    )
    .unwrap();
    assert_eq!(
        show(&r),
        (
            vec!["[-1, -1, -1]".into(), "[1, -1]".into()],
            vec!["[1, -1]".into()]
        )
    );
    // A tuple longer than x's rank is a typed error, not a panic.
    let err = forward(
        "gather_nd",
        Attrs::new(),
        &[2],
        &[(&[8], &[-1]), (&[3, 2], &[-1, -1])],
    )
    .unwrap_err();
    assert!(err.to_string().contains("index"), "{err}");
    // take_along_axis: the other dims are shared by x, index and out.
    let r = forward(
        "take_along_axis",
        Attrs::new().with("axis", 1i64),
        &[2, 3],
        &[(&[8, 6, 4], &[-1, 1, 0]), (&[8, 5, 4], &[-1, -1, 0])],
    )
    .unwrap();
    assert_eq!(show(&r).1, ["[-1, -1, 0]"]);
    // index_select answers as gather (Paddle registers it so).
    let r = forward(
        "index_select",
        Attrs::new().with("axis", 1i64),
        &[2, 3],
        &[(&[8, 6, 4], &[0, 1, -1]), (&[5], &[1])],
    )
    .unwrap();
    assert_eq!(show(&r).1, ["[0, 1, -1]"]);
}

#[test]
fn scatters_never_leave_x_counted_once_per_device() {
    // Paddle 3.3.1 keeps the sharded index and answers out partial {1}: a
    // sum of per-device copies of x. We replicate the index: not partial.
    let r = forward(
        "scatter",
        Attrs::new().with("overwrite", true),
        &[2, 3],
        &[
            (&[8, 6, 4], &[0, 1, -1]),
            (&[5], &[1]),
            (&[5, 6, 4], &[-1, 1, -1]),
        ],
    )
    .unwrap();
    assert_eq!(show(&r).0, ["[-1, 1, -1]", "[-1]", "[-1, 1, -1]"]);
    assert_eq!(show(&r).1, ["[-1, 1, -1]"]);
    let r = forward(
        "scatter_nd_add",
        Attrs::new(),
        &[2, 3],
        &[
            (&[8, 6, 4], &[0, -1, 1]),
            (&[5, 2], &[1, -1]),
            (&[5, 4], &[-1, 1]),
        ],
    )
    .unwrap();
    assert_eq!(show(&r).0, ["[-1, -1, 1]", "[-1, -1]", "[-1, 1]"]);
    assert_eq!(show(&r).1, ["[-1, -1, 1]"]);
    // put_along_axis (Paddle's answer): first claim wins mesh dim 0.
    let r = forward(
        "put_along_axis",
        Attrs::new().with("axis", 1i64).with("reduce", "add"),
        &[2, 3],
        &[
            (&[8, 6, 4], &[-1, 1, 0]),
            (&[8, 5, 4], &[0, -1, -1]),
            (&[8, 5, 4], &[-1, 0, -1]),
        ],
    )
    .unwrap();
    assert_eq!(show(&r).1, ["[-1, -1, 0]"]);
    // index_put: the indexed leading dims are replicated; their given
    // shardings claim mesh dims 0 and 1 first, so value's dim loses mesh
    // dim 0 (Paddle 3.3.1 answers the same).
    let r = forward(
        "index_put",
        Attrs::new(),
        &[2, 3],
        &[
            (&[8, 6, 4], &[0, 1, -1]),
            (&[5], &[1]),
            (&[5], &[0]),
            (&[5, 4], &[-1, 0]),
        ],
    )
    .unwrap();
    assert_eq!(show(&r).0[0], "[-1, -1, -1]");
    assert_eq!(show(&r).1, ["[-1, -1, -1]"]);
    // A value of x's trailing rank shares those dims, broadcast over the
    // picked rows: its sharding reaches x and the output.
    let r = forward(
        "index_put",
        Attrs::new(),
        &[2, 3],
        &[(&[8, 6, 4], &[-1, -1, -1]), (&[5], &[-1]), (&[4], &[0])],
    )
    .unwrap();
    assert_eq!(show(&r).0, ["[-1, -1, 0]", "[-1]", "[0]"]);
    assert_eq!(show(&r).1, ["[-1, -1, 0]"]);
    // Its grad answers x_grad and value_grad, not the indices'.
    let rule = spmd_ops::builtins()
        .build("index_put", &Attrs::new())
        .unwrap();
    let m = Mesh::new(&[2, 3]).unwrap();
    let (x, i, v) = (attr(&[-1, -1, 0]), attr(&[-1]), attr(&[0]));
    let r = rule
        .grad(
            &m,
            &[
                Spec::new(&[8, 6, 4], &x),
                Spec::new(&[5], &i),
                Spec::new(&[4], &v),
            ],
            &[Spec::new(&[8, 6, 4], &x)],
        )
        .unwrap();
    assert_eq!(show(&r).1.len(), 2);
    assert_eq!(show(&r).1[0], "[-1, -1, 0]");
    // No index, or more indices than x has dims, is an error.
    assert!(
        forward(
            "index_put",
            Attrs::new(),
            &[2, 3],
            &[(&[8], &[-1]), (&[8], &[-1])]
        )
        .is_err()
    );
}

#[test]
fn reductions_without_a_reduce_type_never_shard_what_they_reduce() {
    let x: T<'_> = (&[8, 6, 4], &[0, 1, -1]);
    let axis = || Attrs::new().with("axis", vec![1i64]);
    // Paddle answers partial SUM for all three; only squared_l2_norm's is right.
    let r = forward("squared_l2_norm", axis(), &[2, 3], &[x]).unwrap();
    assert_eq!(show(&r).1, ["[0, -1] partial{1: SUM}"]);
    let r = forward("frobenius_norm", axis(), &[2, 3], &[x]).unwrap();
    assert_eq!(
        show(&r),
        (vec!["[0, -1, -1]".into()], vec!["[0, -1]".into()])
    );
    let r = forward("logsumexp", axis(), &[2, 3], &[x]).unwrap();
    assert_eq!(show(&r).1, ["[0, -1]"]);
    let r = forward("reduce_max", axis(), &[2, 3], &[x]).unwrap();
    assert_eq!(show(&r).1, ["[0, -1] partial{1: MAX}"]);
    // p_norm: p = inf finishes with MAX, p = 1 with SUM, p = 2 with nothing.
    let p = |porder: f64| Attrs::new().with("porder", porder).with("axis", 1i64);
    let r = forward("p_norm", p(f64::INFINITY), &[2, 3], &[x]).unwrap();
    assert_eq!(show(&r).1, ["[0, -1] partial{1: MAX}"]);
    let r = forward("p_norm", p(1.0), &[2, 3], &[x]).unwrap();
    assert_eq!(show(&r).1, ["[0, -1] partial{1: SUM}"]);
    let r = forward("p_norm", p(2.0), &[2, 3], &[x]).unwrap();
    assert_eq!(show(&r).1, ["[0, -1]"]);
    // numel counts per block: partial SUM over the input's mesh dims.
    let r = forward("numel", Attrs::new(), &[2, 3], &[x]).unwrap();
    assert_eq!(show(&r).1, ["[] partial{0: SUM, 1: SUM}"]);
}

#[test]
fn axis_ops_replicate_the_dims_they_move_data_along() {
    let x: T<'_> = (&[8, 6, 4], &[0, 1, -1]);
    let r = forward(
        "roll",
        Attrs::new()
            .with("shifts", vec![1i64])
            .with("axis", vec![1i64]),
        &[2, 3],
        &[x],
    )
    .unwrap();
    assert_eq!(show(&r).1, ["[0, -1, -1]"]);
    // No axis: rolled as one flat vector, nothing stays sharded.
    let r = forward(
        "roll",
        Attrs::new().with("shifts", vec![1i64]),
        &[2, 3],
        &[x],
    )
    .unwrap();
    assert_eq!(show(&r).1, ["[-1, -1, -1]"]);
    let r = forward(
        "pad",
        Attrs::new().with("paddings", vec![0i64, 0, 0, 0, 1, 1]),
        &[2, 3],
        &[x],
    )
    .unwrap();
    assert_eq!(show(&r).1, ["[0, 1, -1]"]);
    let err = forward(
        "pad",
        Attrs::new().with("paddings", vec![1i64, 1]),
        &[2, 3],
        &[x],
    )
    .unwrap_err();
    assert!(matches!(err, SpmdError::InvalidAttr { .. }), "{err}");
    // nonzero and unique: data-dependent extents, nothing sharded.
    let r = forward("nonzero", Attrs::new(), &[2, 3], &[x]).unwrap();
    assert_eq!(
        show(&r),
        (vec!["[-1, -1, -1]".into()], vec!["[-1, -1]".into()])
    );
    let r = forward("unique", Attrs::new(), &[2, 3], &[x]).unwrap();
    assert_eq!(show(&r).1, ["[-1]", "[-1]", "[-1]", "[-1]"]);
}

#[test]
fn elementwise_families_merge_their_operands() {
    // add_n: one dim sharded two ways keeps the first claim (Paddle 3.3.1
    // raises Unimplemented), and the second operand is resharded.
    let r = forward(
        "add_n",
        Attrs::new(),
        &[2, 3],
        &[(&[4, 6], &[0, -1]), (&[4, 6], &[1, -1])],
    )
    .unwrap();
    assert_eq!(
        show(&r),
        (
            vec!["[0, -1]".into(), "[0, -1]".into()],
            vec!["[0, -1]".into()]
        )
    );
    // Partial inputs are reduced first (Paddle's answer).
    let rule = spmd_ops::builtins().build("add_n", &Attrs::new()).unwrap();
    let (a, b) = (partial(&[0, -1], &[1]), attr(&[0, -1]));
    let r = rule
        .forward(
            &Mesh::new(&[2, 3]).unwrap(),
            &[Spec::new(&[4, 6], &a), Spec::new(&[4, 6], &b)],
        )
        .unwrap();
    assert_eq!(
        show(&r),
        (
            vec!["[0, -1]".into(), "[0, -1]".into()],
            vec!["[0, -1]".into()]
        )
    );
    // label_smooth broadcasts the prior over the class dim (Paddle's answer).
    let r = forward(
        "label_smooth",
        Attrs::new().with("epsilon", 0.1),
        &[2, 3],
        &[(&[8, 6, 4], &[0, -1, 1]), (&[1, 4], &[-1, -1])],
    )
    .unwrap();
    assert_eq!(show(&r).0, ["[0, -1, 1]", "[-1, 1]"]);
    // dropout and friends are the unary rule under Paddle's names.
    let r = forward(
        "dropout",
        Attrs::new().with("p", 0.5),
        &[2, 3],
        &[(&[8, 6], &[0, 1])],
    )
    .unwrap();
    assert_eq!(show(&r).1, ["[0, 1]"]);
}

#[test]
fn contractions_follow_paddle_policies() {
    // bmm is Paddle 3.3.1's matmul: y's batch on mesh dim 1 (4 % 3 != 0) is
    // dropped, k keeps mesh dim 0 and the output is partial.
    let r = forward(
        "bmm",
        Attrs::new(),
        &[2, 3],
        &[(&[4, 6, 8], &[-1, -1, 0]), (&[4, 8, 5], &[1, 0, -1])],
    )
    .unwrap();
    assert_eq!(show(&r).0, ["[-1, -1, 0]", "[-1, 0, -1]"]);
    assert_eq!(show(&r).1, ["[-1, -1, -1] partial{0: SUM}"]);
    // linear_v2: the bias follows the weight's n, never the other way.
    let lin = |w: &[i64], b: &[i64]| {
        forward(
            "linear_v2",
            Attrs::new(),
            &[2, 3],
            &[(&[8, 6, 6], &[0, -1, -1]), (&[6, 6], w), (&[6], b)],
        )
        .unwrap()
    };
    assert_eq!(show(&lin(&[-1, 1], &[-1])).1, ["[0, -1, 1]"]);
    assert_eq!(show(&lin(&[-1, 1], &[-1])).0[2], "[1]");
    assert_eq!(show(&lin(&[-1, -1], &[1])).0[2], "[-1]");
    // fused_gemm_epilogue: with k sharded the bias is required partial so
    // it is added once (Paddle's answer); a nonlinear activation keeps k whole.
    let fge = |act: &str| {
        forward(
            "fused_gemm_epilogue",
            Attrs::new().with("activation", act),
            &[2, 3],
            &[(&[8, 6], &[0, 1]), (&[6, 5], &[1, -1]), (&[5], &[-1])],
        )
        .unwrap()
    };
    let r = fge("none");
    assert_eq!(show(&r).0[2], "[-1] partial{1: SUM}");
    assert_eq!(show(&r).1, ["[0, -1] partial{1: SUM}"]);
    let r = fge("gelu");
    assert_eq!(show(&r).1, ["[0, -1]"]);
    // einsum is registered with its equation.
    let r = forward(
        "einsum",
        Attrs::new().with("equation", "ij,jk->ik"),
        &[2],
        &[(&[4, 6], &[-1, 0]), (&[6, 8], &[-1, -1])],
    )
    .unwrap();
    assert_eq!(show(&r).1, ["[-1, -1] partial{0: SUM}"]);
}

#[test]
fn vocab_parallel_ops_keep_the_class_dim_sharded() {
    // c_softmax_with_cross_entropy (Paddle's answer): the class dim keeps
    // mesh dim 1, the label loses it, the loss is not partial.
    let r = forward(
        "c_softmax_with_cross_entropy",
        Attrs::new(),
        &[2, 3],
        &[(&[8, 6, 10], &[0, -1, 1]), (&[8, 6, 1], &[-1, 1, -1])],
    )
    .unwrap();
    assert_eq!(show(&r).0, ["[0, -1, 1]", "[0, -1, -1]"]);
    assert_eq!(show(&r).1, ["[0, -1, 1]", "[0, -1, -1]"]);
    // Its grad takes (softmax, label; loss_grad) and returns logits_grad
    // only, laid out as softmax: the batch merged across the three, the
    // class dim kept.
    let rule = spmd_ops::builtins()
        .build("c_softmax_with_cross_entropy", &Attrs::new())
        .unwrap();
    let m = Mesh::new(&[2, 3]).unwrap();
    let (softmax, label, dloss) = (attr(&[-1, -1, 1]), attr(&[0, -1, -1]), attr(&[0, -1, -1]));
    let r = rule
        .grad(
            &m,
            &[
                Spec::new(&[8, 6, 10], &softmax),
                Spec::new(&[8, 6, 1], &label),
            ],
            &[Spec::new(&[8, 6, 1], &dloss)],
        )
        .unwrap();
    assert_eq!(show(&r).0, ["[0, -1, 1]", "[0, -1, -1]", "[0, -1, -1]"]);
    assert_eq!(show(&r).1, ["[0, -1, 1]"]);
    // c_embedding: table first; rows sharded give a partial output, and one
    // mesh dim on two axes is an error (strict, as Paddle).
    let r = forward(
        "c_embedding",
        Attrs::new(),
        &[2, 3],
        &[(&[10, 4], &[1, -1]), (&[8, 6], &[0, -1])],
    )
    .unwrap();
    assert_eq!(show(&r).1, ["[0, -1, -1] partial{1: SUM}"]);
    assert!(
        forward(
            "c_embedding",
            Attrs::new(),
            &[2, 3],
            &[(&[10, 4], &[0, 1]), (&[8, 6], &[1, -1])],
        )
        .is_err()
    );
    // roi_align (Paddle's answer): only the channels stay sharded.
    let r = forward(
        "roi_align",
        Attrs::new(),
        &[2, 3],
        &[
            (&[2, 6, 8, 8], &[0, 1, -1, -1]),
            (&[5, 4], &[1, -1]),
            (&[2], &[-1]),
        ],
    )
    .unwrap();
    assert_eq!(show(&r).1, ["[-1, 1, -1, -1]"]);
}

#[test]
fn depthwise_conv_frees_the_input_channels_for_the_filter() {
    // Paddle's answer: x's channel sharding is dropped before the merge,
    // so the filter's output channels keep mesh dim 1.
    let r = forward(
        "depthwise_conv2d",
        Attrs::new(),
        &[2, 3],
        &[
            (&[4, 6, 8, 8], &[0, 1, -1, -1]),
            (&[6, 1, 3, 3], &[1, -1, -1, -1]),
        ],
    )
    .unwrap();
    assert_eq!(show(&r).0, ["[0, -1, -1, -1]", "[1, -1, -1, -1]"]);
    assert_eq!(show(&r).1, ["[0, 1, -1, -1]"]);
}

#[test]
fn parameter_grad_accumulators_take_the_layout_of_the_sum() {
    let rule = spmd_ops::builtins()
        .build("fused_linear_param_grad_add", &Attrs::new())
        .unwrap();
    let m = Mesh::new(&[2, 3]).unwrap();
    let run = |x: &DistAttr, dout: &DistAttr, dw: &DistAttr, db: &DistAttr| {
        let specs = [
            Spec::new(&[8, 6, 4], x),
            Spec::new(&[8, 6, 6], dout),
            Spec::new(&[4, 6], dw),
            Spec::new(&[6], db),
        ];
        show(&rule.forward(&m, &specs).unwrap())
    };
    // Paddle's answer: the batch on mesh dim 0 is summed over, so both
    // outputs and their accumulators are partial {0}.
    let (ins, outs) = run(
        &attr(&[0, -1, -1]),
        &attr(&[0, -1, 1]),
        &partial(&[-1, 1], &[0]),
        &partial(&[1], &[0]),
    );
    assert_eq!(ins[2..], ["[-1, 1] partial{0: SUM}", "[1] partial{0: SUM}"]);
    assert_eq!(outs, ["[-1, 1] partial{0: SUM}", "[1] partial{0: SUM}"]);
    // x's k on mesh dim 1 shards dweight's rows; dbias (a sum of dout
    // alone) is not partial over it (Paddle's answer).
    let (ins, outs) = run(
        &attr(&[-1, -1, 1]),
        &attr(&[-1, -1, -1]),
        &attr(&[1, -1]),
        &attr(&[-1]),
    );
    assert_eq!(ins[2..], ["[1, -1]", "[-1]"]);
    assert_eq!(outs, ["[1, -1]", "[-1]"]);
}

#[test]
fn moe_combine_never_shards_dispatch_ordered_rows() {
    // Paddle 3.3.1 shares x's rows with the tokens (x `[0, 1]` kept); they
    // are in dispatch order, so we gather them. A sharded top-k slot
    // leaves y partial.
    let r = forward(
        "moe_combine",
        Attrs::new(),
        &[2, 3],
        &[
            (&[8, 8], &[0, 1]),
            (&[4, 2], &[0, -1]),
            (&[4, 2], &[-1, -1]),
        ],
    )
    .unwrap();
    assert_eq!(show(&r).0, ["[-1, 1]", "[0, -1]", "[0, -1]"]);
    assert_eq!(show(&r).1, ["[0, 1]"]);
    let r = forward(
        "moe_combine",
        Attrs::new(),
        &[2, 3],
        &[
            (&[8, 8], &[-1, -1]),
            (&[4, 2], &[-1, 1]),
            (&[4, 2], &[-1, -1]),
        ],
    )
    .unwrap();
    assert_eq!(show(&r).1, ["[-1, -1] partial{1: SUM}"]);
}

#[test]
fn moe_gate_dispatch_keeps_only_the_hidden_dim_sharded() {
    let r = forward(
        "moe_gate_dispatch",
        Attrs::new()
            .with("k", 2i64)
            .with("capacity", 8i64)
            .with("use_pad", true),
        &[2, 3],
        &[(&[16, 8], &[0, 1]), (&[16, 4], &[1, -1]), (&[4], &[-1])],
    )
    .unwrap();
    assert_eq!(show(&r).0, ["[-1, 1]", "[-1, -1]", "[-1]"]);
    // y is [E, capacity, H]; the routing outputs are replicated, not partial.
    assert_eq!(
        show(&r).1,
        ["[-1, -1, 1]", "[-1, -1]", "[-1, -1]", "[-1]", "[-1, -1]"]
    );
}

#[test]
fn flash_mask_rows_follow_batch_and_heads() {
    // A real startend_row_indices [b, heads, seq_k, 2]: it takes q's batch
    // and heads; the sequences are never sharded.
    let qkv: T<'_> = (&[2, 256, 4, 64], &[0, -1, -1, -1]);
    let kv: T<'_> = (&[2, 256, 4, 64], &[-1, -1, 1, -1]);
    let r = forward(
        "flash_mask",
        Attrs::new(),
        &[2, 2],
        &[
            qkv,
            kv,
            kv,
            (&[2, 4, 256, 2], &[-1, -1, -1, -1]),
            (&[], &[]),
        ],
    )
    .unwrap();
    let (ins, outs) = show(&r);
    assert_eq!(ins[0], "[0, -1, 1, -1]");
    assert_eq!(ins[3], "[0, 1, -1, -1]");
    assert_eq!(
        outs[..3],
        ["[0, -1, 1, -1]", "[0, 1, -1, -1]", "[0, 1, -1]"]
    );
    // A mask shared by every head ([b, 1, seq_k, 2]) follows the batch only.
    let r = forward(
        "flash_mask",
        Attrs::new(),
        &[2, 2],
        &[
            qkv,
            kv,
            kv,
            (&[2, 1, 256, 2], &[-1, -1, -1, -1]),
            (&[], &[]),
        ],
    )
    .unwrap();
    assert_eq!(show(&r).0[3], "[0, -1, -1, -1]");
}
