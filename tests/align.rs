//! `Conflicts::Align` (Paddle's `AlignDimsSharding`), worked by hand.

use spmd_core::SpmdRuleExt;
use spmd_core::{Conflicts, DistAttr, Einsum, Mesh, MeshSet, Partial, Policy, ReduceType, Spec};

fn attr(m: &[i64]) -> DistAttr {
    DistAttr::from_paddle(m).unwrap()
}

fn aligned(notation: &str) -> Einsum {
    Einsum::new(notation)
        .unwrap()
        .with_policy(Policy::CLASSIC.with_conflicts(Conflicts::Align))
}

fn strs(attrs: &[DistAttr]) -> Vec<String> {
    attrs.iter().map(ToString::to_string).collect()
}

#[test]
fn a_mesh_dim_every_input_places_alike_stays() {
    // concat along the middle dim: `a1c`; both inputs shard c on mesh dim 1.
    let e = aligned("a1c,a1c->a1c");
    let mesh = Mesh::new(&[2, 2]).unwrap();
    let (x, y) = (attr(&[-1, -1, 1]), attr(&[-1, -1, 1]));
    let r = e
        .forward(
            &mesh,
            &[Spec::new(&[4, 3, 8], &x), Spec::new(&[4, 5, 8], &y)],
        )
        .unwrap();
    assert_eq!(strs(&r.inputs), ["[-1, -1, 1]", "[-1, -1, 1]"]);
    assert_eq!(strs(&r.outputs), ["[-1, -1, 1]"]);
}

#[test]
fn a_disputed_mesh_dim_goes_to_the_cheapest_axis() {
    // x shards a on mesh dim 0, y shards c on it: the classic merge would
    // give both (no clash on one axis), alignment picks one axis for both.
    // Cost of a: y does not shard a; its local volume is 4*6*(8/2) = 96,
    // times mesh dim 0's size 2 = 192. Cost of c: x's local volume is
    // (4/2)*3*8 = 48, times 2 = 96. c is cheaper.
    let e = aligned("a1c,a1c->a1c");
    let mesh = Mesh::new(&[2]).unwrap();
    let (x, y) = (attr(&[0, -1, -1]), attr(&[-1, -1, 0]));
    let r = e
        .forward(
            &mesh,
            &[Spec::new(&[4, 3, 8], &x), Spec::new(&[4, 6, 8], &y)],
        )
        .unwrap();
    assert_eq!(strs(&r.inputs), ["[-1, -1, 0]", "[-1, -1, 0]"]);
    assert_eq!(strs(&r.outputs), ["[-1, -1, 0]"]);
    // The classic merge keeps both shardings (and is no alignment).
    let classic = Einsum::new("a1c,a1c->a1c").unwrap();
    let r = classic
        .forward(
            &mesh,
            &[Spec::new(&[4, 3, 8], &x), Spec::new(&[4, 6, 8], &y)],
        )
        .unwrap();
    assert_eq!(strs(&r.outputs), ["[0, -1, -1]"]);
}

#[test]
fn an_axis_smaller_than_the_mesh_dim_is_never_chosen() {
    // a has extent 1 < 2 on every input: only c can take mesh dim 0, even
    // though a would be cheaper.
    let e = aligned("a1c,a1c->a1c");
    let mesh = Mesh::new(&[2]).unwrap();
    let (x, y) = (attr(&[-1, 0, -1]), attr(&[-1, -1, -1]));
    let r = e
        .forward(
            &mesh,
            &[Spec::new(&[1, 4, 8], &x), Spec::new(&[1, 6, 8], &y)],
        )
        .unwrap();
    assert_eq!(strs(&r.outputs), ["[-1, -1, 0]"]);
}

#[test]
fn a_shared_sum_partial_is_kept_and_a_lone_one_dropped() {
    let e = aligned("ab,ab->ab");
    let mesh = Mesh::new(&[2, 2]).unwrap();
    let p0 = Partial::over(MeshSet::EMPTY.with(0), ReduceType::Sum);
    let p01 = Partial::over(MeshSet::EMPTY.with(0).with(1), ReduceType::Sum);
    let (x, y) = (
        attr(&[-1, -1]).with_partial(p01),
        attr(&[-1, -1]).with_partial(p0),
    );
    let r = e
        .forward(&mesh, &[Spec::new(&[4, 8], &x), Spec::new(&[4, 8], &y)])
        .unwrap();
    // Mesh dim 0: both partial, kept. Mesh dim 1: x partial, y not: a
    // disputed mesh dim, which goes to the cheapest axis. Neither input
    // shards a or b, so both cost 2 * (4*8) * 2 = 128: the earlier axis, a.
    assert_eq!(r.inputs[0].partial, p0);
    assert_eq!(r.outputs[0].partial, p0);
    assert_eq!(r.outputs[0].to_string(), "[1, -1] partial{0: SUM}");
}

#[test]
fn grad_aligns_the_grad_ops_operands() {
    // Paddle's suite, concat_grad_263: three inputs and out_grad shard dims
    // 1 and 2 every which way; alignment settles on out_grad's layout.
    let mesh = Mesh::new(&[2, 2]).unwrap();
    let (x1, x2, x3, dy) = (
        attr(&[-1, 0, 1]),
        attr(&[-1, 1, 0]),
        attr(&[-1, -1, 0]),
        attr(&[-1, 1, 0]),
    );
    // concat along dim 0: that dim is `1`.
    let r = aligned("1bc,1bc,1bc->1bc")
        .grad(
            &mesh,
            &[
                Spec::new(&[16, 16, 16], &x1),
                Spec::new(&[4, 16, 16], &x2),
                Spec::new(&[2, 16, 16], &x3),
            ],
            &[Spec::new(&[22, 16, 16], &dy)],
        )
        .unwrap();
    assert_eq!(strs(&r.outputs), ["[-1, 1, 0]"; 3]);
    // The first-wins merge of docs/semantics.md §4 settles b and c by the
    // first operand's claims (x1 `[-1, 0, 1]`) and reshards the others to
    // them, where aligning picks the layout most operands already have.
    let first = Einsum::new("1bc,1bc,1bc->1bc")
        .unwrap()
        .grad(
            &mesh,
            &[
                Spec::new(&[16, 16, 16], &x1),
                Spec::new(&[4, 16, 16], &x2),
                Spec::new(&[2, 16, 16], &x3),
            ],
            &[Spec::new(&[22, 16, 16], &dy)],
        )
        .unwrap();
    assert_eq!(strs(&first.outputs), ["[-1, 0, 1]"; 3]);
    assert_eq!(strs(&first.inputs), ["[-1, 0, 1]"; 4]);
}
