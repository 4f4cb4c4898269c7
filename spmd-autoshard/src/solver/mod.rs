//! A lower bound on the modelled step time of every plan, from a
//! mixed-integer program that HiGHS's LPs solve: through a branch and bound
//! of our own, and HiGHS's MIP search where that falls short.
//!
//! The program relaxes the plans the search reaches. Each forward op picks
//! one of its **strategies**: the distinct answers its own rule gives to
//! every way its inputs' dims can take mesh dims (so no strategy is
//! hand-written). Each leaf picks a layout, and a tensor is laid out as its
//! producer's strategy makes it. A plan the search prices makes such choices
//! too, and each term below is at most what [`crate::measure`] charges for
//! the same choices:
//! - **an op**: its forward FLOPs, and twice again on the gradient path,
//!   over the mesh dims its strategy divides the work by; the reduction of
//!   a graph result it leaves partial;
//! - **a tensor, forward**: the dearest reshard from its layout to what a
//!   consumer's strategy needs (a plan reshards once per distinct need, so
//!   the dearest is a floor);
//! - **a tensor, backward**: the dearest reshard of a consumer's gradient
//!   contribution, laid out as that consumer reads the tensor and partial
//!   over the mesh dims the consumer splits that the tensor does not carry,
//!   into the tensor's own layout;
//! - **memory**: each parameter's resident state (its block, its gradient,
//!   Adam's moments, a master copy for 16-bit types) and the activations
//!   the backward reads, at their layouts, within the budget.
//!
//! Layers that repeat are one layer in the program, counted as often (see
//! `Folding`): the bound is then over plans whose repeated layers are
//! laid out alike, as the search's are.
//!
//! Edges are linearised on the marginal polytope: per edge, a continuous
//! `z[a][b]` per pair of producer layout `a` and consumer class `b` (the
//! layout it reads, and that of the gradient it gives back), whose row and
//! column sums are the two sides' choices. One set of pairs carries both
//! passes' reshards of the edge.
//!
//! What the program leaves out makes its optimum smaller, never larger:
//! the backward graph's own adds and reshards beyond one per tensor, and
//! the intermediate tensors' pins (a pinned tensor may take any layout
//! here). What it assumes, as the grad layout rule says: a grad op splits
//! its work as its forward op does. `tests/autoshard.rs` checks the bound
//! against every plan priced on the small graphs.

use rustc_hash::FxHashMap;
use std::time::Instant;

use serde::Serialize;
use spmd_core::{Call, DistAttr, MeshSet, Partial, ReduceType, Spec};
use spmd_graph::reshard::{local_shape, volumes};
use spmd_graph::steps::classify_sized;
use spmd_graph::{Graph, OpId, TensorId};

use crate::measure::{Measurer, collective};
use crate::space::{Layout, layouts, split_attr, splits_evenly};

mod program;
mod solve;
#[cfg(test)]
mod tests;

use program::{Expr, Matrix, Program, Side, add_dearest, edge_costs};
use solve::solve;

/// What the solver says of a graph.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SolverBound {
    /// No plan's modelled step time is below this, seconds (the solver's
    /// dual bound; its optimum when `optimal`).
    pub bound: f64,
    /// The best solution of the program the solver found, seconds.
    pub incumbent: Option<f64>,
    /// Whether the solver proved its optimum (to a relative gap of
    /// [`MIP_GAP`]).
    pub optimal: bool,
    /// Why it stopped.
    pub stop: SolverStop,
    /// The program's size.
    pub columns: usize,
    pub integer_columns: usize,
    pub rows: usize,
    /// Columns left out before the solve: no plan as cheap as the cutoff
    /// (a plan already priced) sets them.
    pub columns_left_out: usize,
    /// Seconds to build the program, and to solve it.
    pub build_seconds: f64,
    pub solve_seconds: f64,
}

/// Why HiGHS stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SolverStop {
    /// It proved its optimum to [`MIP_GAP`].
    Optimal,
    /// It searched [`SolverLimits::nodes`] nodes of its tree.
    NodeLimit,
    /// It ran [`SolverLimits::seconds`]: where it stopped depends on the
    /// machine's speed.
    TimeLimit,
}

impl SolverStop {
    /// Whether the same program stops here on every machine.
    pub fn reproducible(self) -> bool {
        self != SolverStop::TimeLimit
    }

    /// As the report says it.
    pub fn describe(self) -> &'static str {
        match self {
            SolverStop::Optimal => "optimal",
            SolverStop::NodeLimit => "node limit",
            SolverStop::TimeLimit => "time limit",
        }
    }
}

/// How far HiGHS may go. The node limit is the one a solve is meant to
/// meet: it ends the same way on every machine, and so does the plan. The
/// time limit is a safety net; a solve it cuts short depends on the
/// machine's speed, and so may the plan.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SolverLimits {
    /// Branch-and-bound nodes.
    pub nodes: u64,
    /// Seconds HiGHS may take.
    pub seconds: f64,
    /// The largest program (columns) built.
    pub columns: usize,
}

/// A leaf's layout in the solver's solution.
#[derive(Clone, Debug, PartialEq)]
pub struct LeafLayout {
    pub tensor: TensorId,
    pub attr: DistAttr,
    /// Whether a consumer's strategy reads it in another layout (a stored
    /// parameter gathered before use, say).
    pub read_otherwise: bool,
    /// The layout every consumer's strategy reads it in, when they agree
    /// on one that is not `attr` (and not partial).
    pub read: Option<DistAttr>,
}

/// A produced tensor's layout in the solver's solution, shared by the
/// copies of a layer that repeats.
#[derive(Clone, Debug, PartialEq)]
pub struct ProducedLayout {
    /// The tensor, and its copies in the folded layers.
    pub tensors: Vec<TensorId>,
    /// The layout every consumer's strategy reads it in, when they agree;
    /// else the one its producer's strategy makes.
    pub attr: DistAttr,
}

/// The bound, and the plan the solver's best solution describes.
#[derive(Clone, Debug)]
pub struct Solution {
    pub bound: SolverBound,
    /// Per leaf the solver laid out (pins included), when the solver
    /// proved its optimum (a solution cut short by the time limit depends
    /// on the machine's speed, and the plan would too).
    pub leaves: Vec<LeafLayout>,
    /// Per produced tensor, when the solver proved its optimum: pinned
    /// with the leaves, they make propagation follow the solution's
    /// strategies, which it need not from the leaves alone.
    pub produced: Vec<ProducedLayout>,
    /// Per unannotated tensor, when the solver proved its optimum: the
    /// layout the solution makes it in, and each reader's layout of it
    /// where that differs. Given all, every op is given exactly the inputs
    /// of its strategy.
    pub exact: Vec<ExactLayout>,
}

/// A tensor as the solver's solution makes it and each of its readers
/// reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct ExactLayout {
    pub tensor: TensorId,
    pub attr: DistAttr,
    /// The readers whose strategy reads it otherwise (and not partial).
    pub read_by: Vec<(OpId, DistAttr)>,
}

/// The relative gap at which the branches and HiGHS stop: the solution is
/// then within half of the 1% the plan is judged at.
pub const MIP_GAP: f64 = 5e-3;

/// Ops whose inputs offer more assignments than this are enumerated one
/// input at a time (every mesh dim on dims of one input).
pub const MAX_ASSIGNMENTS: usize = 4096;

/// What went wrong building or solving the program.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SolverError {
    #[error("op `{op}`: its rule answers no layout of its inputs, not even replicated")]
    NoStrategy { op: String },
    #[error("the memory budget admits no plan even in the relaxed program")]
    Infeasible,
    #[error(
        "HiGHS found no bound above the compute bound within {} nodes and {} s",
        limits.nodes,
        limits.seconds
    )]
    NoBound { limits: SolverLimits },
    #[error(
        "the program would have about {columns} columns, more than the {limit} it is built for \
         (raise --solver-columns)"
    )]
    TooLarge { columns: usize, limit: usize },
    #[error("HiGHS stopped with {0}")]
    Solver(String),
}

/// One answer of an op's rule.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Strategy {
    needs: Vec<DistAttr>,
    made: Vec<DistAttr>,
}

impl Strategy {
    /// The mesh dims the strategy splits or reduces over.
    fn used(&self) -> MeshSet {
        self.needs
            .iter()
            .chain(&self.made)
            .fold(MeshSet::EMPTY, |s, a| {
                s.union(a.dims_mapping.mesh_set()).union(a.partial.dims())
            })
    }

    /// How many blocks the op's work is cut into, as `measure` counts it.
    fn divide(&self, graph: &Graph) -> usize {
        let used = self.made.iter().fold(MeshSet::EMPTY, |s, a| {
            s.union(a.dims_mapping.mesh_set()).union(a.partial.dims())
        });
        graph.mesh().product(used).max(1)
    }
}

/// Every distinct answer of op `o`'s rule to its inputs' even splits.
fn strategies(graph: &Graph, o: OpId) -> Vec<Strategy> {
    let mesh = graph.mesh();
    let m = mesh.rank();
    let shapes: Vec<&[usize]> = graph.inputs(o).iter().map(|&t| graph.shape(t)).collect();
    let out_shapes: Vec<&[usize]> = graph.outputs(o).iter().map(|&t| graph.shape(t)).collect();
    // Every (input, dim) a mesh dim may split.
    let slots: Vec<(usize, usize)> = shapes
        .iter()
        .enumerate()
        .flat_map(|(k, s)| {
            s.iter()
                .enumerate()
                .filter(|&(_, &e)| e > 1)
                .map(move |(d, _)| (k, d))
        })
        .collect();
    let mut assignments: Vec<Vec<Option<(usize, usize)>>> = Vec::new();
    let mut push_all = |slots: &[(usize, usize)]| {
        let base = slots.len() + 1;
        let Some(count) = base.checked_pow(m as u32) else {
            return;
        };
        for code in 0..count {
            let mut c = code;
            let a: Vec<Option<(usize, usize)>> = (0..m)
                .map(|_| {
                    let i = c % base;
                    c /= base;
                    (i < slots.len()).then(|| slots[i])
                })
                .collect();
            assignments.push(a);
        }
    };
    let whole = (slots.len() + 1).checked_pow(m as u32);
    if whole.is_some_and(|n| n <= MAX_ASSIGNMENTS) {
        push_all(&slots);
    } else {
        for k in 0..shapes.len() {
            let own: Vec<(usize, usize)> = slots.iter().copied().filter(|s| s.0 == k).collect();
            push_all(&own);
        }
    }
    let mut seen: FxHashMap<Strategy, ()> = FxHashMap::default();
    let mut out = Vec::new();
    let mut result = spmd_core::RuleResult::default();
    for a in assignments {
        let mut on: Vec<Vec<Vec<spmd_core::MeshDim>>> =
            shapes.iter().map(|s| vec![Vec::new(); s.len()]).collect();
        for (md, slot) in a.iter().enumerate() {
            if let Some((k, d)) = slot {
                on[*k][*d].push(md as spmd_core::MeshDim);
            }
        }
        let even = on.iter().zip(&shapes).all(|(dims, shape)| {
            dims.iter().zip(shape.iter()).all(|(ms, &e)| {
                let n: usize = ms.iter().map(|&d| mesh.dim(d)).product();
                splits_evenly(e, n)
            })
        });
        if !even {
            continue;
        }
        let attrs: Vec<DistAttr> = on.iter().map(|dims| split_attr(dims)).collect();
        let specs: Vec<Spec<'_>> = shapes
            .iter()
            .zip(&attrs)
            .map(|(s, a)| Spec::new(s, a))
            .collect();
        let call = Call::forward_with_output_shapes(mesh, &specs, &out_shapes);
        if graph.rule(o).infer_into(&call, None, &mut result).is_err() {
            continue;
        }
        let s = Strategy {
            needs: result.inputs.iter().cloned().collect(),
            made: result.outputs.iter().cloned().collect(),
        };
        if seen.insert(s.clone(), ()).is_none() {
            out.push(s);
        }
    }
    out
}

/// Layers that repeat, folded: per op and per tensor, the one the program
/// keeps for it (itself unless it belongs to a folded copy of a layer).
///
/// A layer is a run of ops, in graph order, from the first that reads a
/// parameter of layer index `i` (`layers.i.`) to the next layer's first.
/// Layers after the first and before the last whose ops match the second
/// one's (signatures, and inputs wired alike: from the same layer at the
/// same place, from the layer before, the same leaf pattern, or the very
/// same tensor) are copies of it.
struct Folding {
    op: Vec<OpId>,
    tensor: Vec<TensorId>,
}

/// Where an op of a layer reads an input from.
#[derive(PartialEq, Eq)]
enum Wire {
    Same(usize, usize),
    Previous(usize, usize),
    Leaf(String),
    Other(TensorId),
}

fn fold(graph: &Graph) -> Folding {
    let mut folding = Folding {
        op: graph.op_ids().collect(),
        tensor: graph.tensor_ids().collect(),
    };
    let layer_of = |t: TensorId| -> Option<usize> {
        let info = graph.tensor(t);
        if !info.param {
            return None;
        }
        info.name
            .split('.')
            .find(|c| !c.is_empty() && c.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|c| c.parse().ok())
    };
    let mut layers: Vec<Vec<OpId>> = Vec::new();
    let mut current = None;
    for o in graph.op_ids() {
        let i = graph.inputs(o).iter().find_map(|&t| layer_of(t));
        if i.is_some() && i != current {
            current = i;
            layers.push(Vec::new());
        }
        if let Some(layer) = layers.last_mut() {
            layer.push(o);
        }
    }
    if layers.len() < 4 {
        return folding;
    }
    let mut place: Vec<Option<(usize, usize)>> = vec![None; graph.ops().len()];
    for (l, ops) in layers.iter().enumerate() {
        for (j, &o) in ops.iter().enumerate() {
            place[o.index()] = Some((l, j));
        }
    }
    let wiring = |l: usize| -> Vec<(u32, Vec<Wire>)> {
        layers[l]
            .iter()
            .map(|&o| {
                let wires = graph
                    .inputs(o)
                    .iter()
                    .map(|&t| {
                        let info = graph.tensor(t);
                        let Some(p) = info.producer else {
                            return Wire::Leaf(crate::space::pattern_of(&info.name));
                        };
                        let out = graph.outputs(p).iter().position(|&x| x == t).unwrap_or(0);
                        match place[p.index()] {
                            Some((pl, j)) if pl == l => Wire::Same(j, out),
                            Some((pl, j)) if pl + 1 == l => Wire::Previous(j, out),
                            _ => Wire::Other(t),
                        }
                    })
                    .collect();
                (graph.signature(o), wires)
            })
            .collect()
    };
    let model = wiring(1);
    for l in 2..layers.len() - 1 {
        if layers[l].len() != layers[1].len() || wiring(l) != model {
            continue;
        }
        for (&copy, &kept) in layers[l].iter().zip(&layers[1]) {
            folding.op[copy.index()] = kept;
            for (&x, &y) in graph.outputs(copy).iter().zip(graph.outputs(kept)) {
                folding.tensor[x.index()] = y;
            }
            for (&x, &y) in graph.inputs(copy).iter().zip(graph.inputs(kept)) {
                if graph.tensor(x).producer.is_none() && x != y {
                    folding.tensor[x.index()] = y;
                }
            }
        }
    }
    folding
}

/// A consumer's class on an edge: the layout its strategy reads the
/// tensor in, and (where a gradient flows back) the layout of its
/// gradient contribution, partial over the mesh dims the strategy splits
/// that the read layout does not carry. One pair of columns per class
/// serves both passes' reshards.
type Read = (DistAttr, Option<DistAttr>);

/// Prices reshards, each distinct one once.
struct Reshards<'a, 'r> {
    m: &'a Measurer<'r>,
    /// Per shape, its index in `seen`'s keys.
    shapes: FxHashMap<Vec<usize>, u32>,
    seen: FxHashMap<(DistAttr, DistAttr, u32), f64>,
}

impl Reshards<'_, '_> {
    fn time(&mut self, from: &DistAttr, to: &DistAttr, shape: &[usize]) -> f64 {
        if from == to {
            return 0.0;
        }
        let next = self.shapes.len() as u32;
        let id = match self.shapes.get(shape) {
            Some(&id) => id,
            None => *self.shapes.entry(shape.to_vec()).or_insert(next),
        };
        let key = (from.clone(), to.clone(), id);
        if let Some(&t) = self.seen.get(&key) {
            return t;
        }
        let mesh = self.m.mesh();
        let steps = classify_sized(from, to, shape, mesh.shape());
        let bytes = volumes(&steps, from, shape, mesh, self.m.dtype());
        let t = steps
            .iter()
            .zip(bytes)
            .filter_map(|(s, b)| {
                let (kind, dims) = collective(s)?;
                Some(self.m.model.collective_time(kind, mesh, &dims, b))
            })
            .sum();
        self.seen.insert(key, t);
        t
    }
}

/// An op reading a tensor: the tensor, the op, the input.
type Edge = (TensorId, OpId, usize);

/// What an edge's matrix depends on: the tensor's shape, and the classes
/// of either side.
type EdgeKind<'g> = (&'g [usize], Vec<DistAttr>, Vec<Read>);

/// Builds and solves the program for the graph of `m` as annotated (its
/// annotated leaves keep their layouts), under `budget` bytes per device,
/// within `limits`. `cutoff` is the step time of a plan known to fit (one
/// the search priced): the columns no plan as cheap sets are left out
/// before HiGHS sees the program, which keeps its optimum and bound.
pub fn lower_bound(
    m: &Measurer<'_>,
    budget: Option<u64>,
    limits: &SolverLimits,
    cutoff: Option<f64>,
) -> Result<Solution, SolverError> {
    let started = Instant::now();
    let graph = m.graph();
    let mesh = graph.mesh();
    let bytes = m.dtype().bytes();
    let mut p = Program::default();
    let mut reshards = Reshards {
        m,
        shapes: FxHashMap::default(),
        seen: FxHashMap::default(),
    };
    let local = |t: TensorId, a: &DistAttr| -> u64 {
        local_shape(graph.shape(t), a, mesh)
            .iter()
            .product::<usize>() as u64
    };
    // Per tensor: its layout classes (what its producer or its own choice
    // makes).
    let mut layout_of: Vec<Side<DistAttr>> =
        (0..graph.tensors().len()).map(|_| Side::new()).collect();
    let mut memory: Expr = Vec::new();
    let saved_base: Vec<bool> = {
        let mut v = vec![false; graph.tensors().len()];
        for t in graph.tensor_ids() {
            if m.saved[t.index()] && !graph.tensor(t).param {
                v[m.storage[t.index()].index()] = true;
            }
        }
        v
    };

    // Layers that repeat are one layer here, counted as often.
    let folding = fold(graph);
    let mut copies = vec![0usize; graph.tensors().len()];
    for t in graph.tensor_ids() {
        copies[folding.tensor[t.index()].index()] += 1;
    }
    let mut op_copies = vec![0usize; graph.ops().len()];
    for o in graph.op_ids() {
        op_copies[folding.op[o.index()].index()] += 1;
    }

    // Leaves: a layout each.
    for t in graph.tensor_ids() {
        let info = graph.tensor(t);
        if info.producer.is_some() || folding.tensor[t.index()] != t {
            continue;
        }
        let options: Vec<DistAttr> = match &info.annotation {
            Some(a) => vec![a.clone()],
            None if info.consumers.is_empty() || graph.shape(t).is_empty() => {
                vec![DistAttr::replicated(graph.shape(t).len())]
            }
            None => layouts(graph.shape(t), mesh.shape(), false)
                .into_iter()
                .filter_map(|l| match l {
                    Layout::Fixed { attr, .. } => Some(attr),
                    Layout::Free | Layout::Read { .. } | Layout::Each { .. } => None,
                })
                .collect(),
        };
        let cols = p.choice(options.len());
        for (a, &c) in options.iter().zip(&cols) {
            layout_of[t.index()].add(a, c);
            // A parameter's state, and its block again where the backward
            // keeps a view of it (as `measure` counts a saved view).
            let state = if info.param {
                let master = if bytes < 4 { 4 } else { 0 };
                2 * bytes + 8 + master
            } else {
                0
            };
            let per = state + if saved_base[t.index()] { bytes } else { 0 };
            if per > 0 {
                let n = copies[t.index()] as u64;
                memory.push((c, (n * local(t, a) * per) as f64));
            }
        }
    }

    // Ops: a strategy each, with its compute and partial results.
    let mut cache: FxHashMap<u32, Vec<Strategy>> = FxHashMap::default();
    let mut chosen: Vec<Vec<(Strategy, usize)>> = Vec::with_capacity(graph.ops().len());
    for o in graph.op_ids() {
        let op = graph.op(o);
        if folding.op[o.index()] != o {
            chosen.push(Vec::new());
            continue;
        }
        let list = cache
            .entry(graph.signature(o))
            .or_insert_with(|| strategies(graph, o))
            .clone();
        if list.is_empty() {
            return Err(SolverError::NoStrategy {
                op: op.name.clone(),
            });
        }
        let on_path = graph.inputs(o).iter().any(|t| m.grad[t.index()]);
        let flops = m.flops[o.index()] * if on_path { 3.0 } else { 1.0 };
        let cols = p.choice(list.len());
        let mut here = Vec::with_capacity(list.len());
        for (s, &c) in list.into_iter().zip(&cols) {
            let mut cost = m
                .model
                .compute_time(flops / s.divide(graph) as f64, m.dtype());
            for (&t, made) in graph.outputs(o).iter().zip(&s.made) {
                layout_of[t.index()].add(made, c);
                if made.partial.is_partial() && graph.result_wanted_whole(t) {
                    let mut whole = made.clone();
                    whole.partial = Partial::NONE;
                    cost += reshards.time(made, &whole, graph.shape(t));
                }
                if saved_base[t.index()] {
                    let n = copies[t.index()] as u64;
                    memory.push((c, (n * local(t, made) * bytes) as f64));
                }
            }
            p.costs[c] += op_copies[o.index()] as f64 * cost;
            here.push((s, c));
        }
        chosen.push(here);
    }

    // Each real edge (an op reading a tensor) as the program keeps it: the
    // kept tensor, the kept op, the input.
    let edge_of = |o: OpId, k: usize, t: TensorId| -> Edge {
        (folding.tensor[t.index()], folding.op[o.index()], k)
    };
    let mut edges: Vec<Edge> = Vec::new();
    let mut seen_edges: FxHashMap<Edge, ()> = FxHashMap::default();
    for o in graph.op_ids() {
        for (k, &t) in graph.inputs(o).iter().enumerate() {
            let e = edge_of(o, k, t);
            if seen_edges.insert(e, ()).is_none() {
                edges.push(e);
            }
        }
    }

    // Each edge's consumer side, and the pair columns they make, counted
    // before any reshard is priced: a program too large to solve in the
    // time is not built.
    let mut reads: Vec<Side<Read>> = Vec::with_capacity(edges.len());
    let mut pairs = 0usize;
    for &(t, o, k) in &edges {
        let grads = m.grad[t.index()] && graph.tensor(t).differentiable;
        let mut side = Side::new();
        for (s, c) in &chosen[o.index()] {
            let a = &s.needs[k];
            let contribution = grads.then(|| {
                let mine = a.dims_mapping.mesh_set().union(a.partial.dims());
                let partial: Partial = s
                    .used()
                    .iter()
                    .filter(|d| !mine.contains(*d))
                    .map(|d| (d, ReduceType::Sum))
                    .collect();
                a.clone().with_partial(partial)
            });
            side.add(&(a.clone(), contribution), *c);
        }
        let from = layout_of[t.index()].classes.len();
        if from > 1 && side.classes.len() > 1 {
            pairs += from * side.classes.len();
        }
        reads.push(side);
    }
    if pairs + p.costs.len() > limits.columns {
        return Err(SolverError::TooLarge {
            columns: pairs + p.costs.len(),
            limit: limits.columns,
        });
    }

    // A pair of classes whose own reshards cost more than the cutoff
    // leaves, with the cheapest strategy of every choice, gets no column.
    let slack = cutoff.map_or(f64::INFINITY, |c| {
        c * (1.0 + 1e-9) - p.cheapest().iter().sum::<f64>()
    });
    // Each kept edge's forward and backward reshard, priced once; edges
    // alike (one shape, the same classes on either side) share a matrix.
    let mut matrices: FxHashMap<EdgeKind<'_>, Matrix> = FxHashMap::default();
    let mut priced: FxHashMap<Edge, (Expr, Expr)> = FxHashMap::default();
    for (&(t, o, k), read) in edges.iter().zip(&reads) {
        let shape = graph.shape(t);
        let from = &layout_of[t.index()];
        let key = (
            shape,
            from.classes.iter().map(|(a, _)| a.clone()).collect(),
            read.classes.iter().map(|(b, _)| b.clone()).collect(),
        );
        let costs = matrices.entry(key).or_insert_with(|| {
            let mut costs = Matrix::with_capacity(from.classes.len());
            for (a, _) in &from.classes {
                let mut whole = a.clone();
                whole.partial = Partial::NONE;
                let row = read.classes.iter().map(|((need, given), _)| {
                    let back = given
                        .as_ref()
                        .map_or(0.0, |g| reshards.time(g, &whole, shape));
                    (reshards.time(a, need, shape), back)
                });
                costs.push(row.collect());
            }
            costs
        });
        let costs = edge_costs(&mut p, from, read, costs, slack);
        priced.insert((t, o, k), costs);
    }
    // Per real tensor, the dearest of its consumers' edges, forward and
    // backward; the copies of a folded tensor whose consumers fold alike
    // are one term, counted as often.
    let mut terms: Vec<(Vec<Edge>, usize)> = Vec::new();
    let mut term_at: FxHashMap<Vec<Edge>, usize> = FxHashMap::default();
    for t in graph.tensor_ids() {
        let mut key: Vec<Edge> = Vec::new();
        for &o in &graph.tensor(t).consumers {
            for (k, &x) in graph.inputs(o).iter().enumerate() {
                let e = edge_of(o, k, x);
                if x == t && !key.contains(&e) {
                    key.push(e);
                }
            }
        }
        if key.is_empty() {
            continue;
        }
        key.sort_unstable_by_key(|&(t, o, k)| (t.index(), o.index(), k));
        match term_at.get(&key) {
            Some(&i) => terms[i].1 += 1,
            None => {
                term_at.insert(key.clone(), terms.len());
                terms.push((key, 1));
            }
        }
    }
    for (key, n) in &terms {
        let weight = *n as f64;
        add_dearest(&mut p, key.iter().map(|e| &priced[e].0).collect(), weight);
        add_dearest(&mut p, key.iter().map(|e| &priced[e].1).collect(), weight);
    }
    let mut memory_row: Option<Expr> = None;
    if let Some(budget) = budget {
        // In units of the budget: bytes would dwarf the choices' 0 and 1.
        let b = budget as f64;
        let memory: Expr = memory.into_iter().map(|(c, v)| (c, v / b)).collect();
        // A budget the largest choices all fit in binds nothing: without
        // the row, the program is the one without a budget.
        if p.largest(&memory).is_none_or(|most| most > 1.0) {
            memory_row = Some(memory);
        }
    }
    if let Some(cutoff) = cutoff {
        p.leave_out_dearer_than(cutoff);
    }
    let build_seconds = started.elapsed().as_secs_f64();
    // In units of the perfectly split compute: seconds would put an op's
    // cost below HiGHS's absolute tolerances.
    let (bound, values) = solve(p, memory_row, m.step_time_bound(), limits, build_seconds)?;
    // A dual bound cut short below the perfectly split compute says
    // nothing that bound does not.
    if bound.bound <= m.step_time_bound() {
        return Err(SolverError::NoBound { limits: *limits });
    }
    Ok(read_solution(
        graph, &folding, &layout_of, &chosen, &values, bound,
    ))
}

/// The plan the solver's solution `values` describes, in the program built
/// for `graph` (its layers folded as `folding` says; per tensor its layout
/// classes, per op its strategies and their columns).
fn read_solution(
    graph: &Graph,
    folding: &Folding,
    layout_of: &[Side<DistAttr>],
    chosen: &[Vec<(Strategy, usize)>],
    values: &[f64],
    bound: SolverBound,
) -> Solution {
    // A solution cut short by the time limit depends on the machine's
    // speed, and a plan made from it would too: only one HiGHS stopped at
    // its optimum or its node limit is read.
    let readable = bound.stop.reproducible() && bound.incumbent.is_some();
    // The solution's leaves: each its layout, and whether a consumer reads
    // it otherwise.
    let set = |c: usize| values.get(c).is_some_and(|&v| v > 0.5);
    // The layout the solution gives (kept) tensor `t`.
    let laid_out = |t: TensorId| -> Option<&DistAttr> {
        layout_of[t.index()]
            .classes
            .iter()
            .find(|(_, cs)| cs.iter().any(|&c| set(c)))
            .map(|(a, _)| a)
    };
    // Each (op, layout) a strategy of the solution reads tensor `t` in.
    let reads_of = |t: TensorId| -> Vec<(OpId, &DistAttr)> {
        let mut reads = Vec::new();
        for &o in &graph.tensor(t).consumers {
            for (s, _) in chosen[folding.op[o.index()].index()]
                .iter()
                .filter(|(_, c)| set(*c))
            {
                for (&i, need) in graph.inputs(o).iter().zip(&s.needs) {
                    if i == t {
                        reads.push((o, need));
                    }
                }
            }
        }
        reads
    };
    let mut leaves = Vec::new();
    let real_leaves = graph
        .tensor_ids()
        .filter(|&t| graph.tensor(t).producer.is_none() && readable);
    for t in real_leaves {
        let Some(attr) = laid_out(folding.tensor[t.index()]) else {
            continue;
        };
        let reads = reads_of(t);
        let read_otherwise = reads.iter().any(|&(_, need)| need != attr);
        // What the consumers read it as, when they all read it alike.
        let read = reads.first().map(|&(_, first)| first).filter(|first| {
            *first != attr && !first.partial.is_partial() && reads.iter().all(|(_, r)| r == first)
        });
        leaves.push(LeafLayout {
            tensor: t,
            attr: attr.clone(),
            read_otherwise,
            read: read.cloned(),
        });
    }
    let mut produced: Vec<ProducedLayout> = Vec::new();
    let mut at: FxHashMap<TensorId, usize> = FxHashMap::default();
    for t in graph.tensor_ids() {
        let info = graph.tensor(t);
        if !readable || info.producer.is_none() || info.annotation.is_some() {
            continue;
        }
        let kept = folding.tensor[t.index()];
        if let Some(&i) = at.get(&kept) {
            produced[i].tensors.push(t);
            continue;
        }
        let Some(made) = laid_out(kept) else {
            continue;
        };
        // What the kept tensor's consumers read it as, when they agree.
        let reads = reads_of(kept);
        let attr = match reads.first() {
            Some(&(_, first)) if reads.iter().all(|&(_, r)| r == first) => first.clone(),
            _ => made.clone(),
        };
        at.insert(kept, produced.len());
        produced.push(ProducedLayout {
            tensors: vec![t],
            attr,
        });
    }
    let mut exact = Vec::new();
    for t in graph.tensor_ids() {
        let info = graph.tensor(t);
        if !readable || info.annotation.is_some() || info.consumers.is_empty() {
            continue;
        }
        let Some(attr) = laid_out(folding.tensor[t.index()]) else {
            continue;
        };
        // Each reader's first read of it, where that is another layout.
        let mut read_by: Vec<(OpId, DistAttr)> = Vec::new();
        let mut seen: Vec<OpId> = Vec::new();
        for (o, need) in reads_of(t) {
            if seen.contains(&o) {
                continue;
            }
            seen.push(o);
            if need != attr && !need.partial.is_partial() {
                read_by.push((o, need.clone()));
            }
        }
        exact.push(ExactLayout {
            tensor: t,
            attr: attr.clone(),
            read_by,
        });
    }
    Solution {
        bound,
        leaves,
        produced,
        exact,
    }
}
