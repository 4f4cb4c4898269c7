//! Unsound answers the checker found in spmd-core / spmd-ops, one minimal
//! reproducer each (the property tests leave these cases out).
//!
//! Each `unsound` test asserts that the checker still reports the case; when
//! the core is fixed it fails, and is turned around (`fixed`) so the case
//! must then pass. Still unsound, by decision: the
//! `DropDerived` policy (Paddle compatibility, used by no built-in); one
//! direction gap: head splits in forward of a bare einsum rule (the built-in
//! `reshape` closes it for itself, from its target shape).
//! Run with `--nocapture` to read the reports.

use spmd_check::{
    EinsumCheck, Finding, Input, Report, RuleRef, Tensor, Values, check_backward, check_forward,
    check_grad, einsum,
};
use spmd_core::SpmdRuleExt;
use spmd_core::notation::parse;
use spmd_core::{
    Attrs, DistAttr, Divisibility, Einsum, EinsumRule, Mesh, Partial, Policy, ReduceType,
    RuleResult, Spec, SpmdError, SpmdRule,
};

mod common;

fn attr(paddle: &[i64]) -> DistAttr {
    DistAttr::from_paddle(paddle).unwrap()
}

/// A case the checker once found unsound and the core now answers soundly.
fn fixed(what: &str, r: Result<(), Report>) {
    if let Err(rep) = r {
        panic!("{what}: unsound again:\n{rep}");
    }
}

fn unsound(what: &str, r: Result<(), Report>) -> Report {
    match r {
        Ok(()) => panic!(
            "{what}: the checker no longer finds this case unsound; if the core was fixed, flip this test"
        ),
        Err(rep) => {
            assert!(rep.is_unsound(), "{what}: {rep}");
            println!("--- {what}\n{rep}\n");
            rep
        }
    }
}

/// Backward used to keep the outputs' given partial status while the input
/// requirements it derived never sharded a contracted axis (they replicated
/// missing axes): fed forward they gave a *complete* output, and reducing the
/// claimed partial multiplied it (matmul), or forward disagreed (max).
///
/// Fixed: Partial Stage-II (`BackwardPartial::Explain`) shards a contracted
/// axis with the partial's reduce type over the partial mesh dim, or returns
/// the output not partial where nothing explains it.
#[test]
fn backward_explains_a_given_partial_status_or_drops_it() {
    let mesh = Mesh::new(&[2, 2]).unwrap();
    let matmul = spmd_ops::builtins().build("matmul", &Attrs::new()).unwrap();
    let out = attr(&[0, -1]).with_partial(Partial::over(spmd_core::MeshSet(0b10), ReduceType::Sum));
    fixed(
        "matmul backward, out partial{1: SUM}",
        EinsumCheck::new("...mk,...kn->...mn").unwrap().backward(
            &*matmul,
            &mesh,
            &[&[4, 6], &[6, 3]],
            &[out],
        ),
    );

    let max = spmd_ops::builtins()
        .build("max", &Attrs::new().with("axis", vec![1i64]))
        .unwrap();
    let out = attr(&[-1]).with_partial(Partial::over(spmd_core::MeshSet(0b1), ReduceType::Max));
    fixed(
        "max backward, out partial{0: MAX}",
        EinsumCheck::new("ab->a")
            .unwrap()
            .reduce(ReduceType::Max)
            .backward(&*max, &mesh, &[&[4, 3]], &[out]),
    );
}

/// With several outputs, an axis one output carries can be contracted in
/// another: backward shards it (from the first output) but never marks the
/// other output partial. `ab->a,b` with `a` sharded: output 1 (`b`, a sum
/// over `a`) is claimed complete while each device holds a partial sum.
///
/// spmd-core/src/infer.rs, `backward`, the outputs loop: the partial status
/// comes only from the given attr. Fix: as forward does, add for every
/// output the mesh dims of sharded input axes it lacks (with `reduce_of`),
/// from the derived (input) axis map.
/// Fixed: backward marks an output partial over the mesh dims of axes
/// another output carries and it lacks, as forward does.
#[test]
fn backward_marks_partial_outputs_of_multi_output_rules() {
    let mesh = Mesh::new(&[2]).unwrap();
    let rule = Einsum::new("ab->a,b").unwrap();
    fixed(
        "ab->a,b backward",
        EinsumCheck::new("ab->a,b").unwrap().backward(
            &rule,
            &mesh,
            &[&[4, 3]],
            &[attr(&[0]), attr(&[-1])],
        ),
    );
}

/// `Divisibility::DropDerived` drops a non-dividing sharding on the derived
/// side only: the given side keeps it. Forward: the input stays required
/// sharded on `a`, the output (derived) is claimed replicated, but each
/// device computes only its block of `a`. Backward and grad likewise (the
/// output / output grad keeps the sharding, the derived side drops it).
///
/// spmd-core/src/infer.rs, `Cx::fit`: under `DropDerived` the fitted
/// sharding goes to the derived table only (`derived.get_or_insert(..)[a]`),
/// whether or not the given side carries the axis too. Fix: an axis both sides carry must get one sharding: drop it on
/// both sides (`Drop`) whenever the axis is on both sides; `DropDerived` can
/// only keep a non-dividing sharding on an axis the derived side lacks (a
/// contracted axis, which then makes the outputs partial).
#[test]
fn drop_derived_claims_a_layout_the_devices_do_not_compute() {
    let mesh = Mesh::new(&[2]).unwrap();
    let n = parse("a->a").unwrap();
    let policy = Policy::CLASSIC.with_divisibility(Divisibility::DropDerived);
    let rule = EinsumRule::new("drop_derived", n.plan()).with_policy(policy);
    let check = EinsumCheck::for_rule(&rule).unwrap();
    let rep = unsound(
        "a->a forward, DropDerived, extent 3 on 2 devices",
        check.forward(&RuleRef(&rule), &mesh, &[Spec::new(&[3], &attr(&[0]))]),
    );
    assert!(matches!(rep.finding(), Finding::WrongShape { .. }), "{rep}");
    unsound(
        "a->a backward, DropDerived",
        check.backward(&RuleRef(&rule), &mesh, &[&[3]], &[attr(&[0])]),
    );
}

/// A contracted axis reduced with `Avg` and split unevenly: each device
/// averages its own block and the partial `Avg` averages the averages, which
/// weighs the blocks equally whatever their sizes (and a device with an
/// empty block contributes NaN). Sound only when the splits are even.
///
/// spmd-core/src/infer.rs, `Cx::fit` (under `Uneven` nothing but compound
/// major factors is fitted) and `forward` (partial over every sharded
/// contracted axis, whatever its reduce type). Fix: always fit
/// (drop non-dividing mesh dims of) contracted `Avg` axes, as is done for
/// compound major factors; or answer `Sum` partials and scale by the count.
/// Fixed: a contracted axis averaged over must divide evenly (devices with
/// blocks of different sizes cannot average their averages), so an uneven
/// one is replicated instead.
#[test]
fn avg_partials_require_even_splits() {
    let mesh = Mesh::new(&[2]).unwrap();
    let n = parse("ab->a").unwrap();
    let rule = EinsumRule::new("mean", n.plan()).with_reduce(ReduceType::Avg);
    fixed(
        "ab->a with Avg, b = 3 on 2 devices",
        EinsumCheck::for_rule(&rule).unwrap().forward(
            &RuleRef(&rule),
            &mesh,
            &[Spec::new(&[2, 3], &attr(&[-1, 0]))],
        ),
    );
    // Even splits keep the sharding.
    EinsumCheck::for_rule(&rule)
        .unwrap()
        .forward(
            &RuleRef(&rule),
            &mesh,
            &[Spec::new(&[2, 4], &attr(&[-1, 0]))],
        )
        .unwrap();
}

/// `max` / `min` / `prod` declare `grad(ignores(x))`: the grad op does not
/// merge `x` and requires it as given. But their grad kernels read `x`
/// (`max_grad(x, out, out_grad)`: `dy·[x = out]`; `prod_grad`: `dy·out/x`),
/// so a device must hold the block of `x` its grad block needs. With `x`
/// given sharded on the reduced axis, the rule keeps `x` so while `x_grad` is
/// replicated there: no device holds the whole rows it must produce.
/// (For `sum`, `x` is only read for its shape, and `grad(ignores(x))` is right.)
///
/// spmd-ops/src/reduce.rs, the `reduction!` macro: `grad(ignores(x))` on all
/// four ops. Fix: keep it for `sum` only; for `max` / `min` / `prod`, require
/// `x` laid out like `x_grad` (Paddle's `ReductionGradInferSpmd` sets
/// `x_dist_attr` from `out_grad`, i.e. reshards `x`).
/// Fixed: only `sum` declares `grad(ignores(x))`; the others' grads read `x`
/// and lay it out with its grad.
#[test]
fn max_min_prod_grads_lay_x_out_with_its_grad() {
    let mesh = Mesh::new(&[2]).unwrap();
    for (op, reduce) in [
        ("max", ReduceType::Max),
        ("min", ReduceType::Min),
        ("prod", ReduceType::Prod),
    ] {
        let rule = spmd_ops::builtins()
            .build(op, &Attrs::new().with("axis", vec![1i64]))
            .unwrap();
        let x = Input::new(Tensor::probe(&[4, 3], 5, Values::NearOne), attr(&[-1, 0]));
        let forward = |t: &[Tensor]| einsum("ab->a", &[&t[0]], reduce).unwrap();
        let grad = |x: &[Tensor], out: &[Tensor], dy: &[Tensor]| {
            vec![Tensor::from_fn(x[0].shape(), |i| {
                let (g, y) = (dy[0].get(&[i[0]]), out[0].get(&[i[0]]));
                match reduce {
                    ReduceType::Prod => g * y / x[0].get(i),
                    _ => g * f64::from(x[0].get(i) == y),
                }
            })]
        };
        fixed(
            &format!("{op} grad, x given [-1, 0]"),
            check_grad(&*rule, &mesh, &[x], &[attr(&[-1])], forward, grad),
        );
    }
}

/// Not a value error, a disagreement of the two directions: forward cannot
/// learn the extents of a compound dim's factors when two of them appear in
/// no plain input dim (`bs(hd)->bshd`: h and d), so it drops the sharding
/// of `(hd)` (sound, conservative); backward sees the output shapes, keeps
/// `h` sharded, and requires `(hd)` sharded. Fed forward, that requirement
/// comes back with a replicated output.
///
/// spmd-core/src/infer.rs, `Cx::learn_compound_extents` (one unknown factor
/// at most) and `Cx::fit_one` (an unknown extent never divides). Fix: let a
/// rule know its factors' extents in forward (a notation built at run time
/// from the op's `shape` attribute, e.g. a `sizes` option or an extent
/// written in the notation), as Paddle's reshape rule reads its target shape.
#[test]
fn head_split_forward_cannot_learn_compound_extents() {
    let mesh = Mesh::new(&[2]).unwrap();
    let op = Einsum::new("bs(hd)->bshd").unwrap();
    let rule = op.rule();
    let check = EinsumCheck::new("bs(hd)->bshd")
        .unwrap()
        .size('h', 4)
        .size('d', 2);
    let rep = unsound(
        "bs(hd)->bshd backward",
        check.backward(
            &RuleRef(&rule),
            &mesh,
            &[&[2, 3, 8]],
            &[attr(&[-1, -1, 0, -1])],
        ),
    );
    assert!(matches!(rep.finding(), Finding::Disagree { .. }), "{rep}");
}

/// The built-in `reshape` once inherited the head-split gap above:
/// splitting one dim into several (`[8] -> [2, 4]`, notation `(ab)->ab`),
/// forward could not learn the factors' extents and dropped the input dim's
/// sharding, while backward kept the output's dim 0 sharded and required the
/// input sharded; fed forward, that requirement came back replicated. Fixed
/// in `spmd-ops/src/shape.rs`: reshape knows the target shape, and its
/// forward hands a split dim's sharding to the major factor, so backward's
/// requirement now reproduces the output it was given.
#[test]
fn reshape_split_forward_learns_compound_extents_from_the_target_shape() {
    let mesh = Mesh::new(&[2]).unwrap();
    let rule = spmd_ops::builtins()
        .build("reshape", &Attrs::new().with("shape", vec![2i64, 4]))
        .unwrap();
    let check = EinsumCheck::new("(ab)->ab")
        .unwrap()
        .size('a', 2)
        .size('b', 4);
    fixed(
        "reshape [8] -> [2, 4] backward",
        check.backward(&*rule, &mesh, &[&[8]], &[attr(&[0, -1])]),
    );
    let x = attr(&[0]);
    fixed(
        "reshape [8] -> [2, 4] forward",
        check.forward(&*rule, &mesh, &[Spec::new(&[8], &x)]),
    );
    // Forward keeps the sharding, on the major factor (not only "sound").
    let r = rule.forward(&mesh, &[Spec::new(&[8], &x)]).unwrap();
    assert_eq!(r.outputs[0], attr(&[0, -1]));
}

/// Was a disagreement of the two directions: the `Align` conflict policy
/// (forward and grad of `concat` and `stack`) rebuilt each aligned axis's
/// sharding one mesh dim at a time in mesh dim order, so a co-sharding every
/// operand shares in another order came back reordered (inputs `[[1,0], -1]`
/// required `[[0,1], -1]`, a needless reshard), and backward's requirement,
/// fed forward, came back reordered. `Cx::merge_aligned` now pushes the
/// agreed mesh dims in the first operand's order.
#[test]
fn align_keeps_the_order_of_co_sharded_mesh_dims() {
    let mesh = Mesh::new(&[2, 2]).unwrap();
    let co = DistAttr::new(spmd_core::DimsMapping::from_nested(&[&[1, 0], &[]]).unwrap());
    let (a, b) = (
        Tensor::probe(&[4, 4], 1, Values::Integers),
        Tensor::probe(&[4, 4], 2, Values::Integers),
    );
    // Joined along dim 1: concat, or stack at axis 1 then read as [4, 2, 4].
    let join = |t: &[Tensor], stacked: bool| {
        let n = t[0].shape()[1];
        let shape: Vec<usize> = if stacked {
            vec![t[0].shape()[0], 2, n]
        } else {
            vec![t[0].shape()[0], 2 * n]
        };
        vec![Tensor::from_fn(&shape, |i| {
            let (k, j) = if stacked {
                (i[1], i[2])
            } else {
                (i[1] / n, i[1] % n)
            };
            t[k].get(&[i[0], j])
        })]
    };
    for (op, stacked) in [("concat", false), ("stack", true)] {
        let rule = spmd_ops::builtins()
            .build(op, &Attrs::new().with("axis", 1i64))
            .unwrap();
        let out = if stacked {
            DistAttr::new(spmd_core::DimsMapping::from_nested(&[&[1, 0], &[], &[]]).unwrap())
        } else {
            co.clone()
        };
        fixed(
            &format!("{op} backward, out co-sharded [[1,0], ...]"),
            check_backward(&*rule, &mesh, &[a.clone(), b.clone()], &[out], |t| {
                join(t, stacked)
            }),
        );
        // Forward keeps the order every input agrees on.
        let r = rule
            .forward(&mesh, &[Spec::new(&[4, 4], &co), Spec::new(&[4, 4], &co)])
            .unwrap();
        assert_eq!(r.inputs[0].to_string(), "[[1,0], -1]");
    }
}

/// Was unsound: `label_smooth` without `prior_dist` computes `out = (1 -
/// ε)·label + ε / C`, C the classes the kernel sees in the label's last
/// dim, and the rule kept that dim sharded, so each device divided ε by its
/// own share (label `[2, 4]` split `[-1, 0]` on 2 devices gave `ε/2` where
/// it is `ε/4`). Without a prior the rule now never shards that dim.
#[test]
fn label_smooth_without_a_prior_gathers_the_classes() {
    /// The rule with its prior absent.
    struct NoPrior(Box<dyn SpmdRule>);
    impl common::Directions for NoPrior {
        fn op(&self) -> &'static str {
            self.0.name()
        }
        fn fwd(&self, mesh: &Mesh, inputs: &[Spec<'_>]) -> Result<RuleResult, SpmdError> {
            self.0.forward_optional(mesh, &[Some(inputs[0]), None])
        }
        fn bwd(
            &self,
            mesh: &Mesh,
            shapes: &[&[usize]],
            outputs: &[Spec<'_>],
        ) -> Result<RuleResult, SpmdError> {
            let outputs: Vec<_> = outputs.iter().copied().map(Some).collect();
            self.0
                .backward_optional(mesh, &[Some(shapes[0]), None], &outputs)
        }
    }

    impl SpmdRule for NoPrior {
        fn name(&self) -> &'static str {
            self.0.name()
        }
        fn infer_into(
            &self,
            call: &spmd_core::Call<'_>,
            _: Option<&mut dyn spmd_core::Trace>,
            result: &mut RuleResult,
        ) -> Result<(), SpmdError> {
            *result = common::by_direction(self, call)?;
            Ok(())
        }
    }
    let eps = 0.25;
    let rule = NoPrior(
        spmd_ops::builtins()
            .build("label_smooth", &Attrs::new().with("epsilon", eps))
            .unwrap(),
    );
    let mesh = Mesh::new(&[2]).unwrap();
    let smooth = move |v: &[Tensor]| {
        let classes = v[0].shape()[1] as f64;
        vec![v[0].map(|l| (1.0 - eps) * l + eps / classes)]
    };
    let label = Input::probe(&[2, 4], attr(&[-1, 0]), 1);
    let placeholder = Input::new(Tensor::full(&[], 0.0), DistAttr::replicated(0));
    fixed(
        "label_smooth forward, no prior, classes split",
        check_forward(&rule, &mesh, &[label.clone(), placeholder.clone()], smooth),
    );
    fixed(
        "label_smooth backward, no prior, out's classes split",
        check_backward(
            &rule,
            &mesh,
            &[label.value, placeholder.value],
            &[attr(&[-1, 0])],
            smooth,
        ),
    );
}

/// Normalizes `x [N, C, ...]` per channel (`per_sample`: per sample and
/// channel), scaled by `scale [C]`, which must have the block's channels
/// (the kernels check it), or not (`None`, the identity); returns out and
/// the groups' means.
fn channel_norm(x: &Tensor, scale: Option<&Tensor>, per_sample: bool) -> Vec<Tensor> {
    let (n, c) = (x.shape()[0], x.shape()[1]);
    let ones = Tensor::full(&[c], 1.0);
    let scale = scale.unwrap_or(&ones);
    assert_eq!(
        scale.len(),
        c,
        "a scale of {} for {c} channels",
        scale.len()
    );
    let inner = x.len() / (n * c);
    let group = |k: usize| {
        let (s, ch) = (k / (c * inner), k / inner % c);
        if per_sample { s * c + ch } else { ch }
    };
    let groups = if per_sample { n * c } else { c };
    let (mut sum, mut count) = (vec![0.0; groups], vec![0.0; groups]);
    for (k, a) in x.data().iter().enumerate() {
        sum[group(k)] += a;
        count[group(k)] += 1.0;
    }
    let mean: Vec<f64> = sum.iter().zip(&count).map(|(s, n)| s / n).collect();
    let out = x
        .data()
        .iter()
        .enumerate()
        .map(|(k, a)| (a - mean[group(k)]) * scale.data()[k / inner % c])
        .collect();
    vec![Tensor::new(x.shape(), out), Tensor::new(&[groups], mean)]
}

/// Was unsound: `batch_norm` kept the channels sharded (with the running
/// and saved statistics) but replicated `scale` and `bias`, which are per
/// channel: a device holding channels `[c0, c1)` got all C scales and could
/// not know which were its own (Paddle's kernel rejects a scale of C entries
/// for `c1 - c0` channels); likewise `scale_grad` / `bias_grad`. Scale and
/// bias now follow the channels' layout.
#[test]
fn batch_norm_shards_scale_with_the_channels() {
    let mesh = Mesh::new(&[2]).unwrap();
    let rule = spmd_ops::builtins()
        .build("batch_norm", &Attrs::new().with("data_format", "NCHW"))
        .unwrap();
    // The first two outputs are enough to show it; the kernel's others
    // (running and saved statistics) are per channel too.
    let bn = |v: &[Tensor]| {
        let o = channel_norm(&v[0], Some(&v[3]), false);
        let c = v[0].shape()[1];
        let zero = Tensor::full(&[c], 0.0);
        vec![
            o[0].clone(),
            zero.clone(),
            zero.clone(),
            o[1].clone(),
            zero,
            Tensor::full(&[1], 0.0),
        ]
    };
    let per_channel = |seed| Input::probe(&[2], attr(&[0]), seed);
    let inputs = [
        Input::probe(&[2, 2, 3], attr(&[-1, 0, -1]), 1),
        per_channel(2),
        per_channel(3),
        per_channel(4),
        per_channel(5),
    ];
    fixed(
        "batch_norm forward, channels split",
        check_forward(&*rule, &mesh, &inputs, bn),
    );
}

/// Was unsound four ways: `instance_norm`'s saved statistics are `[N · C]`,
/// batch-major, and each device computes those of the samples and channels
/// it holds, but the rule claimed them co-sharded by the batch's then the
/// channels' mesh dims (wrong blocks with an uneven batch, or with both
/// split), answered them replicated and partial in backward, and kept the
/// channels sharded with a replicated scale. The statistics are now `(nc)`
/// (only whole samples split, evenly; a channel sharding moves onto the
/// batch when it divides), in every direction.
#[test]
fn instance_norm_splits_only_whole_samples() {
    let rule = spmd_ops::builtins()
        .build("instance_norm", &Attrs::new())
        .unwrap();
    // The statistics' cases with the identity scale (not read), the
    // scale's with the scale checked.
    let norm = |scaled: bool| {
        move |v: &[Tensor]| {
            let o = channel_norm(&v[0], scaled.then_some(&v[1]), true);
            vec![o[0].clone(), o[1].clone(), o[1].clone()]
        }
    };
    let inorm = norm(false);
    let ones = |c: usize| Input::new(Tensor::full(&[c], 1.0), attr(&[-1]));
    let case = |mesh: &[usize], x: &[usize], m: &[i64]| {
        let c = x[1];
        let inputs = [Input::probe(x, attr(m), 1), ones(c), ones(c)];
        check_forward(&*rule, &Mesh::new(mesh).unwrap(), &inputs, inorm)
    };
    fixed(
        "instance_norm forward, N = 3 on 2 devices",
        case(&[2], &[3, 2, 2], &[0, -1, -1]),
    );
    fixed(
        "instance_norm forward, batch and channels split",
        case(&[2, 2], &[4, 2, 2], &[0, 1, -1]),
    );
    // The scale: one channel held, two scales given.
    let inputs = [
        Input::probe(&[2, 2, 2], attr(&[-1, 0, -1]), 1),
        ones(2),
        ones(2),
    ];
    let mesh = Mesh::new(&[2]).unwrap();
    fixed(
        "instance_norm forward, channels split, scale replicated",
        check_forward(&*rule, &mesh, &inputs, norm(true)),
    );
    let values = [
        Tensor::probe(&[4, 2, 2], 1, Values::Integers),
        Tensor::full(&[2], 1.0),
        Tensor::full(&[2], 1.0),
    ];
    fixed(
        "instance_norm backward, y's batch split",
        check_backward(
            &*rule,
            &mesh,
            &values,
            &[attr(&[0, -1, -1]), attr(&[-1]), attr(&[-1])],
            inorm,
        ),
    );
}

/// Was unsound: `fused_rotary_position_embedding`'s grad in the derived
/// form `(q, k, v, sin, cos, position_ids; out_q_grad, out_k_grad,
/// out_v_grad)`, where the sequence cannot stay sharded (position ids
/// given, or no angles): the rule replicated the sequence by the position
/// of each requirement in Paddle's grad-op order `(sin, cos, position_ids,
/// the output grads)`, so in the derived form the output grads kept a
/// sharded sequence while the input grads were claimed whole there (q's
/// sequence split on 2 devices: `out_q_grad` required `[-1, 0, -1, -1]`,
/// `q_grad` answered `[-1, -1, -1, -1]`). It now reads each slot's tensor
/// off the call's grad signature.
#[test]
fn rope_derived_grad_replicates_the_sequence_everywhere() {
    let mesh = Mesh::new(&[2]).unwrap();
    let rule = spmd_ops::builtins()
        .build("fused_rotary_position_embedding", &Attrs::new())
        .unwrap();
    // Neox style, head dim 2: out = [x0·c0 - x1·s0, x1·c1 + x0·s1], the
    // angles of the position `position_ids` names.
    let at = |t: &Tensor, pos: &Tensor, i: &[usize], e: usize| {
        t.get(&[0, pos.get(&[i[0], i[1]]) as usize, 0, e])
    };
    let rope = move |v: &[Tensor]| -> Vec<Tensor> {
        let (sin, cos, pos) = (&v[3], &v[4], &v[5]);
        (0..3)
            .map(|k| {
                let x = &v[k];
                Tensor::from_fn(x.shape(), |i| {
                    let (e, f) = (i[3], 1 - i[3]);
                    let mut j = i.to_vec();
                    j[3] = f;
                    let sign = if e == 0 { -1.0 } else { 1.0 };
                    x.get(i) * at(cos, pos, i, e) + sign * x.get(&j) * at(sin, pos, i, e)
                })
            })
            .collect()
    };
    let vjp = move |v: &[Tensor], _: &[Tensor], dy: &[Tensor]| -> Vec<Tensor> {
        let (sin, cos, pos) = (&v[3], &v[4], &v[5]);
        dy.iter()
            .map(|g| {
                Tensor::from_fn(g.shape(), |i| {
                    let (e, f) = (i[3], 1 - i[3]);
                    let mut j = i.to_vec();
                    j[3] = f;
                    let sign = if f == 0 { -1.0 } else { 1.0 };
                    g.get(i) * at(cos, pos, i, e) + sign * g.get(&j) * at(sin, pos, i, f)
                })
            })
            .collect()
    };
    let qkv = [1, 2, 1, 2];
    let x = |seed, m: &[i64]| Input::probe(&qkv, attr(m), seed);
    let positions = Tensor::new(&[1, 2], vec![1.0, 0.0]);
    let inputs = [
        x(1, &[-1, 0, -1, -1]),
        x(2, &[-1, -1, -1, -1]),
        x(3, &[-1, -1, -1, -1]),
        x(4, &[-1, -1, -1, -1]),
        x(5, &[-1, -1, -1, -1]),
        Input::new(positions, attr(&[-1, -1])),
    ];
    let dys = vec![attr(&[-1, -1, -1, -1]); 3];
    fixed(
        "rope derived grad, position ids, q's sequence split",
        check_grad(&*rule, &mesh, &inputs, &dys, rope, vjp),
    );
}

/// Grouped-query attention with a broadcast mask (`[b, 1, s, t]`) and the
/// query heads split: the mask's size-1 heads dim matched the compound
/// `(hg)` and was split with the heads, leaving some devices an empty mask
/// block (forward); and the mask's grad, a sum over the heads, was not
/// partial over their mesh dim (grad). Found by `aten.rs`'s property and
/// `attention.rs`'s at 400 cases.
///
/// Fixed: a size-1 compound dim carries none of its axes, as a size-1 axis
/// does not.
#[test]
fn a_broadcast_mask_is_not_split_with_grouped_heads() {
    use common::kernels::attention::attention;
    let mesh = Mesh::new(&[2]).unwrap();
    let sdpa = spmd_ops::builtins()
        .build("aten.scaled_dot_product_attention", &Attrs::new())
        .unwrap();
    // q [b, h, s, d] with 4 heads over 2 key/value heads, heads split.
    let shapes: [&[usize]; 4] = [&[1, 4, 2, 2], &[1, 2, 2, 2], &[1, 2, 2, 2], &[1, 1, 2, 2]];
    let attrs = [
        attr(&[-1, 0, -1, -1]),
        attr(&[-1, 0, -1, -1]),
        attr(&[-1, 0, -1, -1]),
        attr(&[-1, -1, -1, -1]),
    ];
    let inputs: Vec<Input> = shapes
        .iter()
        .zip(&attrs)
        .enumerate()
        .map(|(i, (s, a))| Input::new(Tensor::probe(s, i as u64 + 1, Values::Integers), a.clone()))
        .collect();
    let swap = |x: &Tensor| {
        let s = x.shape();
        Tensor::from_fn(&[s[0], s[2], s[1], s[3]], |i| {
            x.get(&[i[0], i[2], i[1], i[3]])
        })
    };
    fixed(
        "sdpa forward, broadcast mask",
        check_forward(&*sdpa, &mesh, &inputs, |v| {
            let r = attention(
                &swap(&v[0]),
                &swap(&v[1]),
                &swap(&v[2]),
                Some(&v[3]),
                None,
                false,
            );
            vec![swap(&r[0])]
        }),
    );
    // The mask's grad sums over the heads, which are split: partial.
    let flash = spmd_ops::builtins()
        .build("flash_attention", &Attrs::new())
        .unwrap();
    let (q, kv, mask) = (
        attr(&[-1, -1, 0, -1]),
        attr(&[-1, -1, 0, -1]),
        attr(&[-1, -1, -1, -1]),
    );
    let seed = attr(&[-1]);
    let ins = [
        Spec::new(&[1, 2, 4, 2], &q),
        Spec::new(&[1, 2, 2, 2], &kv),
        Spec::new(&[1, 2, 2, 2], &kv),
        Spec::new(&[2], &seed),
        Spec::new(&[1, 1, 2, 2], &mask),
    ];
    let (out, softmax, lse) = (
        attr(&[-1, -1, 0, -1]),
        attr(&[-1, 0, -1, -1]),
        attr(&[-1, 0, -1]),
    );
    let grads = [
        Spec::new(&[1, 2, 4, 2], &out),
        Spec::new(&[1, 4, 2, 2], &softmax),
        Spec::new(&[1, 4, 2], &lse),
        Spec::new(&[2], &seed),
    ];
    let r = flash.grad(&mesh, &ins, &grads).unwrap();
    assert_eq!(
        r.outputs.last().unwrap().to_string(),
        "[-1, -1, -1, -1] partial{0: SUM}"
    );
}
