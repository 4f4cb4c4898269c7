//! Grad rules derived from the notation (docs/semantics.md §4 "Grad"), worked by hand.

use spmd_core::SpmdRuleExt;
use spmd_core::{Attrs, DistAttr, Einsum, Mesh, ReduceType, Spec, SpmdError, Tensor, grad_mixed};

fn attr(m: &[i64]) -> DistAttr {
    DistAttr::from_paddle(m).unwrap()
}

fn mesh(shape: &[usize]) -> Mesh {
    Mesh::new(shape).unwrap()
}

#[test]
fn matmul_grads_are_partial_over_what_the_other_side_contracts() {
    // x [m, k] = [64, 32] with m on mesh dim 0; y [k, n] = [32, 48] with n on
    // mesh dim 1; dy [m, n] laid out like the forward output.
    let mm = Einsum::new("mk,kn->mn").unwrap();
    let (x, y, dy) = (attr(&[0, -1]), attr(&[-1, 1]), attr(&[0, 1]));
    let r = mm
        .grad(
            &mesh(&[2, 4]),
            &[Spec::new(&[64, 32], &x), Spec::new(&[32, 48], &y)],
            &[Spec::new(&[64, 48], &dy)],
        )
        .unwrap();
    assert_eq!(r.inputs.as_slice(), &[x.clone(), y.clone(), dy]);
    // dx = dy @ y^T sums over n (mesh dim 1): partial over 1.
    assert_eq!(r.outputs[0].dims_mapping, x.dims_mapping);
    assert_eq!(r.outputs[0].partial.dims().0, 0b10);
    // dy_w = x^T @ dy sums over m (mesh dim 0): partial over 0.
    assert_eq!(r.outputs[1].dims_mapping, y.dims_mapping);
    assert_eq!(r.outputs[1].partial.reduce_type(0), Some(ReduceType::Sum));
    assert_eq!(r.outputs[1].partial.dims().0, 0b01);
}

#[test]
fn a_broadcast_bias_grad_is_partial_over_the_batch() {
    // out = x + bias, bias broadcast over the batch dim sharded on mesh dim 0.
    let add = Einsum::new("...,...->...").unwrap();
    let (x, b, dy) = (attr(&[0, 1]), attr(&[-1]), attr(&[0, 1]));
    let r = add
        .grad(
            &mesh(&[2, 4]),
            &[Spec::new(&[16, 8], &x), Spec::new(&[8], &b)],
            &[Spec::new(&[16, 8], &dy)],
        )
        .unwrap();
    // The bias follows the merged layout of its dim; its grad sums over the batch.
    assert_eq!(r.inputs[1], attr(&[1]));
    assert_eq!(r.outputs[0], attr(&[0, 1]));
    assert_eq!(r.outputs[1].to_string(), "[1] partial{0: SUM}");
}

#[test]
fn a_size_one_dim_broadcast_into_the_output_makes_its_grad_partial() {
    // x [8, 1] against y [8, 6]: x's second dim is broadcast over j, which
    // dy shards on mesh dim 1; x's grad sums over j and is replicated there.
    let mul = Einsum::new("ij,ij->ij").unwrap();
    let (x, y, dy) = (attr(&[0, -1]), attr(&[0, 1]), attr(&[0, 1]));
    let r = mul
        .grad(
            &mesh(&[2, 3]),
            &[Spec::new(&[8, 1], &x), Spec::new(&[8, 6], &y)],
            &[Spec::new(&[8, 6], &dy)],
        )
        .unwrap();
    assert_eq!(r.outputs[0].to_string(), "[0, -1] partial{1: SUM}");
    assert_eq!(r.outputs[1].to_string(), "[0, 1]");
}

#[test]
fn embedding_grad_keeps_the_table_split_and_reshards_the_output_grad() {
    // Paddle suite: x [4,5] [-1,-1], w [10,3] [-1,1], dy [4,5,3] [-1,1,-1].
    // The table is read for its shape alone, so it claims first: its
    // hidden axis keeps mesh dim 1, the output grad is required resharded
    // to it, [-1,-1,1] (the ids' axis b loses mesh dim 1), and the table's
    // grad comes out in the table's layout, not partial. Paddle instead
    // follows dy: x [-1,1], and a table grad [-1,-1] partial over mesh
    // dim 1, which the optimizer must reduce-scatter back into [-1,1]
    // (tests/conformance/DEVIATIONS.md).
    let emb = spmd_ops::builtins()
        .build("embedding", &Attrs::new())
        .unwrap();
    let (x, w, dy) = (attr(&[-1, -1]), attr(&[-1, 1]), attr(&[-1, 1, -1]));
    let r = emb
        .grad(
            &mesh(&[2, 3]),
            &[Spec::new(&[4, 5], &x), Spec::new(&[10, 3], &w)],
            &[Spec::new(&[4, 5, 3], &dy)],
        )
        .unwrap();
    assert_eq!(r.inputs.as_slice(), &[x, w.clone(), attr(&[-1, -1, 1])]);
    assert_eq!(r.outputs.len(), 1, "the ids have no grad");
    assert_eq!(r.outputs[0], w);
}

#[test]
fn mixed_grad_promotes_dense_tensors_and_skips_unneeded_grads() {
    let m = mesh(&[2, 4]);
    let mm = Einsum::new("mk,kn->mn").unwrap();
    let (x, dy) = (attr(&[0, -1]), attr(&[0, -1]));
    let ins = [
        Tensor::Dist {
            mesh: &m,
            shape: &[64, 32],
            attr: &x,
        },
        // A dense weight: replicated on the mesh of the dist tensors.
        Tensor::Dense { shape: &[32, 48] },
    ];
    let outs = [Tensor::Dist {
        mesh: &m,
        shape: &[64, 48],
        attr: &dy,
    }];
    let g = grad_mixed(&mm, &ins, &outs, &[false, true])
        .unwrap()
        .unwrap();
    assert_eq!(g.requirements[1], attr(&[-1, -1]));
    assert_eq!(g.input_grads[0], None, "x is stop-gradient");
    // The weight grad sums over m (mesh dim 0): the data-parallel all-reduce.
    let w = g.input_grads[1].as_ref().unwrap();
    assert_eq!(w.to_string(), "[-1, -1] partial{0: SUM}");

    let dense = [
        Tensor::Dense { shape: &[64, 32] },
        Tensor::Dense { shape: &[32, 48] },
    ];
    let dense_dy = [Tensor::Dense { shape: &[64, 48] }];
    assert_eq!(
        grad_mixed(&mm, &dense, &dense_dy, &[true, true]).unwrap(),
        None
    );
}

#[test]
fn grad_arity_and_rank_errors_name_the_tensor() {
    let mm = Einsum::new("mk,kn->mn").unwrap();
    let (x, dy) = (attr(&[0, -1]), attr(&[0]));
    let err = mm
        .grad(&mesh(&[2]), &[Spec::new(&[4, 4], &x)], &[])
        .unwrap_err();
    assert!(matches!(err, SpmdError::Arity { .. }), "{err}");
    let err = mm
        .grad(
            &mesh(&[2]),
            &[Spec::new(&[4, 4], &x), Spec::new(&[4, 4], &x)],
            &[Spec::new(&[4], &dy)],
        )
        .unwrap_err();
    assert!(err.to_string().contains("output 0"), "{err}");
}

// ------------------------------------------------------------ grad signatures

use spmd_core::{GradSignature, GradTensor, spmd_rule};

/// `out = x[..., top k along a]`, `indices` the same shape: Paddle's grad op
/// takes (x, indices, out_grad).
#[spmd_rule(
    einsum = "bac->b1c,b1c",
    merge(never_sharded = "a"),
    inputs(x),
    outputs(out, indices),
    grad(inputs(x, indices), of(out))
)]
struct TopLike {}

#[test]
fn a_grad_signature_orders_the_requirements_and_merges_output_values() {
    let mesh = mesh(&[2, 2]);
    // x leaves c replicated; the indices (a forward output) shard c on mesh
    // dim 1, which the merge takes: x's grad follows it.
    let (x, idx, dy) = (attr(&[0, -1, -1]), attr(&[-1, -1, 1]), attr(&[0, -1, -1]));
    let r = TopLike {}
        .grad(
            &mesh,
            &[Spec::new(&[4, 8, 6], &x), Spec::new(&[4, 2, 6], &idx)],
            &[Spec::new(&[4, 2, 6], &dy)],
        )
        .unwrap();
    let req: Vec<String> = r.inputs.iter().map(ToString::to_string).collect();
    assert_eq!(req, ["[0, -1, 1]", "[0, -1, 1]", "[0, -1, 1]"]);
    let grads: Vec<String> = r.outputs.iter().map(ToString::to_string).collect();
    assert_eq!(grads, ["[0, -1, 1]"]);
}

#[test]
fn the_derived_form_stays_accepted() {
    let mesh = mesh(&[2]);
    let (x, dy) = (attr(&[0, -1, -1]), attr(&[0, -1, -1]));
    // (x; out_grad, indices_grad): counts that do not fit the signature.
    let r = TopLike {}
        .grad(
            &mesh,
            &[Spec::new(&[4, 8, 6], &x)],
            &[Spec::new(&[4, 2, 6], &dy), Spec::new(&[4, 2, 6], &dy)],
        )
        .unwrap();
    assert_eq!(r.inputs.len(), 3);
    assert_eq!(r.outputs[0].to_string(), "[0, -1, -1]");
    // Neither form: an arity error.
    let err = TopLike {}
        .grad(&mesh, &[], &[Spec::new(&[4, 2, 6], &dy)])
        .unwrap_err();
    assert!(matches!(err, SpmdError::Arity { .. }), "{err}");
}

#[test]
fn an_input_the_grad_op_does_not_take_gets_its_rank_from_its_term() {
    // out = sum over k of x[..., k]: the grad op takes only out_grad; x's
    // grad has the `...` dims of out_grad plus k, which nothing shards.
    let e = Einsum::new("...k->...").unwrap();
    let rule = e.rule().with_grad_signature(GradSignature::new(&[], &[0]));
    let dy = attr(&[1, 0]);
    let r = rule
        .grad(&mesh(&[2, 2]), &[], &[Spec::new(&[4, 6], &dy)])
        .unwrap();
    assert_eq!(r.inputs[0].to_string(), "[1, 0]");
    assert_eq!(r.outputs[0].to_string(), "[1, 0, -1]");
    let _ = GradTensor::Input(0);
}

#[test]
fn builtin_grad_ops_take_paddles_signatures() {
    let registry = spmd_ops::builtins();
    // transpose's grad op takes only out_grad: x_grad is it transposed back.
    let t = registry
        .build("transpose", &Attrs::new().with("perm", vec![1i64, 2, 0]))
        .unwrap();
    let dy = attr(&[-1, 1, 0]);
    let r = t
        .grad(&mesh(&[2, 2]), &[], &[Spec::new(&[8, 10, 6], &dy)])
        .unwrap();
    assert_eq!(r.outputs[0].to_string(), "[0, -1, 1]");
    // stack's: out_grad's axis dim counts the inputs.
    let s = registry
        .build("stack", &Attrs::new().with("axis", 1i64))
        .unwrap();
    let dy = attr(&[0, -1, 1]);
    let r = s
        .grad(&mesh(&[2, 2]), &[], &[Spec::new(&[4, 3, 8], &dy)])
        .unwrap();
    let grads: Vec<String> = r.outputs.iter().map(ToString::to_string).collect();
    assert_eq!(grads, ["[0, 1]", "[0, 1]", "[0, 1]"]);
}

/// Per-tensor masks have 64 bits: a 65th input must not shift past them.
#[test]
fn more_than_64_operands_do_not_panic() {
    let text = format!("{}->", vec!["a"; 65].join(","));
    let e = Einsum::new(&text).unwrap();
    let x = attr(&[0]);
    let specs: Vec<Spec<'_>> = (0..65).map(|_| Spec::new(&[4], &x)).collect();
    let dy = attr(&[]);
    let r = e.grad(&mesh(&[2]), &specs, &[Spec::new(&[], &dy)]).unwrap();
    assert_eq!(r.outputs.len(), 65);
    assert_eq!(r.outputs[64].to_string(), "[0]");
}

/// The grad layout rule (`docs/semantics.md`, "Grad"): an input is required
/// laid out as its grad, even where the grad reads it only for its shape,
/// since a grad op gives each input grad its input's local block shape.
/// Ops with the default grad signature (forward inputs, then one grad per
/// output; one grad per input with a gradient, in order), over random
/// layouts of their inputs and output grads.
#[test]
fn every_input_is_required_laid_out_as_its_grad() {
    let registry = spmd_ops::builtins();
    // (op, attrs, input shapes, output grad shape)
    type GradCase = (&'static str, Attrs, Vec<Vec<usize>>, Vec<usize>);
    let cases: Vec<GradCase> = vec![
        (
            "sum",
            Attrs::new().with("axis", vec![1i64]),
            vec![vec![8, 6, 4]],
            vec![8, 4],
        ),
        ("mean_all", Attrs::new(), vec![vec![8, 6]], vec![]),
        (
            "embedding",
            Attrs::new(),
            vec![vec![4, 6], vec![12, 8]],
            vec![4, 6, 8],
        ),
        (
            "cumsum",
            Attrs::new().with("axis", 1i64),
            vec![vec![8, 6, 4]],
            vec![8, 6, 4],
        ),
        (
            "gather",
            Attrs::new().with("axis", 0i64),
            vec![vec![8, 6, 4], vec![4]],
            vec![4, 6, 4],
        ),
        (
            "squeeze",
            Attrs::new().with("axis", vec![0i64]),
            vec![vec![1, 6, 4]],
            vec![6, 4],
        ),
        (
            "matmul",
            Attrs::new(),
            vec![vec![8, 6], vec![6, 4]],
            vec![8, 4],
        ),
        ("softmax", Attrs::new(), vec![vec![8, 6]], vec![8, 6]),
    ];
    let m = mesh(&[2, 2]);
    let layouts: [&[i64]; 4] = [&[0, 1], &[1, 0], &[0, -1], &[-1, 1]];
    let mut checked = 0;
    for (op, attrs, shapes, dy_shape) in &cases {
        let rule = registry.build(op, attrs).unwrap();
        let info = registry.get(op).unwrap();
        for (k, l) in layouts.iter().enumerate() {
            let lay = |rank: usize, shift: usize| {
                let m: Vec<i64> = (0..rank).map(|d| l[(d + shift) % 2]).collect();
                let mut used = Vec::new();
                let m: Vec<i64> = m
                    .into_iter()
                    .map(|x| {
                        if x >= 0 && !used.contains(&x) {
                            used.push(x);
                            x
                        } else {
                            -1
                        }
                    })
                    .collect();
                attr(&m)
            };
            let attrs: Vec<DistAttr> = shapes
                .iter()
                .enumerate()
                .map(|(i, s)| lay(s.len(), i + k))
                .collect();
            let dy = lay(dy_shape.len(), k + 1);
            let ins: Vec<Spec<'_>> = shapes
                .iter()
                .zip(&attrs)
                .map(|(s, a)| Spec::new(s, a))
                .collect();
            // A strict rule rejects layouts that conflict: nothing to check.
            let Ok(r) = rule.grad(&m, &ins, &[Spec::new(dy_shape, &dy)]) else {
                continue;
            };
            let with_grad: Vec<usize> = (0..shapes.len())
                .filter(|&i| !info.no_grad.contains(i))
                .collect();
            assert_eq!(r.outputs.len(), with_grad.len(), "{op}");
            for (g, &i) in with_grad.iter().enumerate() {
                assert_eq!(
                    r.inputs[i].dims_mapping, r.outputs[g].dims_mapping,
                    "{op}: input {i} required {} but its grad is {}",
                    r.inputs[i], r.outputs[g]
                );
                checked += 1;
            }
        }
    }
    assert!(checked >= 20, "only {checked} grads checked");
}

#[test]
fn a_mean_grad_never_shards_a_reduced_axis() {
    // reduce_base with reduce_type 4 (mean) over axis 1 of x [4, 6] with the
    // reduced axis split: the grad divides by the extent 6, which a device
    // holding 3 columns would get wrong; a sum's grad may keep the split.
    let registry = spmd_ops::builtins();
    let x = attr(&[-1, 0]);
    let dy = attr(&[-1]);
    let grad = |reduce_type: i64| {
        let attrs = Attrs::new()
            .with("axis", vec![1i64])
            .with("reduce_type", reduce_type);
        let rule = registry.build("reduce_base", &attrs).unwrap();
        rule.grad(
            &mesh(&[2]),
            &[Spec::new(&[4, 6], &x)],
            &[Spec::new(&[4], &dy)],
        )
        .unwrap()
    };
    let mean = grad(4);
    assert_eq!(mean.outputs[0].to_string(), "[-1, -1]");
    assert_eq!(mean.inputs[0].to_string(), "[-1, -1]");
    let sum = grad(0);
    assert_eq!(sum.outputs[0].to_string(), "[-1, 0]");
}

/// A grad call whose forward call (the same inputs) is answered is
/// answered too: the grad op's operands arrive in layouts nothing made
/// agree (the output grads as the next op wrote them), and the merge
/// settles an axis given two shardings by its first claim, resharding the
/// later operand; a mesh dim two axes claim goes to the first claimant,
/// even under a strict policy (softmax, embedding), since the reshards of
/// the grad op's operands are a sound answer. No grad of these calls may
/// fail, and an axis conflict would be the wrong error. Random layouts over
/// matmul, the elementwise binaries, softmax, layer_norm, embedding and
/// cross_entropy_with_softmax.
mod grads_answer_where_forward_does {
    use super::*;
    use proptest::prelude::*;

    /// (op, attrs, input shapes, output shapes)
    type Case = (&'static str, Attrs, Vec<Vec<usize>>, Vec<Vec<usize>>);

    fn cases() -> Vec<Case> {
        let v = |s: &[&[usize]]| s.iter().map(|d| d.to_vec()).collect::<Vec<_>>();
        vec![
            (
                "matmul",
                Attrs::new(),
                v(&[&[4, 6], &[6, 8]]),
                v(&[&[4, 8]]),
            ),
            (
                "matmul",
                Attrs::new().with("trans_y", true),
                v(&[&[2, 4, 6], &[8, 6]]),
                v(&[&[2, 4, 8]]),
            ),
            ("add", Attrs::new(), v(&[&[4, 6], &[4, 6]]), v(&[&[4, 6]])),
            ("subtract", Attrs::new(), v(&[&[4, 6], &[6]]), v(&[&[4, 6]])),
            (
                "multiply",
                Attrs::new(),
                v(&[&[2, 4, 6], &[4, 6]]),
                v(&[&[2, 4, 6]]),
            ),
            (
                "softmax",
                Attrs::new().with("axis", -1i64),
                v(&[&[4, 6]]),
                v(&[&[4, 6]]),
            ),
            (
                "layer_norm",
                Attrs::new().with("begin_norm_axis", 1i64),
                v(&[&[4, 6], &[6], &[6]]),
                v(&[&[4, 6], &[4], &[4]]),
            ),
            (
                "embedding",
                Attrs::new(),
                v(&[&[4, 6], &[12, 8]]),
                v(&[&[4, 6, 8]]),
            ),
            (
                "cross_entropy_with_softmax",
                Attrs::new(),
                v(&[&[4, 10], &[4, 1]]),
                v(&[&[4, 10], &[4, 1]]),
            ),
        ]
    }

    /// A mapping for each of `ranks`: per dim `-1` or a mesh dim, a mesh
    /// dim used once per tensor.
    fn layouts(ranks: Vec<usize>, mesh_rank: usize) -> impl Strategy<Value = Vec<DistAttr>> {
        ranks
            .into_iter()
            .map(move |r| {
                prop::collection::vec(-1i64..mesh_rank as i64, r).prop_map(|m| {
                    let mut used = Vec::new();
                    let m: Vec<i64> = m
                        .into_iter()
                        .map(|d| {
                            if d >= 0 && !used.contains(&d) {
                                used.push(d);
                                d
                            } else {
                                -1
                            }
                        })
                        .collect();
                    attr(&m)
                })
            })
            .collect::<Vec<_>>()
    }

    fn call() -> impl Strategy<Value = (usize, Vec<usize>, Vec<DistAttr>, Vec<DistAttr>)> {
        let n = cases().len();
        (
            0..n,
            prop::sample::select(vec![vec![2usize, 2], vec![2, 3], vec![4]]),
        )
            .prop_flat_map(|(k, mesh)| {
                let (_, _, ins, outs) = &cases()[k];
                let rank = mesh.len();
                (
                    Just(k),
                    Just(mesh),
                    layouts(ins.iter().map(Vec::len).collect(), rank),
                    layouts(outs.iter().map(Vec::len).collect(), rank),
                )
            })
    }

    #[test]
    fn grads_answer() {
        use proptest::test_runner::{Config, TestRunner};
        let registry = spmd_ops::builtins();
        let (forward_answered, grads_answered) = (std::cell::Cell::new(0), std::cell::Cell::new(0));
        let mut runner = TestRunner::new(Config {
            cases: 600,
            failure_persistence: None,
            ..Config::default()
        });
        runner
            .run(&call(), |(k, mesh_shape, ins, dys)| {
                let (op, attrs, in_shapes, out_shapes) = &cases()[k];
                let rule = registry.build(op, attrs).unwrap();
                let m = mesh(&mesh_shape);
                let specs: Vec<Spec<'_>> = in_shapes
                    .iter()
                    .zip(&ins)
                    .map(|(s, a)| Spec::new(s, a))
                    .collect();
                if rule.forward(&m, &specs).is_err() {
                    return Ok(());
                }
                forward_answered.set(forward_answered.get() + 1);
                let dy_specs: Vec<Spec<'_>> = out_shapes
                    .iter()
                    .zip(&dys)
                    .map(|(s, a)| Spec::new(s, a))
                    .collect();
                match rule.grad(&m, &specs, &dy_specs) {
                    Ok(_) => grads_answered.set(grads_answered.get() + 1),
                    Err(e) => {
                        let text = e.to_string();
                        prop_assert!(
                            !matches!(e, SpmdError::AxisConflict { .. }),
                            "{op} on {mesh_shape:?}: {ins:?} / {dys:?}: {text}"
                        );
                        prop_assert!(text.starts_with(op), "{op}: {text}");
                    }
                }
                Ok(())
            })
            .unwrap();
        let (forward_answered, grads_answered) = (forward_answered.get(), grads_answered.get());
        // Most random calls are forward-answerable, and every one of their
        // grads is answered.
        assert!(
            forward_answered >= 300,
            "only {forward_answered} forward calls answered"
        );
        eprintln!("{grads_answered} of {forward_answered} grads answered");
        assert_eq!(grads_answered, forward_answered);
    }
}

/// An input the grad op reads for its shape alone keeps its split where
/// the output grad arrives whole: an embedding table split on the hidden
/// axis, with its output grad replicated, is read as it is (no all-gather
/// of the table), the output grad is sliced to the hidden split (no data
/// moves), and the table's grad comes out in the table's layout, not
/// partial.
#[test]
fn a_shape_only_input_keeps_its_split_where_the_output_grad_is_whole() {
    let registry = spmd_ops::builtins();
    let rule = registry.build("embedding", &Attrs::new()).unwrap();
    let (ids, table, dy) = (attr(&[-1, -1]), attr(&[-1, 0]), attr(&[-1, -1, -1]));
    let r = rule
        .grad(
            &mesh(&[4]),
            &[Spec::new(&[2, 8], &ids), Spec::new(&[32, 16], &table)],
            &[Spec::new(&[2, 8, 16], &dy)],
        )
        .unwrap();
    let needs: Vec<String> = r.inputs.iter().map(ToString::to_string).collect();
    assert_eq!(needs, ["[-1, -1]", "[-1, 0]", "[-1, -1, 0]"]);
    assert_eq!(r.outputs[0], table);
}
