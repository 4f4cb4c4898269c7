//! The built-in ops declared with `#[spmd_rule]`, through the registry: each
//! macro option proven on a real op, and the registry's contract.

use spmd_core::SpmdRuleExt;
use spmd_core::{
    Attrs, Conflicts, DistAttr, EinsumRule, Mesh, Policy, ReduceType, Registry, Spec, SpmdError,
    SpmdRule,
};
use spmd_ops::{Embedding, Matmul};

fn attr(m: &[i64]) -> DistAttr {
    DistAttr::from_paddle(m).unwrap()
}

fn mesh(shape: &[usize]) -> Mesh {
    Mesh::new(shape).unwrap()
}

fn build(op: &str, attrs: Attrs) -> Box<dyn SpmdRule> {
    spmd_ops::builtins().build(op, &attrs).unwrap()
}

#[test]
fn matmul_transposes_pick_their_notation() {
    let m = mesh(&[2, 3]);
    // x^T is [k, m] = [32, 64]: k (dim 0) on mesh dim 0, m (dim 1) on mesh dim 1.
    let op = build(
        "matmul",
        Attrs::new().with("trans_x", true).with("trans_y", false),
    );
    let (x, y) = (attr(&[0, 1]), attr(&[-1, -1]));
    let r = op
        .forward(&m, &[Spec::new(&[32, 64], &x), Spec::new(&[32, 48], &y)])
        .unwrap();
    assert_eq!(r.inputs[1], attr(&[0, -1]));
    assert_eq!(r.outputs[0].dims_mapping, attr(&[1, -1]).dims_mapping);
    assert_eq!(r.outputs[0].partial.reduce_type(0), Some(ReduceType::Sum));

    // y^T is [n, k] = [48, 32]: k is now y's last dim.
    let op = build("matmul", Attrs::new().with("trans_y", true));
    let (x, y) = (attr(&[1, 0]), attr(&[-1, -1]));
    let r = op
        .forward(&m, &[Spec::new(&[64, 32], &x), Spec::new(&[48, 32], &y)])
        .unwrap();
    assert_eq!(r.inputs[1], attr(&[-1, 0]));
    assert_eq!(r.outputs[0].to_string(), "[1, -1] partial{0: SUM}");
}

#[test]
fn matmul_backward_follows_the_output() {
    // Paddle suite: out [64,48] mapping [1,0] -> x [1,-1], y [-1,0], out unchanged.
    let op = build("matmul", Attrs::new());
    let out = attr(&[1, 0]);
    let r = op
        .backward(
            &mesh(&[2, 3]),
            &[&[64, 32], &[32, 48]],
            &[Spec::new(&[64, 48], &out)],
        )
        .unwrap();
    assert_eq!(r.inputs[0], attr(&[1, -1]));
    assert_eq!(r.inputs[1], attr(&[-1, 0]));
    assert_eq!(r.outputs[0], out);
}

#[test]
fn the_macro_rule_answers_like_the_direct_core_path() {
    let notation = spmd_core::notation::parse("...mk,...kn->...mn").unwrap();
    let role_priority = Policy::CLASSIC.with_conflicts(Conflicts::RolePriority);
    let direct = EinsumRule::new("matmul", notation.plan()).with_policy(role_priority);
    let m = mesh(&[2, 2]);
    let cases: [(&[i64], &[i64]); 4] = [
        (&[0, 1, -1], &[-1, -1, 0]),
        (&[-1, 0, 1], &[1, -1, -1]),
        (&[1, -1, 0], &[-1, 0, 1]),
        (&[-1, -1, -1], &[0, 1, -1]),
    ];
    for (x, y) in cases {
        let (x, y) = (attr(x), attr(y));
        let specs = [Spec::new(&[4, 8, 16], &x), Spec::new(&[4, 16, 6], &y)];
        assert_eq!(
            Matmul::default().forward(&m, &specs),
            direct.forward(&m, &specs),
            "x {x} y {y}"
        );
    }
}

#[test]
fn embedding_row_parallel_is_partial() {
    let op = build("embedding", Attrs::new());
    let (x, w) = (attr(&[1, -1]), attr(&[0, -1]));
    let r = op
        .forward(
            &mesh(&[2, 4]),
            &[Spec::new(&[4, 1024], &x), Spec::new(&[512, 768], &w)],
        )
        .unwrap();
    assert_eq!(r.inputs[0], attr(&[1, -1]));
    assert_eq!(r.inputs[1], attr(&[0, -1]));
    assert_eq!(r.outputs[0].to_string(), "[1, -1, -1] partial{0: SUM}");
}

#[test]
fn embedding_rejects_row_sharding_with_padding_idx_or_sparse() {
    let (x, w) = (attr(&[1, -1]), attr(&[0, -1]));
    let specs = [Spec::new(&[4, 1024], &x), Spec::new(&[512, 768], &w)];
    for attrs in [
        Attrs::new().with("padding_idx", 128i64),
        Attrs::new().with("sparse", true),
    ] {
        let err = build("lookup_table_v2", attrs)
            .forward(&mesh(&[2, 4]), &specs)
            .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("mesh dim 0") && msg.contains("input 1"),
            "the message must name the tensor and the mesh dim sharding the rows: {msg}"
        );
    }
    // With replicated rows the same attributes are fine.
    let w = attr(&[-1, 0]);
    let specs = [Spec::new(&[4, 1024], &x), Spec::new(&[512, 768], &w)];
    let op = Embedding {
        padding_idx: 128,
        sparse: true,
    };
    assert!(op.forward(&mesh(&[2, 4]), &specs).is_ok());
}

#[test]
fn embedding_backward_replicates_the_missing_row_axis() {
    let op = build("embedding", Attrs::new());
    let out = attr(&[-1, 0, 1]);
    let r = op
        .backward(
            &mesh(&[2, 4]),
            &[&[4, 1024], &[512, 768]],
            &[Spec::new(&[4, 1024, 768], &out)],
        )
        .unwrap();
    assert_eq!(r.inputs[0], attr(&[-1, 0]));
    assert_eq!(r.inputs[1], attr(&[-1, 1]));
    assert_eq!(r.outputs[0], out);
}

#[test]
fn softmax_never_shards_its_axis() {
    let m = mesh(&[2, 4]);
    let x = attr(&[-1, 1, 0]);
    // Paddle suite: axis 1 and axis -2 both replicate dim 1 and keep dim 2.
    for axis in [1i64, -2] {
        let op = build("softmax", Attrs::new().with("axis", axis));
        let r = op.forward(&m, &[Spec::new(&[8, 16, 48], &x)]).unwrap();
        assert_eq!(r.inputs[0], attr(&[-1, -1, 0]), "axis {axis}");
        assert_eq!(r.outputs[0], attr(&[-1, -1, 0]), "axis {axis}");
    }
    // Backward: the given output loses the sharding of the softmax axis too.
    let op = build("softmax", Attrs::new());
    let out = attr(&[1, -1, 0]);
    let r = op
        .backward(&m, &[&[8, 16, 48]], &[Spec::new(&[8, 16, 48], &out)])
        .unwrap();
    assert_eq!(r.inputs[0], attr(&[1, -1, -1]));
    assert_eq!(r.outputs[0], attr(&[1, -1, -1]));
}

#[test]
fn softmax_axis_out_of_range_is_an_error_naming_the_attribute() {
    let op = build("softmax", Attrs::new().with("axis", 3i64));
    let x = attr(&[-1, 1, 0]);
    let err = op
        .forward(&mesh(&[2, 4]), &[Spec::new(&[8, 16, 48], &x)])
        .unwrap_err();
    assert!(
        matches!(&err, SpmdError::InvalidAttr { attr, .. } if attr == "axis"),
        "{err}"
    );
}

#[test]
fn reductions_carry_their_own_reduce_type() {
    let m = mesh(&[2, 2]);
    let x = attr(&[0, 1, -1]);
    for (op, r) in [
        ("sum", ReduceType::Sum),
        ("max", ReduceType::Max),
        ("min", ReduceType::Min),
        ("prod", ReduceType::Prod),
    ] {
        let rule = build(
            op,
            Attrs::new().with("axis", vec![1i64]).with("keep_dim", true),
        );
        let res = rule.forward(&m, &[Spec::new(&[4, 6, 8], &x)]).unwrap();
        assert_eq!(
            res.outputs[0].dims_mapping,
            attr(&[0, -1, -1]).dims_mapping,
            "{op}"
        );
        assert_eq!(res.outputs[0].partial.reduce_type(1), Some(r), "{op}");
        assert_eq!(res.outputs[0].partial.reduce_type(0), None, "{op}");
    }
    // Reducing every axis without keep_dim gives a scalar.
    let rule = build("max", Attrs::new());
    let res = rule.forward(&m, &[Spec::new(&[4, 6, 8], &x)]).unwrap();
    assert_eq!(res.outputs[0].to_string(), "[] partial{0: MAX, 1: MAX}");
}

#[test]
fn registry_rejects_duplicates_and_suggests_near_names() {
    let mut r = spmd_ops::builtins();
    assert!(matches!(
        r.register::<Matmul>(),
        Err(SpmdError::DuplicateRule { name }) if name == "matmul"
    ));
    let msg = match r.build("softmx", &Attrs::new()) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("an unknown name must not build"),
    };
    assert_eq!(msg, "no rule named `softmx` (did you mean `softmax`?)");
    let none = Registry::new().get("matmul").unwrap_err();
    assert_eq!(none.to_string(), "no rule named `matmul`");
}

#[test]
fn required_and_mistyped_attributes_are_errors() {
    let r = spmd_ops::builtins();
    let err = match r.build("matmul", &Attrs::new().with("trans_x", 1i64)) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("a mistyped attribute must not build"),
    };
    assert_eq!(err, "matmul: attribute `trans_x`: expected a bool, got 1");
}

#[test]
fn every_builtin_is_listed_with_its_attributes() {
    let r = spmd_ops::builtins();
    for name in [
        "matmul",
        "matmul_v2",
        "embedding",
        "lookup_table_v2",
        "softmax",
        "sum",
        "max",
    ] {
        assert!(r.contains(name), "{name} missing");
    }
    let info = r.get("embedding").unwrap();
    assert_eq!(info.attrs, ["padding_idx", "sparse"]);
    // The second form is backward's with `padding_idx` or `sparse`.
    assert_eq!(info.notations, ["...,jk->...k", "...,1k->...k"]);
}

#[test]
fn the_global_registry_takes_custom_ops() {
    #[spmd_core::spmd_rule(einsum = "ij->ji", name = "my_transpose")]
    struct MyTranspose {}
    spmd_core::register_global::<MyTranspose>().unwrap();
    assert!(spmd_core::global().contains("my_transpose"));
    assert!(spmd_core::register_global::<MyTranspose>().is_err());
}

/// Rules with `cache` (softmax, the reductions, split, ...) reuse a built
/// notation per (attributes, call shapes): alternating shapes, attributes and
/// directions through the same rule values must give the answer a fresh rule
/// gives, never a stale one.
#[test]
fn cached_notations_follow_shapes_attributes_and_direction() {
    let m = mesh(&[2, 4]);
    let softmax_last = build("softmax", Attrs::new().with("axis", -1_i64));
    let softmax_first = build("softmax", Attrs::new().with("axis", 0_i64));
    let x3 = attr(&[0, -1, 1]);
    let x2 = attr(&[0, 1]);
    for _ in 0..3 {
        // Rank 3, axis -1: the last dim is freed.
        let r = softmax_last
            .forward(&m, &[Spec::new(&[4, 8, 16], &x3)])
            .unwrap();
        assert_eq!(r.inputs[0], attr(&[0, -1, -1]));
        // Same attributes, rank 2: a different key.
        let r = softmax_last
            .forward(&m, &[Spec::new(&[4, 8], &x2)])
            .unwrap();
        assert_eq!(r.inputs[0], attr(&[0, -1]));
        // Another attribute value, same shape.
        let r = softmax_first
            .forward(&m, &[Spec::new(&[4, 8], &x2)])
            .unwrap();
        assert_eq!(r.inputs[0], attr(&[-1, 1]));
        // Backward with the forward's shapes: its own entry.
        let out = attr(&[1, 0]);
        let r = softmax_last
            .backward(&m, &[&[4, 8]], &[Spec::new(&[4, 8], &out)])
            .unwrap();
        assert_eq!(r.inputs[0], attr(&[1, -1]));
    }

    let sum = |axis: Vec<i64>| {
        build(
            "sum",
            Attrs::new().with("axis", axis).with("keep_dim", false),
        )
    };
    let (sum0, sum1, sum01) = (sum(vec![0]), sum(vec![1]), sum(vec![0, 1]));
    for _ in 0..3 {
        let r = sum0.forward(&m, &[Spec::new(&[4, 8], &x2)]).unwrap();
        assert_eq!(r.outputs[0].to_string(), "[1] partial{0: SUM}");
        let r = sum1.forward(&m, &[Spec::new(&[4, 8], &x2)]).unwrap();
        assert_eq!(r.outputs[0].to_string(), "[0] partial{1: SUM}");
        // A longer list with the last one's prefix... and back.
        let r = sum01.forward(&m, &[Spec::new(&[4, 8], &x2)]).unwrap();
        assert_eq!(r.outputs[0].to_string(), "[] partial{0: SUM, 1: SUM}");
        let r = sum0.forward(&m, &[Spec::new(&[4, 8], &x2)]).unwrap();
        assert_eq!(r.outputs[0].to_string(), "[1] partial{0: SUM}");
    }
    // An error is not cached: a bad axis fails every time, and a good call
    // of the same rule value afterwards still works.
    let bad = sum(vec![5]);
    for _ in 0..2 {
        assert!(bad.forward(&m, &[Spec::new(&[4, 8], &x2)]).is_err());
    }
    let r = bad
        .forward(
            &m,
            &[Spec::new(
                &[4, 8, 2, 2, 2, 2],
                &attr(&[0, 1, -1, -1, -1, -1]),
            )],
        )
        .unwrap();
    assert_eq!(r.outputs[0].to_string(), "[0, 1, -1, -1, -1]");
}

/// `flash_attention` with q, k, v of `shape` and mappings `q`, `k`, `v`, no
/// seed or mask: the requirements and outputs as Paddle-form strings.
fn flash_forward(
    mesh_shape: &[usize],
    shapes: [&[usize]; 3],
    maps: [&[i64]; 3],
) -> Result<(Vec<String>, Vec<String>), SpmdError> {
    let op = build("flash_attention", Attrs::new());
    let attrs: Vec<DistAttr> = maps.iter().map(|m| attr(m)).collect();
    let specs: Vec<Option<Spec<'_>>> = (0..3)
        .map(|i| Some(Spec::new(shapes[i], &attrs[i])))
        .chain([None, None])
        .collect();
    let r = op.forward_optional(&mesh(mesh_shape), &specs)?;
    let s = |v: &[DistAttr]| v.iter().map(ToString::to_string).collect();
    Ok((s(&r.inputs), s(&r.outputs)))
}

#[test]
fn flash_attention_frees_sequence_and_head_dims_before_merging() {
    const QKV: [&[usize]; 3] = [&[8, 16, 8, 32], &[8, 16, 8, 32], &[8, 16, 8, 32]];
    // q's sharded sequence does not keep mesh dim 0 from k's and v's heads
    // (Paddle replicates it first; docs/semantics.md 4's merge alone would let it
    // claim mesh dim 0 and leave the heads replicated).
    let (ins, outs) = flash_forward(
        &[4],
        QKV,
        [&[-1, 0, -1, -1], &[-1, -1, 0, -1], &[-1, -1, 0, -1]],
    )
    .unwrap();
    assert_eq!(ins[..3], ["[-1, -1, 0, -1]"; 3]);
    assert_eq!(ins[3..], ["[]", "[]"]); // absent seed and mask: Paddle's empty attr
    // out [b, s, h, e], softmax [b, h, s, t], softmax_lse [b, h, s]; the
    // seed pair is replicated and not partial over the heads it lacks.
    assert_eq!(
        outs,
        ["[-1, -1, 0, -1]", "[-1, 0, -1, -1]", "[-1, 0, -1]", "[-1]"]
    );

    // Likewise a sharded head dim: replicated, and mesh dim 1 goes to the
    // heads of k; the batch comes from q.
    let (ins, outs) = flash_forward(
        &[2, 2],
        QKV,
        [&[0, -1, -1, 1], &[-1, -1, 1, -1], &[-1, -1, -1, -1]],
    )
    .unwrap();
    assert_eq!(ins[..3], ["[0, -1, 1, -1]"; 3]);
    assert_eq!(
        outs,
        ["[0, -1, 1, -1]", "[0, 1, -1, -1]", "[0, 1, -1]", "[-1]"]
    );

    // Batch and heads are one axis each across q, k and v. Where v's batch
    // sharding clashes with q's and k's, v yields (it is resharded to
    // theirs): Paddle's answer, which reads k's mapping in v's place, and a
    // sound one, where a merge of v's own mapping would be an error.
    let (ins, outs) = flash_forward(
        &[2, 2],
        QKV,
        [&[0, -1, -1, -1], &[0, -1, -1, -1], &[1, -1, -1, -1]],
    )
    .unwrap();
    assert_eq!(ins[..3], ["[0, -1, -1, -1]"; 3]);
    assert_eq!(outs[0], "[0, -1, -1, -1]");
    // v never votes (Paddle's merge reads k's mapping in v's place): with q
    // and k replicated, v's batch sharding is gathered, not spread to them.
    let (ins, _) = flash_forward(
        &[2, 2],
        QKV,
        [&[-1, -1, -1, -1], &[-1, -1, -1, -1], &[1, -1, -1, -1]],
    )
    .unwrap();
    assert_eq!(ins[..3], ["[-1, -1, -1, -1]"; 3]);
}

#[test]
fn flash_attention_ties_grouped_kv_heads_to_the_query_heads() {
    // 8 query heads over 2 kv heads: a mesh dim of 2 splits both (each
    // device's query heads use exactly its kv head).
    let gqa: [&[usize]; 3] = [&[4, 16, 8, 32], &[4, 16, 2, 32], &[4, 16, 2, 32]];
    let rep: &[i64] = &[-1, -1, -1, -1];
    let (ins, _) = flash_forward(&[2], gqa, [&[-1, -1, 0, -1], rep, rep]).unwrap();
    assert_eq!(ins[..3], ["[-1, -1, 0, -1]"; 3]);
    // A mesh dim of 4 cannot split 2 kv heads along with the query heads:
    // the heads stay replicated, and the batch (k's) may take the mesh dim.
    let (ins, outs) = flash_forward(&[4], gqa, [&[-1, -1, 0, -1], &[0, -1, -1, -1], rep]).unwrap();
    assert_eq!(ins[..3], ["[0, -1, -1, -1]"; 3]);
    assert_eq!(outs[2], "[0, -1, -1]");
    // 6 query heads cannot be grouped over 4 kv heads: a typed error.
    let bad: [&[usize]; 3] = [&[4, 16, 6, 32], &[4, 16, 4, 32], &[4, 16, 4, 32]];
    let err = flash_forward(&[2], bad, [rep, rep, rep]).unwrap_err();
    assert!(matches!(err, SpmdError::Rejected { .. }), "{err}");
}

#[test]
fn flash_attention_mask_follows_batch_and_heads_unless_broadcast() {
    let op = build("flash_attention", Attrs::new());
    let q = attr(&[0, -1, 1, -1]);
    let rep = attr(&[-1, -1, -1, -1]);
    let shape: &[usize] = &[4, 16, 4, 8];
    for (mask_shape, want) in [
        (&[4, 4, 16, 16][..], "[0, 1, -1, -1]"),
        // A heads dim of 1 is broadcast over the heads: never split.
        (&[4, 1, 16, 16][..], "[0, -1, -1, -1]"),
    ] {
        let mask = attr(&[-1, -1, 0, 1]); // sequence dims: never sharded
        let r = op
            .forward_optional(
                &mesh(&[2, 2]),
                &[
                    Some(Spec::new(shape, &q)),
                    Some(Spec::new(shape, &rep)),
                    Some(Spec::new(shape, &rep)),
                    None,
                    Some(Spec::new(mask_shape, &mask)),
                ],
            )
            .unwrap();
        assert_eq!(r.inputs[4].to_string(), want);
        assert_eq!(r.inputs[0].to_string(), "[0, -1, 1, -1]");
    }
}

#[test]
fn flash_attention_backward_merges_out_and_softmax_lse_only() {
    let op = build("flash_attention", Attrs::new());
    let shape: &[usize] = &[8, 8, 4, 4];
    // out shards only its sequence (freed), softmax_lse the batch on mesh
    // dim 0; the given softmax's other claims take no part, and it comes
    // back as the required inputs produce it. out's partial status goes.
    let out = attr(&[-1, 1, -1, -1]).with_partial(spmd_core::Partial::over(
        spmd_core::MeshSet(0b1),
        ReduceType::Sum,
    ));
    let (softmax, lse, seed) = (attr(&[1, 0, -1, -1]), attr(&[0, -1, -1]), attr(&[-1]));
    let r = op
        .backward_optional(
            &mesh(&[2, 4]),
            &[Some(shape), Some(shape), Some(shape), None, None],
            &[
                Some(Spec::new(shape, &out)),
                Some(Spec::new(&[8, 4, 8, 8], &softmax)),
                Some(Spec::new(&[8, 4, 8], &lse)),
                Some(Spec::new(&[2], &seed)),
            ],
        )
        .unwrap();
    let s: Vec<String> = r.inputs.iter().map(ToString::to_string).collect();
    assert_eq!(s[..3], ["[0, -1, -1, -1]"; 3]);
    let s: Vec<String> = r.outputs.iter().map(ToString::to_string).collect();
    assert_eq!(
        s,
        ["[0, -1, -1, -1]", "[0, -1, -1, -1]", "[0, -1, -1]", "[-1]"]
    );
}

#[test]
fn flash_attention_grad_lets_out_place_the_heads() {
    // Paddle suite's FlashAttGradInferSpmd case: q's sequence on mesh dim 1
    // is freed before the merge, so out's heads take mesh dim 1.
    let op = build("flash_attention", Attrs::new());
    let shape: &[usize] = &[2, 256, 2, 128];
    let (qkv, out, lse) = (
        attr(&[0, 1, -1, -1]),
        attr(&[0, -1, 1, -1]),
        attr(&[0, 1, -1]),
    );
    let (dy, none) = (attr(&[-1, -1, -1, -1]), attr(&[]));
    let r = op
        .grad_optional(
            &mesh(&[2, 2]),
            &[
                Some(Spec::new(shape, &qkv)),
                Some(Spec::new(shape, &qkv)),
                Some(Spec::new(shape, &qkv)),
                Some(Spec::new(shape, &out)),
                Some(Spec::new(&[2, 2, 256], &lse)),
                // seed_offset and attn_mask: 0-d placeholders, as the suite gives them.
                Some(Spec::new(&[], &none)),
                Some(Spec::new(&[], &none)),
            ],
            &[Some(Spec::new(shape, &dy))],
        )
        .unwrap();
    let req: Vec<String> = r.inputs.iter().map(ToString::to_string).collect();
    assert_eq!(req[..4], ["[0, -1, 1, -1]"; 4]);
    assert_eq!(req[4], "[0, 1, -1]");
    assert_eq!(req[7], "[0, -1, 1, -1]"); // out_grad
    let grads: Vec<String> = r.outputs.iter().take(3).map(ToString::to_string).collect();
    assert_eq!(grads, ["[0, -1, 1, -1]"; 3]);
    // q, k, v and the mask have grads; the integer seed has none.
    assert_eq!(r.outputs.len(), 4);
}

#[test]
fn a_template_rebinds_when_the_attributes_or_the_ranks_change() {
    // A template's last binding is reused for a call like the last one; a
    // call that differs in an attribute or a rank must not see it.
    let m = mesh(&[2, 2]);
    let x2 = attr(&[0, 1]);
    let x3 = attr(&[0, 1, -1]);
    let on = |axis: i64, shape: &[usize], x: &DistAttr| {
        let r = build("softmax", Attrs::new().with("axis", axis))
            .forward(&m, &[Spec::new(shape, x)])
            .unwrap();
        r.inputs[0].to_string()
    };
    for _ in 0..2 {
        assert_eq!(on(-1, &[4, 8], &x2), "[0, -1]");
        assert_eq!(on(-1, &[4, 8], &x2), "[0, -1]");
        assert_eq!(on(0, &[4, 8], &x2), "[-1, 1]");
        assert_eq!(on(-1, &[4, 8, 2], &x3), "[0, 1, -1]");
        assert_eq!(on(1, &[4, 8, 2], &x3), "[0, -1, -1]");
    }
    // The same list in another order is another permutation.
    let t = |perm: Vec<i64>| {
        build("transpose", Attrs::new().with("perm", perm))
            .forward(&m, &[Spec::new(&[4, 8, 2], &x3)])
            .unwrap()
            .outputs[0]
            .to_string()
    };
    assert_eq!(t(vec![2, 0, 1]), "[-1, 0, 1]");
    assert_eq!(t(vec![1, 0, 2]), "[1, 0, -1]");
    assert_eq!(t(vec![2, 0, 1]), "[-1, 0, 1]");
}

/// A reduce type an attribute sets is read per call, not kept with what a
/// call compiled: `reduce_base` calls with the same shapes share one
/// compiled program whatever their `reduce_type`, and each must answer as
/// a first call of its own type does (fresh thread: nothing kept). Max
/// must leave every device a nonempty block and Avg must divide, where Sum
/// keeps the uneven sharding.
#[test]
fn a_reduce_type_read_per_call_is_not_kept_with_the_compiled_call() {
    let m = mesh(&[4]);
    // Axis 1 has 6 elements: 4 shards are uneven (Avg drops them) but
    // none empty; axis 1 of [8, 3]: 4 shards leave one empty (Max drops).
    let cases: &[(i64, &[usize])] = &[(0, &[8, 6]), (4, &[8, 6]), (1, &[8, 3]), (4, &[8, 3])];
    let x = attr(&[-1, 0]);
    let answer = |reduce_type: i64, shape: &[usize]| {
        let rule = build(
            "reduce_base",
            Attrs::new()
                .with("axis", vec![1_i64])
                .with("keep_dim", false)
                .with("reduce_type", reduce_type),
        );
        let r = rule.forward(&m, &[Spec::new(shape, &x)]).unwrap();
        (r.inputs[0].to_string(), r.outputs[0].to_string())
    };
    for &(reduce_type, shape) in cases {
        let fresh = std::thread::scope(|s| s.spawn(|| answer(reduce_type, shape)).join().unwrap());
        // A Sum call of the same shapes compiles first on this thread.
        answer(0, shape);
        assert_eq!(
            answer(reduce_type, shape),
            fresh,
            "reduce_type {reduce_type}"
        );
    }
    // The types answer differently here, so a kept Sum program would be
    // caught: Avg drops the uneven split, Max the one that empties a block.
    let fresh = |t: i64, shape: &[usize]| {
        std::thread::scope(|s| s.spawn(|| answer(t, shape)).join().unwrap())
    };
    assert_eq!(fresh(0, &[8, 6]).0, "[-1, 0]");
    assert_eq!(fresh(4, &[8, 6]).0, "[-1, -1]");
    assert_eq!(fresh(1, &[8, 3]).0, "[-1, -1]");
}

/// An `Einsum` given another policy (or reduce type) compiles its calls
/// anew: a clone with another policy must not reuse what the first
/// compiled for the same shapes.
#[test]
fn an_einsum_with_another_policy_does_not_reuse_the_first_ones_calls() {
    use spmd_core::{Conflicts, Einsum, Policy};
    let m = mesh(&[2, 4]);
    let (x, w) = (attr(&[0, 1]), attr(&[0, 1]));
    let first_wins = Einsum::new("mk,kn->mn").unwrap();
    let by_role = first_wins
        .clone()
        .with_policy(Policy::default().with_conflicts(Conflicts::RolePriority));
    let answer = |e: &Einsum| {
        let r = e
            .forward(&m, &[Spec::new(&[64, 32], &x), Spec::new(&[32, 48], &w)])
            .unwrap();
        r.outputs[0].to_string()
    };
    let fresh = |e: &Einsum| std::thread::scope(|s| s.spawn(|| answer(e)).join().unwrap());
    // First wins: k keeps mesh dim 1 (from x) and n loses it; by role, m
    // and n take the mesh dims first and k none.
    assert_eq!(fresh(&first_wins), "[0, -1] partial{1: SUM}");
    assert_eq!(fresh(&by_role), "[0, 1]");
    assert_eq!(answer(&first_wins), "[0, -1] partial{1: SUM}");
    assert_eq!(answer(&by_role), "[0, 1]");
}
