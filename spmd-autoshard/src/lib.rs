//! Automatic sharding: given a graph, a mesh and a memory budget, choose
//! the plan, the layouts of the graph's parameters and data inputs, that
//! makes one training step cheapest under a cost model of compute,
//! communication and memory.
//!
//! - The **decisions** are the graph's leaves, with layers that repeat
//!   decided once ([`space`]); every other tensor's layout, and every
//!   collective, is what spmd's own propagation and reshard plans derive
//!   from them, forward and backward. No strategy is hand-written, and an op
//!   without a rule is refused when the graph loads.
//! - The **price** of a plan ([`measure`]) is its modelled step time, with
//!   its per-device memory checked against the budget; the constants are
//!   those of [`cost`], documented with their sources in `docs/autoshard.md`.
//! - The **search** ([`search`]) descends from each [`baselines`] plan and
//!   from the unannotated graph, and keeps the best; the baselines are
//!   reported beside it, priced by the same model.
//!
//! ```
//! use spmd_autoshard::{Options, autoshard};
//! use spmd_graph::json::GraphFile;
//!
//! let text = include_str!("../../spmd-graph/graphs/hf/llama.json");
//! let file: GraphFile = serde_json::from_str(text)?;
//! let mut options = Options::new(vec![4]);
//! options.memory = Some(1 << 30);
//! let outcome = autoshard(&file, &spmd_ops::builtins(), &options, &mut |_| {})?;
//! assert!(outcome.figures.memory.total <= 1 << 30);
//! // Never worse than the best baseline that fits.
//! for b in outcome.baselines.iter().filter_map(|b| b.figures.as_ref().ok()) {
//!     assert!(b.memory.total > 1 << 30 || outcome.figures.step_time <= b.step_time);
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]

pub mod baselines;
pub mod cost;
pub mod measure;
pub mod report;
pub mod search;
pub mod solver;
pub mod space;

use std::collections::BTreeSet;
use std::time::Instant;

use serde::Serialize;
use spmd_core::Registry;
use spmd_graph::annotations::{self, AnnotationFile};
use spmd_graph::json::{self, GraphFile};
use spmd_graph::{DType, Graph, GraphError, TensorId};

use crate::space::Choice;

pub use cost::{Collective, CostModel, Device};
pub use measure::{CollectiveCost, Figures, Measurer, Memory};
pub use search::SearchStats;
pub use space::{Layout, Space};

/// What can go wrong choosing a plan.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AutoshardError {
    /// The graph (or the pins) could not be read, built or propagated.
    #[error(transparent)]
    Graph(#[from] GraphError),
    /// No plan the search met fits the budget.
    #[error(
        "no plan fits {budget} per device: the smallest plan found needs {smallest} ({plan})",
        budget = bytes(*budget), smallest = bytes(*smallest)
    )]
    NoPlanFits {
        budget: u64,
        /// The least memory per device of any plan priced, bytes.
        smallest: u64,
        /// That plan, in words.
        plan: String,
    },
    /// The rules rejected every plan the search tried (even the one with
    /// no annotation).
    #[error("the rules refuse every one of the {plans} plans tried")]
    AllRefused { plans: usize },
    #[error("the mesh {mesh:?} has {problem}")]
    BadMesh { mesh: Vec<usize>, problem: String },
}

/// `24GiB`, `80GB`, `512MiB`, `1.5TiB`, `1000000`: bytes.
pub fn parse_bytes(text: &str) -> std::result::Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let n: f64 = number.trim().parse().map_err(|_| {
        format!("`{text}` is not a size (expected a number and a unit, like 24GiB)")
    })?;
    let scale: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        "kib" => 1024.0,
        "mib" => 1024f64.powi(2),
        "gib" => 1024f64.powi(3),
        "tib" => 1024f64.powi(4),
        u => {
            return Err(format!(
                "unknown unit `{u}` in `{text}` (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)"
            ));
        }
    };
    let bytes = n * scale;
    if !(bytes.is_finite() && bytes >= 1.0) {
        return Err(format!("`{text}`: a budget must be at least one byte"));
    }
    Ok(bytes as u64)
}

/// `1.50 GiB`, `12.0 MiB`, `512 B`.
pub fn bytes(b: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if b < 1024 {
        return format!("{b} B");
    }
    let mut v = b as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.2} {}", UNITS[u])
}

/// What to plan for.
#[derive(Clone, Debug)]
pub struct Options {
    /// The device mesh (replaces the graph's).
    pub mesh: Vec<usize>,
    /// Bytes per device the plan must fit in (`None`: no limit).
    pub memory: Option<u64>,
    pub device: Device,
    /// The element type of activations, parameters and messages (`None`:
    /// the graph's).
    pub dtype: Option<DType>,
    /// The fraction of peak FLOP/s an op reaches.
    pub efficiency: f64,
    /// Layouts the user fixes: the search fills in the rest.
    pub pins: Option<AnnotationFile>,
    /// How many of the best role-built plans the search descends from (at
    /// least 1): more finds better plans on rugged graphs, at a descent's
    /// cost each.
    pub starts: usize,
    /// Branch-and-bound nodes the MIP solver may search (`0`: no solver).
    /// Where a solve ends depends on this, not on the machine's speed.
    pub solver_nodes: u64,
    /// Seconds the MIP solver may take (`0`: no solver): a safety net, met
    /// only where the node limit is not. A solve it cuts short depends on
    /// the machine's speed, and so may the plan; the report says so.
    pub solver_time: f64,
    /// The largest program (columns) the solver is given.
    pub solver_columns: usize,
}

impl Options {
    pub fn new(mesh: Vec<usize>) -> Options {
        Options {
            mesh,
            memory: None,
            device: Device::h100(),
            dtype: None,
            efficiency: 0.6,
            pins: None,
            starts: 1,
            solver_nodes: Options::SOLVER_NODES,
            solver_time: Options::SOLVER_TIME,
            solver_columns: Options::SOLVER_COLUMNS,
        }
    }

    /// The default of [`Options::solver_nodes`]. The programs here are
    /// mostly solved at the root; past it, the tree improves solutions
    /// little and slowly (OPT's budgeted program on `[2, 2]` needs 13,000
    /// nodes and 23 s to close a gap 500 nodes leave at 0.1% of the
    /// solution).
    pub const SOLVER_NODES: u64 = 500;
    /// The default of [`Options::solver_time`], seconds: far beyond any
    /// solve of a program of [`Options::SOLVER_COLUMNS`] here (at most
    /// about 5 s), so that only a much slower machine meets it.
    pub const SOLVER_TIME: f64 = 60.0;
    /// The default of [`Options::solver_columns`]: about the largest
    /// programs HiGHS solves in a few seconds here (the 2-layer Llama on
    /// `[2, 2]`: 56,990 columns, 0.2 s without a budget and 2–4 s under
    /// one).
    pub const SOLVER_COLUMNS: usize = 60_000;
}

/// A baseline, priced, or why it does not apply.
#[derive(Clone, Debug, Serialize)]
pub struct BaselineResult {
    pub name: &'static str,
    #[serde(serialize_with = "report::ok_or_reason")]
    pub figures: Result<Figures, String>,
    /// Its plan, when it applies.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan: Option<AnnotationFile>,
}

/// The version of the `--json` report's schema (`docs/autoshard.md`).
pub const SCHEMA_VERSION: u32 = 1;

/// One decision of the chosen plan, in words.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Decision {
    /// The plan-file pattern of the leaves decided together.
    pub tensors: String,
    /// `free`, a layout such as `[0, -1]`, or `stored [0, -1]`.
    pub layout: String,
}

/// The chosen plan and everything the report says of it.
#[derive(Clone, Debug, Serialize)]
pub struct Outcome {
    pub schema_version: u32,
    pub mesh: Vec<usize>,
    pub device: Device,
    /// The fraction of peak an op reaches.
    pub efficiency: f64,
    /// Per mesh dim: whether its groups stay inside a node.
    pub intra_node: Vec<bool>,
    pub dtype: DType,
    pub memory_budget: Option<u64>,
    /// The plan file (`spmd propagate --plan` reads it).
    pub plan: AnnotationFile,
    /// The chosen plan's decisions in words.
    pub decisions: Vec<Decision>,
    /// Tensors the plan pins beyond its decisions, as the solver's
    /// solution lays them out, when the plan descends from it (see
    /// `docs/autoshard.md`): produced tensors, and leaves laid out unlike
    /// the rest of their decision; 0 otherwise.
    pub solver_pins: usize,
    pub figures: Figures,
    /// A lower bound on any plan's step time (perfectly split arithmetic,
    /// no communication), seconds.
    pub step_time_bound: f64,
    /// How far the plan's step time is above the bound, as a fraction of it.
    pub gap: f64,
    /// The MIP solver's lower bound on every plan's step time
    /// ([`solver`]), or why there is none.
    #[serde(serialize_with = "report::ok_or_reason")]
    pub solver: Result<solver::SolverBound, String>,
    pub baselines: Vec<BaselineResult>,
    pub search: SearchStats,
    /// Seconds the whole call took, graph building included.
    pub seconds: f64,
}

impl Outcome {
    /// How far the plan's step time is above the lower bound, as a fraction
    /// of the bound.
    pub fn gap(&self) -> f64 {
        (self.figures.step_time - self.step_time_bound)
            / self.step_time_bound.max(f64::MIN_POSITIVE)
    }
}

/// Chooses the plan for `file` (see the crate docs). `progress` hears a line
/// per search pass.
pub fn autoshard(
    file: &GraphFile,
    registry: &Registry,
    options: &Options,
    progress: &mut dyn FnMut(&str),
) -> Result<Outcome, AutoshardError> {
    let started = Instant::now();
    if options.mesh.is_empty() || options.mesh.contains(&0) {
        return Err(AutoshardError::BadMesh {
            mesh: options.mesh.clone(),
            problem: if options.mesh.is_empty() {
                "no dims".into()
            } else {
                "a dim of size 0".into()
            },
        });
    }
    let mut file = file.clone();
    file.mesh = options.mesh.clone();
    // The graph's own annotations are pins too.
    let graph_pins: Vec<annotations::Annotation> = file
        .tensors
        .iter()
        .filter(|t| t.dims_mapping.is_some())
        .map(|t| annotations::Annotation {
            tensors: t.name.clone(),
            dims_mapping: t.dims_mapping.clone(),
            partial_dims: t.partial_dims.clone(),
            priority: t.priority,
            read: t.read.clone(),
            read_by: t.read_by.clone(),
        })
        .collect();
    let mut pins = options.pins.clone().unwrap_or(AnnotationFile {
        mesh: None,
        annotations: Vec::new(),
    });
    pins.mesh = None;
    annotations::apply(&mut file, &pins)?;
    let loaded = json::from_file(&file, registry)?;
    let dtype = options.dtype.unwrap_or(loaded.dtype);
    let mut model = CostModel::new(options.device.clone(), loaded.graph.mesh());
    model.efficiency = options.efficiency;
    let measurer = Measurer::new(loaded.graph, registry, loaded.outputs, dtype, model);
    let mut space = Space::new(measurer.graph());
    let mut named = Vec::new();
    for name in baselines::NAMES {
        named.push((
            name,
            baselines::baseline(name, &mut space, measurer.graph()),
        ));
    }
    let free: Choice = vec![0; space.groups.len()];
    let mut eval = search::Evaluator::new(measurer, space);
    let baseline_results = price_baselines(&mut eval, named, &options.mesh)?;
    // The cheapest plan priced so far that fits: the baselines, and the
    // plan that leaves every leaf to propagation (replication, mostly).
    // Columns of the solver's program that no plan as cheap sets are
    // left out of it.
    let free_figures = eval.price(&free)?;
    let fits = |f: &&Figures| options.memory.is_none_or(|m| f.memory.total <= m);
    let cutoff = baseline_results
        .iter()
        .filter_map(|b| b.figures.as_ref().ok())
        .chain(free_figures.as_ref())
        .filter(fits)
        .map(|f| f.step_time)
        .min_by(f64::total_cmp);
    // The graph holds only the pins here: the solver bounds every plan.
    let (measurer, space) = eval.annotated(&free)?;
    let solution = if options.solver_time > 0.0 && options.solver_nodes > 0 {
        progress("bounding the step time with the MIP solver (HiGHS)");
        let limits = solver::SolverLimits {
            nodes: options.solver_nodes,
            seconds: options.solver_time,
            columns: options.solver_columns,
        };
        let solution = solver::lower_bound(measurer, options.memory, &limits, cutoff);
        if let Ok(s) = &solution
            && !s.bound.stop.reproducible()
        {
            progress(&format!(
                "HiGHS stopped at its time limit ({} s) before its node limit: its solution \
                 is not used, and on a faster machine the plan may differ",
                options.solver_time
            ));
        }
        solution.map_err(|e| e.to_string())
    } else {
        Err("not asked for".into())
    };
    let graph = measurer.graph();
    let solver_starts = match &solution {
        Ok(s) if !s.leaves.is_empty() => solver_starts(space, graph, s),
        _ => Vec::new(),
    };
    let solver = solution.map(|s| s.bound);
    let mut combinations = baselines::all_combinations(space, graph);
    combinations.insert(0, (Vec::new(), vec![0; space.groups.len()]));
    let (roles, starts): (Vec<Vec<baselines::Role>>, Vec<Vec<u16>>) =
        combinations.into_iter().unzip();

    // Every role combination is priced; the search descends from the best
    // few, and keeps the best plan it reaches. For one start, a combination
    // that cannot beat the best baseline (itself a combination) need not be
    // priced whole.
    let incumbent = baseline_results
        .iter()
        .filter_map(|b| b.figures.as_ref().ok())
        .fold(None::<&Figures>, |best, f| match best {
            Some(b) if !search::better(f, b, options.memory) => Some(b),
            _ => Some(f),
        })
        .cloned();
    // A solution HiGHS proved optimal that prices within 1% of the bound
    // (and no worse than the best baseline) is the answer: no plan is
    // cheaper by more than that, so no descent is worth its time.
    let proven = proven_solution(
        &mut eval,
        &solver,
        &solver_starts,
        incumbent.as_ref(),
        options,
    )?;
    if let Some((_, f)) = &proven {
        progress(&format!(
            "the solver's solution prices at {}, within {:.1}% of its bound: no search needed",
            report::time(f.step_time),
            100.0 * CLOSE_ENOUGH
        ));
    }
    let best = match proven {
        Some(found) => Some(found),
        None => search_from(
            &mut eval,
            starts,
            roles,
            solver_starts,
            incumbent.as_ref(),
            options,
            progress,
        )?,
    };
    let stats = eval.stats.clone();
    let (measurer, space) = eval.into_parts();
    let Some((choice, figures)) = best else {
        return Err(AutoshardError::AllRefused {
            plans: stats.evaluated,
        });
    };
    let describe = |c: &[u16]| -> Vec<Decision> {
        space
            .decisions()
            .map(|g| (g, &space.groups[g]))
            .map(|(g, group)| Decision {
                tensors: group.pattern.clone(),
                layout: space.layout(g, c).describe(),
            })
            .collect()
    };
    if let Some(budget) = options.memory
        && figures.memory.total > budget
    {
        // The search keeps the least memory when nothing fits.
        let plan = describe(&choice)
            .into_iter()
            .filter(|d| d.layout != "free")
            .map(|d| format!("{}: {}", d.tensors, d.layout))
            .collect::<Vec<_>>()
            .join(", ");
        return Err(AutoshardError::NoPlanFits {
            budget,
            smallest: figures.memory.total,
            plan: if plan.is_empty() {
                "no annotation".into()
            } else {
                plan
            },
        });
    }
    let mut annotations = graph_pins;
    annotations.extend(pins.annotations.iter().cloned());
    annotations.extend(space.annotations(measurer.graph(), &choice));
    let bound = measurer.step_time_bound();
    Ok(Outcome {
        schema_version: SCHEMA_VERSION,
        mesh: options.mesh.clone(),
        device: options.device.clone(),
        efficiency: measurer.model.efficiency,
        intra_node: measurer.model.intra_node.clone(),
        dtype,
        memory_budget: options.memory,
        plan: AnnotationFile {
            mesh: Some(options.mesh.clone()),
            annotations,
        },
        decisions: describe(&choice),
        solver_pins: space
            .groups
            .iter()
            .enumerate()
            .filter(|&(g, group)| !group.decision && *space.layout(g, &choice) != Layout::Free)
            .map(|(_, group)| group.tensors.len())
            .sum(),
        gap: (figures.step_time - bound) / bound.max(f64::MIN_POSITIVE),
        figures,
        step_time_bound: bound,
        solver,
        baselines: baseline_results,
        search: stats,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// The search: every role combination priced, a descent from the best
/// (`options.starts` of them), then from the best-priced start of each
/// family of the solver's starts. The best plan reached, `None` when the
/// rules refuse every one.
fn search_from(
    eval: &mut search::Evaluator<'_>,
    starts: Vec<Choice>,
    roles: Vec<Vec<baselines::Role>>,
    solver_starts: Vec<Family>,
    incumbent: Option<&Figures>,
    options: &Options,
    progress: &mut dyn FnMut(&str),
) -> Result<Option<(Choice, Figures)>, AutoshardError> {
    let prune = incumbent
        .filter(|_| options.starts <= 1)
        .map(|f| (f, options.memory));
    let priced = eval.price_all(&starts, prune)?;
    let mut ranked: Vec<(Vec<u16>, Figures, BTreeSet<baselines::Role>)> = starts
        .into_iter()
        .zip(priced)
        .zip(roles)
        .filter_map(|((c, f), r)| Some((c, f?, r.into_iter().collect())))
        .collect();
    let chosen = choose_starts(&ranked, options.starts, options.memory);
    progress(&format!(
        "{} role combinations priced; descending from the best {}",
        eval.stats.evaluated,
        chosen.len()
    ));
    let mut best: Option<(Vec<u16>, Figures)> = None;
    for i in chosen {
        let start = std::mem::take(&mut ranked[i].0);
        if let Some((c, f)) = eval.descend(start, options.memory, progress)?
            && best
                .as_ref()
                .is_none_or(|(_, b)| search::better(&f, b, options.memory))
        {
            best = Some((c, f));
        }
    }
    // The best-priced start of each family of the solver's starts is
    // descended from: a start with read layouts may price best and yet
    // descend to worse than the plain family's best.
    for family in solver_starts {
        let mut solver_best: Option<(Choice, Figures)> = None;
        for start in family.starts {
            if let Some(f) = eval.price(&start)?
                && solver_best
                    .as_ref()
                    .is_none_or(|(_, b)| search::better(&f, b, options.memory))
            {
                solver_best = Some((start, f));
            }
        }
        let Some((start, f)) = solver_best else {
            continue;
        };
        if !family.descend {
            progress(&format!(
                "the solver's solution, every tensor pinned, prices at {}, {} per device",
                report::time(f.step_time),
                bytes(f.memory.total)
            ));
            if best
                .as_ref()
                .is_none_or(|(_, b)| search::better(&f, b, options.memory))
            {
                best = Some((start, f));
            }
            continue;
        }
        progress(&format!(
            "the solver's plan prices at {}, {} per device; descending from it",
            report::time(f.step_time),
            bytes(f.memory.total)
        ));
        if let Some((c, f)) = eval.descend(start, options.memory, progress)?
            && best
                .as_ref()
                .is_none_or(|(_, b)| search::better(&f, b, options.memory))
        {
            best = Some((c, f));
        }
    }
    Ok(best)
}

/// A plan that prices within this fraction of the solver's bound is as
/// good as the search could make it: no plan is cheaper than the bound, so
/// none is better by more.
const CLOSE_ENOUGH: f64 = 0.01;

/// The solver's solution, every tensor pinned as it lays it out, when
/// HiGHS proved it optimal and it is as good as the search could do: it
/// fits the budget, prices within [`CLOSE_ENOUGH`] of the bound (the
/// program is a relaxation of the pricing, so a plan the program
/// undercharges prices above it and is searched from instead), and no
/// baseline is better.
fn proven_solution(
    eval: &mut search::Evaluator<'_>,
    solver: &Result<solver::SolverBound, String>,
    families: &[Family],
    best_baseline: Option<&Figures>,
    options: &Options,
) -> Result<Option<(Choice, Figures)>, AutoshardError> {
    let Ok(bound) = solver else {
        return Ok(None);
    };
    let exact = families
        .iter()
        .find(|f| !f.descend)
        .and_then(|f| f.starts.first());
    let (true, Some(exact)) = (bound.optimal, exact) else {
        return Ok(None);
    };
    let Some(f) = eval.price(exact)? else {
        return Ok(None);
    };
    let fits = options.memory.is_none_or(|m| f.memory.total <= m);
    let near = f.step_time <= bound.bound * (1.0 + CLOSE_ENOUGH);
    let no_better_baseline = best_baseline.is_none_or(|b| !search::better(b, &f, options.memory));
    Ok((fits && near && no_better_baseline).then(|| (exact.clone(), f)))
}

/// The starts the solver's solution `s` gives, their pins added to
/// `space`; which prices best depends on the graph:
/// - its leaves as the search lays out leaves (a parameter read in another
///   layout is stored), a decision as its first leaf;
/// - those, and every produced tensor pinned as the solution lays it out,
///   so that propagation follows the solution's strategies (from the
///   leaves alone it may settle a conflict its own way);
/// - those, and each leaf laid out unlike the first of its decision (two
///   layers the solver does not fold, say) pinned on its own;
/// - where the solution's strategies all read a leaf in one layout other
///   than its own, the three again with that leaf given it as its read
///   layout (stored split, gathered where used, even where propagation
///   would let the op read the split).
fn solver_starts(space: &mut Space, graph: &Graph, s: &solver::Solution) -> Vec<Family> {
    let mut families = vec![Family {
        starts: starts_from(space, graph, s, false),
        descend: true,
    }];
    // Where the solution reads leaves otherwise than it lays them out, the
    // same starts again with those leaves given read layouts: propagation
    // from the data alone may let their ops read them as laid out.
    if s.leaves.iter().any(|l| l.read.is_some()) {
        families.push(Family {
            starts: starts_from(space, graph, s, true),
            descend: true,
        });
    }
    // The solution itself: every tensor pinned as it makes it, and every op
    // given the inputs its strategy reads. Every tensor is pinned, so the
    // descent (which moves leaves' decisions) could change nothing.
    if !s.exact.is_empty() {
        let mut start = space.choice_of(|_| None);
        for e in &s.exact {
            let layout = Layout::Each {
                attr: e.attr.clone(),
                read_by: e.read_by.clone(),
            };
            space.pin(graph, vec![e.tensor], layout);
            start.push(1);
        }
        families.push(Family {
            starts: vec![start],
            descend: false,
        });
    }
    // Each start leaves the other starts' pins free.
    for family in &mut families {
        for start in family.starts.iter_mut() {
            start.resize(space.groups.len(), 0);
        }
        family.starts.dedup();
    }
    families
}

/// Starts of the search from the solver's solution: the best-priced is
/// descended from, or taken as it is.
struct Family {
    starts: Vec<Choice>,
    descend: bool,
}

/// The three starts of [`solver_starts`], with `reads`: leaves the
/// solution's strategies all read in one other layout given it as their
/// read layout.
fn starts_from(space: &mut Space, graph: &Graph, s: &solver::Solution, reads: bool) -> Vec<Choice> {
    let wanted = |t: TensorId| -> Option<Layout> {
        let leaf = s.leaves.iter().find(|l| l.tensor == t)?;
        let split = leaf.attr.dims_mapping.mesh_set() != spmd_core::MeshSet::EMPTY;
        match (split, leaf.read_otherwise, &leaf.read) {
            (_, _, Some(read)) if reads => Some(Layout::Read {
                stored: leaf.attr.clone(),
                read: read.clone(),
            }),
            (true, true, _) => Some(Layout::Fixed {
                attr: leaf.attr.clone(),
                priority: 1,
            }),
            (_, false, _) => Some(Layout::fixed(leaf.attr.clone())),
            (false, true, _) => None,
        }
    };
    let by_decision = space.choice_of(wanted);
    let mut unlike: Vec<(TensorId, Layout)> = Vec::new();
    for g in space.decisions() {
        let first = space.layout(g, &by_decision);
        for &t in &space.groups[g].tensors[1..] {
            match wanted(t) {
                Some(l) if l != *first => unlike.push((t, l)),
                _ => {}
            }
        }
    }
    // Each start: its leaves by decision, then one pin option per group
    // added here.
    let mut starts = [by_decision.clone(), by_decision.clone(), by_decision];
    for p in &s.produced {
        space.pin(graph, p.tensors.clone(), Layout::fixed(p.attr.clone()));
        for (start, on) in starts.iter_mut().zip([0, 1, 1]) {
            start.push(on);
        }
    }
    for (t, l) in unlike {
        space.pin(graph, vec![t], l);
        for (start, on) in starts.iter_mut().zip([0, 0, 1]) {
            start.push(on);
        }
    }
    starts.to_vec()
}

/// Each named baseline priced (or why it does not apply), with its plan.
fn price_baselines(
    eval: &mut search::Evaluator<'_>,
    named: Vec<(&'static str, Result<Vec<u16>, String>)>,
    mesh: &[usize],
) -> Result<Vec<BaselineResult>, AutoshardError> {
    let mut out = Vec::new();
    for (name, choice) in named {
        let figures = match &choice {
            Ok(c) => eval
                .price(c)?
                .ok_or_else(|| "the rules refuse this plan".to_string()),
            Err(reason) => Err(reason.clone()),
        };
        let plan = choice
            .as_ref()
            .ok()
            .filter(|_| figures.is_ok())
            .map(|c| AnnotationFile {
                mesh: Some(mesh.to_vec()),
                annotations: eval.space.annotations(eval.measurer().graph(), c),
            });
        out.push(BaselineResult {
            name,
            figures,
            plan,
        });
    }
    Ok(out)
}

/// Which of the priced role plans (`ranked`: plan, figures, set of roles)
/// the search descends from: `wanted` of them (at least one), for variety
/// the best plan of each set of roles first (a ZeRO-and-sequence plan can
/// lead where a cheaper ZeRO-only start does not), then the rest by rank.
/// Ranks are by [`search::better`]; ties keep the enumeration order.
fn choose_starts(
    ranked: &[(Vec<u16>, Figures, BTreeSet<baselines::Role>)],
    wanted: usize,
    budget: Option<u64>,
) -> Vec<usize> {
    let mut order: Vec<usize> = Vec::new();
    for i in 0..ranked.len() {
        let at = order
            .iter()
            .position(|&j| search::better(&ranked[i].1, &ranked[j].1, budget))
            .unwrap_or(order.len());
        order.insert(at, i);
    }
    let wanted = wanted.max(1).min(order.len());
    let mut chosen: Vec<usize> = Vec::new();
    for &i in &order {
        if chosen.len() < wanted && chosen.iter().all(|&j| ranked[j].2 != ranked[i].2) {
            chosen.push(i);
        }
    }
    for &i in &order {
        if chosen.len() < wanted && !chosen.contains(&i) {
            chosen.push(i);
        }
    }
    chosen
}

#[cfg(test)]
mod parse_bytes_tests {
    use super::parse_bytes;

    #[test]
    fn sizes_take_decimal_and_binary_units() {
        assert_eq!(parse_bytes("24GiB"), Ok(24 << 30));
        assert_eq!(parse_bytes("80GB"), Ok(80_000_000_000));
        assert_eq!(parse_bytes("1.5 KiB"), Ok(1536));
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert!(parse_bytes("24 gigs").unwrap_err().contains("unknown unit"));
        assert!(parse_bytes("GiB").unwrap_err().contains("not a size"));
        assert!(parse_bytes("0GiB").is_err());
    }
}
