//! The backward graph of a propagated forward graph, for training: one grad
//! op per forward op (in reverse), using the registry's grad inference.
//!
//! - Each grad op reads the forward op's inputs as that op saw them (its
//!   requirements under the final attrs: new tensors annotated with them)
//!   and one grad per forward output.
//! - The given outputs (the tensors the loss is computed from) get a seed
//!   gradient annotated like the output, without partial status (the loss
//!   gradient arrives complete).
//! - A forward output without a gradient contribution (a layer norm's mean)
//!   gets an unannotated zero gradient: zeros can be made in any layout.
//! - A tensor read by several ops gets one gradient per reader, summed by
//!   `add` ops: the gradient accumulation.
//! - Each forward tensor's final gradient (a reader's contribution, or the
//!   sum of several) is annotated with the tensor's own layout without
//!   partial status, so the grad op of its producer reads it as the forward
//!   op wrote the tensor and splits its work as the forward op did. A
//!   contribution laid out otherwise (a reader that split the tensor
//!   another way, or left its gradient partial) is resharded into that
//!   layout before the producer's grad op reads it: a gradient is never
//!   carried on in a layout its tensor does not have, where the grad ops
//!   after it would follow it (a replicated product's grad op following a
//!   split gradient gives its weight a split gradient to gather, larger
//!   than the activation's).
//! - Only tensors that depend on a parameter take gradients (autograd's
//!   `requires_grad`): an op none of whose inputs does (the positions and
//!   masks a model computes from its input ids) has no grad op, and a grad
//!   op's gradient for such an input is computed (the rule's arity says so)
//!   but read by nobody, so it costs no communication.
//! - Each parameter's final gradient is annotated with the parameter's own
//!   layout without partial status: the optimizer needs it so. A gradient
//!   that comes out partial (over a data-parallel mesh dim, say) therefore
//!   shows as an all-reduce at its producer in the reshard plan.

use std::sync::Arc;

use spmd_core::{Attrs, DistAttr, Partial, Registry};

use crate::error::GraphError;
use crate::graph::{Graph, GraphBuilder, OpId, OpKind, Prebuilt, Stage, TensorId};
use crate::propagate::Propagation;

/// A backward graph and where each forward parameter's gradient is in it.
#[derive(Clone, Debug)]
pub struct Backward {
    pub graph: Graph,
    /// (forward parameter, its final gradient in [`Backward::graph`]).
    pub param_grads: Vec<(TensorId, TensorId)>,
    /// Where each annotation of [`Backward::graph`] comes from, in the
    /// order they were made: the graph's structure does not depend on the
    /// forward attrs, only these annotations do ([`Backward::reannotate`]).
    sources: Vec<(TensorId, Source)>,
}

/// What a backward tensor's annotation is read from.
#[derive(Clone, Copy, Debug)]
enum Source {
    /// The forward tensor's attr without partial status (a seed, a
    /// parameter's final gradient).
    Complete(TensorId),
    /// What forward op `op` required of its input `input` (a saved input).
    Required { op: OpId, input: usize },
}

/// Where a tensor of a backward graph without a producer comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Given {
    /// Forward op `op`'s input `input`, saved as that op read it (laid out
    /// as it required).
    Saved { op: OpId, input: usize },
    /// The gradient of forward output `output`, where the backward pass
    /// starts (the loss's gradient, complete).
    Seed { output: TensorId },
    /// A zero gradient: a forward output nothing downstream gives one to.
    Zero,
}

impl Backward {
    /// What each backward tensor that no backward op produces holds (see
    /// [`Given`]), in tensor order.
    pub fn given(&self) -> Vec<(TensorId, Given)> {
        let mut out = Vec::new();
        let source = |t: TensorId| {
            self.sources
                .iter()
                .find(|(s, _)| *s == t)
                .map(|(_, src)| *src)
        };
        for t in self.graph.tensor_ids() {
            if self.graph.tensor(t).producer.is_some() {
                continue;
            }
            let given = match source(t) {
                Some(Source::Required { op, input }) => Given::Saved { op, input },
                Some(Source::Complete(f)) => Given::Seed { output: f },
                None => Given::Zero,
            };
            out.push((t, given));
        }
        out
    }

    /// Annotates this backward graph as [`backward_graph`] would for
    /// another propagation `prop` of the same forward graph (only its
    /// annotations changed): the same graph, without building it again. A
    /// search that prices many plans of one graph reuses one backward graph.
    pub fn reannotate(&mut self, forward: &Graph, prop: &Propagation) -> Result<(), GraphError> {
        let mut called = spmd_core::RuleResult::default();
        let mut current: Option<OpId> = None;
        let mut needs: Vec<DistAttr> = Vec::new();
        for &(t, source) in &self.sources {
            let attr = match source {
                Source::Complete(f) => complete(prop.attr(f)),
                Source::Required { op, input } => {
                    if current != Some(op) {
                        needs.clear();
                        needs.extend_from_slice(requirements(forward, prop, op, &mut called)?);
                        current = Some(op);
                    }
                    needs[input].clone()
                }
            };
            self.graph.set_annotation(t, Some((attr, 0)))?;
        }
        Ok(())
    }
}

/// What forward op `o` requires of its inputs under `prop`'s attrs:
/// propagation's own answer when it was given the final attrs, else the
/// rule's (answered into `called`).
fn requirements<'a>(
    forward: &Graph,
    prop: &'a Propagation,
    o: OpId,
    called: &'a mut spmd_core::RuleResult,
) -> Result<&'a [DistAttr], GraphError> {
    match prop.answer(forward, o) {
        Some((needs, _)) => Ok(needs),
        None => {
            forward
                .call_resolving_into(o, &prop.attrs, 0, called)
                .map_err(|source| GraphError::Rule {
                    op: forward.op(o).name.clone(),
                    source,
                })?;
            Ok(called.inputs.as_slice())
        }
    }
}

/// Builds the backward graph of `forward` under the attrs of `prop`, seeded
/// at `outputs` (see the module docs). Parameters are the tensors marked
/// [`param`](crate::TensorInfo::param). Each grad op runs its forward op's
/// rule as `forward` built it (no rule is built again); `registry` gives
/// the rules' `no_grad` inputs and the `add` rule of the gradient sums.
pub fn backward_graph(
    forward: &Graph,
    prop: &Propagation,
    registry: &Registry,
    outputs: &[TensorId],
) -> Result<Backward, GraphError> {
    let mut b = GraphBuilder::new(forward.mesh().clone());
    // The gradient sums all run one `add` rule, built once.
    let add = Prebuilt {
        rule: Arc::from(registry.build("add", &Attrs::new()).map_err(|source| {
            GraphError::Rule {
                op: "add".into(),
                source,
            }
        })?),
        stage: registry.get("add").map_or(Stage::Other, Stage::of),
    };
    // Which forward tensors depend on a parameter through values a
    // gradient flows through (in graph order).
    let mut needs_grad: Vec<bool> = forward.tensors().iter().map(|t| t.param).collect();
    for o in forward.op_ids() {
        if forward.inputs(o).iter().any(|t| needs_grad[t.index()]) {
            for t in forward.outputs(o) {
                needs_grad[t.index()] = forward.tensor(*t).differentiable;
            }
        }
    }
    let mut sources = Vec::new();
    // Gradient contributions per forward tensor.
    let mut contributions: Vec<Vec<TensorId>> = vec![Vec::new(); forward.tensors().len()];
    // Each grad op's tensors, in buffers reused op after op.
    let (mut grad_inputs, mut grad_outputs) = (Vec::new(), Vec::new());
    for &t in outputs {
        let info = forward.tensor(t);
        if !contributions[t.index()].is_empty() {
            continue;
        }
        let seed = fresh(&mut b, join(&["d", &info.name]), forward.shape(t))?;
        b.annotate(seed, complete(prop.attr(t)))?;
        sources.push((seed, Source::Complete(t)));
        contributions[t.index()].push(seed);
    }
    for o in forward.op_ids().rev() {
        let op = forward.op(o);
        if forward.kind(o) != OpKind::Forward {
            return Err(GraphError::GradOfGrad {
                op: op.name.clone(),
            });
        }
        if forward
            .outputs(o)
            .iter()
            .all(|t| contributions[t.index()].is_empty())
            || !forward.inputs(o).iter().any(|t| needs_grad[t.index()])
        {
            // Nothing downstream needs a gradient from this op, or nothing
            // upstream takes one.
            continue;
        }
        // What the forward op required of its inputs.
        let mut called = spmd_core::RuleResult::default();
        let needs = requirements(forward, prop, o, &mut called)?;
        grad_inputs.clear();
        for (i, (&t, need)) in forward.inputs(o).iter().zip(needs).enumerate() {
            let info = forward.tensor(t);
            let saved = fresh(&mut b, join(&[&info.name, "@", &op.name]), forward.shape(t))?;
            b.annotate(saved, need.clone())?;
            sources.push((saved, Source::Required { op: o, input: i }));
            grad_inputs.push(saved);
        }
        for &t in forward.outputs(o) {
            let lay_out = match contributions[t.index()].len() {
                // A zero gradient can be made in any layout.
                0 => false,
                // A lone seed is annotated already.
                1 => !outputs.contains(&t),
                _ => true,
            };
            let g = accumulate(&mut b, &add, forward, t, &mut contributions[t.index()])?;
            if lay_out {
                b.annotate(g, complete(prop.attr(t)))?;
                sources.push((g, Source::Complete(t)));
            }
            grad_inputs.push(g);
        }
        let no_grad = registry
            .get(&op.rule)
            .map_err(|source| GraphError::Rule {
                op: op.name.clone(),
                source,
            })?
            .no_grad;
        grad_outputs.clear();
        for (i, &t) in forward.inputs(o).iter().enumerate() {
            if no_grad.contains(op.slot(i)) {
                continue;
            }
            let info = forward.tensor(t);
            let g = fresh(
                &mut b,
                join(&["d", &info.name, "@", &op.name]),
                forward.shape(t),
            )?;
            if needs_grad[t.index()] {
                contributions[t.index()].push(g);
            }
            grad_outputs.push(g);
        }
        // The grad op runs the forward op's own rule (built once, shared).
        let grad_op = b.op_with(
            join(&[&op.name, "_grad"]),
            &op.rule,
            op.attrs.clone(),
            OpKind::Grad {
                forward_inputs: forward.inputs(o).len(),
            },
            &grad_inputs,
            &grad_outputs,
            Some(Prebuilt {
                rule: forward.rules[o.index()].clone(),
                stage: Stage::Other,
            }),
        )?;
        b.set_absent(grad_op, op.absent);
    }
    let mut param_grads = Vec::new();
    for t in forward.tensor_ids() {
        let info = forward.tensor(t);
        if !info.param || contributions[t.index()].is_empty() {
            continue;
        }
        let g = accumulate(&mut b, &add, forward, t, &mut contributions[t.index()])?;
        b.annotate(g, complete(prop.attr(t)))?;
        sources.push((g, Source::Complete(t)));
        param_grads.push((t, g));
    }
    Ok(Backward {
        graph: b.build_derived(registry)?,
        param_grads,
        sources,
    })
}

/// A new tensor named `base`, or `base~k` for the first `k` that is not a
/// tensor's name yet (an op reading one tensor twice).
fn fresh(b: &mut GraphBuilder, base: String, shape: &[usize]) -> Result<TensorId, GraphError> {
    let base = match b.declare(base, shape)? {
        Ok(t) => return Ok(t),
        Err(base) => base,
    };
    for k in 2.. {
        if let Ok(t) = b.declare(format!("{base}~{k}"), shape)? {
            return Ok(t);
        }
    }
    unreachable!("some suffix is free: the builder holds finitely many names")
}

/// The parts one after the other, in one allocation (`format!` was a tenth
/// of building a large model's backward graph).
fn join(parts: &[&str]) -> String {
    let mut s = String::with_capacity(parts.iter().map(|p| p.len()).sum());
    for p in parts {
        s.push_str(p);
    }
    s
}

/// The attr without partial status.
fn complete(a: &DistAttr) -> DistAttr {
    a.clone().with_partial(Partial::NONE)
}

/// The gradient of forward tensor `t`: its single contribution, the sum of
/// several (`add` ops), or a fresh zero gradient when there is none.
fn accumulate(
    b: &mut GraphBuilder,
    add: &Prebuilt,
    forward: &Graph,
    t: TensorId,
    parts: &mut Vec<TensorId>,
) -> Result<TensorId, GraphError> {
    let info = forward.tensor(t);
    match parts.len() {
        0 => {
            let zero = b.tensor(&join(&["d", &info.name, "@zero"]), forward.shape(t))?;
            parts.push(zero);
            Ok(zero)
        }
        1 => Ok(parts[0]),
        n => {
            let mut sum = parts[0];
            for (k, &part) in parts.iter().enumerate().skip(1) {
                let out = if k + 1 == n {
                    join(&["d", &info.name])
                } else {
                    format!("d{}@sum{k}", info.name)
                };
                // `fresh`: a result the user reads whole is seeded as
                // `d<name>` already, and its sum takes the next free name.
                let out = fresh(b, out, forward.shape(t))?;
                b.op_with(
                    format!("d{}_acc{k}", info.name),
                    "add",
                    Attrs::new(),
                    OpKind::Forward,
                    &[sum, part],
                    &[out],
                    Some(add.clone()),
                )?;
                sum = out;
            }
            parts.truncate(1);
            parts[0] = sum;
            Ok(sum)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, plan, propagate};
    use spmd_core::Mesh;

    /// `y = relu(w) * w` with w split over mesh dim 0: w is read twice, so
    /// its gradient is the sum of two contributions (an `add`), and the
    /// op reading it twice gets distinct saved copies.
    #[test]
    fn a_tensor_read_twice_gets_its_gradients_summed() {
        let registry = spmd_ops::builtins();
        let mut b = GraphBuilder::new(Mesh::new(&[2]).unwrap());
        let w = b
            .param("w", &[4, 6], DistAttr::from_paddle(&[0, -1]))
            .unwrap();
        let r = b
            .apply("act", "relu", Attrs::new(), &[w], ("r", &[4, 6]))
            .unwrap();
        let y = b
            .apply("mul", "multiply", Attrs::new(), &[r, w], ("y", &[4, 6]))
            .unwrap();
        let sq = b
            .apply("sq", "multiply", Attrs::new(), &[y, y], ("sq", &[4, 6]))
            .unwrap();
        let g = b.build(&registry).unwrap();
        let p = propagate(&g).unwrap();
        let bw = backward_graph(&g, &p, &registry, &[sq]).unwrap();
        let names: Vec<&str> = bw.graph.ops().iter().map(|o| o.name.as_str()).collect();
        assert_eq!(
            names,
            ["sq_grad", "dy_acc1", "mul_grad", "act_grad", "dw_acc1"]
        );
        assert!(bw.graph.find("y@sq~2").is_some());
        let (param, grad) = bw.param_grads[0];
        assert_eq!((param, bw.graph.tensor(grad).name.as_str()), (w, "dw"));
        // Everything stays split on mesh dim 0: no communication at all.
        let bp = propagate(&bw.graph).unwrap();
        assert_eq!(bp.attr(grad).to_string(), "[0, -1]");
        assert!(
            plan(&bw.graph, &bp, DType::F32)
                .unwrap()
                .reshards
                .is_empty()
        );
    }

    /// `y = relu(w)` and `z = relu(y)`, both results: `y`'s gradient is its
    /// own seed `dy` plus the one from `z`, and the sum is a tensor of its
    /// own, not a second `dy`.
    #[test]
    fn a_result_read_by_another_result_sums_its_seed() {
        let registry = spmd_ops::builtins();
        let mut b = GraphBuilder::new(Mesh::new(&[2]).unwrap());
        let w = b.param("w", &[4, 6], None).unwrap();
        let y = b
            .apply("act", "relu", Attrs::new(), &[w], ("y", &[4, 6]))
            .unwrap();
        let z = b
            .apply("act2", "relu", Attrs::new(), &[y], ("z", &[4, 6]))
            .unwrap();
        let g = b.build(&registry).unwrap();
        let p = propagate(&g).unwrap();
        let bw = backward_graph(&g, &p, &registry, &[z, y]).unwrap();
        let acc = bw
            .graph
            .op_ids()
            .find(|&o| bw.graph.op(o).name == "dy_acc1")
            .unwrap();
        let sum = bw.graph.tensor(bw.graph.outputs(acc)[0]).name.as_str();
        assert_eq!(sum, "dy~2");
        // The seed and z's contribution are what it adds.
        let parts: Vec<&str> = bw
            .graph
            .inputs(acc)
            .iter()
            .map(|&t| bw.graph.tensor(t).name.as_str())
            .collect();
        assert_eq!(parts, ["dy", "dy@act2"]);
    }

    /// `h = x @ w` (replicated) scaled by `s`, split by column: the
    /// product's gradient comes back split by column. It is gathered where
    /// it is made, into `h`'s own layout, so the product's grad op runs as
    /// the forward product did and gives `w` its gradient whole: the
    /// gather moves `dh` ([8, 6]), not `w`'s gradient split the same way.
    /// Both gradients of `h`, summed or not, are laid out as `h`.
    #[test]
    fn a_gradient_is_laid_out_as_its_tensor() {
        let registry = spmd_ops::builtins();
        for read_twice in [false, true] {
            let mut b = GraphBuilder::new(Mesh::new(&[2]).unwrap());
            let x = b.tensor("x", &[8, 4]).unwrap();
            let w = b
                .param("w", &[4, 6], DistAttr::from_paddle(&[-1, -1]))
                .unwrap();
            let s = b.tensor("s", &[8, 6]).unwrap();
            b.annotate(x, DistAttr::from_paddle(&[-1, -1]).unwrap())
                .unwrap();
            b.annotate(s, DistAttr::from_paddle(&[-1, 0]).unwrap())
                .unwrap();
            let h = b
                .apply("mm", "matmul", Attrs::new(), &[x, w], ("h", &[8, 6]))
                .unwrap();
            b.annotate(h, DistAttr::from_paddle(&[-1, -1]).unwrap())
                .unwrap();
            let mut y = b
                .apply("scale", "multiply", Attrs::new(), &[h, s], ("y", &[8, 6]))
                .unwrap();
            if read_twice {
                y = b
                    .apply("res", "add", Attrs::new(), &[y, h], ("z", &[8, 6]))
                    .unwrap();
            }
            let g = b.build(&registry).unwrap();
            let p = propagate(&g).unwrap();
            let bw = backward_graph(&g, &p, &registry, &[y]).unwrap();
            let bp = propagate(&bw.graph).unwrap();
            let mm_grad = bw
                .graph
                .op_ids()
                .find(|&o| bw.graph.op(o).name == "mm_grad")
                .unwrap();
            // (x, w, dh): dh is h's final gradient.
            let dh = bw.graph.inputs(mm_grad)[2];
            assert_eq!(
                bp.attr(dh).to_string(),
                "[-1, -1]",
                "read twice: {read_twice}"
            );
            let reshards = plan(&bw.graph, &bp, DType::F32).unwrap().reshards;
            let moved: Vec<&str> = reshards
                .iter()
                .filter(|r| !r.steps.is_empty())
                .map(|r| bw.graph.tensor(r.tensor).name.as_str())
                .collect();
            assert!(
                !moved.is_empty() && moved.iter().all(|n| n.starts_with("dh")),
                "read twice: {read_twice}: {moved:?}"
            );
        }
    }

    /// Re-annotating a backward graph for another plan of the same forward
    /// graph gives exactly the annotations building it anew gives.
    #[test]
    fn reannotating_equals_building_anew() {
        let registry = spmd_ops::builtins();
        let mut b = GraphBuilder::new(Mesh::new(&[2, 2]).unwrap());
        let x = b.tensor("x", &[4, 6]).unwrap();
        let w1 = b.param("w1", &[6, 8], None).unwrap();
        let w2 = b.param("w2", &[8, 6], None).unwrap();
        let h = b
            .apply("fc1", "matmul", Attrs::new(), &[x, w1], ("h", &[4, 8]))
            .unwrap();
        let a = b
            .apply("act", "relu", Attrs::new(), &[h], ("a", &[4, 8]))
            .unwrap();
        let y = b
            .apply("fc2", "matmul", Attrs::new(), &[a, w2], ("y", &[4, 6]))
            .unwrap();
        let mut g = b.build(&registry).unwrap();
        let plans: [&[(TensorId, &[i64])]; 3] = [
            &[(x, &[0, -1])],
            &[(w1, &[-1, 1]), (w2, &[1, -1])],
            &[(x, &[0, -1]), (w1, &[-1, 1]), (w2, &[1, -1])],
        ];
        let p = propagate(&g).unwrap();
        let mut reused = backward_graph(&g, &p, &registry, &[y]).unwrap();
        for plan in plans {
            for t in [x, w1, w2] {
                g.set_annotation(t, None).unwrap();
            }
            for &(t, m) in plan {
                g.set_annotation(t, Some((DistAttr::from_paddle(m).unwrap(), 0)))
                    .unwrap();
            }
            let p = propagate(&g).unwrap();
            let fresh = backward_graph(&g, &p, &registry, &[y]).unwrap();
            reused.reannotate(&g, &p).unwrap();
            let annotations = |bw: &Backward| -> Vec<Option<DistAttr>> {
                bw.graph
                    .tensors()
                    .iter()
                    .map(|t| t.annotation.clone())
                    .collect()
            };
            assert_eq!(annotations(&reused), annotations(&fresh), "{plan:?}");
            assert!(annotations(&fresh).iter().any(|a| {
                a.as_ref()
                    .is_some_and(|a| a.dims_mapping.mesh_set() != spmd_core::MeshSet::EMPTY)
            }));
        }
    }

    /// Grad ops run the very rules the forward graph built, and the
    /// gradient sums share one `add` rule: building the backward graph
    /// builds one rule in all, whatever the model's size.
    #[test]
    fn grad_ops_share_the_forward_rules() {
        let registry = spmd_ops::builtins();
        let mut b = GraphBuilder::new(Mesh::new(&[2]).unwrap());
        let x = b.tensor("x", &[4, 6]).unwrap();
        let w = b.param("w", &[6, 6], None).unwrap();
        let h = b
            .apply("mm1", "matmul", Attrs::new(), &[x, w], ("h", &[4, 6]))
            .unwrap();
        let y = b
            .apply("mm2", "matmul", Attrs::new(), &[h, w], ("y", &[4, 6]))
            .unwrap();
        let z = b
            .apply("sum", "add", Attrs::new(), &[y, h], ("z", &[4, 6]))
            .unwrap();
        let g = b.build(&registry).unwrap();
        let p = propagate(&g).unwrap();
        let bw = backward_graph(&g, &p, &registry, &[z]).unwrap();
        let mut adds = Vec::new();
        for o in bw.graph.op_ids() {
            let op = bw.graph.op(o);
            match op.name.strip_suffix("_grad") {
                Some(forward_name) => {
                    let f = g.op_ids().find(|&f| g.op(f).name == forward_name).unwrap();
                    assert!(Arc::ptr_eq(&bw.graph.rules[o.index()], &g.rules[f.index()]));
                }
                None => adds.push(&bw.graph.rules[o.index()]),
            }
        }
        // h and w are each read twice: two sums, one rule.
        assert_eq!(adds.len(), 2);
        assert!(Arc::ptr_eq(adds[0], adds[1]));
    }
}
