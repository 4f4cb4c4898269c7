//! Property tests of more library ops whose kernels are not einsums, built
//! through the registry and checked against hand-written reference kernels
//! on random shapes, meshes of at most 4 devices and random mappings (the
//! helpers of `builtins_nn.rs`, in `common/nn.rs`):
//!
//! - along one axis: `argmax`, `argmin` (integer outputs, compared exactly),
//!   `topk`, `argsort`, `log_softmax`;
//! - reductions whose partial results need a reduce type or none:
//!   `p_norm` (`Max` / `Min` / `Sum` partials for p = inf / -inf / 0, 1),
//!   `frobenius_norm`, `logsumexp`, `squared_l2_norm` (`Sum`), `mean_all`
//!   (`Avg`);
//! - elementwise with a twist: `swiglu` (with `y`, broadcast, or without,
//!   halving the last dim), `label_smooth` (with or without a prior);
//! - normalizations: `fused_rms_norm`, `group_norm`, `instance_norm`,
//!   `batch_norm` (training-mode statistics);
//! - `fused_rotary_position_embedding`.
//!
//! Every property checks forward and backward, and the grad in the forms
//! the rule takes (Paddle's signature where the rule declares one, the
//! derived `(inputs; one grad per output)` form otherwise or as well). The
//! arg-reductions' gradient is zero everywhere, which any layout holds:
//! their grads are not checked. Besides the checked/refused tallies, every
//! property counts the answers that split work and fails when too few do. A
//! unit test checks the grad kernels against central differences.
//!
//! The unsound answers these properties found (label_smooth without a
//! prior, batch_norm's and instance_norm's layouts, rope's derived grad)
//! are fixed; `known_unsound.rs` keeps each as a fixed case.
//!
//! Default: 48 cases per property; `SPMD_CHECK_CASES=N` for more.

mod common;

use std::cmp::Ordering;
use std::sync::OnceLock;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
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

type Kernel<'a> = dyn Fn(&[Tensor]) -> Vec<Tensor> + 'a;
type GradKernel<'a> = dyn Fn(&[Tensor], &[Tensor], &[Tensor]) -> Vec<Tensor> + 'a;

// ------------------------------------------------------------ cases, runs

/// A random case: op parameters, a small mesh and attrs (what each is for
/// is the property's business).
#[derive(Clone, Debug)]
struct Case<P> {
    mesh: Vec<usize>,
    p: P,
    a: Vec<DistAttr>,
}

/// What a property's attrs are: their ranks, and for some (by index) the
/// dims a rule may keep sharded, one of which is forced to shard most of
/// the time (random mappings alone rarely do).
type Layout = (Vec<usize>, Vec<(usize, Vec<usize>)>);

fn case<P, S>(params: S, layout: fn(&P) -> Layout) -> impl Strategy<Value = Case<P>>
where
    P: Clone + std::fmt::Debug,
    S: Strategy<Value = P>,
{
    (params, small_mesh())
        .prop_flat_map(move |(p, mesh)| {
            let (ranks, forced) = layout(&p);
            let m = mesh.len();
            let draws = prop::collection::vec(force(), forced.len());
            (
                Just(p),
                Just(mesh),
                attrs(ranks, m, true),
                draws,
                Just(forced),
            )
        })
        .prop_map(|(p, mesh, mut a, draws, forced)| {
            for ((i, dims), d) in forced.iter().zip(draws) {
                a[*i] = force_split(&a[*i], &mesh, dims, d);
            }
            Case { mesh, p, a }
        })
}

/// The counts of a property: forward, backward, and two grad forms.
struct Dirs {
    fw: Counts,
    bw: Counts,
    gr: Counts,
    gd: Counts,
}

impl Dirs {
    const fn new() -> Dirs {
        Dirs {
            fw: Counts::new(),
            bw: Counts::new(),
            gr: Counts::new(),
            gd: Counts::new(),
        }
    }

    /// Forward from `inputs`; backward from the outputs laid out as `outs`.
    fn forward_backward(
        &self,
        rule: &dyn SpmdRule,
        mesh: &Mesh,
        inputs: &[Input],
        outs: &[DistAttr],
        op: &Kernel<'_>,
    ) -> Result<(), TestCaseError> {
        self.fw.record(
            mesh,
            &rule.forward(mesh, &specs(inputs)),
            check_forward(rule, mesh, inputs, op),
        )?;
        let values: Vec<Tensor> = inputs.iter().map(|x| x.value.clone()).collect();
        let dense = op(&values);
        let outs = complete(outs);
        let out_specs: Vec<Spec<'_>> = dense
            .iter()
            .zip(&outs)
            .map(|(t, a)| Spec::new(t.shape(), a))
            .collect();
        let shapes: Vec<&[usize]> = values.iter().map(Tensor::shape).collect();
        self.bw.record(
            mesh,
            &rule.backward(mesh, &shapes, &out_specs),
            check_backward(rule, mesh, &values, &outs, op),
        )
    }

    /// A grad call with `sig` (the grad op's inputs) and output grads laid
    /// out as `dys`; `derived` picks the count of the derived form.
    #[allow(clippy::too_many_arguments)]
    fn grad(
        &self,
        derived: bool,
        rule: &dyn SpmdRule,
        mesh: &Mesh,
        sig: &[Input],
        dys: &[DistAttr],
        forward: &Kernel<'_>,
        grad: &GradKernel<'_>,
    ) -> Result<(), TestCaseError> {
        let values: Vec<Tensor> = sig.iter().map(|x| x.value.clone()).collect();
        let outs = forward(&values);
        let dy_specs: Vec<Spec<'_>> = outs
            .iter()
            .zip(dys)
            .map(|(t, a)| Spec::new(t.shape(), a))
            .collect();
        let counts = if derived { &self.gd } else { &self.gr };
        counts.record(
            mesh,
            &rule.grad(mesh, &specs(sig), &dy_specs),
            check_grad(rule, mesh, sig, dys, forward, grad),
        )
    }

    /// Forward and backward, and the grad forms named (`Some`) here, each
    /// with a share of answers that split work but for the directions in
    /// `unsplit` (`"backward"`, `"grad"`), whose cases cannot split work
    /// (the properties say why).
    fn assert_meaningful(&self, op: &str, paddle: Option<&str>, derived: bool, unsplit: &[&str]) {
        let check = |counts: &Counts, dir: &str, what: String| {
            if unsplit.contains(&dir) {
                counts.assert_checked(&what);
            } else {
                counts.assert_meaningful(&what);
            }
        };
        check(&self.fw, "forward", format!("{op} forward"));
        check(&self.bw, "backward", format!("{op} backward"));
        if let Some(sig) = paddle {
            check(&self.gr, "grad", format!("{op} grad ({sig})"));
        }
        if derived {
            check(&self.gd, "grad", format!("{op} grad (derived form)"));
        }
    }
}

fn inputs(values: &[Tensor], attrs: &[&DistAttr]) -> Vec<Input> {
    values
        .iter()
        .zip(attrs)
        .map(|(v, a)| Input::new(v.clone(), (*a).clone()))
        .collect()
}

/// An axis as an attribute: maybe negative.
fn axis_attr(axis: usize, rank: usize, negative: bool) -> i64 {
    axis as i64 - if negative { rank as i64 } else { 0 }
}

/// A shape of rank in `ranks`, extents 1–4.
fn shape(ranks: std::ops::RangeInclusive<usize>) -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(1usize..=4, ranks)
}

/// A shape and an axis of it.
fn shape_axis(
    ranks: std::ops::RangeInclusive<usize>,
) -> impl Strategy<Value = (Vec<usize>, usize, bool)> {
    (shape(ranks), any::<prop::sample::Index>(), any::<bool>()).prop_map(|(s, i, neg)| {
        let axis = i.index(s.len());
        (s, axis, neg)
    })
}

/// `attr` with dim `dim` replicated.
fn unshard(attr: &DistAttr, dim: usize) -> DistAttr {
    let mut dims = attr.dims_mapping.as_slice().to_vec();
    dims[dim] = Sharding::REPLICATED;
    DistAttr::new(DimsMapping::from_shardings(&dims)).with_partial(attr.partial)
}

/// `0..rank` without `axis`.
fn others(rank: usize, axis: usize) -> Vec<usize> {
    (0..rank).filter(|&d| d != axis).collect()
}

// ---------------------------------------------------------- index helpers

fn unflatten(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut i = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        i[d] = flat % shape[d];
        flat /= shape[d];
    }
    i
}

/// The flat offsets of a tensor's elements grouped by their index on the
/// dims not `reduced`: groups in row-major order of those dims, each in
/// row-major order (for one reduced axis, the order along it).
fn groups(shape: &[usize], reduced: &[bool]) -> Vec<Vec<usize>> {
    let kept: Vec<usize> = shape
        .iter()
        .zip(reduced)
        .map(|(&n, &r)| if r { 1 } else { n })
        .collect();
    let mut out = vec![Vec::new(); kept.iter().product()];
    for flat in 0..shape.iter().product() {
        let i = unflatten(flat, shape);
        let k = i
            .iter()
            .zip(&kept)
            .fold(0, |k, (&i, &n)| k * n + if n == 1 { 0 } else { i });
        out[k].push(flat);
    }
    out
}

fn one_axis(rank: usize, axis: usize) -> Vec<bool> {
    (0..rank).map(|d| d == axis).collect()
}

fn reduced_shape(shape: &[usize], reduced: &[bool], keep: bool) -> Vec<usize> {
    shape
        .iter()
        .zip(reduced)
        .filter_map(|(&n, &r)| match (r, keep) {
            (false, _) => Some(n),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect()
}

/// `f` of each group of `x`'s values.
fn reduce(x: &Tensor, reduced: &[bool], keep: bool, f: impl Fn(&[f64]) -> f64) -> Tensor {
    let data = groups(x.shape(), reduced)
        .iter()
        .map(|g| f(&g.iter().map(|&k| x.data()[k]).collect::<Vec<_>>()))
        .collect();
    Tensor::new(&reduced_shape(x.shape(), reduced, keep), data)
}

/// The grad of a reduction: `dx[k] = dout[group of k] · df(group, j,
/// out[group])` for the `j`-th element of its group. Paddle's grad kernels
/// read the forward `out` (the whole group's result) rather than recompute
/// it from the block of x a device holds.
fn reduce_grad(
    x: &Tensor,
    reduced: &[bool],
    out: &Tensor,
    dout: &Tensor,
    df: impl Fn(&[f64], usize, f64) -> f64,
) -> Tensor {
    let gs = groups(x.shape(), reduced);
    assert_eq!(dout.len(), gs.len(), "out_grad does not fit x's block");
    assert_eq!(out.len(), gs.len(), "out does not fit x's block");
    let mut dx = Tensor::full(x.shape(), 0.0);
    for ((g, &d), &o) in gs.iter().zip(dout.data()).zip(out.data()) {
        let vals: Vec<f64> = g.iter().map(|&k| x.data()[k]).collect();
        for (j, &k) in g.iter().enumerate() {
            dx.data_mut()[k] = d * df(&vals, j, o);
        }
    }
    dx
}

fn logsumexp(v: &[f64]) -> f64 {
    let m = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    m + v.iter().map(|a| (a - m).exp()).sum::<f64>().ln()
}

// ------------------------------------------------------- along one axis

/// argmax / argmin along `axis` (all dims with `flatten`, the index into
/// the flattened tensor, 0-d as Paddle's is): indices as values.
fn arg_reduce(x: &Tensor, axis: usize, keepdims: bool, flatten: bool, min: bool) -> Tensor {
    let rank = x.rank();
    let reduced = if flatten {
        vec![true; rank]
    } else {
        one_axis(rank, axis)
    };
    let pick = |v: &[f64]| {
        let better = |a: f64, b: f64| if min { a < b } else { a > b };
        (0..v.len()).fold(0, |best, j| if better(v[j], v[best]) { j } else { best }) as f64
    };
    reduce(x, &reduced, keepdims, pick)
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
fn arg_layout(p: &ArgP) -> Layout {
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
    let d = Dirs::new();
    run(CASES, case(arg_params(), arg_layout), |c| {
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

/// The first `k` of each line along `axis` sorted (descending when
/// `largest`): values and their indices along the axis.
fn top_k(x: &Tensor, axis: usize, k: usize, largest: bool) -> Vec<Tensor> {
    let flags = one_axis(x.rank(), axis);
    let mut shape = x.shape().to_vec();
    shape[axis] = k;
    let (mut out, mut idx) = (Tensor::full(&shape, 0.0), Tensor::full(&shape, 0.0));
    for (line, oline) in groups(x.shape(), &flags).iter().zip(groups(&shape, &flags)) {
        let v = |j: usize| x.data()[line[j]];
        let mut order: Vec<usize> = (0..line.len()).collect();
        order.sort_by(|&a, &b| {
            let o = v(a).partial_cmp(&v(b)).unwrap_or(Ordering::Equal);
            if largest { o.reverse() } else { o }
        });
        for (j, &o) in oline.iter().enumerate() {
            // A device holding less than k of a line fails here.
            out.data_mut()[o] = v(order[j]);
            idx.data_mut()[o] = order[j] as f64;
        }
    }
    vec![out, idx]
}

/// The grad of a selection along `axis`: `dout` scattered back to the
/// positions `indices` name.
fn scatter_lines(x_shape: &[usize], axis: usize, indices: &Tensor, dout: &Tensor) -> Tensor {
    assert_eq!(indices.shape(), dout.shape(), "indices and out_grad differ");
    let flags = one_axis(x_shape.len(), axis);
    let (xs, os) = (groups(x_shape, &flags), groups(indices.shape(), &flags));
    assert_eq!(xs.len(), os.len(), "indices do not fit x's block");
    let mut dx = Tensor::full(x_shape, 0.0);
    for (xl, ol) in xs.iter().zip(&os) {
        for &o in ol {
            let j = indices.data()[o] as usize;
            dx.data_mut()[xl[j]] += dout.data()[o];
        }
    }
    dx
}

#[derive(Clone, Debug)]
struct SelectP {
    x: Vec<usize>,
    axis: usize,
    negative: bool,
    k: usize,
    order: bool,
}

fn select_params() -> impl Strategy<Value = SelectP> {
    (
        shape_axis(1..=3),
        any::<prop::sample::Index>(),
        any::<bool>(),
    )
        .prop_map(|((x, axis, negative), k, order)| SelectP {
            k: 1 + k.index(x[axis]),
            x,
            axis,
            negative,
            order,
        })
}

/// x, out, indices.
fn select_layout(p: &SelectP) -> Layout {
    // x: a kept dim, then any dim, the axis too (the rule must gather it).
    let (r, keep) = (p.x.len(), others(p.x.len(), p.axis));
    (
        vec![r, r, r],
        vec![
            (0, keep.clone()),
            (0, (0..r).collect()),
            (1, keep.clone()),
            (2, keep),
        ],
    )
}

#[test]
fn topk_against_the_kernel() {
    let d = Dirs::new();
    run(CASES, case(select_params(), select_layout), |c| {
        let SelectP {
            ref x,
            axis,
            negative,
            k,
            order: largest,
        } = c.p;
        let attrs = Attrs::new()
            .with("k", k as i64)
            .with("axis", axis_attr(axis, x.len(), negative))
            .with("largest", largest);
        let rule = registry().build("topk", &attrs).unwrap();
        let mesh = Mesh::new(&c.mesh).unwrap();
        let op = move |v: &[Tensor]| top_k(&v[0], axis, k, largest);
        let values = [Tensor::probe(x, 1, Values::Integers)];
        let ins = inputs(&values, &[&c.a[0]]);
        d.forward_backward(&*rule, &mesh, &ins, &c.a[1..3], &op)?;

        // Paddle's topk_grad: (x, indices; out_grad).
        let dense = op(&values);
        // The grads get x's axis unsharded (forward checks the gather), so
        // that more of their answers split work.
        let x_attr = unshard(&c.a[0], axis);
        let ins = inputs(&values, &[&x_attr]);
        let sig = inputs(&[values[0].clone(), dense[1].clone()], &[&x_attr, &c.a[2]]);
        let forward = move |v: &[Tensor]| vec![op(&v[..1]).swap_remove(0)];
        let grad = move |v: &[Tensor], _: &[Tensor], dy: &[Tensor]| {
            vec![scatter_lines(v[0].shape(), axis, &v[1], &dy[0])]
        };
        d.grad(false, &*rule, &mesh, &sig, &c.a[1..2], &forward, &grad)?;

        // Derived: (x; out_grad, indices_grad), the indices recomputed.
        let vjp = move |v: &[Tensor], _: &[Tensor], dy: &[Tensor]| {
            let idx = op(v).swap_remove(1);
            vec![scatter_lines(v[0].shape(), axis, &idx, &dy[0])]
        };
        d.grad(true, &*rule, &mesh, &ins, &c.a[1..3], &op, &vjp)
    });
    d.assert_meaningful("topk", Some("x, indices; out_grad"), true, &[]);
}

#[test]
fn argsort_against_the_kernel() {
    let d = Dirs::new();
    run(CASES, case(select_params(), select_layout), |c| {
        let SelectP {
            ref x,
            axis,
            negative,
            order: descending,
            ..
        } = c.p;
        let attrs = Attrs::new()
            .with("axis", axis_attr(axis, x.len(), negative))
            .with("descending", descending);
        let rule = registry().build("argsort", &attrs).unwrap();
        let mesh = Mesh::new(&c.mesh).unwrap();
        let op = move |v: &[Tensor]| top_k(&v[0], axis, v[0].shape()[axis], descending);
        let values = [Tensor::probe(x, 1, Values::Integers)];
        let ins = inputs(&values, &[&c.a[0]]);
        d.forward_backward(&*rule, &mesh, &ins, &c.a[1..3], &op)?;

        // Paddle's argsort_grad: (indices, x; out_grad).
        let dense = op(&values);
        // The grads get x's axis unsharded, as for topk.
        let x_attr = unshard(&c.a[0], axis);
        let ins = inputs(&values, &[&x_attr]);
        let sig = inputs(&[dense[1].clone(), values[0].clone()], &[&c.a[2], &x_attr]);
        let forward = move |v: &[Tensor]| vec![op(&v[1..]).swap_remove(0)];
        let grad = move |v: &[Tensor], _: &[Tensor], dy: &[Tensor]| {
            vec![scatter_lines(v[1].shape(), axis, &v[0], &dy[0])]
        };
        d.grad(false, &*rule, &mesh, &sig, &c.a[1..2], &forward, &grad)?;

        let vjp = move |v: &[Tensor], _: &[Tensor], dy: &[Tensor]| {
            let idx = op(v).swap_remove(1);
            vec![scatter_lines(v[0].shape(), axis, &idx, &dy[0])]
        };
        d.grad(true, &*rule, &mesh, &ins, &c.a[1..3], &op, &vjp)
    });
    d.assert_meaningful("argsort", Some("indices, x; out_grad"), true, &[]);
}

fn log_softmax(x: &Tensor, axis: usize) -> Tensor {
    let mut out = x.clone();
    for line in groups(x.shape(), &one_axis(x.rank(), axis)) {
        let v: Vec<f64> = line.iter().map(|&k| x.data()[k]).collect();
        let lse = logsumexp(&v);
        for &k in &line {
            out.data_mut()[k] -= lse;
        }
    }
    out
}

/// `dx = dout - softmax(x) · Σ dout` along the axis.
fn log_softmax_grad(x: &Tensor, dout: &Tensor, axis: usize) -> Tensor {
    assert_eq!(x.shape(), dout.shape(), "x and out_grad blocks differ");
    let mut dx = dout.clone();
    for line in groups(x.shape(), &one_axis(x.rank(), axis)) {
        let v: Vec<f64> = line.iter().map(|&k| x.data()[k]).collect();
        let (lse, sum) = (
            logsumexp(&v),
            line.iter().map(|&k| dout.data()[k]).sum::<f64>(),
        );
        for (&k, a) in line.iter().zip(&v) {
            dx.data_mut()[k] -= (a - lse).exp() * sum;
        }
    }
    dx
}

#[test]
fn log_softmax_against_the_kernel() {
    let d = Dirs::new();
    let layout = |p: &((Vec<usize>, usize, bool), bool)| {
        let keep = others(p.0.0.len(), p.0.1);
        (vec![p.0.0.len(); 2], vec![(0, keep.clone()), (1, keep)])
    };
    run(
        CASES,
        case((shape_axis(1..=3), any::<bool>()), layout),
        |c| {
            let ((ref x, axis, negative), aligned) = c.p;
            let attrs = Attrs::new().with("axis", axis_attr(axis, x.len(), negative));
            let rule = registry().build("log_softmax", &attrs).unwrap();
            let mesh = Mesh::new(&c.mesh).unwrap();
            let op = move |v: &[Tensor]| vec![log_softmax(&v[0], axis)];
            let ins = inputs(&[small(x, 1)], &[&c.a[0]]);
            d.forward_backward(&*rule, &mesh, &ins, &c.a[1..], &op)?;
            let vjp = move |v: &[Tensor], _: &[Tensor], dy: &[Tensor]| {
                vec![log_softmax_grad(&v[0], &dy[0], axis)]
            };
            // The rule refuses conflicting x and out_grad (`strict`): half the
            // time, out_grad laid out as x.
            let dy = if aligned {
                DistAttr::new(c.a[0].dims_mapping.clone())
            } else {
                c.a[1].clone()
            };
            d.grad(true, &*rule, &mesh, &ins, &[dy], &op, &vjp)
        },
    );
    d.assert_meaningful("log_softmax", None, true, &[]);
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
fn reduce_layout(p: &ReduceP) -> Layout {
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
fn partial_layout(p: &ReduceP) -> Layout {
    let (ranks, mut forced) = reduce_layout(p);
    forced[0].1 = (0..p.x.len()).collect();
    (ranks, forced)
}

/// The derived grad of a reduction: of each element of a group, given the
/// group's values and result.
type ReduceGrad = fn(&ReduceP, &[f64], usize, f64) -> f64;

/// A reduction property: `name` built with `attrs(p)`, checked against
/// `f` of each group and its derived grad `df`. With `ignores_x` (the
/// rule's `grad(ignores(x))`: the grad kernel reads x for its global shape
/// only, so the rule leaves x as given) x is not read by the grad kernel,
/// and every element's grad is `dout · df` of the whole x (all reduced).
fn reduction_property(
    name: &'static str,
    ignores_x: bool,
    params: impl Strategy<Value = ReduceP>,
    layout: fn(&ReduceP) -> Layout,
    attrs: impl Fn(&ReduceP) -> Attrs,
    f: fn(&ReduceP, &[f64]) -> f64,
    df: ReduceGrad,
) {
    let d = Dirs::new();
    run(CASES, case(params, layout), |c| {
        let rule = registry().build(name, &attrs(&c.p)).unwrap();
        let mesh = Mesh::new(&c.mesh).unwrap();
        let (p, flags, keep) = (c.p.clone(), c.p.flags(), c.p.keep);
        let op = {
            let (p, flags) = (p.clone(), flags.clone());
            move |v: &[Tensor]| vec![reduce(&v[0], &flags, keep, |g| f(&p, g))]
        };
        let ins = inputs(&[small(&c.p.x, 1)], &[&c.a[0]]);
        d.forward_backward(&*rule, &mesh, &ins, &c.a[1..], &op)?;
        let x = small(&c.p.x, 1);
        let vjp = move |v: &[Tensor], o: &[Tensor], dy: &[Tensor]| {
            // Without reading x: the dense x's shape and values.
            let v = if ignores_x {
                std::slice::from_ref(&x)
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
    // `complete`) there is nothing to shard x by; its grad, from a 0-d
    // output grad, neither: x is required laid out as its (whole) grad.
    let unsplit: &[&str] = if name == "mean_all" {
        &["backward", "grad"]
    } else {
        &[]
    };
    d.assert_meaningful(name, None, true, unsplit);
}

fn p_norm(p: f64, v: &[f64]) -> f64 {
    let abs = v.iter().map(|a| a.abs());
    match p {
        f64::INFINITY => abs.fold(0.0, f64::max),
        f64::NEG_INFINITY => abs.fold(f64::INFINITY, f64::min),
        0.0 => abs.filter(|&a| a != 0.0).count() as f64,
        p => abs.map(|a| a.powf(p)).sum::<f64>().powf(1.0 / p),
    }
}

/// Of element `j`, given the norm `n`.
fn p_norm_grad(p: f64, v: &[f64], j: usize, n: f64) -> f64 {
    let a = v[j];
    match p {
        // Distinct magnitudes: one element attains the extreme.
        f64::INFINITY | f64::NEG_INFINITY => {
            if a.abs() == n {
                a.signum()
            } else {
                0.0
            }
        }
        0.0 => 0.0,
        p => a.signum() * (a.abs() / n).powf(p - 1.0),
    }
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
        |_, g, _, _| 1.0 / g.len() as f64,
    );
}

// ----------------------------------------------------- swiglu, label_smooth

fn sigmoid(a: f64) -> f64 {
    1.0 / (1.0 + (-a).exp())
}

fn silu(a: f64) -> f64 {
    a * sigmoid(a)
}

fn silu_grad(a: f64) -> f64 {
    let s = sigmoid(a);
    s + a * s * (1.0 - s)
}

/// `silu(x) · y`, y broadcast over x's leading dims; without y, `silu` of
/// the first half of x's last dim times the second half.
fn swiglu(x: &Tensor, y: Option<&Tensor>) -> Tensor {
    let r = x.rank();
    match y {
        Some(y) => {
            let off = r - y.rank();
            assert_eq!(y.shape(), &x.shape()[off..], "y does not broadcast to x");
            Tensor::from_fn(x.shape(), |i| silu(x.get(i)) * y.get(&i[off..]))
        }
        None => {
            let n = x.shape()[r - 1] / 2;
            assert_eq!(2 * n, x.shape()[r - 1], "an odd last dim of x");
            let mut shape = x.shape().to_vec();
            shape[r - 1] = n;
            Tensor::from_fn(&shape, |i| {
                let mut j = i.to_vec();
                j[r - 1] += n;
                silu(x.get(i)) * x.get(&j)
            })
        }
    }
}

/// `dx` and (with y) `dy`, summed over the dims y is broadcast along.
fn swiglu_grad(x: &Tensor, y: Option<&Tensor>, dout: &Tensor) -> Vec<Tensor> {
    let r = x.rank();
    match y {
        Some(y) => {
            assert_eq!(dout.shape(), x.shape(), "out_grad and x blocks differ");
            let off = r - y.rank();
            let dx = Tensor::from_fn(x.shape(), |i| {
                dout.get(i) * y.get(&i[off..]) * silu_grad(x.get(i))
            });
            let mut dy = Tensor::full(y.shape(), 0.0);
            for flat in 0..x.len() {
                let i = unflatten(flat, x.shape());
                let k = dy.offset(&i[off..]);
                dy.data_mut()[k] += dout.get(&i) * silu(x.get(&i));
            }
            vec![dx, dy]
        }
        None => {
            let n = x.shape()[r - 1] / 2;
            let mut dx = Tensor::full(x.shape(), 0.0);
            for flat in 0..dout.len() {
                let i = unflatten(flat, dout.shape());
                let mut j = i.clone();
                j[r - 1] += n;
                let (a, b, g) = (x.get(&i), x.get(&j), dout.get(&i));
                dx.set(&i, g * b * silu_grad(a));
                dx.set(&j, g * silu(a));
            }
            vec![dx]
        }
    }
}

#[derive(Clone, Debug)]
struct PairP {
    x: Vec<usize>,
    /// The second operand: its rank (x's trailing dims), absent at 0.
    y_rank: usize,
}

fn pair_params(last_even: bool) -> impl Strategy<Value = PairP> {
    (
        shape(1..=3),
        any::<prop::sample::Index>(),
        prop::bool::weighted(0.3),
    )
        .prop_map(move |(mut x, y, absent)| {
            let r = x.len();
            if absent && last_even {
                x[r - 1] = 2 * x[r - 1].div_ceil(2);
            }
            let y_rank = if absent { 0 } else { 1 + y.index(r) };
            PairP { x, y_rank }
        })
}

/// x, y (rank 0 when absent: the placeholder's), out.
fn pair_layout(p: &PairP) -> Layout {
    let r = p.x.len();
    let x_dims: Vec<usize> = if p.y_rank == 0 {
        (0..r - 1).collect()
    } else {
        (0..r).collect()
    };
    (
        vec![r, p.y_rank, r],
        vec![
            (0, x_dims.clone()),
            (1, (0..p.y_rank).collect()),
            (2, x_dims),
        ],
    )
}

#[test]
fn swiglu_against_the_kernel() {
    let d = Dirs::new();
    run(CASES, case(pair_params(true), pair_layout), |c| {
        let built = registry().build("swiglu", &Attrs::new()).unwrap();
        let has_y = c.p.y_rank > 0;
        // y is input 1 of every call.
        let absent = u64::from(!has_y) << 1;
        let rule = Absent {
            rule: &*built,
            forward: absent,
            grad: absent,
            outputs: 0,
        };
        let mesh = Mesh::new(&c.mesh).unwrap();
        let x = small(&c.p.x, 1);
        let y = if has_y {
            small(&c.p.x[c.p.x.len() - c.p.y_rank..], 2)
        } else {
            Tensor::full(&[], 0.0)
        };
        let op = move |v: &[Tensor]| vec![swiglu(&v[0], has_y.then_some(&v[1]))];
        let ins = inputs(&[x, y], &[&c.a[0], &c.a[1]]);
        d.forward_backward(&rule, &mesh, &ins, &c.a[2..], &op)?;
        let vjp = move |v: &[Tensor], _: &[Tensor], dy: &[Tensor]| {
            let mut g = swiglu_grad(&v[0], has_y.then_some(&v[1]), &dy[0]);
            if !has_y {
                // The placeholder's grad.
                g.push(Tensor::full(&[], 0.0));
            }
            g
        };
        d.grad(true, &rule, &mesh, &ins, &c.a[2..], &op, &vjp)
    });
    d.assert_meaningful("swiglu", None, true, &[]);
}

const SMOOTHING: f64 = 0.25;

/// `(1 - ε) label + ε prior`, the prior broadcast over the leading dims;
/// without one, the uniform prior over the classes (the last dim).
fn label_smooth(label: &Tensor, prior: Option<&Tensor>) -> Tensor {
    let r = label.rank();
    let classes = label.shape()[r - 1] as f64;
    Tensor::from_fn(label.shape(), |i| {
        let p = prior.map_or(1.0 / classes, |p| {
            // numpy broadcasting: the prior's dims of extent 1 stretch.
            let at: Vec<usize> = i[r - p.rank()..]
                .iter()
                .zip(p.shape())
                .map(|(&i, &n)| if n == 1 { 0 } else { i })
                .collect();
            p.get(&at)
        });
        (1.0 - SMOOTHING) * label.get(i) + SMOOTHING * p
    })
}

#[test]
fn label_smooth_against_the_kernel() {
    let d = Dirs::new();
    // The prior: [C] or [1, C] (pair_params' y of rank 1 or 2, its leading
    // dim made 1 below), or absent.
    let params = pair_params(false).prop_map(|mut p| {
        p.y_rank = p.y_rank.min(2);
        p
    });
    let layout = |p: &PairP| {
        let (ranks, mut forced) = pair_layout(p);
        // Only the prior's class dim can shard.
        forced[1].1 = p.y_rank.checked_sub(1).into_iter().collect();
        (ranks, forced)
    };
    run(CASES, case(params, layout), |c| {
        let built = registry()
            .build("label_smooth", &Attrs::new().with("epsilon", SMOOTHING))
            .unwrap();
        let has_prior = c.p.y_rank > 0;
        let absent = u64::from(!has_prior) << 1;
        // Without a prior the class dim given sharded must come back
        // gathered (the uniform prior needs the class count).
        let a = c.a.clone();
        let rule = Absent {
            rule: &*built,
            forward: absent,
            grad: absent,
            outputs: 0,
        };
        let mesh = Mesh::new(&c.mesh).unwrap();
        let r = c.p.x.len();
        let prior = match c.p.y_rank {
            0 => Tensor::full(&[], 0.0),
            1 => small(&c.p.x[r - 1..], 2),
            _ => small(&[1, c.p.x[r - 1]], 2),
        };
        let op = move |v: &[Tensor]| vec![label_smooth(&v[0], has_prior.then_some(&v[1]))];
        let ins = inputs(&[small(&c.p.x, 1), prior], &[&a[0], &a[1]]);
        d.forward_backward(&rule, &mesh, &ins, &a[2..], &op)?;
        // The prior has no grad (`no_grad`).
        let vjp =
            |_: &[Tensor], _: &[Tensor], dy: &[Tensor]| vec![dy[0].map(|g| (1.0 - SMOOTHING) * g)];
        d.grad(true, &rule, &mesh, &ins, &a[2..], &op, &vjp)
    });
    d.assert_meaningful("label_smooth", None, true, &[]);
}

// ---------------------------------------------------------- normalizations

const EPSILON: f64 = 1e-5;

/// Paddle's `fused_rms_norm` over the last dim: `out` and `invvar`.
fn rms_norm(x: &Tensor, w: &Tensor) -> Vec<Tensor> {
    let r = x.rank();
    let n = x.shape()[r - 1];
    assert_eq!(w.len(), n, "a scale of {} values for rows of {n}", w.len());
    let mut out = x.clone();
    let mut inv = Vec::new();
    for line in groups(x.shape(), &one_axis(r, r - 1)) {
        let ms = line.iter().map(|&k| x.data()[k].powi(2)).sum::<f64>() / n as f64;
        let s = 1.0 / (ms + EPSILON).sqrt();
        for (j, &k) in line.iter().enumerate() {
            out.data_mut()[k] *= s * w.data()[j];
        }
        inv.push(s);
    }
    vec![out, Tensor::new(&x.shape()[..r - 1], inv)]
}

/// The grads of x and the scale from those of `out` and `invvar`.
fn rms_norm_grad(x: &Tensor, w: &Tensor, dout: &Tensor, dinv: &Tensor) -> Vec<Tensor> {
    let r = x.rank();
    let n = x.shape()[r - 1];
    assert_eq!(dout.shape(), x.shape(), "out_grad and x blocks differ");
    let lines = groups(x.shape(), &one_axis(r, r - 1));
    assert_eq!(
        dinv.len(),
        lines.len(),
        "invvar_grad does not fit x's block"
    );
    let (mut dx, mut dw) = (x.clone(), Tensor::full(w.shape(), 0.0));
    for (line, &g_inv) in lines.iter().zip(dinv.data()) {
        let xs: Vec<f64> = line.iter().map(|&k| x.data()[k]).collect();
        let ms = xs.iter().map(|a| a * a).sum::<f64>() / n as f64;
        let s = 1.0 / (ms + EPSILON).sqrt();
        let through: f64 = line
            .iter()
            .enumerate()
            .map(|(j, &k)| dout.data()[k] * xs[j] * w.data()[j])
            .sum::<f64>()
            + g_inv;
        for (j, &k) in line.iter().enumerate() {
            let g = dout.data()[k];
            dx.data_mut()[k] = g * w.data()[j] * s - through * s.powi(3) * xs[j] / n as f64;
            dw.data_mut()[j] += g * xs[j] * s;
        }
    }
    vec![dx, dw]
}

#[test]
fn fused_rms_norm_against_the_kernel() {
    let d = Dirs::new();
    // x, scale, out, invvar.
    let layout = |x: &Vec<usize>| {
        let r = x.len();
        let lead: Vec<usize> = (0..r - 1).collect();
        (
            vec![r, 1, r, r - 1],
            vec![(0, lead.clone()), (2, lead.clone()), (3, lead)],
        )
    };
    run(CASES, case(shape(1..=3), layout), |c| {
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

type Index<'a> = &'a dyn Fn(&[usize]) -> usize;

/// Normalizes `x`'s elements in groups (element `i` in group `stat(i)` of
/// `n_stats`), then scales and shifts each by its channel's (`chan(i)`)
/// scale and bias: `out`, and each group's mean and (biased) variance.
fn normalize(
    x: &Tensor,
    n_stats: usize,
    stat: Index<'_>,
    chan: Index<'_>,
    scale: &Tensor,
    bias: &Tensor,
) -> (Tensor, Vec<f64>, Vec<f64>) {
    let (mut sum, mut count) = (vec![0.0; n_stats], vec![0.0; n_stats]);
    let index: Vec<Vec<usize>> = (0..x.len()).map(|k| unflatten(k, x.shape())).collect();
    for (i, a) in index.iter().zip(x.data()) {
        sum[stat(i)] += a;
        count[stat(i)] += 1.0;
    }
    let mean: Vec<f64> = sum.iter().zip(&count).map(|(s, n)| s / n).collect();
    let mut var = vec![0.0; n_stats];
    for (i, a) in index.iter().zip(x.data()) {
        var[stat(i)] += (a - mean[stat(i)]).powi(2) / count[stat(i)];
    }
    let out = Tensor::from_fn(x.shape(), |i| {
        let (s, c) = (stat(i), chan(i));
        (x.get(i) - mean[s]) / (var[s] + EPSILON).sqrt() * scale.data()[c] + bias.data()[c]
    });
    (out, mean, var)
}

/// The grads of x, scale and bias of [`normalize`], from each group's
/// saved mean and inverse standard deviation.
#[allow(clippy::too_many_arguments)]
fn normalize_grad(
    x: &Tensor,
    dy: &Tensor,
    stat: Index<'_>,
    chan: Index<'_>,
    mean: &Tensor,
    inv_std: &Tensor,
    scale: &Tensor,
) -> Vec<Tensor> {
    assert_eq!(dy.shape(), x.shape(), "out_grad and x blocks differ");
    let n_stats = mean.len();
    assert_eq!(inv_std.len(), n_stats, "mean and variance blocks differ");
    let index: Vec<Vec<usize>> = (0..x.len()).map(|k| unflatten(k, x.shape())).collect();
    let xhat = |i: &[usize]| (x.get(i) - mean.data()[stat(i)]) * inv_std.data()[stat(i)];
    let g = |i: &[usize]| dy.get(i) * scale.data()[chan(i)];
    let (mut count, mut sum_g, mut sum_gx) =
        (vec![0.0; n_stats], vec![0.0; n_stats], vec![0.0; n_stats]);
    let (mut dscale, mut dbias) = (
        Tensor::full(scale.shape(), 0.0),
        Tensor::full(scale.shape(), 0.0),
    );
    for i in &index {
        // A device holding statistics of other groups fails here.
        let s = stat(i);
        assert!(s < n_stats, "statistic {s} of {n_stats}");
        count[s] += 1.0;
        sum_g[s] += g(i);
        sum_gx[s] += g(i) * xhat(i);
        dscale.data_mut()[chan(i)] += dy.get(i) * xhat(i);
        dbias.data_mut()[chan(i)] += dy.get(i);
    }
    let dx = Tensor::from_fn(x.shape(), |i| {
        let s = stat(i);
        inv_std.data()[s] * (g(i) - sum_g[s] / count[s] - xhat(i) * sum_gx[s] / count[s])
    });
    vec![dx, dscale, dbias]
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
    let d = Dirs::new();
    // x, scale, bias, y, mean, variance: the batch can stay sharded.
    let layout = |p: &NormP| {
        let r = p.x().len();
        (
            vec![r, 1, 1, r, 2, 2],
            vec![(0, vec![0]), (3, vec![0]), (4, vec![0]), (5, vec![0])],
        )
    };
    run(CASES, case(norm_params(), layout), |c| {
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
    let d = Dirs::new();
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
    run(CASES, case(params, layout), |c| {
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
    let d = Dirs::new();
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
    run(CASES, case(norm_params(), layout), |c| {
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
fn rope_layout(p: &RopeP) -> Layout {
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

/// The rotary embedding of `x` (`[b, s, h, d]`, `[s, b, h, d]` when
/// `time_major`) or, with `grad`, its transpose applied to `x` (an output
/// grad): `out = x·cos + rot(x)·sin`, rot pairing adjacent elements of the
/// head dim (`neox`) or its halves. The angles at a position are read from
/// sin and cos (at `position_ids`' positions when given), else computed
/// from the position, the index along the sequence.
#[allow(clippy::too_many_arguments)]
fn rope(
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

#[test]
fn fused_rotary_position_embedding_against_the_kernel() {
    let d = Dirs::new();
    run(CASES, case(rope_params(), rope_layout), |c| {
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

// ------------------------------------ the reference grads are the gradients

/// The hand-written grad kernels the properties check layouts of must be
/// the ops' true gradients (else the properties would check the layout of
/// some other function).
#[test]
fn reference_grads_match_central_differences() {
    let check = |what: &str,
                 f: &dyn Fn(&[Tensor]) -> Vec<Tensor>,
                 inputs: &[Tensor],
                 grads: &[Tensor],
                 dys: &[Tensor]| {
        for (j, g) in grads.iter().enumerate() {
            assert_gradient(what, g, &numeric_grad(f, inputs, dys, j));
        }
    };
    let x = small(&[2, 3, 4], 1);
    let dy = |shape: &[usize]| small(shape, 9);

    // Selections: the grad of the selected values.
    for (axis, k) in [(1, 2), (2, 4)] {
        let f = move |v: &[Tensor]| vec![top_k(&v[0], axis, k, true).swap_remove(0)];
        let out = top_k(&x, axis, k, true);
        let g = dy(out[0].shape());
        let dx = scatter_lines(x.shape(), axis, &out[1], &g);
        check("topk", &f, std::slice::from_ref(&x), &[dx], &[g]);
    }
    // Along an axis, and reductions (their grads given the forward out).
    let f = |v: &[Tensor]| vec![log_softmax(&v[0], 1)];
    let g = dy(x.shape());
    check(
        "log_softmax",
        &f,
        std::slice::from_ref(&x),
        &[log_softmax_grad(&x, &g, 1)],
        &[g],
    );
    let flags = [false, true, true];
    for p in [2.0, 1.0, 3.0, f64::INFINITY, f64::NEG_INFINITY] {
        let f = move |v: &[Tensor]| vec![reduce(&v[0], &flags, false, |g| p_norm(p, g))];
        let out = f(std::slice::from_ref(&x)).swap_remove(0);
        let g = dy(out.shape());
        let dx = reduce_grad(&x, &flags, &out, &g, |v, j, n| p_norm_grad(p, v, j, n));
        check(
            &format!("p_norm {p}"),
            &f,
            std::slice::from_ref(&x),
            &[dx],
            &[g],
        );
    }
    let f = move |v: &[Tensor]| vec![reduce(&v[0], &flags, true, logsumexp)];
    let out = f(std::slice::from_ref(&x)).swap_remove(0);
    let g = dy(out.shape());
    let dx = reduce_grad(&x, &flags, &out, &g, |v, j, lse| (v[j] - lse).exp());
    check("logsumexp", &f, std::slice::from_ref(&x), &[dx], &[g]);

    // swiglu with y (broadcast), and halving x.
    let y = small(&[3, 4], 2);
    let f = |v: &[Tensor]| vec![swiglu(&v[0], Some(&v[1]))];
    let g = dy(x.shape());
    check(
        "swiglu",
        &f,
        &[x.clone(), y.clone()],
        &swiglu_grad(&x, Some(&y), &g),
        std::slice::from_ref(&g),
    );
    let f = |v: &[Tensor]| vec![swiglu(&v[0], None)];
    let g = dy(&[2, 3, 2]);
    check(
        "swiglu halves",
        &f,
        std::slice::from_ref(&x),
        &swiglu_grad(&x, None, &g),
        &[g],
    );

    // fused_rms_norm: out and invvar.
    let w = small(&[4], 3);
    let f = |v: &[Tensor]| rms_norm(&v[0], &v[1]);
    let (g, ginv) = (dy(x.shape()), small(&[2, 3], 4));
    let grads = rms_norm_grad(&x, &w, &g, &ginv);
    check(
        "fused_rms_norm",
        &f,
        &[x.clone(), w.clone()],
        &grads,
        &[g, ginv],
    );

    // Normalizations: in groups of the batch and the first two channels
    // (x as [N, C, L]), scaled per channel.
    let (scale, bias) = (small(&[3], 5), small(&[3], 6));
    let stat = |i: &[usize]| i[0] * 2 + i[1] / 2;
    let chan = |i: &[usize]| i[1];
    let f = |v: &[Tensor]| vec![normalize(&v[0], 4, &stat, &chan, &v[1], &v[2]).0];
    let (_, mean, var) = normalize(&x, 4, &stat, &chan, &scale, &bias);
    let inv = Tensor::new(
        &[4],
        var.iter().map(|v| 1.0 / (v + EPSILON).sqrt()).collect(),
    );
    let g = dy(x.shape());
    let grads = normalize_grad(&x, &g, &stat, &chan, &Tensor::new(&[4], mean), &inv, &scale);
    check("normalize", &f, &[x.clone(), scale, bias], &grads, &[g]);

    // Rope: its grad is the transpose (x is linear), both pairings, with
    // angles at given positions or computed.
    let q = small(&[2, 3, 1, 4], 7);
    let (sin, cos) = (small(&[1, 3, 1, 4], 8), small(&[1, 3, 1, 4], 10));
    let pos = Tensor::from_fn(&[2, 3], |i| ((i[0] + 2 * i[1] + 1) % 3) as f64);
    for neox in [true, false] {
        for angles in [true, false] {
            let (s, c, p) = if angles {
                (Some(&sin), Some(&cos), Some(&pos))
            } else {
                (None, None, None)
            };
            let f = move |v: &[Tensor]| vec![rope(&v[0], s, c, p, false, neox, false)];
            let g = dy(q.shape());
            let dq = rope(&g, s, c, p, false, neox, true);
            check(
                &format!("rope neox {neox}"),
                &f,
                std::slice::from_ref(&q),
                &[dq],
                &[g],
            );
        }
    }
}
