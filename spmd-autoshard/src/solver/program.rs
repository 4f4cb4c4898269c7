//! The program in our own sparse form: choices, the pair columns that tie
//! them along edges, the dearest-of terms, and what completes a whole
//! setting of the choices into every column's value.

use rustc_hash::FxHashMap;

/// The program, in our own sparse form (HiGHS gets it at the end).
#[derive(Default)]
pub(super) struct Program {
    pub(super) costs: Vec<f64>,
    pub(super) integer: Vec<bool>,
    pub(super) upper: Vec<f64>,
    /// Per column: the [`Program::choice`] it is one of (`None` for a
    /// column of its own).
    pub(super) choice_of: Vec<Option<usize>>,
    pub(super) choices: usize,
    /// Per row: its lower and upper bound and its entries.
    pub(super) rows: Vec<(f64, f64, Expr)>,
    /// Per column above several expressions ([`add_dearest`]): the column
    /// and its rows.
    pub(super) dearest: Vec<(usize, Vec<usize>)>,
    /// Pair columns never made: dearer than the cutoff ([`edge_costs`]).
    pub(super) pairs_left_out: usize,
    /// Per edge with pair columns, what completes a whole setting of the
    /// choices ([`Program::complete`]).
    pub(super) paired: Vec<Paired>,
}

/// An edge's pair columns: `z[i][j]` per pair of classes (producer layout
/// `i`, consumer read `j`), and the choice columns of each class.
pub(super) struct Paired {
    pub(super) from: Vec<Vec<usize>>,
    pub(super) to: Vec<Vec<usize>>,
    pub(super) z: Vec<Vec<Option<usize>>>,
}

impl Program {
    pub(super) fn column(&mut self, cost: f64, integer: bool) -> usize {
        self.costs.push(cost);
        self.integer.push(integer);
        self.upper.push(if integer { 1.0 } else { f64::INFINITY });
        self.choice_of.push(None);
        self.costs.len() - 1
    }

    /// One of `count` binaries, exactly one set.
    pub(super) fn choice(&mut self, count: usize) -> Vec<usize> {
        let cols: Vec<usize> = (0..count).map(|_| self.column(0.0, true)).collect();
        for &c in &cols {
            self.choice_of[c] = Some(self.choices);
        }
        self.choices += 1;
        self.rows
            .push((1.0, 1.0, cols.iter().map(|&c| (c, 1.0)).collect()));
        cols
    }

    /// Leaves out (an upper bound of 0) every choice or pair column that no
    /// whole solution costing at most `cutoff` sets. Costs are never
    /// negative, so a solution that sets column `c` costs at least the
    /// cheapest column of every other choice, `c`'s own cost, and for each
    /// column above several expressions ([`add_dearest`]) its weight times
    /// `c`'s largest entry in them. The optimum is unchanged wherever it is
    /// at most `cutoff`; the relaxation only gains.
    pub(super) fn leave_out_dearer_than(&mut self, cutoff: f64) {
        let n = self.costs.len();
        let cheapest = self.cheapest();
        let base: f64 = cheapest.iter().sum();
        let mut through = vec![0.0f64; n];
        // A column above several expressions is no choice but their
        // largest value: it stays.
        let mut above = vec![false; n];
        for (top, rows) in &self.dearest {
            above[*top] = true;
            let mut most: FxHashMap<usize, f64> = FxHashMap::default();
            for &r in rows {
                for &(c, v) in &self.rows[r].2 {
                    if c != *top {
                        let m = most.entry(c).or_default();
                        *m = m.max(-v);
                    }
                }
            }
            for (c, v) in most {
                through[c] += self.costs[*top] * v;
            }
        }
        for c in (0..n).filter(|&c| !above[c]) {
            let others = match self.choice_of[c] {
                Some(g) => base - cheapest[g],
                None => base,
            };
            if others + self.costs[c] + through[c] > cutoff * (1.0 + 1e-9) {
                self.upper[c] = 0.0;
            }
        }
    }

    /// The whole solution that sets the choice columns `set` (one of each
    /// choice): each edge's pair where its two classes meet, and each
    /// column above several expressions at their largest. `None` where it
    /// needs a column the cutoff left out.
    pub(super) fn complete(&self, set: &[usize]) -> Option<Vec<f64>> {
        let mut x = vec![0.0f64; self.costs.len()];
        for &c in set {
            if self.upper[c] == 0.0 {
                return None;
            }
            x[c] = 1.0;
        }
        let class = |classes: &[Vec<usize>], x: &[f64]| {
            classes
                .iter()
                .position(|cols| cols.iter().any(|&c| x[c] == 1.0))
        };
        for e in &self.paired {
            if let (Some(i), Some(j)) = (class(&e.from, &x), class(&e.to, &x)) {
                x[e.z[i][j]?] = 1.0;
            }
        }
        for (top, rows) in &self.dearest {
            x[*top] = rows
                .iter()
                .map(|&r| {
                    let row = self.rows[r].2.iter().filter(|&&(c, _)| c != *top);
                    row.map(|&(c, v)| -v * x[c]).sum::<f64>()
                })
                .fold(0.0, f64::max);
        }
        Some(x)
    }

    /// Per choice, the column largest in `x` (the first of equals).
    pub(super) fn rounded(&self, x: &[f64]) -> Vec<usize> {
        self.pick(|_| true, |c, b| x[c] > x[b])
    }

    /// Per choice, of the columns `x` sets at all, the one that uses the
    /// least memory (`uses`), the largest in `x` of equals. Memory is a
    /// sum over choice columns, so this fits wherever `x` does.
    pub(super) fn leanest(&self, x: &[f64], uses: &[f64]) -> Vec<usize> {
        self.pick(
            |c| x[c] > INTEGRALITY,
            |c, b| (uses[c], -x[c]) < (uses[b], -x[b]),
        )
    }

    /// Per choice, of its columns that are `eligible`, the one no later
    /// column is `better` than (`better(c, b)`: `c` beats `b`).
    fn pick(
        &self,
        eligible: impl Fn(usize) -> bool,
        better: impl Fn(usize, usize) -> bool,
    ) -> Vec<usize> {
        let mut pick: Vec<Option<usize>> = vec![None; self.choices];
        for (c, g) in self.choice_of.iter().enumerate() {
            if let Some(g) = *g
                && eligible(c)
                && pick[g].is_none_or(|b| better(c, b))
            {
                pick[g] = Some(c);
            }
        }
        pick.into_iter().flatten().collect()
    }

    /// What the solution `x` costs.
    pub(super) fn cost(&self, x: &[f64]) -> f64 {
        x.iter().zip(&self.costs).map(|(v, c)| v * c).sum()
    }

    /// Columns left out by the cutoff: never made, or bounded to 0.
    pub(super) fn left_out(&self) -> usize {
        self.pairs_left_out + self.upper.iter().filter(|&&u| u == 0.0).count()
    }

    /// Per choice, the cost of its cheapest column.
    pub(super) fn cheapest(&self) -> Vec<f64> {
        let mut cheapest = vec![f64::INFINITY; self.choices];
        for (c, &g) in self.choice_of.iter().enumerate() {
            if let Some(g) = g {
                cheapest[g] = cheapest[g].min(self.costs[c]);
            }
        }
        cheapest
    }

    /// The largest value `expr` takes over every setting of the choices;
    /// `None` when it has a column that is not one of a choice.
    pub(super) fn largest(&self, expr: &Expr) -> Option<f64> {
        let mut per_column: FxHashMap<usize, f64> = FxHashMap::default();
        for &(c, v) in expr {
            *per_column.entry(c).or_default() += v;
        }
        let mut per_choice = vec![0.0f64; self.choices];
        for (c, v) in per_column {
            let g = self.choice_of[c]?;
            per_choice[g] = per_choice[g].max(v);
        }
        Some(per_choice.iter().sum())
    }
}

/// One side of an edge: per class (a layout, or what a consumer reads and
/// gives back), the columns that choose it.
pub(super) struct Side<K> {
    pub(super) classes: Vec<(K, Vec<usize>)>,
}

impl<K: PartialEq + Clone> Side<K> {
    pub(super) fn new() -> Side<K> {
        Side {
            classes: Vec::new(),
        }
    }

    pub(super) fn add(&mut self, key: &K, col: usize) {
        match self.classes.iter_mut().find(|(k, _)| k == key) {
            Some((_, cols)) => cols.push(col),
            None => self.classes.push((key.clone(), vec![col])),
        }
    }
}

/// A linear expression: the cost of an edge in the choices' columns.
pub(super) type Expr = Vec<(usize, f64)>;

/// Per pair of an edge's classes (producer layout, consumer read), the
/// forward and backward reshard times.
pub(super) type Matrix = Vec<Vec<(f64, f64)>>;

/// The expressions of one edge's forward and backward costs, given per
/// pair of classes; `z` columns only where both sides have a choice, and
/// none for a pair whose own cost is above `slack` (no solution within
/// the cutoff sets it: see [`Program::leave_out_dearer_than`]).
pub(super) fn edge_costs<A, B>(
    p: &mut Program,
    from: &Side<A>,
    to: &Side<B>,
    costs: &Matrix,
    slack: f64,
) -> (Expr, Expr) {
    let (mut fwd, mut bwd) = (Expr::new(), Expr::new());
    if costs.iter().flatten().all(|&(f, b)| f == 0.0 && b == 0.0) {
        return (fwd, bwd);
    }
    let mut put = |cols: &[usize], (f, b): (f64, f64)| {
        for &c in cols {
            if f != 0.0 {
                fwd.push((c, f));
            }
            if b != 0.0 {
                bwd.push((c, b));
            }
        }
    };
    if from.classes.len() == 1 {
        for (j, (_, cols)) in to.classes.iter().enumerate() {
            put(cols, costs[0][j]);
        }
    } else if to.classes.len() == 1 {
        for (i, (_, cols)) in from.classes.iter().enumerate() {
            put(cols, costs[i][0]);
        }
    } else {
        let z: Vec<Vec<Option<usize>>> = costs
            .iter()
            .map(|row| {
                row.iter()
                    .map(|&(f, b)| {
                        let made = f + b <= slack;
                        p.pairs_left_out += usize::from(!made);
                        made.then(|| p.column(0.0, false))
                    })
                    .collect()
            })
            .collect();
        for (i, (_, cols)) in from.classes.iter().enumerate() {
            let mut row: Expr = z[i].iter().flatten().map(|&c| (c, 1.0)).collect();
            row.extend(cols.iter().map(|&c| (c, -1.0)));
            p.rows.push((0.0, 0.0, row));
        }
        for (j, (_, cols)) in to.classes.iter().enumerate() {
            let mut row: Expr = z.iter().filter_map(|zi| zi[j]).map(|c| (c, 1.0)).collect();
            row.extend(cols.iter().map(|&c| (c, -1.0)));
            p.rows.push((0.0, 0.0, row));
        }
        for (i, zi) in z.iter().enumerate() {
            for (j, c) in zi.iter().enumerate() {
                if let Some(c) = *c {
                    put(&[c], costs[i][j]);
                }
            }
        }
        p.paired.push(Paired {
            from: from.classes.iter().map(|(_, c)| c.clone()).collect(),
            to: to.classes.iter().map(|(_, c)| c.clone()).collect(),
            z,
        });
    }
    (fwd, bwd)
}

/// Adds `weight` times the largest of `exprs` to the objective: the one
/// expression itself, or a continuous column above each of several.
pub(super) fn add_dearest(p: &mut Program, exprs: Vec<&Expr>, weight: f64) {
    let exprs: Vec<&Expr> = exprs.into_iter().filter(|e| !e.is_empty()).collect();
    match exprs.len() {
        0 => {}
        1 => {
            for &(c, v) in exprs[0] {
                p.costs[c] += weight * v;
            }
        }
        _ => {
            let top = p.column(weight, false);
            let mut rows = Vec::with_capacity(exprs.len());
            for e in exprs {
                let mut row: Expr = vec![(top, 1.0)];
                row.extend(e.iter().map(|&(c, v)| (c, -v)));
                rows.push(p.rows.len());
                p.rows.push((0.0, f64::INFINITY, row));
            }
            p.dearest.push((top, rows));
        }
    }
}

/// A choice column's value counts as 0 up to this, and as 1 from 1 less it.
pub(super) const INTEGRALITY: f64 = 1e-6;
