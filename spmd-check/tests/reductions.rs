//! Reductions: `sum` / `max` / `min` / `prod` and `all` / `any` / `amax` /
//! `amin` (`axis`, `keep_dim`) against the reduction einsum with the op's
//! reduce type, the grads of `max` / `min` / `prod` / `amax` / `amin`
//! against their kernels; reductions whose partial results need a reduce
//! type or none: `p_norm` (`Max` / `Min` / `Sum` partials for p = inf /
//! -inf / 0, 1), `frobenius_norm`, `logsumexp`, `squared_l2_norm` (`Sum`),
//! `mean_all` (`Avg`); and the arg-reductions `argmax` / `argmin` (integer
//! outputs, compared exactly; their gradient is zero everywhere, which any
//! layout holds, so it is not checked).
//!
//! Default: 48–64 cases per property; `SPMD_CHECK_CASES=N` for more.

mod common;

use proptest::prelude::*;
use spmd_check::{EinsumCheck, Input, Tensor, Values, check_grad, einsum};
use spmd_core::{Attrs, DimsMapping, DistAttr, Mesh, ReduceType, Sharding, SpmdRule};

use common::einsum_check::{LABELS, Tallies, check_unary_einsum, paddle_axis};
use common::kernel_check::{axis_attr, inputs, shape_axis};
use common::kernels::along_axis::arg_reduce;
use common::kernels::reduce::logsumexp;
use common::kernels::reduce::{p_norm, p_norm_grad, reduce, reduce_grad, reduced_shape};
use common::kernels::{one_axis, others};
use common::nn::small;
use common::{CASES, CORE_CASES, Tally, build, registry, run, shape, specs};
use common::{einsum_check, kernel_check};

// -------------------------------------------------------------- reductions

#[derive(Clone, Debug)]
struct ReduceCase {
    op: &'static str,
    shape: Vec<usize>,
    /// Paddle's `axis` attribute (negative counts from the end; empty = all).
    axis: Vec<i64>,
    keep_dim: bool,
    l: einsum_check::Layout,
}

impl ReduceCase {
    fn reduce(&self) -> ReduceType {
        match self.op {
            "sum" => ReduceType::Sum,
            "max" => ReduceType::Max,
            "min" => ReduceType::Min,
            _ => ReduceType::Prod,
        }
    }
    fn reduced(&self) -> Vec<bool> {
        let r = self.shape.len();
        let mut red = vec![self.axis.is_empty(); r];
        for &a in &self.axis {
            red[a.rem_euclid(r as i64) as usize] = true;
        }
        red
    }
    /// The reduction written from first principles: kept dims keep their
    /// label, reduced ones vanish (or become `1` with `keep_dim`).
    fn notation(&self) -> String {
        let labels = "abcd";
        let input: String = labels[..self.shape.len()].to_string();
        let output: String = input
            .chars()
            .zip(self.reduced())
            .filter_map(|(c, red)| match (red, self.keep_dim) {
                (false, _) => Some(c),
                (true, true) => Some('1'),
                (true, false) => None,
            })
            .collect();
        format!("{input}->{output}")
    }
    fn out_shape(&self) -> Vec<usize> {
        self.shape
            .iter()
            .zip(self.reduced())
            .filter_map(|(&e, red)| match (red, self.keep_dim) {
                (false, _) => Some(e),
                (true, true) => Some(1),
                (true, false) => None,
            })
            .collect()
    }
    fn rule(&self) -> Box<dyn SpmdRule> {
        build(
            self.op,
            &Attrs::new()
                .with("axis", self.axis.clone())
                .with("keep_dim", self.keep_dim),
        )
    }
    /// For each input index, the index of its output value.
    fn out_index(&self, i: &[usize]) -> Vec<usize> {
        i.iter()
            .zip(self.reduced())
            .filter_map(|(&v, red)| match (red, self.keep_dim) {
                (false, _) => Some(v),
                (true, true) => Some(0),
                (true, false) => None,
            })
            .collect()
    }
}

fn reduce_case() -> impl Strategy<Value = ReduceCase> {
    (
        prop::sample::select(vec!["sum", "max", "min", "prod"]),
        prop::collection::vec(1usize..=4, 1..=3),
        any::<bool>(),
    )
        .prop_flat_map(|(op, shape, keep_dim)| {
            let r = shape.len();
            let axis = prop::collection::vec((0..r, any::<bool>()), 0..=r).prop_map(move |v| {
                let mut axis: Vec<i64> = v
                    .iter()
                    .map(|&(a, neg)| if neg { a as i64 - r as i64 } else { a as i64 })
                    .collect();
                axis.sort_by_key(|a| a.rem_euclid(r as i64));
                axis.dedup_by_key(|a| a.rem_euclid(r as i64));
                axis
            });
            (Just((op, shape)), axis, Just(keep_dim))
        })
        .prop_flat_map(|((op, shape), axis, keep_dim)| {
            let c = ReduceCase {
                op,
                shape: shape.clone(),
                axis,
                keep_dim,
                l: einsum_check::Layout {
                    mesh: vec![],
                    inputs: vec![],
                    outputs: vec![],
                },
            };
            let out = c.out_shape();
            (Just(c), einsum_check::layout(vec![shape], vec![out]))
        })
        .prop_map(|(c, l)| ReduceCase { l, ..c })
}

#[test]
fn reductions_forward_and_backward() {
    let (fw, bw) = (Tally::new(), Tally::new());
    run(CORE_CASES * 2, reduce_case(), |c| {
        let rule = c.rule();
        let mesh = Mesh::new(&c.l.mesh).unwrap();
        let check = EinsumCheck::new(&c.notation()).unwrap().reduce(c.reduce());
        let shapes = vec![c.shape.clone()];
        fw.record(check.forward(&*rule, &mesh, &specs(&shapes, &c.l.inputs)))?;
        bw.record(check.backward(&*rule, &mesh, &[&c.shape], &c.l.outputs))?;
        Ok(())
    });
    fw.assert_meaningful("reduction forward");
    bw.assert_meaningful("reduction backward");
}

/// The grad kernels: sum broadcasts dy back; max / min route it to the
/// extremum (`dy·[x = out]`, probe values are distinct); prod scales it by
/// the product of the others (`dy·out/x`).
fn reduction_grad(c: &ReduceCase, x: &Tensor, out: &Tensor, dy: &Tensor) -> Tensor {
    Tensor::from_fn(x.shape(), |i| {
        let o = c.out_index(i);
        let (g, y) = (dy.get(&o), out.get(&o));
        match c.reduce() {
            ReduceType::Sum => g,
            ReduceType::Prod => g * y / x.get(i),
            _ => g * f64::from(x.get(i) == y),
        }
    })
}

#[test]
fn reduction_grads() {
    let tally = Tally::new();
    run(CORE_CASES * 2, reduce_case(), |c| {
        let rule = c.rule();
        let mesh = Mesh::new(&c.l.mesh).unwrap();
        if c.reduce() == ReduceType::Sum {
            let check = EinsumCheck::new(&c.notation()).unwrap();
            let shapes = vec![c.shape.clone()];
            return tally.record(check.grad(
                &*rule,
                &mesh,
                &specs(&shapes, &c.l.inputs),
                &c.l.outputs,
            ));
        }
        // Max / min / prod grads read `x`, so `x` must be laid out like its
        // grad (Paddle reshards it so); the rule keeps `x`'s given layout
        // (`grad(ignores(x))`, see known_unsound.rs), so give it that layout.
        let dy = &c.l.outputs[0];
        let mut x_map = Vec::new();
        let mut k = 0;
        for red in c.reduced() {
            if red {
                x_map.push(Sharding::REPLICATED);
                k += usize::from(c.keep_dim);
            } else {
                x_map.push(dy.dims_mapping[k]);
                k += 1;
            }
        }
        let x_attr = DistAttr::new(DimsMapping::from_shardings(&x_map));
        let x = Tensor::probe(&c.shape, 11, Values::NearOne);
        let reduce = c.reduce();
        let notation = c.notation();
        let forward = |t: &[Tensor]| spmd_check::einsum(&notation, &[&t[0]], reduce).unwrap();
        let grad = |x: &[Tensor], out: &[Tensor], dy: &[Tensor]| {
            vec![reduction_grad(&c, &x[0], &out[0], &dy[0])]
        };
        tally.record(check_grad(
            &*rule,
            &mesh,
            &[Input::new(x, x_attr)],
            &c.l.outputs,
            forward,
            grad,
        ))
    });
    tally.assert_meaningful("reduction grads");
}

// -------------------------------------------------------------- reductions

#[derive(Clone, Debug)]
struct AnyAllCase {
    op: &'static str,
    shape: Vec<usize>,
    /// Paddle's `axis` (negative counts from the end; empty = all).
    axis: Vec<i64>,
    keep_dim: bool,
    l: einsum_check::Layout,
}

impl AnyAllCase {
    fn reduce(&self) -> ReduceType {
        match self.op {
            "all" => ReduceType::All,
            "any" => ReduceType::Any,
            "amax" => ReduceType::Max,
            _ => ReduceType::Min,
        }
    }
    fn reduced(&self) -> Vec<bool> {
        let r = self.shape.len();
        let mut red = vec![self.axis.is_empty(); r];
        for &a in &self.axis {
            red[a.rem_euclid(r as i64) as usize] = true;
        }
        red
    }
    /// For each kept, keep-dim'd or dropped dim: its label, `1`, or nothing.
    fn kept<T: Copy>(&self, xs: &[T], one: T) -> Vec<T> {
        xs.iter()
            .zip(self.reduced())
            .filter_map(|(&x, red)| match (red, self.keep_dim) {
                (false, _) => Some(x),
                (true, true) => Some(one),
                (true, false) => None,
            })
            .collect()
    }
    fn notation(&self) -> String {
        let input = &LABELS[..self.shape.len()];
        let chars: Vec<char> = input.chars().collect();
        let output: String = self.kept(&chars, '1').into_iter().collect();
        format!("{input}->{output}")
    }
    fn out_shape(&self) -> Vec<usize> {
        self.kept(&self.shape, 1)
    }
    fn rule(&self) -> Box<dyn SpmdRule> {
        build(
            self.op,
            &Attrs::new()
                .with("axis", self.axis.clone())
                .with("keep_dim", self.keep_dim),
        )
    }
}

fn any_all_case() -> impl Strategy<Value = AnyAllCase> {
    (
        prop::sample::select(vec!["all", "any", "amax", "amin"]),
        prop::collection::vec(1usize..=4, 1..=3),
        any::<bool>(),
    )
        .prop_flat_map(|(op, shape, keep_dim)| {
            let r = shape.len();
            let axis = prop::collection::vec((0..r, any::<bool>()), 0..=r).prop_map(move |v| {
                let mut axis: Vec<i64> = v.iter().map(|&(a, n)| paddle_axis(a, r, n)).collect();
                axis.sort_by_key(|a| a.rem_euclid(r as i64));
                axis.dedup_by_key(|a| a.rem_euclid(r as i64));
                axis
            });
            (Just((op, shape)), axis, Just(keep_dim))
        })
        .prop_flat_map(|((op, shape), axis, keep_dim)| {
            let c = AnyAllCase {
                op,
                shape: shape.clone(),
                axis,
                keep_dim,
                l: einsum_check::Layout {
                    mesh: vec![],
                    inputs: vec![],
                    outputs: vec![],
                },
            };
            let out = c.out_shape();
            (Just(c), einsum_check::layout(vec![shape], vec![out]))
        })
        .prop_map(|(c, l)| AnyAllCase { l, ..c })
}

#[test]
fn all_any_amax_amin_forward_and_backward() {
    static T: Tallies = Tallies::new();
    run(CASES * 2, any_all_case(), |c| {
        let check = EinsumCheck::new(&c.notation()).unwrap().reduce(c.reduce());
        check_unary_einsum(&T, &*c.rule(), None, &check, &c.shape, &c.l, true)
    });
    T.assert_meaningful("all/any/amax/amin", false);
}

/// `amax` / `amin` grads against the `max` kernel `dy·[x = out]` (probe
/// values are distinct, so there are no ties to share the grad). The kernel
/// reads `x`, so `x` is given laid out like its grad, as `reduction_grads` does.
#[test]
fn amax_amin_grads() {
    let tally = Tally::new();
    run(CASES, any_all_case(), |c| {
        if !matches!(c.op, "amax" | "amin") {
            return Ok(());
        }
        let rule = c.rule();
        let mesh = Mesh::new(&c.l.mesh).unwrap();
        let dy = &c.l.outputs[0];
        let mut x_map = Vec::new();
        let mut k = 0;
        for red in c.reduced() {
            if red {
                x_map.push(Sharding::REPLICATED);
                k += usize::from(c.keep_dim);
            } else {
                x_map.push(dy.dims_mapping[k]);
                k += 1;
            }
        }
        let x_attr = DistAttr::new(DimsMapping::from_shardings(&x_map));
        let x = Tensor::probe(&c.shape, 11, Values::Integers);
        let (reduce, notation) = (c.reduce(), c.notation());
        let forward = |t: &[Tensor]| einsum(&notation, &[&t[0]], reduce).unwrap();
        let grad = |x: &[Tensor], out: &[Tensor], dy: &[Tensor]| {
            vec![Tensor::from_fn(x[0].shape(), |i| {
                let o = c.kept(i, 0);
                dy[0].get(&o) * f64::from(x[0].get(i) == out[0].get(&o))
            })]
        };
        tally.record(check_grad(
            &*rule,
            &mesh,
            &[Input::new(x, x_attr)],
            &c.l.outputs,
            forward,
            grad,
        ))
    });
    tally.assert_meaningful("amax/amin grads");
}

#[derive(Clone, Debug)]
struct ArgP {
    x: Vec<usize>,
    axis: usize,
    negative: bool,
    keepdims: bool,
    flatten: bool,
}

fn arg_params() -> impl Strategy<Value = ArgP> {
    (shape_axis(1..=3), any::<bool>(), prop::bool::weighted(0.15)).prop_map(
        |((x, axis, negative), keepdims, flatten)| ArgP {
            x,
            axis,
            negative,
            keepdims,
            flatten,
        },
    )
}

/// x, out.
fn arg_layout(p: &ArgP) -> kernel_check::Layout {
    let rank = p.x.len();
    let (out_rank, out_dims) = match (p.flatten, p.keepdims) {
        (true, true) => (rank, vec![]),
        (true, false) => (0, vec![]),
        (false, true) => (rank, others(rank, p.axis)),
        (false, false) => (rank - 1, (0..rank - 1).collect()),
    };
    // x: a kept dim, then any dim, the reduced axis too (the rule must
    // gather it; forcing only that would leave too few answers splitting).
    let x_dims = if p.flatten {
        vec![]
    } else {
        others(rank, p.axis)
    };
    let forced = vec![(0, x_dims), (0, (0..rank).collect()), (1, out_dims)];
    (vec![rank, out_rank], forced)
}

fn arg_property(name: &'static str, min: bool) {
    let d = kernel_check::Dirs::new();
    run(CASES, kernel_check::case(arg_params(), arg_layout), |c| {
        let ArgP {
            ref x,
            axis,
            negative,
            keepdims,
            flatten,
        } = c.p;
        let attrs = Attrs::new()
            .with("axis", axis_attr(axis, x.len(), negative))
            .with("keepdims", keepdims)
            .with("flatten", flatten);
        let rule = registry().build(name, &attrs).unwrap();
        let mesh = Mesh::new(&c.mesh).unwrap();
        let op = move |v: &[Tensor]| vec![arg_reduce(&v[0], axis, keepdims, flatten, min)];
        let values = [Tensor::probe(x, 1, Values::Integers)];
        d.forward_backward(&*rule, &mesh, &inputs(&values, &[&c.a[0]]), &c.a[1..], &op)
    });
    d.assert_meaningful(name, None, false, &[]);
}

#[test]
fn argmax_against_the_kernel() {
    arg_property("argmax", false);
}

#[test]
fn argmin_against_the_kernel() {
    arg_property("argmin", true);
}

// ------------------------------------------------------------- reductions

#[derive(Clone, Debug)]
struct ReduceP {
    x: Vec<usize>,
    /// The reduced dims; all of them when `all` (the op's own flag, or an
    /// empty axis list).
    reduced: Vec<bool>,
    all: bool,
    keep: bool,
    /// `p_norm`'s order.
    p: f64,
}

impl ReduceP {
    fn flags(&self) -> Vec<bool> {
        if self.all {
            vec![true; self.x.len()]
        } else {
            self.reduced.clone()
        }
    }
    fn axis(&self) -> Vec<i64> {
        if self.all {
            return Vec::new();
        }
        (0..self.x.len() as i64)
            .filter(|&d| self.reduced[d as usize])
            .collect()
    }
}

fn reduce_params() -> impl Strategy<Value = ReduceP> {
    (
        shape(1..=3),
        prop::collection::vec(prop::bool::weighted(0.4), 3),
        prop::bool::weighted(0.1),
        any::<bool>(),
        prop::sample::select(vec![2.0, 1.0, 0.0, 3.0, f64::INFINITY, f64::NEG_INFINITY]),
    )
        .prop_map(|(x, mut reduced, all, keep, p)| {
            reduced.truncate(x.len());
            // At least one reduced dim (else the op is the identity).
            if !reduced.contains(&true) {
                reduced[x.len() - 1] = true;
            }
            ReduceP {
                x,
                reduced,
                all,
                keep,
                p,
            }
        })
}

/// x, out: shard a kept dim of each, or (for reductions with partial
/// results) a reduced dim of x.
fn reduce_layout(p: &ReduceP) -> kernel_check::Layout {
    let flags = p.flags();
    let kept: Vec<usize> = (0..p.x.len()).filter(|&d| !flags[d]).collect();
    let out_rank = reduced_shape(&p.x, &flags, p.keep).len();
    let out_dims: Vec<usize> = if p.keep {
        kept.clone()
    } else {
        (0..out_rank).collect()
    };
    (vec![p.x.len(), out_rank], vec![(0, kept), (1, out_dims)])
}

/// Like `reduce_layout`, x forced to shard any dim: reduced dims too, for
/// the ops whose partial results some reduce type finishes.
fn partial_layout(p: &ReduceP) -> kernel_check::Layout {
    let (ranks, mut forced) = reduce_layout(p);
    forced[0].1 = (0..p.x.len()).collect();
    (ranks, forced)
}

/// The derived grad of a reduction: of each element of a group, given the
/// group's values and result.
type ReduceGrad = fn(&ReduceP, &[f64], usize, f64) -> f64;

/// A reduction property: `name` built with `attrs(p)`, checked against
/// `f` of each group and its derived grad `df`. With `ignores_x` (the
/// rule's `grad(ignores(x))`) the grad kernel reads x for its shape only:
/// it is given NaNs, and `df` must take what it needs (the whole tensor's
/// element count) from the params.
fn reduction_property(
    name: &'static str,
    ignores_x: bool,
    params: impl Strategy<Value = ReduceP>,
    layout: fn(&ReduceP) -> kernel_check::Layout,
    attrs: impl Fn(&ReduceP) -> Attrs,
    f: fn(&ReduceP, &[f64]) -> f64,
    df: ReduceGrad,
) {
    let d = kernel_check::Dirs::new();
    run(CASES, kernel_check::case(params, layout), |c| {
        let rule = registry().build(name, &attrs(&c.p)).unwrap();
        let mesh = Mesh::new(&c.mesh).unwrap();
        let (p, flags, keep) = (c.p.clone(), c.p.flags(), c.p.keep);
        let op = {
            let (p, flags) = (p.clone(), flags.clone());
            move |v: &[Tensor]| vec![reduce(&v[0], &flags, keep, |g| f(&p, g))]
        };
        let ins = inputs(&[small(&c.p.x, 1)], &[&c.a[0]]);
        d.forward_backward(&*rule, &mesh, &ins, &c.a[1..], &op)?;
        let vjp = move |v: &[Tensor], o: &[Tensor], dy: &[Tensor]| {
            // Without reading x's values: a block of NaNs of its shape
            // must give the same grad.
            let unread;
            let v = if ignores_x {
                unread = [Tensor::full(v[0].shape(), f64::NAN)];
                &unread[..]
            } else {
                v
            };
            vec![reduce_grad(&v[0], &flags, &o[0], &dy[0], |g, j, o| {
                df(&p, g, j, o)
            })]
        };
        d.grad(true, &*rule, &mesh, &ins, &c.a[1..], &op, &vjp)
    });
    // Backward of mean_all: from a 0-d output (not partial, see
    // `complete`) there is nothing to shard x by. Its grad keeps x's own
    // layout (x is read for its shape only), so that one is split.
    let unsplit: &[&str] = if name == "mean_all" {
        &["backward"]
    } else {
        &[]
    };
    d.assert_meaningful(name, None, true, unsplit);
}

#[test]
fn p_norm_against_the_kernel() {
    // Shard reduced dims too: p = inf, -inf, 0, 1 leave partial results.
    reduction_property(
        "p_norm",
        false,
        (reduce_params(), any::<prop::sample::Index>()).prop_map(|(mut p, axis)| {
            // One axis (or all, `asvector`).
            let a = axis.index(p.x.len());
            p.reduced = one_axis(p.x.len(), a);
            p
        }),
        partial_layout,
        |p| {
            let axis = p.reduced.iter().position(|&r| r).unwrap_or(0) as i64;
            Attrs::new()
                .with("porder", p.p)
                .with("axis", axis)
                .with("keepdim", p.keep)
                .with("asvector", p.all)
        },
        |p, g| p_norm(p.p, g),
        |p, g, j, n| p_norm_grad(p.p, g, j, n),
    );
}

#[test]
fn frobenius_norm_against_the_kernel() {
    reduction_property(
        "frobenius_norm",
        false,
        reduce_params(),
        reduce_layout,
        |p| {
            Attrs::new()
                .with("axis", p.axis())
                .with("keep_dim", p.keep)
                .with("reduce_all", p.all)
        },
        |_, g| p_norm(2.0, g),
        |_, g, j, n| p_norm_grad(2.0, g, j, n),
    );
}

#[test]
fn logsumexp_against_the_kernel() {
    reduction_property(
        "logsumexp",
        false,
        reduce_params(),
        reduce_layout,
        |p| {
            Attrs::new()
                .with("axis", p.axis())
                .with("keepdim", p.keep)
                .with("reduce_all", p.all)
        },
        |_, g| logsumexp(g),
        |_, g, j, lse| (g[j] - lse).exp(),
    );
}

#[test]
fn squared_l2_norm_against_the_kernel() {
    // Partial sums of squares are finished by a `Sum`: shard reduced dims.
    reduction_property(
        "squared_l2_norm",
        false,
        reduce_params(),
        partial_layout,
        |p| Attrs::new().with("axis", p.axis()).with("keep_dim", p.keep),
        |_, g| g.iter().map(|a| a * a).sum(),
        |_, g, j, _| 2.0 * g[j],
    );
}

#[test]
fn mean_all_against_the_kernel() {
    // Every dim reduced, to a 0-d mean; partial results are `Avg`.
    reduction_property(
        "mean_all",
        true,
        // Averages of averages need even splits (the rule replicates
        // uneven ones): extents that the small meshes mostly divide.
        (
            reduce_params(),
            prop::collection::vec(prop::sample::select(vec![2usize, 4, 6, 12]), 1..=2),
        )
            .prop_map(|(mut p, x)| {
                p.reduced = vec![true; x.len()];
                (p.x, p.all, p.keep) = (x, true, false);
                p
            }),
        partial_layout,
        |_| Attrs::new(),
        |_, g| g.iter().sum::<f64>() / g.len() as f64,
        // The whole tensor's count: the grad op reads the global shape.
        |p, _, _, _| 1.0 / p.x.iter().product::<usize>() as f64,
    );
}
