//! Property tests of fused NN ops whose kernels are not einsums, built
//! through the registry and checked against hand-written reference kernels
//! on random shapes, meshes of at most 4 devices and random mappings:
//!
//! - `layer_norm`: forward, backward, and the grad in both forms the rule
//!   takes: Paddle's `(x, scale, bias, mean, variance; out_grad)` and the
//!   derived `(x, scale, bias; out_grad, mean_grad, variance_grad)`; scale
//!   and bias flattened or not, sometimes absent;
//! - `flash_attention`: forward, backward and the grad in both forms
//!   (Paddle's `(q, k, v, out, softmax_lse, seed_offset, attn_mask;
//!   out_grad)` and the derived one), with grouped-query heads, a per-head
//!   or broadcast mask, causal or not; the seed and the mask sometimes
//!   absent.
//!
//! Absent optional inputs go through the rules' `*_optional` methods
//! (`common::nn::Absent`); the checker hands their slots a placeholder the kernels
//! ignore. Besides the checked/refused tallies, every property counts the
//! answers that split work (a tensor sharded, or partial, over a mesh dim of
//! extent > 1) and fails when too few do. A unit test checks the grad
//! kernels against central differences.
//!
//! Default: 48 cases per property; `SPMD_CHECK_CASES=N` for more.

mod common;

use std::sync::OnceLock;

use proptest::prelude::*;
use spmd_check::{Input, Tensor, Values, check_backward, check_forward, check_grad};
use spmd_core::{Attrs, DimsMapping, DistAttr, Mesh, Registry, Sharding, Spec, SpmdRule};

use common::attrs;
use common::nn::{
    Absent, Counts, assert_gradient, complete, force, force_split, numeric_grad, small, small_mesh,
    specs,
};
use common::run;

const CASES: u32 = 48;

fn registry() -> &'static Registry {
    static R: OnceLock<Registry> = OnceLock::new();
    R.get_or_init(spmd_ops::builtins)
}

// --------------------------------------------------------------- layer_norm

const EPSILON: f64 = 1e-5;

/// The rows a layer norm normalizes: how many, and how long.
fn norm_rows(x: &Tensor, begin: usize) -> (usize, usize) {
    (
        x.shape()[..begin].iter().product(),
        x.shape()[begin..].iter().product(),
    )
}

/// Paddle's layer_norm kernel: `out`, then `mean` and `variance` (biased)
/// of shape `x.shape[..begin]`. `scale` and `bias` hold one value per
/// element of a row (a device holding part of a row gets a mismatch).
fn layer_norm(
    x: &Tensor,
    scale: Option<&Tensor>,
    bias: Option<&Tensor>,
    begin: usize,
) -> Vec<Tensor> {
    let (rows, n) = norm_rows(x, begin);
    for p in [scale, bias].into_iter().flatten() {
        assert_eq!(
            p.len(),
            n,
            "a parameter of {} values for rows of {n}",
            p.len()
        );
    }
    let (mut mean, mut var, mut out) = (vec![0.0; rows], vec![0.0; rows], vec![0.0; x.len()]);
    for r in 0..rows {
        let row = &x.data()[r * n..(r + 1) * n];
        let m = row.iter().sum::<f64>() / n as f64;
        let v = row.iter().map(|a| (a - m).powi(2)).sum::<f64>() / n as f64;
        let sd = (v + EPSILON).sqrt();
        for j in 0..n {
            let w = scale.map_or(1.0, |s| s.data()[j]);
            let b = bias.map_or(0.0, |s| s.data()[j]);
            out[r * n + j] = (row[j] - m) / sd * w + b;
        }
        (mean[r], var[r]) = (m, v);
    }
    let lead = &x.shape()[..begin];
    vec![
        Tensor::new(x.shape(), out),
        Tensor::new(lead, mean),
        Tensor::new(lead, var),
    ]
}

/// Paddle's layer_norm_grad kernel: `x_grad`, `scale_grad`, `bias_grad`
/// from x, scale, the saved mean and variance and `out_grad`; with
/// `stats_grads` (the grads of mean and variance, the derived grad form)
/// their contributions to `x_grad` too. `scale_grad` and `bias_grad` sum
/// over the rows a device holds.
fn layer_norm_grad(
    x: &Tensor,
    scale: Option<&Tensor>,
    mean: &Tensor,
    var: &Tensor,
    dy: &Tensor,
    stats_grads: Option<(&Tensor, &Tensor)>,
    begin: usize,
) -> [Tensor; 3] {
    let (rows, n) = norm_rows(x, begin);
    assert_eq!(dy.shape(), x.shape(), "out_grad and x blocks differ");
    for s in [
        Some(mean),
        Some(var),
        stats_grads.map(|g| g.0),
        stats_grads.map(|g| g.1),
    ]
    .into_iter()
    .flatten()
    {
        assert_eq!(s.len(), rows, "statistics of {} rows for {rows}", s.len());
    }
    if let Some(s) = scale {
        assert_eq!(s.len(), n, "a scale of {} values for rows of {n}", s.len());
    }
    let (mut dx, mut dscale, mut dbias) = (vec![0.0; x.len()], vec![0.0; n], vec![0.0; n]);
    for r in 0..rows {
        let at = r * n..(r + 1) * n;
        let (row, g_out) = (&x.data()[at.clone()], &dy.data()[at]);
        let (m, sd) = (mean.data()[r], (var.data()[r] + EPSILON).sqrt());
        let xhat: Vec<f64> = row.iter().map(|a| (a - m) / sd).collect();
        let g: Vec<f64> = (0..n)
            .map(|j| g_out[j] * scale.map_or(1.0, |s| s.data()[j]))
            .collect();
        let mean_g = g.iter().sum::<f64>() / n as f64;
        let mean_gx = g.iter().zip(&xhat).map(|(a, b)| a * b).sum::<f64>() / n as f64;
        for j in 0..n {
            let mut d = (g[j] - mean_g - xhat[j] * mean_gx) / sd;
            if let Some((dmean, dvar)) = stats_grads {
                // d mean / dx = 1/n, d var / dx = 2 (x - mean) / n.
                d += dmean.data()[r] / n as f64 + dvar.data()[r] * 2.0 * (row[j] - m) / n as f64;
            }
            dx[r * n + j] = d;
            dscale[j] += g_out[j] * xhat[j];
            dbias[j] += g_out[j];
        }
    }
    [
        Tensor::new(x.shape(), dx),
        Tensor::new(&[n], dscale),
        Tensor::new(&[n], dbias),
    ]
}

#[derive(Clone, Debug)]
struct NormCase {
    mesh: Vec<usize>,
    x: Vec<usize>,
    /// `begin_norm_axis` as given (maybe negative), and normalized.
    begin_attr: i64,
    begin: usize,
    scale: bool,
    bias: bool,
    /// Scale and bias flattened (Paddle's `[n]`), or of the normalized dims.
    flat: bool,
    /// x, scale, bias, mean, variance (grad inputs), then out, mean and
    /// variance (backward's outputs, and the derived grad's output grads).
    attrs: Vec<DistAttr>,
}

fn norm_case() -> impl Strategy<Value = NormCase> {
    (
        prop_oneof![
            1 => prop::collection::vec(1usize..=4, 1),
            4 => prop::collection::vec(1usize..=4, 2..=3),
        ],
        (any::<prop::sample::Index>(), prop::bool::weighted(0.85)),
        any::<bool>(),
        (
            prop::bool::weighted(0.75),
            prop::bool::weighted(0.75),
            prop::bool::weighted(0.7),
        ),
        small_mesh(),
    )
        .prop_flat_map(|(x, (begin, lead), negative, (scale, bias, flat), mesh)| {
            let rank = x.len();
            // Paddle normalizes at least one dim (begin < rank); mostly
            // leave a leading dim to shard.
            let begin = if lead && rank > 1 {
                1 + begin.index(rank - 1)
            } else {
                begin.index(rank)
            };
            let begin_attr = begin as i64 - if negative { rank as i64 } else { 0 };
            let p = if flat { 1 } else { rank - begin };
            let ranks = vec![rank, p, p, begin, begin, rank, begin, begin];
            let m = mesh.len();
            let c = NormCase {
                mesh,
                x,
                begin_attr,
                begin,
                scale,
                bias,
                flat,
                attrs: Vec::new(),
            };
            (
                Just(c),
                attrs(ranks, m, true),
                force(),
                force(),
                prop::bool::weighted(0.5),
            )
        })
        .prop_map(|(mut c, mut a, fx, fout, aligned)| {
            // Shard a leading dim of x and of out (and out_grad).
            let lead: Vec<usize> = (0..c.begin).collect();
            a[0] = force_split(&a[0], &c.mesh, &lead, fx);
            a[5] = force_split(&a[5], &c.mesh, &lead, fout);
            if aligned {
                // The statistics and out (out_grad) laid out as x: random
                // ones mostly conflict with it, which the rule refuses.
                let x = a[0].dims_mapping.as_slice();
                let stats = DistAttr::new(DimsMapping::from_shardings(&x[..c.begin]));
                a[5] = DistAttr::new(a[0].dims_mapping.clone());
                for i in [3, 4, 6, 7] {
                    a[i] = stats.clone();
                }
            }
            c.attrs = a;
            c
        })
}

#[test]
fn layer_norm_against_the_kernel() {
    let counts = [Counts::new(), Counts::new(), Counts::new(), Counts::new()];
    let [fw, bw, gr, gd] = &counts;
    run(CASES, norm_case(), |c| {
        let built = registry()
            .build(
                "layer_norm",
                &Attrs::new()
                    .with("begin_norm_axis", c.begin_attr)
                    .with("epsilon", EPSILON),
            )
            .unwrap();
        // scale and bias are inputs 1 and 2 of forward and of both grad forms.
        let absent = u64::from(!c.scale) << 1 | u64::from(!c.bias) << 2;
        let rule = Absent {
            rule: &*built,
            forward: absent,
            grad: absent,
            outputs: 0,
        };
        let mesh = Mesh::new(&c.mesh).unwrap();
        let (begin, has_scale, has_bias) = (c.begin, c.scale, c.bias);
        let n: usize = c.x[begin..].iter().product();
        let lead = c.x[..begin].to_vec();
        // An absent parameter's placeholder is [1]: the rule answers `[-1]`
        // for it (its term is `1`), as Paddle does.
        let param_shape = if c.flat {
            vec![n]
        } else {
            c.x[begin..].to_vec()
        };
        let param = |here: bool, seed: u64| {
            if here {
                Tensor::probe(&param_shape, seed, Values::Integers)
            } else {
                Tensor::full(&[1], 0.0)
            }
        };
        let x = Tensor::probe(&c.x, 1, Values::Integers);
        let values = vec![x.clone(), param(has_scale, 2), param(has_bias, 3)];
        let op = move |v: &[Tensor]| {
            layer_norm(
                &v[0],
                has_scale.then_some(&v[1]),
                has_bias.then_some(&v[2]),
                begin,
            )
        };
        let inputs: Vec<Input> = values
            .iter()
            .zip(&c.attrs)
            .map(|(v, a)| Input::new(v.clone(), a.clone()))
            .collect();
        fw.record(
            &mesh,
            &rule.forward(&mesh, &specs(&inputs)),
            check_forward(&rule, &mesh, &inputs, op),
        )?;

        let outs = complete(&c.attrs[5..8]);
        let out_shapes = [c.x.clone(), lead.clone(), lead.clone()];
        let out_specs: Vec<Spec<'_>> = out_shapes
            .iter()
            .zip(&outs)
            .map(|(s, a)| Spec::new(s, a))
            .collect();
        let shapes: Vec<&[usize]> = values.iter().map(Tensor::shape).collect();
        bw.record(
            &mesh,
            &rule.backward(&mesh, &shapes, &out_specs),
            check_backward(&rule, &mesh, &values, &outs, op),
        )?;

        // A parameter's grad has its shape; an absent one's is its
        // placeholder's: zeros.
        let fill = move |mut g: [Tensor; 3], v: &[Tensor]| {
            for (k, here) in [(1, has_scale), (2, has_bias)] {
                g[k] = if here {
                    Tensor::new(v[k].shape(), g[k].data().to_vec())
                } else {
                    Tensor::full(v[k].shape(), 0.0)
                };
            }
            g.to_vec()
        };

        // Paddle's grad op: (x, scale, bias, mean, variance; out_grad).
        let dense = op(&values);
        let mut sig = inputs.clone();
        sig.push(Input::new(dense[1].clone(), c.attrs[3].clone()));
        sig.push(Input::new(dense[2].clone(), c.attrs[4].clone()));
        let forward = move |v: &[Tensor]| vec![op(&v[..3]).swap_remove(0)];
        let grad = move |v: &[Tensor], _: &[Tensor], dy: &[Tensor]| {
            let g = layer_norm_grad(
                &v[0],
                has_scale.then_some(&v[1]),
                &v[3],
                &v[4],
                &dy[0],
                None,
                begin,
            );
            fill(g, v)
        };
        let dy = Spec::new(&c.x, &c.attrs[5]);
        gr.record(
            &mesh,
            &rule.grad(&mesh, &specs(&sig), &[dy]),
            check_grad(&rule, &mesh, &sig, &c.attrs[5..6], forward, grad),
        )?;

        // The derived form: (x, scale, bias; out_grad, mean_grad,
        // variance_grad), the statistics recomputed from x's rows.
        let vjp = move |v: &[Tensor], _: &[Tensor], dy: &[Tensor]| {
            let stats = op(v);
            let g = layer_norm_grad(
                &v[0],
                has_scale.then_some(&v[1]),
                &stats[1],
                &stats[2],
                &dy[0],
                Some((&dy[1], &dy[2])),
                begin,
            );
            fill(g, v)
        };
        let dy_specs: Vec<Spec<'_>> = out_shapes
            .iter()
            .zip(&c.attrs[5..8])
            .map(|(s, a)| Spec::new(s, a))
            .collect();
        gd.record(
            &mesh,
            &rule.grad(&mesh, &specs(&inputs), &dy_specs),
            check_grad(&rule, &mesh, &inputs, &c.attrs[5..8], op, vjp),
        )?;
        Ok(())
    });
    fw.assert_meaningful("layer_norm forward");
    bw.assert_meaningful("layer_norm backward");
    gr.assert_meaningful("layer_norm grad (Paddle's signature)");
    gd.assert_meaningful("layer_norm grad (derived form)");
}

// ---------------------------------------------------------- flash_attention

/// The extents of a device's q, k, v blocks, checked to fit together:
/// q `[b, s, h, d]`, k `[b, t, g, d]`, v `[b, t, g, e]`, each kv head
/// serving `rep` consecutive query heads.
struct AttnDims {
    b: usize,
    s: usize,
    t: usize,
    h: usize,
    rep: usize,
    d: usize,
    e: usize,
}

fn attn_dims(q: &Tensor, k: &Tensor, v: &Tensor) -> AttnDims {
    let (&[b, s, h, d], &[bk, t, g, dk], &[bv, tv, gv, e]) = (q.shape(), k.shape(), v.shape())
    else {
        panic!("q, k, v of ranks other than 4");
    };
    assert!(
        (bk, dk, bv, tv, gv) == (b, d, b, t, g),
        "q {:?}, k {:?}, v {:?} do not fit together",
        q.shape(),
        k.shape(),
        v.shape()
    );
    let rep = if h == 0 {
        1
    } else {
        assert!(g > 0 && h % g == 0, "{h} query heads for {g} kv heads");
        h / g
    };
    AttnDims {
        b,
        s,
        t,
        h,
        rep,
        d,
        e,
    }
}

/// The scores `q·kᵀ/√d + mask`, `[b, h, s, t]`; with `causal`, `-inf`
/// above the bottom-right-aligned diagonal (key `j` after query `i + t - s`).
fn scores(q: &Tensor, k: &Tensor, mask: Option<&Tensor>, causal: bool, n: &AttnDims) -> Tensor {
    if let Some(m) = mask {
        let heads = m.shape()[1];
        assert!(
            m.shape() == [n.b, heads, n.s, n.t] && (heads == n.h || heads == 1),
            "a mask {:?} for {} heads of {}x{} scores",
            m.shape(),
            n.h,
            n.s,
            n.t
        );
    }
    let scale = 1.0 / (n.d as f64).sqrt();
    Tensor::from_fn(&[n.b, n.h, n.s, n.t], |i| {
        let [b, h, s, t] = [i[0], i[1], i[2], i[3]];
        if causal && t + n.s > s + n.t {
            return f64::NEG_INFINITY;
        }
        let dot: f64 = (0..n.d)
            .map(|d| q.get(&[b, s, h, d]) * k.get(&[b, t, h / n.rep, d]))
            .sum();
        let bias = mask.map_or(0.0, |m| {
            let mh = if m.shape()[1] == 1 { 0 } else { h };
            m.get(&[b, mh, s, t])
        });
        dot * scale + bias
    })
}

/// Log-sum-exp of the scores over the keys: `[b, h, s]`.
fn logsumexp(scores: &Tensor) -> Tensor {
    let sh = scores.shape();
    Tensor::from_fn(&sh[..3], |i| {
        let row: Vec<f64> = (0..sh[3])
            .map(|t| scores.get(&[i[0], i[1], i[2], t]))
            .collect();
        let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        max + row.iter().map(|v| (v - max).exp()).sum::<f64>().ln()
    })
}

/// `exp(scores - lse)`: the softmax, from the saved log-sum-exp.
fn probabilities(scores: &Tensor, lse: &Tensor) -> Tensor {
    assert_eq!(
        lse.shape(),
        &scores.shape()[..3],
        "softmax_lse and scores blocks differ"
    );
    Tensor::from_fn(scores.shape(), |i| (scores.get(i) - lse.get(&i[..3])).exp())
}

/// The flash kernel without dropout: `out` `[b, s, h, e]`, `softmax`,
/// `softmax_lse` and `seed_offset` (the fixed seed given, else a constant
/// one: the same on every device).
fn attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    seed: Option<&Tensor>,
    causal: bool,
) -> Vec<Tensor> {
    let n = attn_dims(q, k, v);
    let s = scores(q, k, mask, causal, &n);
    let lse = logsumexp(&s);
    let p = probabilities(&s, &lse);
    let out = Tensor::from_fn(&[n.b, n.s, n.h, n.e], |i| {
        let [b, s, h, e] = [i[0], i[1], i[2], i[3]];
        (0..n.t)
            .map(|t| p.get(&[b, h, s, t]) * v.get(&[b, t, h / n.rep, e]))
            .sum()
    });
    let seed = seed
        .cloned()
        .unwrap_or_else(|| Tensor::new(&[2], vec![0.0, 0.0]));
    vec![out, p, lse, seed]
}

/// The flash grad kernel: `q_grad`, `k_grad`, `v_grad` and the mask's
/// grad (the scores' grad, summed over the heads of a broadcast mask) from
/// the saved `out` and `softmax_lse` and `out_grad`; with `extra` (the
/// grads of `softmax` and `softmax_lse`, the derived form) their
/// contributions too.
#[allow(clippy::too_many_arguments)]
fn attention_grad(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    causal: bool,
    out: &Tensor,
    lse: &Tensor,
    dout: &Tensor,
    extra: Option<(&Tensor, &Tensor)>,
) -> [Tensor; 4] {
    let n = attn_dims(q, k, v);
    assert!(
        out.shape() == [n.b, n.s, n.h, n.e] && dout.shape() == out.shape(),
        "out {:?} and out_grad {:?} blocks do not fit q {:?}",
        out.shape(),
        dout.shape(),
        q.shape()
    );
    let p = probabilities(&scores(q, k, mask, causal, &n), lse);
    // The grad of the probabilities: through out, plus softmax's own.
    let dp = Tensor::from_fn(p.shape(), |i| {
        let [b, h, s, t] = [i[0], i[1], i[2], i[3]];
        let through_out: f64 = (0..n.e)
            .map(|e| dout.get(&[b, s, h, e]) * v.get(&[b, t, h / n.rep, e]))
            .sum();
        through_out + extra.map_or(0.0, |(dsm, _)| dsm.get(i))
    });
    // Σ_t p·dp per row: Σ_e dout·out for the path through out (what the
    // kernel computes), plus the softmax grad's part.
    let row = Tensor::from_fn(&p.shape()[..3], |i| {
        let [b, h, s] = [i[0], i[1], i[2]];
        let through_out: f64 = (0..n.e)
            .map(|e| dout.get(&[b, s, h, e]) * out.get(&[b, s, h, e]))
            .sum();
        let own: f64 = extra.map_or(0.0, |(dsm, _)| {
            (0..n.t)
                .map(|t| p.get(&[b, h, s, t]) * dsm.get(&[b, h, s, t]))
                .sum()
        });
        through_out + own
    });
    let ds = Tensor::from_fn(p.shape(), |i| {
        let pi = p.get(i);
        let lse_grad = extra.map_or(0.0, |(_, dlse)| dlse.get(&i[..3]));
        pi * (dp.get(i) - row.get(&i[..3])) + lse_grad * pi
    });
    let scale = 1.0 / (n.d as f64).sqrt();
    let g = n.h / n.rep;
    let dq = Tensor::from_fn(q.shape(), |i| {
        let [b, s, h, d] = [i[0], i[1], i[2], i[3]];
        scale
            * (0..n.t)
                .map(|t| ds.get(&[b, h, s, t]) * k.get(&[b, t, h / n.rep, d]))
                .sum::<f64>()
    });
    // A kv head's grads sum over the query heads of its group.
    let group = |kv: usize| kv * n.rep..(kv + 1) * n.rep;
    let dk = Tensor::from_fn(&[n.b, n.t, g, n.d], |i| {
        let [b, t, kv, d] = [i[0], i[1], i[2], i[3]];
        scale
            * group(kv)
                .flat_map(|h| (0..n.s).map(move |s| (h, s)))
                .map(|(h, s)| ds.get(&[b, h, s, t]) * q.get(&[b, s, h, d]))
                .sum::<f64>()
    });
    let dv = Tensor::from_fn(&[n.b, n.t, g, n.e], |i| {
        let [b, t, kv, e] = [i[0], i[1], i[2], i[3]];
        group(kv)
            .flat_map(|h| (0..n.s).map(move |s| (h, s)))
            .map(|(h, s)| p.get(&[b, h, s, t]) * dout.get(&[b, s, h, e]))
            .sum()
    });
    // The mask is added to the scores: its grad is theirs.
    let dmask = match mask {
        Some(m) if m.shape()[1] == 1 && n.h != 1 => Tensor::from_fn(m.shape(), |i| {
            (0..n.h).map(|h| ds.get(&[i[0], h, i[2], i[3]])).sum()
        }),
        Some(m) => Tensor::from_fn(m.shape(), |i| ds.get(i)),
        None => Tensor::full(&[], 0.0),
    };
    [dq, dk, dv, dmask]
}

#[derive(Clone, Debug)]
struct AttnCase {
    mesh: Vec<usize>,
    /// batch, query and key lengths, query and kv heads, head dims of q/k
    /// and of v.
    b: usize,
    s: usize,
    t: usize,
    h: usize,
    g: usize,
    d: usize,
    e: usize,
    seed: bool,
    /// Absent, one per head, or broadcast over the heads.
    mask: Option<bool>,
    causal: bool,
    /// q, k, v, fixed_seed_offset, attn_mask; out, softmax, softmax_lse,
    /// seed_offset (backward's outputs, the derived grad's output grads);
    /// out, softmax_lse, seed_offset as inputs of Paddle's grad op, and its
    /// out_grad.
    attrs: Vec<DistAttr>,
}

impl AttnCase {
    fn mask_shape(&self) -> Option<Vec<usize>> {
        self.mask
            .map(|per_head| vec![self.b, if per_head { self.h } else { 1 }, self.s, self.t])
    }
}

fn attn_case() -> impl Strategy<Value = AttnCase> {
    (
        (1usize..=2, 1usize..=3, 1usize..=3, 1usize..=4),
        (any::<prop::sample::Index>(), 1usize..=3, 1usize..=3),
        (
            prop::bool::weighted(0.5),
            prop::option::weighted(0.7, any::<bool>()),
            any::<bool>(),
        ),
        small_mesh(),
    )
        .prop_flat_map(|((b, s, t, h), (g, d, e), (seed, mask, causal), mesh)| {
            let divisors: Vec<usize> = (1..=h).filter(|g| h % g == 0).collect();
            let g = divisors[g.index(divisors.len())];
            // Causal rows need a key: no more queries than keys.
            let t = if causal { t.max(s) } else { t };
            let ranks = vec![4, 4, 4, 1, 4, 4, 4, 3, 1, 4, 3, 1, 4];
            let m = mesh.len();
            let c = AttnCase {
                mesh,
                b,
                s,
                t,
                h,
                g,
                d,
                e,
                seed,
                mask,
                causal,
                attrs: Vec::new(),
            };
            (
                Just(c),
                attrs(ranks, m, true),
                prop::bool::weighted(0.6),
                force(),
            )
        })
        .prop_map(|(mut c, mut a, aligned, fq)| {
            // Shard q's batch or heads.
            a[0] = force_split(&a[0], &c.mesh, &[0, 2], fq);
            if aligned {
                align_with_q(&mut a);
            }
            c.attrs = a;
            c
        })
}

/// Lays every `[b, ., h, .]`, `[b, h, ...]` tensor out as q (attrs[0]) is:
/// independent random mappings of q, k, v, the mask and the outputs mostly
/// conflict (two mesh dims for one axis), which the rule refuses.
fn align_with_q(a: &mut [DistAttr]) {
    let q = a[0].clone();
    let m = q.dims_mapping.as_slice();
    let heads_major = |rest: &[Sharding]| {
        let mut dims = vec![m[0], m[2]];
        dims.extend_from_slice(rest);
        DistAttr::new(DimsMapping::from_shardings(&dims)).with_partial(q.partial)
    };
    // k, v, out (backward and grad op input) and out_grad: as q.
    for i in [1, 2, 5, 9, 12] {
        a[i] = q.clone();
    }
    // The mask and softmax `[b, h, s, t]`, softmax_lse `[b, h, s]`.
    for i in [4, 6] {
        a[i] = heads_major(&[m[1], Sharding::REPLICATED]);
    }
    for i in [7, 10] {
        a[i] = heads_major(&[m[1]]);
    }
}

#[test]
fn flash_attention_against_the_kernel() {
    let counts = [Counts::new(), Counts::new(), Counts::new(), Counts::new()];
    let [fw, bw, gr, gd] = &counts;
    run(CASES, attn_case(), |c| {
        let built = registry()
            .build("flash_attention", &Attrs::new().with("causal", c.causal))
            .unwrap();
        let (has_seed, has_mask, causal) = (c.seed, c.mask.is_some(), c.causal);
        // fixed_seed_offset and attn_mask: inputs 3 and 4 of forward, the
        // mask input 6 of Paddle's grad op (which takes no fixed seed).
        let absent = u64::from(!has_seed) << 3 | u64::from(!has_mask) << 4;
        let fwd_rule = Absent {
            rule: &*built,
            forward: absent,
            grad: absent,
            outputs: 0,
        };
        let sig_rule = Absent {
            rule: &*built,
            forward: absent,
            grad: u64::from(!has_mask) << 6,
            outputs: 0,
        };
        let mesh = Mesh::new(&c.mesh).unwrap();
        let (q_shape, k_shape, v_shape) = (
            vec![c.b, c.s, c.h, c.d],
            vec![c.b, c.t, c.g, c.d],
            vec![c.b, c.t, c.g, c.e],
        );
        // An absent input's placeholder is 0-d: the rule answers `[]`.
        let placeholder = || (Tensor::full(&[], 0.0), DistAttr::replicated(0));
        let (seed, seed_attr) = if has_seed {
            (Tensor::new(&[2], vec![7.0, 3.0]), c.attrs[3].clone())
        } else {
            placeholder()
        };
        let (mask, mask_attr) = match c.mask_shape() {
            Some(s) => (small(&s, 5), c.attrs[4].clone()),
            None => placeholder(),
        };
        let values = vec![
            small(&q_shape, 1),
            small(&k_shape, 2),
            small(&v_shape, 3),
            seed,
            mask,
        ];
        let given = [
            c.attrs[0].clone(),
            c.attrs[1].clone(),
            c.attrs[2].clone(),
            seed_attr,
            mask_attr,
        ];
        let inputs: Vec<Input> = values
            .iter()
            .zip(&given)
            .map(|(v, a)| Input::new(v.clone(), a.clone()))
            .collect();
        let op = move |v: &[Tensor]| {
            attention(
                &v[0],
                &v[1],
                &v[2],
                has_mask.then_some(&v[4]),
                has_seed.then_some(&v[3]),
                causal,
            )
        };
        fw.record(
            &mesh,
            &fwd_rule.forward(&mesh, &specs(&inputs)),
            check_forward(&fwd_rule, &mesh, &inputs, op),
        )?;

        let dense = op(&values);
        let outs = complete(&c.attrs[5..9]);
        let out_specs: Vec<Spec<'_>> = dense
            .iter()
            .zip(&outs)
            .map(|(t, a)| Spec::new(t.shape(), a))
            .collect();
        let shapes: Vec<&[usize]> = values.iter().map(Tensor::shape).collect();
        bw.record(
            &mesh,
            &fwd_rule.backward(&mesh, &shapes, &out_specs),
            check_backward(&fwd_rule, &mesh, &values, &outs, op),
        )?;

        // Paddle's grad op: (q, k, v, out, softmax_lse, seed_offset,
        // attn_mask; out_grad).
        let mut sig: Vec<Input> = inputs[..3].to_vec();
        for (t, a) in [(0, 9), (2, 10), (3, 11)] {
            sig.push(Input::new(dense[t].clone(), c.attrs[a].clone()));
        }
        sig.push(inputs[4].clone());
        let forward = move |v: &[Tensor]| {
            let mask = has_mask.then_some(&v[6]);
            vec![attention(&v[0], &v[1], &v[2], mask, None, causal).swap_remove(0)]
        };
        let grad = move |v: &[Tensor], _: &[Tensor], dy: &[Tensor]| {
            let mask = has_mask.then_some(&v[6]);
            let [dq, dk, dv, dmask] = attention_grad(
                &v[0], &v[1], &v[2], mask, causal, &v[3], &v[4], &dy[0], None,
            );
            // fixed_seed_offset has no grad (`no_grad`); an absent mask's
            // grad is its placeholder's.
            vec![dq, dk, dv, dmask]
        };
        let dy = Spec::new(dense[0].shape(), &c.attrs[12]);
        gr.record(
            &mesh,
            &sig_rule.grad(&mesh, &specs(&sig), &[dy]),
            check_grad(&sig_rule, &mesh, &sig, &c.attrs[12..13], forward, grad),
        )?;

        // The derived form: (q, k, v, fixed_seed_offset, attn_mask; the
        // grads of all four outputs), from the forward values of out and
        // softmax_lse.
        let vjp = move |v: &[Tensor], o: &[Tensor], dy: &[Tensor]| {
            let mask = has_mask.then_some(&v[4]);
            let [dq, dk, dv, dmask] = attention_grad(
                &v[0],
                &v[1],
                &v[2],
                mask,
                causal,
                &o[0],
                &o[2],
                &dy[0],
                Some((&dy[1], &dy[2])),
            );
            // fixed_seed_offset has no grad (`no_grad`).
            vec![dq, dk, dv, dmask]
        };
        let dy_specs: Vec<Spec<'_>> = dense
            .iter()
            .zip(&c.attrs[5..9])
            .map(|(t, a)| Spec::new(t.shape(), a))
            .collect();
        gd.record(
            &mesh,
            &fwd_rule.grad(&mesh, &specs(&inputs), &dy_specs),
            check_grad(&fwd_rule, &mesh, &inputs, &c.attrs[5..9], op, vjp),
        )?;
        Ok(())
    });
    fw.assert_meaningful("flash_attention forward");
    bw.assert_meaningful("flash_attention backward");
    gr.assert_meaningful("flash_attention grad (Paddle's signature)");
    gd.assert_meaningful("flash_attention grad (derived form)");
}

// ------------------------------------ the reference grads are the gradients

/// The hand-written grad kernels the properties check layouts of must be
/// the ops' true gradients (else the properties would check the layout of
/// some other function).
#[test]
fn reference_grads_match_central_differences() {
    // layer_norm, x [3, 4], normalized over dim 1.
    let (x, scale, bias) = (small(&[3, 4], 1), small(&[4], 2), small(&[4], 3));
    let f = |v: &[Tensor]| layer_norm(&v[0], Some(&v[1]), Some(&v[2]), 1);
    let inputs = [x.clone(), scale.clone(), bias];
    let stats = f(&inputs);
    let (dy, dmean, dvar) = (small(&[3, 4], 4), small(&[3], 5), small(&[3], 6));
    let zeros = Tensor::full(&[3], 0.0);
    let paddle = layer_norm_grad(&x, Some(&scale), &stats[1], &stats[2], &dy, None, 1);
    let dys = [dy.clone(), zeros.clone(), zeros];
    for (j, g) in paddle.iter().enumerate() {
        assert_gradient("layer_norm_grad", g, &numeric_grad(&f, &inputs, &dys, j));
    }
    let stats_grads = Some((&dmean, &dvar));
    let derived = layer_norm_grad(&x, Some(&scale), &stats[1], &stats[2], &dy, stats_grads, 1);
    let dys = [dy, dmean.clone(), dvar.clone()];
    for (j, g) in derived.iter().enumerate() {
        assert_gradient("layer_norm vjp", g, &numeric_grad(&f, &inputs, &dys, j));
    }

    // flash_attention, 4 query heads on 2 kv heads, both mask forms.
    for (mask_heads, causal) in [(1, false), (4, true), (4, false), (1, true)] {
        let (q, k, v) = (
            small(&[2, 3, 4, 2], 1),
            small(&[2, 4, 2, 2], 2),
            small(&[2, 4, 2, 3], 3),
        );
        let mask = small(&[2, mask_heads, 3, 4], 4);
        let f = move |t: &[Tensor]| attention(&t[0], &t[1], &t[2], Some(&t[3]), None, causal);
        let inputs = [q.clone(), k.clone(), v.clone(), mask.clone()];
        let outs = f(&inputs);
        let (dout, dsm, dlse) = (
            small(&[2, 3, 4, 3], 5),
            small(&[2, 4, 3, 4], 6),
            small(&[2, 4, 3], 7),
        );
        let none = |t: &Tensor| Tensor::full(t.shape(), 0.0);
        let what = format!("attention grad, mask heads {mask_heads}, causal {causal}");
        let paddle = attention_grad(
            &q,
            &k,
            &v,
            Some(&mask),
            causal,
            &outs[0],
            &outs[2],
            &dout,
            None,
        );
        let dys = [dout.clone(), none(&dsm), none(&dlse), none(&outs[3])];
        for (j, g) in paddle.iter().enumerate() {
            assert_gradient(&what, g, &numeric_grad(&f, &inputs, &dys, j));
        }
        let extra = Some((&dsm, &dlse));
        let derived = attention_grad(
            &q,
            &k,
            &v,
            Some(&mask),
            causal,
            &outs[0],
            &outs[2],
            &dout,
            extra,
        );
        let dys = [dout, dsm.clone(), dlse.clone(), none(&outs[3])];
        for (j, g) in derived.iter().enumerate() {
            assert_gradient(&what, g, &numeric_grad(&f, &inputs, &dys, j));
        }
    }
}
