//! Solving the program: a branch and bound of our own over HiGHS's LPs,
//! and HiGHS's MIP search where that falls short.

use std::time::Instant;

use super::program::{Expr, INTEGRALITY, Program};
use super::{MIP_GAP, SolverBound, SolverError, SolverLimits, SolverStop};

/// Hands `p` to HiGHS, its costs in units of `unit` seconds, with its
/// `memory` row (at most 1) where a budget binds. Our own search of
/// branches over its LPs comes first ([`branch`]); where it reaches the
/// gap, that is the answer, found without the MIP search's presolve and
/// heuristics. Otherwise HiGHS searches the MIP from scratch (given the
/// best whole solution as a start, it searched longer on the budgeted
/// 2-layer graphs: the start was far from the optimum), and the better of
/// the two solutions is the answer.
pub(super) fn solve(
    p: Program,
    memory: Option<Expr>,
    unit: f64,
    limits: &SolverLimits,
    build_seconds: f64,
) -> Result<(SolverBound, Vec<f64>), SolverError> {
    let started = Instant::now();
    let size = |bound: f64, incumbent: Option<f64>, stop: SolverStop| SolverBound {
        bound,
        incumbent,
        optimal: stop == SolverStop::Optimal,
        stop,
        columns: p.costs.len(),
        integer_columns: p.integer.iter().filter(|&&i| i).count(),
        columns_left_out: p.left_out(),
        rows: p.rows.len() + usize::from(memory.is_some()),
        build_seconds,
        solve_seconds: started.elapsed().as_secs_f64(),
    };
    use highs::HighsModelStatus as S;
    let branched = branch(&p, memory.as_ref(), unit, limits)?;
    if let Some((cost, values)) = &branched.best
        && cost - branched.bound <= MIP_GAP * cost
    {
        return Ok((
            size(
                unit * branched.bound,
                Some(unit * cost),
                SolverStop::Optimal,
            ),
            values.clone(),
        ));
    }
    let left = limits.seconds - started.elapsed().as_secs_f64();
    let (mip, cols) = highs_model(&p, memory.as_ref(), unit, true, limits.nodes, left.max(0.0))?;
    let solved = mip
        .try_solve()
        .map_err(|s| SolverError::Solver(format!("{s:?}")))?;
    let stop = match solved.status() {
        S::Optimal => SolverStop::Optimal,
        // HiGHS reports its node limit as a solution limit.
        S::ReachedSolutionLimit => SolverStop::NodeLimit,
        S::ReachedTimeLimit => SolverStop::TimeLimit,
        S::Infeasible => return Err(SolverError::Infeasible),
        other => return Err(SolverError::Solver(format!("{other:?}"))),
    };
    // The branches' bound holds too; HiGHS's is usually the higher.
    let bound = unit
        * solved
            .double_info_value(c"mip_dual_bound")
            .map_err(|s| SolverError::Solver(format!("{s:?}")))?
            .max(branched.bound);
    if !(bound.is_finite() && bound > 0.0) {
        return Err(SolverError::NoBound { limits: *limits });
    }
    let found = solved.objective_value();
    let (incumbent, values) = match branched.best {
        // HiGHS's objective is infinite where it found no solution.
        Some((cost, values)) if cost < found || found.is_nan() => (cost, values),
        _ => (found, every_column(&cols, solved.get_solution().columns())),
    };
    let incumbent = unit * incumbent;
    Ok((
        size(bound, incumbent.is_finite().then_some(incumbent), stop),
        values,
    ))
}

/// What the search of branches gives: a bound on the program's optimum,
/// and its best whole solution within the budget (its cost and columns),
/// in the solve's units.
pub(super) struct Branched {
    pub(super) bound: f64,
    pub(super) best: Option<(f64, Vec<f64>)>,
}

/// At most this many LPs search the branches before HiGHS's MIP search
/// takes over.
pub(super) const BRANCH_LPS: usize = 16;
/// A node of the search: the LP bound it inherits, and the choice columns
/// it fixes (each to 0 or 1).
pub(super) struct Node {
    bound: f64,
    fixed: Vec<(usize, f64)>,
}

/// A branch and bound of our own over HiGHS's LP relaxation of `p`, its
/// memory row included: on these programs it reaches the gap in a few
/// LPs, where HiGHS's MIP search spends seconds in presolve, heuristics
/// and restarts (the 7B graph on `[4, 8]` at 24 GiB: three LPs, 0.6 s,
/// against 3.7 s).
///
/// The open node of least bound goes first, each LP starting from the last
/// one's basis. Every LP's solution is made whole two ways, both priced
/// in full ([`Program::complete`]): per choice its largest column, and its
/// leanest column the LP sets at all (which fits wherever the LP does). An
/// LP not within [`MIP_GAP`] of the best whole solution branches on a
/// column of the choice that trades the most memory in it, set to 1 and
/// to 0: without the budget the LP's vertices here are whole, and the
/// budget makes them fractional where it mixes a lean layout with a
/// dearer one. It stops when no open node can improve on the best by more
/// than the gap, or after [`BRANCH_LPS`] LPs.
pub(super) fn branch(
    p: &Program,
    memory: Option<&Expr>,
    unit: f64,
    limits: &SolverLimits,
) -> Result<Branched, SolverError> {
    use highs::HighsModelStatus as S;
    let started = Instant::now();
    let (mut model, cols) = highs_model(p, memory, unit, false, limits.nodes, limits.seconds)?;
    // HiGHS's presolve removes little from this LP and takes longer than
    // the simplex without it (the 7B graph on `[2, 4]` at 24 GiB: 0.6 s
    // against 0.3 s), unless the cutoff left most of its pair columns
    // out: the marginal rows then mostly keep one pair each, which
    // presolve substitutes away (the 2-layer Llama on `[2, 2]`: 16 ms
    // against 40 ms). With the memory row, steepest-edge pricing takes
    // about half the time of Devex, the default's choice here (the 7B
    // graph on `[2, 4]`: 0.27 s against 0.48 s).
    if p.left_out() <= p.costs.len() {
        model.set_option("presolve", "off");
    }
    model.set_option("simplex_dual_edge_weight_strategy", 2);
    let mut uses = vec![0.0f64; p.costs.len()];
    for &(c, v) in memory.into_iter().flatten() {
        uses[c] += v;
    }
    let mut best: Option<(f64, Vec<f64>)> = None;
    let improves = |bound: f64, best: &Option<(f64, Vec<f64>)>| {
        best.as_ref()
            .is_none_or(|(cost, _)| cost - bound > MIP_GAP * cost)
    };
    let mut open = vec![Node {
        bound: f64::NEG_INFINITY,
        fixed: Vec::new(),
    }];
    // The columns the last LP fixed, to be freed for the next.
    let mut fixed: Vec<usize> = Vec::new();
    // The least bound of the nodes closed without branching: they bound
    // the optimum too.
    let mut closed = f64::INFINITY;
    for lp in 0..BRANCH_LPS {
        open.retain(|n| {
            let keep = improves(n.bound, &best);
            if !keep {
                closed = closed.min(n.bound);
            }
            keep
        });
        let Some(next) = (0..open.len()).min_by(|&a, &b| open[a].bound.total_cmp(&open[b].bound))
        else {
            break;
        };
        let node = open.swap_remove(next);
        for c in fixed.drain(..) {
            if let Some(col) = cols[c] {
                model.change_column_bounds(col, 0.0..=p.upper[c]);
            }
        }
        for &(c, v) in &node.fixed {
            if let Some(col) = cols[c] {
                model.change_column_bounds(col, v..=v);
            }
            fixed.push(c);
        }
        let left = limits.seconds - started.elapsed().as_secs_f64();
        model.set_option("time_limit", left.max(0.0));
        let solved = model
            .try_solve()
            .map_err(|s| SolverError::Solver(format!("{s:?}")))?;
        match solved.status() {
            S::Optimal => {}
            // The budget admits no setting of the choices at all.
            S::Infeasible if lp == 0 => return Err(SolverError::Infeasible),
            S::Infeasible => {
                model = solved.into();
                continue;
            }
            _ => {
                open.push(node);
                break;
            }
        }
        let x = every_column(&cols, solved.get_solution().columns());
        let objective = solved.objective_value();
        model = solved.into();
        for set in [p.rounded(&x), p.leanest(&x, &uses)] {
            let Some(whole) = p.complete(&set) else {
                continue;
            };
            let used: f64 = uses.iter().zip(&whole).map(|(u, v)| u * v).sum();
            let cost = p.cost(&whole) / unit;
            if used <= 1.0 && best.as_ref().is_none_or(|(b, _)| cost < *b) {
                best = Some((cost, whole));
            }
        }
        let on = branching_column(p, &x, &uses).filter(|_| improves(objective, &best));
        let Some(on) = on else {
            closed = closed.min(objective);
            continue;
        };
        for v in [1.0, 0.0] {
            let mut child = node.fixed.clone();
            child.push((on, v));
            open.push(Node {
                bound: objective,
                fixed: child,
            });
        }
    }
    let bound = open
        .iter()
        .map(|n| n.bound)
        .chain(best.as_ref().map(|(cost, _)| *cost))
        .fold(closed, f64::min);
    Ok(Branched { bound, best })
}

/// The fractional choice column of `x` to branch on: one of the choice
/// whose columns' memory (`uses`) spreads most about its mean in `x`, the
/// largest of them; without a budget, the most fractional.
pub(super) fn branching_column(p: &Program, x: &[f64], uses: &[f64]) -> Option<usize> {
    let mut mean = vec![0.0f64; p.choices];
    for (c, g) in p.choice_of.iter().enumerate() {
        if let Some(g) = *g {
            mean[g] += x[c] * uses[c];
        }
    }
    let mut spread = vec![0.0f64; p.choices];
    for (c, g) in p.choice_of.iter().enumerate() {
        if let Some(g) = *g {
            spread[g] += x[c] * (uses[c] - mean[g]).abs();
        }
    }
    let key = |c: usize| {
        let g = p.choice_of[c].unwrap_or_default();
        (spread[g], x[c].min(1.0 - x[c]), x[c])
    };
    (0..x.len())
        .filter(|&c| p.choice_of[c].is_some() && x[c] > INTEGRALITY && x[c] < 1.0 - INTEGRALITY)
        .max_by(|&a, &b| {
            key(a)
                .partial_cmp(&key(b))
                .unwrap_or(std::cmp::Ordering::Equal)
                .then(b.cmp(&a))
        })
}

/// A solution HiGHS gives for the columns it has (`cols`), as values of
/// every column of the program.
pub(super) fn every_column(cols: &[Option<highs::Col>], solved: &[f64]) -> Vec<f64> {
    let mut given = solved.iter();
    cols.iter()
        .map(|c| match c {
            Some(_) => given.next().copied().unwrap_or(0.0),
            None => 0.0,
        })
        .collect()
}

/// HiGHS's bit for its presolve's probing, in `presolve_rule_off`.
pub(super) const PRESOLVE_PROBING: i32 = 1 << 15;

/// `p` as HiGHS takes it, its choices whole (`integer`) or relaxed, with
/// the options every solve here uses.
pub(super) fn highs_model(
    p: &Program,
    memory: Option<&Expr>,
    unit: f64,
    integer: bool,
    node_limit: u64,
    time_limit: f64,
) -> Result<(highs::Model, Vec<Option<highs::Col>>), SolverError> {
    let mut pb = highs::RowProblem::default();
    // A column left out is not handed over at all: the LPs here run
    // without presolve, which would otherwise be what removes it.
    let cols: Vec<Option<highs::Col>> = (0..p.costs.len())
        .map(|i| {
            if p.upper[i] == 0.0 {
                None
            } else if p.integer[i] && integer {
                Some(pb.add_integer_column(p.costs[i] / unit, 0.0..=p.upper[i]))
            } else {
                Some(pb.add_column(p.costs[i] / unit, 0.0..=p.upper[i]))
            }
        })
        .collect();
    let mut merged: Vec<f64> = vec![0.0; p.costs.len()];
    let memory_row = memory.map(|m| (f64::NEG_INFINITY, 1.0, m.clone()));
    for (lo, hi, row) in p.rows.iter().chain(&memory_row) {
        // HiGHS takes each column once a row.
        let mut order: Vec<usize> = Vec::with_capacity(row.len());
        for &(c, v) in row {
            if merged[c] == 0.0 {
                order.push(c);
            }
            merged[c] += v;
        }
        let entries: Vec<(highs::Col, f64)> = order
            .iter()
            .filter_map(|&c| Some((cols[c]?, std::mem::take(&mut merged[c]))))
            .filter(|&(_, v)| v != 0.0)
            .collect();
        for &c in &order {
            merged[c] = 0.0;
        }
        match (lo.is_finite(), hi.is_finite()) {
            (true, true) => pb.add_row(*lo..=*hi, &entries),
            (true, false) => pb.add_row(*lo.., &entries),
            (false, true) => pb.add_row(..=*hi, &entries),
            (false, false) => {}
        }
    }
    let mut model = pb
        .try_optimise(highs::Sense::Minimise)
        .map_err(|s| SolverError::Solver(format!("{s:?} (building the program)")))?;
    model.make_quiet();
    // Two threads: the MIP search itself stays on one (its tree is
    // searched in one order), and the analytic centre the central-rounding
    // heuristic starts from is computed beside the root LP instead of
    // after it. Each waits for the other at fixed points, so the answer is
    // the same on every run (the 7B graph on `[2, 4]` at 24 GiB: 1.4 s
    // instead of 2.2 s).
    model.set_option("threads", 2);
    model.set_option("random_seed", 0);
    model.set_option("mip_rel_gap", MIP_GAP);
    // Two of HiGHS's heuristics cost more than they find here. Feasibility
    // jump (before the root LP) and the root reduced-cost heuristic off,
    // HiGHS returns the same or better solutions on the benchmark's graphs
    // and the budgeted test graphs, in up to half the time (the 7B graph
    // on `[8]` at 24 GiB: 1.1 s with both on, 0.5 s with both off).
    model.set_option("mip_heuristic_run_feasibility_jump", false);
    model.set_option("mip_heuristic_run_root_reduced_cost", false);
    // Probing took up to half of HiGHS's presolve here and reduced
    // nothing more; without it the budgeted programs solve 10–30% faster
    // (the 2-layer graphs on `[2, 2]` at 3/4 of replication, the 7B graph
    // on `[8]` at 28 GiB), with the same plans but two within 0.2%.
    model.set_option("presolve_rule_off", PRESOLVE_PROBING);
    model.set_option(
        "mip_max_nodes",
        i32::try_from(node_limit).unwrap_or(i32::MAX),
    );
    model.set_option("time_limit", time_limit);
    Ok((model, cols))
}
