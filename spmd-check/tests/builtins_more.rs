//! Property tests of the newer built-in rules of spmd-ops, built through the
//! registry with Paddle's attributes, on random shapes, meshes and mappings
//! (the style of `builtins.rs`):
//!
//! - `transpose` (`perm`): the einsum permutation, `abc->cab` for `[2, 0, 1]`;
//! - `squeeze` (`axis`) / `unsqueeze` (`axis`): einsums dropping or inserting
//!   `1` dims;
//! - `flatten` (`start_axis`, `stop_axis`) and `reshape` (`shape`): einsums
//!   with a compound dim (adjacent dims merged or split);
//! - `all`, `any`, `amax`, `amin` (`axis`, `keep_dim`): reductions with
//!   their reduce types; `amax` / `amin` grads against the `max` kernel;
//! - `where`: against the op itself (`c != 0 ? x : y` with numpy
//!   broadcasting), its grad against its kernel;
//! - `cumsum` (`axis`, `exclusive`, `reverse`, `flatten`): against the scan
//!   itself, its grad against the reverse scan.
//!
//! Default: 48 cases per property; `SPMD_CHECK_CASES=N` for more.

mod common;

use std::sync::OnceLock;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use spmd_check::{
    EinsumCheck, Input, Tensor, Values, check_backward, check_forward, check_grad, einsum,
};
use spmd_core::{
    Attrs, DimsMapping, DistAttr, Mesh, ReduceType, Registry, Sharding, Spec, SpmdRule,
};

use common::{Tally, attr, mesh_shape, run};

const CASES: u32 = 48;
const LABELS: &str = "abcdefgh";

fn registry() -> &'static Registry {
    static R: OnceLock<Registry> = OnceLock::new();
    R.get_or_init(spmd_ops::builtins)
}

fn build(name: &str, attrs: &Attrs) -> Box<dyn SpmdRule> {
    registry().build(name, attrs).unwrap()
}

fn specs<'a>(shapes: &'a [Vec<usize>], attrs: &'a [DistAttr]) -> Vec<Spec<'a>> {
    shapes
        .iter()
        .zip(attrs)
        .map(|(s, a)| Spec::new(s, a))
        .collect()
}

/// A mesh, and attrs for the inputs (maybe `Sum` partial) and the outputs.
#[derive(Clone, Debug)]
struct Layout {
    mesh: Vec<usize>,
    inputs: Vec<DistAttr>,
    outputs: Vec<DistAttr>,
}

fn layout(
    in_shapes: Vec<Vec<usize>>,
    out_shapes: Vec<Vec<usize>>,
) -> impl Strategy<Value = Layout> {
    mesh_shape().prop_flat_map(move |mesh| {
        let m = mesh.len();
        let of = |shapes: &[Vec<usize>], partial: bool| -> Vec<BoxedStrategy<DistAttr>> {
            shapes
                .iter()
                .map(|s| attr(s.len(), m, partial, ReduceType::Sum).boxed())
                .collect()
        };
        (Just(mesh), of(&in_shapes, true), of(&out_shapes, false)).prop_map(
            |(mesh, inputs, outputs)| Layout {
                mesh,
                inputs,
                outputs,
            },
        )
    })
}

/// Forward, backward and grad tallies of one op family.
struct Tallies {
    fw: Tally,
    bw: Tally,
    gr: Tally,
}

impl Tallies {
    const fn new() -> Tallies {
        Tallies {
            fw: Tally::new(),
            bw: Tally::new(),
            gr: Tally::new(),
        }
    }
    fn assert_meaningful(&self, what: &str, grad: bool) {
        self.fw.assert_meaningful(&format!("{what} forward"));
        self.bw.assert_meaningful(&format!("{what} backward"));
        if grad {
            self.gr.assert_meaningful(&format!("{what} grad"));
        }
    }
}

/// A one-input op whose mathematics is the einsum `check`: forward from the
/// input attrs, backward from the output attrs, and (when `grad_rule` is
/// given, the op's grad rule) the `Sum` einsum's gradient.
fn check_unary_einsum(
    t: &Tallies,
    rule: &dyn SpmdRule,
    grad_rule: Option<&dyn SpmdRule>,
    check: &EinsumCheck,
    shape: &[usize],
    l: &Layout,
    backward: bool,
) -> Result<(), TestCaseError> {
    let mesh = Mesh::new(&l.mesh).unwrap();
    let shapes = vec![shape.to_vec()];
    t.fw.record(check.forward(rule, &mesh, &specs(&shapes, &l.inputs)))?;
    if backward {
        t.bw.record(check.backward(rule, &mesh, &[shape], &l.outputs))?;
    }
    if let Some(g) = grad_rule {
        t.gr.record(check.grad(g, &mesh, &specs(&shapes, &l.inputs), &l.outputs))?;
    }
    Ok(())
}

/// A shape of rank `ranks` with extents 1–4, size 1 more often than uniform.
fn shape(ranks: std::ops::RangeInclusive<usize>) -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(prop::sample::select(vec![1usize, 1, 2, 3, 4]), ranks)
}

/// `axis` as Paddle may write it: sometimes counted from the end.
fn paddle_axis(a: usize, rank: usize, negative: bool) -> i64 {
    if negative {
        a as i64 - rank as i64
    } else {
        a as i64
    }
}

/// The term of dims `dims` (with these extents) merged into one: the
/// compound of their labels, size-1 dims left out (the checker reads an
/// empty block of a compound whose factor has extent 1 as a box of another
/// shape, so size-1 factors stay out); one left is plain, none is `1`.
fn compound(labels: &str, extents: &[usize]) -> String {
    let kept: String = labels
        .chars()
        .zip(extents)
        .filter(|&(_, &e)| e != 1)
        .map(|(c, _)| c)
        .collect();
    match kept.len() {
        0 => "1".into(),
        1 => kept,
        _ => format!("({kept})"),
    }
}

/// A plain term: one label per dim, `1` where the dim has size 1.
fn plain(labels: &str, extents: &[usize]) -> String {
    labels
        .chars()
        .zip(extents)
        .map(|(c, &e)| if e == 1 { '1' } else { c })
        .collect()
}

// --------------------------------------------------------------- transpose

#[derive(Clone, Debug)]
struct TransposeCase {
    name: &'static str,
    shape: Vec<usize>,
    perm: Vec<i64>,
    l: Layout,
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
        shape(1..=4),
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
                layout(vec![shape], vec![out]),
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
    l: Layout,
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
    shape(1..=4)
        .prop_flat_map(|shape| {
            let r = shape.len();
            let axis = prop::collection::vec((0..r, any::<bool>()), 0..=r).prop_map(move |v| {
                let mut axis: Vec<i64> = v.iter().map(|&(a, n)| paddle_axis(a, r, n)).collect();
                axis.sort_by_key(|a| a.rem_euclid(r as i64));
                axis.dedup_by_key(|a| a.rem_euclid(r as i64));
                axis
            });
            (Just(shape), axis)
        })
        .prop_flat_map(|(shape, axis)| {
            let c = SqueezeCase {
                shape: shape.clone(),
                axis,
                l: Layout {
                    mesh: vec![],
                    inputs: vec![],
                    outputs: vec![],
                },
            };
            let out = c.out_shape();
            (Just(c), layout(vec![shape], vec![out]))
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
    l: Layout,
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
        shape(1..=3),
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
                l: Layout {
                    mesh: vec![],
                    inputs: vec![],
                    outputs: vec![],
                },
            };
            let out = c.out_shape();
            (Just(c), layout(vec![shape], vec![out]))
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
    l: Layout,
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
    (shape(1..=4), any::<bool>(), any::<bool>(), any::<bool>())
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
                l: Layout {
                    mesh: vec![],
                    inputs: vec![],
                    outputs: vec![],
                },
            };
            let out = c.out_shape();
            (Just(c), layout(vec![shape], vec![out]))
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
        let l = Layout {
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
    l: Layout,
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
            (Just((name, kind)), shape(min..=4))
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
                l: Layout {
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
            (Just(c), layout(vec![input], vec![output]))
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

// -------------------------------------------------------------- reductions

#[derive(Clone, Debug)]
struct ReduceCase {
    op: &'static str,
    shape: Vec<usize>,
    /// Paddle's `axis` (negative counts from the end; empty = all).
    axis: Vec<i64>,
    keep_dim: bool,
    l: Layout,
}

impl ReduceCase {
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

fn reduce_case() -> impl Strategy<Value = ReduceCase> {
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
            let c = ReduceCase {
                op,
                shape: shape.clone(),
                axis,
                keep_dim,
                l: Layout {
                    mesh: vec![],
                    inputs: vec![],
                    outputs: vec![],
                },
            };
            let out = c.out_shape();
            (Just(c), layout(vec![shape], vec![out]))
        })
        .prop_map(|(c, l)| ReduceCase { l, ..c })
}

#[test]
fn all_any_amax_amin_forward_and_backward() {
    static T: Tallies = Tallies::new();
    run(CASES * 2, reduce_case(), |c| {
        let check = EinsumCheck::new(&c.notation()).unwrap().reduce(c.reduce());
        check_unary_einsum(&T, &*c.rule(), None, &check, &c.shape, &c.l, true)
    });
    T.assert_meaningful("all/any/amax/amin", false);
}

/// `amax` / `amin` grads against the `max` kernel `dy·[x = out]` (probe
/// values are distinct, so there are no ties to share the grad). The kernel
/// reads `x`, so `x` is given laid out like its grad, as `builtins.rs` does.
#[test]
fn amax_amin_grads() {
    let tally = Tally::new();
    run(CASES, reduce_case(), |c| {
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

// ------------------------------------------------------------------- where

/// The numpy broadcast of shapes (right-aligned, size 1 stretches).
fn broadcast(shapes: &[&[usize]]) -> Vec<usize> {
    let w = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    (0..w)
        .map(|d| {
            shapes
                .iter()
                .filter_map(|s| (d + s.len()).checked_sub(w).map(|k| s[k]))
                .fold(1, |a, e| {
                    assert!(a == 1 || e == 1 || a == e, "cannot broadcast {shapes:?}");
                    if a == 1 { e } else { a }
                })
        })
        .collect()
}

/// The element of `t` that output index `i` (of a broadcast) reads.
fn at(t: &Tensor, i: &[usize]) -> f64 {
    let off = i.len() - t.rank();
    let j: Vec<usize> = t
        .shape()
        .iter()
        .enumerate()
        .map(|(d, &e)| if e == 1 { 0 } else { i[off + d] })
        .collect();
    t.get(&j)
}

/// `where(c, x, y)`, densely and on every device's blocks.
fn select(t: &[Tensor]) -> Vec<Tensor> {
    let shape = broadcast(&[t[0].shape(), t[1].shape(), t[2].shape()]);
    vec![Tensor::from_fn(&shape, |i| {
        if at(&t[0], i) != 0.0 {
            at(&t[1], i)
        } else {
            at(&t[2], i)
        }
    })]
}

/// `g` (of the broadcast shape) summed onto `shape` over the dims it was
/// broadcast along.
fn unbroadcast(g: &Tensor, shape: &[usize]) -> Tensor {
    let mut out = Tensor::full(shape, 0.0);
    let off = g.rank() - shape.len();
    let mut j = vec![0; shape.len()];
    for flat in 0..g.len() {
        let mut rest = flat;
        let mut i = vec![0; g.rank()];
        for d in (0..g.rank()).rev() {
            i[d] = rest % g.shape()[d];
            rest /= g.shape()[d];
        }
        for (d, jd) in j.iter_mut().enumerate() {
            *jd = if shape[d] == 1 { 0 } else { i[off + d] };
        }
        let v = out.get(&j) + g.get(&i);
        out.set(&j, v);
    }
    out
}

/// `where`'s grad kernel: `dx = Σ [c] dy`, `dy_y = Σ [!c] dy`, each summed
/// over the dims its input was broadcast along.
fn select_grad(t: &[Tensor], dy: &Tensor) -> Vec<Tensor> {
    let pick = |on: bool| {
        Tensor::from_fn(dy.shape(), |i| {
            if (at(&t[0], i) != 0.0) == on {
                dy.get(i)
            } else {
                0.0
            }
        })
    };
    vec![
        unbroadcast(&pick(true), t[1].shape()),
        unbroadcast(&pick(false), t[2].shape()),
    ]
}

#[derive(Clone, Debug)]
struct WhereCase {
    shapes: Vec<Vec<usize>>,
    out: Vec<usize>,
    l: Layout,
}

/// Three shapes broadcast against each other: a full shape, and for each
/// operand how many leading dims it drops and which of its dims are size 1.
fn where_case() -> impl Strategy<Value = WhereCase> {
    prop::collection::vec(1usize..=4, 0..=3)
        .prop_flat_map(|full| {
            let n = full.len();
            let one = move |full: Vec<usize>| {
                (0..=n, prop::collection::vec(prop::bool::weighted(0.25), n)).prop_map(
                    move |(drop, ones)| {
                        full[drop..]
                            .iter()
                            .zip(&ones[drop..])
                            .map(|(&e, &o)| if o { 1 } else { e })
                            .collect::<Vec<usize>>()
                    },
                )
            };
            (one(full.clone()), one(full.clone()), one(full))
        })
        .prop_flat_map(|(c, x, y)| {
            let out = broadcast(&[&c, &x, &y]);
            let shapes = vec![c, x, y];
            (
                Just((shapes.clone(), out.clone())),
                layout(shapes, vec![out]),
            )
        })
        .prop_map(|((shapes, out), l)| WhereCase { shapes, out, l })
}

#[test]
fn where_against_the_op() {
    static T: Tallies = Tallies::new();
    run(CASES, where_case(), |c| {
        let rule = build("where", &Attrs::new());
        let mesh = Mesh::new(&c.l.mesh).unwrap();
        let values = [
            Tensor::probe(
                &c.shapes[0],
                1,
                Values::Bits {
                    ones_per_mille: 500,
                },
            ),
            Tensor::probe(&c.shapes[1], 2, Values::Integers),
            Tensor::probe(&c.shapes[2], 3, Values::Integers),
        ];
        let inputs: Vec<Input> = values
            .iter()
            .zip(&c.l.inputs)
            .map(|(v, a)| Input::new(v.clone(), a.clone()))
            .collect();
        T.fw.record(check_forward(&*rule, &mesh, &inputs, select))?;
        T.bw.record(check_backward(&*rule, &mesh, &values, &c.l.outputs, select))?;
        let grad = |x: &[Tensor], _: &[Tensor], dy: &[Tensor]| select_grad(x, &dy[0]);
        T.gr.record(check_grad(
            &*rule,
            &mesh,
            &inputs,
            &c.l.outputs,
            select,
            grad,
        ))?;
        let _ = &c.out;
        Ok(())
    });
    T.assert_meaningful("where", true);
}

// ------------------------------------------------------------------ cumsum

#[derive(Clone, Debug)]
struct CumsumCase {
    shape: Vec<usize>,
    axis: i64,
    flatten: bool,
    exclusive: bool,
    reverse: bool,
    l: Layout,
}

/// The scan of `t` along `axis` (or of `t` flattened), maybe exclusive, maybe
/// from the end.
fn scan(t: &Tensor, axis: usize, flatten: bool, exclusive: bool, reverse: bool) -> Tensor {
    let t = if flatten {
        Tensor::new(&[t.len()], t.data().to_vec())
    } else {
        t.clone()
    };
    let axis = if flatten { 0 } else { axis };
    let n = t.shape()[axis];
    Tensor::from_fn(t.shape(), |i| {
        let k = i[axis];
        let range: Vec<usize> = match (reverse, exclusive) {
            (false, false) => (0..=k).collect(),
            (false, true) => (0..k).collect(),
            (true, false) => (k..n).collect(),
            (true, true) => (k + 1..n).collect(),
        };
        let mut j = i.to_vec();
        range
            .into_iter()
            .map(|m| {
                j[axis] = m;
                t.get(&j)
            })
            .sum()
    })
}

impl CumsumCase {
    fn axis(&self) -> usize {
        self.axis.rem_euclid(self.shape.len() as i64) as usize
    }
    fn out_shape(&self) -> Vec<usize> {
        if self.flatten {
            vec![self.shape.iter().product()]
        } else {
            self.shape.clone()
        }
    }
    fn rule(&self) -> Box<dyn SpmdRule> {
        build(
            "cumsum",
            &Attrs::new()
                .with("axis", self.axis)
                .with("flatten", self.flatten)
                .with("exclusive", self.exclusive)
                .with("reverse", self.reverse),
        )
    }
}

fn cumsum_case() -> impl Strategy<Value = CumsumCase> {
    (
        prop::collection::vec(1usize..=4, 1..=3),
        prop::bool::weighted(0.2),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_flat_map(|(shape, flatten, exclusive, reverse)| {
            let r = shape.len() as i64;
            (Just((shape, flatten, exclusive, reverse)), -r..r)
        })
        .prop_flat_map(|((shape, flatten, exclusive, reverse), axis)| {
            let c = CumsumCase {
                shape: shape.clone(),
                axis,
                flatten,
                exclusive,
                reverse,
                l: Layout {
                    mesh: vec![],
                    inputs: vec![],
                    outputs: vec![],
                },
            };
            let out = c.out_shape();
            (Just(c), layout(vec![shape], vec![out]))
        })
        .prop_map(|(c, l)| CumsumCase { l, ..c })
}

/// `cumsum` against the scan itself; its grad against the reverse scan of
/// the output grad (reshaped back to `x` with `flatten`).
#[test]
fn cumsum_against_the_op() {
    static T: Tallies = Tallies::new();
    run(CASES, cumsum_case(), |c| {
        let rule = c.rule();
        let mesh = Mesh::new(&c.l.mesh).unwrap();
        let (axis, fl, ex, rev) = (c.axis(), c.flatten, c.exclusive, c.reverse);
        let op = |t: &[Tensor]| vec![scan(&t[0], axis, fl, ex, rev)];
        let x = Tensor::probe(&c.shape, 7, Values::Integers);
        let input = [Input::new(x.clone(), c.l.inputs[0].clone())];
        T.fw.record(check_forward(&*rule, &mesh, &input, op))?;
        T.bw.record(check_backward(
            &*rule,
            &mesh,
            std::slice::from_ref(&x),
            &c.l.outputs,
            op,
        ))?;
        // The kernel reads `x` for its (global) shape only.
        let grad = |_: &[Tensor], _: &[Tensor], dy: &[Tensor]| {
            let g = scan(&dy[0], if fl { 0 } else { axis }, false, ex, !rev);
            if fl {
                vec![Tensor::new(&c.shape, g.data().to_vec())]
            } else {
                vec![g]
            }
        };
        T.gr.record(check_grad(&*rule, &mesh, &input, &c.l.outputs, op, grad))?;
        Ok(())
    });
    T.assert_meaningful("cumsum", true);
}
