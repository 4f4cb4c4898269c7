//! Building a graph: tensors declared by name, ops added in a topological
//! order, and the checks `build` runs once (every rule built, annotations
//! valid, declared output shapes what the inputs give).

use std::hash::Hasher;
use std::sync::Arc;

use spmd_core::{
    Attrs, DistAttr, Mesh, Registry, Spec, SpmdError, SpmdRule, SpmdRuleExt, TensorSet,
};

use super::{Graph, OpId, OpInfo, OpKind, Stage, Structure, TensorId, TensorInfo};
use crate::error::{GraphError, MissingRule};

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
    /// Every op's tensors and kind, every tensor's shape: what the graph
    /// keeps as built.
    structure: Structure,
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
    fn check_declared_shapes(&self, o: OpId, rule: &dyn SpmdRule) -> Result<(), GraphError> {
        let op = &self.ops[o.index()];
        let structure = &self.structure;
        let (op_inputs, op_outputs) = structure.io(o);
        let replicated: Vec<DistAttr> = op_inputs
            .iter()
            .map(|&t| DistAttr::replicated(structure.rank(t)))
            .collect();
        let inputs: Vec<Spec<'_>> = op_inputs
            .iter()
            .zip(&replicated)
            .map(|(&t, a)| Spec::new(structure.shape(t), a))
            .collect();
        let output_shapes: Vec<&[usize]> = op_outputs.iter().map(|&t| structure.shape(t)).collect();
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
                op_outputs.get(tensor.index)
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
            structure: Structure::default(),
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
        if shape.len() > GraphError::MAX_RANK {
            return Err(GraphError::RankTooLarge {
                tensor: name,
                rank: shape.len(),
            });
        }
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
        self.structure.push_tensor(shape);
        self.tensors.push(TensorInfo {
            name,
            annotation: None,
            priority: 0,
            param: false,
            differentiable: true,
            producer: None,
            consumers: Vec::new(),
            read: None,
            read_by: Vec::new(),
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
        check_attr(&self.mesh, &info.name, self.structure.shape(t), &attr)?;
        let info = &mut self.tensors[t.index()];
        info.annotation = Some(attr);
        info.priority = priority;
        Ok(())
    }

    /// Gives tensor `t` a read layout: every op that reads it is given
    /// `attr`, and the tensor is resharded to it where it is read (see
    /// [`TensorInfo::read`](super::TensorInfo::read)).
    pub fn read_as(&mut self, t: TensorId, attr: DistAttr) -> Result<(), GraphError> {
        self.check_ids("read_as", &[t])?;
        let info = &self.tensors[t.index()];
        check_read(&self.mesh, &info.name, self.structure.shape(t), &attr)?;
        self.tensors[t.index()].read = Some(attr);
        Ok(())
    }

    /// Marks a tensor as a trainable weight (an id from another builder is
    /// ignored).
    pub fn mark_param(&mut self, t: TensorId) {
        if let Some(info) = self.tensors.get_mut(t.index()) {
            info.param = true;
        }
    }

    /// Marks `t` as holding integers or booleans: no gradient flows
    /// through it (see [`TensorInfo::differentiable`]).
    pub fn mark_not_differentiable(&mut self, t: TensorId) {
        if let Some(info) = self.tensors.get_mut(t.index()) {
            info.differentiable = false;
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

    /// [`GraphBuilder::op`] where optional inputs may be absent: `inputs`
    /// gives one entry per input slot of the rule, `None` for an absent
    /// one (ATen's `None` weight and bias of `native_layer_norm`). The
    /// rule must declare those slots optional; `build` names the op and
    /// the tensor otherwise.
    ///
    /// ```
    /// use spmd_core::{Attrs, Mesh};
    /// use spmd_graph::{GraphBuilder, OpKind};
    ///
    /// let mut b = GraphBuilder::new(Mesh::new(&[2])?);
    /// let x = b.tensor("x", &[8, 16])?;
    /// let y = b.tensor("y", &[8, 16])?;
    /// let mean = b.tensor("mean", &[8, 1])?;
    /// let rstd = b.tensor("rstd", &[8, 1])?;
    /// let attrs = Attrs::new().with("normalized_shape", vec![16i64]);
    /// let norm = b.op_optional(
    ///     "norm", "aten.native_layer_norm", attrs, OpKind::Forward,
    ///     &[Some(x), None, None], &[y, mean, rstd],
    /// )?;
    /// let graph = b.build(&spmd_ops::builtins())?;
    /// assert_eq!(graph.inputs(norm), [x]);
    /// assert!(graph.op(norm).absent.contains(2));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn op_optional(
        &mut self,
        name: &str,
        rule: &str,
        attrs: Attrs,
        kind: OpKind,
        inputs: &[Option<TensorId>],
        outputs: &[TensorId],
    ) -> Result<OpId, GraphError> {
        let name = if name.is_empty() {
            format!("{rule}#{}", self.ops.len())
        } else {
            name.to_string()
        };
        if inputs.len() > 64 {
            return Err(GraphError::Arity {
                op: name,
                rule: rule.into(),
                what: "input slots",
                found: inputs.len(),
                expected: "has at most 64 (absent ones included)".into(),
            });
        }
        let absent = inputs
            .iter()
            .enumerate()
            .filter(|(_, t)| t.is_none())
            .fold(TensorSet::EMPTY, |set, (i, _)| set.with(i));
        let present: Vec<TensorId> = inputs.iter().flatten().copied().collect();
        let id = self.op_with(name, rule, attrs, kind, &present, outputs, None)?;
        self.set_absent(id, absent);
        Ok(id)
    }

    /// Marks op `o`'s input slots in `absent` absent (see
    /// [`OpInfo::absent`]).
    pub(crate) fn set_absent(&mut self, o: OpId, absent: TensorSet) {
        self.ops[o.index()].absent = absent;
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
            absent: TensorSet::EMPTY,
        });
        self.structure.push_op(kind, inputs, outputs);
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
            let o = OpId(i as u32);
            for &t in self.structure.io(o).0 {
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
                    let stage = match self.structure.kind(o) {
                        OpKind::Forward => registry.get(&op.rule).map_or(Stage::Other, Stage::of),
                        OpKind::Grad { .. } => Stage::Other,
                    };
                    let rule: Arc<dyn SpmdRule> = Arc::from(rule);
                    let rule = match op.absent.is_empty() {
                        true => rule,
                        false => Arc::new(super::absent::AbsentSlots {
                            inner: rule,
                            absent: op.absent,
                            no_grad: registry
                                .get(&op.rule)
                                .map_or(TensorSet::EMPTY, |i| i.no_grad),
                        }),
                    };
                    (rule, stage)
                }
            };
            if check_calls && self.structure.kind(o) == OpKind::Forward {
                self.check_declared_shapes(o, &*rule)?;
            }
            stages.push(stage);
            rules.push(rule);
        }
        let (signatures, shared) = super::signature::signatures(&self.ops, &self.structure);
        let n_tensors = self.tensors.len();
        let graph = Graph {
            mesh: self.mesh,
            tensors: self.tensors,
            ops: self.ops,
            rules,
            stages,
            signatures,
            shared,
            structure: self.structure,
            prepared: Vec::new(),
            results: vec![false; n_tensors],
            has_reads: false,
        };
        let has_reads = graph
            .tensors
            .iter()
            .any(|t| t.read.is_some() || !t.read_by.is_empty());
        let prepared = graph.op_ids().map(|o| graph.prepare(o)).collect();
        let graph = Graph {
            prepared,
            has_reads,
            ..graph
        };
        if !check_calls {
            return Ok(graph);
        }
        let replicated: Vec<DistAttr> = graph
            .tensor_ids()
            .map(|t| DistAttr::replicated(graph.rank(t)))
            .collect();
        for o in graph.op_ids() {
            let op = graph.op(o);
            let r = graph
                .call_forward(o, &replicated)
                .map_err(|source| GraphError::Rule {
                    op: op.name.clone(),
                    source,
                })?;
            let outputs = graph.outputs(o);
            if r.outputs.len() != outputs.len() {
                return Err(GraphError::Arity {
                    op: op.name.clone(),
                    rule: op.rule.clone(),
                    what: "outputs",
                    found: outputs.len(),
                    expected: format!("gives {}", r.outputs.len()),
                });
            }
            for (&t, a) in outputs.iter().zip(&r.outputs) {
                if a.dims_mapping.rank() != graph.rank(t) {
                    return Err(GraphError::RankMismatch {
                        op: op.name.clone(),
                        tensor: graph.tensor(t).name.clone(),
                        expected: graph.rank(t),
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
/// Checks a read layout: an annotation's checks, and no partial status
/// (an op reads values whole).
pub(crate) fn check_read(
    mesh: &Mesh,
    name: &str,
    shape: &[usize],
    attr: &DistAttr,
) -> Result<(), GraphError> {
    check_attr(mesh, name, shape, attr)?;
    if attr.partial.is_partial() {
        return Err(GraphError::BadAnnotation {
            tensor: name.to_string(),
            message: format!("the read layout {attr} is partial; an op reads values whole"),
        });
    }
    Ok(())
}

pub(crate) fn check_attr(
    mesh: &Mesh,
    name: &str,
    shape: &[usize],
    attr: &DistAttr,
) -> Result<(), GraphError> {
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
