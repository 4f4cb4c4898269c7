//! Forward and backward inference through the public API, against docs/semantics.md §4.
//!
//! Every expected answer below was worked out by hand from docs/semantics.md.md (merge,
//! conflict policy, never-sharded axes, projection, partial status), not read
//! off the implementation. Mesh dims are written in Paddle's form (`-1` =
//! replicated) via `to_paddle`; co-sharded dims are compared as `Sharding`s.

use spmd_core::SpmdRuleExt;
use spmd_core::notation::{Notation, parse};
use spmd_core::{
    AxisName, AxisSet, BackwardPartial, Conflicts, DimsMapping, DistAttr, Divisibility, Einsum,
    EinsumRule, Mesh, MeshSet, MissingAxis, Partial, PartialInputs, Policy, RankNeed, ReduceType,
    Role, RuleResult, Sharding, Spec, SpmdError, TensorRef, UnshardedClaims,
};

// ------------------------------------------------------------------ helpers

fn mesh(shape: &[usize]) -> Mesh {
    Mesh::new(shape).unwrap()
}

/// A non-partial attr from Paddle's integer mapping.
fn attr(m: &[i64]) -> DistAttr {
    DistAttr::from_paddle(m).unwrap()
}

/// A non-partial attr with co-sharding: one list of mesh dims per tensor dim.
fn co(m: &[&[u8]]) -> DistAttr {
    let s: Vec<Sharding> = m.iter().map(|d| Sharding::co(d).unwrap()).collect();
    DistAttr::new(DimsMapping::from_shardings(&s))
}

fn partial_over(dims: &[(u8, ReduceType)]) -> Partial {
    let mut p = Partial::NONE;
    for &(d, r) in dims {
        p.set(d, r);
    }
    p
}

/// Paddle's form of a (non-co-sharded) mapping.
#[track_caller]
fn pd(a: &DistAttr) -> Vec<i64> {
    a.dims_mapping
        .to_paddle()
        .unwrap_or_else(|| panic!("{a} is co-sharded"))
        .to_vec()
}

fn partial(a: &DistAttr) -> Vec<(u8, ReduceType)> {
    a.partial.iter().collect()
}

fn plan_of(src: &str) -> Notation {
    parse(src).unwrap_or_else(|e| panic!("{e}"))
}

fn rule<'a>(n: &'a Notation) -> EinsumRule<'a> {
    EinsumRule::new("op", n.plan())
}

fn fwd(
    r: &EinsumRule<'_>,
    mesh: &Mesh,
    inputs: &[(&[usize], &DistAttr)],
) -> Result<RuleResult, SpmdError> {
    let specs: Vec<Spec<'_>> = inputs.iter().map(|&(s, a)| Spec::new(s, a)).collect();
    r.forward(mesh, &specs)
}

fn bwd(
    r: &EinsumRule<'_>,
    mesh: &Mesh,
    input_shapes: &[&[usize]],
    outputs: &[(&[usize], &DistAttr)],
) -> Result<RuleResult, SpmdError> {
    let specs: Vec<Spec<'_>> = outputs.iter().map(|&(s, a)| Spec::new(s, a)).collect();
    r.backward(mesh, input_shapes, &specs)
}

/// Asserts that no requirement of the result is partial.
#[track_caller]
fn inputs_not_partial(r: &RuleResult) {
    for (i, a) in r.inputs.iter().enumerate() {
        assert!(
            !a.partial.is_partial(),
            "input {i} requirement {a} is partial"
        );
    }
}

const SUM: ReduceType = ReduceType::Sum;

// ------------------------------------------------------------ seed behaviours

#[test]
fn embedding_forward_row_sharded_table_makes_output_partial() {
    // ab,jk->abk: x (ids) [4,1024] a on mesh dim 1; weight [512,768] j on 0.
    // Merge: a->1, j->0; no conflict. j is contracted and sharded on 0, so
    // the output is partial over 0 (Sum).
    let n = plan_of("ab,jk->abk");
    let m = mesh(&[2, 4]);
    let (x, w) = (attr(&[1, -1]), attr(&[0, -1]));
    for policy in [Policy::CLASSIC, Policy::STRICT] {
        let r = EinsumRule::new("embedding", n.plan()).with_policy(policy);
        let res = fwd(&r, &m, &[(&[4, 1024], &x), (&[512, 768], &w)]).unwrap();
        assert_eq!(pd(&res.inputs[0]), [1, -1]);
        assert_eq!(pd(&res.inputs[1]), [0, -1]);
        inputs_not_partial(&res);
        assert_eq!(res.outputs.len(), 1);
        assert_eq!(pd(&res.outputs[0]), [1, -1, -1]);
        assert_eq!(partial(&res.outputs[0]), [(0, SUM)]);
    }
}

#[test]
fn embedding_backward_row_axis_falls_back_to_replicated() {
    // Output [4,1024,768] mapping [-1,0,1]: a -, b 0, k 1. j is in no output:
    // replicated on the weight (the unsharded-missing-axis fallback), and the
    // weight's mapping has the weight's full rank.
    let n = plan_of("ab,jk->abk");
    let r = EinsumRule::new("embedding", n.plan());
    let out = attr(&[-1, 0, 1]);
    let res = bwd(
        &r,
        &mesh(&[2, 4]),
        &[&[4, 1024], &[512, 768]],
        &[(&[4, 1024, 768], &out)],
    )
    .unwrap();
    assert_eq!(pd(&res.inputs[0]), [-1, 0]);
    assert_eq!(pd(&res.inputs[1]), [-1, 1]);
    inputs_not_partial(&res);
    assert_eq!(pd(&res.outputs[0]), [-1, 0, 1]);
    assert!(!res.outputs[0].partial.is_partial());
}

#[test]
fn matmul_forward_contracted_k_gives_partial_output() {
    // mk,kn->mn on [2,3]: x m->1, k->0; y replicated. y must be split on k
    // (mesh dim 0); the output lacks k: partial over 0.
    let n = plan_of("mk,kn->mn");
    let r = EinsumRule::new("matmul", n.plan());
    let (x, y) = (attr(&[1, 0]), attr(&[-1, -1]));
    let res = fwd(&r, &mesh(&[2, 3]), &[(&[64, 32], &x), (&[32, 48], &y)]).unwrap();
    assert_eq!(pd(&res.inputs[0]), [1, 0]);
    assert_eq!(pd(&res.inputs[1]), [0, -1]);
    inputs_not_partial(&res);
    assert_eq!(pd(&res.outputs[0]), [1, -1]);
    assert_eq!(partial(&res.outputs[0]), [(0, SUM)]);
    // The same through the run-time `Einsum` op and its Display forms.
    let op = Einsum::new("mk,kn->mn").unwrap();
    let res2 = op
        .forward(
            &mesh(&[2, 3]),
            &[Spec::new(&[64, 32], &x), Spec::new(&[32, 48], &y)],
        )
        .unwrap();
    assert_eq!(res2, res);
    assert_eq!(res2.outputs[0].to_string(), "[1, -1] partial{0: SUM}");
}

#[test]
fn matmul_k_sharded_two_ways_keeps_the_first_claim_or_is_an_axis_conflict() {
    // x shards k on mesh dim 1, y shards k on mesh dim 0: two different
    // shardings of one axis. First-wins (the default) keeps x's, and y is
    // required resharded to it.
    let n = plan_of("mk,kn->mn");
    let r = EinsumRule::new("matmul", n.plan());
    let (x, y) = (attr(&[-1, 1]), attr(&[0, -1]));
    let res = fwd(&r, &mesh(&[2, 4]), &[(&[64, 32], &x), (&[32, 48], &y)]).unwrap();
    assert_eq!(res.inputs[0].to_string(), "[-1, 1]");
    assert_eq!(res.inputs[1].to_string(), "[1, -1]");
    assert_eq!(res.outputs[0].to_string(), "[-1, -1] partial{1: SUM}");
    // Strict conflicts: an error naming both shardings.
    let r = r.with_policy(Policy::STRICT);
    let err = fwd(&r, &mesh(&[2, 4]), &[(&[64, 32], &x), (&[32, 48], &y)]).unwrap_err();
    assert_eq!(
        err,
        SpmdError::AxisConflict {
            op: "matmul",
            axis: AxisName::Label('k'),
            tensor: TensorRef::input(1),
            dim: 0,
            existing: Sharding::on(1),
            incoming: Sharding::on(0),
        }
    );
    let msg = err.to_string();
    assert!(msg.contains("matmul"), "{msg}");
    assert!(msg.contains("`k`"), "{msg}");
    assert!(msg.contains("1 earlier"), "{msg}");
    assert!(msg.contains("0 at input 1 dim 0"), "{msg}");
}

// ------------------------------------------------------------ merge: conflicts

#[test]
fn first_wins_the_earlier_tensor_keeps_the_mesh_dim() {
    // x: m->0 (input 0 claims 0 first); y: n->0 (claims it second, loses).
    let n = plan_of("mk,kn->mn");
    let (x, y) = (attr(&[0, -1]), attr(&[-1, 0]));
    let res = fwd(
        &rule(&n),
        &mesh(&[2, 4]),
        &[(&[8, 16], &x), (&[16, 12], &y)],
    )
    .unwrap();
    assert_eq!(pd(&res.inputs[0]), [0, -1]);
    assert_eq!(pd(&res.inputs[1]), [-1, -1]);
    assert_eq!(pd(&res.outputs[0]), [0, -1]);
    assert!(!res.outputs[0].partial.is_partial());

    // Swapping the operands swaps the winner: now n claims first.
    let n2 = plan_of("kn,mk->mn");
    let res = fwd(
        &rule(&n2),
        &mesh(&[2, 4]),
        &[(&[16, 12], &y), (&[8, 16], &x)],
    )
    .unwrap();
    assert_eq!(pd(&res.inputs[0]), [-1, 0]);
    assert_eq!(pd(&res.inputs[1]), [-1, -1]);
    assert_eq!(pd(&res.outputs[0]), [-1, 0]);
}

#[test]
fn first_wins_by_claim_order_not_by_label_or_output_order() {
    // ab,ba->ab: x shards b (its dim 1) on 0; y shards a (its dim 1) on 0.
    // b claims mesh dim 0 first (input 0), although a is the first label and
    // the first output dim. a loses it.
    let n = plan_of("ab,ba->ab");
    let (x, y) = (attr(&[-1, 0]), attr(&[-1, 0]));
    let res = fwd(&rule(&n), &mesh(&[2, 4]), &[(&[4, 6], &x), (&[6, 4], &y)]).unwrap();
    assert_eq!(pd(&res.inputs[0]), [-1, 0]);
    assert_eq!(pd(&res.inputs[1]), [0, -1]); // y's dims are (b, a)
    assert_eq!(pd(&res.outputs[0]), [-1, 0]);
}

#[test]
fn first_wins_counts_the_moment_a_co_shard_claims_a_mesh_dim() {
    // ab,ab->ab on [2,2]: x: a [0], b [1]; y: a [0,1].
    // a became sharded on 0 first, but on 1 only at y, after b claimed 1 at x:
    // b keeps 1, a keeps only 0.
    let n = plan_of("ab,ab->ab");
    let m = mesh(&[2, 2]);
    let x = co(&[&[0], &[1]]);
    let y = co(&[&[0, 1], &[]]);
    let res = fwd(&rule(&n), &m, &[(&[4, 4], &x), (&[4, 4], &y)]).unwrap();
    for a in res.inputs.iter().chain(&res.outputs) {
        assert_eq!(pd(a), [0, 1], "{a}");
    }
    // In the other order a claims both first and b loses 1.
    let res = fwd(&rule(&n), &m, &[(&[4, 4], &y), (&[4, 4], &x)]).unwrap();
    let want = co(&[&[0, 1], &[]]);
    for a in res.inputs.iter().chain(&res.outputs) {
        assert_eq!(a.dims_mapping, want.dims_mapping, "{a}");
    }
}

#[test]
fn strict_conflicts_are_a_mesh_dim_conflict() {
    let n = plan_of("mk,kn->mn");
    let r = EinsumRule::new("matmul", n.plan())
        .with_policy(Policy::CLASSIC.with_conflicts(Conflicts::Strict));
    let (x, y) = (attr(&[0, -1]), attr(&[-1, 0]));
    let err = fwd(&r, &mesh(&[2, 4]), &[(&[8, 16], &x), (&[16, 12], &y)]).unwrap_err();
    assert_eq!(
        err,
        SpmdError::MeshDimConflict {
            op: "matmul",
            mesh_dim: 0,
            first: AxisName::Label('m'),
            second: AxisName::Label('n'),
        }
    );
    let msg = err.to_string();
    assert!(msg.contains("mesh dim 0"), "{msg}");
    assert!(msg.contains("`m`") && msg.contains("`n`"), "{msg}");
    // No conflict, no error: strict changes nothing else.
    let y = attr(&[-1, 1]);
    let res = fwd(&r, &mesh(&[2, 4]), &[(&[8, 16], &x), (&[16, 12], &y)]).unwrap();
    assert_eq!(pd(&res.outputs[0]), [0, 1]);
}

#[test]
fn co_shard_prefix_merges_into_the_longer() {
    // ij,ij->ij: i given [0] by x and [0,1] by y: merged [0,1], either order.
    let n = plan_of("ij,ij->ij");
    let m = mesh(&[2, 2]);
    let short = co(&[&[0], &[]]);
    let long = co(&[&[0, 1], &[]]);
    for (x, y) in [(&short, &long), (&long, &short)] {
        let res = fwd(&rule(&n), &m, &[(&[8, 4], x), (&[8, 4], y)]).unwrap();
        for a in res.inputs.iter().chain(&res.outputs) {
            assert_eq!(a.dims_mapping, long.dims_mapping, "{a}");
        }
    }
}

#[test]
fn co_shard_that_is_not_a_prefix_conflicts() {
    // [0,1] and [1]: neither is a prefix of the other. First-wins keeps
    // the first; strict conflicts make it an error.
    let n = plan_of("ij,ij->ij");
    let x = co(&[&[0, 1], &[]]);
    let y = co(&[&[1], &[]]);
    let res = fwd(&rule(&n), &mesh(&[2, 2]), &[(&[8, 4], &x), (&[8, 4], &y)]).unwrap();
    assert_eq!(res.inputs[1].dims_mapping, x.dims_mapping);
    let strict = rule(&n).with_policy(Policy::STRICT);
    let err = fwd(&strict, &mesh(&[2, 2]), &[(&[8, 4], &x), (&[8, 4], &y)]).unwrap_err();
    assert_eq!(
        err,
        SpmdError::AxisConflict {
            op: "op",
            axis: AxisName::Label('i'),
            tensor: TensorRef::input(1),
            dim: 0,
            existing: Sharding::co(&[0, 1]).unwrap(),
            incoming: Sharding::on(1),
        }
    );
    // [0,1] against [1,0]: the same mesh dims in another order also conflict.
    let y = co(&[&[1, 0], &[]]);
    let err = fwd(&strict, &mesh(&[2, 2]), &[(&[8, 4], &x), (&[8, 4], &y)]).unwrap_err();
    assert!(matches!(err, SpmdError::AxisConflict { .. }), "{err}");
}

// ------------------------------------------------------- ellipsis broadcasting

#[test]
fn ellipsis_aligns_from_the_right_across_ranks() {
    // ...k,...k->...k: x [8,3,16] has two ellipsis dims, y [3,16] one; y's
    // ellipsis dim is x's second one.
    let n = plan_of("...k,...k->...k");
    let x = attr(&[0, 1, -1]);
    let y = attr(&[-1, -1]);
    let res = fwd(
        &rule(&n),
        &mesh(&[2, 4]),
        &[(&[8, 3, 16], &x), (&[3, 16], &y)],
    )
    .unwrap();
    assert_eq!(pd(&res.inputs[0]), [0, 1, -1]);
    assert_eq!(pd(&res.inputs[1]), [1, -1]);
    assert_eq!(pd(&res.outputs[0]), [0, 1, -1]);
    assert!(!res.outputs[0].partial.is_partial());

    // y with no ellipsis dims at all.
    let y = attr(&[-1]);
    let res = fwd(
        &rule(&n),
        &mesh(&[2, 4]),
        &[(&[2, 6, 16], &attr(&[1, 0, -1])), (&[16], &y)],
    )
    .unwrap();
    assert_eq!(pd(&res.inputs[1]), [-1]);
    assert_eq!(pd(&res.outputs[0]), [1, 0, -1]);
}

#[test]
fn a_size_one_ellipsis_dim_is_never_sharded_in_that_operand() {
    let n = plan_of("...k,...k->...k");
    let m = mesh(&[2, 4]);
    // y shards the broadcast dim (extent 6) on 0; x has size 1 there: x's
    // requirement keeps that dim replicated.
    let x = attr(&[-1, -1]);
    let y = attr(&[0, -1]);
    let res = fwd(&rule(&n), &m, &[(&[1, 16], &x), (&[6, 16], &y)]).unwrap();
    assert_eq!(pd(&res.inputs[0]), [-1, -1]);
    assert_eq!(pd(&res.inputs[1]), [0, -1]);
    assert_eq!(pd(&res.outputs[0]), [0, -1]);

    // x shards its size-1 dim: that sharding is not carried to the axis.
    let x = attr(&[1, -1]);
    let y = attr(&[-1, -1]);
    let res = fwd(&rule(&n), &m, &[(&[1, 16], &x), (&[6, 16], &y)]).unwrap();
    assert_eq!(pd(&res.inputs[0]), [-1, -1]);
    assert_eq!(pd(&res.inputs[1]), [-1, -1]);
    assert_eq!(pd(&res.outputs[0]), [-1, -1]);
    assert!(!res.outputs[0].partial.is_partial());
}

#[test]
fn a_size_one_broadcast_dim_claims_its_mesh_dim_before_being_replicated() {
    // Paddle 3.3.1, conformance vector elementwise_pow_forward_s1_0788, as
    // `...,...->...` on mesh [4,2]:
    //   x [1,12,1,12] [0,1,-1,-1], y [8,12,1,12] [0,-1,-1,1]
    // docs/semantics.md §4: step 2 merges every given dim (x's dim 0 carries Paddle's
    // `1` label and claims mesh dim 0 first; y's dim 0 claims it second and
    // loses it under first-wins; y's dim 3 loses mesh dim 1 to x's dim 1);
    // step 3 then replicates the never-sharded `1` axis. Expected (Paddle):
    // all three [-1, 1, -1, -1].
    let n = plan_of("...,...->...");
    let x = attr(&[0, 1, -1, -1]);
    let y = attr(&[0, -1, -1, 1]);
    let res = fwd(
        &rule(&n),
        &mesh(&[4, 2]),
        &[(&[1, 12, 1, 12], &x), (&[8, 12, 1, 12], &y)],
    )
    .unwrap();
    assert_eq!(pd(&res.inputs[0]), [-1, 1, -1, -1]);
    assert_eq!(pd(&res.inputs[1]), [-1, 1, -1, -1]);
    assert_eq!(pd(&res.outputs[0]), [-1, 1, -1, -1]);
}

#[test]
fn ellipsis_dims_missing_from_the_output_are_contracted() {
    // ...k->k sums over the batch dims: sharded batch dims make it partial.
    let n = plan_of("...k->k");
    let x = attr(&[1, -1, 0]);
    let res = fwd(&rule(&n), &mesh(&[2, 4]), &[(&[4, 3, 16], &x)]).unwrap();
    assert_eq!(pd(&res.inputs[0]), [1, -1, 0]);
    assert_eq!(pd(&res.outputs[0]), [0]);
    assert_eq!(partial(&res.outputs[0]), [(1, SUM)]);
}

// ------------------------------------------------------------- compound dims

#[test]
fn merge_heads_only_the_major_factor_carries_a_sharding() {
    // bshd->bs(hd) on [2,4]: h (4) on 0 divides; d on 1 is the minor factor:
    // replicated. The output's (hd) dim takes h's sharding.
    let n = plan_of("bshd->bs(hd)");
    let x = attr(&[-1, -1, 0, 1]);
    let res = fwd(&rule(&n), &mesh(&[2, 4]), &[(&[2, 8, 4, 6], &x)]).unwrap();
    assert_eq!(pd(&res.inputs[0]), [-1, -1, 0, -1]);
    assert_eq!(pd(&res.outputs[0]), [-1, -1, 0]);
    // Nothing is contracted: d's lost sharding does not make a partial.
    assert!(!res.outputs[0].partial.is_partial());

    // The batch axes pass through untouched.
    let x = attr(&[1, 0, -1, -1]);
    let res = fwd(&rule(&n), &mesh(&[2, 4]), &[(&[4, 8, 4, 6], &x)]).unwrap();
    assert_eq!(pd(&res.outputs[0]), [1, 0, -1]);
}

#[test]
fn merge_heads_a_non_divisible_major_factor_is_dropped_even_under_uneven() {
    // h = 3 on mesh dim 0 (extent 2): the reshape cannot carry it, whatever
    // the divisibility policy (the classic one allows uneven shards).
    let n = plan_of("bshd->bs(hd)");
    let x = attr(&[-1, -1, 0, -1]);
    let res = fwd(&rule(&n), &mesh(&[2, 4]), &[(&[2, 8, 3, 6], &x)]).unwrap();
    assert_eq!(pd(&res.inputs[0]), [-1, -1, -1, -1]);
    assert_eq!(pd(&res.outputs[0]), [-1, -1, -1]);
    // A plain axis of the same extent keeps its uneven sharding.
    let x = attr(&[-1, 0, -1, -1]);
    let res = fwd(&rule(&n), &mesh(&[2, 4]), &[(&[2, 3, 3, 6], &x)]).unwrap();
    assert_eq!(pd(&res.outputs[0]), [-1, 0, -1]);
}

#[test]
fn merge_heads_co_sharded_major_factor() {
    // h = 8 over [0,1] (2*4 = 8 divides 8): carried as is.
    let n = plan_of("bshd->bs(hd)");
    let x = co(&[&[], &[], &[0, 1], &[]]);
    let res = fwd(&rule(&n), &mesh(&[2, 4]), &[(&[2, 8, 8, 6], &x)]).unwrap();
    assert_eq!(res.inputs[0].dims_mapping, x.dims_mapping);
    assert_eq!(
        res.outputs[0].dims_mapping,
        co(&[&[], &[], &[0, 1]]).dims_mapping
    );
}

#[test]
fn split_heads_backward_carries_only_the_major_factor() {
    // bs(hd)->bshd backward: the outputs give h = 4, d = 6.
    let n = plan_of("bs(hd)->bshd");
    let m = mesh(&[2, 4]);
    let out = attr(&[-1, 1, 0, -1]);
    let res = bwd(&rule(&n), &m, &[&[2, 8, 24]], &[(&[2, 8, 4, 6], &out)]).unwrap();
    assert_eq!(pd(&res.inputs[0]), [-1, 1, 0]);
    assert_eq!(pd(&res.outputs[0]), [-1, 1, 0, -1]);

    // d (the minor factor) is never sharded: not on the input, and the
    // output's d dim comes back replicated.
    let out = attr(&[-1, -1, -1, 1]);
    let res = bwd(&rule(&n), &m, &[&[2, 8, 24]], &[(&[2, 8, 4, 6], &out)]).unwrap();
    assert_eq!(pd(&res.inputs[0]), [-1, -1, -1]);
    assert_eq!(pd(&res.outputs[0]), [-1, -1, -1, -1]);

    // h = 3 on mesh dim 0 (extent 2) is not divisible: not carried, so the
    // output cannot keep it either.
    let out = attr(&[-1, -1, 0, -1]);
    let res = bwd(&rule(&n), &m, &[&[2, 8, 24]], &[(&[2, 8, 3, 8], &out)]).unwrap();
    assert_eq!(pd(&res.inputs[0]), [-1, -1, -1]);
    assert_eq!(pd(&res.outputs[0]), [-1, -1, -1, -1]);
}

#[test]
fn split_heads_forward_when_another_operand_fixes_the_factor() {
    // bs(hd),d->bshd: d = 6 from the second operand, so h = 24 / 6 = 4.
    let n = plan_of("bs(hd),d->bshd");
    let m = mesh(&[2, 4]);
    let b = attr(&[-1]);
    let x = attr(&[-1, -1, 0]);
    let res = fwd(&rule(&n), &m, &[(&[2, 8, 24], &x), (&[6], &b)]).unwrap();
    assert_eq!(pd(&res.inputs[0]), [-1, -1, 0]);
    assert_eq!(pd(&res.outputs[0]), [-1, -1, 0, -1]);
    // h = 4 on mesh dim 1 (extent 4) divides too.
    let x = attr(&[-1, -1, 1]);
    let res = fwd(&rule(&n), &m, &[(&[2, 8, 24], &x), (&[6], &b)]).unwrap();
    assert_eq!(pd(&res.outputs[0]), [-1, -1, 1, -1]);
    // d = 8 makes h = 3: mesh dim 0 (extent 2) no longer divides it.
    let x = attr(&[-1, -1, 0]);
    let res = fwd(&rule(&n), &m, &[(&[2, 8, 24], &x), (&[8], &b)]).unwrap();
    assert_eq!(pd(&res.inputs[0]), [-1, -1, -1]);
    assert_eq!(pd(&res.outputs[0]), [-1, -1, -1, -1]);
}

#[test]
fn split_heads_forward_with_unknown_factors_does_not_carry() {
    // bs(hd)->bshd forward: nothing tells h's extent, so divisibility cannot
    // be established and the sharding is not carried (docs/semantics.md §3: "only when
    // its size is divisible").
    let n = plan_of("bs(hd)->bshd");
    let x = attr(&[-1, 1, 0]);
    let res = fwd(&rule(&n), &mesh(&[2, 4]), &[(&[2, 8, 24], &x)]).unwrap();
    assert_eq!(pd(&res.inputs[0]), [-1, 1, -1]);
    assert_eq!(pd(&res.outputs[0]), [-1, 1, -1, -1]);
}

// ---------------------------------------------- never-sharded: diagonal, `1`

#[test]
fn a_diagonal_is_never_sharded() {
    let n = plan_of("ii->i");
    let m = mesh(&[2, 4]);
    for given in [[0, -1], [-1, 1], [0, 1]] {
        let x = attr(&given);
        let res = fwd(&rule(&n), &m, &[(&[4, 4], &x)]).unwrap();
        assert_eq!(pd(&res.inputs[0]), [-1, -1], "given {given:?}");
        assert_eq!(pd(&res.outputs[0]), [-1]);
        assert!(!res.outputs[0].partial.is_partial());
    }
    // Backward: the output's sharding cannot come from a diagonal.
    let out = attr(&[0]);
    let res = bwd(&rule(&n), &m, &[&[4, 4]], &[(&[4], &out)]).unwrap();
    assert_eq!(pd(&res.inputs[0]), [-1, -1]);
    assert_eq!(pd(&res.outputs[0]), [-1]);
    // A trace (ii->) is not partial either: the diagonal was never sharded.
    let n = plan_of("ii->");
    let res = fwd(&rule(&n), &m, &[(&[4, 4], &attr(&[0, -1]))]).unwrap();
    assert_eq!(pd(&res.outputs[0]), Vec::<i64>::new());
    assert!(!res.outputs[0].partial.is_partial());
}

#[test]
fn one_dims_are_never_sharded() {
    let m = mesh(&[2, 4]);
    // An input `1` dim: its sharding is dropped, not contracted.
    let n = plan_of("1i->i");
    let res = fwd(&rule(&n), &m, &[(&[1, 8], &attr(&[0, 1]))]).unwrap();
    assert_eq!(pd(&res.inputs[0]), [-1, 1]);
    assert_eq!(pd(&res.outputs[0]), [1]);
    assert!(!res.outputs[0].partial.is_partial());
    // An output `1` dim is replicated.
    let n = plan_of("i->1i");
    let res = fwd(&rule(&n), &m, &[(&[8], &attr(&[0]))]).unwrap();
    assert_eq!(pd(&res.outputs[0]), [-1, 0]);
    // Backward: a given sharding on an output `1` dim is not kept.
    let out = attr(&[1, 0]);
    let res = bwd(&rule(&n), &m, &[&[8]], &[(&[1, 8], &out)]).unwrap();
    assert_eq!(pd(&res.inputs[0]), [0]);
    assert_eq!(pd(&res.outputs[0]), [-1, 0]);
}

#[test]
fn declared_never_sharded_axes_are_replicated() {
    // Softmax over j: ij->ij with j never sharded.
    let n = plan_of("ij->ij");
    let j = n.plan().axis('j').unwrap();
    let r = rule(&n).with_never_sharded(AxisSet::EMPTY.with(j));
    let m = mesh(&[2, 4]);
    let res = fwd(&r, &m, &[(&[4, 8], &attr(&[0, 1]))]).unwrap();
    assert_eq!(pd(&res.inputs[0]), [0, -1]);
    assert_eq!(pd(&res.outputs[0]), [0, -1]);
    assert!(!res.outputs[0].partial.is_partial());
    let res = bwd(&r, &m, &[&[4, 8]], &[(&[4, 8], &attr(&[1, 0]))]).unwrap();
    assert_eq!(pd(&res.inputs[0]), [1, -1]);
    assert_eq!(pd(&res.outputs[0]), [1, -1]);
}

// ---------------------------------------------------------- partial / reduce

#[test]
fn a_max_rule_gives_max_partials() {
    let n = plan_of("mk,kn->mn");
    let r = rule(&n).with_reduce(ReduceType::Max);
    let res = fwd(
        &r,
        &mesh(&[2, 4]),
        &[(&[8, 16], &attr(&[-1, 1])), (&[16, 12], &attr(&[-1, -1]))],
    )
    .unwrap();
    assert_eq!(pd(&res.inputs[1]), [1, -1]);
    assert_eq!(pd(&res.outputs[0]), [-1, -1]);
    assert_eq!(partial(&res.outputs[0]), [(1, ReduceType::Max)]);
    assert_eq!(res.outputs[0].to_string(), "[-1, -1] partial{1: MAX}");
}

#[test]
fn reduce_overrides_apply_per_contracted_axis() {
    // mk,kn->n: m and k are both contracted; m on 0 reduces with the rule's
    // Sum, k on 1 with its override Min.
    let n = plan_of("mk,kn->n");
    let k = n.plan().axis('k').unwrap();
    let overrides = [(k, ReduceType::Min)];
    let r = rule(&n).with_reduce_overrides(&overrides);
    let res = fwd(
        &r,
        &mesh(&[2, 4]),
        &[(&[8, 16], &attr(&[0, 1])), (&[16, 12], &attr(&[-1, -1]))],
    )
    .unwrap();
    assert_eq!(pd(&res.inputs[1]), [1, -1]);
    assert_eq!(pd(&res.outputs[0]), [-1]);
    assert_eq!(partial(&res.outputs[0]), [(0, SUM), (1, ReduceType::Min)]);
    assert_eq!(r.reduce_of(k), ReduceType::Min);
    assert_eq!(r.reduce_of(n.plan().axis('m').unwrap()), SUM);
}

#[test]
fn each_output_is_partial_over_what_it_lacks() {
    // ijk->ij,jk: i on 0, k on 1. ij lacks k: partial over 1; jk lacks i:
    // partial over 0.
    let n = plan_of("ijk->ij,jk");
    let res = fwd(
        &rule(&n),
        &mesh(&[2, 4]),
        &[(&[4, 8, 16], &attr(&[0, -1, 1]))],
    )
    .unwrap();
    assert_eq!(res.outputs.len(), 2);
    assert_eq!(pd(&res.outputs[0]), [0, -1]);
    assert_eq!(partial(&res.outputs[0]), [(1, SUM)]);
    assert_eq!(pd(&res.outputs[1]), [-1, 1]);
    assert_eq!(partial(&res.outputs[1]), [(0, SUM)]);
}

#[test]
fn partial_dims_are_listed_in_mesh_dim_order() {
    // ijk->: all contracted; k on 0, i on 2, j on 1 -> {0,1,2}, sorted.
    let n = plan_of("ijk->");
    let res = fwd(
        &rule(&n),
        &mesh(&[2, 2, 2]),
        &[(&[4, 4, 4], &attr(&[2, 1, 0]))],
    )
    .unwrap();
    assert_eq!(partial(&res.outputs[0]), [(0, SUM), (1, SUM), (2, SUM)]);
    assert_eq!(
        res.outputs[0].to_string(),
        "[] partial{0: SUM, 1: SUM, 2: SUM}"
    );
}

#[test]
fn partial_inputs_are_dropped_from_requirements() {
    let n = plan_of("ij->ij");
    let x = attr(&[0, -1]).with_partial(partial_over(&[(1, SUM)]));
    let res = fwd(&rule(&n), &mesh(&[2, 4]), &[(&[4, 8], &x)]).unwrap();
    assert_eq!(pd(&res.inputs[0]), [0, -1]);
    inputs_not_partial(&res);
    assert!(!res.outputs[0].partial.is_partial());
}

/// Backward's answer fed forward must give back backward's outputs.
fn assert_fixed_point(r: &EinsumRule<'_>, m: &Mesh, shapes: &[&[usize]], b: &RuleResult) {
    let ins: Vec<(&[usize], &DistAttr)> = shapes.iter().copied().zip(&b.inputs).collect();
    let f = fwd(r, m, &ins).unwrap();
    assert_eq!(f.outputs, b.outputs, "forward of backward's requirements");
}

#[test]
fn backward_explains_a_partial_output_by_a_sharded_contraction() {
    let n = plan_of("mk,kn->mn");
    let m = mesh(&[2, 4]);
    let shapes: [&[usize]; 2] = [&[8, 16], &[16, 12]];
    let out = attr(&[0, -1]).with_partial(partial_over(&[(1, SUM)]));
    let res = bwd(&rule(&n), &m, &shapes, &[(&[8, 12], &out)]).unwrap();
    // Out partial over 1: k (contracted, Sum) is sharded over 1 in x and y.
    assert_eq!(pd(&res.inputs[0]), [0, 1]);
    assert_eq!(pd(&res.inputs[1]), [1, -1]);
    inputs_not_partial(&res);
    assert_eq!(pd(&res.outputs[0]), [0, -1]);
    assert_eq!(partial(&res.outputs[0]), [(1, SUM)]);
    assert_fixed_point(&rule(&n), &m, &shapes, &res);
}

#[test]
fn backward_drops_a_partial_output_nothing_explains() {
    let n = plan_of("mk,kn->mn");
    let m = mesh(&[2, 4]);
    let cases: [(ReduceType, usize, Policy); 3] = [
        // The contraction sums: a Max partial is no sum of k's blocks.
        (ReduceType::Max, 16, Policy::CLASSIC),
        // k = 6 does not split evenly over 4 devices.
        (SUM, 6, Policy::CLASSIC),
        // Reset explains nothing.
        (
            SUM,
            16,
            Policy::CLASSIC.with_backward_partial(BackwardPartial::Reset),
        ),
    ];
    for (red, k, policy) in cases {
        let r = rule(&n).with_policy(policy);
        let shapes: [&[usize]; 2] = [&[8, k], &[k, 12]];
        let out = attr(&[0, -1]).with_partial(partial_over(&[(1, red)]));
        let res = bwd(&r, &m, &shapes, &[(&[8, 12], &out)]).unwrap();
        assert_eq!(pd(&res.inputs[0]), [0, -1], "{red} k={k}");
        assert_eq!(pd(&res.inputs[1]), [-1, -1], "{red} k={k}");
        assert!(
            !res.outputs[0].partial.is_partial(),
            "{red} k={k}: {}",
            res.outputs[0]
        );
        assert_fixed_point(&r, &m, &shapes, &res);
    }
}

#[test]
fn backward_explains_each_partial_dim_by_the_first_axis_that_divides() {
    // j (extent 2) takes mesh dim 0; with 1 too it would not divide, so k does.
    let n = plan_of("ijk,jkl->il");
    let m = mesh(&[2, 4]);
    let shapes: [&[usize]; 2] = [&[4, 2, 8], &[2, 8, 3]];
    let out = attr(&[-1, -1]).with_partial(partial_over(&[(0, SUM), (1, SUM)]));
    let res = bwd(&rule(&n), &m, &shapes, &[(&[4, 3], &out)]).unwrap();
    assert_eq!(pd(&res.inputs[0]), [-1, 0, 1]);
    assert_eq!(pd(&res.inputs[1]), [0, 1, -1]);
    assert_eq!(partial(&res.outputs[0]), [(0, SUM), (1, SUM)]);
    assert_fixed_point(&rule(&n), &m, &shapes, &res);
    // A contraction over 8 takes both, co-sharded in mesh dim order.
    let n = plan_of("ik,kl->il");
    let shapes: [&[usize]; 2] = [&[4, 8], &[8, 3]];
    let res = bwd(&rule(&n), &m, &shapes, &[(&[4, 3], &out)]).unwrap();
    assert_eq!(
        res.inputs[0].dims_mapping,
        DimsMapping::from_nested(&[&[], &[0, 1]]).unwrap()
    );
    assert_fixed_point(&rule(&n), &m, &shapes, &res);
}

#[test]
fn backward_does_not_explain_a_partial_by_a_mesh_dim_an_output_shards() {
    // Output 1 shards its dim over mesh dim 1, so k cannot take 1 as well.
    let n = plan_of("mk,kn->mn,n");
    let m = mesh(&[2, 4]);
    let shapes: [&[usize]; 2] = [&[8, 16], &[16, 12]];
    let o0 = attr(&[0, -1]).with_partial(partial_over(&[(1, SUM)]));
    let o1 = attr(&[1]);
    let r = rule(&n);
    let res = bwd(&r, &m, &shapes, &[(&[8, 12], &o0), (&[12], &o1)]).unwrap();
    assert_eq!(pd(&res.inputs[0]), [0, -1]);
    assert_eq!(pd(&res.inputs[1]), [-1, 1]);
    // Output 0 now carries n sharded over 1 (the merged axis), not partial.
    assert_eq!(pd(&res.outputs[0]), [0, 1]);
    assert!(!res.outputs[0].partial.is_partial());
    assert_fixed_point(&r, &m, &shapes, &res);
}

#[test]
fn backward_explains_a_sum_partial_by_a_partial_input_of_a_linear_rule() {
    let n = plan_of("ij,ij->ij");
    let m = mesh(&[2, 4]);
    let r = rule(&n).with_policy(Policy::CLASSIC.with_partial_inputs(PartialInputs::Linear));
    let shapes: [&[usize]; 2] = [&[4, 8], &[4, 8]];
    let out = attr(&[0, -1]).with_partial(partial_over(&[(1, SUM)]));
    let res = bwd(&r, &m, &shapes, &[(&[4, 8], &out)]).unwrap();
    // Nothing is contracted: the first input carries the partial.
    assert_eq!(partial(&res.inputs[0]), [(1, SUM)]);
    assert!(!res.inputs[1].partial.is_partial());
    assert_eq!(partial(&res.outputs[0]), [(1, SUM)]);
    assert_fixed_point(&r, &m, &shapes, &res);
    // Without linearity the partial is not explained.
    let res = bwd(&rule(&n), &m, &shapes, &[(&[4, 8], &out)]).unwrap();
    inputs_not_partial(&res);
    assert!(!res.outputs[0].partial.is_partial());
}

#[test]
fn backward_first_wins_between_outputs_corrects_the_loser() {
    // ij->ij,ji: output 0 shards i on 0 (first), output 1 shards j on 0.
    let n = plan_of("ij->ij,ji");
    let m = mesh(&[2, 4]);
    let (o0, o1) = (attr(&[0, -1]), attr(&[0, -1]));
    let res = bwd(&rule(&n), &m, &[&[4, 8]], &[(&[4, 8], &o0), (&[8, 4], &o1)]).unwrap();
    assert_eq!(pd(&res.inputs[0]), [0, -1]);
    assert_eq!(pd(&res.outputs[0]), [0, -1]);
    assert_eq!(pd(&res.outputs[1]), [-1, 0]);
    // Strict: an error.
    let r = rule(&n).with_policy(Policy::STRICT);
    let err = bwd(&r, &m, &[&[4, 8]], &[(&[4, 8], &o0), (&[8, 4], &o1)]).unwrap_err();
    assert_eq!(
        err,
        SpmdError::MeshDimConflict {
            op: "op",
            mesh_dim: 0,
            first: AxisName::Label('i'),
            second: AxisName::Label('j'),
        }
    );
}

#[test]
fn backward_merges_outputs_only() {
    // Two outputs that shard one axis two ways: first-wins keeps output 0's
    // and reshards output 1; strict conflicts make it an axis conflict at
    // output 1.
    let n = plan_of("ij->ij,ij");
    let res = bwd(
        &rule(&n),
        &mesh(&[2, 4]),
        &[&[4, 8]],
        &[(&[4, 8], &attr(&[0, -1])), (&[4, 8], &attr(&[1, -1]))],
    )
    .unwrap();
    assert_eq!(res.inputs[0].to_string(), "[0, -1]");
    assert_eq!(res.outputs[1].to_string(), "[0, -1]");
    let err = bwd(
        &rule(&n).with_policy(Policy::STRICT),
        &mesh(&[2, 4]),
        &[&[4, 8]],
        &[(&[4, 8], &attr(&[0, -1])), (&[4, 8], &attr(&[1, -1]))],
    )
    .unwrap_err();
    assert_eq!(
        err,
        SpmdError::AxisConflict {
            op: "op",
            axis: AxisName::Label('i'),
            tensor: TensorRef::output(1),
            dim: 0,
            existing: Sharding::on(0),
            incoming: Sharding::on(1),
        }
    );
}

#[test]
fn backward_missing_axis_error_policy() {
    let n = plan_of("mk,kn->mn");
    let r = rule(&n).with_policy(Policy::CLASSIC.with_missing_axis(MissingAxis::Error));
    let err = bwd(
        &r,
        &mesh(&[2, 4]),
        &[&[8, 16], &[16, 12]],
        &[(&[8, 12], &attr(&[0, 1]))],
    )
    .unwrap_err();
    assert_eq!(
        err,
        SpmdError::MissingAxis {
            op: "op",
            tensor: TensorRef::input(0),
            dim: 1,
            axis: AxisName::Label('k'),
        }
    );
    assert!(err.to_string().contains("input 0 dim 1"), "{err}");
    // Without a missing axis the policy is silent.
    let n = plan_of("ij->ji");
    let r = rule(&n).with_policy(Policy::CLASSIC.with_missing_axis(MissingAxis::Error));
    let res = bwd(&r, &mesh(&[2, 4]), &[&[4, 8]], &[(&[8, 4], &attr(&[0, 1]))]).unwrap();
    assert_eq!(pd(&res.inputs[0]), [1, 0]);
}

// ------------------------------------------------------------- divisibility

fn with_div(n: &Notation, d: Divisibility) -> EinsumRule<'_> {
    rule(n).with_policy(Policy::CLASSIC.with_divisibility(d))
}

#[test]
fn divisibility_on_a_free_axis() {
    // m = 5 on mesh dim 1 (extent 3): uneven.
    let n = plan_of("mk,kn->mn");
    let m = mesh(&[2, 3]);
    let (x, y) = (attr(&[1, -1]), attr(&[-1, -1]));
    let call = |d| fwd(&with_div(&n, d), &m, &[(&[5, 32], &x), (&[32, 48], &y)]).unwrap();

    let res = call(Divisibility::Uneven);
    assert_eq!(pd(&res.inputs[0]), [1, -1]);
    assert_eq!(pd(&res.outputs[0]), [1, -1]);

    let res = call(Divisibility::Drop);
    assert_eq!(pd(&res.inputs[0]), [-1, -1]);
    assert_eq!(pd(&res.outputs[0]), [-1, -1]);

    // Only the derived side (the output) drops it; the given side (the input
    // requirement) is returned unchanged.
    let res = call(Divisibility::DropDerived);
    assert_eq!(pd(&res.inputs[0]), [1, -1]);
    assert_eq!(pd(&res.outputs[0]), [-1, -1]);
}

#[test]
fn divisibility_on_a_contracted_axis() {
    // k = 5 on mesh dim 1 (extent 3).
    let n = plan_of("mk,kn->mn");
    let m = mesh(&[2, 3]);
    let (x, y) = (attr(&[-1, 1]), attr(&[-1, -1]));
    let call = |d| fwd(&with_div(&n, d), &m, &[(&[8, 5], &x), (&[5, 48], &y)]).unwrap();

    let res = call(Divisibility::Uneven);
    assert_eq!(pd(&res.inputs[1]), [1, -1]);
    assert_eq!(partial(&res.outputs[0]), [(1, SUM)]);

    // Dropped everywhere: k is not sharded, nothing is partial.
    let res = call(Divisibility::Drop);
    assert_eq!(pd(&res.inputs[0]), [-1, -1]);
    assert_eq!(pd(&res.inputs[1]), [-1, -1]);
    assert_eq!(pd(&res.outputs[0]), [-1, -1]);
    assert!(!res.outputs[0].partial.is_partial());

    // The inputs (given side) keep k on 1, so the contraction still yields
    // partial sums over mesh dim 1.
    let res = call(Divisibility::DropDerived);
    assert_eq!(pd(&res.inputs[0]), [-1, 1]);
    assert_eq!(pd(&res.inputs[1]), [1, -1]);
    assert_eq!(pd(&res.outputs[0]), [-1, -1]);
    assert_eq!(partial(&res.outputs[0]), [(1, SUM)]);
}

#[test]
fn divisibility_drop_trims_a_co_shard_from_its_minor_end() {
    // i = 4 over [0,1] on [2,3]: 6 does not divide 4, 2 does.
    let n = plan_of("i->i");
    let m = mesh(&[2, 3]);
    let x = co(&[&[0, 1]]);
    let res = fwd(&with_div(&n, Divisibility::Drop), &m, &[(&[4], &x)]).unwrap();
    assert_eq!(pd(&res.inputs[0]), [0]);
    assert_eq!(pd(&res.outputs[0]), [0]);
    let res = fwd(&with_div(&n, Divisibility::DropDerived), &m, &[(&[4], &x)]).unwrap();
    assert_eq!(res.inputs[0].dims_mapping, x.dims_mapping);
    assert_eq!(pd(&res.outputs[0]), [0]);
    let res = fwd(&with_div(&n, Divisibility::Uneven), &m, &[(&[4], &x)]).unwrap();
    assert_eq!(res.outputs[0].dims_mapping, x.dims_mapping);
}

#[test]
fn divisibility_in_backward_derived_side_is_the_inputs() {
    // Output m = 5 on mesh dim 1 (extent 3).
    let n = plan_of("mk,kn->mn");
    let m = mesh(&[2, 3]);
    let out = attr(&[1, -1]);
    let call = |d| {
        bwd(
            &with_div(&n, d),
            &m,
            &[&[5, 32], &[32, 48]],
            &[(&[5, 48], &out)],
        )
        .unwrap()
    };
    let res = call(Divisibility::Uneven);
    assert_eq!(pd(&res.inputs[0]), [1, -1]);
    assert_eq!(pd(&res.outputs[0]), [1, -1]);
    let res = call(Divisibility::Drop);
    assert_eq!(pd(&res.inputs[0]), [-1, -1]);
    assert_eq!(pd(&res.outputs[0]), [-1, -1]);
    let res = call(Divisibility::DropDerived);
    assert_eq!(pd(&res.inputs[0]), [-1, -1]);
    assert_eq!(pd(&res.outputs[0]), [1, -1]);
}

// ---------------------------------------------------------------- validation

fn matmul() -> Notation {
    plan_of("mk,kn->mn")
}

fn matmul_fwd(x: (&[usize], &DistAttr), y: (&[usize], &DistAttr)) -> SpmdError {
    let n = matmul();
    let r = EinsumRule::new("matmul", n.plan());
    fwd(&r, &mesh(&[2, 4]), &[x, y]).unwrap_err()
}

#[test]
fn mapping_length_error() {
    let err = matmul_fwd((&[8, 16], &attr(&[0])), (&[16, 12], &attr(&[-1, -1])));
    assert_eq!(
        err,
        SpmdError::MappingLength {
            op: "matmul",
            tensor: TensorRef::input(0),
            rank: 2,
            len: 1,
        }
    );
    let msg = err.to_string();
    assert!(msg.contains("matmul: input 0 has rank 2"), "{msg}");
    // The same for a backward output.
    let n = matmul();
    let err = bwd(
        &rule(&n),
        &mesh(&[2, 4]),
        &[&[8, 16], &[16, 12]],
        &[(&[8, 12], &attr(&[0, -1, -1]))],
    )
    .unwrap_err();
    assert_eq!(
        err,
        SpmdError::MappingLength {
            op: "op",
            tensor: TensorRef::output(0),
            rank: 2,
            len: 3,
        }
    );
}

#[test]
fn mesh_dim_out_of_range_error() {
    let err = matmul_fwd((&[8, 16], &attr(&[-1, -1])), (&[16, 12], &attr(&[-1, 2])));
    assert_eq!(
        err,
        SpmdError::MeshDimOutOfRange {
            op: "matmul",
            tensor: TensorRef::input(1),
            dim: 1,
            mesh_dim: 2,
            mesh_rank: 2,
        }
    );
    let msg = err.to_string();
    assert!(msg.contains("input 1 dim 1"), "{msg}");
    assert!(msg.contains("mesh dim 2"), "{msg}");
    // Beyond any mesh (a mesh has at most 8 dims): Paddle's form is refused
    // where it is parsed...
    assert!(DistAttr::from_paddle(&[200, -1]).is_none());
    assert!(DistAttr::from_paddle(&[8, -1]).is_none());
    // ...and a sharding built with such a dim (it stores at most 14) is
    // still out of range of every mesh: the same error, no panic.
    let far = DistAttr::new(DimsMapping::from_shardings(&[
        Sharding::on(200),
        Sharding::REPLICATED,
    ]));
    let err = matmul_fwd((&[8, 16], &far), (&[16, 12], &attr(&[-1, -1])));
    assert!(
        matches!(
            err,
            SpmdError::MeshDimOutOfRange {
                mesh_dim: 14,
                dim: 0,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn mesh_dim_reused_error() {
    let err = matmul_fwd((&[8, 16], &attr(&[1, 1])), (&[16, 12], &attr(&[-1, -1])));
    assert_eq!(
        err,
        SpmdError::MeshDimReused {
            op: "matmul",
            tensor: TensorRef::input(0),
            mesh_dim: 1,
            first: 0,
            second: 1,
        }
    );
    let msg = err.to_string();
    assert!(
        msg.contains("mesh dim 1 on dim 0 and again on dim 1"),
        "{msg}"
    );
    // Twice inside one co-shard is a reuse too.
    let err = matmul_fwd(
        (&[8, 16], &co(&[&[0, 0], &[]])),
        (&[16, 12], &attr(&[-1, -1])),
    );
    assert!(
        matches!(err, SpmdError::MeshDimReused { mesh_dim: 0, .. }),
        "{err}"
    );
}

#[test]
fn partial_out_of_range_error() {
    let x = attr(&[-1, -1]).with_partial(partial_over(&[(3, SUM)]));
    let err = matmul_fwd((&[8, 16], &x), (&[16, 12], &attr(&[-1, -1])));
    assert_eq!(
        err,
        SpmdError::PartialOutOfRange {
            op: "matmul",
            tensor: TensorRef::input(0),
            mesh_dim: 3,
            mesh_rank: 2,
        }
    );
    assert!(err.to_string().contains("mesh dim 3"), "{err}");
}

#[test]
fn partial_and_sharded_error() {
    let y = attr(&[-1, 0]).with_partial(partial_over(&[(0, SUM)]));
    let err = matmul_fwd((&[8, 16], &attr(&[-1, -1])), (&[16, 12], &y));
    assert_eq!(
        err,
        SpmdError::PartialAndSharded {
            op: "matmul",
            tensor: TensorRef::input(1),
            mesh_dim: 0,
            dim: 1,
        }
    );
    let msg = err.to_string();
    assert!(
        msg.contains("input 1") && msg.contains("mesh dim 0") && msg.contains("dim 1"),
        "{msg}"
    );
    // Backward outputs are checked the same way.
    let n = matmul();
    let out = attr(&[1, -1]).with_partial(partial_over(&[(1, SUM)]));
    let err = bwd(
        &rule(&n),
        &mesh(&[2, 4]),
        &[&[8, 16], &[16, 12]],
        &[(&[8, 12], &out)],
    )
    .unwrap_err();
    assert_eq!(
        err,
        SpmdError::PartialAndSharded {
            op: "op",
            tensor: TensorRef::output(0),
            mesh_dim: 1,
            dim: 0,
        }
    );
}

#[test]
fn rank_errors() {
    let err = matmul_fwd(
        (&[8, 16, 2], &attr(&[-1, -1, -1])),
        (&[16, 12], &attr(&[-1, -1])),
    );
    assert_eq!(
        err,
        SpmdError::Rank {
            op: "matmul",
            tensor: TensorRef::input(0),
            rank: 3,
            term: "mk".into(),
            need: RankNeed::Exactly(2),
        }
    );
    let msg = err.to_string();
    assert!(
        msg.contains("input 0 has rank 3") && msg.contains("`mk`"),
        "{msg}"
    );

    // An ellipsis term needs at least its labelled dims.
    let n = plan_of("...k->...k");
    let err = fwd(&rule(&n), &mesh(&[2]), &[(&[], &attr(&[]))]).unwrap_err();
    assert_eq!(
        err,
        SpmdError::Rank {
            op: "op",
            tensor: TensorRef::input(0),
            rank: 0,
            term: "...k".into(),
            need: RankNeed::AtLeast(1),
        }
    );

    // Backward: an input shape of the wrong rank, and an output of the wrong rank.
    let n = matmul();
    let out = attr(&[-1, -1]);
    let err = bwd(
        &rule(&n),
        &mesh(&[2]),
        &[&[8], &[16, 12]],
        &[(&[8, 12], &out)],
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            SpmdError::Rank {
                tensor: TensorRef {
                    role: Role::Input,
                    index: 0
                },
                rank: 1,
                need: RankNeed::Exactly(2),
                ..
            }
        ),
        "{err}"
    );
    let out = attr(&[-1]);
    let err = bwd(
        &rule(&n),
        &mesh(&[2]),
        &[&[8, 16], &[16, 12]],
        &[(&[8], &out)],
    )
    .unwrap_err();
    assert_eq!(
        err,
        SpmdError::Rank {
            op: "op",
            tensor: TensorRef::output(0),
            rank: 1,
            term: "mn".into(),
            need: RankNeed::Exactly(2),
        }
    );
}

#[test]
fn arity_errors() {
    let n = matmul();
    let r = EinsumRule::new("matmul", n.plan());
    let m = mesh(&[2, 4]);
    let x = attr(&[-1, -1]);
    let err = fwd(&r, &m, &[(&[8, 16], &x)]).unwrap_err();
    assert_eq!(
        err,
        SpmdError::Arity {
            op: "matmul",
            role: Role::Input,
            expected: 2,
            found: 1,
            names: &[],
        }
    );
    assert!(
        err.to_string()
            .contains("matmul: 1 input(s) given, the rule takes 2"),
        "{err}"
    );
    // Backward: wrong number of input shapes, then of outputs.
    let err = bwd(&r, &m, &[&[8, 16]], &[(&[8, 12], &x)]).unwrap_err();
    assert_eq!(
        err,
        SpmdError::Arity {
            op: "matmul",
            role: Role::Input,
            expected: 2,
            found: 1,
            names: &[],
        }
    );
    let err = bwd(
        &r,
        &m,
        &[&[8, 16], &[16, 12]],
        &[(&[8, 12], &x), (&[8, 12], &x)],
    )
    .unwrap_err();
    assert_eq!(
        err,
        SpmdError::Arity {
            op: "matmul",
            role: Role::Output,
            expected: 1,
            found: 2,
            names: &[],
        }
    );
    // A rule that names its tensors lists them.
    let named = EinsumRule::new("matmul", n.plan()).with_options(spmd_core::RuleOptions {
        input_names: &["x", "y"],
        output_names: &["out"],
        ..spmd_core::RuleOptions::DEFAULT
    });
    let err = fwd(&named, &m, &[(&[8, 16], &x)]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "matmul: 1 input(s) given, the rule takes 2 (x, y)"
    );
}

#[test]
fn shape_mismatch_errors() {
    let err = matmul_fwd((&[8, 16], &attr(&[-1, -1])), (&[12, 16], &attr(&[-1, -1])));
    assert_eq!(
        err,
        SpmdError::ShapeMismatch {
            op: "matmul",
            axis: AxisName::Label('k'),
            tensor: TensorRef::input(1),
            dim: 0,
            expected: 16,
            found: 12,
        }
    );
    let msg = err.to_string();
    assert!(
        msg.contains("`k`") && msg.contains("input 1 dim 0"),
        "{msg}"
    );

    // Ellipsis dims: named by their position in the broadcast block.
    let n = plan_of("...k,...k->...k");
    let err = fwd(
        &rule(&n),
        &mesh(&[2]),
        &[(&[3, 16], &attr(&[-1, -1])), (&[5, 16], &attr(&[-1, -1]))],
    )
    .unwrap_err();
    assert_eq!(
        err,
        SpmdError::ShapeMismatch {
            op: "op",
            axis: AxisName::Ellipsis(0),
            tensor: TensorRef::input(1),
            dim: 0,
            expected: 3,
            found: 5,
        }
    );

    // A compound whose factors are known must have their product as size.
    let n = plan_of("bs(hd)->bshd");
    let err = bwd(
        &rule(&n),
        &mesh(&[2]),
        &[&[2, 8, 20]],
        &[(&[2, 8, 4, 6], &attr(&[-1, -1, -1, -1]))],
    )
    .unwrap_err();
    assert_eq!(
        err,
        SpmdError::ShapeMismatch {
            op: "op",
            axis: AxisName::Label('h'),
            tensor: TensorRef::input(0),
            dim: 2,
            expected: 24,
            found: 20,
        }
    );
}

#[test]
fn invalid_mesh_errors() {
    assert_eq!(
        Mesh::new(&[2, 0]).unwrap_err(),
        SpmdError::InvalidMesh { shape: vec![2, 0] }
    );
    assert!(matches!(
        Mesh::new(&[1; 9]).unwrap_err(),
        SpmdError::InvalidMesh { shape } if shape == vec![1; 9]
    ));
    assert!(Mesh::new(&[1; 8]).is_ok());
    assert_eq!(
        Mesh::with_process_ids(&[2, 2], &[0, 1, 2]).unwrap_err(),
        SpmdError::InvalidMesh { shape: vec![2, 2] }
    );
    let m = Mesh::with_process_ids(&[2, 2], &[3, 2, 1, 0]).unwrap();
    assert_eq!(m.shape(), &[2, 2]);
    assert!(
        Mesh::new(&[2, 0])
            .unwrap_err()
            .to_string()
            .contains("[2, 0]")
    );
}

#[test]
fn notation_errors_are_typed() {
    let err = Einsum::new("mk,kn->mq").unwrap_err();
    let SpmdError::Notation(errs) = &err else {
        panic!("expected a notation error, got {err}");
    };
    assert_eq!(errs.errors.len(), 1);
    assert_eq!(
        errs.errors[0].kind,
        spmd_core::notation::ErrorKind::UnknownOutputLabel('q')
    );
    assert_eq!(errs.errors[0].range, 8..9);
    assert_eq!(
        err.to_string(),
        "invalid einsum notation: unknown output label `q` at column 9 of einsum \"mk,kn->mq\" (no input has it)"
    );
    // Every error of the notation is kept.
    let SpmdError::Notation(errs) = Einsum::new("a#,b->c").unwrap_err() else {
        panic!()
    };
    assert_eq!(errs.errors.len(), 2);
}

#[test]
fn too_many_axes_is_an_error_not_a_panic() {
    // 65 dims behind one ellipsis: more axes than the 64-bit axis sets hold.
    let n = plan_of("...->...");
    let shape = vec![1usize; 65];
    let a = DistAttr::replicated(65);
    let err = fwd(&rule(&n), &mesh(&[2]), &[(&shape, &a)]).unwrap_err();
    assert!(
        matches!(err, SpmdError::TooManyAxes { count: 65, .. }),
        "{err}"
    );
}

#[test]
fn huge_mesh_extents_are_rejected_not_panicked_on() {
    // A device count that overflows usize is not a mesh.
    assert!(matches!(
        Mesh::new(&[usize::MAX, 2]),
        Err(SpmdError::InvalidMesh { .. })
    ));
    let r = std::panic::catch_unwind(|| Mesh::with_process_ids(&[usize::MAX, 2], &[0]).is_err());
    assert_eq!(r.ok(), Some(true), "with_process_ids must return an error");
    // Just below overflow, a co-sharding over the whole mesh runs (uneven).
    let m = Mesh::new(&[usize::MAX / 2, 2]).unwrap();
    let n = plan_of("i->i");
    let x = co(&[&[0, 1]]);
    let r = std::panic::catch_unwind(|| fwd(&rule(&n), &m, &[(&[4], &x)]).is_ok());
    assert_eq!(r.ok(), Some(true), "forward panicked or failed");
}

#[test]
fn mesh_sets_of_out_of_range_mesh_dims_do_not_panic_or_alias() {
    // Sharding::on accepts any u8 mesh dim (DimsMapping::from_paddle accepts
    // up to 255), so the set of its mesh dims must not panic nor alias dim 1.
    let r = std::panic::catch_unwind(|| Sharding::on(9).mesh_set());
    let set = r.expect("mesh_set panicked");
    assert!(!set.contains(1), "mesh dim 9 aliases mesh dim 1: {set:?}");
    let r = std::panic::catch_unwind(|| MeshSet::EMPTY.with(9));
    assert!(r.is_ok(), "MeshSet::with panicked");
}

#[test]
fn trimmed_shardings_compare_equal() {
    let trimmed = Sharding::co(&[0, 2]).unwrap().without_last().without_last();
    assert!(trimmed.is_replicated());
    assert_eq!(trimmed, Sharding::REPLICATED);
    // Through inference: i = 2 over [0,2] on [3,3,2]: 6 and then 3 do not
    // divide 2, so Drop trims it to replicated on both sides.
    let n = plan_of("i->i");
    let x = co(&[&[0, 2]]);
    let res = fwd(
        &with_div(&n, Divisibility::Drop),
        &mesh(&[3, 3, 2]),
        &[(&[2], &x)],
    )
    .unwrap();
    assert_eq!(res.outputs[0].to_string(), "[-1]");
    assert_eq!(res.inputs[0], DistAttr::replicated(1));
    assert_eq!(res.outputs[0], DistAttr::replicated(1));
}

#[test]
fn partials_compare_by_their_live_dims() {
    let mut p = Partial::over(MeshSet::single(0), ReduceType::Max);
    p.remove(MeshSet::single(0));
    assert!(!p.is_partial());
    assert_eq!(p, Partial::NONE);
}

/// A compound dim whose known factor does not divide its extent is an error
/// in every direction (30 query heads grouped over 8 key-value heads used to
/// be accepted, the group factor left unknown).
#[test]
fn compound_extents_must_be_multiples_of_their_known_factors() {
    let e = spmd_core::Einsum::new("bs(hg)d,bthd->b(hg)st").unwrap();
    let mesh = Mesh::new(&[2, 4]).unwrap();
    let (q, kv) = (attr(&[0, -1, 1, -1]), attr(&[0, -1, -1, -1]));
    let err = e
        .forward(
            &mesh,
            &[
                Spec::new(&[8, 64, 30, 16], &q),
                Spec::new(&[8, 64, 8, 16], &kv),
            ],
        )
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "einsum: input 0 dim 2 has extent 30, which its factor `h` of extent 8 does not divide"
    );
    // 32 heads over 8: groups of 4, sharded on the heads' major factor.
    let r = e
        .forward(
            &mesh,
            &[
                Spec::new(&[8, 64, 32, 16], &q),
                Spec::new(&[8, 64, 8, 16], &kv),
            ],
        )
        .unwrap();
    assert_eq!(r.outputs[0].to_string(), "[0, 1, -1, -1]");
    // Backward learns the same factor from the outputs and inputs.
    let out = attr(&[0, -1, -1, -1]);
    let err = e
        .backward(
            &mesh,
            &[&[8, 64, 30, 16], &[8, 64, 8, 16]],
            &[Spec::new(&[8, 30, 64, 64], &out)],
        )
        .unwrap_err();
    assert!(
        matches!(
            err,
            SpmdError::CompoundExtent {
                found: 30,
                known: 8,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn a_compound_major_that_cannot_divide_claims_like_a_never_sharded_dim() {
    // q's heads are (hg): 8 query heads over k's 2. Mesh dim 0 (4 devices)
    // cannot split h (2), so q's sharding of it is dropped before the merge
    // and claims as a never-sharded dim's does: under `Count` it still
    // keeps k's batch off mesh dim 0, under `Ignore` the batch takes it.
    let n = plan_of("b(hg),bh->b(hg)");
    let (q, k) = (attr(&[-1, 0]), attr(&[0, -1]));
    let ins: [(&[usize], &DistAttr); 2] = [(&[8, 8], &q), (&[8, 2], &k)];
    let r = fwd(&rule(&n), &mesh(&[4]), &ins).unwrap();
    assert_eq!(pd(&r.inputs[0]), [-1, -1]);
    assert_eq!(pd(&r.inputs[1]), [-1, -1]);
    let ignore = Policy::CLASSIC.with_unsharded_claims(UnshardedClaims::Ignore);
    let r = fwd(&rule(&n).with_policy(ignore), &mesh(&[4]), &ins).unwrap();
    assert_eq!(pd(&r.inputs[0]), [0, -1]);
    assert_eq!(pd(&r.inputs[1]), [0, -1]);
    assert_eq!(pd(&r.outputs[0]), [0, -1]);
    // A mesh dim that divides h keeps the heads sharded.
    let k = attr(&[-1, -1]);
    let r = fwd(&rule(&n), &mesh(&[2]), &[(&[8, 8], &q), (&[8, 2], &k)]).unwrap();
    assert_eq!(pd(&r.inputs[1]), [-1, 0]);
}
