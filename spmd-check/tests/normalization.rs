//! Normalizations against their kernels: `layer_norm` (grad in Paddle's
//! form `(x, scale, bias, mean, variance; out_grad)` and the derived one;
//! scale and bias flattened or not, sometimes absent), `fused_rms_norm`,
//! `group_norm`, `instance_norm` and `batch_norm` (training-mode
//! statistics).
//!
//! Absent optional inputs go through the rules' `*_optional` methods
//! (`common::nn::Absent`). Default: 48 cases per property;
//! `SPMD_CHECK_CASES=N` for more.

mod common;

use proptest::prelude::*;
use spmd_check::{Input, Tensor, Values, check_backward, check_forward, check_grad};
use spmd_core::SpmdRuleExt;
use spmd_core::{Attrs, DimsMapping, DistAttr, Mesh, Sharding, Spec};

use common::kernel_check;
use common::kernel_check::inputs;
use common::kernels::norm::{
    EPSILON, layer_norm, layer_norm_grad, normalize, normalize_grad, rms_norm, rms_norm_grad,
};
use common::nn::{Absent, Counts, complete, force, force_split, input_specs, small, small_mesh};
use common::{CASES, attrs, registry, run, shape};

#[test]
fn fused_rms_norm_against_the_kernel() {
    let d = kernel_check::Dirs::new();
    // x, scale, out, invvar.
    let layout = |x: &Vec<usize>| {
        let r = x.len();
        let lead: Vec<usize> = (0..r - 1).collect();
        (
            vec![r, 1, r, r - 1],
            vec![(0, lead.clone()), (2, lead.clone()), (3, lead)],
        )
    };
    run(CASES, kernel_check::case(shape(1..=3), layout), |c| {
        let rule = registry().build("fused_rms_norm", &Attrs::new()).unwrap();
        let mesh = Mesh::new(&c.mesh).unwrap();
        let x = &c.p;
        let values = [small(x, 1), small(&x[x.len() - 1..], 2)];
        let ins = inputs(&values, &[&c.a[0], &c.a[1]]);
        let op = |v: &[Tensor]| rms_norm(&v[0], &v[1]);
        d.forward_backward(&*rule, &mesh, &ins, &c.a[2..], &op)?;
        let vjp =
            |v: &[Tensor], _: &[Tensor], dy: &[Tensor]| rms_norm_grad(&v[0], &v[1], &dy[0], &dy[1]);
        d.grad(true, &*rule, &mesh, &ins, &c.a[2..], &op, &vjp)
    });
    d.assert_meaningful("fused_rms_norm", None, true, &[]);
}

/// A normalization's input: batch, channels, spatial dims, channels last
/// or not (NHWC / NCHW), and `group_norm`'s groups.
#[derive(Clone, Debug)]
struct NormP {
    n: usize,
    c: usize,
    spatial: Vec<usize>,
    last: bool,
    groups: usize,
    /// Statistics laid out as the output's batch (random ones mostly
    /// conflict with it, which the rules refuse).
    aligned: bool,
}

impl NormP {
    fn x(&self) -> Vec<usize> {
        let mut x = vec![self.n];
        if !self.last {
            x.push(self.c);
        }
        x.extend(&self.spatial);
        if self.last {
            x.push(self.c);
        }
        x
    }
    fn channel_dim(&self) -> usize {
        if self.last { self.spatial.len() + 1 } else { 1 }
    }
    fn format(&self) -> &'static str {
        if self.last { "NHWC" } else { "NCHW" }
    }
}

fn norm_params() -> impl Strategy<Value = NormP> {
    (
        1usize..=4,
        (1usize..=2, 1usize..=2),
        prop::collection::vec(1usize..=3, 0..=2),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(n, (groups, per), spatial, last, aligned)| NormP {
            n,
            c: groups * per,
            spatial,
            last,
            groups,
            aligned,
        })
}

#[test]
fn group_norm_against_the_kernel() {
    let d = kernel_check::Dirs::new();
    // x, scale, bias, y, mean, variance: the batch can stay sharded.
    let layout = |p: &NormP| {
        let r = p.x().len();
        (
            vec![r, 1, 1, r, 2, 2],
            vec![(0, vec![0]), (3, vec![0]), (4, vec![0]), (5, vec![0])],
        )
    };
    run(CASES, kernel_check::case(norm_params(), layout), |c| {
        let attrs = Attrs::new()
            .with("groups", c.p.groups as i64)
            .with("data_format", c.p.format());
        let rule = registry().build("group_norm", &attrs).unwrap();
        let mesh = Mesh::new(&c.mesh).unwrap();
        let mut a = c.a.clone();
        if c.p.aligned {
            let batch = a[3].dims_mapping.as_slice()[0];
            let stats = DistAttr::new(DimsMapping::from_shardings(&[batch, Sharding::REPLICATED]));
            (a[4], a[5]) = (stats.clone(), stats);
        }
        let (cd, groups) = (c.p.channel_dim(), c.p.groups);
        // Sample n's group of channel c: n · groups + c / (C / groups), C
        // what the block holds.
        let kernel = move |x: &Tensor, scale: &Tensor, bias: &Tensor| {
            let per = x.shape()[cd] / groups;
            let stat = move |i: &[usize]| i[0] * groups + i[cd] / per;
            let (y, mean, var) =
                normalize(x, x.shape()[0] * groups, &stat, &|i| i[cd], scale, bias);
            let s = [x.shape()[0], groups];
            vec![y, Tensor::new(&s, mean), Tensor::new(&s, var)]
        };
        let op = move |v: &[Tensor]| kernel(&v[0], &v[1], &v[2]);
        let ch = [c.p.c];
        let values = [small(&c.p.x(), 1), small(&ch, 2), small(&ch, 3)];
        let ins = inputs(&values, &[&a[0], &a[1], &a[2]]);
        d.forward_backward(&*rule, &mesh, &ins, &a[3..6], &op)?;

        // Paddle's group_norm_grad: (x, scale, bias, y, mean, variance;
        // y_grad).
        let dense = op(&values);
        let mut sig = ins.clone();
        for (t, a) in dense.iter().zip(&a[3..6]) {
            sig.push(Input::new(t.clone(), a.clone()));
        }
        let forward = move |v: &[Tensor]| vec![op(&v[..3]).swap_remove(0)];
        let grad = move |v: &[Tensor], _: &[Tensor], dy: &[Tensor]| {
            let x = &v[0];
            let per = x.shape()[cd] / groups;
            let stat = move |i: &[usize]| i[0] * groups + i[cd] / per;
            let inv = v[5].map(|var| 1.0 / (var + EPSILON).sqrt());
            normalize_grad(x, &dy[0], &stat, &|i| i[cd], &v[4], &inv, &v[1])
        };
        d.grad(false, &*rule, &mesh, &sig, &a[3..4], &forward, &grad)
    });
    d.assert_meaningful(
        "group_norm",
        Some("x, scale, bias, y, mean, variance; y_grad"),
        false,
        &[],
    );
}

#[test]
fn instance_norm_against_the_kernel() {
    let d = kernel_check::Dirs::new();
    // x, scale, bias, y, saved_mean, saved_variance (NCHW only): the
    // statistics `[N · C]` split by whole samples only, so a channel
    // sharding given must move or be gathered, and an uneven batch
    // gathered.
    // Mostly batches every small mesh divides, so that work splits; 3 for
    // the uneven case.
    let batch = prop::sample::select(vec![3usize, 4, 8, 12, 12]);
    let params = (norm_params(), batch).prop_map(|(mut p, n)| {
        (p.last, p.n) = (false, n);
        p
    });
    let layout = |p: &NormP| {
        let r = p.x().len();
        (
            vec![r, 1, 1, r, 1, 1],
            vec![(0, vec![0]), (3, vec![0, 1]), (4, vec![0]), (5, vec![0])],
        )
    };
    run(CASES, kernel_check::case(params, layout), |c| {
        let rule = registry().build("instance_norm", &Attrs::new()).unwrap();
        let mesh = Mesh::new(&c.mesh).unwrap();
        let mut a = c.a.clone();
        let y_grad = DistAttr::new(a[3].dims_mapping.clone());
        if c.p.aligned {
            let batch = a[3].dims_mapping.as_slice()[0];
            let stats = DistAttr::new(DimsMapping::from_shardings(&[batch]));
            (a[4], a[5]) = (stats.clone(), stats);
        }
        // Statistics per sample and channel, `[N · C]` batch-major (of the
        // block a device holds); the saved variance is the inverse std.
        let stat = |x: &Tensor| {
            let c = x.shape()[1];
            move |i: &[usize]| i[0] * c + i[1]
        };
        let op = move |v: &[Tensor]| {
            let x = &v[0];
            let n = x.shape()[0] * x.shape()[1];
            let (y, mean, var) = normalize(x, n, &stat(x), &|i| i[1], &v[1], &v[2]);
            let inv = var.iter().map(|v| 1.0 / (v + EPSILON).sqrt()).collect();
            vec![y, Tensor::new(&[n], mean), Tensor::new(&[n], inv)]
        };
        let ch = [c.p.c];
        let values = [small(&c.p.x(), 1), small(&ch, 2), small(&ch, 3)];
        let ins = inputs(&values, &[&a[0], &a[1], &a[2]]);
        d.forward_backward(&*rule, &mesh, &ins, &a[3..6], &op)?;

        // Paddle's instance_norm_grad: (x, scale, bias, saved_mean,
        // saved_variance; y_grad).
        let dense = op(&values);
        let mut sig = ins.clone();
        sig.push(Input::new(dense[1].clone(), a[4].clone()));
        sig.push(Input::new(dense[2].clone(), a[5].clone()));
        let forward = move |v: &[Tensor]| vec![op(&v[..3]).swap_remove(0)];
        let grad = move |v: &[Tensor], _: &[Tensor], dy: &[Tensor]| {
            normalize_grad(&v[0], &dy[0], &stat(&v[0]), &|i| i[1], &v[3], &v[4], &v[1])
        };
        d.grad(false, &*rule, &mesh, &sig, &[y_grad], &forward, &grad)
    });
    d.assert_meaningful(
        "instance_norm",
        Some("x, scale, bias, saved_mean, saved_variance; y_grad"),
        false,
        &[],
    );
}

const MOMENTUM: f64 = 0.9;

#[test]
fn batch_norm_against_the_kernel() {
    let d = kernel_check::Dirs::new();
    // x, mean, variance, scale, bias; out, mean_out, variance_out,
    // saved_mean, saved_variance, reserve_space: the channels can stay
    // sharded.
    let layout = |p: &NormP| {
        let r = p.x().len();
        let cd = p.channel_dim();
        let mut ranks = vec![1; 11];
        (ranks[0], ranks[5]) = (r, r);
        let mut forced = vec![(0, vec![cd]), (5, vec![cd])];
        forced.extend([1, 2, 6, 7, 8, 9].map(|i| (i, vec![0])));
        (ranks, forced)
    };
    run(CASES, kernel_check::case(norm_params(), layout), |c| {
        let attrs = Attrs::new().with("data_format", c.p.format());
        let rule = registry().build("batch_norm", &attrs).unwrap();
        let mesh = Mesh::new(&c.mesh).unwrap();
        let cd = c.p.channel_dim();
        let mut a = c.a.clone();
        if c.p.aligned {
            // The `[C]` tensors laid out as x's (inputs) and out's
            // (outputs) channels.
            let on = |t: &DistAttr| {
                let ch = t.dims_mapping.as_slice()[cd];
                DistAttr::new(DimsMapping::from_shardings(&[ch]))
            };
            let (x, out) = (on(&a[0]), on(&a[5]));
            a[1..3].fill(x);
            a[6..10].fill(out);
        }
        let chan = move |i: &[usize]| i[cd];
        // Training: statistics per channel over the batch and spatial dims;
        // the running ones move towards them; the saved variance is the
        // inverse std.
        let op = move |v: &[Tensor]| {
            let (x, running_mean, running_var) = (&v[0], &v[1], &v[2]);
            let n = x.shape()[cd];
            let (out, mean, var) = normalize(x, n, &chan, &chan, &v[3], &v[4]);
            let mix = |r: &Tensor, b: &[f64]| {
                assert_eq!(r.len(), n, "running statistics do not fit x's block");
                let m = r.data().iter().zip(b);
                Tensor::new(
                    &[n],
                    m.map(|(r, b)| MOMENTUM * r + (1.0 - MOMENTUM) * b)
                        .collect(),
                )
            };
            let inv = var.iter().map(|v| 1.0 / (v + EPSILON).sqrt()).collect();
            vec![
                out,
                mix(running_mean, &mean),
                mix(running_var, &var),
                Tensor::new(&[n], mean),
                Tensor::new(&[n], inv),
                Tensor::full(&[1], 0.0),
            ]
        };
        // Real scale and bias: a device must hold its own channels' ones.
        let ch = [c.p.c];
        let values = [
            small(&c.p.x(), 1),
            small(&ch, 2),
            small(&ch, 3).map(f64::abs),
            small(&ch, 4),
            small(&ch, 5),
        ];
        let given: Vec<&DistAttr> = a[..5].iter().collect();
        let ins = inputs(&values, &given);
        d.forward_backward(&*rule, &mesh, &ins, &a[5..], &op)?;

        // Paddle's batch_norm_grad: (x, scale, bias, mean_out,
        // variance_out, saved_mean, saved_variance, reserve_space;
        // out_grad).
        // scale_grad and bias_grad are sharded with the channels. The
        // statistics are given as the forward answered them: by x's
        // channels (random layouts of their own would mostly conflict).
        let dense = op(&values);
        let x = Input::new(values[0].clone(), a[0].clone());
        let by_channel = DistAttr::new(DimsMapping::from_shardings(&[a[0]
            .dims_mapping
            .as_slice()[cd]]));
        // Scale and bias as forward required them (by channel): the grad
        // op merges them with x.
        let mut sig = vec![
            x,
            Input::new(values[3].clone(), by_channel.clone()),
            Input::new(values[4].clone(), by_channel.clone()),
        ];
        for k in 1..6 {
            let attr = if k < 5 {
                by_channel.clone()
            } else {
                a[5 + k].clone()
            };
            sig.push(Input::new(dense[k].clone(), attr));
        }
        // out_grad as out is laid out (x's layout, not partial).
        let out_grad = DistAttr::new(a[0].dims_mapping.clone());
        let forward = move |v: &[Tensor]| {
            let zeros = Tensor::full(v[1].shape(), 0.0);
            let x = [
                v[0].clone(),
                zeros.clone(),
                zeros,
                v[1].clone(),
                v[2].clone(),
            ];
            vec![op(&x).swap_remove(0)]
        };
        let grad = move |v: &[Tensor], _: &[Tensor], dy: &[Tensor]| {
            normalize_grad(&v[0], &dy[0], &chan, &chan, &v[5], &v[6], &v[1])
        };
        d.grad(false, &*rule, &mesh, &sig, &[out_grad], &forward, &grad)
    });
    d.assert_meaningful(
        "batch_norm",
        Some("x, scale, bias, mean_out, variance_out, saved_mean, saved_variance, reserve_space; out_grad"),
        false,
        &[],
    );
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
            &rule.forward(&mesh, &input_specs(&inputs)),
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
            &rule.grad(&mesh, &input_specs(&sig), &[dy]),
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
            &rule.grad(&mesh, &input_specs(&inputs), &dy_specs),
            check_grad(&rule, &mesh, &inputs, &c.attrs[5..8], op, vjp),
        )?;
        Ok(())
    });
    fw.assert_meaningful("layer_norm forward");
    bw.assert_meaningful("layer_norm backward");
    gr.assert_meaningful("layer_norm grad (Paddle's signature)");
    gd.assert_meaningful("layer_norm grad (derived form)");
}
