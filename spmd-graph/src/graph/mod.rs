//! The graph: tensors with global shapes (some annotated by the user), ops
//! that name a registry rule with its attributes, and the builder that checks
//! it all once, so that propagation never looks a rule up by name.
//!
//! `builder` checks and builds a graph, `structure` holds every op's
//! tensors and every tensor's shape in flat arrays, `signature` groups the
//! ops that answer alike, `calls` runs an op's rule on a set of attrs.

use std::sync::Arc;

use spmd_core::{Attrs, DistAttr, Mesh, Prepared, SpmdRule, TensorSet};

use crate::error::GraphError;

mod absent;
mod builder;
mod calls;
mod signature;
mod structure;

pub use builder::GraphBuilder;
pub(crate) use builder::{Prebuilt, check_attr, check_read};
use structure::Structure;

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

/// One tensor: a name and the user's annotation if any (never changed by
/// propagation). Its shape is [`Graph::shape`].
#[derive(Clone, Debug)]
pub struct TensorInfo {
    pub name: String,
    pub annotation: Option<DistAttr>,
    /// The annotation's priority, as in Shardy: 0 (the default) propagates
    /// first, then 1, and so on (see the crate docs).
    pub priority: u32,
    /// A trainable weight: [`backward_graph`](crate::backward_graph) gives
    /// it a gradient laid out like it.
    pub param: bool,
    /// Whether a gradient can flow through it: not through integer and
    /// boolean values (indices, masks, comparisons), as in autograd, so the
    /// backward graph stops at them even where they depend on a weight
    /// (the experts a router's top-k picks).
    pub differentiable: bool,
    pub producer: Option<OpId>,
    pub consumers: Vec<OpId>,
    /// The layout every op that reads it is given, when the plan says one
    /// (`read` in a plan file): the tensor keeps its own layout (its
    /// annotation, or what propagation gives it), and each reader's reshard
    /// plan moves it to this one. A parameter stored split and gathered for
    /// use (ZeRO-3) is annotated split and read replicated. Never partial.
    pub read: Option<DistAttr>,
    /// Per op that reads it, the layout that op is given instead (`read_by`
    /// in a plan file): over `read`, for readers that want it otherwise.
    /// Never partial.
    pub read_by: Vec<(OpId, DistAttr)>,
}

/// One op: a display name and the registry rule with its attributes. Its
/// tensors are [`Graph::inputs`] and [`Graph::outputs`], its kind
/// [`Graph::kind`].
#[derive(Clone, Debug)]
pub struct OpInfo {
    pub name: String,
    pub rule: String,
    pub attrs: Attrs,
    /// The rule's input slots left absent (optional tensors given as
    /// `None`, `null` in a graph file); the op's present inputs fill the
    /// others in order. For a grad op, the slots of its forward op's
    /// inputs.
    pub absent: TensorSet,
}

impl OpInfo {
    /// The rule's input slot of present input `k`.
    pub fn slot(&self, k: usize) -> usize {
        (0..)
            .filter(|&i| !self.absent.contains(i))
            .nth(k)
            .expect("slots past the absent ones are present")
    }
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
/// assert_eq!(graph.shape(y), [8, 32]);
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
    /// Every op's tensors and kind, every tensor's shape.
    structure: Structure,
    /// Per forward op that shares its signature with no other (the memo
    /// answers the others): its rule's forward calls prepared for its
    /// shapes (`SpmdRule::prepare`; `Prepared::NONE` when nothing compiles);
    /// a rule call then reads only the layouts.
    pub(crate) prepared: Vec<Prepared>,
    /// Per tensor: whether it is a result of the graph (what the user
    /// reads; see [`Graph::is_result`]).
    pub(crate) results: Vec<bool>,
    /// Whether some tensor has a read layout ([`TensorInfo::read`]): when
    /// none has, a rule call reads the attrs as given without asking.
    pub(crate) has_reads: bool,
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
    /// A hash of op `o`'s rule, attributes, kind and tensor shapes: ops
    /// with equal signatures answer equal layouts equally.
    pub fn signature(&self, o: OpId) -> u32 {
        self.signatures[o.index()]
    }
    pub fn stage(&self, o: OpId) -> Stage {
        self.stages[o.index()]
    }
    /// Op `o`'s present inputs, in the order of its rule's input slots.
    #[inline]
    pub fn inputs(&self, o: OpId) -> &[TensorId] {
        self.structure.io(o).0
    }
    /// Op `o`'s outputs.
    #[inline]
    pub fn outputs(&self, o: OpId) -> &[TensorId] {
        self.structure.io(o).1
    }
    /// How op `o` calls its rule.
    #[inline]
    pub fn kind(&self, o: OpId) -> OpKind {
        self.structure.kind(o)
    }
    /// Op `o`'s inputs and outputs.
    #[inline]
    pub(crate) fn io(&self, o: OpId) -> (&[TensorId], &[TensorId]) {
        self.structure.io(o)
    }
    /// Tensor `t`'s global shape.
    #[inline]
    pub fn shape(&self, t: TensorId) -> &[usize] {
        self.structure.shape(t)
    }
    #[inline]
    pub fn rank(&self, t: TensorId) -> usize {
        self.structure.rank(t)
    }

    /// Replaces tensor `t`'s annotation (`None` removes it), checked as
    /// [`GraphBuilder::annotate_with_priority`] checks one. A search that
    /// tries many plans on one graph changes its annotations in place
    /// rather than building every op's rule again.
    pub fn set_annotation(
        &mut self,
        t: TensorId,
        annotation: Option<(DistAttr, u32)>,
    ) -> Result<(), GraphError> {
        self.known("set_annotation", t)?;
        let info = &mut self.tensors[t.index()];
        if let Some((attr, _)) = &annotation
            && info.annotation.as_ref() != Some(attr)
        {
            check_attr(&self.mesh, &info.name, self.structure.shape(t), attr)?;
        }
        info.priority = annotation.as_ref().map_or(0, |&(_, p)| p);
        info.annotation = annotation.map(|(a, _)| a);
        Ok(())
    }

    /// Sets tensor `t`'s read layout ([`TensorInfo::read`]; `None` removes
    /// it), checked as an annotation is; a partial one is refused.
    pub fn set_read(&mut self, t: TensorId, read: Option<DistAttr>) -> Result<(), GraphError> {
        self.known("set_read", t)?;
        let info = &mut self.tensors[t.index()];
        if let Some(attr) = &read
            && info.read.as_ref() != Some(attr)
        {
            check_read(&self.mesh, &info.name, self.structure.shape(t), attr)?;
        }
        info.read = read;
        self.update_has_reads(t);
        Ok(())
    }

    /// Sets the layouts ops reading tensor `t` are given one by one
    /// ([`TensorInfo::read_by`]; empty removes them), each checked as a
    /// read layout is; an op that does not read `t` is refused.
    pub fn set_read_by(
        &mut self,
        t: TensorId,
        read_by: Vec<(OpId, DistAttr)>,
    ) -> Result<(), GraphError> {
        self.known("set_read_by", t)?;
        let info = &self.tensors[t.index()];
        if info.read_by != read_by {
            for (o, attr) in &read_by {
                if !info.consumers.contains(o) {
                    return Err(GraphError::BadAnnotation {
                        tensor: info.name.clone(),
                        message: format!(
                            "a layout for op #{} to read it, but that op does not read it",
                            o.0
                        ),
                    });
                }
                check_read(&self.mesh, &info.name, self.structure.shape(t), attr)?;
            }
        }
        self.tensors[t.index()].read_by = read_by;
        self.update_has_reads(t);
        Ok(())
    }

    /// An error naming `op` unless tensor `t` is one of this graph's.
    fn known(&self, op: &str, t: TensorId) -> Result<(), GraphError> {
        if t.index() < self.tensors.len() {
            Ok(())
        } else {
            Err(GraphError::UnknownTensor {
                op: op.into(),
                name: format!("#{}", t.0),
            })
        }
    }

    /// Keeps `has_reads` true exactly when some tensor has a read layout,
    /// after tensor `t`'s changed.
    fn update_has_reads(&mut self, t: TensorId) {
        let info = &self.tensors[t.index()];
        self.has_reads = if info.read.is_some() || !info.read_by.is_empty() {
            true
        } else {
            self.has_reads
                && self
                    .tensors
                    .iter()
                    .any(|t| t.read.is_some() || !t.read_by.is_empty())
        };
    }

    /// The layout op `o` is given of its input `t`, with `attrs` the attrs
    /// of every tensor: the tensor's read layout for `o`, else its read
    /// layout, else its attr.
    #[inline]
    pub fn seen<'a>(&'a self, o: OpId, t: TensorId, attrs: &'a [DistAttr]) -> &'a DistAttr {
        if self.has_reads {
            let info = &self.tensors[t.index()];
            if let Some((_, attr)) = info.read_by.iter().find(|(by, _)| *by == o) {
                return attr;
            }
            if let Some(read) = &info.read {
                return read;
            }
        }
        &attrs[t.index()]
    }

    /// The tensor called `name`.
    pub fn find(&self, name: &str) -> Option<TensorId> {
        self.tensors
            .iter()
            .position(|t| t.name == name)
            .map(|i| TensorId(i as u32))
    }
    /// The op called `name`.
    pub fn find_op(&self, name: &str) -> Option<OpId> {
        self.ops
            .iter()
            .position(|op| op.name == name)
            .map(|i| OpId(i as u32))
    }
    /// Whether tensor `t` is a result of the graph, what its user reads:
    /// a result left partial is reduced by the reshard plan. A graph file's
    /// `outputs` are its results; a built graph has those marked with
    /// [`Graph::mark_results`].
    pub fn is_result(&self, t: TensorId) -> bool {
        self.results.get(t.index()).copied().unwrap_or(false)
    }

    /// Whether tensor `t` is a result the reshard plan must reduce when it
    /// is left partial: a result not annotated partial itself (a result
    /// annotated partial is wanted partial, and left so).
    pub fn result_wanted_whole(&self, t: TensorId) -> bool {
        self.is_result(t)
            && !self
                .tensor(t)
                .annotation
                .as_ref()
                .is_some_and(|a| a.partial.is_partial())
    }

    /// Marks tensors as results of the graph (see [`Graph::is_result`]).
    pub fn mark_results(&mut self, results: &[TensorId]) {
        for &t in results {
            if let Some(r) = self.results.get_mut(t.index()) {
                *r = true;
            }
        }
    }

    pub fn op_ids(&self) -> impl DoubleEndedIterator<Item = OpId> + ExactSizeIterator {
        (0..self.ops.len() as u32).map(OpId)
    }
    pub fn tensor_ids(&self) -> impl DoubleEndedIterator<Item = TensorId> + ExactSizeIterator {
        (0..self.tensors.len() as u32).map(TensorId)
    }
}
