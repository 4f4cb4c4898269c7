//! Property tests of the op families added to reach Paddle 3.3.1's registry,
//! built through the registry, on random shapes, meshes and mappings:
//!
//! - `bmm`, against the einsum `bmk,bkn->bmn` (Paddle 3.3.1's matmul
//!   policy: role priority, co-sharded batches, divisibility trimming);
//! - `conv2d` and `conv2d_transpose` on 1×1 images with 1×1 filters, where
//!   the convolution is the einsum of its channels (`nc11,mc11->nm11`,
//!   `nc11,cm11->nm11`): sharded input channels must leave the output
//!   partial, and the grad, which keeps a partial output grad partial, must
//!   stay sound;
//! - `take_along_axis`, `put_along_axis` and `scatter` (forward, backward), `roll` and
//!   `gather_nd` (forward, backward, grad; gather_nd's grad partial over the
//!   index's sharded batch dims), `fused_gemm_epilogue` and `linear_v2`
//!   (a product plus a bias: forward, backward) and
//!   `fused_linear_param_grad_add` (accumulators: forward), `moe_combine`
//!   (forward, backward) and `add_n` (forward, backward, grad), against the
//!   ops themselves.
//!
//! Default: 48 cases per property; `SPMD_CHECK_CASES=N` for more.

mod common;

use std::sync::OnceLock;

use proptest::prelude::*;
use spmd_check::{
    EinsumCheck, Input, Tensor, Values, check_backward, check_forward, check_grad, einsum,
};
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

// ------------------------------------------------- ops checked against kernels

/// A shape of rank `ranks` with extents 1–4.
fn shape(ranks: std::ops::RangeInclusive<usize>) -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(1usize..=4, ranks)
}

/// `index` with its dim `axis` replaced by `to`.
fn with_dim(index: &[usize], axis: usize, to: usize) -> Vec<usize> {
    let mut i = index.to_vec();
    i[axis] = to;
    i
}

/// Every index of a tensor of this shape, in row-major order.
fn indices(shape: &[usize]) -> Vec<Vec<usize>> {
    let mut all = vec![Vec::new()];
    for &n in shape {
        all = all
            .into_iter()
            .flat_map(|i| {
                (0..n).map(move |x| {
                    let mut j = i.clone();
                    j.push(x);
                    j
                })
            })
            .collect();
    }
    all
}

/// Valid positions along an axis of extent `n`, varied over the index.
fn positions(shape: &[usize], n: usize) -> Tensor {
    Tensor::from_fn(shape, |i| {
        (i.iter()
            .enumerate()
            .map(|(d, &x)| (d + 2) * x)
            .sum::<usize>()
            % n) as f64
    })
}

#[test]
fn take_along_axis_against_the_op() {
    let t = tallies();
    let dims = (shape(1..=3), any::<prop::sample::Index>(), 1usize..=4).prop_map(|(x, axis, k)| {
        let axis = axis.index(x.len());
        let index = with_dim(&x, axis, k);
        (vec![x, index.clone()], index)
    });
    run(CASES, case(dims), |c| {
        let axis = (0..c.shapes[0].len())
            .find(|&d| c.shapes[0][d] != c.shapes[1][d])
            .unwrap_or(0);
        let rule = registry()
            .build("take_along_axis", &Attrs::new().with("axis", axis as i64))
            .unwrap();
        let mesh = Mesh::new(&c.mesh).unwrap();
        let x = Tensor::probe(&c.shapes[0], 1, Values::Integers);
        let index = positions(&c.shapes[1], c.shapes[0][axis]);
        let op = move |v: &[Tensor]| {
            vec![Tensor::from_fn(v[1].shape(), |i| {
                v[0].get(&with_dim(i, axis, v[1].get(i) as usize))
            })]
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
    run(CASES, case(dims), |c| {
        let axis = (0..c.shapes[0].len())
            .find(|&d| c.shapes[0][d] != c.shapes[1][d])
            .unwrap_or(0);
        let attrs = Attrs::new().with("axis", axis as i64).with("reduce", "add");
        let rule = registry().build("put_along_axis", &attrs).unwrap();
        let mesh = Mesh::new(&c.mesh).unwrap();
        let x = Tensor::probe(&c.shapes[0], 1, Values::Integers);
        let index = positions(&c.shapes[1], c.shapes[0][axis]);
        let value = Tensor::probe(&c.shapes[2], 3, Values::Integers);
        let op = move |v: &[Tensor]| {
            let mut out = v[0].clone();
            for p in indices(v[1].shape()) {
                let at = with_dim(&p, axis, v[1].get(&p) as usize);
                out.set(&at, out.get(&at) + v[2].get(&p));
            }
            vec![out]
        };
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
    run(CASES, case(dims), |c| {
        let rule = registry()
            .build("scatter", &Attrs::new().with("overwrite", true))
            .unwrap();
        let mesh = Mesh::new(&c.mesh).unwrap();
        let rows = c.shapes[0][0];
        let x = Tensor::probe(&c.shapes[0], 1, Values::Integers);
        // Distinct rows, so overwriting is order-independent.
        let index = Tensor::from_fn(&c.shapes[1], |i| (rows - 1 - i[0]) as f64);
        let updates = Tensor::probe(&c.shapes[2], 2, Values::Integers);
        // out[r, ..] = updates[i, ..] where index[i] = r, else x[r, ..].
        let op = |v: &[Tensor]| {
            let picked = |r: usize| (0..v[1].len()).find(|&i| v[1].get(&[i]) as usize == r);
            vec![Tensor::from_fn(v[0].shape(), |at| match picked(at[0]) {
                Some(i) => v[2].get(&with_dim(at, 0, i)),
                None => v[0].get(at),
            })]
        };
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
    run(CASES, (case(dims), any::<bool>()), |(c, flat)| {
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
        let roll = move |x: &Tensor, s: usize| {
            if flat {
                let n = x.len();
                let data: Vec<f64> = (0..n).map(|i| x.data()[(i + n - s % n) % n]).collect();
                Tensor::new(x.shape(), data)
            } else {
                let n = x.shape()[axis];
                Tensor::from_fn(x.shape(), |i| {
                    x.get(&with_dim(i, axis, (i[axis] + n - s % n) % n))
                })
            }
        };
        let op = move |v: &[Tensor]| vec![roll(&v[0], 1)];
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
            vec![roll(&dy[0], n.saturating_sub(1))]
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
    run(CASES, case(dims), |c| {
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
        // The coordinates of x that out[at] reads.
        let source = move |idx: &Tensor, at: &[usize]| -> Vec<usize> {
            let mut src: Vec<usize> = (0..k)
                .map(|d| {
                    let mut ii = at[..b].to_vec();
                    ii.push(d);
                    idx.get(&ii) as usize
                })
                .collect();
            src.extend_from_slice(&at[b..]);
            src
        };
        let op = move |v: &[Tensor]| {
            let mut shape = v[1].shape()[..b].to_vec();
            shape.extend_from_slice(&v[0].shape()[k..]);
            vec![Tensor::from_fn(&shape, |at| v[0].get(&source(&v[1], at)))]
        };
        // x is not read by the grad (its block may be laid out otherwise):
        // the indexed dims' extents are x's global ones.
        let indexed = xs[..k].to_vec();
        let grad = move |v: &[Tensor], _: &[Tensor], dy: &[Tensor]| {
            let mut shape = indexed.clone();
            shape.extend_from_slice(&dy[0].shape()[b..]);
            let mut g = Tensor::full(&shape, 0.0);
            for at in indices(dy[0].shape()) {
                let src = source(&v[1], &at);
                g.set(&src, g.get(&src) + dy[0].get(&at));
            }
            vec![g]
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

/// `a + b` with `b` broadcast from the right (a bias over the last dims).
fn add_bias(a: &Tensor, b: &Tensor) -> Tensor {
    let skip = a.rank() - b.rank();
    Tensor::from_fn(a.shape(), |i| a.get(i) + b.get(&i[skip..]))
}

#[test]
fn gemm_with_bias_against_the_op() {
    let t = tallies();
    let dims = (1usize..=4, 1usize..=4, 1usize..=4)
        .prop_map(|(m, k, n)| (vec![vec![m, k], vec![k, n], vec![n]], vec![m, n]));
    run(CASES, (case(dims), any::<bool>()), |(c, linear_v2)| {
        // fused_gemm_epilogue requires the bias partial where the product
        // is; linear_v2 never splits k and drops the bias's own sharding.
        let rule = if linear_v2 {
            registry().build("linear_v2", &Attrs::new()).unwrap()
        } else {
            registry()
                .build("fused_gemm_epilogue", &Attrs::new())
                .unwrap()
        };
        let mesh = Mesh::new(&c.mesh).unwrap();
        let values: Vec<Tensor> = c
            .shapes
            .iter()
            .enumerate()
            .map(|(i, s)| Tensor::probe(s, i as u64 + 1, Values::Integers))
            .collect();
        let op = |v: &[Tensor]| {
            let p = einsum("mk,kn->mn", &[&v[0], &v[1]], ReduceType::Sum).unwrap();
            vec![add_bias(&p[0], &v[2])]
        };
        let inputs: Vec<Input> = values
            .iter()
            .zip(&c.inputs)
            .map(|(v, a)| Input::new(v.clone(), a.clone()))
            .collect();
        t[0].record(check_forward(&*rule, &mesh, &inputs, op))?;
        let outs: Vec<DistAttr> = c
            .outputs
            .iter()
            .map(|a| DistAttr::new(a.dims_mapping.clone()))
            .collect();
        t[1].record(check_backward(&*rule, &mesh, &values, &outs, op))?;
        Ok(())
    });
    t[0].assert_meaningful("fused_gemm_epilogue / linear_v2 forward");
    t[1].assert_meaningful("fused_gemm_epilogue / linear_v2 backward");
}

#[test]
fn param_grad_accumulation_against_the_op() {
    let t = tallies();
    let dims = (1usize..=3, 1usize..=3, 1usize..=4, 1usize..=4).prop_map(|(b, s, k, n)| {
        (
            vec![vec![b, s, k], vec![b, s, n], vec![k, n], vec![n]],
            vec![k, n],
        )
    });
    run(CASES, case(dims), |c| {
        let rule = registry()
            .build("fused_linear_param_grad_add", &Attrs::new())
            .unwrap();
        let mesh = Mesh::new(&c.mesh).unwrap();
        let values: Vec<Tensor> = c
            .shapes
            .iter()
            .enumerate()
            .map(|(i, s)| Tensor::probe(s, i as u64 + 1, Values::Integers))
            .collect();
        let op = |v: &[Tensor]| {
            let dw = einsum("bsk,bsn->kn", &[&v[0], &v[1]], ReduceType::Sum).unwrap();
            let db = einsum("bsn->n", &[&v[1]], ReduceType::Sum).unwrap();
            vec![add_bias(&v[2], &dw[0]), add_bias(&v[3], &db[0])]
        };
        let inputs: Vec<Input> = values
            .iter()
            .zip(&c.inputs)
            .map(|(v, a)| Input::new(v.clone(), a.clone()))
            .collect();
        t[0].record(check_forward(&*rule, &mesh, &inputs, op))?;
        Ok(())
    });
    t[0].assert_meaningful("fused_linear_param_grad_add forward");
}

#[test]
fn moe_combine_against_the_op() {
    let t = tallies();
    // x [rows, h], combine_weights and scatter_index [s, k].
    let dims = (1usize..=6, 1usize..=4, 1usize..=3, 1usize..=3)
        .prop_map(|(rows, h, s, k)| (vec![vec![rows, h], vec![s, k], vec![s, k]], vec![s, h]));
    run(CASES, case(dims), |c| {
        let rule = registry().build("moe_combine", &Attrs::new()).unwrap();
        let mesh = Mesh::new(&c.mesh).unwrap();
        let rows = c.shapes[0][0];
        let x = Tensor::probe(&c.shapes[0], 1, Values::Integers);
        let weights = Tensor::probe(&c.shapes[1], 2, Values::Integers);
        let index = Tensor::from_fn(&c.shapes[2], |i| ((3 * i[0] + i[1]) % rows) as f64);
        // y[s, h] = Σ_k weights[s, k] · x[index[s, k], h]
        let op = |v: &[Tensor]| {
            let (s, k) = (v[1].shape()[0], v[1].shape()[1]);
            vec![Tensor::from_fn(&[s, v[0].shape()[1]], |i| {
                (0..k)
                    .map(|j| {
                        v[1].get(&[i[0], j]) * v[0].get(&[v[2].get(&[i[0], j]) as usize, i[1]])
                    })
                    .sum()
            })]
        };
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

#[test]
fn add_n_against_the_op() {
    let t = tallies();
    let dims = (shape(0..=3), 1usize..=3).prop_map(|(s, n)| (vec![s.clone(); n], s));
    run(CASES, case(dims), |c| {
        let rule = registry().build("add_n", &Attrs::new()).unwrap();
        let mesh = Mesh::new(&c.mesh).unwrap();
        let values: Vec<Tensor> = c
            .shapes
            .iter()
            .enumerate()
            .map(|(i, s)| Tensor::probe(s, i as u64 + 1, Values::Integers))
            .collect();
        let op = |v: &[Tensor]| {
            vec![Tensor::from_fn(v[0].shape(), |i| {
                v.iter().map(|x| x.get(i)).sum()
            })]
        };
        let inputs: Vec<Input> = values
            .iter()
            .zip(&c.inputs)
            .map(|(v, a)| Input::new(v.clone(), a.clone()))
            .collect();
        t[0].record(check_forward(&*rule, &mesh, &inputs, op))?;
        let outs: Vec<DistAttr> = c
            .outputs
            .iter()
            .map(|a| DistAttr::new(a.dims_mapping.clone()))
            .collect();
        t[1].record(check_backward(&*rule, &mesh, &values, &outs, op))?;
        let grad = |x: &[Tensor], _: &[Tensor], dy: &[Tensor]| vec![dy[0].clone(); x.len()];
        t[2].record(check_grad(&*rule, &mesh, &inputs, &c.outputs, op, grad))?;
        Ok(())
    });
    assert_meaningful("add_n", &t);
}
