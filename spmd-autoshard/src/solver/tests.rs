use super::program::*;
use super::solve::*;
use super::*;
use proptest::prelude::{Just, ProptestConfig, prop, prop_assert, proptest};
use proptest::strategy::Strategy as _;

/// A program of independent choices (a multiple-choice knapsack): each
/// option's cost (above `base`) and memory, in budgets.
fn knapsack(options: &[Vec<(u8, u8)>], budget: u32, base: f64) -> (Program, Expr) {
    let mut p = Program::default();
    let mut memory = Expr::new();
    for choice in options {
        let cols = p.choice(choice.len());
        for (&c, &(cost, mem)) in cols.iter().zip(choice) {
            p.costs[c] = f64::from(cost) + base;
            memory.push((c, f64::from(mem) / f64::from(budget)));
        }
    }
    (p, memory)
}

/// The cheapest setting within the budget, by enumeration.
fn optimum(options: &[Vec<(u8, u8)>], budget: u32, base: f64) -> Option<f64> {
    let mut best: Option<f64> = None;
    let mut pick = vec![0usize; options.len()];
    loop {
        let (cost, mem) = options
            .iter()
            .zip(&pick)
            .fold((0.0, 0u32), |(c, m), (o, &i)| {
                (c + f64::from(o[i].0) + base, m + u32::from(o[i].1))
            });
        if mem <= budget && best.is_none_or(|b| cost < b) {
            best = Some(cost);
        }
        let Some(k) = (0..pick.len()).find(|&k| pick[k] + 1 < options[k].len()) else {
            return best;
        };
        pick[k] += 1;
        pick[..k].fill(0);
    }
}

fn limits() -> SolverLimits {
    SolverLimits {
        nodes: 1_000,
        seconds: 60.0,
        columns: usize::MAX,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The search of branches bounds the optimum from below, and its
    /// best solution fits and costs what its columns say; the solve's
    /// answer is a setting within the budget, within the gap of the
    /// optimum when it says optimal, above its own bound. Above a base
    /// of 1000 the options' costs are within the gap of each other,
    /// and nodes close before their LPs reach the optimum.
    #[test]
    fn branching_bounds_and_fits(
        options in prop::collection::vec(
            prop::collection::vec((0u8..50, 0u8..20), 1..4),
            1..6,
        ),
        budget in 1u32..60,
        base in prop::sample::select(vec![1.0, 1000.0]),
    ) {
        let (p, memory) = knapsack(&options, budget, base);
        let best = optimum(&options, budget, base);
        let branched = branch(&p, Some(&memory), 1.0, &limits());
        let branched = match (branched, best) {
            (Err(SolverError::Infeasible), None) => return Ok(()),
            (got, _) => got.unwrap(),
        };
        if let Some(opt) = best {
            prop_assert!(branched.bound <= opt + 1e-6, "{} > {opt}", branched.bound);
        }
        if let Some((cost, x)) = &branched.best {
            let used: f64 = memory.iter().map(|&(c, v)| v * x[c]).sum();
            let paid: f64 = (0..x.len()).map(|c| p.costs[c] * x[c]).sum();
            prop_assert!(used <= 1.0 + 1e-9);
            prop_assert!((paid - cost).abs() <= 1e-6 * paid.max(1.0));
            prop_assert!(best.is_some_and(|opt| *cost >= opt - 1e-6));
        }
        let (again, _) = knapsack(&options, budget, base);
        match (solve(again, Some(memory.clone()), 1.0, &limits(), 0.0), best) {
            (Ok((bound, x)), Some(opt)) => {
                let used: f64 = memory.iter().map(|&(c, v)| v * x[c]).sum();
                let paid: f64 = (0..x.len()).map(|c| p.costs[c] * x[c]).sum();
                prop_assert!(used <= 1.0 + 1e-6);
                prop_assert!(bound.bound <= opt + 1e-6);
                prop_assert!(paid >= opt - 1e-6);
                if bound.optimal {
                    prop_assert!(paid <= opt * (1.0 + 2.0 * MIP_GAP), "{paid} vs {opt}");
                }
            }
            (Err(SolverError::Infeasible), None) => {}
            (got, want) => prop_assert!(false, "{:?} against {want:?}", got.map(|g| g.0)),
        }
    }
}

/// A program of choices tied by edges: per choice its options' costs,
/// per edge (producer, consumer) its forward and backward cost per
/// pair of options. Each producer pays the dearest of its edges, as a
/// tensor pays the dearest of its reads.
#[derive(Clone, Debug)]
struct Tied {
    options: Vec<Vec<u8>>,
    edges: Vec<TiedEdge>,
}

/// Producer, consumer, and per pair of their options the forward and
/// backward cost.
type TiedEdge = (usize, usize, Vec<Vec<(u8, u8)>>);

fn tied() -> impl proptest::strategy::Strategy<Value = Tied> {
    prop::collection::vec(prop::collection::vec(0u8..20, 1..4), 2..5)
        .prop_flat_map(|options| {
            let n = options.len();
            let edge = (0..n - 1).prop_flat_map(move |i| (Just(i), i + 1..n));
            let sizes: Vec<usize> = options.iter().map(Vec::len).collect();
            let edges = prop::collection::vec(edge, 1..5).prop_flat_map(move |ends| {
                ends.into_iter()
                    .map(|(i, j)| {
                        let cell = (0u8..30, 0u8..30);
                        let matrix =
                            prop::collection::vec(prop::collection::vec(cell, sizes[j]), sizes[i]);
                        (Just(i), Just(j), matrix)
                    })
                    .collect::<Vec<_>>()
            });
            (Just(options), edges)
        })
        .prop_map(|(options, edges)| Tied { options, edges })
}

/// A cost in milliseconds, as the program's are fractions of a second
/// (a column whose value is a time, not a choice, then costs less than
/// 1 at its largest).
fn seconds(ms: u8) -> f64 {
    f64::from(ms) * 1e-3
}

impl Tied {
    /// Each setting's cost, by enumeration: the cheapest first.
    fn costs(&self) -> Vec<(f64, Vec<usize>)> {
        let mut all = Vec::new();
        let mut pick = vec![0usize; self.options.len()];
        loop {
            let mut cost: f64 = pick
                .iter()
                .zip(&self.options)
                .map(|(&k, o)| seconds(o[k]))
                .sum();
            for producer in 0..self.options.len() {
                let dearest = |pass: fn(&(u8, u8)) -> u8| {
                    self.edges
                        .iter()
                        .filter(|e| e.0 == producer)
                        .map(|(i, j, m)| seconds(pass(&m[pick[*i]][pick[*j]])))
                        .fold(0.0, f64::max)
                };
                cost += dearest(|c| c.0) + dearest(|c| c.1);
            }
            all.push((cost, pick.clone()));
            let Some(i) = (0..pick.len()).find(|&i| pick[i] + 1 < self.options[i].len()) else {
                break;
            };
            pick[i] += 1;
            pick[..i].fill(0);
        }
        all.sort_by(|a, b| a.0.total_cmp(&b.0));
        all
    }

    /// The program, its pairs dearer than `cutoff` left out, and each
    /// choice's columns.
    fn program(&self, cutoff: Option<f64>) -> (Program, Vec<Vec<usize>>) {
        let mut p = Program::default();
        let mut choices = Vec::new();
        for o in &self.options {
            let cols = p.choice(o.len());
            for (&c, &v) in cols.iter().zip(o) {
                p.costs[c] = seconds(v);
            }
            choices.push(cols);
        }
        let slack = cutoff.map_or(f64::INFINITY, |c| {
            c * (1.0 + 1e-9) - p.cheapest().iter().sum::<f64>()
        });
        let side = |cols: &[usize]| Side {
            classes: cols
                .iter()
                .enumerate()
                .map(|(k, &c)| (k, vec![c]))
                .collect(),
        };
        let mut exprs: Vec<(usize, Expr, Expr)> = Vec::new();
        for (i, j, m) in &self.edges {
            let matrix: Matrix = m
                .iter()
                .map(|r| r.iter().map(|&(f, b)| (seconds(f), seconds(b))).collect())
                .collect();
            let (f, b) = edge_costs(
                &mut p,
                &side(&choices[*i]),
                &side(&choices[*j]),
                &matrix,
                slack,
            );
            exprs.push((*i, f, b));
        }
        for producer in 0..self.options.len() {
            let mine = || exprs.iter().filter(move |e| e.0 == producer);
            add_dearest(&mut p, mine().map(|e| &e.1).collect(), 1.0);
            add_dearest(&mut p, mine().map(|e| &e.2).collect(), 1.0);
        }
        if let Some(cutoff) = cutoff {
            p.leave_out_dearer_than(cutoff);
        }
        (p, choices)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// A whole setting of the choices, completed, costs what the
    /// setting costs by enumeration, and satisfies every row; where
    /// the cutoff left a pair it needs out, it costs more than the
    /// cutoff.
    #[test]
    fn a_setting_completes_to_its_cost(t in tied(), at in 0usize..1000) {
        let costs = t.costs();
        let cutoff = costs[at % costs.len()].0;
        for cutoff in [None, Some(cutoff)] {
            let (p, choices) = t.program(cutoff);
            for (cost, pick) in &costs {
                let set: Vec<usize> = choices.iter().zip(pick).map(|(c, &k)| c[k]).collect();
                let Some(x) = p.complete(&set) else {
                    prop_assert!(cutoff.is_some_and(|c| *cost > c), "{cost} left out");
                    continue;
                };
                prop_assert!((p.cost(&x) - cost).abs() <= 1e-9 * cost.max(1.0));
                for (lo, hi, row) in &p.rows {
                    let v: f64 = row.iter().map(|&(c, a)| a * x[c]).sum();
                    prop_assert!(*lo - 1e-9 <= v && v <= *hi + 1e-9, "{lo} <= {v} <= {hi}");
                }
            }
        }
    }

    /// Leaving out what no solution within a cutoff sets keeps the
    /// optimum, for any cutoff at or above it (here: the cost of some
    /// setting), and the bound stays below it.
    #[test]
    fn a_cutoff_keeps_the_optimum(t in tied(), at in 0usize..1000) {
        let costs = t.costs();
        let optimum = costs[0].0;
        let cutoff = costs[at % costs.len()].0;
        for cutoff in [None, Some(cutoff)] {
            let (p, choices) = t.program(cutoff);
            let (bound, x) = solve(p, None, 1.0, &limits(), 0.0).unwrap();
            prop_assert!(bound.bound <= optimum + 1e-9, "{} > {optimum}", bound.bound);
            let pick: Vec<usize> = choices
                .iter()
                .map(|cols| cols.iter().position(|&c| x[c] > 0.5).unwrap())
                .collect();
            let paid = costs.iter().find(|(_, s)| *s == pick).unwrap().0;
            prop_assert!(bound.optimal);
            prop_assert!(paid <= optimum * (1.0 + MIP_GAP) + 1e-12, "{paid} vs {optimum}");
        }
    }
}

/// A budget the cheap options overrun, where one branch finds the
/// optimum: the LP takes a fraction of the lean option, and setting it
/// whole either way closes the gap.
#[test]
fn branching_closes_where_one_trade_suffices() {
    let options = vec![vec![(0, 10), (5, 2)], vec![(0, 1)], vec![(3, 1), (0, 1)]];
    let (p, memory) = knapsack(&options, 4, 1.0);
    let branched = branch(&p, Some(&memory), 1.0, &limits()).unwrap();
    let (cost, _) = branched.best.expect("a fitting solution");
    assert_eq!(Some(cost), optimum(&options, 4, 1.0));
    assert!(cost - branched.bound <= MIP_GAP * cost);
}
