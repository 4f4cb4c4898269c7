//! Shape ops: reshape-style compound dims (`bs(hd)->bshd` and back),
//! `transpose` (`perm`), `squeeze` / `unsqueeze` (`axis`), `flatten`
//! (`start_axis`, `stop_axis`) and `reshape` (`shape`) against einsums;
//! joins and cuts (`concat`, `stack`, `split`, `split_with_num`, `unbind`,
//! `slice` with `decrease_axis`, `strided_slice` with negative strides) and
//! broadcasts and paddings (`tile`, `expand_as`, `pad`) against their
//! kernels.
//!
//! The kernels run on each device's blocks exactly as on the whole tensors,
//! so an attribute that counts global positions (a slice's ends, a split's
//! sections) meets the wrong block when a rule leaves its dim sharded. Axes
//! are negative half the time. Backward is given non-partial outputs
//! (keeping a given partial is unsound by decision, see `known_unsound.rs`),
//! and `concat` / `stack` backward no descending co-sharding (pinned there
//! too). Default: 48 cases per property; `SPMD_CHECK_CASES=N` for more.

mod common;

use proptest::prelude::*;
use spmd_check::{EinsumCheck, RuleRef, Tensor, check_grad};
use spmd_core::SpmdRuleExt;
use spmd_core::{Attrs, DimsMapping, DistAttr, Einsum, Mesh, Sharding, Spec};

use common::einsum_check::{
    LABELS, Tallies, check_unary_einsum, compound, paddle_axis, plain, shape_with_ones,
};
use common::kernels::indexing::take;
use common::kernels::shape::{
    SliceAttrs, concat, expand_as, expand_as_grad, pad, pad_grad, padded, padded_reps, sections,
    slice_range, split, stack, strided_range, tile, tile_grad,
};
use common::kernels::{axis_index, drop_dim};
use common::nn::Counts;
use common::slot_check::{Slot, axis, check_op, free, probe};
use common::{CASES, CORE_CASES, Tally, build, run, shape, specs};
use common::{einsum_check, slot_check};

// ----------------------------------------------------------------- reshape

#[derive(Clone, Debug)]
struct CompoundCase {
    split: bool,
    bshd: [usize; 4],
    l: einsum_check::Layout,
}

impl CompoundCase {
    fn notation(&self) -> &'static str {
        if self.split {
            "bs(hd)->bshd"
        } else {
            "bshd->bs(hd)"
        }
    }
    fn merged(&self) -> Vec<usize> {
        let [b, s, h, d] = self.bshd;
        vec![b, s, h * d]
    }
}

fn compound_case() -> impl Strategy<Value = CompoundCase> {
    (
        any::<bool>(),
        [1usize..=3, 1usize..=3, 1usize..=4, 1usize..=3],
    )
        .prop_flat_map(|(split, bshd)| {
            let [b, s, h, d] = bshd;
            let (i, o) = (vec![b, s, h * d], bshd.to_vec());
            let (i, o) = if split { (i, o) } else { (o, i) };
            (Just((split, bshd)), einsum_check::layout(vec![i], vec![o]))
        })
        .prop_map(|((split, bshd), l)| CompoundCase { split, bshd, l })
}

/// Head split and merge as reshape rules over compound dims.
#[test]
fn reshape_compound_dims() {
    let (fw, bw, gr) = (Tally::new(), Tally::new(), Tally::new());
    run(CORE_CASES, compound_case(), |c| {
        let op = Einsum::new(c.notation()).unwrap();
        let rule = op.rule();
        let mesh = Mesh::new(&c.l.mesh).unwrap();
        let check = EinsumCheck::new(c.notation())
            .unwrap()
            .size('h', c.bshd[2])
            .size('d', c.bshd[3]);
        let input = if c.split { c.merged() } else { c.bshd.to_vec() };
        let shapes = vec![input];
        fw.record(check.forward(&RuleRef(&rule), &mesh, &specs(&shapes, &c.l.inputs)))?;
        // Splitting, forward cannot know h and d (see known_unsound.rs):
        // backward's answer comes back less sharded. Merging, it can.
        if !c.split {
            bw.record(check.backward(&RuleRef(&rule), &mesh, &[&shapes[0]], &c.l.outputs))?;
        }
        gr.record(check.grad(
            &RuleRef(&rule),
            &mesh,
            &specs(&shapes, &c.l.inputs),
            &c.l.outputs,
        ))?;
        Ok(())
    });
    fw.assert_meaningful("reshape forward");
    bw.assert_meaningful("reshape backward");
    gr.assert_meaningful("reshape grad");
}

// --------------------------------------------------------------- transpose

#[derive(Clone, Debug)]
struct TransposeCase {
    name: &'static str,
    shape: Vec<usize>,
    perm: Vec<i64>,
    l: einsum_check::Layout,
}

impl TransposeCase {
    /// `perm = [2, 0, 1]` on `abc`: `abc->cab`.
    fn notation(&self) -> String {
        let r = self.shape.len();
        let input = &LABELS[..r];
        let output: String = self
            .perm
            .iter()
            .map(|&p| input.as_bytes()[p.rem_euclid(r as i64) as usize] as char)
            .collect();
        format!("{input}->{output}")
    }
}

fn transpose_case() -> impl Strategy<Value = TransposeCase> {
    (
        prop::sample::select(vec!["transpose", "transpose2"]),
        shape_with_ones(1..=4),
    )
        .prop_flat_map(|(name, shape)| {
            let r = shape.len();
            let perm = Just((0..r).collect::<Vec<_>>()).prop_shuffle();
            let neg = prop::collection::vec(prop::bool::weighted(0.25), r);
            (Just((name, shape)), perm, neg)
        })
        .prop_flat_map(|((name, shape), perm, neg)| {
            let r = shape.len();
            let paddle: Vec<i64> = perm
                .iter()
                .zip(&neg)
                .map(|(&p, &n)| paddle_axis(p, r, n))
                .collect();
            let out: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
            (
                Just((name, shape.clone(), paddle)),
                einsum_check::layout(vec![shape], vec![out]),
            )
        })
        .prop_map(|((name, shape, perm), l)| TransposeCase {
            name,
            shape,
            perm,
            l,
        })
}

#[test]
fn transpose_forward_backward_grad() {
    static T: Tallies = Tallies::new();
    run(CASES, transpose_case(), |c| {
        let rule = build(c.name, &Attrs::new().with("perm", c.perm.clone()));
        let check = EinsumCheck::new(&c.notation()).unwrap();
        check_unary_einsum(&T, &*rule, Some(&*rule), &check, &c.shape, &c.l, true)
    });
    T.assert_meaningful("transpose", true);
}

// ------------------------------------------------------ squeeze, unsqueeze

#[derive(Clone, Debug)]
struct SqueezeCase {
    shape: Vec<usize>,
    /// Paddle's `axis` (empty: every size-1 dim).
    axis: Vec<i64>,
    l: einsum_check::Layout,
}

impl SqueezeCase {
    fn dropped(&self) -> Vec<bool> {
        let r = self.shape.len();
        let mut listed = vec![self.axis.is_empty(); r];
        for &a in &self.axis {
            listed[a.rem_euclid(r as i64) as usize] = true;
        }
        listed
            .iter()
            .zip(&self.shape)
            .map(|(&l, &s)| l && s == 1)
            .collect()
    }
    /// A dropped dim is `1` on the input and absent from the output.
    fn notation(&self) -> String {
        let (mut input, mut output) = (String::new(), String::new());
        for (c, drop) in LABELS.chars().zip(self.dropped()) {
            if drop {
                input.push('1');
            } else {
                input.push(c);
                output.push(c);
            }
        }
        format!("{input}->{output}")
    }
    fn out_shape(&self) -> Vec<usize> {
        self.shape
            .iter()
            .zip(self.dropped())
            .filter(|&(_, d)| !d)
            .map(|(&s, _)| s)
            .collect()
    }
}

fn squeeze_case() -> impl Strategy<Value = SqueezeCase> {
    shape_with_ones(1..=4)
        .prop_flat_map(|shape| {
            let r = shape.len();
            // In any order, negative or not, an entry sometimes repeated
            // (as itself or as its other sign): Paddle counts it once.
            let axis = prop::collection::vec((0..r, any::<bool>()), 0..=r + 1).prop_map(move |v| {
                v.iter()
                    .map(|&(a, n)| paddle_axis(a, r, n))
                    .collect::<Vec<i64>>()
            });
            (Just(shape), axis)
        })
        .prop_flat_map(|(shape, axis)| {
            let c = SqueezeCase {
                shape: shape.clone(),
                axis,
                l: einsum_check::Layout {
                    mesh: vec![],
                    inputs: vec![],
                    outputs: vec![],
                },
            };
            let out = c.out_shape();
            (Just(c), einsum_check::layout(vec![shape], vec![out]))
        })
        .prop_map(|(c, l)| SqueezeCase { l, ..c })
}

#[test]
fn squeeze_forward_backward_grad() {
    static T: Tallies = Tallies::new();
    run(CASES, squeeze_case(), |c| {
        let rule = build("squeeze", &Attrs::new().with("axis", c.axis.clone()));
        let check = EinsumCheck::new(&c.notation()).unwrap();
        check_unary_einsum(&T, &*rule, Some(&*rule), &check, &c.shape, &c.l, true)
    });
    T.assert_meaningful("squeeze", true);
}

#[derive(Clone, Debug)]
struct UnsqueezeCase {
    name: &'static str,
    shape: Vec<usize>,
    /// Paddle's `axis`: positions inserted in order, each counted in the
    /// tensor as it is at that point (negative from its end).
    axis: Vec<i64>,
    /// Whether the grad rule is built without attributes (Paddle's grad
    /// rule takes none: it reads the new dims off the shapes).
    grad_without_attrs: bool,
    l: einsum_check::Layout,
}

impl UnsqueezeCase {
    /// The output's labels: the input's, with `1` inserted.
    fn output(&self) -> Vec<char> {
        let mut out: Vec<char> = LABELS.chars().take(self.shape.len()).collect();
        for &a in &self.axis {
            let len = out.len() as i64;
            let at = if a < 0 { a + len + 1 } else { a };
            out.insert(at as usize, '1');
        }
        out
    }
    fn notation(&self) -> String {
        let input = &LABELS[..self.shape.len()];
        let output: String = self.output().into_iter().collect();
        format!("{input}->{output}")
    }
    fn out_shape(&self) -> Vec<usize> {
        self.output()
            .iter()
            .map(|&c| LABELS.find(c).map_or(1, |d| self.shape[d]))
            .collect()
    }
}

fn unsqueeze_case() -> impl Strategy<Value = UnsqueezeCase> {
    (
        prop::sample::select(vec!["unsqueeze", "unsqueeze2"]),
        // Rank 0 has no einsum term to write.
        shape_with_ones(1..=3),
        prop::collection::vec((0usize..8, any::<bool>()), 1..=2),
        prop::bool::weighted(0.5),
    )
        .prop_flat_map(|(name, shape, raw, no_attrs)| {
            let mut len = shape.len();
            let axis: Vec<i64> = raw
                .iter()
                .map(|&(p, neg)| {
                    let at = p % (len + 1);
                    len += 1;
                    if neg {
                        at as i64 - len as i64
                    } else {
                        at as i64
                    }
                })
                .collect();
            let c = UnsqueezeCase {
                name,
                shape: shape.clone(),
                axis,
                grad_without_attrs: no_attrs,
                l: einsum_check::Layout {
                    mesh: vec![],
                    inputs: vec![],
                    outputs: vec![],
                },
            };
            let out = c.out_shape();
            (Just(c), einsum_check::layout(vec![shape], vec![out]))
        })
        .prop_map(|(c, l)| UnsqueezeCase { l, ..c })
}

#[test]
fn unsqueeze_forward_backward_grad() {
    static T: Tallies = Tallies::new();
    run(CASES, unsqueeze_case(), |c| {
        let rule = build(c.name, &Attrs::new().with("axis", c.axis.clone()));
        let grad = if c.grad_without_attrs {
            build(c.name, &Attrs::new())
        } else {
            build(c.name, &Attrs::new().with("axis", c.axis.clone()))
        };
        let check = EinsumCheck::new(&c.notation()).unwrap();
        check_unary_einsum(&T, &*rule, Some(&*grad), &check, &c.shape, &c.l, true)
    });
    T.assert_meaningful("unsqueeze", true);
}

// --------------------------------------------------------- flatten, reshape

#[derive(Clone, Debug)]
struct FlattenCase {
    shape: Vec<usize>,
    start: i64,
    stop: i64,
    grad_without_attrs: bool,
    l: einsum_check::Layout,
}

impl FlattenCase {
    fn range(&self) -> (usize, usize) {
        let r = self.shape.len() as i64;
        (
            self.start.rem_euclid(r) as usize,
            self.stop.rem_euclid(r) as usize,
        )
    }
    /// `abcd->a(bc)d` for dims 1..=2 (size-1 dims are `1`, see [`compound`]).
    fn notation(&self) -> String {
        let (start, stop) = self.range();
        let input = plain(&LABELS[..self.shape.len()], &self.shape);
        let merged = compound(&LABELS[start..=stop], &self.shape[start..=stop]);
        format!("{input}->{}{merged}{}", &input[..start], &input[stop + 1..])
    }
    fn out_shape(&self) -> Vec<usize> {
        let (start, stop) = self.range();
        let mut out = self.shape[..start].to_vec();
        out.push(self.shape[start..=stop].iter().product());
        out.extend(&self.shape[stop + 1..]);
        out
    }
}

fn flatten_case() -> impl Strategy<Value = FlattenCase> {
    (
        shape_with_ones(1..=4),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_flat_map(|(shape, n1, n2, no_attrs)| {
            let r = shape.len();
            let range = (0..r).prop_flat_map(move |s| (Just(s), s..r));
            (Just((shape, n1, n2, no_attrs)), range)
        })
        .prop_flat_map(|((shape, n1, n2, no_attrs), (start, stop))| {
            let r = shape.len();
            let c = FlattenCase {
                shape: shape.clone(),
                start: paddle_axis(start, r, n1),
                stop: paddle_axis(stop, r, n2),
                grad_without_attrs: no_attrs,
                l: einsum_check::Layout {
                    mesh: vec![],
                    inputs: vec![],
                    outputs: vec![],
                },
            };
            let out = c.out_shape();
            (Just(c), einsum_check::layout(vec![shape], vec![out]))
        })
        .prop_map(|(c, l)| FlattenCase { l, ..c })
}

#[test]
fn flatten_forward_backward_grad() {
    static T: Tallies = Tallies::new();
    run(CASES, flatten_case(), |c| {
        let rule = build(
            "flatten",
            &Attrs::new()
                .with("start_axis", c.start)
                .with("stop_axis", c.stop),
        );
        let grad = if c.grad_without_attrs {
            build("flatten", &Attrs::new())
        } else {
            build(
                "flatten",
                &Attrs::new()
                    .with("start_axis", c.start)
                    .with("stop_axis", c.stop),
            )
        };
        let check = EinsumCheck::new(&c.notation()).unwrap();
        check_unary_einsum(&T, &*rule, Some(&*grad), &check, &c.shape, &c.l, true)
    });
    T.assert_meaningful("flatten", true);
}

/// `Compounds::Absorb` on purpose: flatten `[a, b, c]` over dims 0..=1 with
/// `a` and `b` both sharded (on different mesh dims), so the minor's mesh
/// dim moves onto the major exactly when the major's extent is divisible by
/// both, and backward from a co-sharded merged dim. The random layouts of
/// `flatten_forward_backward_grad` rarely shard both factors.
#[test]
fn flatten_absorbs_minor_factor_shardings() {
    static T: Tallies = Tallies::new();
    let extent = || prop::sample::select(vec![2usize, 3, 4, 6, 8]);
    let strategy = (
        extent(),
        extent(),
        prop::sample::select(vec![1usize, 2, 3]),
        prop::sample::select(vec![2usize, 3, 4]),
        prop::sample::select(vec![2usize, 3, 4]),
        any::<bool>(),
    );
    run(CASES, strategy, |(a, b, c, m0, m1, swap)| {
        let shape = vec![a, b, c];
        let (major, minor) = if swap { (1u8, 0u8) } else { (0, 1) };
        let given = DistAttr::new(DimsMapping::from_shardings(&[
            Sharding::on(major),
            Sharding::on(minor),
            Sharding::REPLICATED,
        ]));
        let merged = DistAttr::new(DimsMapping::from_shardings(&[
            Sharding::co(&[major, minor]).unwrap(),
            Sharding::REPLICATED,
        ]));
        let l = einsum_check::Layout {
            mesh: vec![m0, m1],
            inputs: vec![given],
            outputs: vec![merged],
        };
        let rule = build(
            "flatten",
            &Attrs::new()
                .with("start_axis", 0_i64)
                .with("stop_axis", 1_i64),
        );
        let notation = format!(
            "{}->{}{}",
            plain("abc", &shape),
            compound("ab", &shape[..2]),
            plain("c", &shape[2..])
        );
        let check = EinsumCheck::new(&notation)
            .unwrap()
            .size('a', a)
            .size('b', b);
        check_unary_einsum(&T, &*rule, Some(&*rule), &check, &shape, &l, true)
    });
    T.assert_meaningful("flatten absorbing", true);
}

#[derive(Clone, Debug)]
struct ReshapeCase {
    name: &'static str,
    /// The finest dims; each side merges at most one run `i..j` of them
    /// into one dim.
    atoms: Vec<usize>,
    /// The input's merged run: a split when only the input has one, a
    /// merge and split when both do (`(ab)c -> a(bc)`).
    in_run: Option<(usize, usize)>,
    out_run: Option<(usize, usize)>,
    /// Paddle's target `shape` (with `0` copies and a `-1`).
    target: Vec<i64>,
    l: einsum_check::Layout,
}

fn merged_shape(atoms: &[usize], run: Option<(usize, usize)>) -> Vec<usize> {
    let Some((i, j)) = run else {
        return atoms.to_vec();
    };
    let mut s = atoms[..i].to_vec();
    s.push(atoms[i..j].iter().product());
    s.extend(&atoms[j..]);
    s
}

fn merged_term(atoms: &[usize], run: Option<(usize, usize)>) -> String {
    let n = atoms.len();
    let Some((i, j)) = run else {
        return plain(&LABELS[..n], atoms);
    };
    format!(
        "{}{}{}",
        plain(&LABELS[..i], &atoms[..i]),
        compound(&LABELS[i..j], &atoms[i..j]),
        plain(&LABELS[j..n], &atoms[j..])
    )
}

impl ReshapeCase {
    fn shapes(&self) -> (Vec<usize>, Vec<usize>) {
        (
            merged_shape(&self.atoms, self.in_run),
            merged_shape(&self.atoms, self.out_run),
        )
    }
    fn notation(&self) -> String {
        format!(
            "{}->{}",
            merged_term(&self.atoms, self.in_run),
            merged_term(&self.atoms, self.out_run)
        )
    }
    fn check(&self) -> EinsumCheck {
        self.atoms
            .iter()
            .zip(LABELS.chars())
            .filter(|&(&e, _)| e != 1)
            .fold(EinsumCheck::new(&self.notation()).unwrap(), |c, (&e, l)| {
                c.size(l, e)
            })
    }
}

/// What a reshape case's two sides merge.
#[derive(Clone, Copy, Debug)]
enum RunKind {
    Split,
    Merge,
    /// `..(ab)c.. -> ..a(bc)..`: a run that merges and splits.
    MergeAndSplit,
}

fn reshape_case() -> impl Strategy<Value = ReshapeCase> {
    (
        prop::sample::select(vec!["reshape", "reshape2"]),
        prop::sample::select(vec![RunKind::Split, RunKind::Merge, RunKind::MergeAndSplit]),
    )
        .prop_flat_map(|(name, kind)| {
            let min = if matches!(kind, RunKind::MergeAndSplit) {
                3
            } else {
                2
            };
            (Just((name, kind)), shape_with_ones(min..=4))
        })
        .prop_flat_map(|((name, kind), atoms)| {
            let n = atoms.len();
            let runs = match kind {
                RunKind::MergeAndSplit => (0..n - 2)
                    .prop_map(|k| (Some((k, k + 2)), Some((k + 1, k + 3))))
                    .boxed(),
                RunKind::Split | RunKind::Merge => (0..n - 1)
                    .prop_flat_map(move |i| (Just(i), i + 2..=n))
                    .prop_map(move |run| match kind {
                        RunKind::Split => (Some(run), None),
                        _ => (None, Some(run)),
                    })
                    .boxed(),
            };
            // At most n output dims; picks past the output's rank are unused.
            (
                Just((name, atoms)),
                runs,
                prop::collection::vec(prop::bool::weighted(0.3), n),
                prop::option::weighted(0.3, 0..n),
            )
        })
        .prop_flat_map(|((name, atoms), (in_run, out_run), zeros, infer)| {
            let mut c = ReshapeCase {
                name,
                atoms,
                in_run,
                out_run,
                target: vec![],
                l: einsum_check::Layout {
                    mesh: vec![],
                    inputs: vec![],
                    outputs: vec![],
                },
            };
            let (input, output) = c.shapes();
            c.target = output
                .iter()
                .enumerate()
                .map(|(k, &e)| {
                    if infer == Some(k) {
                        -1
                    } else if zeros.get(k) == Some(&true) && input.get(k) == Some(&e) {
                        0
                    } else {
                        e as i64
                    }
                })
                .collect();
            (Just(c), einsum_check::layout(vec![input], vec![output]))
        })
        .prop_map(|(c, l)| ReshapeCase { l, ..c })
}

/// Some refusals are a rule bug, not a policy: a run of several dims that
/// holds a size-1 dim (`[2, 1, 2] -> [4]`) gets the invalid notation
/// `a11->(ab)` (spmd-ops/src/shape.rs:303, `reshape_notation`'s `term`
/// consumes a label on a size-1 dim; it should call `it.next()` only for
/// dims above 1). `flatten`'s grad without attributes reads the same
/// notation and is refused likewise. Refused, so not unsound.
#[test]
fn reshape_forward_backward_grad() {
    static T: Tallies = Tallies::new();
    run(CASES, reshape_case(), |c| {
        let rule = build(c.name, &Attrs::new().with("shape", c.target.clone()));
        let (input, _) = c.shapes();
        // Both directions, splits included: forward hands a split dim's
        // sharding to the major factor (known_unsound.rs,
        // `reshape_split_forward_learns_compound_extents_from_the_target_shape`),
        // and a run that merges and splits carries its first dims' sharding
        // in every direction.
        check_unary_einsum(&T, &*rule, Some(&*rule), &c.check(), &input, &c.l, true)
    });
    T.assert_meaningful("reshape", true);
}

// -------------------------------------------------------------- concat

#[derive(Clone, Debug)]
struct JoinCase {
    /// The inputs' shapes (concat: differing along the axis).
    shapes: Vec<Vec<usize>>,
    axis: (i64, usize),
    l: slot_check::Layout,
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
            (Just(shapes), Just(axis), slot_check::layout(ins, outs))
        })
        .prop_map(|(shapes, axis, l)| JoinCase { shapes, axis, l })
}

#[test]
fn concat_against_the_kernel() {
    static D: slot_check::Dirs = slot_check::Dirs::new();
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
            (
                Just(vec![base; n]),
                Just(axis),
                slot_check::layout(ins, outs),
            )
        })
        .prop_map(|(shapes, axis, l)| JoinCase { shapes, axis, l })
}

#[test]
fn stack_against_the_kernel() {
    static D: slot_check::Dirs = slot_check::Dirs::new();
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
    l: slot_check::Layout,
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
            let l = slot_check::layout(ins, pieces(&x, axis.1, &sizes));
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
    static D: slot_check::Dirs = slot_check::Dirs::new();
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
    static D: slot_check::Dirs = slot_check::Dirs::new();
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
            (Just((x, axis)), slot_check::layout(ins, outs))
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
    static D: slot_check::Dirs = slot_check::Dirs::new();
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
    l: slot_check::Layout,
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
            let cut: Vec<usize> = s.axes.iter().map(|&a| axis_index(a, r)).collect();
            let ins = vec![(x.clone(), free(&x, &cut))];
            // The output's dims, once dropped ones are gone, that are not
            // sliced.
            let kept: Vec<usize> = (0..r)
                .filter(|d| !s.decrease.iter().any(|&a| axis_index(a, r) == *d))
                .collect();
            let out_fixed: Vec<usize> = kept
                .iter()
                .enumerate()
                .filter(|(_, d)| cut.contains(d))
                .map(|(k, _)| k)
                .collect();
            let outs = vec![(out.clone(), free(&out, &out_fixed))];
            (Just((x, s)), slot_check::layout(ins, outs))
        })
        .prop_map(|((shape, s), l)| SliceCase { shape, s, l })
}

fn slice_property(name: &str, strided: bool) {
    let d = slot_check::Dirs::new();
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
    l: slot_check::Layout,
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
            (Just((x, reps)), slot_check::layout(ins, outs))
        })
        .prop_map(|((shape, reps), l)| TileCase { shape, reps, l })
}

#[test]
fn tile_against_the_kernel() {
    static D: slot_check::Dirs = slot_check::Dirs::new();
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
    l: slot_check::Layout,
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
            (Just((x, y)), slot_check::layout(ins, outs))
        })
        .prop_map(|((x, y), l)| ExpandCase { x, y, l })
}

#[test]
fn expand_as_against_the_kernel() {
    static D: slot_check::Dirs = slot_check::Dirs::new();
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
    l: slot_check::Layout,
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
            (Just((x, paddings)), slot_check::layout(ins, outs))
        })
        .prop_map(|((shape, paddings), l)| PadCase { shape, paddings, l })
}

#[test]
fn pad_against_the_kernel() {
    static D: slot_check::Dirs = slot_check::Dirs::new();
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
