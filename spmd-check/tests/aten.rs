//! ATen's rules of their own (`spmd-ops`'s `aten` module), checked against
//! the ops themselves on random shapes, meshes and mappings, forward,
//! backward and grad: `aten.addmm` (a bias added to a product, 1-d or 2-d),
//! `aten.expand` (new and size-1 dims broadcast), `aten.mean.dim` (an
//! average, `Avg` partials), `aten.slice.Tensor` (global positions along
//! the sliced dim), `aten.native_layer_norm` (Paddle's layer_norm kernel,
//! statistics in ATen's form), `aten.scaled_dot_product_attention` (the
//! flash kernel in ATen's `[b, h, s, d]` layout, grouped-query heads, a
//! per-head or broadcast mask), `aten.histc` (counts that add up over
//! blocks, or a range the data sets), `aten.bincount` (counts or weights
//! that add up over blocks), `aten.var.correction` and
//! transformers' `grouped_mm_fallback` (experts' products over row groups),
//! `aten.constant_pad_nd`, `aten.convolution` (one group, depthwise, or
//! channels whole), `aten.slice_scatter`, `aten.scatter.value` and
//! `aten.scatter.src`, `aten.index_put` and `aten.scatter_add` (into a
//! destination split on its other dims, accumulating or not), `aten.max.dim`
//! (values and global positions),
//! `aten.amax` (`Max` partials), `aten.clamp.Tensor` (with its grad) and
//! `aten.view_as_complex`/`aten.view_as_real` (a complex number stood in
//! by a real one that keeps its parts apart). The ATen names that reuse a library rule
//! are checked with that rule (the other files of this directory); whole
//! exported models run in `spmd-graph/tests/hf_graphs.rs`. Backward is given
//! partial outputs too. The grad ops of addmm, expand, mean.dim and
//! slice.Tensor are checked against their kernels; those of
//! native_layer_norm and attention, and `aten.embedding` (the notation of
//! the checked `embedding`, operands swapped: a row-split table is the
//! one-hot einsum `products.rs` checks), are not yet.
//!
//! Default: 48 cases per property; `SPMD_CHECK_CASES=N` for more.

mod common;

use proptest::prelude::*;
use spmd_check::{Input, Tensor, Values, check_backward, check_forward, check_grad, einsum};
use spmd_core::{Attrs, DimsMapping, DistAttr, Mesh, ReduceType, Sharding};

use common::kernels::attention::attention;
use common::kernels::norm::{EPSILON, layer_norm};
use common::kernels::{each_index, with_dim};
use common::nn::small;
use common::op_check::{self, assert_meaningful, tallies};
use common::{CASES, registry, run, shape};

/// A grad kernel: (inputs, outputs, output grads) to input grads.
type Grad = dyn Fn(&[Tensor], &[Tensor], &[Tensor]) -> Vec<Tensor>;

/// Forward from the drawn inputs, backward from the drawn outputs (partial
/// status included), both against `op`; with `grad`, the grad op too.
fn check(
    name: &str,
    attrs: &Attrs,
    c: &op_check::Case,
    values: &[Tensor],
    op: &dyn Fn(&[Tensor]) -> Vec<Tensor>,
    grad: Option<&Grad>,
    t: &[common::Tally; 3],
) -> Result<(), TestCaseError> {
    let rule = registry().build(name, attrs).unwrap();
    let mesh = Mesh::new(&c.mesh).unwrap();
    let inputs: Vec<Input> = values
        .iter()
        .zip(&c.inputs)
        .map(|(v, a)| Input::new(v.clone(), a.clone()))
        .collect();
    t[0].record(check_forward(&*rule, &mesh, &inputs, op))?;
    // Backward is given the outputs as drawn, partial status included: it
    // must explain a partial output by a split contraction or drop it.
    t[1].record(check_backward(&*rule, &mesh, values, &c.outputs, op))?;
    // The grad op, given the output grads as drawn (partial included).
    if let Some(grad) = grad {
        t[2].record(check_grad(&*rule, &mesh, &inputs, &c.outputs, op, grad))?;
    }
    Ok(())
}

fn probes(shapes: &[Vec<usize>]) -> Vec<Tensor> {
    shapes
        .iter()
        .enumerate()
        .map(|(i, s)| Tensor::probe(s, i as u64 + 1, Values::Integers))
        .collect()
}

#[test]
fn addmm_against_the_op() {
    let t = tallies();
    let dims = (1usize..=4, 1usize..=4, 1usize..=4, any::<bool>()).prop_map(|(m, k, n, wide)| {
        let bias = if wide { vec![m, n] } else { vec![n] };
        (vec![bias, vec![m, k], vec![k, n]], vec![m, n])
    });
    run(CASES, op_check::case(dims), |c| {
        let op = |v: &[Tensor]| {
            let p = einsum("mk,kn->mn", &[&v[1], &v[2]], ReduceType::Sum).unwrap();
            let bias = &v[0];
            vec![Tensor::from_fn(p[0].shape(), |i| {
                let b = if bias.shape().len() == 1 {
                    bias.get(&i[1..])
                } else {
                    bias.get(i)
                };
                p[0].get(i) + b
            })]
        };
        // d bias = Σ dy (over m for a 1-d bias), d mat1 = dy·mat2ᵀ,
        // d mat2 = mat1ᵀ·dy.
        let grad = |v: &[Tensor], _: &[Tensor], dy: &[Tensor]| {
            let db = if v[0].shape().len() == 1 {
                einsum("mn->n", &[&dy[0]], ReduceType::Sum)
                    .unwrap()
                    .remove(0)
            } else {
                dy[0].clone()
            };
            let d1 = einsum("mn,kn->mk", &[&dy[0], &v[2]], ReduceType::Sum)
                .unwrap()
                .remove(0);
            let d2 = einsum("mk,mn->kn", &[&v[1], &dy[0]], ReduceType::Sum)
                .unwrap()
                .remove(0);
            vec![db, d1, d2]
        };
        check(
            "aten.addmm",
            &Attrs::new(),
            &c,
            &probes(&c.shapes),
            &op,
            Some(&grad),
            &t,
        )
    });
    assert_meaningful("aten.addmm", &t);
    t[2].assert_meaningful("aten.addmm grad");
}

#[test]
fn expand_against_the_op() {
    let t = tallies();
    // The input's dims, each maybe 1 (then expanded to its output size),
    // and up to two new leading dims.
    let dims = (
        prop::collection::vec((1usize..=4, any::<bool>()), 1..=3),
        prop::collection::vec(1usize..=3, 0..=2),
    )
        .prop_map(|(dims, lead)| {
            let x: Vec<usize> = dims
                .iter()
                .map(|&(n, one)| if one { 1 } else { n })
                .collect();
            let mut out = lead;
            out.extend(dims.iter().map(|&(n, _)| n));
            (vec![x], out)
        });
    run(CASES, op_check::case(dims), |c| {
        // ATen's `size`: -1 keeps a dim as it is (on a device, its block's
        // extent), a number broadcasts a size-1 or new dim to it.
        let x_global = c.shapes[0].clone();
        let lead = c.out.len() - x_global.len();
        let size: Vec<i64> = c
            .out
            .iter()
            .enumerate()
            .map(|(k, &n)| match k.checked_sub(lead) {
                Some(j) if x_global[j] != 1 => -1,
                _ => n as i64,
            })
            .collect();
        let sizes = size.clone();
        let op = move |v: &[Tensor]| {
            let x = &v[0];
            let out: Vec<usize> = sizes
                .iter()
                .enumerate()
                .map(|(k, &n)| {
                    if n < 0 {
                        x.shape()[k - lead]
                    } else {
                        n as usize
                    }
                })
                .collect();
            vec![Tensor::from_fn(&out, |i| {
                let at: Vec<usize> = i[lead..]
                    .iter()
                    .zip(&sizes[lead..])
                    .map(|(&k, &n)| if n < 0 { k } else { 0 })
                    .collect();
                x.get(&at)
            })]
        };
        let attrs = Attrs::new().with("size", size);
        // The grad sums the output grad over the broadcast dims.
        let grad = move |v: &[Tensor], _: &[Tensor], dy: &[Tensor]| {
            let x = &v[0];
            let mut g = Tensor::from_fn(x.shape(), |_| 0.0);
            each_index(dy[0].shape(), |i| {
                let at: Vec<usize> = i[lead..]
                    .iter()
                    .zip(x.shape())
                    .map(|(&k, &n)| if n == 1 { 0 } else { k })
                    .collect();
                g.set(&at, g.get(&at) + dy[0].get(i));
            });
            vec![g]
        };
        check(
            "aten.expand",
            &attrs,
            &c,
            &probes(&c.shapes),
            &op,
            Some(&grad),
            &t,
        )
    });
    assert_meaningful("aten.expand", &t);
    t[2].assert_meaningful("aten.expand grad");
}

#[test]
fn mean_dim_against_the_op() {
    let t = tallies();
    let params = (shape(1..=3), any::<prop::sample::Index>(), any::<bool>()).prop_flat_map(
        |(x, d, keep)| {
            let d = d.index(x.len());
            let out: Vec<usize> = if keep {
                with_dim(&x, d, 1)
            } else {
                x.iter()
                    .enumerate()
                    .filter(|&(k, _)| k != d)
                    .map(|(_, &n)| n)
                    .collect()
            };
            (op_check::case(Just((vec![x], out))), Just((d, keep)))
        },
    );
    run(CASES, params, |(c, (d, keep))| {
        let op = move |v: &[Tensor]| {
            let x = &v[0];
            let n = x.shape()[d];
            // The block's own shape, reduced.
            let out: Vec<usize> = if keep {
                with_dim(x.shape(), d, 1)
            } else {
                let mut s = x.shape().to_vec();
                s.remove(d);
                s
            };
            let mut sums = Tensor::from_fn(&out, |_| 0.0);
            each_index(x.shape(), |i| {
                let at: Vec<usize> = if keep {
                    with_dim(i, d, 0)
                } else {
                    i.iter()
                        .enumerate()
                        .filter(|&(k, _)| k != d)
                        .map(|(_, &v)| v)
                        .collect()
                };
                sums.set(&at, sums.get(&at) + x.get(i) / n as f64);
            });
            vec![sums]
        };
        let attrs = Attrs::new()
            .with("dim", vec![d as i64])
            .with("keepdim", keep);
        // Each element's grad: its row's output grad over the extent the
        // whole tensor has (the grad op reads x for its shape alone, the
        // global one), so the averaged dim may stay split.
        let n = c.shapes[0][d] as f64;
        let grad = move |v: &[Tensor], _: &[Tensor], dy: &[Tensor]| {
            let x = &v[0];
            vec![Tensor::from_fn(x.shape(), |i| {
                let at: Vec<usize> = if keep {
                    with_dim(i, d, 0)
                } else {
                    i.iter()
                        .enumerate()
                        .filter(|&(k, _)| k != d)
                        .map(|(_, &v)| v)
                        .collect()
                };
                dy[0].get(&at) / n
            })]
        };
        check(
            "aten.mean.dim",
            &attrs,
            &c,
            &probes(&c.shapes),
            &op,
            Some(&grad),
            &t,
        )
    });
    assert_meaningful("aten.mean.dim", &t);
    t[2].assert_meaningful("aten.mean.dim grad");
}

#[test]
fn slice_against_the_op() {
    let t = tallies();
    let params = (
        shape(1..=3),
        any::<prop::sample::Index>(),
        0usize..=2,
        1usize..=2,
    )
        .prop_flat_map(|(x, d, start, step)| {
            let d = d.index(x.len());
            let start = start.min(x[d] - 1);
            let len = (x[d] - start).div_ceil(step);
            let out = with_dim(&x, d, len);
            (op_check::case(Just((vec![x], out))), Just((d, start, step)))
        });
    run(CASES, params, |(c, (d, start, step))| {
        let op = move |v: &[Tensor]| {
            let x = &v[0];
            let out = with_dim(x.shape(), d, (x.shape()[d] - start).div_ceil(step));
            vec![Tensor::from_fn(&out, |i| {
                x.get(&with_dim(i, d, start + i[d] * step))
            })]
        };
        let attrs = Attrs::new()
            .with("dim", d as i64)
            .with("start", start as i64)
            .with("end", i64::MAX)
            .with("step", step as i64);
        // The grad puts the output grad back at the sliced positions.
        let grad = move |v: &[Tensor], _: &[Tensor], dy: &[Tensor]| {
            let mut g = Tensor::from_fn(v[0].shape(), |_| 0.0);
            each_index(dy[0].shape(), |i| {
                g.set(&with_dim(i, d, start + i[d] * step), dy[0].get(i));
            });
            vec![g]
        };
        check(
            "aten.slice.Tensor",
            &attrs,
            &c,
            &probes(&c.shapes),
            &op,
            Some(&grad),
            &t,
        )
    });
    assert_meaningful("aten.slice.Tensor", &t);
    t[2].assert_meaningful("aten.slice.Tensor grad");
}

#[test]
fn select_against_the_op() {
    let t = tallies();
    let params =
        (shape(2..=3), any::<prop::sample::Index>(), 0usize..=3).prop_flat_map(|(x, d, index)| {
            let d = d.index(x.len());
            let index = index.min(x[d] - 1);
            let mut out = x.clone();
            out.remove(d);
            (op_check::case(Just((vec![x], out))), Just((d, index)))
        });
    run(CASES, params, |(c, (d, index))| {
        // The slice at `index` along `d`, which the output drops.
        let at = move |i: &[usize]| {
            let mut j = i.to_vec();
            j.insert(d, index);
            j
        };
        let op = move |v: &[Tensor]| {
            let x = &v[0];
            let mut out = x.shape().to_vec();
            out.remove(d);
            vec![Tensor::from_fn(&out, |i| x.get(&at(i)))]
        };
        let attrs = Attrs::new()
            .with("dim", d as i64)
            .with("index", index as i64);
        // The grad puts the output grad back at the selected positions.
        let grad = move |v: &[Tensor], _: &[Tensor], dy: &[Tensor]| {
            let mut g = Tensor::from_fn(v[0].shape(), |_| 0.0);
            each_index(dy[0].shape(), |i| g.set(&at(i), dy[0].get(i)));
            vec![g]
        };
        check(
            "aten.select.int",
            &attrs,
            &c,
            &probes(&c.shapes),
            &op,
            Some(&grad),
            &t,
        )
    });
    assert_meaningful("aten.select.int", &t);
    t[2].assert_meaningful("aten.select.int grad");
}

/// `aten.native_layer_norm` against Paddle's layer_norm kernel in ATen's
/// form: the statistics keep the normalized dims as `1`s, and the second is
/// `rstd = 1 / sqrt(var + eps)`, not the variance.
#[test]
fn native_layer_norm_against_the_kernel() {
    let t = tallies();
    let params = (shape(2..=3), 1usize..=2).prop_flat_map(|(x, l)| {
        let l = l.min(x.len() - 1);
        let begin = x.len() - l;
        let w = x[begin..].to_vec();
        (
            op_check::case(Just((vec![x.clone(), w.clone(), w], x))),
            Just(begin),
        )
    });
    run(CASES, params, |(c, begin)| {
        let normalized: Vec<i64> = c.shapes[0][begin..].iter().map(|&n| n as i64).collect();
        let op = move |v: &[Tensor]| {
            let r = layer_norm(&v[0], Some(&v[1]), Some(&v[2]), begin);
            let mut stats = v[0].shape()[..begin].to_vec();
            stats.resize(v[0].shape().len(), 1);
            let rstd: Vec<f64> = r[2]
                .data()
                .iter()
                .map(|var| 1.0 / (var + EPSILON).sqrt())
                .collect();
            vec![
                r[0].clone(),
                Tensor::new(&stats, r[1].data().to_vec()),
                Tensor::new(&stats, rstd),
            ]
        };
        let attrs = Attrs::new()
            .with("normalized_shape", normalized)
            .with("eps", EPSILON);
        // Three outputs: `out` as drawn, the statistics laid out like its
        // leading dims (the normalized ones `1`s).
        let out = &c.outputs[0];
        let stats: Vec<Sharding> = (0..out.dims_mapping.rank())
            .map(|k| {
                if k < begin {
                    out.dims_mapping[k]
                } else {
                    Sharding::REPLICATED
                }
            })
            .collect();
        let stats = DistAttr::new(DimsMapping::from_shardings(&stats));
        let mut c = c.clone();
        c.outputs = vec![out.clone(), stats.clone(), stats];
        check(
            "aten.native_layer_norm",
            &attrs,
            &c,
            &probes(&c.shapes),
            &op,
            None,
            &t,
        )
    });
    assert_meaningful("aten.native_layer_norm", &t);
}

/// `[b, h, s, d]` (ATen's attention layout) as `[b, s, h, d]` (the flash
/// kernel's), and back.
fn swap_heads_and_seq(x: &Tensor) -> Tensor {
    let s = x.shape();
    Tensor::from_fn(&[s[0], s[2], s[1], s[3]], |i| {
        x.get(&[i[0], i[2], i[1], i[3]])
    })
}

/// `aten.scaled_dot_product_attention` against the flash kernel in ATen's
/// layout, with grouped-query heads and a per-head or broadcast mask.
#[test]
fn scaled_dot_product_attention_against_the_kernel() {
    let t = tallies();
    let dims = (
        1usize..=2,
        1usize..=2,
        1usize..=2,
        1usize..=3,
        1usize..=3,
        1usize..=2,
        any::<bool>(),
    )
        .prop_map(|(b, g, rep, s, tk, d, per_head)| {
            let h = g * rep;
            let mask = vec![b, if per_head { h } else { 1 }, s, tk];
            (
                vec![vec![b, h, s, d], vec![b, g, tk, d], vec![b, g, tk, d], mask],
                vec![b, h, s, d],
            )
        });
    run(CASES, op_check::case(dims), |c| {
        let op = |v: &[Tensor]| {
            let (q, k, val) = (
                swap_heads_and_seq(&v[0]),
                swap_heads_and_seq(&v[1]),
                swap_heads_and_seq(&v[2]),
            );
            let r = attention(&q, &k, &val, Some(&v[3]), None, false);
            vec![swap_heads_and_seq(&r[0])]
        };
        let values: Vec<Tensor> = c
            .shapes
            .iter()
            .enumerate()
            .map(|(i, s)| small(s, i as u64 + 1))
            .collect();
        check(
            "aten.scaled_dot_product_attention",
            &Attrs::new(),
            &c,
            &values,
            &op,
            None,
            &t,
        )
    });
    assert_meaningful("aten.scaled_dot_product_attention", &t);
}

/// `torch.histc`'s bin of `v` in `[min, max]` split into `bins`, if any.
fn histc_bin(v: f64, bins: usize, min: f64, max: f64) -> Option<usize> {
    if v < min || v > max {
        return None;
    }
    let b = ((v - min) / (max - min) * bins as f64) as usize;
    Some(b.min(bins - 1))
}

/// `aten.histc` against the op, on each device's block: counts add up over
/// blocks (the output partial where the input is split), except when the
/// range is the data's own (`min == max`), which a block does not know.
#[test]
fn histc_against_the_op() {
    let t = tallies();
    let params = (shape(1..=3), 1usize..=4, any::<bool>()).prop_flat_map(|(x, bins, auto)| {
        (
            op_check::case(Just((vec![x], vec![bins]))),
            Just((bins, auto)),
        )
    });
    run(CASES, params, |(c, (bins, auto))| {
        let (min, max) = if auto { (0.0, 0.0) } else { (-6.0, 6.0) };
        let op = move |v: &[Tensor]| {
            let x = &v[0];
            let (mut lo, mut hi) = (min, max);
            if lo == hi {
                lo = x.data().iter().copied().fold(f64::INFINITY, f64::min);
                hi = x.data().iter().copied().fold(f64::NEG_INFINITY, f64::max);
                if lo == hi {
                    (lo, hi) = (lo - 1.0, hi + 1.0);
                }
            }
            let mut counts = Tensor::from_fn(&[bins], |_| 0.0);
            for &e in x.data() {
                if let Some(b) = histc_bin(e, bins, lo, hi) {
                    counts.set(&[b], counts.get(&[b]) + 1.0);
                }
            }
            vec![counts]
        };
        let attrs = Attrs::new()
            .with("bins", bins as i64)
            .with("min", min)
            .with("max", max);
        check("aten.histc", &attrs, &c, &probes(&c.shapes), &op, None, &t)
    });
    t[0].assert_meaningful("aten.histc forward");
    t[1].assert_meaningful("aten.histc backward");
}

/// The rows `offs` (cumulative counts) gives each expert: `start..end`.
fn expert_rows(offs: &Tensor, e: usize) -> core::ops::Range<usize> {
    let end = |e: usize| offs.get(&[e]) as usize;
    (if e == 0 { 0 } else { end(e - 1) })..end(e)
}

/// `transformers.grouped_mm_fallback` against the op: each expert's rows
/// times its weight; the rows and experts stay whole, the contraction and
/// the output dim may be split. The grad returns the input's and the
/// weight's grads.
#[test]
fn grouped_mm_against_the_op() {
    let t = tallies();
    let params = (1usize..=4, 1usize..=3, 1usize..=4, 1usize..=4, any::<u64>()).prop_flat_map(
        |(rows, experts, k, n, seed)| {
            let shapes = vec![vec![rows, k], vec![experts, k, n], vec![experts]];
            (op_check::case(Just((shapes, vec![rows, n]))), Just(seed))
        },
    );
    run(CASES, params, |(c, seed)| {
        let (rows, experts) = (c.shapes[0][0], c.shapes[1][0]);
        // A valid grouping: cumulative row counts, the last at most `rows`.
        let mut ends = Vec::new();
        let mut at = 0usize;
        for e in 0..experts {
            at = (at + (seed >> (8 * e)) as usize % (rows + 1)).min(rows);
            ends.push(at as f64);
        }
        let mut values = probes(&c.shapes[..2]);
        values.push(Tensor::from_fn(&[experts], |i| ends[i[0]]));
        let op = move |v: &[Tensor]| {
            let (x, w, offs) = (&v[0], &v[1], &v[2]);
            let (k, n) = (x.shape()[1], w.shape()[2]);
            let mut out = Tensor::from_fn(&[x.shape()[0], n], |_| 0.0);
            for e in 0..w.shape()[0] {
                for r in expert_rows(offs, e) {
                    for j in 0..n {
                        let s: f64 = (0..k).map(|q| x.get(&[r, q]) * w.get(&[e, q, j])).sum();
                        out.set(&[r, j], s);
                    }
                }
            }
            vec![out]
        };
        let grad = move |v: &[Tensor], _: &[Tensor], dy: &[Tensor]| {
            let (x, w, offs) = (&v[0], &v[1], &v[2]);
            let (k, n) = (x.shape()[1], w.shape()[2]);
            let mut dx = Tensor::from_fn(x.shape(), |_| 0.0);
            let mut dw = Tensor::from_fn(w.shape(), |_| 0.0);
            for e in 0..w.shape()[0] {
                for r in expert_rows(offs, e) {
                    for q in 0..k {
                        for j in 0..n {
                            dx.set(
                                &[r, q],
                                dx.get(&[r, q]) + dy[0].get(&[r, j]) * w.get(&[e, q, j]),
                            );
                            dw.set(
                                &[e, q, j],
                                dw.get(&[e, q, j]) + x.get(&[r, q]) * dy[0].get(&[r, j]),
                            );
                        }
                    }
                }
            }
            vec![dx, dw]
        };
        check(
            "transformers.grouped_mm_fallback",
            &Attrs::new(),
            &c,
            &values,
            &op,
            Some(&grad),
            &t,
        )
    });
    assert_meaningful("transformers.grouped_mm_fallback", &t);
}

/// `aten.var.correction` against the op: the reduced dims stay whole.
#[test]
fn var_against_the_op() {
    let t = tallies();
    let params = (shape(1..=3), any::<prop::sample::Index>(), any::<bool>()).prop_flat_map(
        |(x, d, keep)| {
            let d = d.index(x.len());
            let mut out = x.clone();
            if keep {
                out[d] = 1;
            } else {
                out.remove(d);
            }
            (op_check::case(Just((vec![x], out))), Just((d, keep)))
        },
    );
    run(CASES, params, |(c, (d, keep))| {
        let op = move |v: &[Tensor]| {
            let x = &v[0];
            let n = x.shape()[d];
            let mut out = x.shape().to_vec();
            if keep {
                out[d] = 1;
            } else {
                out.remove(d);
            }
            let row = |i: &[usize]| -> Vec<f64> {
                (0..n)
                    .map(|k| {
                        let mut j = i.to_vec();
                        if keep {
                            j[d] = k;
                        } else {
                            j.insert(d, k);
                        }
                        x.get(&j)
                    })
                    .collect()
            };
            vec![Tensor::from_fn(&out, |i| {
                let r = row(i);
                let mean = r.iter().sum::<f64>() / n as f64;
                // ATen's default correction: Bessel's (n - 1), 0 for one element.
                r.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n as f64 - 1.0).max(1.0)
            })]
        };
        let attrs = Attrs::new()
            .with("dim", vec![d as i64])
            .with("keepdim", keep);
        check(
            "aten.var.correction",
            &attrs,
            &c,
            &probes(&c.shapes),
            &op,
            None,
            &t,
        )
    });
    t[0].assert_meaningful("aten.var.correction forward");
    t[1].assert_meaningful("aten.var.correction backward");
}

/// `aten.constant_pad_nd` against the op: pairs from the last dim
/// backwards, a padded dim whole (its padding at the global edges).
#[test]
fn constant_pad_nd_against_the_op() {
    let t = tallies();
    let params =
        (shape(1..=3), prop::collection::vec(0i64..=2, 0..=6)).prop_flat_map(|(x, pad)| {
            let pad: Vec<i64> = pad[..(pad.len() / 2 * 2).min(2 * x.len())].to_vec();
            let mut out = x.clone();
            for (i, pair) in pad.chunks(2).enumerate() {
                let d = x.len() - 1 - i;
                out[d] += (pair[0] + pair[1]) as usize;
            }
            (op_check::case(Just((vec![x], out))), Just(pad))
        });
    run(CASES, params, |(c, pad)| {
        let rank = c.shapes[0].len();
        let drawn = pad.clone();
        // The padding before and after dim `d`: pairs count from the last dim.
        let side = move |d: usize, k: usize| -> usize {
            let i = rank - 1 - d;
            pad.get(2 * i + k).map_or(0, |&p| p as usize)
        };
        let op = move |v: &[Tensor]| {
            let x = &v[0];
            // The block's own shape, padded.
            let out: Vec<usize> = (0..rank)
                .map(|d| x.shape()[d] + side(d, 0) + side(d, 1))
                .collect();
            vec![Tensor::from_fn(&out, |i| {
                let j: Option<Vec<usize>> = i
                    .iter()
                    .enumerate()
                    .map(|(d, &k)| k.checked_sub(side(d, 0)).filter(|&k| k < x.shape()[d]))
                    .collect();
                j.map_or(0.0, |j| x.get(&j))
            })]
        };
        let attrs = Attrs::new().with("pad", drawn);
        check(
            "aten.constant_pad_nd",
            &attrs,
            &c,
            &probes(&c.shapes),
            &op,
            None,
            &t,
        )
    });
    t[0].assert_meaningful("aten.constant_pad_nd forward");
    t[1].assert_meaningful("aten.constant_pad_nd backward");
}

/// `aten.convolution` in one dim against the op: one group (channels
/// contracted, filters split), a depthwise one (channels to themselves), or
/// two groups (channels whole); the window reads its neighbours, so the
/// length stays whole.
#[test]
fn convolution_against_the_op() {
    let t = tallies();
    let params = (
        1usize..=2,
        1usize..=4,
        1usize..=4,
        1usize..=3,
        0usize..=1,
        0u8..3,
    )
        .prop_flat_map(|(n, len, ch, k, padding, kind)| {
            // 0: one group, 1: depthwise, 2: two groups.
            let (c, o, groups) = match kind {
                0 => (ch, 1 + (ch % 3), 1),
                1 => (ch, ch, ch),
                _ => (2 * ch, 2, 2),
            };
            let per_group = c / groups;
            let out_len = len + 2 * padding + 1 - k.min(len + 2 * padding);
            let k = k.min(len + 2 * padding);
            let shapes = vec![vec![n, c, len], vec![o, per_group, k], vec![o]];
            (
                op_check::case(Just((shapes, vec![n, o, out_len]))),
                Just((padding, groups)),
            )
        });
    run(CASES, params, |(c, (padding, groups))| {
        let op = move |v: &[Tensor]| {
            let (x, w, b) = (&v[0], &v[1], &v[2]);
            let (n, c_in, len) = (x.shape()[0], x.shape()[1], x.shape()[2]);
            let (o, per_group, k) = (w.shape()[0], w.shape()[1], w.shape()[2]);
            let out_len = len + 2 * padding + 1 - k;
            // A block's groups: its input channels over each group's, as a
            // local kernel counts them (a depthwise split keeps one per channel).
            let groups = (c_in / per_group.max(1)).max(1);
            let outs_per_group = (o / groups).max(1);
            vec![Tensor::from_fn(&[n, o, out_len], |i| {
                let (s, f, p) = (i[0], i[1], i[2]);
                let g = f / outs_per_group;
                let mut acc = b.get(&[f]);
                for q in 0..per_group {
                    for j in 0..k {
                        let at = (p + j).checked_sub(padding).filter(|&a| a < len);
                        if let Some(a) = at {
                            acc += x.get(&[s, g * per_group + q, a]) * w.get(&[f, q, j]);
                        }
                    }
                }
                acc
            })]
        };
        let attrs = Attrs::new()
            .with("stride", vec![1i64])
            .with("padding", vec![padding as i64])
            .with("dilation", vec![1i64])
            .with("transposed", false)
            .with("output_padding", vec![0i64])
            .with("groups", groups as i64);
        check(
            "aten.convolution",
            &attrs,
            &c,
            &probes(&c.shapes),
            &op,
            None,
            &t,
        )
    });
    t[0].assert_meaningful("aten.convolution forward");
    t[1].assert_meaningful("aten.convolution backward");
}

/// `aten.slice_scatter` against the op: `src` written into `input`'s slice
/// along `dim` at global positions, so that dim stays whole.
#[test]
fn slice_scatter_against_the_op() {
    let t = tallies();
    let params = (
        shape(1..=3),
        any::<prop::sample::Index>(),
        0usize..=3,
        1usize..=2,
    )
        .prop_flat_map(|(x, d, start, step)| {
            let d = d.index(x.len());
            let start = start.min(x[d] - 1);
            let n = (x[d] - start).div_ceil(step);
            let mut src = x.clone();
            src[d] = n;
            (
                op_check::case(Just((vec![x.clone(), src], x))),
                Just((d, start, step)),
            )
        });
    run(CASES, params, |(c, (d, start, step))| {
        let op = move |v: &[Tensor]| {
            let (x, src) = (&v[0], &v[1]);
            vec![Tensor::from_fn(x.shape(), |i| {
                let k = i[d];
                if k >= start && (k - start) % step == 0 && (k - start) / step < src.shape()[d] {
                    let mut j = i.to_vec();
                    j[d] = (k - start) / step;
                    src.get(&j)
                } else {
                    x.get(i)
                }
            })]
        };
        let attrs = Attrs::new()
            .with("dim", d as i64)
            .with("start", start as i64)
            .with("step", step as i64);
        check(
            "aten.slice_scatter",
            &attrs,
            &c,
            &probes(&c.shapes),
            &op,
            None,
            &t,
        )
    });
    t[0].assert_meaningful("aten.slice_scatter forward");
    t[1].assert_meaningful("aten.slice_scatter backward");
}

/// `aten.scatter.value` against the op: a number written at the positions
/// the index gives along `dim` (global, so that dim stays whole).
#[test]
fn scatter_value_against_the_op() {
    let t = tallies();
    let params =
        (shape(1..=3), any::<prop::sample::Index>(), 1usize..=3).prop_flat_map(|(x, d, m)| {
            let d = d.index(x.len());
            let mut index = x.clone();
            index[d] = m;
            (op_check::case(Just((vec![x.clone(), index], x))), Just(d))
        });
    run(CASES, params, |(c, d)| {
        let n = c.shapes[0][d];
        let index = Tensor::from_fn(&c.shapes[1], |i| {
            ((i.iter().sum::<usize>() * 7 + 3) % n) as f64
        });
        let op = move |v: &[Tensor]| {
            let (x, index) = (&v[0], &v[1]);
            let mut out = x.clone();
            each_index(index.shape(), |i| {
                let mut j = i.to_vec();
                j[d] = index.get(i) as usize;
                out.set(&j, 0.5);
            });
            vec![out]
        };
        let attrs = Attrs::new().with("dim", d as i64).with("value", 0.5);
        let mut values = probes(&c.shapes[..1]);
        values.push(index);
        check("aten.scatter.value", &attrs, &c, &values, &op, None, &t)
    });
    t[0].assert_meaningful("aten.scatter.value forward");
    t[1].assert_meaningful("aten.scatter.value backward");
}

/// `aten.amax` against the op: a split reduced dim leaves the output
/// partial `Max`.
#[test]
fn amax_against_the_op() {
    let t = tallies();
    let params = (shape(1..=3), any::<prop::sample::Index>(), any::<bool>()).prop_flat_map(
        |(x, d, keep)| {
            let d = d.index(x.len());
            let mut out = x.clone();
            if keep {
                out[d] = 1;
            } else {
                out.remove(d);
            }
            (op_check::case(Just((vec![x], out))), Just((d, keep)))
        },
    );
    run(CASES, params, |(c, (d, keep))| {
        let op = move |v: &[Tensor]| {
            let x = &v[0];
            let mut out = x.shape().to_vec();
            if keep {
                out[d] = 1;
            } else {
                out.remove(d);
            }
            let mut m = Tensor::from_fn(&out, |_| f64::NEG_INFINITY);
            each_index(x.shape(), |i| {
                let mut j = i.to_vec();
                if keep {
                    j[d] = 0;
                } else {
                    j.remove(d);
                }
                m.set(&j, m.get(&j).max(x.get(i)));
            });
            vec![m]
        };
        let attrs = Attrs::new()
            .with("dim", vec![d as i64])
            .with("keepdim", keep);
        check("aten.amax", &attrs, &c, &probes(&c.shapes), &op, None, &t)?;
        // `aten.any.dims` is the largest of booleans: the same rule, whose
        // sharded reduction is partial `Max`, not `Sum`.
        let truth: Vec<Tensor> = probes(&c.shapes)
            .iter()
            .map(|x| Tensor::from_fn(x.shape(), |i| f64::from(x.get(i) > 0.0)))
            .collect();
        check("aten.any.dims", &attrs, &c, &truth, &op, None, &t)
    });
    t[0].assert_meaningful("aten.amax forward");
    t[1].assert_meaningful("aten.amax backward");
}

#[test]
fn clamp_tensor_against_the_op() {
    let t = tallies();
    let params = shape(1..=3)
        .prop_flat_map(|x| op_check::case(Just((vec![x.clone(), x.clone(), x.clone()], x))));
    run(CASES, params, |c| {
        let op = |v: &[Tensor]| {
            let (x, lo, hi) = (&v[0], &v[1], &v[2]);
            vec![Tensor::from_fn(x.shape(), |i| {
                x.get(i).max(lo.get(i)).min(hi.get(i))
            })]
        };
        let grad = |v: &[Tensor], _: &[Tensor], g: &[Tensor]| {
            let (x, lo, hi) = (&v[0], &v[1], &v[2]);
            // The output grad goes to whichever operand the output is.
            let pick = |k: usize| {
                Tensor::from_fn(x.shape(), |i| {
                    let (a, l, h) = (x.get(i), lo.get(i), hi.get(i));
                    let owner = if a.max(l) > h {
                        2
                    } else if l > a {
                        1
                    } else {
                        0
                    };
                    if owner == k { g[0].get(i) } else { 0.0 }
                })
            };
            vec![pick(0), pick(1), pick(2)]
        };
        let values = probes(&c.shapes);
        check(
            "aten.clamp.Tensor",
            &Attrs::new(),
            &c,
            &values,
            &op,
            Some(&grad),
            &t,
        )
    });
    t[0].assert_meaningful("aten.clamp.Tensor forward");
    t[1].assert_meaningful("aten.clamp.Tensor backward");
    t[2].assert_meaningful("aten.clamp.Tensor grad");
}

/// A complex number stood in by a real one that keeps both parts apart
/// (`re + 1000·im`): linear, as reading pairs as numbers is, and wrong
/// wherever a device would pair up halves of different numbers.
const IM: f64 = 1000.0;

#[test]
fn view_as_complex_against_the_op() {
    let t = tallies();
    let params = shape(0..=2).prop_flat_map(|lead| {
        let mut x = lead.clone();
        x.push(2);
        op_check::case(Just((vec![x], lead)))
    });
    run(CASES, params, |c| {
        let op = |v: &[Tensor]| {
            let x = &v[0];
            let out = &x.shape()[..x.shape().len() - 1];
            vec![Tensor::from_fn(out, |i| {
                let (mut re, mut im) = (i.to_vec(), i.to_vec());
                re.push(0);
                im.push(1);
                x.get(&re) + IM * x.get(&im)
            })]
        };
        check(
            "aten.view_as_complex",
            &Attrs::new(),
            &c,
            &probes(&c.shapes),
            &op,
            None,
            &t,
        )
    });
    t[0].assert_meaningful("aten.view_as_complex forward");
    t[1].assert_meaningful("aten.view_as_complex backward");
}

#[test]
fn view_as_real_against_the_op() {
    let t = tallies();
    let params = shape(0..=2).prop_flat_map(|x| {
        let mut out = x.clone();
        out.push(2);
        op_check::case(Just((vec![x], out)))
    });
    run(CASES, params, |c| {
        // The stand-in's parts: the number itself, and a multiple of it.
        let op = |v: &[Tensor]| {
            let x = &v[0];
            let mut out = x.shape().to_vec();
            out.push(2);
            vec![Tensor::from_fn(&out, |i| {
                let (lead, part) = i.split_at(i.len() - 1);
                x.get(lead) * if part[0] == 0 { 1.0 } else { IM }
            })]
        };
        check(
            "aten.view_as_real",
            &Attrs::new(),
            &c,
            &probes(&c.shapes),
            &op,
            None,
            &t,
        )
    });
    t[0].assert_meaningful("aten.view_as_real forward");
    t[1].assert_meaningful("aten.view_as_real backward");
}

/// `aten.max.dim` against the op: the largest element along `dim` and its
/// global position, so that dim stays whole.
#[test]
fn max_dim_against_the_op() {
    let t = tallies();
    let params = (shape(1..=3), any::<prop::sample::Index>(), any::<bool>()).prop_flat_map(
        |(x, d, keep)| {
            let d = d.index(x.len());
            let mut out = x.clone();
            if keep {
                out[d] = 1;
            } else {
                out.remove(d);
            }
            (op_check::case(Just((vec![x], out))), Just((d, keep)))
        },
    );
    run(CASES, params, |(c, (d, keep))| {
        let op = move |v: &[Tensor]| {
            let x = &v[0];
            let mut out = x.shape().to_vec();
            if keep {
                out[d] = 1;
            } else {
                out.remove(d);
            }
            let at = |i: &[usize], k: usize| {
                let mut j = i.to_vec();
                if keep {
                    j[d] = k;
                } else {
                    j.insert(d, k);
                }
                x.get(&j)
            };
            // The first position of the largest, as ATen picks.
            let arg = |i: &[usize]| {
                (0..x.shape()[d]).fold(0, |b, k| if at(i, k) > at(i, b) { k } else { b })
            };
            let values = Tensor::from_fn(&out, |i| at(i, arg(i)));
            let indices = Tensor::from_fn(&out, |i| arg(i) as f64);
            vec![values, indices]
        };
        // Two outputs: the drawn case gives one, the indices share its layout.
        let mut c = c;
        c.outputs
            .push(DistAttr::new(c.outputs[0].dims_mapping.clone()));
        let attrs = Attrs::new().with("dim", d as i64).with("keepdim", keep);
        check(
            "aten.max.dim",
            &attrs,
            &c,
            &probes(&c.shapes),
            &op,
            None,
            &t,
        )
    });
    t[0].assert_meaningful("aten.max.dim forward");
    t[1].assert_meaningful("aten.max.dim backward");
}

/// `aten.scatter.src` against the op: `src`'s elements written at the
/// positions the index gives along `dim` (global, so that dim stays whole).
#[test]
fn scatter_src_against_the_op() {
    let t = tallies();
    let params =
        (shape(1..=3), any::<prop::sample::Index>(), 1usize..=3).prop_flat_map(|(x, d, m)| {
            let d = d.index(x.len());
            // At most one write per position of a line.
            let mut index = x.clone();
            index[d] = m.min(x[d]);
            (
                op_check::case(Just((vec![x.clone(), index.clone(), index], x))),
                Just(d),
            )
        });
    run(CASES, params, |(c, d)| {
        let n = c.shapes[0][d];
        // Distinct positions along `dim` for each line, so that the result
        // does not hang on which write lands last.
        let index = Tensor::from_fn(&c.shapes[1], |i| {
            let rest: usize = i
                .iter()
                .enumerate()
                .filter(|&(k, _)| k != d)
                .map(|(_, v)| v)
                .sum();
            ((i[d] + rest) % n) as f64
        });
        let op = move |v: &[Tensor]| {
            let (x, index, src) = (&v[0], &v[1], &v[2]);
            let mut out = x.clone();
            each_index(index.shape(), |i| {
                let mut j = i.to_vec();
                j[d] = index.get(i) as usize;
                out.set(&j, src.get(i));
            });
            vec![out]
        };
        let attrs = Attrs::new().with("dim", d as i64);
        let mut values = probes(&c.shapes);
        values[1] = index;
        check("aten.scatter.src", &attrs, &c, &values, &op, None, &t)
    });
    t[0].assert_meaningful("aten.scatter.src forward");
    t[1].assert_meaningful("aten.scatter.src backward");
}

/// `aten.index_put` against the op: `values` put (or, with `accumulate`,
/// added) into `self` at the coordinate tuples of one 1-d index per leading
/// dim; the destination's other dims may be split.
#[test]
fn index_put_against_the_op() {
    let t = tallies();
    let params = (
        shape(2..=3),
        1usize..=2,
        1usize..=4,
        any::<bool>(),
        any::<bool>(),
    )
        .prop_flat_map(|(x, n, k, accumulate, trailing)| {
            let n = n.min(x.len() - 1);
            // At most one write per coordinate tuple.
            let k = k.min(x[..n].iter().product());
            let rest = x[n..].to_vec();
            let values = if trailing {
                rest.clone()
            } else {
                std::iter::once(k).chain(rest).collect()
            };
            let mut shapes = vec![x.clone()];
            shapes.extend(std::iter::repeat_n(vec![k], n));
            shapes.push(values);
            (op_check::case(Just((shapes, x))), Just((n, k, accumulate)))
        });
    run(CASES, params, |(c, (n, k, accumulate))| {
        let x = c.shapes[0].clone();
        // The k-th tuple: k in the mixed radix of the indexed dims.
        let tuple = |mut j: usize| {
            let mut at = vec![0; n];
            for d in (0..n).rev() {
                at[d] = j % x[d];
                j /= x[d];
            }
            at
        };
        let mut values = probes(&c.shapes);
        for d in 0..n {
            values[1 + d] = Tensor::from_fn(&[k], |i| tuple(i[0])[d] as f64);
        }
        // Each write: the destination element and the value element put there
        // (`values` is `[k, rest...]`, or `[rest...]` broadcast).
        let writes = move |v: &[Tensor], put: &mut dyn FnMut(&[usize], &[usize])| {
            let (dest, value) = (&v[0], &v[1 + n]);
            each_index(dest.shape(), |i| {
                for j in 0..k {
                    let at: Vec<usize> = (0..n).map(|d| v[1 + d].get(&[j]) as usize).collect();
                    if i[..n] != at[..] {
                        continue;
                    }
                    let src: Vec<usize> = if value.rank() == dest.rank() - n {
                        i[n..].to_vec()
                    } else {
                        std::iter::once(j).chain(i[n..].iter().copied()).collect()
                    };
                    put(i, &src);
                }
            });
        };
        let op = move |v: &[Tensor]| {
            let mut out = v[0].clone();
            writes(v, &mut |i, src| {
                let x = v[1 + n].get(src);
                out.set(i, if accumulate { out.get(i) + x } else { x });
            });
            vec![out]
        };
        // `self`'s grad: the output's, but where a value replaced it; each
        // value's: the output grad where it went, summed where broadcast.
        let grad = move |v: &[Tensor], _: &[Tensor], g: &[Tensor]| {
            let mut dx = g[0].clone();
            let mut dv = Tensor::from_fn(v[1 + n].shape(), |_| 0.0);
            writes(v, &mut |i, src| {
                if !accumulate {
                    dx.set(i, 0.0);
                }
                dv.set(src, dv.get(src) + g[0].get(i));
            });
            vec![dx, dv]
        };
        let attrs = Attrs::new().with("accumulate", accumulate);
        check("aten.index_put", &attrs, &c, &values, &op, Some(&grad), &t)
    });
    t[0].assert_meaningful("aten.index_put forward");
    t[1].assert_meaningful("aten.index_put backward");
    t[2].assert_meaningful("aten.index_put grad");
}

/// `aten.scatter_add` against the op: `src`'s elements added into `self`
/// at the positions the index gives along `dim` (global, so that dim stays
/// whole), repeated positions adding up; the other dims may be split.
#[test]
fn scatter_add_against_the_op() {
    let t = tallies();
    let params = (shape(1..=3), any::<prop::sample::Index>()).prop_flat_map(|(x, d)| {
        let d = d.index(x.len());
        (
            op_check::case(Just((vec![x.clone(), x.clone(), x.clone()], x))),
            Just(d),
        )
    });
    run(CASES, params, |(c, d)| {
        let n = c.shapes[0][d];
        // Positions that repeat along each line: the adds must all land.
        let index = Tensor::from_fn(&c.shapes[1], |i| ((i[d] * 2 + 1) % n) as f64);
        let op = move |v: &[Tensor]| {
            let (x, index, src) = (&v[0], &v[1], &v[2]);
            let mut out = x.clone();
            each_index(index.shape(), |i| {
                let mut j = i.to_vec();
                j[d] = index.get(i) as usize;
                out.set(&j, out.get(&j) + src.get(i));
            });
            vec![out]
        };
        // `self`'s grad is the output's; `src`'s, the output's where it went.
        let grad = move |v: &[Tensor], _: &[Tensor], g: &[Tensor]| {
            let index = &v[1];
            let dsrc = Tensor::from_fn(index.shape(), |i| {
                let mut j = i.to_vec();
                j[d] = index.get(i) as usize;
                g[0].get(&j)
            });
            vec![g[0].clone(), dsrc]
        };
        let attrs = Attrs::new().with("dim", d as i64);
        let mut values = probes(&c.shapes);
        values[1] = index;
        check(
            "aten.scatter_add",
            &attrs,
            &c,
            &values,
            &op,
            Some(&grad),
            &t,
        )
    });
    t[0].assert_meaningful("aten.scatter_add forward");
    t[1].assert_meaningful("aten.scatter_add backward");
    t[2].assert_meaningful("aten.scatter_add grad");
}

/// `aten.bincount` against the op, on each device's block: how many times
/// each value occurs (or the sum of its weights) adds up over blocks, so
/// the counts are partial where the input is split.
#[test]
fn bincount_against_the_op() {
    let t = tallies();
    let params = (1usize..=8, 1usize..=4, any::<bool>()).prop_flat_map(|(n, m, weighted)| {
        let shapes = if weighted {
            vec![vec![n], vec![n]]
        } else {
            vec![vec![n]]
        };
        (op_check::case(Just((shapes, vec![m]))), Just(m))
    });
    run(CASES, params, |(c, m)| {
        let op = move |v: &[Tensor]| {
            let mut counts = Tensor::from_fn(&[m], |_| 0.0);
            for (k, &x) in v[0].data().iter().enumerate() {
                let w = v.get(1).map_or(1.0, |w| w.data()[k]);
                let b = x as usize;
                counts.set(&[b], counts.get(&[b]) + w);
            }
            vec![counts]
        };
        let mut values = probes(&c.shapes);
        values[0] = Tensor::from_fn(&c.shapes[0], |i| ((i[0] * 3 + 1) % m) as f64);
        let attrs = Attrs::new().with("minlength", m as i64);
        check("aten.bincount", &attrs, &c, &values, &op, None, &t)
    });
    t[0].assert_meaningful("aten.bincount forward");
    t[1].assert_meaningful("aten.bincount backward");
}
