//! The search: coordinate descent over the decisions, from every baseline
//! and from the unannotated graph, each candidate priced whole by
//! [`Measurer::measure`].
//!
//! A pass tries every layout of every decision in turn, keeping the best
//! change that makes the plan better; then it moves each *family* (the
//! decisions that share one layout) to each other layout together. Passes
//! repeat until one changes nothing.
//! "Better" is: fits the memory budget before it does not; then the lower
//! modelled step time; a plan over budget is better when it needs less
//! memory. Ties keep the incumbent, and decisions and layouts are tried in
//! a fixed order, so the same input gives the same plan.

use std::collections::HashMap;

use spmd_graph::GraphError;

use crate::measure::{Bound, Figures, Measurer, Memory, Priced};
use crate::space::{Choice, Layout, Space};

/// How a search went.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SearchStats {
    /// Distinct plans priced.
    pub evaluated: usize,
    /// Plans the rules refused (propagation failed on them).
    pub refused: usize,
    /// Coordinate-descent passes, over all starts.
    pub passes: usize,
    /// Plans whose forward pass showed they could not win: their backward
    /// was not priced.
    pub stopped_early: usize,
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

/// Whether a plan whose forward pass showed `bound` cannot be better than
/// `incumbent`: memory is exact, and the step time can only grow.
pub fn cannot_beat(bound: &Bound, incumbent: &Figures, budget: Option<u64>) -> bool {
    let fits = |m: &Memory| budget.is_none_or(|b| m.total <= b);
    let slower = bound.step_time >= incumbent.step_time * (1.0 - 1e-9);
    match (fits(&bound.memory), fits(&incumbent.memory)) {
        (false, true) => true,
        (true, false) => false,
        (true, true) => slower,
        (false, false) => {
            bound.memory.total > incumbent.memory.total
                || (bound.memory.total == incumbent.memory.total && slower)
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
    /// Per plan: `None` if the rules refuse it.
    seen: HashMap<Choice, Option<Priced>>,
    pub stats: SearchStats,
}

/// The most graph copies pricing at once.
pub const WORKERS: usize = 8;

/// Graphs with fewer ops are priced on one thread.
pub const PARALLEL_OPS: usize = 1000;

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

    /// The first copy annotated as `choice` says, and the space to add
    /// pins to.
    pub fn annotated(
        &mut self,
        choice: &Choice,
    ) -> Result<(&Measurer<'r>, &mut Space), GraphError> {
        self.space.apply(&mut self.measurers[0].graph, choice)?;
        Ok((&self.measurers[0], &mut self.space))
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
        let priced = self.price_all(std::slice::from_ref(choice), None)?;
        Ok(priced.into_iter().next().flatten())
    }

    /// Each plan's figures, in order; `None` for a plan the rules refuse
    /// or, given an `incumbent` (and the budget), one that cannot beat it.
    pub fn price_all(
        &mut self,
        choices: &[Choice],
        incumbent: Option<(&Figures, Option<u64>)>,
    ) -> Result<Vec<Option<Figures>>, GraphError> {
        let hopeless = |b: &Bound| incumbent.is_some_and(|(f, budget)| cannot_beat(b, f, budget));
        let mut todo: Vec<&Choice> = Vec::new();
        for c in choices {
            let known = match self.seen.get(key(c)) {
                None => false,
                Some(Some(Priced::Bounded(b))) => hopeless(b),
                Some(_) => true,
            };
            if !known && !todo.iter().any(|t| key(t) == key(c)) {
                todo.push(c);
            }
        }
        // Worker `w` prices plans `w`, `w + workers`, ...: neighbouring
        // plans cost alike, so every worker gets its share of the dear ones.
        // A small graph prices faster than a thread starts: one worker then.
        let parallel = self.measurers[0].graph().ops().len() >= PARALLEL_OPS;
        let workers = if parallel {
            self.measurers.len().min(todo.len()).max(1)
        } else {
            1
        };
        let space = &self.space;
        let todo_ref = &todo;
        let results: Vec<Result<Vec<Option<Priced>>, GraphError>> = if workers == 1 {
            let m = &mut self.measurers[0];
            vec![
                todo.iter()
                    .map(|c| price_one(m, space, c, &hopeless))
                    .collect(),
            ]
        } else {
            std::thread::scope(|s| {
                let handles: Vec<_> = self
                    .measurers
                    .iter_mut()
                    .take(workers)
                    .enumerate()
                    .map(|(w, m)| {
                        s.spawn(move || {
                            todo_ref
                                .iter()
                                .skip(w)
                                .step_by(workers)
                                .map(|c| price_one(m, space, c, &hopeless))
                                .collect()
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                    .collect()
            })
        };
        let mut answers: Vec<Option<Option<Priced>>> = vec![None; todo.len()];
        for (w, batch) in results.into_iter().enumerate() {
            for (k, f) in batch?.into_iter().enumerate() {
                answers[w + k * workers] = Some(f);
            }
        }
        for (c, f) in todo.into_iter().zip(answers) {
            let f = f.expect("every plan priced");
            self.stats.evaluated += 1;
            match &f {
                None => self.stats.refused += 1,
                Some(Priced::Bounded(_)) => self.stats.stopped_early += 1,
                Some(Priced::Full(_)) => {}
            }
            self.seen.insert(key(c).to_vec(), f);
        }
        Ok(choices
            .iter()
            .map(|c| match &self.seen[key(c)] {
                Some(Priced::Full(f)) => Some(f.clone()),
                _ => None,
            })
            .collect())
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
            for g in self.space.decisions().collect::<Vec<_>>() {
                let tries: Vec<Choice> = (0..self.space.options[g].len() as u16)
                    .filter(|&o| o != best[g])
                    .map(|o| {
                        let mut c = best.clone();
                        c[g] = o;
                        c
                    })
                    .collect();
                changed |= self.keep_best(&tries, &mut best, &mut best_f, budget)?;
            }
            // Families: the decisions that share a layout now move together
            // (the five column projections of a block, say), to each layout
            // they all can take: one decision at a time cannot leave a plan
            // whose parts only pay off together.
            for family in self.families(&best) {
                let first = family[0];
                let tries: Vec<Choice> = self.space.options[first]
                    .iter()
                    .filter(|&l| l != self.space.layout(first, &best))
                    .filter_map(|l| {
                        let mut c = best.clone();
                        for &g in &family {
                            c[g] = self.space.options[g].iter().position(|m| m == l)? as u16;
                        }
                        Some(c)
                    })
                    .collect();
                changed |= self.keep_best(&tries, &mut best, &mut best_f, budget)?;
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

impl Evaluator<'_> {
    /// Prices `tries` and keeps in `best` the best of them that beats it
    /// (the earliest on a tie); whether one did.
    fn keep_best(
        &mut self,
        tries: &[Choice],
        best: &mut Choice,
        best_f: &mut Figures,
        budget: Option<u64>,
    ) -> Result<bool, GraphError> {
        let mut changed = false;
        let priced = self.price_all(tries, Some((best_f, budget)))?;
        for (c, f) in tries.iter().zip(priced) {
            if let Some(f) = f
                && better(&f, best_f, budget)
            {
                *best = c.clone();
                *best_f = f;
                changed = true;
            }
        }
        Ok(changed)
    }

    /// The groups of two or more decisions that `choice` gives one fixed
    /// layout, in order of their first decision.
    fn families(&self, choice: &Choice) -> Vec<Vec<usize>> {
        let mut families: Vec<Vec<usize>> = Vec::new();
        for g in self.space.decisions() {
            let l = self.space.layout(g, choice);
            if *l == Layout::Free {
                continue;
            }
            match families
                .iter_mut()
                .find(|f| self.space.layout(f[0], choice) == l)
            {
                Some(f) => f.push(g),
                None => families.push(vec![g]),
            }
        }
        families.retain(|f| f.len() > 1);
        families
    }
}

/// A plan as the cache knows it: groups added after it was made are free
/// in it, as in every plan that leaves them free.
fn key(c: &[u16]) -> &[u16] {
    &c[..c.iter().rposition(|&o| o != 0).map_or(0, |i| i + 1)]
}

/// One plan on one copy of the graph.
fn price_one(
    m: &mut Measurer<'_>,
    space: &Space,
    c: &Choice,
    hopeless: &(dyn Fn(&Bound) -> bool + Sync),
) -> Result<Option<Priced>, GraphError> {
    space.apply(&mut m.graph, c)?;
    match m.measure_unless(hopeless) {
        Ok(f) => Ok(Some(f)),
        // A combination the rules reject is no plan; the search moves on.
        Err(GraphError::Rule { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}
