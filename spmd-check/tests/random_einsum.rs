//! Property tests: random einsum notations (1–3 operands, rank ≤ 3 plus `...`,
//! `1` dims, compound dims, diagonals, one or two outputs), random shapes
//! (uneven extents, size-1 broadcast dims), meshes and mappings; every rule
//! answer, forward, backward and grad, is run on the simulated mesh.
//!
//! `SPMD_CHECK_CASES=2000 cargo test -p spmd-check --release` runs longer.

mod common;

use proptest::prelude::*;
use spmd_check::{EinsumCheck, Report, RuleRef};
use spmd_core::SpmdRuleExt;
use spmd_core::notation::parse;
use spmd_core::{
    BackwardPartial, Conflicts, DistAttr, Divisibility, EinsumRule, Mesh, Policy, ReduceType, Spec,
};

use common::{Tally, attr, mesh_shape, run};

const LABELS: &[u8] = b"abcde";

#[derive(Clone, Debug, PartialEq)]
enum D {
    L(usize),
    One,
    C(Vec<usize>),
}

#[derive(Clone, Debug)]
struct TermSpec {
    dims: Vec<D>,
    /// `...` before `dims[ell]`.
    ell: Option<usize>,
}

impl TermSpec {
    fn text(&self) -> String {
        let mut s = String::new();
        for (i, d) in self.dims.iter().enumerate() {
            if self.ell == Some(i) {
                s.push_str("...");
            }
            match d {
                D::L(l) => s.push(LABELS[*l] as char),
                D::One => s.push('1'),
                D::C(ls) => {
                    s.push('(');
                    ls.iter().for_each(|&l| s.push(LABELS[l] as char));
                    s.push(')');
                }
            }
        }
        if self.ell == Some(self.dims.len()) {
            s.push_str("...");
        }
        s
    }
    fn labels(&self) -> Vec<usize> {
        let mut out = Vec::new();
        for d in &self.dims {
            match d {
                D::L(l) => out.push(*l),
                D::C(ls) => out.extend(ls),
                D::One => {}
            }
        }
        out
    }
}

fn dim() -> impl Strategy<Value = D> {
    let l = 0..LABELS.len();
    prop_oneof![
        10 => l.clone().prop_map(D::L),
        1 => Just(D::One),
        2 => (l.clone(), l).prop_filter_map("distinct", |(a, b)| (a != b).then(|| D::C(vec![a, b]))),
    ]
}

fn term() -> impl Strategy<Value = TermSpec> {
    prop::collection::vec(dim(), 0..=3).prop_flat_map(|dims| {
        let n = dims.len();
        (Just(dims), prop::option::weighted(0.3, 0..=n))
            .prop_map(|(dims, ell)| TermSpec { dims, ell })
    })
}

/// An output over some of the inputs' labels.
fn output(labels: Vec<usize>, any_ellipsis: bool) -> impl Strategy<Value = TermSpec> {
    let n = labels.len();
    (
        Just(labels).prop_shuffle(),
        0..=n,
        prop::bool::weighted(0.2),
        prop::bool::weighted(0.1),
        prop::bool::weighted(if any_ellipsis { 0.7 } else { 0.0 }),
    )
        .prop_flat_map(|(labels, keep, compound, one, ell)| {
            let mut dims: Vec<D> = Vec::new();
            let kept = &labels[..keep];
            if compound && kept.len() >= 2 {
                dims.push(D::C(vec![kept[0], kept[1]]));
                dims.extend(kept[2..].iter().map(|&l| D::L(l)));
            } else {
                dims.extend(kept.iter().map(|&l| D::L(l)));
            }
            if one {
                dims.push(D::One);
            }
            let n = dims.len();
            (
                Just(dims),
                if ell {
                    (0..=n).prop_map(Some).boxed()
                } else {
                    Just(None).boxed()
                },
            )
                .prop_map(|(dims, ell)| TermSpec { dims, ell })
        })
}

#[derive(Clone, Debug)]
struct Case {
    text: String,
    /// Extent per label (index into `LABELS`).
    extent: Vec<usize>,
    shapes: Vec<Vec<usize>>,
    mesh: Vec<usize>,
    attrs: Vec<DistAttr>,
    /// For backward and grad: one attr per output.
    out_attrs: Vec<DistAttr>,
}

impl Case {
    fn sizes(&self) -> Vec<(char, usize)> {
        let n = parse(&self.text).unwrap();
        n.plan()
            .labels
            .iter()
            .map(|&l| {
                (
                    l as char,
                    self.extent[LABELS.iter().position(|&x| x == l).unwrap()],
                )
            })
            .collect()
    }
}

fn shape_of(t: &TermSpec, extent: &[usize], ell: &[usize]) -> Vec<usize> {
    let mut shape = Vec::new();
    for (i, d) in t.dims.iter().enumerate() {
        if t.ell == Some(i) {
            shape.extend(ell);
        }
        shape.push(match d {
            D::L(l) => extent[*l],
            D::One => 1,
            D::C(ls) => ls.iter().map(|&l| extent[l]).product(),
        });
    }
    if t.ell == Some(t.dims.len()) {
        shape.extend(ell);
    }
    shape
}

/// An addend for a one-output notation: some of the output's dims, in
/// order, with its ellipsis (`keep` picks the dims).
fn addend_of(out: &TermSpec, keep: u8) -> TermSpec {
    let dims: Vec<D> = (out.dims.iter().enumerate())
        .filter(|(i, _)| keep & (1 << i) != 0)
        .map(|(_, d)| d.clone())
        .collect();
    let ell = out.ell.map(|e| {
        (0..e.min(out.dims.len()))
            .filter(|&i| keep & (1 << i) != 0)
            .count()
    });
    TermSpec { dims, ell }
}

/// Random valid notations with consistent shapes, a mesh and attrs; the
/// outputs' attrs are drawn for the outputs' ranks. A notation with one
/// output gets, about one time in three, an addend (`+...`) as its last
/// operand.
fn case(partial_inputs: bool, partial_outputs: bool) -> impl Strategy<Value = Case> {
    prop::collection::vec(term(), 1..=3)
        .prop_flat_map(|inputs| {
            let mut labels: Vec<usize> = inputs.iter().flat_map(TermSpec::labels).collect();
            labels.sort();
            labels.dedup();
            let any_ell = inputs.iter().any(|t| t.ell.is_some());
            (
                Just(inputs),
                prop::collection::vec(output(labels, any_ell), 1..=2),
                prop::option::weighted(0.35, any::<u8>()),
            )
        })
        .prop_filter_map("a valid notation", |(mut inputs, outputs, addend)| {
            let side =
                |ts: &[TermSpec]| ts.iter().map(TermSpec::text).collect::<Vec<_>>().join(",");
            let mut ops = side(&inputs);
            if let (Some(keep), [out]) = (addend, outputs.as_slice()) {
                let a = addend_of(out, keep);
                ops = format!("{ops},+{}", a.text());
                inputs.push(a);
            }
            let text = format!("{ops}->{}", side(&outputs));
            parse(&text).ok().map(|_| (text, inputs, outputs))
        })
        .prop_flat_map(|(text, inputs, outputs)| {
            let n_in = inputs.len();
            (
                Just((text, inputs, outputs)),
                prop::collection::vec(1usize..=4, LABELS.len()),
                prop::collection::vec(1usize..=3, 0..=2),
                // Per input: how many leading ellipsis dims it drops, and
                // which of its ellipsis dims are size-1 broadcasts.
                prop::collection::vec(
                    (
                        0usize..=2,
                        prop::collection::vec(prop::bool::weighted(0.2), 2),
                    ),
                    n_in,
                ),
                mesh_shape(),
            )
        })
        .prop_flat_map(
            move |((text, inputs, outputs), extent, width_ext, ell, mesh)| {
                let width = width_ext.len();
                // The ellipsis stands for as many dims as the longest input's.
                let actual = inputs
                    .iter()
                    .zip(&ell)
                    .filter(|(t, _)| t.ell.is_some())
                    .map(|(_, (drop, _))| width - (*drop).min(width))
                    .max()
                    .unwrap_or(0);
                let mut shapes = Vec::new();
                let addend = parse(&text).unwrap().plan().addends;
                for (i, (t, (drop, bcast))) in inputs.iter().zip(&ell).enumerate() {
                    // An addend's `...` is the output's, whole.
                    let (drop, bcast) = if addend & (1 << i) != 0 {
                        (width - actual, vec![false; 2])
                    } else {
                        (*drop, bcast.clone())
                    };
                    let skip = drop.min(width);
                    let dims: Vec<usize> = width_ext[skip..]
                        .iter()
                        .zip(&bcast)
                        .map(|(&e, &b)| if b { 1 } else { e })
                        .collect();
                    shapes.push(shape_of(
                        t,
                        &extent,
                        if t.ell.is_some() { &dims } else { &[] },
                    ));
                }
                let out_ranks: Vec<usize> = outputs
                    .iter()
                    .map(|t| t.dims.len() + if t.ell.is_some() { actual } else { 0 })
                    .collect();
                let m = mesh.len();
                let in_attrs: Vec<_> = shapes
                    .iter()
                    .map(|s| attr(s.len(), m, partial_inputs, ReduceType::Sum).boxed())
                    .collect();
                let out_attrs: Vec<_> = out_ranks
                    .iter()
                    .map(|&r| attr(r, m, partial_outputs, ReduceType::Sum).boxed())
                    .collect();
                (Just((text, extent, shapes, mesh)), in_attrs, out_attrs).prop_map(
                    |((text, extent, shapes, mesh), attrs, out_attrs)| Case {
                        text,
                        extent,
                        shapes,
                        mesh,
                        attrs,
                        out_attrs,
                    },
                )
            },
        )
}

fn reduce_type(with_avg: bool) -> impl Strategy<Value = ReduceType> {
    let mut types = vec![
        ReduceType::Sum,
        ReduceType::Max,
        ReduceType::Min,
        ReduceType::Prod,
        ReduceType::Any,
        ReduceType::All,
    ];
    if with_avg {
        types.push(ReduceType::Avg);
    }
    prop::sample::select(types)
}

fn policy(divisibility: Vec<Divisibility>) -> impl Strategy<Value = Policy> {
    (
        prop::sample::select(vec![Conflicts::FirstWins, Conflicts::Strict]),
        prop::sample::select(divisibility),
        prop::sample::select(vec![BackwardPartial::Explain, BackwardPartial::Reset]),
    )
        .prop_map(|(c, d, b)| {
            Policy::CLASSIC
                .with_conflicts(c)
                .with_divisibility(d)
                .with_backward_partial(b)
        })
}

/// Whether some compound input dim has two factors that no input carries as
/// a plain dim (forward inference cannot learn their extents).
fn forward_lacks_extents(plan: &spmd_core::Plan<'_>) -> bool {
    use spmd_core::notation::Dim;
    let mut plain = spmd_core::AxisSet::EMPTY;
    for i in 0..plan.n_inputs() {
        for d in plan.dims_of(plan.input(i)) {
            if let Dim::Axis(a) = *d {
                plain = plain.with(a);
            }
        }
    }
    (0..plan.n_inputs()).any(|i| {
        plan.dims_of(plan.input(i)).iter().any(|d| match *d {
            Dim::Compound { start, len } => {
                plan.compound(start, len)
                    .iter()
                    .filter(|&&a| !plain.contains(a))
                    .count()
                    >= 2
            }
            _ => false,
        })
    })
}

fn rule_of<'a>(
    n: &'a spmd_core::notation::Notation,
    policy: Policy,
    reduce: ReduceType,
) -> EinsumRule<'a> {
    // An addend commutes with no Prod/Any/All reduction (the engine refuses
    // such an output; `addends` tests that): draw those as Sum.
    let reduce = match reduce {
        ReduceType::Prod | ReduceType::Any | ReduceType::All if n.plan().has_addends() => {
            ReduceType::Sum
        }
        r => r,
    };
    EinsumRule::new("random_einsum", n.plan())
        .with_policy(policy)
        .with_reduce(reduce)
}

/// Cases without and with an addend are counted apart, so that each kind is
/// shown to be judged (`assert_both`).
fn tally_of<'t>(tallies: &'t [Tally; 2], case: &Case) -> &'t Tally {
    &tallies[usize::from(parse(&case.text).unwrap().plan().has_addends())]
}

fn assert_both(tallies: &[Tally; 2], what: &str) {
    tallies[0].assert_meaningful(what);
    tallies[1].assert_meaningful(&format!("{what} with an addend"));
}

fn check_of(rule: &EinsumRule<'_>, case: &Case) -> EinsumCheck {
    case.sizes()
        .into_iter()
        .fold(EinsumCheck::for_rule(rule).unwrap(), |c, (l, e)| {
            c.size(l, e)
        })
}

#[test]
fn forward_is_sound() {
    let tallies = [Tally::new(), Tally::new()];
    run(
        200,
        (
            case(true, false),
            policy(vec![Divisibility::Uneven, Divisibility::Drop]),
            reduce_type(true),
        ),
        |(case, policy, reduce)| {
            // Avg partials are right only for even splits (known_unsound.rs),
            // which the Drop policy guarantees.
            if reduce == ReduceType::Avg && policy.divisibility != Divisibility::Drop {
                return Ok(());
            }
            let n = parse(&case.text).unwrap();
            let rule = rule_of(&n, policy, reduce);
            let mesh = Mesh::new(&case.mesh).unwrap();
            let specs: Vec<Spec<'_>> = case
                .shapes
                .iter()
                .zip(&case.attrs)
                .map(|(s, a)| Spec::new(s, a))
                .collect();
            tally_of(&tallies, &case).record(check_of(&rule, &case).forward(
                &RuleRef(&rule),
                &mesh,
                &specs,
            ))
        },
    );
    assert_both(&tallies, "forward");
}

/// Backward with partial outputs among the given ones (Partial Stage-II),
/// multi-output and compound notations included; the answer must be sound
/// and a fixed point of forward (`check_backward` asks both).
#[test]
fn backward_is_sound() {
    let tallies = [Tally::new(), Tally::new()];
    run(
        300,
        (
            case(false, true),
            policy(vec![Divisibility::Uneven, Divisibility::Drop]),
            reduce_type(false),
        ),
        |(case, policy, reduce)| {
            let n = parse(&case.text).unwrap();
            // Forward cannot learn the extents of two factors of a compound
            // input dim that no input carries plainly, so it drops a
            // sharding that backward (which sees the output shapes) keeps:
            // counted, not judged (`known_unsound.rs` pins the gap).
            if forward_lacks_extents(&n.plan()) {
                return tally_of(&tallies, &case).skip();
            }
            let rule = rule_of(&n, policy, reduce);
            let mesh = Mesh::new(&case.mesh).unwrap();
            let shapes: Vec<&[usize]> = case.shapes.iter().map(Vec::as_slice).collect();
            tally_of(&tallies, &case).record(check_of(&rule, &case).backward(
                &RuleRef(&rule),
                &mesh,
                &shapes,
                &case.out_attrs,
            ))
        },
    );
    assert_both(&tallies, "backward");
}

#[test]
fn grad_is_sound() {
    let tallies = [Tally::new(), Tally::new()];
    run(
        200,
        (
            case(false, true),
            policy(vec![Divisibility::Uneven, Divisibility::Drop]),
            any::<u8>(),
        ),
        |(case, policy, no_grad_bits)| {
            let n = parse(&case.text).unwrap();
            let n_in = case.shapes.len();
            // Some inputs have no gradient; an input is declared unread only
            // when no other input has a gradient (else its grad reads it).
            let no_grad = u64::from(no_grad_bits) & ((1 << n_in) - 1);
            let unread = (0..n_in)
                .filter(|&i| (0..n_in).all(|j| j == i || no_grad & (1 << j) != 0))
                .fold(0u64, |m, i| m | 1 << i);
            let mut rule = rule_of(&n, policy, ReduceType::Sum);
            rule.options.no_grad = spmd_core::TensorSet::from_bits(no_grad);
            rule.options.grad_ignores = spmd_core::TensorSet::from_bits(unread);
            let mesh = Mesh::new(&case.mesh).unwrap();
            let specs: Vec<Spec<'_>> = case
                .shapes
                .iter()
                .zip(&case.attrs)
                .map(|(s, a)| Spec::new(s, a))
                .collect();
            let skip: Vec<usize> = (0..n_in).filter(|j| no_grad & (1 << j) != 0).collect();
            let check = check_of(&rule, &case).no_grad(&skip);
            tally_of(&tallies, &case).record(check.grad(
                &RuleRef(&rule),
                &mesh,
                &specs,
                &case.out_attrs,
            ))
        },
    );
    assert_both(&tallies, "grad");
}

/// Whether the rule's answer splits some input dim unevenly.
fn uneven(case: &Case, policy: Policy, reduce: ReduceType, dir: &str) -> bool {
    let n = parse(&case.text).unwrap();
    let rule = rule_of(&n, policy, reduce);
    let mesh = Mesh::new(&case.mesh).unwrap();
    let shapes: Vec<&[usize]> = case.shapes.iter().map(Vec::as_slice).collect();
    let r = if dir == "forward" {
        let specs: Vec<Spec<'_>> = case
            .shapes
            .iter()
            .zip(&case.attrs)
            .map(|(s, a)| Spec::new(s, a))
            .collect();
        rule.forward(&mesh, &specs)
    } else {
        let zeros: Vec<spmd_check::Tensor> = shapes
            .iter()
            .map(|s| spmd_check::Tensor::full(s, 0.0))
            .collect();
        let refs: Vec<&spmd_check::Tensor> = zeros.iter().collect();
        let outs =
            spmd_check::einsum_sized(&case.text, &refs, ReduceType::Sum, &case.sizes()).unwrap();
        let specs: Vec<Spec<'_>> = outs
            .iter()
            .zip(&case.out_attrs)
            .map(|(t, a)| Spec::new(t.shape(), a))
            .collect();
        rule.backward(&mesh, &shapes, &specs)
    };
    let Ok(r) = r else { return true };
    r.inputs.iter().zip(&shapes).any(|(a, s)| {
        a.dims_mapping
            .as_slice()
            .iter()
            .zip(s.iter())
            .any(|(sh, &e)| {
                let p: usize = sh.iter().map(|m| mesh.dim(m)).product();
                e % p != 0
            })
    })
}

/// The known cause of an unsound report on a random case, if any (each
/// has a reproducer in `known_unsound.rs`).
fn known_cause(case: &Case, policy: Policy, reduce: ReduceType, dir: &str) -> Option<&'static str> {
    let n = parse(&case.text).unwrap();
    let plan = n.plan();
    if policy.divisibility == Divisibility::DropDerived {
        return Some("DropDerived keeps the given side's sharding");
    }
    if reduce == ReduceType::Avg && uneven(case, policy, reduce, dir) {
        return Some("Avg partials of uneven splits");
    }
    if dir == "backward" && forward_lacks_extents(&plan) {
        return Some("forward cannot learn compound extents");
    }
    None
}

/// Not a test: `cargo test -p spmd-check --test random_einsum survey -- --ignored --nocapture`
/// counts the unsound reports of each known cause over many cases (all
/// policies, reduce types, partial outputs) and prints the smallest report
/// of each finding no known cause explains.
#[test]
#[ignore]
fn survey() {
    use std::collections::BTreeMap;
    use std::sync::Mutex;
    let found: Mutex<BTreeMap<String, (usize, String)>> = Mutex::new(BTreeMap::new());
    let note =
        |dir: &str, r: Result<(), Report>, case: &Case, policy: Policy, reduce: ReduceType| {
            if let Err(rep) = r
                && rep.is_unsound()
            {
                let kind = match known_cause(case, policy, reduce, dir) {
                    Some(cause) => format!("known: {cause}"),
                    None => format!(
                        "UNEXPLAINED {dir} {:?} {reduce}: {}",
                        policy,
                        format!("{:?}", rep.finding())
                            .split([' ', '{', '('])
                            .next()
                            .unwrap()
                    ),
                };
                let text = rep.to_string();
                let mut f = found.lock().unwrap();
                let e = f.entry(kind).or_insert((0, text.clone()));
                e.0 += 1;
                if text.len() < e.1.len() {
                    e.1 = text;
                }
            }
        };
    let mut runner = common::runner(3000);
    let all = vec![
        Divisibility::Uneven,
        Divisibility::Drop,
        Divisibility::DropDerived,
    ];
    runner
        .run(
            &(case(true, true), policy(all), reduce_type(true)),
            |(case, policy, reduce)| {
                let n = parse(&case.text).unwrap();
                let rule = rule_of(&n, policy, reduce);
                let mesh = Mesh::new(&case.mesh).unwrap();
                let specs: Vec<Spec<'_>> = case
                    .shapes
                    .iter()
                    .zip(&case.attrs)
                    .map(|(s, a)| Spec::new(s, a))
                    .collect();
                let shapes: Vec<&[usize]> = case.shapes.iter().map(Vec::as_slice).collect();
                let check = check_of(&rule, &case);
                note(
                    "forward",
                    check.forward(&RuleRef(&rule), &mesh, &specs),
                    &case,
                    policy,
                    reduce,
                );
                note(
                    "backward",
                    check.backward(&RuleRef(&rule), &mesh, &shapes, &case.out_attrs),
                    &case,
                    policy,
                    reduce,
                );
                if reduce == ReduceType::Sum {
                    note(
                        "grad",
                        check.grad(&RuleRef(&rule), &mesh, &specs, &case.out_attrs),
                        &case,
                        policy,
                        reduce,
                    );
                }
                Ok(())
            },
        )
        .unwrap();
    for (kind, (count, text)) in found.into_inner().unwrap() {
        if kind.starts_with("known") {
            println!("{count:6}  {kind}");
        } else {
            println!("=== {kind}: {count} cases; smallest:\n{text}\n");
        }
    }
}
