//! Indexing ops against their kernels: `gather` (0-D or 1-D index),
//! `index_select`, `one_hot`, `take_along_axis`, `put_along_axis`,
//! `scatter`, `roll`, `gather_nd` (its grad partial over the index's sharded
//! batch dims) and `moe_combine`. A gather's ids count global positions, so
//! a rule that leaves the gathered dim sharded meets the wrong block.
//!
//! Default: 48 cases per property; `SPMD_CHECK_CASES=N` for more.

mod common;

use proptest::prelude::*;
use spmd_check::{Input, Tensor, Values, check_backward, check_forward, check_grad};
use spmd_core::{Attrs, DistAttr, Mesh};

use common::kernels::indexing::{
    gather, gather_grad, gather_nd, gather_nd_grad, moe_combine, one_hot, put_along_axis_add, roll,
    scatter_rows, take_along_axis,
};
use common::kernels::with_dim;
use common::op_check::{assert_meaningful, positions, tallies};
use common::slot_check::{axis, check_op, free, probe};
use common::{CASES, build, registry, run, shape};
use common::{op_check, slot_check};

#[test]
fn take_along_axis_against_the_op() {
    let t = tallies();
    let dims = (shape(1..=3), any::<prop::sample::Index>(), 1usize..=4).prop_map(|(x, axis, k)| {
        let axis = axis.index(x.len());
        let index = with_dim(&x, axis, k);
        (vec![x, index.clone()], index)
    });
    run(CASES, op_check::case(dims), |c| {
        let axis = (0..c.shapes[0].len())
            .find(|&d| c.shapes[0][d] != c.shapes[1][d])
            .unwrap_or(0);
        let rule = registry()
            .build("take_along_axis", &Attrs::new().with("axis", axis as i64))
            .unwrap();
        let mesh = Mesh::new(&c.mesh).unwrap();
        let x = Tensor::probe(&c.shapes[0], 1, Values::Integers);
        let index = positions(&c.shapes[1], c.shapes[0][axis]);
        let op = move |v: &[Tensor]| vec![take_along_axis(&v[0], &v[1], axis)];
        let inputs = [
            Input::new(x.clone(), c.inputs[0].clone()),
            Input::new(index.clone(), c.inputs[1].clone()),
        ];
        t[0].record(check_forward(&*rule, &mesh, &inputs, op))?;
        let outs: Vec<DistAttr> = c
            .outputs
            .iter()
            .map(|a| DistAttr::new(a.dims_mapping.clone()))
            .collect();
        t[1].record(check_backward(&*rule, &mesh, &[x, index], &outs, op))?;
        Ok(())
    });
    t[0].assert_meaningful("take_along_axis forward");
    t[1].assert_meaningful("take_along_axis backward");
}

/// `put_along_axis` with `partial(reduce = "add")`: `out = x`, then each `value[p]`
/// added at `p` with its axis coordinate replaced by `index[p]`. (Added, not
/// assigned: a sum does not depend on the order colliding positions are
/// visited in.)
#[test]
fn put_along_axis_against_the_op() {
    let t = tallies();
    let dims = (shape(1..=3), any::<prop::sample::Index>(), 1usize..=4).prop_map(|(x, axis, k)| {
        let axis = axis.index(x.len());
        let index = with_dim(&x, axis, k);
        (vec![x.clone(), index.clone(), index], x)
    });
    run(CASES, op_check::case(dims), |c| {
        let axis = (0..c.shapes[0].len())
            .find(|&d| c.shapes[0][d] != c.shapes[1][d])
            .unwrap_or(0);
        let attrs = Attrs::new().with("axis", axis as i64).with("reduce", "add");
        let rule = registry().build("put_along_axis", &attrs).unwrap();
        let mesh = Mesh::new(&c.mesh).unwrap();
        let x = Tensor::probe(&c.shapes[0], 1, Values::Integers);
        let index = positions(&c.shapes[1], c.shapes[0][axis]);
        let value = Tensor::probe(&c.shapes[2], 3, Values::Integers);
        let op = move |v: &[Tensor]| vec![put_along_axis_add(&v[0], &v[1], &v[2], axis)];
        let inputs = [
            Input::new(x.clone(), c.inputs[0].clone()),
            Input::new(index.clone(), c.inputs[1].clone()),
            Input::new(value.clone(), c.inputs[2].clone()),
        ];
        t[0].record(check_forward(&*rule, &mesh, &inputs, op))?;
        let outs: Vec<DistAttr> = c
            .outputs
            .iter()
            .map(|a| DistAttr::new(a.dims_mapping.clone()))
            .collect();
        t[1].record(check_backward(&*rule, &mesh, &[x, index, value], &outs, op))?;
        Ok(())
    });
    t[0].assert_meaningful("put_along_axis forward");
    t[1].assert_meaningful("put_along_axis backward");
}

#[test]
fn scatter_against_the_op() {
    let t = tallies();
    let dims = (shape(1..=3), 0usize..=4).prop_map(|(x, k)| {
        let k = k.min(x[0]);
        let updates = with_dim(&x, 0, k);
        (vec![x.clone(), vec![k], updates], x)
    });
    run(CASES, op_check::case(dims), |c| {
        let rule = registry()
            .build("scatter", &Attrs::new().with("overwrite", true))
            .unwrap();
        let mesh = Mesh::new(&c.mesh).unwrap();
        let rows = c.shapes[0][0];
        let x = Tensor::probe(&c.shapes[0], 1, Values::Integers);
        // Distinct rows, so overwriting is order-independent.
        let index = Tensor::from_fn(&c.shapes[1], |i| (rows - 1 - i[0]) as f64);
        let updates = Tensor::probe(&c.shapes[2], 2, Values::Integers);
        let op = |v: &[Tensor]| vec![scatter_rows(&v[0], &v[1], &v[2])];
        let inputs = [
            Input::new(x.clone(), c.inputs[0].clone()),
            Input::new(index.clone(), c.inputs[1].clone()),
            Input::new(updates.clone(), c.inputs[2].clone()),
        ];
        t[0].record(check_forward(&*rule, &mesh, &inputs, op))?;
        let outs: Vec<DistAttr> = c
            .outputs
            .iter()
            .map(|a| DistAttr::new(a.dims_mapping.clone()))
            .collect();
        t[1].record(check_backward(
            &*rule,
            &mesh,
            &[x, index, updates],
            &outs,
            op,
        ))?;
        Ok(())
    });
    t[0].assert_meaningful("scatter forward");
    t[1].assert_meaningful("scatter backward");
}

#[test]
fn roll_against_the_op() {
    let t = tallies();
    let dims = shape(1..=3).prop_map(|x| (vec![x.clone()], x));
    run(CASES, (op_check::case(dims), any::<bool>()), |(c, flat)| {
        let rank = c.shapes[0].len();
        let axis = rank - 1;
        let shift = 1i64;
        let attrs = if flat {
            Attrs::new().with("shifts", vec![shift])
        } else {
            Attrs::new()
                .with("shifts", vec![shift])
                .with("axis", vec![axis as i64])
        };
        let rule = registry().build("roll", &attrs).unwrap();
        let mesh = Mesh::new(&c.mesh).unwrap();
        let along = (!flat).then_some(axis);
        let op = move |v: &[Tensor]| vec![roll(&v[0], 1, along)];
        let x = Tensor::probe(&c.shapes[0], 1, Values::Integers);
        let inputs = [Input::new(x.clone(), c.inputs[0].clone())];
        t[0].record(check_forward(&*rule, &mesh, &inputs, op))?;
        let outs: Vec<DistAttr> = c
            .outputs
            .iter()
            .map(|a| DistAttr::new(a.dims_mapping.clone()))
            .collect();
        t[1].record(check_backward(
            &*rule,
            &mesh,
            std::slice::from_ref(&x),
            &outs,
            op,
        ))?;
        // The grad rolls the output grad back (x is read for nothing: its
        // block may be laid out otherwise, even empty).
        let grad = move |_: &[Tensor], _: &[Tensor], dy: &[Tensor]| {
            let n = if flat {
                dy[0].len()
            } else {
                dy[0].shape()[axis]
            };
            vec![roll(&dy[0], n.saturating_sub(1), along)]
        };
        t[2].record(check_grad(&*rule, &mesh, &inputs, &c.outputs, op, grad))?;
        Ok(())
    });
    assert_meaningful("roll", &t);
}

#[test]
fn gather_nd_against_the_op() {
    let t = tallies();
    // x, then the index's batch dims and its tuple length k <= rank of x.
    let dims =
        (shape(1..=3), shape(0..=2), any::<prop::sample::Index>()).prop_map(|(x, batch, k)| {
            let k = 1 + k.index(x.len());
            let mut index = batch.clone();
            index.push(k);
            let mut out = batch;
            out.extend_from_slice(&x[k..]);
            (vec![x, index], out)
        });
    run(CASES, op_check::case(dims), |c| {
        let rule = registry().build("gather_nd", &Attrs::new()).unwrap();
        let mesh = Mesh::new(&c.mesh).unwrap();
        let (xs, is) = (c.shapes[0].clone(), c.shapes[1].clone());
        let (k, b) = (is[is.len() - 1], is.len() - 1);
        let x = Tensor::probe(&xs, 1, Values::Integers);
        let index = Tensor::from_fn(&is, |i| {
            let d = i[b];
            let seed: usize = i[..b].iter().enumerate().map(|(j, &v)| (j + 3) * v).sum();
            ((seed + d) % xs[d]) as f64
        });
        let op = |v: &[Tensor]| vec![gather_nd(&v[0], &v[1])];
        // x is not read by the grad (its block may be laid out otherwise):
        // the indexed dims' extents are x's global ones.
        let indexed = xs[..k].to_vec();
        let grad = move |v: &[Tensor], _: &[Tensor], dy: &[Tensor]| {
            vec![gather_nd_grad(&indexed, &v[1], &dy[0])]
        };
        let inputs = [
            Input::new(x.clone(), c.inputs[0].clone()),
            Input::new(index.clone(), c.inputs[1].clone()),
        ];
        t[0].record(check_forward(&*rule, &mesh, &inputs, op))?;
        let outs: Vec<DistAttr> = c
            .outputs
            .iter()
            .map(|a| DistAttr::new(a.dims_mapping.clone()))
            .collect();
        t[1].record(check_backward(&*rule, &mesh, &[x, index], &outs, op))?;
        t[2].record(check_grad(&*rule, &mesh, &inputs, &c.outputs, op, grad))?;
        Ok(())
    });
    assert_meaningful("gather_nd", &t);
}

#[test]
fn moe_combine_against_the_op() {
    let t = tallies();
    // x [rows, h], combine_weights and scatter_index [s, k].
    let dims = (1usize..=6, 1usize..=4, 1usize..=3, 1usize..=3)
        .prop_map(|(rows, h, s, k)| (vec![vec![rows, h], vec![s, k], vec![s, k]], vec![s, h]));
    run(CASES, op_check::case(dims), |c| {
        let rule = registry().build("moe_combine", &Attrs::new()).unwrap();
        let mesh = Mesh::new(&c.mesh).unwrap();
        let rows = c.shapes[0][0];
        let x = Tensor::probe(&c.shapes[0], 1, Values::Integers);
        let weights = Tensor::probe(&c.shapes[1], 2, Values::Integers);
        let index = Tensor::from_fn(&c.shapes[2], |i| ((3 * i[0] + i[1]) % rows) as f64);
        let op = |v: &[Tensor]| vec![moe_combine(&v[0], &v[1], &v[2])];
        let inputs = [
            Input::new(x.clone(), c.inputs[0].clone()),
            Input::new(weights.clone(), c.inputs[1].clone()),
            Input::new(index.clone(), c.inputs[2].clone()),
        ];
        t[0].record(check_forward(&*rule, &mesh, &inputs, op))?;
        let outs: Vec<DistAttr> = c
            .outputs
            .iter()
            .map(|a| DistAttr::new(a.dims_mapping.clone()))
            .collect();
        t[1].record(check_backward(
            &*rule,
            &mesh,
            &[x, weights, index],
            &outs,
            op,
        ))?;
        Ok(())
    });
    t[0].assert_meaningful("moe_combine forward");
    t[1].assert_meaningful("moe_combine backward");
}

// --------------------------------------------------- gather, index_select

#[derive(Clone, Debug)]
struct GatherCase {
    x: Vec<usize>,
    axis: (i64, usize),
    /// The ids (one for a 0-D index).
    index: Vec<usize>,
    /// A 0-D index.
    scalar: bool,
    l: slot_check::Layout,
}

fn gather_case(allow_scalar: bool) -> impl Strategy<Value = GatherCase> {
    // index_select's cases are rank 2 or more, their output grads sharded
    // off the gathered dim: its grad replicates the gathered axis (x laid
    // out as its grad), so only the other dims split work there.
    (
        shape(if allow_scalar { 1..=3 } else { 2..=3 }),
        prop::bool::weighted(if allow_scalar { 0.25 } else { 0.0 }),
    )
        .prop_flat_map(|(x, scalar)| {
            let r = x.len();
            (Just((x, scalar)), axis(r), 1usize..=4)
        })
        .prop_flat_map(|((x, scalar), axis, k)| {
            let n = x[axis.1];
            let k = if scalar { 1 } else { k };
            (Just((x, scalar, axis)), prop::collection::vec(0..n, k))
        })
        .prop_flat_map(move |((x, scalar, axis), index)| {
            let mut out = x.clone();
            let index_shape: Vec<usize> = if scalar { vec![] } else { vec![index.len()] };
            if scalar {
                out.remove(axis.1);
            } else {
                out[axis.1] = index.len();
            }
            let ins = vec![
                (x.clone(), free(&x, &[axis.1])),
                (index_shape.clone(), free(&index_shape, &[])),
            ];
            let gathered: &[usize] = if allow_scalar { &[] } else { &[axis.1] };
            let outs = vec![(out.clone(), free(&out, gathered))];
            (
                Just((x, axis, index, scalar)),
                slot_check::layout(ins, outs),
            )
        })
        .prop_map(|((x, axis, index, scalar), l)| GatherCase {
            x,
            axis,
            index,
            scalar,
            l,
        })
}

fn gather_property(name: &str, allow_scalar: bool) {
    let d = slot_check::Dirs::new();
    run(CASES, gather_case(allow_scalar), |c| {
        let rule = build(name, &Attrs::new().with("axis", c.axis.0));
        let (axis, n) = (c.axis.1, c.x[c.axis.1]);
        let ids: Vec<f64> = c.index.iter().map(|&k| k as f64).collect();
        let index = if c.scalar {
            Tensor::new(&[], ids)
        } else {
            Tensor::new(&[ids.len()], ids)
        };
        let op = |v: &[Tensor]| vec![gather(&v[0], &v[1], axis)];
        // The grad never reads x: x's extent along the axis is global.
        let grad =
            |v: &[Tensor], _: &[Tensor], dy: &[Tensor]| vec![gather_grad(&dy[0], &v[1], axis, n)];
        let values = [probe(&c.x, 1), index];
        check_op(&d, &*rule, &c.l, &values, &op, Some(&grad))
    });
    d.assert_meaningful(name, true);
}

#[test]
fn gather_against_the_kernel() {
    gather_property("gather", true);
}

#[test]
fn index_select_against_the_kernel() {
    gather_property("index_select", false);
}

// --------------------------------------------------------------- one_hot

#[derive(Clone, Debug)]
struct OneHotCase {
    x: Vec<usize>,
    classes: usize,
    ids: Vec<usize>,
    l: slot_check::Layout,
}

fn one_hot_case() -> impl Strategy<Value = OneHotCase> {
    (shape(1..=3), 1usize..=4)
        .prop_flat_map(|(x, classes)| {
            let n: usize = x.iter().product();
            (Just((x, classes)), prop::collection::vec(0..classes, n))
        })
        .prop_flat_map(|((x, classes), ids)| {
            let mut out = x.clone();
            out.push(classes);
            let ins = vec![(x.clone(), free(&x, &[]))];
            let outs = vec![(out.clone(), free(&out, &[x.len()]))];
            (Just((x, classes, ids)), slot_check::layout(ins, outs))
        })
        .prop_map(|((x, classes, ids), l)| OneHotCase { x, classes, ids, l })
}

/// The ids have no gradient: no grad property.
#[test]
fn one_hot_against_the_kernel() {
    static D: slot_check::Dirs = slot_check::Dirs::new();
    run(CASES, one_hot_case(), |c| {
        let rule = build(
            "one_hot",
            &Attrs::new().with("num_classes", c.classes as i64),
        );
        let classes = c.classes;
        let ids = Tensor::new(&c.x, c.ids.iter().map(|&k| k as f64).collect());
        let op = |v: &[Tensor]| vec![one_hot(&v[0], classes)];
        check_op(&D, &*rule, &c.l, &[ids], &op, None)
    });
    D.assert_meaningful("one_hot", false);
}
