//! Absent optional tensors: they take no part in inference, get their term's
//! explicit dims replicated as their answer, and are an error where the rule
//! does not declare them optional.
use spmd_core::SpmdRuleExt;

use spmd_core::{
    Absent, Attrs, Conflicts, DistAttr, Einsum, Mesh, Policy, Spec, SpmdError, TensorRef, spmd_rule,
};

fn attr(dims: &[i64]) -> DistAttr {
    DistAttr::from_paddle(dims).unwrap()
}

fn strs(attrs: &[DistAttr]) -> Vec<String> {
    attrs.iter().map(ToString::to_string).collect()
}

/// `y` would clash with `x` on `a` (mesh dim 0 vs 1, strict): absent, it
/// constrains nothing.
#[spmd_rule(
    einsum = "ab,ab->ab",
    merge(conflicts = "strict"),
    inputs(x, y),
    outputs(out),
    optional(y)
)]
struct Mul {}

#[test]
fn an_absent_input_takes_no_part_in_the_merge() {
    let mesh = Mesh::new(&[2, 2]).unwrap();
    let (x, y) = (attr(&[0, -1]), attr(&[1, -1]));
    let present = Mul {}.forward(&mesh, &[Spec::new(&[4, 4], &x), Spec::new(&[4, 4], &y)]);
    assert!(
        matches!(present, Err(SpmdError::AxisConflict { .. })),
        "{present:?}"
    );
    let r = Mul {}
        .forward_optional(&mesh, &[Some(Spec::new(&[4, 4], &x)), None])
        .unwrap();
    assert_eq!(strs(&r.inputs), ["[0, -1]", "[-1, -1]"]);
    assert_eq!(strs(&r.outputs), ["[0, -1]"]);
}

#[test]
fn all_present_optional_call_equals_the_plain_call() {
    let mesh = Mesh::new(&[2, 2]).unwrap();
    let (x, y) = (attr(&[0, -1]), attr(&[-1, 1]));
    let (sx, sy) = (Spec::new(&[4, 6], &x), Spec::new(&[4, 6], &y));
    let plain = Mul {}.forward(&mesh, &[sx, sy]).unwrap();
    let optional = Mul {}
        .forward_optional(&mesh, &[Some(sx), Some(sy)])
        .unwrap();
    assert_eq!(plain, optional);
    assert_eq!(strs(&plain.outputs), ["[0, 1]"]);
}

#[test]
fn an_absent_required_input_is_an_error_naming_it() {
    let mesh = Mesh::new(&[2]).unwrap();
    let y = attr(&[-1, -1]);
    let err = Mul {}
        .forward_optional(&mesh, &[None, Some(Spec::new(&[4, 4], &y))])
        .unwrap_err();
    assert_eq!(
        err,
        SpmdError::AbsentTensor {
            op: "mul",
            tensor: TensorRef::input(0)
        }
    );
    // A rule without optional tensors: the trait's default says the same.
    let e = Einsum::new("ab,ab->ab").unwrap();
    let err = SpmdRuleExt::forward_optional(&e, &mesh, &[Some(Spec::new(&[4, 4], &y)), None])
        .unwrap_err();
    assert!(
        matches!(err, SpmdError::AbsentTensor { tensor, .. } if tensor == TensorRef::input(1)),
        "{err}"
    );
}

/// The placeholder of an absent input is not checked against the term (its
/// rank is 0 where the term has two dims), nor its width of `...`.
#[test]
fn an_absent_input_has_no_rank_nor_ellipsis_width() {
    let e = Einsum::new("...k,k->...k").unwrap();
    let rule = e.rule().with_optional(Absent::new(0b10, 0));
    let mesh = Mesh::new(&[2, 2]).unwrap();
    let x = attr(&[1, -1, 0]);
    let r = rule
        .forward_optional(&mesh, &[Some(Spec::new(&[2, 3, 8], &x)), None])
        .unwrap();
    assert_eq!(strs(&r.inputs), ["[1, -1, 0]", "[-1]"]);
    assert_eq!(strs(&r.outputs), ["[1, -1, 0]"]);
}

#[test]
fn backward_skips_absent_inputs_and_outputs() {
    // out2 exists only with the optional input y.
    let e = Einsum::new("ab,b->ab,b").unwrap();
    let rule = e.rule().with_optional(Absent::new(0b10, 0b10));
    let mesh = Mesh::new(&[2]).unwrap();
    let out = attr(&[-1, 0]);
    let r = rule
        .backward_optional(
            &mesh,
            &[Some(&[4, 6][..]), None],
            &[Some(Spec::new(&[4, 6], &out)), None],
        )
        .unwrap();
    assert_eq!(strs(&r.inputs), ["[-1, 0]", "[-1]"]);
    assert_eq!(strs(&r.outputs), ["[-1, 0]", "[-1]"]);
    // An absent output the rule does not declare optional.
    let strict = e.rule().with_optional(Absent::new(0b10, 0));
    let err = strict
        .backward_optional(
            &mesh,
            &[Some(&[4, 6][..]), None],
            &[Some(Spec::new(&[4, 6], &out)), None],
        )
        .unwrap_err();
    assert!(
        matches!(err, SpmdError::AbsentTensor { tensor, .. } if tensor == TensorRef::output(1)),
        "{err}"
    );
}

#[test]
fn grad_gives_an_absent_input_no_partial_grad() {
    // out = x @ w + bias: x's k is sharded, so w's grad is partial over it;
    // the absent bias has no grad at all.
    let e = Einsum::new("mk,kn,n->mn").unwrap();
    let rule = e.rule().with_optional(Absent::new(0b100, 0));
    let mesh = Mesh::new(&[2, 2]).unwrap();
    let (x, w, dy) = (attr(&[0, -1]), attr(&[-1, 1]), attr(&[0, 1]));
    let r = rule
        .grad_optional(
            &mesh,
            &[
                Some(Spec::new(&[4, 8], &x)),
                Some(Spec::new(&[8, 6], &w)),
                None,
            ],
            &[Some(Spec::new(&[4, 6], &dy))],
        )
        .unwrap();
    assert_eq!(strs(&r.inputs), ["[0, -1]", "[-1, 1]", "[-1]", "[0, 1]"]);
    assert_eq!(
        strs(&r.outputs),
        ["[0, -1] partial{1: SUM}", "[-1, 1] partial{0: SUM}", "[-1]"]
    );
}

/// Role priority: an absent input does not make the batch axes (those every
/// input has) disappear.
#[test]
fn role_priority_ignores_absent_inputs_when_finding_batch_axes() {
    let e = Einsum::new("bmk,bkn,bn->bmn")
        .unwrap()
        .with_policy(Policy::CLASSIC.with_conflicts(Conflicts::RolePriority));
    let rule = e.rule().with_optional(Absent::new(0b100, 0));
    let mesh = Mesh::new(&[2, 2]).unwrap();
    // b and m both want mesh dim 0: b is a batch axis and wins.
    let (x, y) = (attr(&[-1, 0, -1]), attr(&[0, -1, -1]));
    let r = rule
        .forward_optional(
            &mesh,
            &[
                Some(Spec::new(&[4, 8, 6], &x)),
                Some(Spec::new(&[4, 6, 2], &y)),
                None,
            ],
        )
        .unwrap();
    assert_eq!(strs(&r.outputs), ["[0, -1, -1]"]);
    assert_eq!(r.inputs[2].to_string(), "[-1, -1]");
}

#[test]
fn builtin_ops_take_absent_optional_inputs() {
    let registry = spmd_ops::builtins();
    let mesh = Mesh::new(&[2, 2]).unwrap();
    // swiglu without y halves x's last dim: never sharded.
    let swiglu = registry.build("swiglu", &Attrs::new()).unwrap();
    let x = attr(&[0, 1]);
    let r = swiglu
        .forward_optional(&mesh, &[Some(Spec::new(&[4, 16], &x)), None])
        .unwrap();
    assert_eq!(strs(&r.inputs), ["[0, -1]", "[]"]);
    assert_eq!(strs(&r.outputs), ["[0, -1]"]);
    // layer_norm without scale and bias: both answered `[-1]`, as Paddle does.
    let ln = registry
        .build("layer_norm", &Attrs::new().with("begin_norm_axis", 1i64))
        .unwrap();
    let x = attr(&[1, 0]);
    let r = ln
        .forward_optional(&mesh, &[Some(Spec::new(&[8, 16], &x)), None, None])
        .unwrap();
    assert_eq!(strs(&r.inputs), ["[1, -1]", "[-1]", "[-1]"]);
    assert_eq!(strs(&r.outputs), ["[1, -1]", "[1]", "[1]"]);
}

/// A grad op's slots follow its declared signature; whether a slot may be
/// absent is declared on the forward tensor it stands for. flash_attention's
/// grad takes (q, k, v, out, softmax_lse, seed_offset, attn_mask; out_grad):
/// slot 6 is the forward input `attn_mask` (optional), slot 3 the forward
/// output `out` (not optional).
#[test]
fn grad_slots_are_checked_against_the_forward_tensors_they_stand_for() {
    let rule = spmd_ops::builtins()
        .build("flash_attention", &Attrs::new())
        .unwrap();
    let mesh = Mesh::new(&[2, 2]).unwrap();
    let (qkv, out, lse) = (
        attr(&[0, 1, -1, -1]),
        attr(&[0, -1, 1, -1]),
        attr(&[0, 1, -1]),
    );
    let seed = attr(&[]);
    let shape = [2usize, 256, 2, 128];
    let spec = |a| Some(Spec::new(&shape, a));
    let mut inputs = vec![
        spec(&qkv),
        spec(&qkv),
        spec(&qkv),
        spec(&out),
        Some(Spec::new(&[2, 2, 256], &lse)),
        Some(Spec::new(&[], &seed)),
        None, // attn_mask, optional in forward
    ];
    let dout = attr(&[-1, -1, -1, -1]);
    let grads = [spec(&dout)];
    let r = rule.grad_optional(&mesh, &inputs, &grads).unwrap();
    // As the suite's vector with a 0-d mask: out's heads sharding wins.
    assert_eq!(r.inputs[0], attr(&[0, -1, 1, -1]));
    assert_eq!(r.outputs[0], attr(&[0, -1, 1, -1]));

    // `out` (slot 3) is a forward output no signature makes optional.
    inputs[3] = None;
    inputs[6] = Some(Spec::new(&[], &seed));
    let e = rule.grad_optional(&mesh, &inputs, &grads).unwrap_err();
    assert!(
        matches!(e, SpmdError::AbsentTensor { tensor, .. } if tensor == TensorRef::output(0)),
        "{e}"
    );
}

/// Optional tensors the library declares: an absent one takes no part, and
/// the others get what they get when it is given replicated.
#[test]
fn library_optional_tensors_can_be_left_out() {
    let reg = spmd_ops::builtins();
    let mesh = Mesh::new(&[2, 2]).unwrap();

    // label_smooth without its prior: the uniform prior divides by the
    // class count, so the class dim is gathered; the rows keep theirs.
    let ls = reg
        .build("label_smooth", &Attrs::new().with("epsilon", 0.1_f64))
        .unwrap();
    let label = attr(&[0, 1]);
    let r = ls
        .forward_optional(&mesh, &[Some(Spec::new(&[8, 10], &label)), None])
        .unwrap();
    assert_eq!(r.inputs[0], attr(&[0, -1]));
    assert_eq!(r.inputs[1], attr(&[]));
    assert_eq!(r.outputs[0], attr(&[0, -1]));
    // With a prior, the classes stay sharded.
    let prior = attr(&[1]);
    let r = ls
        .forward(
            &mesh,
            &[Spec::new(&[8, 10], &label), Spec::new(&[10], &prior)],
        )
        .unwrap();
    assert_eq!(r.outputs[0], label);

    // roi_align without boxes_num: the channels stay sharded as with it.
    let ra = reg.build("roi_align", &Attrs::new()).unwrap();
    let (x, boxes, num) = (attr(&[-1, 1, -1, -1]), attr(&[-1, -1]), attr(&[-1]));
    let given = ra
        .forward(
            &mesh,
            &[
                Spec::new(&[2, 8, 16, 16], &x),
                Spec::new(&[5, 4], &boxes),
                Spec::new(&[2], &num),
            ],
        )
        .unwrap();
    let absent = ra
        .forward_optional(
            &mesh,
            &[
                Some(Spec::new(&[2, 8, 16, 16], &x)),
                Some(Spec::new(&[5, 4], &boxes)),
                None,
            ],
        )
        .unwrap();
    assert_eq!(absent.inputs[..2], given.inputs[..2]);
    assert_eq!(absent.outputs, given.outputs);
    assert_eq!(absent.inputs[2], attr(&[-1]));
    assert_eq!(given.outputs[0], attr(&[-1, 1, -1, -1]));

    // moe_gate_dispatch without corr_bias: x's token sharding is still
    // dropped, its hidden dim still carried to y.
    let moe = reg
        .build("moe_gate_dispatch", &Attrs::new().with("k", 2_i64))
        .unwrap();
    let (x, logits, bias) = (attr(&[0, 1]), attr(&[-1, -1]), attr(&[-1]));
    let given = moe
        .forward(
            &mesh,
            &[
                Spec::new(&[16, 8], &x),
                Spec::new(&[16, 4], &logits),
                Spec::new(&[4], &bias),
            ],
        )
        .unwrap();
    let absent = moe
        .forward_optional(
            &mesh,
            &[
                Some(Spec::new(&[16, 8], &x)),
                Some(Spec::new(&[16, 4], &logits)),
                None,
            ],
        )
        .unwrap();
    assert_eq!(absent.inputs[..2], given.inputs[..2]);
    assert_eq!(absent.outputs, given.outputs);
    assert_eq!(given.inputs[0], attr(&[-1, 1]));
    assert_eq!(given.outputs[0], attr(&[-1, 1]));

    // fused_linear_param_grad_add's first step: no dweight or dbias to add
    // to. The batch's mesh dim 0 leaves both outputs partial, as with
    // replicated accumulators, and the absent ones get no partial status.
    let fl = reg
        .build("fused_linear_param_grad_add", &Attrs::new())
        .unwrap();
    let (x, dout) = (attr(&[0, -1, -1]), attr(&[0, -1, 1]));
    let (w, b) = (attr(&[-1, -1]), attr(&[-1]));
    let given = fl
        .forward(
            &mesh,
            &[
                Spec::new(&[4, 6, 8], &x),
                Spec::new(&[4, 6, 10], &dout),
                Spec::new(&[8, 10], &w),
                Spec::new(&[10], &b),
            ],
        )
        .unwrap();
    let absent = fl
        .forward_optional(
            &mesh,
            &[
                Some(Spec::new(&[4, 6, 8], &x)),
                Some(Spec::new(&[4, 6, 10], &dout)),
                None,
                None,
            ],
        )
        .unwrap();
    assert_eq!(absent.inputs[..2], given.inputs[..2]);
    assert_eq!(absent.outputs, given.outputs);
    assert!(given.outputs[0].partial.is_partial() && given.outputs[1].partial.is_partial());
    assert!(given.inputs[2].partial.is_partial());
    assert!(!absent.inputs[2].partial.is_partial() && !absent.inputs[3].partial.is_partial());
}
