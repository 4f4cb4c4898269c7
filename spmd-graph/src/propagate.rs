//! Propagation to a fixed point (the algorithm is described in the crate
//! docs): each tensor's attr goes from unknown to known once, by the first
//! op, in the documented order, that can infer it.

use spmd_core::{DistAttr, SpmdError};

use crate::error::GraphError;
use crate::graph::{Graph, OpId, OpKind, Stage, TensorId};
use crate::memo::{Answer, Memo};

/// Where a tensor's final attr came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Origin {
    /// The user's annotation.
    Annotated,
    /// An op's inference: `forward` when from its inputs (the op's own
    /// direction, grad for grad ops), else from its outputs.
    Op { op: OpId, forward: bool },
    /// No annotation reaches the tensor: it is replicated.
    Unreached,
}

/// Counters of one propagation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Passes over the ops (one forward and one backward walk each).
    pub sweeps: u32,
    /// Rule calls asked for (answered by the rule or by the memo).
    pub rule_calls: u32,
}

/// The result of [`propagate`]: one attr per tensor and where it came from.
/// Two are equal when their attrs, origins and counters are: the saved
/// answers are a cache of rule answers, not part of the result.
#[derive(Clone, Debug)]
pub struct Propagation {
    pub attrs: Vec<DistAttr>,
    pub origins: Vec<Origin>,
    pub stats: Stats,
    /// Per op, its last forward answer during propagation (see [`Saved`]).
    answers: Saved,
}

impl PartialEq for Propagation {
    fn eq(&self, other: &Propagation) -> bool {
        (&self.attrs, &self.origins, self.stats) == (&other.attrs, &other.origins, other.stats)
    }
}

impl Eq for Propagation {}

/// Each op's last forward answer with the input attrs it answered. A rule
/// is a pure function of those (and the shapes), so when they are the final
/// attrs the plan and the backward graph read the answer instead of running
/// the rule again. Kept only for calls whose conflict fallback keeps input
/// 0, the one those callers ask for. A remembered answer is read where the
/// memo keeps it; the others are copied into one arena (an allocation per
/// op cost more than the rule call it saves).
#[derive(Clone, Default)]
struct Saved {
    /// The propagation's memo, kept with its answers.
    memo: Memo,
    /// Per copied answer: the inputs' attrs the rule saw, then its answer's
    /// inputs, then its answer's outputs.
    arena: Vec<DistAttr>,
    /// Per op, where its answer is.
    at: Vec<Slot>,
}

#[derive(Clone, Copy)]
enum Slot {
    None,
    /// Entry `i` of the memo (the attrs it read are the inputs' it saw).
    Memo(u32),
    /// In the arena from `start`: `seen` attrs, then `inputs` required.
    Arena {
        start: u32,
        seen: u16,
        inputs: u16,
    },
}

impl std::fmt::Debug for Saved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kept = self.at.iter().filter(|s| !matches!(s, Slot::None)).count();
        write!(f, "Saved {{ {kept} answers }}")
    }
}

impl Saved {
    fn new(ops: usize) -> Saved {
        Saved {
            memo: Memo::default(),
            arena: Vec::new(),
            at: vec![Slot::None; ops],
        }
    }

    /// Op `o`'s answer: (the attrs it saw, its inputs, its outputs).
    fn get(&self, o: OpId, outputs: usize) -> Option<(&[DistAttr], &[DistAttr], &[DistAttr])> {
        match *self.at.get(o.index())? {
            Slot::None => None,
            Slot::Memo(i) => {
                let (seen, r) = self.memo.entry(Answer::Remembered(i))?;
                Some((seen, &r.inputs, &r.outputs))
            }
            Slot::Arena {
                start,
                seen,
                inputs,
            } => {
                let (start, seen, inputs) = (start as usize, seen as usize, inputs as usize);
                let all = self.arena.get(start..start + seen + inputs + outputs)?;
                let (saw, answer) = all.split_at(seen);
                let (ins, outs) = answer.split_at(inputs);
                Some((saw, ins, outs))
            }
        }
    }
}

impl Propagation {
    /// Op `o`'s forward answer for the final attrs (as
    /// `Graph::call_resolving_into(o, &self.attrs, 0, ..)` would give it), when
    /// propagation already computed it: (inputs, outputs).
    pub(crate) fn answer(&self, graph: &Graph, o: OpId) -> Option<(&[DistAttr], &[DistAttr])> {
        let (inputs, outputs) = graph.io(o);
        let (seen, ins, outs) = self.answers.get(o, outputs.len())?;
        let current = seen.len() == inputs.len()
            && inputs
                .iter()
                .zip(seen)
                .all(|(&t, a)| graph.seen(o, t, &self.attrs) == a);
        current.then_some((ins, outs))
    }

    pub fn attr(&self, t: TensorId) -> &DistAttr {
        &self.attrs[t.index()]
    }
    pub fn origin(&self, t: TensorId) -> Origin {
        self.origins[t.index()]
    }
}

/// Propagates the graph's annotations to every tensor they reach.
///
/// ```
/// use spmd_core::{Attrs, DistAttr, Mesh};
/// use spmd_graph::{GraphBuilder, propagate};
///
/// let mut b = GraphBuilder::new(Mesh::new(&[4])?);
/// let x = b.tensor("x", &[8, 16])?;
/// let w = b.tensor("w", &[16, 32])?;
/// b.annotate(w, DistAttr::from_paddle(&[-1, 0]).unwrap())?;
/// let y = b.apply("mm", "matmul", Attrs::new(), &[x, w], ("y", &[8, 32]))?;
/// let z = b.apply("act", "gelu", Attrs::new(), &[y], ("z", &[8, 32]))?;
/// let graph = b.build(&spmd_ops::builtins())?;
/// let p = propagate(&graph)?;
/// assert_eq!(p.attr(z).to_string(), "[-1, 0]");   // column parallel
/// assert_eq!(p.attr(x).to_string(), "[-1, -1]");
/// # Ok::<(), spmd_graph::GraphError>(())
/// ```
pub fn propagate(graph: &Graph) -> Result<Propagation, GraphError> {
    run(Propagator::new(graph))
}

fn run(mut p: Propagator<'_>) -> Result<Propagation, GraphError> {
    let graph = p.graph;
    let mut priorities: Vec<u32> = graph
        .tensors()
        .iter()
        .filter(|t| t.annotation.is_some())
        .map(|t| t.priority)
        .collect();
    priorities.sort_unstable();
    priorities.dedup();
    for priority in priorities {
        p.reveal(priority);
        'restart: loop {
            // The first stage to a fixed point...
            while p.sweep(Stage::PassThrough)? {}
            // ...then one sweep with each later stage; whatever it learns,
            // the earlier stages use first. (One sweep, not a fixed point:
            // so the steps a connected component takes never depend on
            // what happens in another one.)
            for cap in Stage::ALL.into_iter().skip(1) {
                if p.sweep(cap)? {
                    continue 'restart;
                }
            }
            break;
        }
    }
    Ok(p.finish())
}

struct Propagator<'g> {
    graph: &'g Graph,
    /// Unknown tensors hold a replicated placeholder, which is what a rule
    /// sees for them (a dense tensor promoted to replicated, as in Paddle).
    attrs: Vec<DistAttr>,
    known: Vec<bool>,
    /// Annotated tensors: never learned, whether revealed yet or not.
    fixed: Vec<bool>,
    origins: Vec<Origin>,
    /// Ops whose tensors are all known: nothing left to infer.
    done: Vec<bool>,
    memo: Memo,
    stats: Stats,
    answers: Saved,
}

impl<'g> Propagator<'g> {
    fn new(graph: &'g Graph) -> Propagator<'g> {
        let n = graph.tensors().len();
        Propagator {
            graph,
            // Annotations are revealed by priority (`reveal`).
            attrs: graph
                .tensor_ids()
                .map(|t| DistAttr::replicated(graph.rank(t)))
                .collect(),
            known: vec![false; n],
            fixed: graph
                .tensors()
                .iter()
                .map(|t| t.annotation.is_some())
                .collect(),
            origins: vec![Origin::Unreached; n],
            done: vec![false; graph.ops().len()],
            memo: Memo::default(),
            stats: Stats::default(),
            answers: Saved::new(graph.ops().len()),
        }
    }

    /// Makes the annotations of this priority known.
    fn reveal(&mut self, priority: u32) {
        for (i, t) in self.graph.tensors().iter().enumerate() {
            if let Some(a) = &t.annotation
                && t.priority == priority
            {
                self.attrs[i] = a.clone();
                self.known[i] = true;
                self.origins[i] = Origin::Annotated;
            }
        }
    }

    fn finish(self) -> Propagation {
        Propagation {
            attrs: self.attrs,
            origins: self.origins,
            stats: self.stats,
            answers: Saved {
                memo: self.memo,
                ..self.answers
            },
        }
    }

    /// One forward walk (topological order) and one backward walk (reverse)
    /// over the ops of stage `cap` or below; whether any tensor became known.
    fn sweep(&mut self, cap: Stage) -> Result<bool, GraphError> {
        self.stats.sweeps += 1;
        let mut changed = false;
        for o in self.graph.op_ids() {
            if !self.done[o.index()] && self.graph.stage(o) <= cap {
                changed |= self.forward(o)?;
            }
        }
        for o in self.graph.op_ids().rev() {
            if !self.done[o.index()] && self.graph.stage(o) <= cap {
                changed |= self.backward(o)?;
            }
        }
        Ok(changed)
    }

    fn any_known(&self, ts: &[TensorId]) -> bool {
        ts.iter().any(|t| self.known[t.index()])
    }
    fn all_known(&self, ts: &[TensorId]) -> bool {
        ts.iter().all(|t| self.known[t.index()])
    }

    /// Marks the op done when all its tensors are known.
    fn check_done(&mut self, o: OpId) -> bool {
        let (inputs, outputs) = self.graph.io(o);
        if self.all_known(inputs) && self.all_known(outputs) {
            self.done[o.index()] = true;
            true
        } else {
            false
        }
    }

    /// From the inputs: when one is known, the rule's answer fixes every
    /// unknown input (its requirement) and output.
    fn forward(&mut self, o: OpId) -> Result<bool, GraphError> {
        let graph = self.graph;
        let inputs = graph.io(o).0;
        if self.check_done(o) || !self.any_known(inputs) {
            return Ok(false);
        }
        self.stats.rule_calls += 1;
        let keep = inputs
            .iter()
            .position(|t| self.known[t.index()])
            .unwrap_or(0);
        let i = self
            .memo
            .forward(graph, o, &self.attrs, keep)
            .map_err(|e| rule_error(graph, o, e))?;
        if keep == 0 {
            self.save(o, i);
        }
        self.learn_answer(o, true, i)
    }

    /// Keeps op `o`'s forward answer `i` with the input attrs it answered
    /// (before they learn from it): where the memo keeps it, or copied into
    /// the arena, over the op's previous copy when it fits.
    fn save(&mut self, o: OpId, i: Answer) {
        let (inputs, outputs) = self.graph.io(o);
        let saved = &mut self.answers;
        if let (Answer::Remembered(id), Some((_, r))) = (i, self.memo.entry(i)) {
            if r.outputs.len() == outputs.len() {
                saved.at[o.index()] = Slot::Memo(id);
            }
            return;
        }
        let r = self.memo.result(i);
        // An answer whose output count is not the op's, or past what the
        // slot's offsets reach, is not kept: the plan calls the rule.
        let (n_seen, n_inputs) = (inputs.len(), r.inputs.len());
        if r.outputs.len() != outputs.len()
            || saved.arena.len() >= u32::MAX as usize / 2
            || n_seen > u16::MAX as usize
            || n_inputs > u16::MAX as usize
        {
            saved.at[o.index()] = Slot::None;
            return;
        }
        let graph = self.graph;
        let seen = inputs.iter().map(|&t| graph.seen(o, t, &self.attrs));
        let all = seen.chain(&r.inputs).chain(&r.outputs);
        let len = n_seen + n_inputs + outputs.len();
        let start = match saved.at[o.index()] {
            Slot::Arena {
                start,
                seen,
                inputs,
            } if seen as usize + inputs as usize == n_seen + n_inputs => {
                for (to, from) in saved.arena[start as usize..].iter_mut().zip(all) {
                    to.clone_from(from);
                }
                start
            }
            _ => {
                let start = saved.arena.len() as u32;
                saved.arena.reserve(len);
                for a in all {
                    saved.arena.push(a.clone());
                }
                start
            }
        };
        saved.at[o.index()] = Slot::Arena {
            start,
            seen: n_seen as u16,
            inputs: n_inputs as u16,
        };
    }

    /// From the outputs (forward ops only: a grad op has no reverse rule):
    /// when one is known, the reverse rule fixes every unknown input and
    /// output.
    fn backward(&mut self, o: OpId) -> Result<bool, GraphError> {
        let graph = self.graph;
        let outputs = graph.io(o).1;
        if graph.kind(o) != OpKind::Forward || self.check_done(o) || !self.any_known(outputs) {
            return Ok(false);
        }
        self.stats.rule_calls += 1;
        let i = self
            .memo
            .backward(graph, o, &self.attrs)
            .map_err(|e| rule_error(graph, o, e))?;
        self.learn_answer(o, false, i)
    }

    /// Fixes the unknown tensors of op `o` from the memo's answer `i` (a
    /// forward answer when `forward`, a reverse one otherwise).
    fn learn_answer(&mut self, o: OpId, forward: bool, i: Answer) -> Result<bool, GraphError> {
        let graph = self.graph;
        let (inputs, outputs) = graph.io(o);
        let r = self.memo.result(i);
        let mut st = State {
            graph,
            attrs: &mut self.attrs,
            known: &mut self.known,
            fixed: &self.fixed,
            origins: &mut self.origins,
        };
        let learned =
            st.learn(o, forward, inputs, &r.inputs)? | st.learn(o, forward, outputs, &r.outputs)?;
        self.check_done(o);
        Ok(learned)
    }
}

/// The tensors' state, borrowed apart from the memo whose answer it learns.
struct State<'s, 'g> {
    graph: &'g Graph,
    attrs: &'s mut [DistAttr],
    known: &'s mut [bool],
    fixed: &'s [bool],
    origins: &'s mut [Origin],
}

impl State<'_, '_> {
    /// Sets each unknown tensor of `ts` to its attr in `answer`; whether any was.
    fn learn(
        &mut self,
        o: OpId,
        forward: bool,
        ts: &[TensorId],
        answer: &[DistAttr],
    ) -> Result<bool, GraphError> {
        let mut learned = false;
        for (&t, a) in ts.iter().zip(answer) {
            let i = t.index();
            if self.known[i] || self.fixed[i] {
                continue;
            }
            let rank = self.graph.rank(t);
            if a.dims_mapping.rank() != rank {
                return Err(GraphError::RankMismatch {
                    op: self.graph.op(o).name.clone(),
                    tensor: self.graph.tensor(t).name.clone(),
                    expected: rank,
                    found: a.dims_mapping.rank(),
                });
            }
            self.attrs[i] = a.clone();
            self.known[i] = true;
            self.origins[i] = Origin::Op { op: o, forward };
            learned = true;
        }
        Ok(learned)
    }
}

fn rule_error(graph: &Graph, o: OpId, source: SpmdError) -> GraphError {
    GraphError::Rule {
        op: graph.op(o).name.clone(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::GraphBuilder;
    use crate::reshard::{DType, plan};
    use spmd_core::{Attrs, Mesh};

    fn a(m: &[i64]) -> DistAttr {
        DistAttr::from_paddle(m).unwrap()
    }

    /// x feeds a matmul (earlier in topological order) and a relu whose
    /// output is annotated. The relu is a pass-through op, so its backward
    /// step runs first and x takes the relu's layout, not the replicated
    /// requirement the matmul would give it.
    #[test]
    fn pass_through_ops_decide_before_contractions() {
        let mut b = GraphBuilder::new(Mesh::new(&[2, 2]).unwrap());
        let x = b.tensor("x", &[8, 4]).unwrap();
        let w = b.param("w", &[4, 6], Some(a(&[-1, 1]))).unwrap();
        let y = b
            .apply("mm", "matmul", Attrs::new(), &[x, w], ("y", &[8, 6]))
            .unwrap();
        let r = b
            .apply("act", "relu", Attrs::new(), &[x], ("r", &[8, 4]))
            .unwrap();
        b.annotate(r, a(&[0, -1])).unwrap();
        let g = b.build(&spmd_ops::builtins()).unwrap();
        let p = propagate(&g).unwrap();
        assert_eq!(p.attr(x), &a(&[0, -1]));
        assert_eq!(
            p.origin(x),
            Origin::Op {
                op: crate::OpId(1),
                forward: false
            }
        );
        assert_eq!(p.attr(y), &a(&[0, 1]));
        assert!(plan(&g, &p, DType::F32).unwrap().reshards.is_empty());
    }

    /// A chain x -> a -> b with x and b annotated differently. At equal
    /// priority the forward step from x decides `a`; when b's annotation
    /// has the higher priority (0), it propagates first and decides `a`.
    #[test]
    fn higher_priority_annotations_propagate_first() {
        let run_with = |px: u32, pb: u32| {
            let mut b = GraphBuilder::new(Mesh::new(&[2]).unwrap());
            let x = b.tensor("x", &[4, 6]).unwrap();
            let a_ = b
                .apply("f", "relu", Attrs::new(), &[x], ("a", &[4, 6]))
                .unwrap();
            let y = b
                .apply("g", "relu", Attrs::new(), &[a_], ("b", &[4, 6]))
                .unwrap();
            b.annotate_with_priority(x, a(&[0, -1]), px).unwrap();
            b.annotate_with_priority(y, a(&[-1, 0]), pb).unwrap();
            let g = b.build(&spmd_ops::builtins()).unwrap();
            let p = propagate(&g).unwrap();
            // Both annotations hold whatever their priority.
            assert_eq!((p.attr(x), p.attr(y)), (&a(&[0, -1]), &a(&[-1, 0])));
            p.attr(a_).to_string()
        };
        assert_eq!(run_with(0, 0), "[0, -1]");
        assert_eq!(run_with(1, 0), "[-1, 0]");
        assert_eq!(run_with(0, 1), "[0, -1]");
    }

    /// Remembered answers change nothing: two stacked Megatron-style MLP
    /// blocks (whose second block is all memo hits) propagate as with every
    /// rule called, with tensor and data parallelism.
    #[test]
    fn the_memo_changes_no_answer() {
        let registry = spmd_ops::builtins();
        for dp in [false, true] {
            let mut b = GraphBuilder::new(Mesh::new(&[2, 2]).unwrap());
            let mut x = b.tensor("x", &[8, 16]).unwrap();
            if dp {
                b.annotate(x, a(&[0, -1])).unwrap();
            }
            for l in 0..2 {
                let name = |n: &str| format!("{n}{l}");
                let w1 = b.param(&name("w1_"), &[16, 32], Some(a(&[-1, 1]))).unwrap();
                let w2 = b.param(&name("w2_"), &[32, 16], Some(a(&[1, -1]))).unwrap();
                let h = b
                    .apply(
                        &name("fc1_"),
                        "matmul",
                        Attrs::new(),
                        &[x, w1],
                        (&name("h"), &[8, 32]),
                    )
                    .unwrap();
                let g = b
                    .apply(
                        &name("act"),
                        "gelu",
                        Attrs::new(),
                        &[h],
                        (&name("g"), &[8, 32]),
                    )
                    .unwrap();
                let y = b
                    .apply(
                        &name("fc2_"),
                        "matmul",
                        Attrs::new(),
                        &[g, w2],
                        (&name("y"), &[8, 16]),
                    )
                    .unwrap();
                x = b
                    .apply(
                        &name("res"),
                        "add",
                        Attrs::new(),
                        &[x, y],
                        (&name("x"), &[8, 16]),
                    )
                    .unwrap();
            }
            let g = b.build(&registry).unwrap();
            // The same graph with no op sharing a signature: the memo
            // remembers nothing, and every rule call runs.
            let mut unshared = g.clone();
            unshared.shared.fill(false);
            let plain = Propagator::new(&unshared);
            let p = propagate(&g).unwrap();
            assert_eq!(run(plain).unwrap(), p);
            plans_reuse_answers_faithfully(&g, &p);
        }
    }

    /// The plan and the backward graph read propagation's saved answers
    /// (some are current) and come out as with every rule called afresh.
    fn plans_reuse_answers_faithfully(g: &Graph, p: &Propagation) {
        let reused = g.op_ids().filter(|&o| p.answer(g, o).is_some()).count();
        assert!(reused > 0, "no saved answer is current");
        let fresh = Propagation {
            answers: Saved::new(g.ops().len()),
            ..p.clone()
        };
        assert_eq!(
            plan(g, p, DType::F32).unwrap(),
            plan(g, &fresh, DType::F32).unwrap()
        );
        let registry = spmd_ops::builtins();
        let outputs: Vec<TensorId> = g.op_ids().last().map(|o| g.io(o).1.to_vec()).unwrap();
        let backward = |p| {
            let bw = crate::backward_graph(g, p, &registry, &outputs).unwrap();
            let bp = propagate(&bw.graph).unwrap();
            plan(&bw.graph, &bp, DType::F32).unwrap()
        };
        assert_eq!(backward(p), backward(&fresh));
    }

    /// The exported Llama under its tensor-parallel plan: saved answers
    /// change neither plan.
    #[test]
    fn saved_answers_change_no_plan_of_an_exported_model() {
        let registry = spmd_ops::builtins();
        let mut file: crate::json::GraphFile =
            serde_json::from_str(include_str!("../graphs/hf/llama.json")).unwrap();
        for t in &mut file.tensors {
            let m = if t.name.ends_with("q_proj.weight") || t.name.ends_with("up_proj.weight") {
                "[0, -1]"
            } else if t.name.ends_with("o_proj.weight") || t.name.ends_with("down_proj.weight") {
                "[-1, 0]"
            } else {
                continue;
            };
            t.dims_mapping = Some(serde_json::from_str(m).unwrap());
        }
        let loaded = crate::json::from_file(&file, &registry).unwrap();
        let p = propagate(&loaded.graph).unwrap();
        plans_reuse_answers_faithfully(&loaded.graph, &p);
    }

    /// Prepared rule calls (the graph's per-op `Prepared`s) change no
    /// answer: the exported Llama under tensor parallelism, and a chain of
    /// matmuls and gelus no two of which share a signature, propagate and
    /// plan as with every rule called through `infer_into`.
    #[test]
    fn prepared_calls_change_no_answer() {
        let registry = spmd_ops::builtins();
        // The exported Llama, its attention and MLP weights split as
        // Megatron-LM splits them.
        let llama = || {
            let mut file: crate::json::GraphFile =
                serde_json::from_str(include_str!("../graphs/hf/llama.json")).unwrap();
            for t in &mut file.tensors {
                let m = if t.name.ends_with("q_proj.weight") || t.name.ends_with("up_proj.weight") {
                    "[0, -1]"
                } else if t.name.ends_with("o_proj.weight") || t.name.ends_with("down_proj.weight")
                {
                    "[-1, 0]"
                } else {
                    continue;
                };
                t.dims_mapping = Some(serde_json::from_str(m).unwrap());
            }
            crate::json::from_file(&file, &registry).unwrap().graph
        };
        let chain = || {
            let mut b = GraphBuilder::new(Mesh::new(&[2, 4]).unwrap());
            let mut x = b.tensor("x", &[16, 8]).unwrap();
            b.annotate(x, a(&[0, -1])).unwrap();
            for i in 0..12 {
                let (w, next) = (8 + 4 * i, 12 + 4 * i);
                let split = if i % 2 == 0 { [-1, 1] } else { [1, -1] };
                let wt = b
                    .param(&format!("w{i}"), &[w, next], Some(a(&split)))
                    .unwrap();
                let h = b
                    .apply(
                        "",
                        "matmul",
                        Attrs::new(),
                        &[x, wt],
                        (&format!("h{i}"), &[16, next]),
                    )
                    .unwrap();
                x = b
                    .apply(
                        "",
                        "gelu",
                        Attrs::new(),
                        &[h],
                        (&format!("g{i}"), &[16, next]),
                    )
                    .unwrap();
            }
            b.build(&registry).unwrap()
        };
        let sources: [&dyn Fn() -> Graph; 2] = [&llama, &chain];
        for source in sources {
            let with = source();
            let mut without = source();
            // Every chain op prepares (24), and some of the Llama's (the
            // ops of its repeated layers share signatures: the memo
            // answers those).
            let prepared = without.prepared.iter().filter(|p| p.is_compiled()).count();
            without.prepared.clear();
            assert!(prepared >= 23, "{prepared}");
            let (p, q) = (propagate(&with).unwrap(), propagate(&without).unwrap());
            assert_eq!(p, q);
            assert_eq!(
                plan(&with, &p, DType::F32).unwrap(),
                plan(&without, &q, DType::F32).unwrap()
            );
        }
    }

    /// Two annotated inputs of a strict elementwise rule disagree: neither
    /// annotation changes, the first input wins the output, and the plan
    /// moves the second (an all-to-all on mesh dim 0).
    #[test]
    fn conflicting_annotations_are_kept_and_resharded() {
        let mut b = GraphBuilder::new(Mesh::new(&[2]).unwrap());
        let x = b.tensor("x", &[8, 4]).unwrap();
        let z = b.tensor("z", &[8, 4]).unwrap();
        b.annotate(x, a(&[0, -1])).unwrap();
        b.annotate(z, a(&[-1, 0])).unwrap();
        let y = b
            .apply("sum", "add", Attrs::new(), &[x, z], ("y", &[8, 4]))
            .unwrap();
        let g = b.build(&spmd_ops::builtins()).unwrap();
        let p = propagate(&g).unwrap();
        assert_eq!((p.attr(x), p.attr(z)), (&a(&[0, -1]), &a(&[-1, 0])));
        assert_eq!(p.attr(y), &a(&[0, -1]));
        let plan = plan(&g, &p, DType::F32).unwrap();
        assert_eq!(plan.reshards.len(), 1);
        assert_eq!(plan.reshards[0].tensor, z);
        assert_eq!(plan.count("all-to-all"), 1);
    }

    /// An annotation on an output reaches the inputs through backward steps,
    /// and a tensor no annotation reaches stays replicated and unreached.
    #[test]
    fn annotations_flow_backward_and_unreached_tensors_stay_replicated() {
        let mut b = GraphBuilder::new(Mesh::new(&[4]).unwrap());
        let x = b.tensor("x", &[8, 4]).unwrap();
        let t = b
            .apply(
                "t",
                "transpose",
                Attrs::new().with("perm", &[1i64, 0][..]),
                &[x],
                ("t", &[4, 8]),
            )
            .unwrap();
        let e = b
            .apply("e", "exp", Attrs::new(), &[t], ("e", &[4, 8]))
            .unwrap();
        let lone = b.tensor("lone", &[3]).unwrap();
        let lone2 = b
            .apply("l", "relu", Attrs::new(), &[lone], ("lone2", &[3]))
            .unwrap();
        b.annotate(e, a(&[-1, 0])).unwrap();
        let g = b.build(&spmd_ops::builtins()).unwrap();
        let p = propagate(&g).unwrap();
        assert_eq!(p.attr(x), &a(&[0, -1]));
        assert_eq!(p.origin(e), Origin::Annotated);
        for u in [lone, lone2] {
            assert_eq!(p.origin(u), Origin::Unreached);
            assert_eq!(p.attr(u), &a(&[-1]));
        }
    }
}
