//! The checker against hand-made answers: each kind of wrong answer must be
//! caught with the right finding, and subtle sound answers (partial inputs
//! of a linear op, empty blocks, co-sharding, idempotent partials) accepted.

use spmd_check::{
    Direction, EinsumCheck, Finding, Input, Tensor, Values, check_backward, check_forward,
    check_grad, check_grad_of_signature, einsum,
};
use spmd_core::{
    Call, DimsMapping, DistAttr, Mesh, MeshSet, Partial, ReduceType, RuleResult, Spec, SpmdError,
    SpmdRule, Trace,
};

/// A rule that answers the same thing whatever it is given.
struct Fixed {
    inputs: Vec<DistAttr>,
    outputs: Vec<DistAttr>,
}

impl SpmdRule for Fixed {
    fn name(&self) -> &'static str {
        "fixed"
    }
    fn infer_into(
        &self,
        _: &Call<'_>,
        _: Option<&mut dyn Trace>,
        result: &mut RuleResult,
    ) -> Result<(), SpmdError> {
        result.inputs = self.inputs.iter().cloned().collect();
        result.outputs = self.outputs.iter().cloned().collect();
        Ok(())
    }
}

fn a(paddle: &[i64]) -> DistAttr {
    DistAttr::from_paddle(paddle).unwrap()
}

fn nested(dims: &[&[u8]]) -> DistAttr {
    DistAttr::new(DimsMapping::from_nested(dims).unwrap())
}

fn partial(attr: DistAttr, dims: u8, r: ReduceType) -> DistAttr {
    attr.with_partial(Partial::over(MeshSet(dims), r))
}

fn fixed(inputs: &[DistAttr], outputs: &[DistAttr]) -> Fixed {
    Fixed {
        inputs: inputs.to_vec(),
        outputs: outputs.to_vec(),
    }
}

/// Checks `rule` as `notation` for inputs of these shapes (given replicated).
fn check(
    notation: &str,
    reduce: ReduceType,
    mesh: &[usize],
    shapes: &[&[usize]],
    rule: &Fixed,
) -> Result<(), spmd_check::Report> {
    let mesh = Mesh::new(mesh).unwrap();
    let given: Vec<DistAttr> = shapes
        .iter()
        .map(|s| DistAttr::replicated(s.len()))
        .collect();
    let specs: Vec<Spec<'_>> = shapes
        .iter()
        .zip(&given)
        .map(|(s, a)| Spec::new(s, a))
        .collect();
    EinsumCheck::new(notation)
        .unwrap()
        .reduce(reduce)
        .forward(rule, &mesh, &specs)
}

const MM: &str = "mk,kn->mn";
const X: &[usize] = &[5, 6];
const Y: &[usize] = &[6, 3];

#[test]
fn sound_answers_pass() {
    let sum = ReduceType::Sum;
    // k split on mesh dim 1: partial sum.
    let r = fixed(
        &[a(&[0, 1]), a(&[1, -1])],
        &[partial(a(&[0, -1]), 0b10, sum)],
    );
    check(MM, sum, &[2, 2], &[X, Y], &r).unwrap();
    // A partial input of a linear op: y partial over mesh dim 0, so is out.
    let r = fixed(
        &[a(&[-1, -1]), partial(a(&[-1, -1]), 0b1, sum)],
        &[partial(a(&[-1, -1]), 0b1, sum)],
    );
    check(MM, sum, &[3], &[X, Y], &r).unwrap();
    // Co-sharded k, the same order in both inputs; more devices than rows.
    let r = fixed(
        &[nested(&[&[], &[1, 0]]), nested(&[&[1, 0], &[]])],
        &[partial(a(&[-1, -1]), 0b11, sum)],
    );
    check(MM, sum, &[2, 4], &[X, Y], &r).unwrap();
    // Max partials of a max reduction; a claimed max partial over a mesh dim
    // that splits nothing is idempotent, so also right.
    let r = fixed(&[a(&[-1, 0])], &[partial(a(&[-1]), 0b11, ReduceType::Max)]);
    check("ab->a", ReduceType::Max, &[3, 2], &[&[2, 7]], &r).unwrap();
    // A compound dim split on whole rows of its minor factor.
    let r = fixed(&[a(&[-1, 0])], &[a(&[-1, 0, -1])]);
    let mesh = Mesh::new(&[2]).unwrap();
    let given = DistAttr::replicated(2);
    EinsumCheck::new("b(hd)->bhd")
        .unwrap()
        .size('d', 3)
        .forward(&r, &mesh, &[Spec::new(&[2, 12], &given)])
        .unwrap();
}

#[test]
fn a_forgotten_partial_is_a_wrong_value() {
    let r = fixed(&[a(&[0, 1]), a(&[1, -1])], &[a(&[0, -1])]);
    let rep = check(MM, ReduceType::Sum, &[2, 2], &[X, Y], &r).unwrap_err();
    assert_eq!(rep.direction(), Direction::Forward);
    let Finding::WrongValue {
        tensor,
        device,
        wrong_devices,
        devices,
        ..
    } = &rep.finding()
    else {
        panic!("{rep}")
    };
    assert_eq!(
        (tensor.as_str(), device.rank, *wrong_devices, *devices),
        ("output 0", 0, 4, 4)
    );
}

#[test]
fn a_wrong_reduce_type_is_a_wrong_value() {
    let r = fixed(&[a(&[-1, 0])], &[partial(a(&[-1]), 0b1, ReduceType::Sum)]);
    let rep = check("ab->a", ReduceType::Max, &[2], &[&[3, 4]], &r).unwrap_err();
    assert!(matches!(rep.finding(), Finding::WrongValue { .. }), "{rep}");
}

#[test]
fn a_fake_partial_is_a_wrong_value() {
    // Nothing contracted is split, yet the output is claimed partial: the
    // reduction adds up identical copies.
    let r = fixed(
        &[a(&[-1, -1]), a(&[-1, -1])],
        &[partial(a(&[-1, -1]), 0b1, ReduceType::Sum)],
    );
    let rep = check(MM, ReduceType::Sum, &[2], &[X, Y], &r).unwrap_err();
    assert!(matches!(rep.finding(), Finding::WrongValue { .. }), "{rep}");
}

#[test]
fn a_contracted_axis_kept_sharded_is_caught() {
    // m split on mesh dim 0 in x, k split on mesh dim 0 in y: device i holds
    // rows i of x (all of k) and rows i of y (part of k).
    let r = fixed(&[a(&[0, -1]), a(&[0, -1])], &[a(&[0, -1])]);
    let rep = check(MM, ReduceType::Sum, &[2], &[X, Y], &r).unwrap_err();
    let Finding::Inconsistent {
        axis,
        first,
        second,
        ..
    } = &rep.finding()
    else {
        panic!("{rep}")
    };
    assert_eq!(axis, "k");
    assert_eq!(
        (first.tensor.as_str(), first.dim, first.range.clone()),
        ("input 0", 1, 0..6)
    );
    assert_eq!(
        (second.tensor.as_str(), second.dim, second.range.clone()),
        ("input 1", 0, 0..3)
    );
    // Split two different ways.
    let r = fixed(
        &[a(&[-1, 0]), a(&[1, -1])],
        &[partial(a(&[-1, -1]), 0b11, ReduceType::Sum)],
    );
    let rep = check(MM, ReduceType::Sum, &[2, 2], &[X, Y], &r).unwrap_err();
    assert!(
        matches!(rep.finding(), Finding::Inconsistent { .. }),
        "{rep}"
    );
    // Co-sharded in opposite orders.
    let r = fixed(
        &[nested(&[&[], &[0, 1]]), nested(&[&[1, 0], &[]])],
        &[partial(a(&[-1, -1]), 0b11, ReduceType::Sum)],
    );
    let rep = check(MM, ReduceType::Sum, &[2, 2], &[X, Y], &r).unwrap_err();
    assert!(
        matches!(rep.finding(), Finding::Inconsistent { .. }),
        "{rep}"
    );
}

#[test]
fn a_claimed_replicated_output_must_be_whole_everywhere() {
    // m split, output claimed replicated: each device holds some rows only.
    let r = fixed(&[a(&[0, -1]), a(&[-1, -1])], &[a(&[-1, -1])]);
    let rep = check(MM, ReduceType::Sum, &[2], &[X, Y], &r).unwrap_err();
    let Finding::WrongShape { expected, got, .. } = rep.finding() else {
        panic!("{rep}")
    };
    assert_eq!((expected.clone(), got.clone()), (vec![5, 3], vec![3, 3]));
}

#[test]
fn unreadable_blocks_are_caught() {
    // (hd) of 12 with d = 3, split over 5 devices: blocks 3, 3, 2, 2, 2 are
    // not whole rows of d, so no device can reshape its block to [h, d].
    let r = fixed(&[a(&[-1, 0])], &[a(&[-1, 0, -1])]);
    let mesh = Mesh::new(&[5]).unwrap();
    let given = DistAttr::replicated(2);
    let rep = EinsumCheck::new("b(hd)->bhd")
        .unwrap()
        .size('d', 3)
        .forward(&r, &mesh, &[Spec::new(&[2, 12], &given)])
        .unwrap_err();
    assert!(matches!(rep.finding(), Finding::Unreadable { .. }), "{rep}");
    // A size-1 dim broadcast against 4 and split.
    let r = fixed(&[a(&[0]), a(&[-1])], &[a(&[-1])]);
    let rep = check("a,a->a", ReduceType::Sum, &[2], &[&[1], &[4]], &r).unwrap_err();
    assert!(matches!(rep.finding(), Finding::Unreadable { .. }), "{rep}");
}

#[test]
fn malformed_answers_are_caught() {
    let cases = [
        fixed(&[a(&[0])], &[a(&[-1, -1])]),
        fixed(&[a(&[0, 0]), a(&[-1, -1])], &[a(&[-1, -1])]),
        fixed(&[a(&[3, -1]), a(&[-1, -1])], &[a(&[-1, -1])]),
        fixed(
            &[a(&[-1, -1]), a(&[-1, -1])],
            &[partial(a(&[0, -1]), 0b1, ReduceType::Sum)],
        ),
    ];
    for r in &cases {
        let rep = check(MM, ReduceType::Sum, &[2], &[X, Y], r).unwrap_err();
        assert!(matches!(rep.finding(), Finding::Malformed(_)), "{rep}");
        assert!(rep.is_unsound());
    }
}

#[test]
fn a_nonlinear_op_on_partial_inputs_is_caught() {
    // Squaring a partial sum is not the sum of the squares.
    let rule = fixed(
        &[partial(a(&[-1]), 0b1, ReduceType::Sum)],
        &[partial(a(&[-1]), 0b1, ReduceType::Sum)],
    );
    let mesh = Mesh::new(&[2]).unwrap();
    let x = Input::probe(&[4], a(&[-1]), 1);
    let square = |t: &[Tensor]| vec![t[0].map(|v| v * v)];
    let rep = check_forward(&rule, &mesh, std::slice::from_ref(&x), square).unwrap_err();
    assert!(matches!(rep.finding(), Finding::WrongValue { .. }), "{rep}");
    // Negating one is fine.
    let neg = |t: &[Tensor]| vec![t[0].map(|v| -v)];
    check_forward(&rule, &mesh, &[x], neg).unwrap();
}

#[test]
fn a_panicking_reference_is_a_local_failure() {
    let rule = fixed(&[a(&[0]), a(&[-1])], &[a(&[0])]);
    let mesh = Mesh::new(&[2]).unwrap();
    let inputs = [
        Input::probe(&[4], a(&[-1]), 1),
        Input::probe(&[4], a(&[-1]), 2),
    ];
    let add = |t: &[Tensor]| {
        assert_eq!(t[0].shape(), t[1].shape(), "shapes differ");
        vec![Tensor::new(
            t[0].shape(),
            t[0].data()
                .iter()
                .zip(t[1].data())
                .map(|(x, y)| x + y)
                .collect(),
        )]
    };
    let rep = check_forward(&rule, &mesh, &inputs, add).unwrap_err();
    let Finding::LocalFailed { message, .. } = rep.finding() else {
        panic!("{rep}")
    };
    assert!(message.contains("shapes differ"), "{message}");
}

#[test]
fn rejections_are_not_unsound() {
    struct Refuses;
    impl SpmdRule for Refuses {
        fn name(&self) -> &'static str {
            "refuses"
        }
        fn infer_into(
            &self,
            _: &Call<'_>,
            _: Option<&mut dyn Trace>,
            _: &mut RuleResult,
        ) -> Result<(), SpmdError> {
            Err(SpmdError::Rejected {
                op: "refuses",
                message: "no".into(),
            })
        }
    }
    let mesh = Mesh::new(&[2]).unwrap();
    let rep = check_forward(&Refuses, &mesh, &[Input::probe(&[2], a(&[0]), 1)], |t| {
        t.to_vec()
    })
    .unwrap_err();
    assert!(!rep.is_unsound());
    assert!(matches!(rep.finding(), Finding::Rejected(_)));
    let rep = check_backward(
        &Refuses,
        &mesh,
        &[Tensor::full(&[2], 1.0)],
        &[a(&[0])],
        |t| t.to_vec(),
    )
    .unwrap_err();
    assert!(!rep.is_unsound());
}

#[test]
fn the_report_reads_well() {
    let r = fixed(&[a(&[0, 1]), a(&[1, -1])], &[a(&[0, -1])]);
    let rep = check(MM, ReduceType::Sum, &[2, 2], &[X, Y], &r).unwrap_err();
    let text = rep.to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "UNSOUND: rule `fixed` (forward) on mesh 2x2");
    assert_eq!(lines[1], "  einsum   \"mk,kn->mn\"");
    assert_eq!(lines[2], "  given    input 0 [5, 6]: [-1, -1]");
    assert_eq!(lines[4], "  answered input 0 required [0, 1]");
    assert_eq!(lines[6], "  answered output 0: [0, -1]");
    assert!(
        lines[7].starts_with(
            "  output 0 is claimed [0, -1]: device 0 (mesh coords [0, 0]) holds block [0..3, 0..3]; \
             at global index [0, 0] expected "
        ),
        "{text}"
    );
    assert!(lines[7].ends_with("(4 of 4 devices wrong)"), "{text}");
}

#[test]
fn probe_values_make_luck_unlikely() {
    // Max of the probe values over a block is never the max over another.
    let x = Tensor::probe(&[6, 5], 9, Values::Integers);
    let whole = einsum("ab->a", &[&x], ReduceType::Max).unwrap();
    let half = einsum("ab->a", &[&x.block(&[0..6, 0..3])], ReduceType::Max).unwrap();
    assert_ne!(whole, half);
}

/// A compound dim whose major factor has size 1, on a device holding an empty
/// block: the factor stays whole (it used to be read as empty, a false
/// "inconsistent" report for `reshape [3] -> [1, 3]` on 4 devices).
#[test]
fn an_empty_block_of_a_compound_with_a_size_one_factor_is_sound() {
    let rule = spmd_ops::builtins()
        .build(
            "reshape",
            &spmd_core::Attrs::new().with("shape", vec![1i64, 3]),
        )
        .unwrap();
    let mesh = Mesh::new(&[4]).unwrap();
    let x = DistAttr::from_paddle(&[0]).unwrap();
    let check = EinsumCheck::new("(ab)->ab")
        .unwrap()
        .size('a', 1)
        .size('b', 3);
    if let Err(rep) = check.forward(&*rule, &mesh, &[Spec::new(&[3], &x)]) {
        panic!("{rep}");
    }
}

/// The grad layout rule: a grad whose values are right on every device is
/// still unsound when its input is required in another layout, since the
/// framework gives each input grad the shape of its input's block. The same
/// answer read as a grad op of its own signature (whose inputs need not be
/// the forward inputs) is judged by value alone.
#[test]
fn a_grad_laid_out_unlike_its_input_is_caught() {
    let mesh = Mesh::new(&[2]).unwrap();
    let x = Input::probe(&[4], a(&[-1]), 1);
    let negate = |t: &[Tensor]| vec![t[0].map(|v| -v)];
    let d_negate = |_: &[Tensor], _: &[Tensor], dy: &[Tensor]| vec![dy[0].map(|v| -v)];
    // (x, out_grad) required ([-1], [0]); x's grad claimed [0].
    let unlike = fixed(&[a(&[-1]), a(&[0])], &[a(&[0])]);
    let rep = check_grad(
        &unlike,
        &mesh,
        std::slice::from_ref(&x),
        &[a(&[0])],
        negate,
        d_negate,
    )
    .unwrap_err();
    assert!(
        matches!(rep.finding(), Finding::Malformed(m) if m.contains("grad layout rule")),
        "{rep}"
    );
    check_grad_of_signature(
        &unlike,
        &mesh,
        std::slice::from_ref(&x),
        &[a(&[0])],
        negate,
        d_negate,
    )
    .unwrap();
    // x required as its grad: sound.
    let like = fixed(&[a(&[0]), a(&[0])], &[a(&[0])]);
    check_grad(&like, &mesh, &[x], &[a(&[0])], negate, d_negate).unwrap();
}
