//! Unsound answers the checker found in spmd-core / spmd-ops, one minimal
//! reproducer each (the property tests leave these cases out).
//!
//! Each `unsound` test asserts that the checker still reports the case; when
//! the core is fixed it fails, and is turned around (`fixed`) so the case
//! must then pass. Still unsound, by decision: backward keeping a given
//! output partial (DESIGN's default, Paddle 3.3.1's behaviour) and the
//! `DropDerived` policy (Paddle compatibility, used by no built-in); one
//! direction gap: head splits in forward of a bare einsum rule (the built-in
//! `reshape` closes it for itself, from its target shape).
//! Run with `--nocapture` to read the reports.

use spmd_check::{
    EinsumCheck, Finding, Input, Report, RuleRef, Tensor, Values, check_backward, check_grad,
    einsum,
};
use spmd_core::notation::parse;
use spmd_core::{
    Attrs, DistAttr, Divisibility, Einsum, EinsumRule, Mesh, Partial, Policy, ReduceType, Spec,
};

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

/// Backward keeps the outputs' given partial status (`BackwardPartial::Keep`,
/// the default, used by matmul, embedding and the reductions), but the input
/// requirements it derives never shard a contracted axis (they replicate
/// missing axes), so fed forward they give a *complete* output: every device
/// then holds the full value, and reducing the claimed partial multiplies it.
///
/// spmd-core/src/infer.rs, `backward`: `BackwardPartial::Keep => spec.attr.partial`.
/// Fix: a partial status can only be kept when the derived inputs make the
/// output partial that way (a contracted axis sharded on that mesh dim, with
/// the same reduce type); otherwise reset it (as `Reset` does), or derive
/// such a sharding for a contracted axis from the partial dims.
#[test]
fn backward_keeps_a_partial_status_the_inputs_do_not_produce() {
    let mesh = Mesh::new(&[2, 2]).unwrap();
    let matmul = spmd_ops::builtins().build("matmul", &Attrs::new()).unwrap();
    let out = attr(&[0, -1]).with_partial(Partial::over(spmd_core::MeshSet(0b10), ReduceType::Sum));
    let rep = unsound(
        "matmul backward, out partial{1: SUM}",
        EinsumCheck::new("...mk,...kn->...mn").unwrap().backward(
            &*matmul,
            &mesh,
            &[&[4, 6], &[6, 3]],
            &[out],
        ),
    );
    assert!(matches!(rep.finding(), Finding::WrongValue { .. }), "{rep}");

    let max = spmd_ops::builtins()
        .build("max", &Attrs::new().with("axis", vec![1i64]))
        .unwrap();
    let out = attr(&[-1]).with_partial(Partial::over(spmd_core::MeshSet(0b1), ReduceType::Max));
    // Max is idempotent: the values survive, but forward disagrees.
    let rep = unsound(
        "max backward, out partial{0: MAX}",
        EinsumCheck::new("ab->a")
            .unwrap()
            .reduce(ReduceType::Max)
            .backward(&*max, &mesh, &[&[4, 3]], &[out]),
    );
    assert!(matches!(rep.finding(), Finding::Disagree { .. }), "{rep}");
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

/// `max` / `min` / `prod` declare `grad_ignores(x)`: the grad op does not
/// merge `x` and requires it as given. But their grad kernels read `x`
/// (`max_grad(x, out, out_grad)`: `dy·[x = out]`; `prod_grad`: `dy·out/x`),
/// so a device must hold the block of `x` its grad block needs. With `x`
/// given sharded on the reduced axis, the rule keeps `x` so while `x_grad` is
/// replicated there: no device holds the whole rows it must produce.
/// (For `sum`, `x` is only read for its shape, and `grad_ignores(x)` is right.)
///
/// spmd-ops/src/reduce.rs, the `reduction!` macro: `grad_ignores(x)` on all
/// four ops. Fix: keep it for `sum` only; for `max` / `min` / `prod`, require
/// `x` laid out like `x_grad` (Paddle's `ReductionGradInferSpmd` sets
/// `x_dist_attr` from `out_grad`, i.e. reshards `x`).
/// Fixed: only `sum` declares `grad_ignores(x)`; the others' grads read `x`
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
