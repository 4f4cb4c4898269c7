//! The search: coordinate descent over the decisions, from every baseline
//! and from the unannotated graph, each candidate priced whole by
//! [`Measurer::measure`].
//!
//! A pass tries every layout of every decision in turn, keeping a change
//! when it makes the plan better; passes repeat until one changes nothing.
//! "Better" is: fits the memory budget before it does not; then the lower
//! modelled step time; a plan over budget is better when it needs less
//! memory. Ties keep the incumbent, and decisions and layouts are tried in
//! a fixed order, so the same input gives the same plan.

use std::collections::HashMap;

use spmd_graph::GraphError;

use crate::measure::{Figures, Measurer};
use crate::space::{Choice, Space};

/// How a search went.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SearchStats {
    /// Distinct plans priced.
    pub evaluated: usize,
    /// Plans the rules refused (propagation failed on them).
    pub refused: usize,
    /// Coordinate-descent passes, over all starts.
    pub passes: usize,
}

/// Whether `a` is a better plan than `b` under `budget` bytes per device.
pub fn better(a: &Figures, b: &Figures, budget: Option<u64>) -> bool {
    let fits = |f: &Figures| budget.is_none_or(|m| f.memory.total <= m);
    match (fits(a), fits(b)) {
        (true, false) => true,
        (false, true) => false,
        (true, true) => a.step_time < b.step_time * (1.0 - 1e-9),
        (false, false) => {
            a.memory.total < b.memory.total
                || (a.memory.total == b.memory.total && a.step_time < b.step_time * (1.0 - 1e-9))
        }
    }
}

/// Prices plans, each once, on as many copies of the graph as there are
/// cores (at most [`WORKERS`]): a batch of plans is split between them,
/// and the answers come back in the batch's order, so the result does not
/// depend on which copy priced what.
pub struct Evaluator<'r> {
    measurers: Vec<Measurer<'r>>,
    pub space: Space,
    seen: HashMap<Choice, Option<Figures>>,
    pub stats: SearchStats,
}

/// The most graph copies pricing at once.
pub const WORKERS: usize = 8;

impl<'r> Evaluator<'r> {
    pub fn new(measurer: Measurer<'r>, space: Space) -> Evaluator<'r> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut measurers = vec![measurer];
        while measurers.len() < cores.min(WORKERS) {
            measurers.push(measurers[0].clone());
        }
        Evaluator {
            measurers,
            space,
            seen: HashMap::new(),
            stats: SearchStats::default(),
        }
    }

    /// The first copy: the graph and its cost model.
    pub fn measurer(&self) -> &Measurer<'r> {
        &self.measurers[0]
    }

    pub fn into_parts(self) -> (Measurer<'r>, Space) {
        let Evaluator {
            mut measurers,
            space,
            ..
        } = self;
        (measurers.swap_remove(0), space)
    }

    /// `choice`'s figures; `None` when the rules refuse the plan.
    pub fn price(&mut self, choice: &Choice) -> Result<Option<Figures>, GraphError> {
        Ok(self
            .price_all(std::slice::from_ref(choice))?
            .pop()
            .flatten())
    }

    /// Each plan's figures, in order.
    pub fn price_all(&mut self, choices: &[Choice]) -> Result<Vec<Option<Figures>>, GraphError> {
        let mut todo: Vec<&Choice> = Vec::new();
        for c in choices {
            if !self.seen.contains_key(c) && !todo.contains(&c) {
                todo.push(c);
            }
        }
        let workers = self.measurers.len().min(todo.len()).max(1);
        let chunk = todo.len().div_ceil(workers).max(1);
        let space = &self.space;
        let results: Vec<Result<Vec<Option<Figures>>, GraphError>> = std::thread::scope(|s| {
            let handles: Vec<_> = self
                .measurers
                .iter_mut()
                .zip(todo.chunks(chunk))
                .map(|(m, batch)| {
                    s.spawn(move || batch.iter().map(|c| price_one(m, space, c)).collect())
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        });
        let mut priced = todo.into_iter();
        for batch in results {
            for f in batch? {
                let c = priced.next().expect("one answer per plan").clone();
                self.stats.evaluated += 1;
                self.stats.refused += usize::from(f.is_none());
                self.seen.insert(c, f);
            }
        }
        Ok(choices.iter().map(|c| self.seen[c].clone()).collect())
    }

    /// Coordinate descent from `start` (see the module docs); `progress`
    /// hears of every pass.
    pub fn descend(
        &mut self,
        start: Choice,
        budget: Option<u64>,
        progress: &mut dyn FnMut(&str),
    ) -> Result<Option<(Choice, Figures)>, GraphError> {
        let Some(mut best_f) = self.price(&start)? else {
            return Ok(None);
        };
        let mut best = start;
        loop {
            self.stats.passes += 1;
            let mut changed = false;
            for g in 0..self.space.groups.len() {
                let tries: Vec<Choice> = (0..self.space.options[g].len() as u16)
                    .filter(|&o| o != best[g])
                    .map(|o| {
                        let mut c = best.clone();
                        c[g] = o;
                        c
                    })
                    .collect();
                // The decision's best layout, the earliest on a tie.
                for (c, f) in tries.iter().zip(self.price_all(&tries)?) {
                    if let Some(f) = f
                        && better(&f, &best_f, budget)
                    {
                        best = c.clone();
                        best_f = f;
                        changed = true;
                    }
                }
            }
            progress(&format!(
                "pass {}: {} plans priced, best step {}, {} per device",
                self.stats.passes,
                self.stats.evaluated,
                crate::report::time(best_f.step_time),
                crate::bytes(best_f.memory.total)
            ));
            if !changed {
                return Ok(Some((best, best_f)));
            }
        }
    }
}

/// One plan on one copy of the graph.
fn price_one(
    m: &mut Measurer<'_>,
    space: &Space,
    c: &Choice,
) -> Result<Option<Figures>, GraphError> {
    space.apply(&mut m.graph, c)?;
    match m.measure() {
        Ok(f) => Ok(Some(f)),
        // A combination the rules reject is no plan; the search moves on.
        Err(GraphError::Rule { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}
