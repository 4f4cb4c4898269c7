//! A linear layer with a bias, declared the obvious way: the bias is an
//! *addend* (`+n`), not a third factor. Run against the op's own kernel
//! (`x @ w + b`) on a simulated mesh, the rule is sound with the contracted
//! `k` sharded in forward, backward and grad, while the same op declared
//! with the bias as a factor (`bsk,kn,n->bsn`) adds the bias on every rank
//! and the checker says so.

use spmd_check::{Input, Tensor, Values, check_backward, check_forward, check_grad, einsum};
use spmd_core::SpmdRuleExt;
use spmd_core::{DistAttr, Einsum, Mesh, ReduceType, Spec, SpmdError, spmd_rule};

/// `out[b,s,n] = sum_k x[b,s,k] * w[k,n] + bias[n]`
#[spmd_rule(einsum = "bsk,kn,+n->bsn", inputs(x, w, bias), outputs(out))]
struct LinearWithBias {}

/// The same op with the bias written as a factor: unsound once `k` is sharded.
#[spmd_rule(einsum = "bsk,kn,n->bsn", inputs(x, w, bias), outputs(out))]
struct BiasAsFactor {}

fn a(paddle: &[i64]) -> DistAttr {
    DistAttr::from_paddle(paddle).unwrap()
}

/// The op: `x @ w + bias`, the bias broadcast over `b` and `s`.
fn linear(t: &[Tensor]) -> Vec<Tensor> {
    let p = einsum("bsk,kn->bsn", &[&t[0], &t[1]], ReduceType::Sum)
        .unwrap()
        .remove(0);
    vec![Tensor::from_fn(p.shape(), |i| p.get(i) + t[2].get(&i[2..]))]
}

/// Its gradients: `dx = dy wᵀ`, `dw = xᵀ dy`, `dbias = sum over b, s of dy`.
fn linear_grad(x: &[Tensor], _out: &[Tensor], dy: &[Tensor]) -> Vec<Tensor> {
    let sum = ReduceType::Sum;
    vec![
        einsum("bsn,kn->bsk", &[&dy[0], &x[1]], sum)
            .unwrap()
            .remove(0),
        einsum("bsk,bsn->kn", &[&x[0], &dy[0]], sum)
            .unwrap()
            .remove(0),
        einsum("bsn->n", &[&dy[0]], sum).unwrap().remove(0),
    ]
}

fn specs(inputs: &[Input]) -> Vec<Spec<'_>> {
    inputs
        .iter()
        .map(|i| Spec::new(i.value.shape(), &i.attr))
        .collect()
}

fn inputs(x: &[i64], w: &[i64], bias: &[i64]) -> Vec<Input> {
    let probe = |shape: &[usize], seed| Tensor::probe(shape, seed, Values::Integers);
    vec![
        Input::new(probe(&[4, 3, 6], 1), a(x)),
        Input::new(probe(&[6, 5], 2), a(w)),
        Input::new(probe(&[5], 3), a(bias)),
    ]
}

#[test]
fn forward_with_k_sharded_requires_the_bias_partial() {
    let mesh = Mesh::new(&[2, 2]).unwrap();
    // b on mesh dim 0, k on mesh dim 1: the product is partial over 1.
    let given = inputs(&[0, -1, 1], &[-1, -1], &[-1]);
    let specs = specs(&given);
    let r = LinearWithBias {}.forward(&mesh, &specs).unwrap();
    assert_eq!(r.inputs[1].to_string(), "[1, -1]");
    assert_eq!(r.inputs[2].to_string(), "[-1] partial{1: SUM}");
    assert_eq!(r.outputs[0].to_string(), "[0, -1, -1] partial{1: SUM}");
    check_forward(&LinearWithBias {}, &mesh, &given, linear).unwrap();
    // The bias as a factor: every rank adds it, the all-reduce counts it twice.
    let report = check_forward(&BiasAsFactor {}, &mesh, &given, linear).unwrap_err();
    assert!(report.is_unsound(), "{report}");
}

#[test]
fn forward_without_a_sharded_contraction_leaves_the_bias_whole() {
    let mesh = Mesh::new(&[2, 2]).unwrap();
    // n on mesh dim 1 through the weight: the bias follows it, not partial.
    let given = inputs(&[0, -1, -1], &[-1, 1], &[-1]);
    let specs = specs(&given);
    let r = LinearWithBias {}.forward(&mesh, &specs).unwrap();
    assert_eq!(r.inputs[2].to_string(), "[1]");
    assert_eq!(r.outputs[0].to_string(), "[0, -1, 1]");
    check_forward(&LinearWithBias {}, &mesh, &given, linear).unwrap();
}

#[test]
fn backward_explains_a_partial_output_by_k_and_the_bias() {
    let mesh = Mesh::new(&[2, 2]).unwrap();
    let xs: Vec<Tensor> = inputs(&[-1, -1, -1], &[-1, -1], &[-1])
        .into_iter()
        .map(|i| i.value)
        .collect();
    let out = a(&[0, -1, -1]).with_partial([(1, ReduceType::Sum)].into_iter().collect());
    let shapes: Vec<&[usize]> = xs.iter().map(Tensor::shape).collect();
    let spec = Spec::new(&[4, 3, 5], &out);
    let r = LinearWithBias {}.backward(&mesh, &shapes, &[spec]).unwrap();
    assert_eq!(r.inputs[0].to_string(), "[0, -1, 1]");
    assert_eq!(r.inputs[2].to_string(), "[-1] partial{1: SUM}");
    assert_eq!(r.outputs[0].to_string(), "[0, -1, -1] partial{1: SUM}");
    check_backward(&LinearWithBias {}, &mesh, &xs, &[out], linear).unwrap();
}

#[test]
fn grads_are_sound_with_k_or_the_batch_sharded() {
    let mesh = Mesh::new(&[2, 2]).unwrap();
    let rule = LinearWithBias {};
    // k sharded: dx and dw are whole per block, dbias reads dy only.
    let given = inputs(&[0, -1, 1], &[1, -1], &[-1]);
    let r = rule
        .grad(
            &mesh,
            &specs(&given),
            &[Spec::new(&[4, 3, 5], &a(&[0, -1, -1]))],
        )
        .unwrap();
    // dbias sums dy over b, which mesh dim 0 splits; k's mesh dim 1 is not
    // in its computation.
    assert_eq!(r.outputs[2].to_string(), "[-1] partial{0: SUM}");
    check_grad(
        &rule,
        &mesh,
        &given,
        &[a(&[0, -1, -1])],
        linear,
        linear_grad,
    )
    .unwrap();
    // n sharded through dy: every grad but dx is split, not partial.
    let given = inputs(&[0, -1, -1], &[-1, 1], &[1]);
    check_grad(&rule, &mesh, &given, &[a(&[0, -1, 1])], linear, linear_grad).unwrap();
}

#[test]
fn a_product_reduction_with_an_addend_is_an_error() {
    // No layout of an added operand commutes with a Prod partial.
    let e = Einsum::new("ab,+a->a")
        .unwrap()
        .with_reduce(ReduceType::Prod);
    let x = a(&[-1, 0]);
    let b = a(&[-1]);
    let mesh = Mesh::new(&[2]).unwrap();
    let specs = [Spec::new(&[4, 6], &x), Spec::new(&[4], &b)];
    match e.forward(&mesh, &specs) {
        Err(SpmdError::Rejected { message, .. }) => {
            assert!(message.contains("PROD"), "{message}")
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
    // With k whole there is no partial, so nothing to refuse.
    let x = a(&[0, -1]);
    let specs = [Spec::new(&[4, 6], &x), Spec::new(&[4], &b)];
    assert!(e.forward(&mesh, &specs).is_ok());
}
