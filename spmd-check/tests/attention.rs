//! Attention against its kernels: `flash_attention` forward, backward and
//! the grad in both forms (Paddle's `(q, k, v, out, softmax_lse,
//! seed_offset, attn_mask; out_grad)` and the derived one), with
//! grouped-query heads, a per-head or broadcast mask, causal or not, the
//! seed and the mask sometimes absent; `fused_rotary_position_embedding`.
//!
//! Default: 48 cases per property; `SPMD_CHECK_CASES=N` for more.

mod common;

use proptest::prelude::*;
use spmd_check::{
    Input, Tensor, check_backward, check_forward, check_grad, check_grad_of_signature,
};
use spmd_core::SpmdRuleExt;
use spmd_core::{Attrs, DimsMapping, DistAttr, Mesh, Sharding, Spec};

use common::kernel_check;
use common::kernel_check::inputs;
use common::kernels::attention::{attention, attention_grad, rope};
use common::nn::{Absent, Counts, complete, force, force_split, input_specs, small, small_mesh};
use common::{CASES, attrs, registry, run};

// ------------------------------------------------------------------- rope

#[derive(Clone, Debug)]
struct RopeP {
    b: usize,
    s: usize,
    h: usize,
    d: usize,
    time_major: bool,
    neox: bool,
    k: bool,
    v: bool,
    /// sin and cos: absent, `[1, s, 1, d]` (true) or `[s, d]`.
    angles: Option<bool>,
    /// position_ids `[b, s]` (only with angles, which it indexes).
    pos: bool,
    /// k, v and the outputs (grads) laid out as q: random ones mostly
    /// conflict, which the rule refuses.
    aligned: bool,
}

impl RopeP {
    fn qkv(&self) -> Vec<usize> {
        if self.time_major {
            vec![self.s, self.b, self.h, self.d]
        } else {
            vec![self.b, self.s, self.h, self.d]
        }
    }
    fn angle_shape(&self) -> Option<Vec<usize>> {
        self.angles.map(|four| {
            if four {
                vec![1, self.s, 1, self.d]
            } else {
                vec![self.s, self.d]
            }
        })
    }
    /// Which of q, k, v, sin, cos, position_ids are given.
    fn given(&self) -> [bool; 6] {
        let a = self.angles.is_some();
        [true, self.k, self.v, a, a, self.pos]
    }
}

fn rope_params() -> impl Strategy<Value = RopeP> {
    (
        (
            1usize..=2,
            1usize..=4,
            1usize..=2,
            prop::sample::select(vec![2usize, 4]),
        ),
        (any::<bool>(), any::<bool>()),
        (any::<bool>(), any::<bool>()),
        (prop::option::weighted(0.7, any::<bool>()), any::<bool>()),
        prop::bool::weighted(0.6),
    )
        .prop_map(
            |((b, s, h, d), (time_major, neox), (k, v), (angles, pos), aligned)| RopeP {
                b,
                s,
                h,
                d,
                time_major,
                neox,
                k,
                v,
                angles,
                pos: pos && angles.is_some(),
                aligned,
            },
        )
}

/// q, k, v, sin, cos, position_ids, out_q, out_k, out_v (rank 0: absent).
fn rope_layout(p: &RopeP) -> kernel_check::Layout {
    let g = p.given();
    let angle = p.angle_shape().map_or(0, |s| s.len());
    let ranks = vec![
        4,
        if g[1] { 4 } else { 0 },
        if g[2] { 4 } else { 0 },
        angle,
        angle,
        if g[5] { 2 } else { 0 },
        4,
        if g[1] { 4 } else { 0 },
        if g[2] { 4 } else { 0 },
    ];
    // Anything but the head dim can stay sharded (sometimes); q is forced
    // on the head dim too (the rule must gather it).
    (ranks, vec![(0, vec![0, 1, 2, 3]), (6, vec![0, 1, 2])])
}

#[test]
fn fused_rotary_position_embedding_against_the_kernel() {
    let d = kernel_check::Dirs::new();
    run(CASES, kernel_check::case(rope_params(), rope_layout), |c| {
        let p = c.p.clone();
        let attrs = Attrs::new()
            .with("time_major", p.time_major)
            .with("use_neox_rotary_style", p.neox);
        let built = registry()
            .build("fused_rotary_position_embedding", &attrs)
            .unwrap();
        let g = p.given();
        let bits = |given: &[bool]| {
            given
                .iter()
                .enumerate()
                .fold(0, |m, (i, &here)| m | u64::from(!here) << i)
        };
        let outputs = bits(&g[..3]);
        let rule = Absent {
            rule: &*built,
            forward: bits(&g),
            grad: bits(&g),
            outputs,
        };
        // Paddle's grad op takes (sin, cos, position_ids; the grads).
        let sig_rule = Absent {
            rule: &*built,
            forward: bits(&g),
            grad: bits(&g[3..]),
            outputs,
        };
        let mesh = Mesh::new(&c.mesh).unwrap();
        let placeholder = || Tensor::full(&[], 0.0);
        let qkv = p.qkv();
        let angles = p.angle_shape();
        let s = p.s;
        let values: Vec<Tensor> = (0..6)
            .map(|i| match i {
                _ if !g[i] => placeholder(),
                0..=2 => small(&qkv, i as u64 + 1),
                3 | 4 => small(angles.as_deref().unwrap(), i as u64 + 1),
                // Positions in [0, s), not in order.
                _ => Tensor::from_fn(&[p.b, s], |i| ((i[0] + 2 * i[1] + 1) % s) as f64),
            })
            .collect();
        let q = DistAttr::new(c.a[0].dims_mapping.clone());
        let attr = |i: usize| match c.a[i].dims_mapping.rank() {
            0 => DistAttr::replicated(0),
            _ if p.aligned && [1, 2, 6, 7, 8].contains(&i) => q.clone(),
            _ => c.a[i].clone(),
        };
        let given: Vec<DistAttr> = (0..6).map(attr).collect();
        let given: Vec<&DistAttr> = given.iter().collect();
        let ins = inputs(&values, &given);
        let outs: Vec<DistAttr> = (6..9).map(attr).collect();
        let (tm, neox) = (p.time_major, p.neox);
        let angles_of = move |v: &[Tensor]| {
            (
                g[3].then(|| v[0].clone()),
                g[4].then(|| v[1].clone()),
                g[5].then(|| v[2].clone()),
            )
        };
        let apply = move |x: &[Tensor], angles: &[Tensor], grad: bool| -> Vec<Tensor> {
            let (sin, cos, pos) = angles_of(angles);
            (0..3)
                .map(|i| {
                    if g[i] {
                        rope(
                            &x[i],
                            sin.as_ref(),
                            cos.as_ref(),
                            pos.as_ref(),
                            tm,
                            neox,
                            grad,
                        )
                    } else {
                        Tensor::full(&[], 0.0)
                    }
                })
                .collect()
        };
        let op = move |v: &[Tensor]| apply(&v[..3], &v[3..], false);
        d.forward_backward(&rule, &mesh, &ins, &outs, &op)?;

        // Paddle's grad op: the output grads rotated back.
        let sig = ins[3..].to_vec();
        let shapes = move |_: &[Tensor]| -> Vec<Tensor> {
            (0..3)
                .map(|i| Tensor::full(if g[i] { &qkv } else { &[] }, 0.0))
                .collect()
        };
        let grad = move |v: &[Tensor], _: &[Tensor], dy: &[Tensor]| apply(dy, v, true);
        d.grad(false, &sig_rule, &mesh, &sig, &outs, &shapes, &grad)?;

        // Derived: (q, k, v, sin, cos, position_ids; the grads).
        let vjp = move |v: &[Tensor], _: &[Tensor], dy: &[Tensor]| apply(dy, &v[3..], true);
        d.grad(true, &rule, &mesh, &ins, &outs, &op, &vjp)
    });
    d.assert_meaningful(
        "fused_rotary_position_embedding",
        Some("sin, cos, position_ids; out_q_grad, out_k_grad, out_v_grad"),
        true,
        &[],
    );
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
            &fwd_rule.forward(&mesh, &input_specs(&inputs)),
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
            &sig_rule.grad(&mesh, &input_specs(&sig), &[dy]),
            check_grad_of_signature(&sig_rule, &mesh, &sig, &c.attrs[12..13], forward, grad),
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
            &fwd_rule.grad(&mesh, &input_specs(&inputs), &dy_specs),
            check_grad(&fwd_rule, &mesh, &inputs, &c.attrs[5..9], op, vjp),
        )?;
        Ok(())
    });
    fw.assert_meaningful("flash_attention forward");
    bw.assert_meaningful("flash_attention backward");
    gr.assert_meaningful("flash_attention grad (Paddle's signature)");
    gd.assert_meaningful("flash_attention grad (derived form)");
}
