//! The graph: tensors with global shapes (some annotated by the user), ops
//! that name a registry rule with its attributes, and the builder that checks
//! it all once, so that propagation never looks a rule up by name.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use spmd_core::{
    Attrs, DistAttr, Mesh, Prepared, Registry, Spec, SpmdError, SpmdRule, SpmdRuleExt,
};

use crate::error::{GraphError, MissingRule};

/// A tensor of a graph: its index in [`Graph::tensors`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorId(pub u32);

/// An op of a graph: its index in [`Graph::ops`], which is also its place in
/// the graph's topological order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpId(pub u32);

impl TensorId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl OpId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// How an op calls its rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    /// The rule's forward inference: inputs -> outputs.
    Forward,
    /// The rule's gradient op: the inputs are the forward op's
    /// `forward_inputs` inputs followed by one grad per forward output; the
    /// outputs are the grads of the forward inputs that have one.
    Grad { forward_inputs: usize },
}

/// One tensor: a name, its global shape, and the user's annotation if any
/// (never changed by propagation).
#[derive(Clone, Debug)]
pub struct TensorInfo {
    pub name: String,
    pub shape: Vec<usize>,
    pub annotation: Option<DistAttr>,
    /// The annotation's priority, as in Shardy: 0 (the default) propagates
    /// first, then 1, and so on (see the crate docs).
    pub priority: u32,
    /// A trainable weight: [`backward_graph`](crate::backward_graph) gives
    /// it a gradient laid out like it.
    pub param: bool,
    pub producer: Option<OpId>,
    pub consumers: Vec<OpId>,
}

/// One op: a display name, the registry rule with its attributes, and its
/// tensors.
#[derive(Clone, Debug)]
pub struct OpInfo {
    pub name: String,
    pub rule: String,
    pub attrs: Attrs,
    pub kind: OpKind,
    pub inputs: Vec<TensorId>,
    pub outputs: Vec<TensorId>,
}

/// Which propagation stage an op belongs to (see the crate docs): ops that
/// pass shardings through unchanged go first, as in Shardy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Stage {
    /// Elementwise and pure layout ops (`add`, `gelu`, `reshape`, ...).
    PassThrough = 0,
    /// Everything else (contractions, reductions, norms, gathers, grad ops).
    Other = 1,
}

impl Stage {
    pub const ALL: [Stage; 2] = [Stage::PassThrough, Stage::Other];

    /// The stage of a forward op, as its registry entry declares it
    /// ([`spmd_core::RuleInfo::pass_through`]).
    pub fn of(info: &spmd_core::RuleInfo) -> Stage {
        if info.pass_through {
            Stage::PassThrough
        } else {
            Stage::Other
        }
    }
}

/// A checked graph: every op's rule built once, ops in a topological order,
/// every tensor produced at most once, every annotation valid for its tensor,
/// every forward op's declared output shapes what its inputs give.
///
/// ```
/// use spmd_core::{Attrs, DistAttr, Mesh};
/// use spmd_graph::GraphBuilder;
///
/// let mut b = GraphBuilder::new(Mesh::new(&[4])?);
/// let x = b.tensor("x", &[8, 16])?;
/// let w = b.tensor("w", &[16, 32])?;
/// b.annotate(w, DistAttr::from_paddle(&[-1, 0]).unwrap())?;
/// let y = b.apply("mm", "matmul", Attrs::new(), &[x, w], ("y", &[8, 32]))?;
/// let graph = b.build(&spmd_ops::builtins())?;
/// assert_eq!(graph.tensor(y).shape, [8, 32]);
/// # Ok::<(), spmd_graph::GraphError>(())
/// ```
#[derive(Clone)]
pub struct Graph {
    mesh: Mesh,
    tensors: Vec<TensorInfo>,
    ops: Vec<OpInfo>,
    /// Shared: a backward graph's grad ops run their forward ops' rules.
    pub(crate) rules: Vec<Arc<dyn SpmdRule>>,
    pub(crate) stages: Vec<Stage>,
    /// Ops with equal signatures (rule, attributes, kind, tensor shapes)
    /// answer equal attrs equally (see `memo`).
    pub(crate) signatures: Vec<u32>,
    /// Whether another op shares the signature (only then can the memo hit).
    pub(crate) shared: Vec<bool>,
    /// Every op's inputs then outputs, op after op in one array: the sweeps
    /// read them in order instead of chasing one allocation per op.
    flat: Vec<TensorId>,
    /// Per op: where its tensors start in `flat` and how many inputs.
    spans: Vec<(u32, u32, u32)>,
    /// Each tensor's rank, compact for the same reason.
    ranks: Vec<u32>,
    /// Every tensor's shape, one after the other, and where each starts:
    /// a rule call reads its tensors' shapes from here, not through one
    /// allocation per tensor (at 100k ops those were cache misses).
    dims: Vec<usize>,
    dims_at: Vec<u32>,
    /// Each op's kind, compact.
    kinds: Vec<OpKind>,
    /// Per forward op that shares its signature with no other (the memo
    /// answers the others): its rule's forward calls prepared for its
    /// shapes (`SpmdRule::prepare`; `Prepared::NONE` when nothing compiles);
    /// a rule call then reads only the layouts.
    prepared: Vec<Prepared>,
}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graph")
            .field("mesh", &self.mesh)
            .field("tensors", &self.tensors)
            .field("ops", &self.ops)
            .finish_non_exhaustive()
    }
}

impl Graph {
    pub fn mesh(&self) -> &Mesh {
        &self.mesh
    }
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }
    pub fn ops(&self) -> &[OpInfo] {
        &self.ops
    }
    pub fn tensor(&self, t: TensorId) -> &TensorInfo {
        &self.tensors[t.index()]
    }
    pub fn op(&self, o: OpId) -> &OpInfo {
        &self.ops[o.index()]
    }
    /// The built rule of an op.
    pub fn rule(&self, o: OpId) -> &dyn SpmdRule {
        &*self.rules[o.index()]
    }
    pub fn stage(&self, o: OpId) -> Stage {
        self.stages[o.index()]
    }
    /// An op's input and output tensors, from the compact layout.
    #[inline]
    pub(crate) fn io(&self, o: OpId) -> (&[TensorId], &[TensorId]) {
        let (start, n_in, n_out) = self.spans[o.index()];
        let (start, n_in, n_out) = (start as usize, n_in as usize, n_out as usize);
        self.flat[start..start + n_in + n_out].split_at(n_in)
    }

    #[inline]
    pub(crate) fn rank(&self, t: TensorId) -> usize {
        self.ranks[t.index()] as usize
    }

    /// A tensor's shape, from the compact layout.
    #[inline]
    pub(crate) fn shape(&self, t: TensorId) -> &[usize] {
        let start = self.dims_at[t.index()] as usize;
        &self.dims[start..start + self.ranks[t.index()] as usize]
    }

    /// The tensor called `name`.
    /// Replaces tensor `t`'s annotation (`None` removes it), checked as
    /// [`GraphBuilder::annotate_with_priority`] checks one. A search that
    /// tries many plans on one graph changes its annotations in place
    /// rather than building every op's rule again.
    pub fn set_annotation(
        &mut self,
        t: TensorId,
        annotation: Option<(DistAttr, u32)>,
    ) -> Result<(), GraphError> {
        let Some(info) = self.tensors.get_mut(t.index()) else {
            return Err(GraphError::UnknownTensor {
                op: "set_annotation".into(),
                name: format!("#{}", t.0),
            });
        };
        if let Some((attr, _)) = &annotation
            && info.annotation.as_ref() != Some(attr)
        {
            check_attr(&self.mesh, &info.name, &info.shape, attr)?;
        }
        info.priority = annotation.as_ref().map_or(0, |&(_, p)| p);
        info.annotation = annotation.map(|(a, _)| a);
        Ok(())
    }

    pub fn find(&self, name: &str) -> Option<TensorId> {
        self.tensors
            .iter()
            .position(|t| t.name == name)
            .map(|i| TensorId(i as u32))
    }
    pub fn op_ids(&self) -> impl DoubleEndedIterator<Item = OpId> + ExactSizeIterator {
        (0..self.ops.len() as u32).map(OpId)
    }
    pub fn tensor_ids(&self) -> impl DoubleEndedIterator<Item = TensorId> + ExactSizeIterator {
        (0..self.tensors.len() as u32).map(TensorId)
    }

    /// Runs an op's rule in its own direction (forward, or grad for grad
    /// ops) on the given attrs, one per tensor of the graph.
    pub(crate) fn call_forward(
        &self,
        o: OpId,
        attrs: &[DistAttr],
    ) -> Result<spmd_core::RuleResult, SpmdError> {
        let mut r = spmd_core::RuleResult::default();
        self.call_seeing(o, attrs, None, &mut r)?;
        Ok(r)
    }

    /// [`Graph::call_forward`] into the caller's result (reused across
    /// calls: no result is moved or dropped per call), but when the rule
    /// rejects the combination of its inputs' attrs (a strict rule facing
    /// two disagreeing inputs), it runs again seeing only input `keep`'s
    /// attr, the others replicated: that input wins the conflict and the
    /// others are resharded to fit.
    pub(crate) fn call_resolving_into(
        &self,
        o: OpId,
        attrs: &[DistAttr],
        keep: usize,
        out: &mut spmd_core::RuleResult,
    ) -> Result<(), SpmdError> {
        self.call_seeing(o, attrs, None, out).or_else(|first| {
            self.call_seeing(o, attrs, Some(keep), out)
                .map_err(|_| first)
        })
    }

    /// Runs a forward op's reverse rule on its outputs' attrs (taken from
    /// `attrs`, one per tensor of the graph).
    pub(crate) fn call_backward(
        &self,
        o: OpId,
        attrs: &[DistAttr],
        out: &mut spmd_core::RuleResult,
    ) -> Result<(), SpmdError> {
        let (inputs, outputs) = self.io(o);
        let shapes: smallvec::SmallVec<[&[usize]; 8]> =
            inputs.iter().map(|&t| self.shape(t)).collect();
        let outs: smallvec::SmallVec<[Spec<'_>; 4]> = outputs
            .iter()
            .map(|&t| Spec::new(self.shape(t), &attrs[t.index()]))
            .collect();
        self.rules[o.index()].infer_into(
            &spmd_core::Call::backward(&self.mesh, &shapes, &outs),
            None,
            out,
        )
    }

    /// Drops the prepared calls (tests compare against calls through
    /// `infer_into` alone); how many there were.
    #[cfg(test)]
    pub(crate) fn forget_prepared(&mut self) -> usize {
        let n = self.prepared.iter().filter(|p| p.is_compiled()).count();
        self.prepared.clear();
        n
    }

    /// Op `o`'s forward calls prepared (see `prepared`).
    fn prepare(&self, o: OpId) -> Prepared {
        if self.kinds[o.index()] != OpKind::Forward || self.shared[o.index()] {
            return Prepared::NONE;
        }
        let (inputs, outputs) = self.io(o);
        // Preparing reads shapes only: any layouts will do.
        let placeholders: smallvec::SmallVec<[DistAttr; 4]> = inputs
            .iter()
            .map(|&t| DistAttr::replicated(self.rank(t)))
            .collect();
        let specs: smallvec::SmallVec<[Spec<'_>; 8]> = inputs
            .iter()
            .zip(&placeholders)
            .map(|(&t, a)| Spec::new(self.shape(t), a))
            .collect();
        let output_shapes: smallvec::SmallVec<[&[usize]; 4]> =
            outputs.iter().map(|&t| self.shape(t)).collect();
        let call = spmd_core::Call::forward_with_output_shapes(&self.mesh, &specs, &output_shapes);
        // A rule that cannot prepare (or fails to) is called as usual.
        self.rules[o.index()]
            .prepare(&call)
            .unwrap_or(Prepared::NONE)
    }

    fn call_seeing(
        &self,
        o: OpId,
        attrs: &[DistAttr],
        only: Option<usize>,
        out: &mut spmd_core::RuleResult,
    ) -> Result<(), SpmdError> {
        let (inputs, outputs) = self.io(o);
        let replicated: smallvec::SmallVec<[DistAttr; 4]> = match only {
            None => smallvec::SmallVec::new(),
            Some(_) => inputs
                .iter()
                .map(|&t| DistAttr::replicated(self.rank(t)))
                .collect(),
        };
        // Pushed in a plain loop: `collect` into a SmallVec reserves and
        // checks its spill state per element.
        let mut specs: smallvec::SmallVec<[Spec<'_>; 8]> = smallvec::SmallVec::new();
        for (k, &t) in inputs.iter().enumerate() {
            let attr = match only {
                Some(keep) if keep != k => &replicated[k],
                _ => &attrs[t.index()],
            };
            specs.push(Spec::new(self.shape(t), attr));
        }
        let rule = &*self.rules[o.index()];
        match self.kinds[o.index()] {
            // The graph declares every output's shape: rules that read them
            // (a replicated fallback, a creation-like op) need them, the
            // others check them.
            OpKind::Forward => {
                let mut output_shapes: smallvec::SmallVec<[&[usize]; 4]> =
                    smallvec::SmallVec::new();
                for &t in outputs {
                    output_shapes.push(self.shape(t));
                }
                let call =
                    spmd_core::Call::forward_with_output_shapes(&self.mesh, &specs, &output_shapes);
                // The prepared call answers where it applies, and asks the
                // rule otherwise (the replicated fallback included).
                match self.prepared.get(o.index()) {
                    Some(prepared) if only.is_none() => prepared.infer_into(rule, &call, out),
                    _ => rule.infer_into(&call, None, out),
                }
            }
            OpKind::Grad { forward_inputs } => {
                let (ins, grads) = specs.split_at(forward_inputs.min(specs.len()));
                rule.infer_into(&spmd_core::Call::grad(&self.mesh, ins, grads), None, out)
            }
        }
    }
}

/// Builds a [`Graph`] op by op. Ops must be added in a topological order
/// (an op reads tensors that are graph inputs or outputs of earlier ops);
/// that order is the one propagation walks.
#[derive(Clone, Debug)]
pub struct GraphBuilder {
    mesh: Mesh,
    tensors: Vec<TensorInfo>,
    /// Tensor ids by name, hashed with Fx (SipHash was most of declaring a
    /// tensor); the names themselves live in `tensors`, not again as keys.
    names: hashbrown::HashTable<TensorId>,
    ops: Vec<OpInfo>,
    /// Per op: its rule when the caller built it already (a derived graph
    /// reusing a built graph's rules); `build` builds the others.
    prebuilt: Vec<Option<Prebuilt>>,
}

/// A rule built elsewhere, with the stage of its op.
#[derive(Clone)]
pub(crate) struct Prebuilt {
    pub(crate) rule: Arc<dyn SpmdRule>,
    pub(crate) stage: Stage,
}

impl std::fmt::Debug for Prebuilt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Prebuilt({}, {:?})", self.rule.name(), self.stage)
    }
}

fn name_hash(name: &str) -> u64 {
    let mut h = rustc_hash::FxHasher::default();
    h.write(name.as_bytes());
    h.finish()
}

impl GraphBuilder {
    /// A forward op's declared output shapes must be what its inputs give:
    /// its rule runs once on replicated inputs with the outputs' shapes, and
    /// a disagreement names the op and the tensor.
    fn check_declared_shapes(&self, op: &OpInfo, rule: &dyn SpmdRule) -> Result<(), GraphError> {
        let replicated: Vec<DistAttr> = op
            .inputs
            .iter()
            .map(|t| DistAttr::replicated(self.tensors[t.index()].shape.len()))
            .collect();
        let inputs: Vec<Spec<'_>> = op
            .inputs
            .iter()
            .zip(&replicated)
            .map(|(t, a)| Spec::new(&self.tensors[t.index()].shape, a))
            .collect();
        let output_shapes: Vec<&[usize]> = op
            .outputs
            .iter()
            .map(|t| self.tensors[t.index()].shape.as_slice())
            .collect();
        let call = spmd_core::Call::forward_with_output_shapes(&self.mesh, &inputs, &output_shapes);
        let Err(source) = rule.infer(&call, None) else {
            return Ok(());
        };
        let output = match &source {
            SpmdError::ShapeMismatch { tensor, .. }
            | SpmdError::Rank { tensor, .. }
            | SpmdError::CompoundExtent { tensor, .. }
                if tensor.role == spmd_core::Role::Output =>
            {
                op.outputs.get(tensor.index)
            }
            _ => None,
        };
        Err(match output {
            Some(t) => GraphError::DeclaredShape {
                op: op.name.clone(),
                tensor: self.tensors[t.index()].name.clone(),
                source: Box::new(source),
            },
            None => GraphError::Rule {
                op: op.name.clone(),
                source,
            },
        })
    }

    pub fn new(mesh: Mesh) -> GraphBuilder {
        GraphBuilder {
            mesh,
            tensors: Vec::new(),
            names: hashbrown::HashTable::new(),
            ops: Vec::new(),
            prebuilt: Vec::new(),
        }
    }

    pub fn mesh(&self) -> &Mesh {
        &self.mesh
    }

    /// Declares a tensor. It is a graph input unless an op later lists it as
    /// an output.
    pub fn tensor(&mut self, name: &str, shape: &[usize]) -> Result<TensorId, GraphError> {
        self.declare(name.to_string(), shape)?
            .map_err(|name| GraphError::DuplicateTensor { name })
    }

    /// Declares a tensor named `name`, or gives the name back when a tensor
    /// has it already (one hash and one probe either way).
    pub(crate) fn declare(
        &mut self,
        name: String,
        shape: &[usize],
    ) -> Result<Result<TensorId, String>, GraphError> {
        // Volumes are counted in bytes (at most 8 an element) in a u64.
        let fits = shape
            .iter()
            .try_fold(8u64, |bytes, &e| bytes.checked_mul(e as u64))
            .is_some();
        if !fits {
            return Err(GraphError::TensorTooLarge {
                tensor: name,
                shape: shape.to_vec(),
            });
        }
        let id = TensorId(self.tensors.len() as u32);
        let tensors = &self.tensors;
        let entry = self.names.entry(
            name_hash(&name),
            |t| tensors[t.index()].name == name,
            |t| name_hash(&tensors[t.index()].name),
        );
        let hashbrown::hash_table::Entry::Vacant(slot) = entry else {
            return Ok(Err(name));
        };
        slot.insert(id);
        self.tensors.push(TensorInfo {
            name,
            shape: shape.to_vec(),
            annotation: None,
            priority: 0,
            param: false,
            producer: None,
            consumers: Vec::new(),
        });
        Ok(Ok(id))
    }

    /// The tensor called `name`.
    pub fn find(&self, name: &str) -> Option<TensorId> {
        self.names
            .find(name_hash(name), |t| self.tensors[t.index()].name == name)
            .copied()
    }

    /// Fixes a tensor's attr: propagation never changes it, and the reshard
    /// plan brings whatever its producer makes to it.
    pub fn annotate(&mut self, t: TensorId, attr: DistAttr) -> Result<(), GraphError> {
        self.annotate_with_priority(t, attr, 0)
    }

    /// [`GraphBuilder::annotate`] with a priority: annotations of priority
    /// 0 propagate to a fixed point before those of priority 1 join, and so
    /// on (Shardy's user priorities). Every annotation is kept whatever its
    /// priority.
    pub fn annotate_with_priority(
        &mut self,
        t: TensorId,
        attr: DistAttr,
        priority: u32,
    ) -> Result<(), GraphError> {
        self.check_ids("annotate", &[t])?;
        let info = &self.tensors[t.index()];
        check_attr(&self.mesh, &info.name, &info.shape, &attr)?;
        let info = &mut self.tensors[t.index()];
        info.annotation = Some(attr);
        info.priority = priority;
        Ok(())
    }

    /// Marks a tensor as a trainable weight (an id from another builder is
    /// ignored).
    pub fn mark_param(&mut self, t: TensorId) {
        if let Some(info) = self.tensors.get_mut(t.index()) {
            info.param = true;
        }
    }

    /// Ids from another builder are an error, not a panic.
    fn check_ids(&self, op: &str, ts: &[TensorId]) -> Result<(), GraphError> {
        match ts.iter().find(|t| t.index() >= self.tensors.len()) {
            Some(t) => Err(GraphError::UnknownTensor {
                op: op.into(),
                name: format!("#{}", t.0),
            }),
            None => Ok(()),
        }
    }

    /// Declares a trainable weight, annotated when `attr` is given.
    pub fn param(
        &mut self,
        name: &str,
        shape: &[usize],
        attr: Option<DistAttr>,
    ) -> Result<TensorId, GraphError> {
        let t = self.tensor(name, shape)?;
        self.mark_param(t);
        if let Some(a) = attr {
            self.annotate(t, a)?;
        }
        Ok(t)
    }

    /// Adds an op over declared tensors.
    pub fn op(
        &mut self,
        name: &str,
        rule: &str,
        attrs: Attrs,
        kind: OpKind,
        inputs: &[TensorId],
        outputs: &[TensorId],
    ) -> Result<OpId, GraphError> {
        let name = if name.is_empty() {
            format!("{rule}#{}", self.ops.len())
        } else {
            name.to_string()
        };
        self.op_with(name, rule, attrs, kind, inputs, outputs, None)
    }

    /// [`GraphBuilder::op`] with an owned name and, optionally, the rule
    /// already built (`build` then neither looks it up nor builds it).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn op_with(
        &mut self,
        name: String,
        rule: &str,
        attrs: Attrs,
        kind: OpKind,
        inputs: &[TensorId],
        outputs: &[TensorId],
        prebuilt: Option<Prebuilt>,
    ) -> Result<OpId, GraphError> {
        let id = OpId(self.ops.len() as u32);
        self.check_ids(&name, inputs)?;
        self.check_ids(&name, outputs)?;
        for &t in outputs {
            let info = &mut self.tensors[t.index()];
            if let Some(first) = info.producer {
                return Err(GraphError::ProducedTwice {
                    tensor: info.name.clone(),
                    first: self.ops[first.index()].name.clone(),
                    second: name,
                });
            }
            info.producer = Some(id);
        }
        for &t in inputs {
            self.tensors[t.index()].consumers.push(id);
        }
        self.ops.push(OpInfo {
            name,
            rule: rule.into(),
            attrs,
            kind,
            inputs: inputs.to_vec(),
            outputs: outputs.to_vec(),
        });
        self.prebuilt.push(prebuilt);
        Ok(id)
    }

    /// Adds a forward op with one new output tensor.
    pub fn apply(
        &mut self,
        name: &str,
        rule: &str,
        attrs: Attrs,
        inputs: &[TensorId],
        output: (&str, &[usize]),
    ) -> Result<TensorId, GraphError> {
        let out = self.tensor(output.0, output.1)?;
        self.op(name, rule, attrs, OpKind::Forward, inputs, &[out])?;
        Ok(out)
    }

    /// Adds a forward op with several new output tensors.
    pub fn apply_n(
        &mut self,
        name: &str,
        rule: &str,
        attrs: Attrs,
        inputs: &[TensorId],
        outputs: &[(&str, &[usize])],
    ) -> Result<Vec<TensorId>, GraphError> {
        let outs = outputs
            .iter()
            .map(|(n, s)| self.tensor(n, s))
            .collect::<Result<Vec<_>, _>>()?;
        self.op(name, rule, attrs, OpKind::Forward, inputs, &outs)?;
        Ok(outs)
    }

    /// Checks the graph and builds every op's rule from `registry`. Each op
    /// runs once on replicated inputs, which checks its shapes, its arity
    /// and its outputs' ranks against the declared tensors.
    pub fn build(self, registry: &Registry) -> Result<Graph, GraphError> {
        self.build_with(registry, true)
    }

    /// [`GraphBuilder::build`] for a graph derived from a built one (the
    /// backward graph), whose shapes and arities hold by construction: the
    /// up-front runs of every op (declared output shapes, then arity and
    /// output ranks) happen in debug builds (every test). In release the
    /// shapes are checked when propagation passes them to the rules, which
    /// reject a disagreement then, and the ranks when it learns an output's
    /// attr. Skipping those runs was most of building a large model's
    /// backward graph.
    pub(crate) fn build_derived(self, registry: &Registry) -> Result<Graph, GraphError> {
        self.build_with(registry, cfg!(debug_assertions))
    }

    fn build_with(mut self, registry: &Registry, check_calls: bool) -> Result<Graph, GraphError> {
        // Every op kind without a rule, named at once: an exported model
        // meets several, and one at a time would take as many runs.
        let mut missing: Vec<MissingRule> = Vec::new();
        let unbuilt = self.ops.iter().zip(&self.prebuilt);
        for (op, _) in unbuilt.filter(|(op, p)| p.is_none() && !registry.contains(&op.rule)) {
            match missing.iter_mut().find(|m| m.rule == op.rule) {
                Some(m) => m.ops += 1,
                None => missing.push(MissingRule {
                    rule: op.rule.clone(),
                    ops: 1,
                    first_op: op.name.clone(),
                    suggestions: match registry.get(&op.rule) {
                        Err(SpmdError::UnknownRule { suggestions, .. }) => suggestions,
                        _ => Vec::new(),
                    },
                }),
            }
        }
        if !missing.is_empty() {
            return Err(GraphError::MissingRules { missing });
        }
        let mut rules = Vec::with_capacity(self.ops.len());
        let mut stages = Vec::with_capacity(self.ops.len());
        let mut prebuilt = std::mem::take(&mut self.prebuilt);
        for (i, op) in self.ops.iter().enumerate() {
            for &t in &op.inputs {
                if let Some(p) = self.tensors[t.index()].producer
                    && p.index() >= i
                {
                    return Err(GraphError::NotTopological {
                        op: op.name.clone(),
                        tensor: self.tensors[t.index()].name.clone(),
                        producer: self.ops[p.index()].name.clone(),
                    });
                }
            }
            let (rule, stage) = match prebuilt[i].take() {
                Some(Prebuilt { rule, stage }) => (rule, stage),
                None => {
                    let rule =
                        registry
                            .build(&op.rule, &op.attrs)
                            .map_err(|source| GraphError::Rule {
                                op: op.name.clone(),
                                source,
                            })?;
                    let stage = match op.kind {
                        OpKind::Forward => registry.get(&op.rule).map_or(Stage::Other, Stage::of),
                        OpKind::Grad { .. } => Stage::Other,
                    };
                    (Arc::from(rule), stage)
                }
            };
            if check_calls && op.kind == OpKind::Forward {
                self.check_declared_shapes(op, &*rule)?;
            }
            stages.push(stage);
            rules.push(rule);
        }
        // Ops with the same rule, attributes, kind and shapes share a
        // signature (the memo answers them alike). Keyed by a hash of those,
        // with the representative op compared on a hash match: no text.
        let same = |a: &OpInfo, b: &OpInfo| {
            a.rule == b.rule
                && a.attrs == b.attrs
                && a.kind == b.kind
                && a.inputs.len() == b.inputs.len()
                && a.outputs.len() == b.outputs.len()
                && a.inputs
                    .iter()
                    .chain(&a.outputs)
                    .zip(b.inputs.iter().chain(&b.outputs))
                    .all(|(x, y)| self.tensors[x.index()].shape == self.tensors[y.index()].shape)
        };
        let mut by_hash: HashMap<
            u64,
            smallvec::SmallVec<[(usize, u32); 1]>,
            rustc_hash::FxBuildHasher,
        > = HashMap::default();
        let mut n_signatures = 0u32;
        let signatures: Vec<u32> = self
            .ops
            .iter()
            .enumerate()
            .map(|(i, op)| {
                let mut h = rustc_hash::FxHasher::default();
                op.rule.hash(&mut h);
                for (name, value) in op.attrs.iter() {
                    name.hash(&mut h);
                    hash_attr(value, &mut h);
                }
                matches!(op.kind, OpKind::Forward).hash(&mut h);
                for t in op.inputs.iter().chain(&op.outputs) {
                    self.tensors[t.index()].shape.hash(&mut h);
                }
                let bucket = by_hash.entry(h.finish()).or_default();
                match bucket.iter().find(|&&(j, _)| same(&self.ops[j], op)) {
                    Some(&(_, sig)) => sig,
                    None => {
                        bucket.push((i, n_signatures));
                        n_signatures += 1;
                        n_signatures - 1
                    }
                }
            })
            .collect();
        let mut uses = vec![0u32; n_signatures as usize];
        for &sig in &signatures {
            uses[sig as usize] += 1;
        }
        let shared = signatures
            .iter()
            .map(|&sig| uses[sig as usize] > 1)
            .collect();
        let mut flat = Vec::new();
        let mut spans = Vec::with_capacity(self.ops.len());
        for op in &self.ops {
            spans.push((
                flat.len() as u32,
                op.inputs.len() as u32,
                op.outputs.len() as u32,
            ));
            flat.extend_from_slice(&op.inputs);
            flat.extend_from_slice(&op.outputs);
        }
        let ranks = self.tensors.iter().map(|t| t.shape.len() as u32).collect();
        let mut dims = Vec::with_capacity(self.tensors.iter().map(|t| t.shape.len()).sum());
        let mut dims_at = Vec::with_capacity(self.tensors.len());
        for t in &self.tensors {
            dims_at.push(dims.len() as u32);
            dims.extend_from_slice(&t.shape);
        }
        let kinds = self.ops.iter().map(|op| op.kind).collect();
        let graph = Graph {
            mesh: self.mesh,
            tensors: self.tensors,
            ops: self.ops,
            rules,
            stages,
            signatures,
            shared,
            flat,
            spans,
            ranks,
            dims,
            dims_at,
            kinds,
            prepared: Vec::new(),
        };
        let prepared = graph.op_ids().map(|o| graph.prepare(o)).collect();
        let graph = Graph { prepared, ..graph };
        if !check_calls {
            return Ok(graph);
        }
        let replicated: Vec<DistAttr> = graph
            .tensors
            .iter()
            .map(|t| DistAttr::replicated(t.shape.len()))
            .collect();
        for o in graph.op_ids() {
            let op = graph.op(o);
            let r = graph
                .call_forward(o, &replicated)
                .map_err(|source| GraphError::Rule {
                    op: op.name.clone(),
                    source,
                })?;
            if r.outputs.len() != op.outputs.len() {
                return Err(GraphError::Arity {
                    op: op.name.clone(),
                    rule: op.rule.clone(),
                    what: "outputs",
                    found: op.outputs.len(),
                    expected: format!("gives {}", r.outputs.len()),
                });
            }
            for (&t, a) in op.outputs.iter().zip(&r.outputs) {
                let info = graph.tensor(t);
                if a.dims_mapping.rank() != info.shape.len() {
                    return Err(GraphError::RankMismatch {
                        op: op.name.clone(),
                        tensor: info.name.clone(),
                        expected: info.shape.len(),
                        found: a.dims_mapping.rank(),
                    });
                }
            }
        }
        Ok(graph)
    }
}

/// An annotation must fit its tensor: one entry per dim, mesh dims of the
/// mesh, each used once (sharding or partial).
fn check_attr(mesh: &Mesh, name: &str, shape: &[usize], attr: &DistAttr) -> Result<(), GraphError> {
    let bad = |message: String| GraphError::BadAnnotation {
        tensor: name.into(),
        message,
    };
    if attr.dims_mapping.rank() != shape.len() {
        return Err(bad(format!(
            "a mapping of {} entries for a tensor of rank {}",
            attr.dims_mapping.rank(),
            shape.len()
        )));
    }
    let mut used = spmd_core::MeshSet::EMPTY;
    let dims = attr
        .dims_mapping
        .as_slice()
        .iter()
        .enumerate()
        .flat_map(|(dim, s)| s.iter().map(move |m| (Some(dim), m)))
        .chain(attr.partial.dims().iter().map(|m| (None, m)));
    // The place is named only for an error: this runs for every annotation
    // a search tries.
    let place = |dim: Option<usize>| dim.map_or("partial".to_string(), |d| format!("dim {d}"));
    for (dim, m) in dims {
        if m as usize >= mesh.rank() {
            let place = place(dim);
            return Err(bad(format!(
                "{place} uses mesh dim {m}, but the mesh {mesh} has rank {}",
                mesh.rank()
            )));
        }
        if used.contains(m) {
            return Err(bad(format!("mesh dim {m} is used twice ({})", place(dim))));
        }
        used = used.with(m);
    }
    Ok(())
}

/// An attribute value into a signature hash (floats by their bits).
fn hash_attr(v: &spmd_core::AttrValue, h: &mut impl Hasher) {
    use spmd_core::AttrValue::*;
    std::mem::discriminant(v).hash(h);
    match v {
        Bool(b) => b.hash(h),
        Int(i) => i.hash(h),
        Float(f) => f.to_bits().hash(h),
        Str(s) => s.hash(h),
        Bools(l) => l.hash(h),
        Ints(l) => l.hash(h),
        Floats(l) => l.iter().for_each(|f| f.to_bits().hash(h)),
        Strs(l) => l.hash(h),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ops share a signature exactly when rule, attributes, kind and every
    /// tensor shape agree: an attribute, a float's value or a shape apart
    /// makes another signature.
    #[test]
    fn signatures_group_ops_that_answer_alike() {
        let mut b = GraphBuilder::new(Mesh::new(&[2]).unwrap());
        let x = b.tensor("x", &[4, 6]).unwrap();
        let y = b.tensor("y", &[4, 8]).unwrap();
        let softmax =
            |b: &mut GraphBuilder, name: &str, input: TensorId, axis: i64, shape: &[usize]| {
                b.apply(
                    name,
                    "softmax",
                    Attrs::new().with("axis", axis),
                    &[input],
                    (&format!("{name}.out"), shape),
                )
                .unwrap()
            };
        softmax(&mut b, "a", x, -1, &[4, 6]);
        softmax(&mut b, "b", x, -1, &[4, 6]);
        softmax(&mut b, "c", x, 0, &[4, 6]);
        softmax(&mut b, "d", y, -1, &[4, 8]);
        let scale = |b: &mut GraphBuilder, name: &str, s: f64| {
            b.apply(
                name,
                "scale",
                Attrs::new().with("scale", s),
                &[x],
                (&format!("{name}.out"), &[4, 6]),
            )
            .unwrap()
        };
        scale(&mut b, "e", 2.0);
        scale(&mut b, "f", 2.0);
        scale(&mut b, "g", 2.5);
        let g = b.build(&spmd_ops::builtins()).unwrap();
        let s = &g.signatures;
        assert_eq!(s[0], s[1], "same rule, attributes and shapes");
        assert_ne!(s[0], s[2], "another axis");
        assert_ne!(s[0], s[3], "other shapes");
        assert_eq!(s[4], s[5], "same float");
        assert_ne!(s[4], s[6], "another float");
        assert_eq!(g.shared, [true, true, false, false, true, true, false]);
    }
}
