//! Property tests of the op families added to reach Paddle 3.3.1's registry,
//! built through the registry, on random shapes, meshes and mappings:
//!
//! - `bmm`, against the einsum `bmk,bkn->bmn` (Paddle 3.3.1's matmul
//!   policy: role priority, co-sharded batches, divisibility trimming);
//! - `conv2d` and `conv2d_transpose` on 1×1 images with 1×1 filters, where
//!   the convolution is the einsum of its channels (`nc11,mc11->nm11`,
//!   `nc11,cm11->nm11`): sharded input channels must leave the output
//!   partial, and the grad, which keeps a partial output grad partial, must
//!   stay sound.
//!
//! Default: 48 cases per property; `SPMD_CHECK_CASES=N` for more.

mod common;

use std::sync::OnceLock;

use proptest::prelude::*;
use spmd_check::EinsumCheck;
use spmd_core::{Attrs, DistAttr, Mesh, ReduceType, Registry, Spec};

use common::{Tally, attr, mesh_shape, run};

const CASES: u32 = 48;

fn registry() -> &'static Registry {
    static R: OnceLock<Registry> = OnceLock::new();
    R.get_or_init(spmd_ops::builtins)
}

fn specs<'a>(shapes: &'a [Vec<usize>], attrs: &'a [DistAttr]) -> Vec<Spec<'a>> {
    shapes
        .iter()
        .zip(attrs)
        .map(|(s, a)| Spec::new(s, a))
        .collect()
}

/// Shapes of a two-operand op, its output, and attrs for all of them on a
/// random mesh (inputs maybe `Sum` partial).
#[derive(Clone, Debug)]
struct Case {
    mesh: Vec<usize>,
    shapes: Vec<Vec<usize>>,
    out: Vec<usize>,
    inputs: Vec<DistAttr>,
    outputs: Vec<DistAttr>,
}

fn case(dims: impl Strategy<Value = (Vec<Vec<usize>>, Vec<usize>)>) -> impl Strategy<Value = Case> {
    (dims, mesh_shape()).prop_flat_map(|((shapes, out), mesh)| {
        let m = mesh.len();
        let ins: Vec<_> = shapes
            .iter()
            .map(|s| attr(s.len(), m, true, ReduceType::Sum).boxed())
            .collect();
        let outs = vec![attr(out.len(), m, true, ReduceType::Sum).boxed()];
        (Just((mesh, shapes, out)), ins, outs).prop_map(|((mesh, shapes, out), inputs, outputs)| {
            Case {
                mesh,
                shapes,
                out,
                inputs,
                outputs,
            }
        })
    })
}

fn check_all(
    name: &str,
    attrs: &Attrs,
    notation: &str,
    c: &Case,
    t: &[Tally; 3],
) -> Result<(), TestCaseError> {
    let rule = registry().build(name, attrs).unwrap();
    let mesh = Mesh::new(&c.mesh).unwrap();
    let check = EinsumCheck::new(notation).unwrap();
    t[0].record(check.forward(&*rule, &mesh, &specs(&c.shapes, &c.inputs)))?;
    let shapes: Vec<&[usize]> = c.shapes.iter().map(Vec::as_slice).collect();
    // Backward is given outputs without partial status.
    let outs: Vec<DistAttr> = c
        .outputs
        .iter()
        .map(|a| DistAttr::new(a.dims_mapping.clone()))
        .collect();
    t[1].record(check.backward(&*rule, &mesh, &shapes, &outs))?;
    // The grad is given the output grads as drawn, partial included.
    t[2].record(check.grad(&*rule, &mesh, &specs(&c.shapes, &c.inputs), &c.outputs))?;
    let _ = &c.out;
    Ok(())
}

fn tallies() -> [Tally; 3] {
    [Tally::new(), Tally::new(), Tally::new()]
}

fn assert_meaningful(what: &str, t: &[Tally; 3]) {
    t[0].assert_meaningful(&format!("{what} forward"));
    t[1].assert_meaningful(&format!("{what} backward"));
    t[2].assert_meaningful(&format!("{what} grad"));
}

#[test]
fn bmm_forward_backward_grad() {
    let t = tallies();
    let dims = (1usize..=4, 1usize..=4, 1usize..=4, 1usize..=4)
        .prop_map(|(b, m, k, n)| (vec![vec![b, m, k], vec![b, k, n]], vec![b, m, n]));
    run(CASES, case(dims), |c| {
        check_all("bmm", &Attrs::new(), "bmk,bkn->bmn", &c, &t)
    });
    assert_meaningful("bmm", &t);
}

#[test]
fn conv2d_on_single_pixels_is_the_channel_einsum() {
    let t = tallies();
    let dims = (1usize..=4, 1usize..=4, 1usize..=4)
        .prop_map(|(n, c, m)| (vec![vec![n, c, 1, 1], vec![m, c, 1, 1]], vec![n, m, 1, 1]));
    run(CASES, case(dims), |c| {
        check_all("conv2d", &Attrs::new(), "nc11,mc11->nm11", &c, &t)
    });
    assert_meaningful("conv2d", &t);
}

#[test]
fn conv2d_transpose_on_single_pixels_is_the_channel_einsum() {
    let t = tallies();
    let dims = (1usize..=4, 1usize..=4, 1usize..=4)
        .prop_map(|(n, c, m)| (vec![vec![n, c, 1, 1], vec![c, m, 1, 1]], vec![n, m, 1, 1]));
    run(CASES, case(dims), |c| {
        check_all("conv2d_transpose", &Attrs::new(), "nc11,cm11->nm11", &c, &t)
    });
    assert_meaningful("conv2d_transpose", &t);
}
