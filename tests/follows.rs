//! `merge(follows(..))`: inputs left out of the merges, asked for the merged layout.

use spmd_core::SpmdRuleExt;
use spmd_core::{DistAttr, Mesh, Spec, spmd_rule};

fn attr(m: &[i64]) -> DistAttr {
    DistAttr::from_paddle(m).unwrap()
}

/// out[b, s] = x[b, s] * angles[s, ...]: the angles follow x.
#[spmd_rule(
    einsum = "bs,s->bs",
    inputs(x, angles),
    outputs(out),
    merge(follows(angles))
)]
struct Rotate {}

#[spmd_rule(einsum = "bs,s->bs", inputs(x, angles), outputs(out))]
struct RotateMerged {}

#[test]
fn a_follower_does_not_vote_in_forward() {
    let mesh = Mesh::new(&[2, 2]).unwrap();
    // x leaves s replicated; the angles shard it on mesh dim 1.
    let (x, angles) = (attr(&[0, -1]), attr(&[1]));
    let specs = [Spec::new(&[4, 8], &x), Spec::new(&[8], &angles)];
    let merged = RotateMerged {}.forward(&mesh, &specs).unwrap();
    assert_eq!(merged.outputs[0].to_string(), "[0, 1]");
    let r = Rotate {}.forward(&mesh, &specs).unwrap();
    assert_eq!(r.inputs[1].to_string(), "[-1]");
    assert_eq!(r.outputs[0].to_string(), "[0, -1]");
    // Nor does a follower clash with the others: it takes their layout.
    // (Merged, the clash settles by the first claim, x's, and the angles
    // are resharded the same way.)
    let angles = attr(&[0]);
    let x = attr(&[-1, 1]);
    let specs = [Spec::new(&[4, 8], &x), Spec::new(&[8], &angles)];
    let r = Rotate {}.forward(&mesh, &specs).unwrap();
    assert_eq!(r.inputs[1].to_string(), "[1]");
    let merged = RotateMerged {}.forward(&mesh, &specs).unwrap();
    assert_eq!(merged.inputs[1].to_string(), "[1]");
}

#[test]
fn a_follower_does_not_vote_in_grad() {
    let mesh = Mesh::new(&[2]).unwrap();
    let (x, angles, dy) = (attr(&[-1, -1]), attr(&[0]), attr(&[-1, -1]));
    let r = Rotate {}
        .grad(
            &mesh,
            &[Spec::new(&[4, 8], &x), Spec::new(&[8], &angles)],
            &[Spec::new(&[4, 8], &dy)],
        )
        .unwrap();
    let req: Vec<String> = r.inputs.iter().map(ToString::to_string).collect();
    assert_eq!(req, ["[-1, -1]", "[-1]", "[-1, -1]"]);
}
