//! ATen's operators under ATen's names and argument names (`spmd-ops`'s
//! `aten` module and the `register_aten` list): each test pins a layout an
//! ATen rule could get wrong, or a convention it could misread. The same
//! rules run whole exported models in `spmd-graph/tests/hf_graphs.rs`.

use spmd_core::SpmdRuleExt;
use spmd_core::{Attrs, DistAttr, Mesh, RuleResult, Spec, SpmdError};

fn attr(m: &[i64]) -> DistAttr {
    DistAttr::from_paddle(m).unwrap()
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

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn shared_rules_read_atens_argument_names_and_not_paddles() {
    // `aten.permute` is `transpose` reading `dims` as `perm`.
    let r = forward(
        "aten.permute",
        Attrs::new().with("dims", vec![0_i64, 2, 1, 3]),
        &[4],
        &[(&[2, 16, 8, 8], &[-1, -1, 0, -1])],
    )
    .unwrap();
    assert_eq!(show(&r).1, strings(&["[-1, 0, -1, -1]"]));
    // Paddle's name for the same attribute is not ATen's.
    let Err(e) =
        spmd_ops::builtins().build("aten.permute", &Attrs::new().with("perm", vec![1_i64, 0]))
    else {
        panic!("aten.permute took Paddle's `perm`");
    };
    assert!(e.to_string().contains("`perm`"), "{e}");
    assert!(e.to_string().contains("dims"), "{e}");
    // `aten.view` reads `size` (heads split off the hidden dim).
    let r = forward(
        "aten.view",
        Attrs::new().with("size", vec![2_i64, 16, -1, 8]),
        &[4],
        &[(&[2, 16, 64], &[-1, -1, 0])],
    )
    .unwrap();
    assert_eq!(show(&r).1, strings(&["[-1, -1, 0, -1]"]));
    // `aten._softmax` reads `dim` and ignores `half_to_float`: the softmax
    // dim is never sharded.
    let r = forward(
        "aten._softmax",
        Attrs::new()
            .with("dim", -1_i64)
            .with("half_to_float", false),
        &[4],
        &[(&[2, 8, 16], &[-1, -1, 0])],
    )
    .unwrap();
    assert_eq!(show(&r).0, strings(&["[-1, -1, -1]"]));
}

#[test]
fn pointwise_ops_with_a_number_are_unary_and_with_a_tensor_broadcast() {
    let r = forward(
        "aten.add.Scalar",
        Attrs::new().with("other", 1.0).with("alpha", 1_i64),
        &[2],
        &[(&[4, 6], &[0, -1])],
    )
    .unwrap();
    assert_eq!(show(&r).1, strings(&["[0, -1]"]));
    let r = forward(
        "aten.add.Tensor",
        Attrs::new().with("alpha", 1_i64),
        &[2],
        &[(&[4, 6], &[-1, 0]), (&[6], &[-1])],
    )
    .unwrap();
    assert_eq!(
        show(&r),
        (strings(&["[-1, 0]", "[0]"]), strings(&["[-1, 0]"]))
    );
    // One tensor given to a two-tensor name is an arity error.
    let e = forward("aten.mul.Tensor", Attrs::new(), &[2], &[(&[4], &[-1])]).unwrap_err();
    assert!(e.to_string().contains("1 input(s) given"), "{e}");
}

#[test]
fn addmm_requires_its_bias_partial_where_the_product_is() {
    // Row-parallel: the contraction `k` sharded, the product partial; the
    // bias must be partial too, else the all-reduce adds it four times.
    let r = forward(
        "aten.addmm",
        Attrs::new(),
        &[4],
        &[(&[16], &[-1]), (&[32, 64], &[-1, 0]), (&[64, 16], &[0, -1])],
    )
    .unwrap();
    assert_eq!(
        show(&r),
        (
            strings(&["[-1] partial{0: SUM}", "[-1, 0]", "[0, -1]"]),
            strings(&["[-1, -1] partial{0: SUM}"])
        )
    );
    // A 2-d bias takes the other form.
    let r = forward(
        "aten.addmm",
        Attrs::new(),
        &[4],
        &[
            (&[32, 16], &[0, -1]),
            (&[32, 64], &[0, -1]),
            (&[64, 16], &[-1, -1]),
        ],
    )
    .unwrap();
    assert_eq!(show(&r).1, strings(&["[0, -1]"]));
}

#[test]
fn embedding_takes_the_table_first() {
    let r = forward(
        "aten.embedding",
        Attrs::new(),
        &[4],
        &[(&[128, 64], &[0, -1]), (&[2, 16], &[-1, -1])],
    )
    .unwrap();
    // Rows of the table sharded: each device adds the rows it holds.
    assert_eq!(show(&r).1, strings(&["[-1, -1, -1] partial{0: SUM}"]));
}

#[test]
fn native_layer_norm_keeps_the_normalized_dims_as_ones_in_its_statistics() {
    let r = forward(
        "aten.native_layer_norm",
        Attrs::new()
            .with("normalized_shape", vec![64_i64])
            .with("eps", 1e-5),
        &[2, 2],
        &[(&[2, 16, 64], &[0, 1, -1]), (&[64], &[-1]), (&[64], &[-1])],
    )
    .unwrap();
    assert_eq!(
        show(&r).1,
        strings(&["[0, 1, -1]", "[0, 1, -1]", "[0, 1, -1]"])
    );
    // The normalized dim is never sharded.
    let r = forward(
        "aten.native_layer_norm",
        Attrs::new().with("normalized_shape", vec![64_i64]),
        &[4],
        &[(&[2, 16, 64], &[-1, -1, 0]), (&[64], &[0]), (&[64], &[-1])],
    )
    .unwrap();
    assert_eq!(show(&r).0[0], "[-1, -1, -1]");
}

#[test]
fn mean_dim_averages_a_sharded_dim() {
    let r = forward(
        "aten.mean.dim",
        Attrs::new().with("dim", vec![-1_i64]).with("keepdim", true),
        &[4],
        &[(&[2, 16, 64], &[-1, -1, 0])],
    )
    .unwrap();
    assert_eq!(show(&r).1, strings(&["[-1, -1, -1] partial{0: AVG}"]));
    // With no `dim`, every dim goes.
    let r = forward(
        "aten.mean.dim",
        Attrs::new(),
        &[4],
        &[(&[4, 16, 64], &[0, -1, -1])],
    )
    .unwrap();
    assert_eq!(show(&r).1, strings(&["[] partial{0: AVG}"]));
    // Blocks of unequal size do not average: 2 rows over 4 devices are
    // gathered first.
    let r = forward(
        "aten.mean.dim",
        Attrs::new(),
        &[4],
        &[(&[2, 16, 64], &[0, -1, -1])],
    )
    .unwrap();
    assert_eq!(show(&r), (strings(&["[-1, -1, -1]"]), strings(&["[]"])));
}

#[test]
fn expand_broadcasts_new_and_size_one_dims_unsharded() {
    let r = forward(
        "aten.expand",
        Attrs::new().with("size", vec![4_i64, 2, 16, 8]),
        &[2],
        &[(&[2, 1, 8], &[0, -1, -1])],
    )
    .unwrap();
    assert_eq!(show(&r).1, strings(&["[-1, 0, -1, -1]"]));
    let e = forward(
        "aten.expand",
        Attrs::new().with("size", vec![8_i64]),
        &[2],
        &[(&[2, 8], &[-1, -1])],
    )
    .unwrap_err();
    assert!(e.to_string().contains("cannot drop dims"), "{e}");
}

#[test]
fn slice_never_shards_the_sliced_dim() {
    let r = forward(
        "aten.slice.Tensor",
        Attrs::new()
            .with("dim", 3_i64)
            .with("start", 0_i64)
            .with("end", 4_i64),
        &[4],
        &[(&[2, 8, 16, 8], &[-1, 0, -1, -1])],
    )
    .unwrap();
    assert_eq!(show(&r).1, strings(&["[-1, 0, -1, -1]"]));
    let r = forward(
        "aten.slice.Tensor",
        Attrs::new().with("dim", 1_i64).with("start", 2_i64),
        &[4],
        &[(&[2, 8], &[-1, 0])],
    )
    .unwrap();
    assert_eq!(show(&r).0, strings(&["[-1, -1]"]));
}

#[test]
fn attention_splits_batch_and_heads_and_groups_query_heads() {
    let sdpa = |q: T<'_>, kv: T<'_>| {
        forward(
            "aten.scaled_dot_product_attention",
            Attrs::new().with("is_causal", true),
            &[4],
            &[q, kv, kv, (&[2, 1, 16, 16], &[-1, -1, -1, -1])],
        )
        .unwrap()
    };
    // Heads sharded: attention per head, no communication.
    let r = sdpa(
        (&[2, 8, 16, 8], &[-1, 0, -1, -1]),
        (&[2, 8, 16, 8], &[-1, 0, -1, -1]),
    );
    assert_eq!(show(&r).1, strings(&["[-1, 0, -1, -1]"]));
    // A sharded sequence is gathered: every query row reads every key.
    let r = sdpa(
        (&[2, 8, 16, 8], &[-1, -1, 0, -1]),
        (&[2, 8, 16, 8], &[-1, -1, -1, -1]),
    );
    assert_eq!(show(&r).0[0], "[-1, -1, -1, -1]");
    // Grouped-query: 8 query heads over 4 key/value heads; the key/value
    // heads' sharding splits the query heads by groups.
    let r = sdpa(
        (&[2, 8, 16, 8], &[-1, -1, -1, -1]),
        (&[2, 4, 16, 8], &[-1, 0, -1, -1]),
    );
    assert_eq!(show(&r).1, strings(&["[-1, 0, -1, -1]"]));
}

/// A rule registered under a second name answers and errs under it: its
/// `name()`, and an inference error's op, are the name the caller used
/// (`aten.mm` is the matmul rule, `aten.view` reshape's, `relu` the
/// elementwise rule), for every such registration.
#[test]
fn rules_under_second_names_err_under_those_names() {
    let registry = spmd_ops::builtins();
    let mm = registry.build("aten.mm", &Attrs::new()).unwrap();
    assert_eq!(mm.name(), "aten.mm");
    // The contraction extents disagree: 8 against 6.
    let err = forward(
        "aten.mm",
        Attrs::new(),
        &[2],
        &[(&[4, 8], &[-1, -1]), (&[6, 4], &[-1, -1])],
    )
    .unwrap_err();
    assert!(err.to_string().contains("aten.mm"), "{err}");
    assert!(!err.to_string().contains("`matmul`"), "{err}");
    // A mapping longer than its tensor, through an elementwise alias.
    let err = forward("relu", Attrs::new(), &[2], &[(&[4, 8], &[0, -1, -1])]).unwrap_err();
    assert!(err.to_string().contains("relu"), "{err}");
    // Every registration answers to its own name.
    let mut built = 0;
    for info in registry.iter() {
        let attrs = Attrs::new();
        if let Ok(rule) = registry.build(info.name, &attrs) {
            assert_eq!(rule.name(), info.name);
            built += 1;
        }
    }
    assert!(built > 100, "{built} rules built without attributes");
}
