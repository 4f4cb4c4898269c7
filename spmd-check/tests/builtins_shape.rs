//! Property tests of the library's shape and indexing ops, built through the
//! registry with Paddle's attributes and checked against hand-written
//! reference kernels on random shapes (size-1 dims included), meshes of at
//! most 4 devices and random mappings:
//!
//! - joins and cuts: `concat`, `stack` (several inputs), `split`,
//!   `split_with_num`, `unbind` (several outputs), `slice` (with
//!   `decrease_axis`), `strided_slice` (negative strides);
//! - broadcasts and paddings: `tile`, `expand_as`, `pad`;
//! - indexing: `gather` (0-D or 1-D index), `index_select`, `one_hot`;
//! - along an axis: `tril_triu` (both `lower`), `triu`, `cumsum`
//!   (`exclusive`, `reverse`, `flatten`), `cummax`.
//!
//! Forward, backward and the grad for each (the derived form `(inputs...;
//! one grad per output)`; `cummax` in Paddle's form `(x, indices;
//! out_grad)`, `stack` in both), but `one_hot`, whose ids have no gradient.
//! The kernels run on each device's blocks exactly as on the whole tensors,
//! so an attribute that counts global positions (a slice's ends, a split's
//! sections, a gather's ids, a diagonal) meets the wrong block when a rule
//! leaves its dim sharded. Axes are negative half the time. Backward is
//! given non-partial outputs (keeping a given partial is unsound by
//! decision, see `known_unsound.rs`), and `concat` / `stack` backward no
//! descending co-sharding (pinned there too).
//!
//! Besides the checked/refused tallies, every property counts the answers
//! that split work and fails when too few do. A unit test checks the grad
//! kernels against central differences.
//!
//! Default: 48 cases per property; `SPMD_CHECK_CASES=N` for more.

mod common;

use std::sync::OnceLock;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use spmd_check::{Input, Tensor, Values, check_backward, check_forward, check_grad};
use spmd_core::{Attrs, DistAttr, Mesh, Registry, Spec, SpmdRule};

use common::nn::{
    Counts, assert_gradient, complete, force, force_split, numeric_grad, small_mesh, specs,
};
use common::{attr, run};

const CASES: u32 = 48;

fn registry() -> &'static Registry {
    static R: OnceLock<Registry> = OnceLock::new();
    R.get_or_init(spmd_ops::builtins)
}

fn build(name: &str, attrs: &Attrs) -> Box<dyn SpmdRule> {
    registry().build(name, attrs).unwrap()
}

// ------------------------------------------------------------ generators

/// A shape of `ranks` dims of extent 1–4.
fn shape(ranks: std::ops::RangeInclusive<usize>) -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(1usize..=4, ranks)
}

/// An axis of a rank-`rank` tensor: as given (negative half the time) and
/// normalized.
fn axis(rank: usize) -> impl Strategy<Value = (i64, usize)> {
    (0..rank.max(1), any::<bool>()).prop_map(move |(a, neg)| {
        let given = if neg {
            a as i64 - rank as i64
        } else {
            a as i64
        };
        (given, a)
    })
}

fn normalize(axis: i64, rank: usize) -> usize {
    axis.rem_euclid(rank.max(1) as i64) as usize
}

/// The dims of `shape` a rule may keep sharded: not in `fixed`, not of
/// size 1 (forcing those would split no work).
fn free(shape: &[usize], fixed: &[usize]) -> Vec<usize> {
    (0..shape.len())
        .filter(|d| !fixed.contains(d) && shape[*d] > 1)
        .collect()
}

/// A mesh and attrs for the inputs (forward; maybe `Sum` partial) and the
/// outputs (backward, without their partial status; the grad's output
/// grads, with it).
#[derive(Clone, Debug)]
struct Layout {
    mesh: Vec<usize>,
    ins: Vec<DistAttr>,
    outs: Vec<DistAttr>,
}

/// A tensor of a layout: its shape, and the dims to force a split on.
type Slot = (Vec<usize>, Vec<usize>);

/// Random attrs for `ins` and `outs` on a small mesh, each tensor forced
/// (80%) to shard one of its free dims; half the time (per side) aligned
/// (see [`finish`]).
fn layout(ins: Vec<Slot>, outs: Vec<Slot>) -> impl Strategy<Value = Layout> {
    small_mesh().prop_flat_map(move |mesh| {
        let m = mesh.len();
        let side = |slots: &[Slot]| {
            let attrs: Vec<_> = slots
                .iter()
                .map(|(s, _)| attr(s.len(), m, true, spmd_core::ReduceType::Sum).boxed())
                .collect();
            (
                attrs,
                prop::collection::vec(force(), slots.len()),
                any::<bool>(),
            )
        };
        (
            Just(mesh),
            Just(ins.clone()),
            side(&ins),
            Just(outs.clone()),
            side(&outs),
        )
            .prop_map(
                |(mesh, ins, (a_in, f_in, al_in), outs, (a_out, f_out, al_out))| Layout {
                    ins: finish(&mesh, &ins, a_in, f_in, al_in),
                    outs: finish(&mesh, &outs, a_out, f_out, al_out),
                    mesh,
                },
            )
    })
}

type Force = (bool, prop::sample::Index, prop::sample::Index);

/// The attrs of one side of a layout, forced to split work; with `aligned`,
/// the tensors of the first one's rank copy its mapping: independent random
/// mappings of the inputs of a concat, or of the outputs of a split, mostly
/// conflict, and the rules then drop most shardings.
fn finish(
    mesh: &[usize],
    slots: &[Slot],
    attrs: Vec<DistAttr>,
    forces: Vec<Force>,
    aligned: bool,
) -> Vec<DistAttr> {
    let mut attrs: Vec<DistAttr> = attrs
        .iter()
        .zip(slots)
        .zip(forces)
        .map(|((a, (_, dims)), f)| force_split(a, mesh, dims, f))
        .collect();
    if aligned && !attrs.is_empty() {
        let first = attrs[0].dims_mapping.clone();
        for a in attrs.iter_mut().skip(1) {
            if a.dims_mapping.rank() == first.rank() {
                a.dims_mapping = first.clone();
            }
        }
    }
    attrs
}

// ------------------------------------------------------------- the driver

/// The counts of the three directions of one op.
struct Dirs {
    fw: Counts,
    bw: Counts,
    gr: Counts,
}

impl Dirs {
    const fn new() -> Dirs {
        Dirs {
            fw: Counts::new(),
            bw: Counts::new(),
            gr: Counts::new(),
        }
    }

    fn assert_meaningful(&self, op: &str, grad: bool) {
        self.fw.assert_meaningful(&format!("{op} forward"));
        self.bw.assert_meaningful(&format!("{op} backward"));
        if grad {
            self.gr.assert_meaningful(&format!("{op} grad"));
        }
    }
}

/// An op's kernel (every output), and its grad kernel `(inputs, outputs,
/// output grads) -> input grads`, as `check_forward` / `check_grad` take them.
type Kernel<'a> = &'a dyn Fn(&[Tensor]) -> Vec<Tensor>;
type GradKernel<'a> = &'a dyn Fn(&[Tensor], &[Tensor], &[Tensor]) -> Vec<Tensor>;

/// Forward from the layout's inputs, backward from its outputs (not
/// partial), and with `grad` the derived grad from both, each checked
/// against the kernels and counted.
fn check_op(
    d: &Dirs,
    rule: &dyn SpmdRule,
    l: &Layout,
    values: &[Tensor],
    op: Kernel<'_>,
    grad: Option<GradKernel<'_>>,
) -> Result<(), TestCaseError> {
    let mesh = Mesh::new(&l.mesh).unwrap();
    let inputs: Vec<Input> = values
        .iter()
        .zip(&l.ins)
        .map(|(v, a)| Input::new(v.clone(), a.clone()))
        .collect();
    d.fw.record(
        &mesh,
        &rule.forward(&mesh, &specs(&inputs)),
        check_forward(rule, &mesh, &inputs, op),
    )?;

    let dense = op(values);
    let outs = complete(&l.outs);
    let shapes: Vec<&[usize]> = values.iter().map(Tensor::shape).collect();
    let out_specs: Vec<Spec<'_>> = dense
        .iter()
        .zip(&outs)
        .map(|(t, a)| Spec::new(t.shape(), a))
        .collect();
    d.bw.record(
        &mesh,
        &rule.backward(&mesh, &shapes, &out_specs),
        check_backward(rule, &mesh, values, &outs, op),
    )?;

    if let Some(grad) = grad {
        let dy_specs: Vec<Spec<'_>> = dense
            .iter()
            .zip(&l.outs)
            .map(|(t, a)| Spec::new(t.shape(), a))
            .collect();
        d.gr.record(
            &mesh,
            &rule.grad(&mesh, &specs(&inputs), &dy_specs),
            check_grad(rule, &mesh, &inputs, &l.outs, op, grad),
        )?;
    }
    Ok(())
}

fn probe(shape: &[usize], seed: u64) -> Tensor {
    Tensor::probe(shape, seed, Values::Integers)
}

// ------------------------------------------------------- kernel helpers

/// Calls `f` with every multi-index of `shape`.
fn each_index(shape: &[usize], mut f: impl FnMut(&[usize])) {
    Tensor::from_fn(shape, |i| {
        f(i);
        0.0
    });
}

/// The slices `index` of `t` along `axis`, in that order.
fn take(t: &Tensor, axis: usize, index: &[usize]) -> Tensor {
    let mut shape = t.shape().to_vec();
    shape[axis] = index.len();
    Tensor::from_fn(&shape, |i| {
        let mut j = i.to_vec();
        j[axis] = index[i[axis]];
        t.get(&j)
    })
}

/// `take`'s gradient: `dy` added into zeros of `shape` at the slices
/// `index` along `axis`.
fn put(dy: &Tensor, shape: &[usize], axis: usize, index: &[usize]) -> Tensor {
    assert_eq!(dy.shape()[axis], index.len(), "a grad of the wrong extent");
    let mut g = Tensor::full(shape, 0.0);
    each_index(dy.shape(), |i| {
        let mut j = i.to_vec();
        j[axis] = index[i[axis]];
        g.set(&j, g.get(&j) + dy.get(i));
    });
    g
}

/// `t` without its dim `axis`, which has extent 1.
fn drop_dim(t: &Tensor, axis: usize) -> Tensor {
    assert_eq!(t.shape()[axis], 1, "dropping dim {axis} of {:?}", t.shape());
    let mut shape = t.shape().to_vec();
    shape.remove(axis);
    Tensor::new(&shape, t.data().to_vec())
}

/// `t` with a dim of extent 1 inserted at `axis`.
fn add_dim(t: &Tensor, axis: usize) -> Tensor {
    let mut shape = t.shape().to_vec();
    shape.insert(axis, 1);
    Tensor::new(&shape, t.data().to_vec())
}

/// Element indices as a kernel reads them from an index tensor.
fn ids(t: &Tensor) -> Vec<usize> {
    t.data()
        .iter()
        .map(|&v| {
            assert!(v >= 0.0 && v.fract() == 0.0, "an index {v}");
            v as usize
        })
        .collect()
}

// ---------------------------------------------------------------- kernels

/// `xs` joined along `axis` (the other dims must agree: blocks that do not
/// fail the device).
fn concat(xs: &[Tensor], axis: usize) -> Tensor {
    let mut shape = xs[0].shape().to_vec();
    for x in xs {
        for d in (0..shape.len()).filter(|&d| d != axis) {
            assert_eq!(x.shape()[d], shape[d], "concat of {:?}", x.shape());
        }
    }
    shape[axis] = xs.iter().map(|x| x.shape()[axis]).sum();
    Tensor::from_fn(&shape, |i| {
        let (mut j, mut k) = (i.to_vec(), i[axis]);
        for x in xs {
            if k < x.shape()[axis] {
                j[axis] = k;
                return x.get(&j);
            }
            k -= x.shape()[axis];
        }
        unreachable!()
    })
}

/// `x` cut along `axis` into pieces of `sizes`.
fn split(x: &Tensor, axis: usize, sizes: &[usize]) -> Vec<Tensor> {
    assert_eq!(
        sizes.iter().sum::<usize>(),
        x.shape()[axis],
        "sections {sizes:?} of a dim of {}",
        x.shape()[axis]
    );
    let mut at = 0;
    sizes
        .iter()
        .map(|&n| {
            let piece: Vec<usize> = (at..at + n).collect();
            at += n;
            take(x, axis, &piece)
        })
        .collect()
}

/// `xs` (one shape) joined along a new dim at `axis`.
fn stack(xs: &[Tensor], axis: usize) -> Tensor {
    for x in xs {
        assert_eq!(x.shape(), xs[0].shape(), "stack of different blocks");
    }
    let parts: Vec<Tensor> = xs.iter().map(|x| add_dim(x, axis)).collect();
    concat(&parts, axis)
}

/// Paddle's `split` sections: one may be -1, the rest of the dim.
fn sections(extent: usize, given: &[i64]) -> Vec<usize> {
    let known: i64 = given.iter().filter(|&&s| s >= 0).sum();
    given
        .iter()
        .map(|&s| if s < 0 { extent as i64 - known } else { s })
        .map(|s| usize::try_from(s).expect("sections longer than the dim"))
        .collect()
}

/// Paddle's `slice` bounds on a dim of extent `n`: negative from the end,
/// clamped.
fn slice_range(n: usize, start: i64, end: i64) -> std::ops::Range<usize> {
    let clamp = |v: i64| (if v < 0 { v + n as i64 } else { v }).clamp(0, n as i64) as usize;
    let (s, e) = (clamp(start), clamp(end));
    s..e.max(s)
}

/// The indices a strided slice takes on a dim of extent `n`.
fn strided_range(n: usize, start: i64, end: i64, stride: i64) -> Vec<usize> {
    let n = n as i64;
    let norm = |v: i64| if v < 0 { v + n } else { v };
    let mut out = Vec::new();
    if stride > 0 {
        let (mut s, e) = (norm(start).clamp(0, n), norm(end).clamp(0, n));
        while s < e {
            out.push(s as usize);
            s += stride;
        }
    } else {
        let (mut s, e) = (norm(start).clamp(-1, n - 1), norm(end).clamp(-1, n - 1));
        while s > e {
            out.push(s as usize);
            s += stride;
        }
    }
    out
}

/// The index lists a (strided) slice takes, per dim of `shape`.
#[derive(Clone, Debug)]
struct SliceAttrs {
    axes: Vec<i64>,
    starts: Vec<i64>,
    ends: Vec<i64>,
    /// Empty for `slice`.
    strides: Vec<i64>,
    decrease: Vec<i64>,
}

impl SliceAttrs {
    fn picks(&self, shape: &[usize]) -> Vec<Vec<usize>> {
        let mut picks: Vec<Vec<usize>> = shape.iter().map(|&n| (0..n).collect()).collect();
        for (k, &a) in self.axes.iter().enumerate() {
            let d = normalize(a, shape.len());
            picks[d] = match self.strides.get(k) {
                Some(&s) => strided_range(shape[d], self.starts[k], self.ends[k], s),
                None => slice_range(shape[d], self.starts[k], self.ends[k]).collect(),
            };
        }
        picks
    }

    fn apply(&self, x: &Tensor) -> Tensor {
        let mut out = x.clone();
        for (d, p) in self.picks(x.shape()).iter().enumerate() {
            out = take(&out, d, p);
        }
        let mut dropped: Vec<usize> = self
            .decrease
            .iter()
            .map(|&a| normalize(a, x.rank()))
            .collect();
        dropped.sort_unstable();
        for &d in dropped.iter().rev() {
            out = drop_dim(&out, d);
        }
        out
    }

    fn grad(&self, x_shape: &[usize], dy: &Tensor) -> Tensor {
        let picks = self.picks(x_shape);
        let mut dy = dy.clone();
        let mut dropped: Vec<usize> = self
            .decrease
            .iter()
            .map(|&a| normalize(a, x_shape.len()))
            .collect();
        dropped.sort_unstable();
        for &d in &dropped {
            dy = add_dim(&dy, d);
        }
        // Scatter back one dim at a time.
        let mut shape: Vec<usize> = picks.iter().map(Vec::len).collect();
        for (d, p) in picks.iter().enumerate() {
            shape[d] = x_shape[d];
            dy = put(&dy, &shape, d, p);
        }
        dy
    }
}

/// Paddle's `tile`: `repeat_times` aligned to the right.
fn tile(x: &Tensor, reps: &[i64]) -> Tensor {
    let rank = x.rank().max(reps.len());
    let xs = padded(x.shape(), rank);
    let r: Vec<usize> = padded_reps(reps, rank);
    let out: Vec<usize> = xs.iter().zip(&r).map(|(a, b)| a * b).collect();
    let x = Tensor::new(&xs, x.data().to_vec());
    Tensor::from_fn(&out, |i| {
        let j: Vec<usize> = i.iter().zip(&xs).map(|(a, n)| a % n).collect();
        x.get(&j)
    })
}

fn tile_grad(x_shape: &[usize], reps: &[i64], dy: &Tensor) -> Tensor {
    let rank = x_shape.len().max(reps.len());
    let xs = padded(x_shape, rank);
    let mut g = Tensor::full(&xs, 0.0);
    each_index(dy.shape(), |i| {
        let j: Vec<usize> = i.iter().zip(&xs).map(|(a, n)| a % n).collect();
        g.set(&j, g.get(&j) + dy.get(i));
    });
    Tensor::new(x_shape, g.data().to_vec())
}

/// `shape` with leading 1s up to `rank`.
fn padded(shape: &[usize], rank: usize) -> Vec<usize> {
    let mut s = vec![1; rank - shape.len()];
    s.extend_from_slice(shape);
    s
}

fn padded_reps(reps: &[i64], rank: usize) -> Vec<usize> {
    let mut r = vec![1; rank - reps.len()];
    r.extend(reps.iter().map(|&v| v as usize));
    r
}

/// `x` broadcast to `y`'s (block) shape. `x_global` tells the broadcast
/// dims (global extent 1) from dims whose block has extent 1.
fn expand_as(x: &Tensor, y_shape: &[usize], x_global: &[usize]) -> Tensor {
    let off = y_shape.len() - x.rank();
    for d in 0..x.rank() {
        if x_global[d] != 1 {
            assert_eq!(
                x.shape()[d],
                y_shape[off + d],
                "x {:?} for y {y_shape:?}",
                x.shape()
            );
        }
    }
    Tensor::from_fn(y_shape, |i| {
        let j: Vec<usize> = (0..x.rank())
            .map(|d| if x_global[d] == 1 { 0 } else { i[off + d] })
            .collect();
        x.get(&j)
    })
}

fn expand_as_grad(x_shape: &[usize], x_global: &[usize], dy: &Tensor) -> Tensor {
    let off = dy.rank() - x_shape.len();
    let mut g = Tensor::full(x_shape, 0.0);
    each_index(dy.shape(), |i| {
        let j: Vec<usize> = (0..x_shape.len())
            .map(|d| if x_global[d] == 1 { 0 } else { i[off + d] })
            .collect();
        g.set(&j, g.get(&j) + dy.get(i));
    });
    g
}

/// Paddle's `pad` with zeros: a `(before, after)` pair per dim.
fn pad(x: &Tensor, paddings: &[i64]) -> Tensor {
    let p: Vec<usize> = paddings.iter().map(|&v| v as usize).collect();
    let shape: Vec<usize> = (0..x.rank())
        .map(|d| x.shape()[d] + p[2 * d] + p[2 * d + 1])
        .collect();
    Tensor::from_fn(&shape, |i| {
        let mut j = Vec::with_capacity(i.len());
        for d in 0..i.len() {
            match i[d].checked_sub(p[2 * d]) {
                Some(k) if k < x.shape()[d] => j.push(k),
                _ => return 0.0,
            }
        }
        x.get(&j)
    })
}

/// The grad of `pad`: the output grad without its padding.
fn pad_grad(paddings: &[i64], dy: &Tensor) -> Tensor {
    let p: Vec<usize> = paddings.iter().map(|&v| v as usize).collect();
    let shape: Vec<usize> = (0..dy.rank())
        .map(|d| dy.shape()[d] - p[2 * d] - p[2 * d + 1])
        .collect();
    Tensor::from_fn(&shape, |i| {
        let j: Vec<usize> = (0..i.len()).map(|d| i[d] + p[2 * d]).collect();
        dy.get(&j)
    })
}

/// `gather` / `index_select`: the slices of `x` the 1-D or 0-D `index`
/// names along `axis` (a 0-D index drops the dim).
fn gather(x: &Tensor, index: &Tensor, axis: usize) -> Tensor {
    let ids = ids(index);
    for &k in &ids {
        assert!(
            k < x.shape()[axis],
            "index {k} of a dim of {}",
            x.shape()[axis]
        );
    }
    let out = take(x, axis, &ids);
    if index.rank() == 0 {
        drop_dim(&out, axis)
    } else {
        out
    }
}

/// The grad of `gather`: `dy` added into zeros at the named slices; `n` is
/// x's (never sharded) extent along `axis`.
fn gather_grad(dy: &Tensor, index: &Tensor, axis: usize, n: usize) -> Tensor {
    let dy = if index.rank() == 0 {
        add_dim(dy, axis)
    } else {
        dy.clone()
    };
    let mut shape = dy.shape().to_vec();
    shape[axis] = n;
    put(&dy, &shape, axis, &ids(index))
}

fn one_hot(x: &Tensor, classes: usize) -> Tensor {
    let ids = ids(x);
    assert!(ids.iter().all(|&k| k < classes), "an id out of range");
    let mut shape = x.shape().to_vec();
    shape.push(classes);
    let r = x.rank();
    Tensor::from_fn(&shape, |i| f64::from(x.get(&i[..r]) == i[r] as f64))
}

/// `tril` (`lower`) or `triu` of the last two dims around `diagonal`.
fn tril_triu(x: &Tensor, diagonal: i64, lower: bool) -> Tensor {
    let r = x.rank();
    Tensor::from_fn(x.shape(), |i| {
        let off = i[r - 1] as i64 - i[r - 2] as i64;
        let keep = if lower {
            off <= diagonal
        } else {
            off >= diagonal
        };
        if keep { x.get(i) } else { 0.0 }
    })
}

/// A running sum along `axis`, maybe exclusive, maybe from the end.
fn cumsum(x: &Tensor, axis: usize, exclusive: bool, reverse: bool) -> Tensor {
    let n = x.shape()[axis];
    Tensor::from_fn(x.shape(), |i| {
        let k = i[axis];
        let range = match (reverse, exclusive) {
            (false, false) => 0..k + 1,
            (false, true) => 0..k,
            (true, false) => k..n,
            (true, true) => k + 1..n,
        };
        let mut j = i.to_vec();
        range
            .map(|m| {
                j[axis] = m;
                x.get(&j)
            })
            .sum()
    })
}

/// The running max along `axis` and where it was (the last position of a
/// tie).
fn cummax(x: &Tensor, axis: usize) -> [Tensor; 2] {
    let arg = Tensor::from_fn(x.shape(), |i| {
        let mut j = i.to_vec();
        let mut best = 0;
        for m in 0..=i[axis] {
            j[axis] = m;
            let v = x.get(&j);
            j[axis] = best;
            if v >= x.get(&j) {
                best = m;
            }
        }
        best as f64
    });
    let out = Tensor::from_fn(x.shape(), |i| {
        let mut j = i.to_vec();
        j[axis] = arg.get(i) as usize;
        x.get(&j)
    });
    [out, arg]
}

/// The grad of `cummax` from the saved indices: each output grad goes to
/// the position of its maximum.
fn cummax_grad(x_shape: &[usize], indices: &Tensor, axis: usize, dy: &Tensor) -> Tensor {
    assert_eq!(
        dy.shape(),
        indices.shape(),
        "out_grad and indices blocks differ"
    );
    assert_eq!(dy.shape(), x_shape, "out_grad and x blocks differ");
    let mut g = Tensor::full(x_shape, 0.0);
    each_index(dy.shape(), |i| {
        let mut j = i.to_vec();
        j[axis] = indices.get(i) as usize;
        g.set(&j, g.get(&j) + dy.get(i));
    });
    g
}

// -------------------------------------------------------------- concat

#[derive(Clone, Debug)]
struct JoinCase {
    /// The inputs' shapes (concat: differing along the axis).
    shapes: Vec<Vec<usize>>,
    axis: (i64, usize),
    l: Layout,
}

fn concat_case() -> impl Strategy<Value = JoinCase> {
    (shape(1..=3), 1usize..=3)
        .prop_flat_map(|(base, n)| {
            let r = base.len();
            (Just(base), axis(r), prop::collection::vec(1usize..=4, n))
        })
        .prop_flat_map(|(base, axis, extents)| {
            let shapes: Vec<Vec<usize>> = extents
                .iter()
                .map(|&e| {
                    let mut s = base.clone();
                    s[axis.1] = e;
                    s
                })
                .collect();
            let mut out = base.clone();
            out[axis.1] = extents.iter().sum();
            let ins = shapes
                .iter()
                .map(|s| (s.clone(), free(s, &[axis.1])))
                .collect();
            let outs = vec![(out.clone(), free(&out, &[axis.1]))];
            (Just(shapes), Just(axis), layout(ins, outs))
        })
        .prop_map(|(shapes, axis, l)| JoinCase { shapes, axis, l })
}

#[test]
fn concat_against_the_kernel() {
    static D: Dirs = Dirs::new();
    run(CASES, concat_case(), |c| {
        let rule = build("concat", &Attrs::new().with("axis", c.axis.0));
        let axis = c.axis.1;
        let values: Vec<Tensor> = c
            .shapes
            .iter()
            .enumerate()
            .map(|(i, s)| probe(s, i as u64 + 1))
            .collect();
        let op = |v: &[Tensor]| vec![concat(v, axis)];
        // Each input's grad is its part of the output grad; its extent
        // along the axis is its own.
        let grad = |v: &[Tensor], _: &[Tensor], dy: &[Tensor]| {
            let sizes: Vec<usize> = v.iter().map(|x| x.shape()[axis]).collect();
            split(&dy[0], axis, &sizes)
        };
        check_op(&D, &*rule, &c.l, &values, &op, Some(&grad))
    });
    D.assert_meaningful("concat", true);
}

// --------------------------------------------------------------- stack

fn stack_case() -> impl Strategy<Value = JoinCase> {
    (
        prop_oneof![1 => shape(0..=0), 6 => shape(1..=3)],
        1usize..=3,
    )
        .prop_flat_map(|(base, n)| {
            let r = base.len();
            (Just(base), Just(n), axis(r + 1))
        })
        .prop_flat_map(|(base, n, axis)| {
            let mut out = base.clone();
            out.insert(axis.1, n);
            let ins = vec![(base.clone(), free(&base, &[])); n];
            let outs = vec![(out.clone(), free(&out, &[axis.1]))];
            (Just(vec![base; n]), Just(axis), layout(ins, outs))
        })
        .prop_map(|(shapes, axis, l)| JoinCase { shapes, axis, l })
}

#[test]
fn stack_against_the_kernel() {
    static D: Dirs = Dirs::new();
    static PADDLE: Counts = Counts::new();
    run(CASES, stack_case(), |c| {
        let rule = build("stack", &Attrs::new().with("axis", c.axis.0));
        let axis = c.axis.1;
        let values: Vec<Tensor> = c
            .shapes
            .iter()
            .enumerate()
            .map(|(i, s)| probe(s, i as u64 + 1))
            .collect();
        let op = |v: &[Tensor]| vec![stack(v, axis)];
        let unstack = |dy: &Tensor| -> Vec<Tensor> {
            (0..dy.shape()[axis])
                .map(|k| drop_dim(&take(dy, axis, &[k]), axis))
                .collect()
        };
        let grad = |_: &[Tensor], _: &[Tensor], dy: &[Tensor]| unstack(&dy[0]);
        check_op(&D, &*rule, &c.l, &values, &op, Some(&grad))?;

        // Paddle's grad op takes only out_grad: the forward value is fixed.
        let mesh = Mesh::new(&c.l.mesh).unwrap();
        let out = op(&values);
        let dy = [Spec::new(out[0].shape(), &c.l.outs[0])];
        PADDLE.record(
            &mesh,
            &rule.grad(&mesh, &[], &dy),
            check_grad(
                &*rule,
                &mesh,
                &[],
                &c.l.outs,
                |_: &[Tensor]| out.clone(),
                |_: &[Tensor], _: &[Tensor], dy: &[Tensor]| unstack(&dy[0]),
            ),
        )
    });
    D.assert_meaningful("stack", true);
    PADDLE.assert_meaningful("stack grad (Paddle's signature)");
}

// ----------------------------------------------- split, split_with_num

#[derive(Clone, Debug)]
struct CutCase {
    shape: Vec<usize>,
    axis: (i64, usize),
    /// split: the sections as given (one maybe -1); split_with_num: [num].
    sections: Vec<i64>,
    l: Layout,
}

/// Output shapes of `x` cut along `axis` into pieces of `sizes`.
fn pieces(x: &[usize], axis: usize, sizes: &[usize]) -> Vec<Slot> {
    sizes
        .iter()
        .map(|&n| {
            let mut s = x.to_vec();
            s[axis] = n;
            let f = free(&s, &[axis]);
            (s, f)
        })
        .collect()
}

fn split_case(with_num: bool) -> impl Strategy<Value = CutCase> {
    shape(1..=3)
        .prop_flat_map(|x| {
            let r = x.len();
            (Just(x), axis(r))
        })
        .prop_flat_map(move |(x, axis)| {
            let n = x[axis.1];
            // Cuts after some positions of the dim, and which section (if
            // any) is given as -1; or a divisor of the dim.
            (
                Just((x, axis)),
                prop::collection::vec(any::<bool>(), n - 1),
                any::<prop::sample::Index>(),
                prop::bool::weighted(0.4),
            )
                .prop_map(move |((x, axis), cuts, pick, infer)| {
                    let n = x[axis.1];
                    let mut sizes = Vec::new();
                    let mut last = 0;
                    for (k, &cut) in cuts.iter().enumerate() {
                        if cut {
                            sizes.push(k + 1 - last);
                            last = k + 1;
                        }
                    }
                    sizes.push(n - last);
                    let given: Vec<i64> = if with_num {
                        let divisors: Vec<usize> = (1..=n).filter(|d| n % d == 0).collect();
                        vec![divisors[pick.index(divisors.len())] as i64]
                    } else {
                        let minus = infer.then(|| pick.index(sizes.len()));
                        sizes
                            .iter()
                            .enumerate()
                            .map(|(k, &s)| if Some(k) == minus { -1 } else { s as i64 })
                            .collect()
                    };
                    (x, axis, given)
                })
        })
        .prop_flat_map(move |(x, axis, given)| {
            let sizes = if with_num {
                vec![x[axis.1] / given[0] as usize; given[0] as usize]
            } else {
                sections(x[axis.1], &given)
            };
            let ins = vec![(x.clone(), free(&x, &[axis.1]))];
            let l = layout(ins, pieces(&x, axis.1, &sizes));
            (Just((x, axis, given)), l)
        })
        .prop_map(|((shape, axis, sections), l)| CutCase {
            shape,
            axis,
            sections,
            l,
        })
}

#[test]
fn split_against_the_kernel() {
    static D: Dirs = Dirs::new();
    run(CASES, split_case(false), |c| {
        let rule = build(
            "split",
            &Attrs::new()
                .with("sections", c.sections.clone())
                .with("axis", c.axis.0),
        );
        let (axis, given) = (c.axis.1, c.sections.clone());
        let op = move |v: &[Tensor]| split(&v[0], axis, &sections(v[0].shape()[axis], &given));
        let grad = |_: &[Tensor], _: &[Tensor], dy: &[Tensor]| vec![concat(dy, axis)];
        check_op(&D, &*rule, &c.l, &[probe(&c.shape, 1)], &op, Some(&grad))
    });
    D.assert_meaningful("split", true);
}

#[test]
fn split_with_num_against_the_kernel() {
    static D: Dirs = Dirs::new();
    run(CASES, split_case(true), |c| {
        let num = c.sections[0];
        let rule = build(
            "split_with_num",
            &Attrs::new().with("num", num).with("axis", c.axis.0),
        );
        let axis = c.axis.1;
        let op = move |v: &[Tensor]| {
            let n = v[0].shape()[axis];
            assert_eq!(n % num as usize, 0, "{num} pieces of a dim of {n}");
            split(&v[0], axis, &vec![n / num as usize; num as usize])
        };
        let grad = |_: &[Tensor], _: &[Tensor], dy: &[Tensor]| vec![concat(dy, axis)];
        check_op(&D, &*rule, &c.l, &[probe(&c.shape, 1)], &op, Some(&grad))
    });
    D.assert_meaningful("split_with_num", true);
}

// ---------------------------------------------------------------- unbind

fn unbind_case() -> impl Strategy<Value = CutCase> {
    shape(1..=3)
        .prop_flat_map(|x| {
            let r = x.len();
            (Just(x), axis(r))
        })
        .prop_flat_map(|(x, axis)| {
            let mut out = x.clone();
            out.remove(axis.1);
            let ins = vec![(x.clone(), free(&x, &[axis.1]))];
            let outs = vec![(out.clone(), free(&out, &[])); x[axis.1]];
            (Just((x, axis)), layout(ins, outs))
        })
        .prop_map(|((shape, axis), l)| CutCase {
            shape,
            axis,
            sections: Vec::new(),
            l,
        })
}

#[test]
fn unbind_against_the_kernel() {
    static D: Dirs = Dirs::new();
    run(CASES, unbind_case(), |c| {
        let rule = build("unbind", &Attrs::new().with("axis", c.axis.0));
        let axis = c.axis.1;
        let op = move |v: &[Tensor]| {
            (0..v[0].shape()[axis])
                .map(|k| drop_dim(&take(&v[0], axis, &[k]), axis))
                .collect()
        };
        let grad = |_: &[Tensor], _: &[Tensor], dy: &[Tensor]| vec![stack(dy, axis)];
        check_op(&D, &*rule, &c.l, &[probe(&c.shape, 1)], &op, Some(&grad))
    });
    D.assert_meaningful("unbind", true);
}

// ------------------------------------------------- slice, strided_slice

#[derive(Clone, Debug)]
struct SliceCase {
    shape: Vec<usize>,
    s: SliceAttrs,
    l: Layout,
}

fn slice_case(strided: bool) -> impl Strategy<Value = SliceCase> {
    // Mostly a dim left unsliced, which may stay sharded.
    prop_oneof![1 => shape(1..=1), 4 => shape(2..=3)]
        .prop_flat_map(move |x| {
            let r = x.len();
            // Per dim: sliced or not, given negative, start, end, stride,
            // dropped if the slice is one long.
            let dim = (
                prop::bool::weighted(0.4),
                any::<bool>(),
                -5i64..5,
                prop_oneof![-5i64..6, Just(i64::from(i32::MAX))],
                prop_oneof![1i64..=2, -2i64..=-1],
                any::<bool>(),
            );
            (Just(x), prop::collection::vec(dim, r))
        })
        .prop_flat_map(move |(x, dims)| {
            let r = x.len();
            let mut s = SliceAttrs {
                axes: Vec::new(),
                starts: Vec::new(),
                ends: Vec::new(),
                strides: Vec::new(),
                decrease: Vec::new(),
            };
            for (d, &(cut, neg, start, end, stride, drop)) in dims.iter().enumerate() {
                if !cut {
                    continue;
                }
                s.axes
                    .push(if neg { d as i64 - r as i64 } else { d as i64 });
                s.starts.push(start);
                s.ends.push(end);
                if strided {
                    s.strides.push(stride);
                }
                let len = if strided {
                    strided_range(x[d], start, end, stride).len()
                } else {
                    slice_range(x[d], start, end).len()
                };
                if !strided && drop && len == 1 {
                    s.decrease.push(d as i64);
                }
            }
            if s.axes.is_empty() {
                // At least one sliced dim: the first.
                s.axes.push(0);
                s.starts.push(1);
                s.ends.push(i64::from(i32::MAX));
                if strided {
                    s.strides.push(1);
                }
            }
            let out = s.apply(&probe(&x, 0)).shape().to_vec();
            let cut: Vec<usize> = s.axes.iter().map(|&a| normalize(a, r)).collect();
            let ins = vec![(x.clone(), free(&x, &cut))];
            // The output's dims, once dropped ones are gone, that are not
            // sliced.
            let kept: Vec<usize> = (0..r)
                .filter(|d| !s.decrease.iter().any(|&a| normalize(a, r) == *d))
                .collect();
            let out_fixed: Vec<usize> = kept
                .iter()
                .enumerate()
                .filter(|(_, d)| cut.contains(d))
                .map(|(k, _)| k)
                .collect();
            let outs = vec![(out.clone(), free(&out, &out_fixed))];
            (Just((x, s)), layout(ins, outs))
        })
        .prop_map(|((shape, s), l)| SliceCase { shape, s, l })
}

fn slice_property(name: &str, strided: bool) {
    let d = Dirs::new();
    run(CASES, slice_case(strided), |c| {
        let mut attrs = Attrs::new()
            .with("axes", c.s.axes.clone())
            .with("starts", c.s.starts.clone())
            .with("ends", c.s.ends.clone());
        attrs = if strided {
            attrs.with("strides", c.s.strides.clone())
        } else {
            attrs
                .with("decrease_axis", c.s.decrease.clone())
                .with("infer_flags", vec![1_i64; c.s.axes.len()])
        };
        let rule = build(name, &attrs);
        let s = c.s.clone();
        let op = |v: &[Tensor]| vec![s.apply(&v[0])];
        let grad = |v: &[Tensor], _: &[Tensor], dy: &[Tensor]| vec![s.grad(v[0].shape(), &dy[0])];
        check_op(&d, &*rule, &c.l, &[probe(&c.shape, 1)], &op, Some(&grad))
    });
    d.assert_meaningful(name, true);
}

#[test]
fn slice_against_the_kernel() {
    slice_property("slice", false);
}

#[test]
fn strided_slice_against_the_kernel() {
    slice_property("strided_slice", true);
}

// ------------------------------------------------------------------ tile

#[derive(Clone, Debug)]
struct TileCase {
    shape: Vec<usize>,
    reps: Vec<i64>,
    l: Layout,
}

fn tile_case() -> impl Strategy<Value = TileCase> {
    (shape(1..=3), 0usize..=4)
        .prop_flat_map(|(x, n)| {
            // Mostly 1 (kept dims), sometimes 2 or 3.
            let rep = prop_oneof![3 => Just(1i64), 2 => 2i64..=3];
            (Just(x), prop::collection::vec(rep, n))
        })
        .prop_flat_map(|(x, reps)| {
            let rank = x.len().max(reps.len());
            let xs = padded(&x, rank);
            let r = padded_reps(&reps, rank);
            let out: Vec<usize> = xs.iter().zip(&r).map(|(a, b)| a * b).collect();
            let off = rank - x.len();
            let x_fixed: Vec<usize> = (0..x.len()).filter(|&d| r[off + d] != 1).collect();
            let out_fixed: Vec<usize> = (0..rank).filter(|&d| r[d] != 1 || d < off).collect();
            let ins = vec![(x.clone(), free(&x, &x_fixed))];
            let outs = vec![(out.clone(), free(&out, &out_fixed))];
            (Just((x, reps)), layout(ins, outs))
        })
        .prop_map(|((shape, reps), l)| TileCase { shape, reps, l })
}

#[test]
fn tile_against_the_kernel() {
    static D: Dirs = Dirs::new();
    run(CASES, tile_case(), |c| {
        let rule = build("tile", &Attrs::new().with("repeat_times", c.reps.clone()));
        let reps = c.reps.clone();
        let op = |v: &[Tensor]| vec![tile(&v[0], &reps)];
        let grad = |v: &[Tensor], _: &[Tensor], dy: &[Tensor]| {
            vec![tile_grad(v[0].shape(), &reps, &dy[0])]
        };
        check_op(&D, &*rule, &c.l, &[probe(&c.shape, 1)], &op, Some(&grad))
    });
    D.assert_meaningful("tile", true);
}

// ------------------------------------------------------------- expand_as

#[derive(Clone, Debug)]
struct ExpandCase {
    x: Vec<usize>,
    y: Vec<usize>,
    l: Layout,
}

fn expand_case() -> impl Strategy<Value = ExpandCase> {
    shape(1..=3)
        .prop_flat_map(|y| {
            let r = y.len();
            (
                Just(y),
                0..=r,
                prop::collection::vec(prop::bool::weighted(0.3), r),
            )
        })
        .prop_flat_map(|(y, drop, ones)| {
            // x: y's trailing dims, some broadcast from 1.
            let x: Vec<usize> = (drop..y.len())
                .map(|d| if ones[d] { 1 } else { y[d] })
                .collect();
            let ins = vec![(x.clone(), free(&x, &[])), (y.clone(), free(&y, &[]))];
            let outs = vec![(y.clone(), free(&y, &[]))];
            (Just((x, y)), layout(ins, outs))
        })
        .prop_map(|((x, y), l)| ExpandCase { x, y, l })
}

#[test]
fn expand_as_against_the_kernel() {
    static D: Dirs = Dirs::new();
    run(CASES, expand_case(), |c| {
        let rule = build("expand_as", &Attrs::new());
        let xg = c.x.clone();
        let op = |v: &[Tensor]| vec![expand_as(&v[0], v[1].shape(), &xg)];
        // y only gives the shape: its grad is zero.
        let grad = |v: &[Tensor], _: &[Tensor], dy: &[Tensor]| {
            vec![
                expand_as_grad(v[0].shape(), &xg, &dy[0]),
                Tensor::full(v[1].shape(), 0.0),
            ]
        };
        let values = [probe(&c.x, 1), probe(&c.y, 2)];
        check_op(&D, &*rule, &c.l, &values, &op, Some(&grad))
    });
    D.assert_meaningful("expand_as", true);
}

// ------------------------------------------------------------------- pad

#[derive(Clone, Debug)]
struct PadCase {
    shape: Vec<usize>,
    paddings: Vec<i64>,
    l: Layout,
}

fn pad_case() -> impl Strategy<Value = PadCase> {
    shape(1..=3)
        .prop_flat_map(|x| {
            let r = x.len();
            let pair = prop_oneof![1 => Just((0i64, 0i64)), 1 => (0i64..=2, 0i64..=2)];
            (Just(x), prop::collection::vec(pair, r))
        })
        .prop_flat_map(|(x, pairs)| {
            let paddings: Vec<i64> = pairs.iter().flat_map(|&(a, b)| [a, b]).collect();
            let padded: Vec<usize> = pairs
                .iter()
                .enumerate()
                .filter(|(_, p)| **p != (0, 0))
                .map(|(d, _)| d)
                .collect();
            let out: Vec<usize> = x
                .iter()
                .zip(&pairs)
                .map(|(&n, &(a, b))| n + (a + b) as usize)
                .collect();
            let ins = vec![(x.clone(), free(&x, &padded))];
            let outs = vec![(out.clone(), free(&out, &padded))];
            (Just((x, paddings)), layout(ins, outs))
        })
        .prop_map(|((shape, paddings), l)| PadCase { shape, paddings, l })
}

#[test]
fn pad_against_the_kernel() {
    static D: Dirs = Dirs::new();
    run(CASES, pad_case(), |c| {
        let rule = build("pad", &Attrs::new().with("paddings", c.paddings.clone()));
        let p = c.paddings.clone();
        let op = |v: &[Tensor]| vec![pad(&v[0], &p)];
        // The grad never reads x.
        let grad = |_: &[Tensor], _: &[Tensor], dy: &[Tensor]| vec![pad_grad(&p, &dy[0])];
        check_op(&D, &*rule, &c.l, &[probe(&c.shape, 1)], &op, Some(&grad))
    });
    D.assert_meaningful("pad", true);
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
    l: Layout,
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
            (Just((x, axis, index, scalar)), layout(ins, outs))
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
    let d = Dirs::new();
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
    l: Layout,
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
            (Just((x, classes, ids)), layout(ins, outs))
        })
        .prop_map(|((x, classes, ids), l)| OneHotCase { x, classes, ids, l })
}

/// The ids have no gradient: no grad property.
#[test]
fn one_hot_against_the_kernel() {
    static D: Dirs = Dirs::new();
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

// ---------------------------------------------------- tril_triu, triu

#[derive(Clone, Debug)]
struct TriCase {
    shape: Vec<usize>,
    diagonal: i64,
    lower: bool,
    l: Layout,
}

fn tri_case() -> impl Strategy<Value = TriCase> {
    (
        prop_oneof![1 => shape(2..=2), 4 => shape(3..=4)],
        -2i64..=2,
        any::<bool>(),
    )
        .prop_flat_map(|(x, diagonal, lower)| {
            let r = x.len();
            let slot = (x.clone(), free(&x, &[r - 2, r - 1]));
            (
                Just((x, diagonal, lower)),
                layout(vec![slot.clone()], vec![slot]),
            )
        })
        .prop_map(|((shape, diagonal, lower), l)| TriCase {
            shape,
            diagonal,
            lower,
            l,
        })
}

fn tri_property(name: &str) {
    let d = Dirs::new();
    let triu = name == "triu";
    run(CASES, tri_case(), |c| {
        let lower = c.lower && !triu;
        let mut attrs = Attrs::new().with("diagonal", c.diagonal);
        if !triu {
            attrs = attrs.with("lower", lower);
        }
        let rule = build(name, &attrs);
        let diagonal = c.diagonal;
        let op = |v: &[Tensor]| vec![tril_triu(&v[0], diagonal, lower)];
        // Linear: the grad masks the output grad the same way.
        let grad =
            |_: &[Tensor], _: &[Tensor], dy: &[Tensor]| vec![tril_triu(&dy[0], diagonal, lower)];
        check_op(&d, &*rule, &c.l, &[probe(&c.shape, 1)], &op, Some(&grad))
    });
    d.assert_meaningful(name, true);
}

#[test]
fn tril_triu_against_the_kernel() {
    tri_property("tril_triu");
}

#[test]
fn triu_against_the_kernel() {
    tri_property("triu");
}

// ------------------------------------------------------- cumsum, cummax

#[derive(Clone, Debug)]
struct ScanCase {
    shape: Vec<usize>,
    axis: (i64, usize),
    exclusive: bool,
    reverse: bool,
    /// cumsum's `flatten`: scan `x` as one 1-D tensor.
    flatten: bool,
    /// Outputs: 1 (cumsum) or 2 (cummax: values and indices).
    l: Layout,
}

fn scan_case(outputs: usize) -> impl Strategy<Value = ScanCase> {
    let flatten = prop::bool::weighted(if outputs == 1 { 0.2 } else { 0.0 });
    (shape(1..=3), flatten)
        .prop_flat_map(|(x, flatten)| {
            let r = x.len();
            (Just((x, flatten)), axis(r), any::<bool>(), any::<bool>())
        })
        .prop_flat_map(move |((x, flatten), axis, exclusive, reverse)| {
            let slot = (x.clone(), free(&x, &[axis.1]));
            let out = if flatten {
                // Nothing stays sharded.
                let n = vec![x.iter().product()];
                (n, vec![])
            } else {
                slot.clone()
            };
            let ins = if flatten { (x.clone(), vec![]) } else { slot };
            let l = layout(vec![ins], vec![out; outputs]);
            (Just((x, axis, exclusive, reverse, flatten)), l)
        })
        .prop_map(|((shape, axis, exclusive, reverse, flatten), l)| ScanCase {
            shape,
            axis,
            exclusive,
            reverse,
            flatten,
            l,
        })
}

#[test]
fn cumsum_against_the_kernel() {
    static D: Dirs = Dirs::new();
    run(CASES, scan_case(1), |c| {
        let rule = build(
            "cumsum",
            &Attrs::new()
                .with("axis", c.axis.0)
                .with("flatten", c.flatten)
                .with("exclusive", c.exclusive)
                .with("reverse", c.reverse),
        );
        let (axis, ex, rev, flat) = (c.axis.1, c.exclusive, c.reverse, c.flatten);
        let op = |v: &[Tensor]| {
            if flat {
                let x = Tensor::new(&[v[0].len()], v[0].data().to_vec());
                vec![cumsum(&x, 0, ex, rev)]
            } else {
                vec![cumsum(&v[0], axis, ex, rev)]
            }
        };
        // The reverse scan of the output grad (shaped back like x when
        // flattened: x is replicated then, and not read).
        let x_shape = c.shape.clone();
        let grad = |_: &[Tensor], _: &[Tensor], dy: &[Tensor]| {
            if flat {
                let g = cumsum(&dy[0], 0, ex, !rev);
                vec![Tensor::new(&x_shape, g.data().to_vec())]
            } else {
                vec![cumsum(&dy[0], axis, ex, !rev)]
            }
        };
        check_op(&D, &*rule, &c.l, &[probe(&c.shape, 1)], &op, Some(&grad))
    });
    D.assert_meaningful("cumsum", true);
}

/// Forward and backward; the grad in Paddle's form `(x, indices;
/// out_grad)`, the derived form being refused (the grad notation has
/// Paddle's arity).
#[test]
fn cummax_against_the_kernel() {
    static D: Dirs = Dirs::new();
    static GRAD: Counts = Counts::new();
    run(CASES, scan_case(2), |c| {
        let rule = build("cummax", &Attrs::new().with("axis", c.axis.0));
        let axis = c.axis.1;
        let op = |v: &[Tensor]| cummax(&v[0], axis).to_vec();
        let x = probe(&c.shape, 1);
        check_op(&D, &*rule, &c.l, std::slice::from_ref(&x), &op, None)?;

        let mesh = Mesh::new(&c.l.mesh).unwrap();
        let [_, indices] = cummax(&x, axis);
        // indices laid out as given for the second output.
        let sig = [
            Input::new(x, c.l.ins[0].clone()),
            Input::new(indices, complete(&c.l.outs[1..])[0].clone()),
        ];
        let forward = |v: &[Tensor]| vec![cummax(&v[0], axis)[0].clone()];
        let grad = |v: &[Tensor], _: &[Tensor], dy: &[Tensor]| {
            vec![cummax_grad(v[0].shape(), &v[1], axis, &dy[0])]
        };
        let dy = [Spec::new(sig[0].value.shape(), &c.l.outs[0])];
        GRAD.record(
            &mesh,
            &rule.grad(&mesh, &specs(&sig), &dy),
            check_grad(&*rule, &mesh, &sig, &c.l.outs[..1], forward, grad),
        )
    });
    D.assert_meaningful("cummax", false);
    GRAD.assert_meaningful("cummax grad (Paddle's signature)");
}

// ------------------------------------ the reference grads are the gradients

/// The hand-written grad kernels must be the ops' true gradients (else the
/// properties would check the layout of some other function).
#[test]
fn reference_grads_match_central_differences() {
    /// `grad` (given the output grads) against central differences of `f`.
    fn check(
        what: &str,
        f: &dyn Fn(&[Tensor]) -> Vec<Tensor>,
        inputs: &[Tensor],
        grad: &dyn Fn(&[Tensor]) -> Vec<Tensor>,
    ) {
        let dys: Vec<Tensor> = f(inputs)
            .iter()
            .enumerate()
            .map(|(k, o)| probe(o.shape(), 10 + k as u64))
            .collect();
        let analytic = grad(&dys);
        assert_eq!(analytic.len(), inputs.len(), "{what}");
        for (j, a) in analytic.iter().enumerate() {
            assert_gradient(what, a, &numeric_grad(f, inputs, &dys, j));
        }
    }
    let x = probe(&[3, 4], 1);
    let xs = std::slice::from_ref(&x);

    let s = SliceAttrs {
        axes: vec![1, -2],
        starts: vec![3, 0],
        ends: vec![0, 1],
        strides: vec![-2, 1],
        decrease: vec![],
    };
    check("strided_slice", &|v| vec![s.apply(&v[0])], xs, &|dy| {
        vec![s.grad(x.shape(), &dy[0])]
    });
    let s = SliceAttrs {
        axes: vec![0, 1],
        starts: vec![1, -3],
        ends: vec![2, 100],
        strides: vec![],
        decrease: vec![0],
    };
    check("slice", &|v| vec![s.apply(&v[0])], xs, &|dy| {
        vec![s.grad(x.shape(), &dy[0])]
    });

    check("tile", &|v| vec![tile(&v[0], &[2, 1, 3])], xs, &|dy| {
        vec![tile_grad(x.shape(), &[2, 1, 3], &dy[0])]
    });

    let ins = [probe(&[1, 4], 2), probe(&[2, 3, 4], 3)];
    check(
        "expand_as",
        &|v| vec![expand_as(&v[0], v[1].shape(), &[1, 4])],
        &ins,
        &|dy| {
            vec![
                expand_as_grad(&[1, 4], &[1, 4], &dy[0]),
                Tensor::full(&[2, 3, 4], 0.0),
            ]
        },
    );

    let p = [1, 0, 2, 1];
    check("pad", &|v| vec![pad(&v[0], &p)], xs, &|dy| {
        vec![pad_grad(&p, &dy[0])]
    });

    for index in [
        Tensor::new(&[3], vec![3.0, 0.0, 3.0]),
        Tensor::new(&[], vec![2.0]),
    ] {
        check("gather", &|v| vec![gather(&v[0], &index, 1)], xs, &|dy| {
            vec![gather_grad(&dy[0], &index, 1, 4)]
        });
    }

    let ins = [x.clone(), probe(&[3, 2], 4)];
    check("concat", &|v| vec![concat(v, 1)], &ins, &|dy| {
        split(&dy[0], 1, &[4, 2])
    });
    check("split", &|v| split(&v[0], 1, &[1, 3]), xs, &|dy| {
        vec![concat(dy, 1)]
    });
    let ins = [x.clone(), probe(&[3, 4], 5)];
    check("stack", &|v| vec![stack(v, 2)], &ins, &|dy| {
        (0..2)
            .map(|k| drop_dim(&take(&dy[0], 2, &[k]), 2))
            .collect()
    });

    for (ex, rev) in [(false, false), (true, false), (false, true), (true, true)] {
        check("cumsum", &|v| vec![cumsum(&v[0], 0, ex, rev)], xs, &|dy| {
            vec![cumsum(&dy[0], 0, ex, !rev)]
        });
    }
    for lower in [false, true] {
        check(
            "tril_triu",
            &|v| vec![tril_triu(&v[0], -1, lower)],
            xs,
            &|dy| vec![tril_triu(&dy[0], -1, lower)],
        );
    }

    // cummax: only `out` has a gradient; the indices are fixed.
    let [_, indices] = cummax(&x, 1);
    check(
        "cummax",
        &|v| vec![cummax(&v[0], 1)[0].clone()],
        xs,
        &|dy| vec![cummax_grad(x.shape(), &indices, 1, &dy[0])],
    );
}
