//! Attention: flash attention's scores, probabilities, outputs and grads (grouped-query heads, masks, causal), and rotary position embedding.

use spmd_check::Tensor;

// ---------------------------------------------------------- flash_attention

/// The extents of a device's q, k, v blocks, checked to fit together:
/// q `[b, s, h, d]`, k `[b, t, g, d]`, v `[b, t, g, e]`, each kv head
/// serving `rep` consecutive query heads.
pub struct AttnDims {
    pub b: usize,
    pub s: usize,
    pub t: usize,
    pub h: usize,
    pub rep: usize,
    pub d: usize,
    pub e: usize,
}

pub fn attn_dims(q: &Tensor, k: &Tensor, v: &Tensor) -> AttnDims {
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
pub fn scores(q: &Tensor, k: &Tensor, mask: Option<&Tensor>, causal: bool, n: &AttnDims) -> Tensor {
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
pub fn logsumexp(scores: &Tensor) -> Tensor {
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
pub fn probabilities(scores: &Tensor, lse: &Tensor) -> Tensor {
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
pub fn attention(
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
pub fn attention_grad(
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

/// The rotary embedding of `x` (`[b, s, h, d]`, `[s, b, h, d]` when
/// `time_major`) or, with `grad`, its transpose applied to `x` (an output
/// grad): `out = x·cos + rot(x)·sin`, rot pairing adjacent elements of the
/// head dim (`neox`) or its halves. The angles at a position are read from
/// sin and cos (at `position_ids`' positions when given), else computed
/// from the position, the index along the sequence.
#[allow(clippy::too_many_arguments)]
pub fn rope(
    x: &Tensor,
    sin: Option<&Tensor>,
    cos: Option<&Tensor>,
    pos: Option<&Tensor>,
    time_major: bool,
    neox: bool,
    grad: bool,
) -> Tensor {
    let d = x.shape()[3];
    let partner = |e: usize| if neox { e ^ 1 } else { (e + d / 2) % d };
    let sign = |e: usize| {
        let first = if neox { e.is_multiple_of(2) } else { e < d / 2 };
        if first { -1.0 } else { 1.0 }
    };
    // (sin, cos) at element `i`'s position for head-dim element `e`.
    let angle = |i: &[usize], e: usize| {
        let (b, s) = if time_major {
            (i[1], i[0])
        } else {
            (i[0], i[1])
        };
        let p = pos.map_or(s, |t| t.get(&[b, s]) as usize);
        match (sin, cos) {
            (Some(sn), Some(cs)) => {
                let at = |t: &Tensor| {
                    assert_eq!(t.shape()[t.rank() - 1], d, "angles do not fit the head dim");
                    if t.rank() == 4 {
                        t.get(&[0, p, 0, e])
                    } else {
                        t.get(&[p, e])
                    }
                };
                (at(sn), at(cs))
            }
            _ => {
                let pair = if neox { e / 2 } else { e % (d / 2) };
                let theta = p as f64 * 10000f64.powf(-2.0 * pair as f64 / d as f64);
                (theta.sin(), theta.cos())
            }
        }
    };
    Tensor::from_fn(x.shape(), |i| {
        let e = i[3];
        let f = partner(e);
        let mut j = i.to_vec();
        j[3] = f;
        let (s_e, c_e) = angle(i, e);
        if grad {
            // dx[e] = dy[e]·cos[e] + dy[f]·sin[f]·sign(f), f the partner.
            x.get(i) * c_e + x.get(&j) * angle(i, f).0 * sign(f)
        } else {
            x.get(i) * c_e + sign(e) * x.get(&j) * s_e
        }
    })
}
