//! Checking two-operand ops against the op itself: a [`Case`] draws the
//! operands' and output's shapes, a mesh and attrs; [`check_all`] runs
//! forward, backward and grad against a closure computing the op. Index
//! helpers for the gather / scatter family live here too.

use super::Tally;
use super::attr;
use super::mesh_shape;
use super::registry;
use super::specs;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use spmd_check::{EinsumCheck, Tensor};
use spmd_core::{Attrs, DistAttr, Mesh, ReduceType};

/// Shapes of a two-operand op, its output, and attrs for all of them on a
/// random mesh (inputs maybe `Sum` partial).
#[derive(Clone, Debug)]
pub struct Case {
    pub mesh: Vec<usize>,
    pub shapes: Vec<Vec<usize>>,
    pub out: Vec<usize>,
    pub inputs: Vec<DistAttr>,
    pub outputs: Vec<DistAttr>,
}

pub fn case(
    dims: impl Strategy<Value = (Vec<Vec<usize>>, Vec<usize>)>,
) -> impl Strategy<Value = Case> {
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

pub fn check_all(
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

pub fn tallies() -> [Tally; 3] {
    [Tally::new(), Tally::new(), Tally::new()]
}

pub fn assert_meaningful(what: &str, t: &[Tally; 3]) {
    t[0].assert_meaningful(&format!("{what} forward"));
    t[1].assert_meaningful(&format!("{what} backward"));
    t[2].assert_meaningful(&format!("{what} grad"));
}

// ------------------------------------------------- ops checked against kernels

/// Valid positions along an axis of extent `n`, varied over the index.
pub fn positions(shape: &[usize], n: usize) -> Tensor {
    Tensor::from_fn(shape, |i| {
        (i.iter()
            .enumerate()
            .map(|(d, &x)| (d + 2) * x)
            .sum::<usize>()
            % n) as f64
    })
}
