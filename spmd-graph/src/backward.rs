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
//! - Only tensors that depend on a parameter take gradients (autograd's
//!   `requires_grad`): an op none of whose inputs does (the positions and
//!   masks a model computes from its input ids) has no grad op, and a grad
//!   op's gradient for such an input is computed (the rule's arity says so)
//!   but read by nobody, so it costs no communication.
//! - Each parameter's final gradient is annotated with the parameter's own
//!   layout without partial status: the optimizer needs it so. A gradient
//!   that comes out partial (over a data-parallel mesh dim, say) therefore
//!   shows as an all-reduce at its producer in the reshard plan.

use spmd_core::{Attrs, DistAttr, Partial, Registry};

use crate::error::GraphError;
use crate::graph::{Graph, GraphBuilder, OpKind, TensorId};
use crate::propagate::Propagation;

/// A backward graph and where each forward parameter's gradient is in it.
#[derive(Debug)]
pub struct Backward {
    pub graph: Graph,
    /// (forward parameter, its final gradient in [`Backward::graph`]).
    pub param_grads: Vec<(TensorId, TensorId)>,
}

/// Builds the backward graph of `forward` under the attrs of `prop`, seeded
/// at `outputs` (see the module docs). Parameters are the tensors marked
/// [`param`](crate::TensorInfo::param).
pub fn backward_graph(
    forward: &Graph,
    prop: &Propagation,
    registry: &Registry,
    outputs: &[TensorId],
) -> Result<Backward, GraphError> {
    let mut b = GraphBuilder::new(forward.mesh().clone());
    // Which forward tensors depend on a parameter (in graph order).
    let mut needs_grad: Vec<bool> = forward.tensors().iter().map(|t| t.param).collect();
    for o in forward.op_ids() {
        let op = forward.op(o);
        if op.inputs.iter().any(|t| needs_grad[t.index()]) {
            for t in &op.outputs {
                needs_grad[t.index()] = true;
            }
        }
    }
    // Gradient contributions per forward tensor.
    let mut contributions: Vec<Vec<TensorId>> = vec![Vec::new(); forward.tensors().len()];
    for &t in outputs {
        let info = forward.tensor(t);
        if !contributions[t.index()].is_empty() {
            continue;
        }
        let seed = b.tensor(&fresh(&b, format!("d{}", info.name)), &info.shape)?;
        b.annotate(seed, complete(prop.attr(t)))?;
        contributions[t.index()].push(seed);
    }
    for o in forward.op_ids().rev() {
        let op = forward.op(o);
        if op.kind != OpKind::Forward {
            return Err(GraphError::GradOfGrad {
                op: op.name.clone(),
            });
        }
        if op
            .outputs
            .iter()
            .all(|t| contributions[t.index()].is_empty())
            || !op.inputs.iter().any(|t| needs_grad[t.index()])
        {
            // Nothing downstream needs a gradient from this op, or nothing
            // upstream takes one.
            continue;
        }
        // What the forward op required of its inputs: propagation's own
        // answer when it was given the final attrs, else the rule's.
        let mut called = spmd_core::RuleResult::default();
        let needs = match prop.answer(forward, o) {
            Some((needs, _)) => needs,
            None => {
                forward
                    .call_resolving_into(o, &prop.attrs, 0, &mut called)
                    .map_err(|source| GraphError::Rule {
                        op: op.name.clone(),
                        source,
                    })?;
                called.inputs.as_slice()
            }
        };
        let mut inputs = Vec::with_capacity(op.inputs.len() + op.outputs.len());
        for (&t, need) in op.inputs.iter().zip(needs) {
            let info = forward.tensor(t);
            let saved = b.tensor(
                &fresh(&b, format!("{}@{}", info.name, op.name)),
                &info.shape,
            )?;
            b.annotate(saved, need.clone())?;
            inputs.push(saved);
        }
        for &t in &op.outputs {
            inputs.push(accumulate(
                &mut b,
                forward,
                t,
                &mut contributions[t.index()],
            )?);
        }
        let no_grad = registry
            .get(&op.rule)
            .map_err(|source| GraphError::Rule {
                op: op.name.clone(),
                source,
            })?
            .no_grad;
        let mut outputs = Vec::new();
        for (i, &t) in op.inputs.iter().enumerate() {
            if i < 64 && no_grad & (1 << i) != 0 {
                continue;
            }
            let info = forward.tensor(t);
            let g = b.tensor(
                &fresh(&b, format!("d{}@{}", info.name, op.name)),
                &info.shape,
            )?;
            if needs_grad[t.index()] {
                contributions[t.index()].push(g);
            }
            outputs.push(g);
        }
        b.op(
            &format!("{}_grad", op.name),
            &op.rule,
            op.attrs.clone(),
            OpKind::Grad {
                forward_inputs: op.inputs.len(),
            },
            &inputs,
            &outputs,
        )?;
    }
    let mut param_grads = Vec::new();
    for t in forward.tensor_ids() {
        let info = forward.tensor(t);
        if !info.param || contributions[t.index()].is_empty() {
            continue;
        }
        let g = accumulate(&mut b, forward, t, &mut contributions[t.index()])?;
        b.annotate(g, complete(prop.attr(t)))?;
        param_grads.push((t, g));
    }
    Ok(Backward {
        graph: b.build_derived(registry)?,
        param_grads,
    })
}

/// `base`, or `base~k` for the first `k` that is not a tensor's name yet (an
/// op reading one tensor twice).
fn fresh(b: &GraphBuilder, base: String) -> String {
    if b.find(&base).is_none() {
        return base;
    }
    (2..)
        .map(|k| format!("{base}~{k}"))
        .find(|n| b.find(n).is_none())
        .unwrap_or(base)
}

/// The attr without partial status.
fn complete(a: &DistAttr) -> DistAttr {
    a.clone().with_partial(Partial::NONE)
}

/// The gradient of forward tensor `t`: its single contribution, the sum of
/// several (`add` ops), or a fresh zero gradient when there is none.
fn accumulate(
    b: &mut GraphBuilder,
    forward: &Graph,
    t: TensorId,
    parts: &mut Vec<TensorId>,
) -> Result<TensorId, GraphError> {
    let info = forward.tensor(t);
    let name = format!("d{}", info.name);
    match parts.len() {
        0 => {
            let zero = b.tensor(&format!("{name}@zero"), &info.shape)?;
            parts.push(zero);
            Ok(zero)
        }
        1 => Ok(parts[0]),
        n => {
            let mut sum = parts[0];
            for (k, &part) in parts.iter().enumerate().skip(1) {
                let out = if k + 1 == n {
                    name.clone()
                } else {
                    format!("{name}@sum{k}")
                };
                sum = b.apply(
                    &format!("{name}_acc{k}"),
                    "add",
                    Attrs::new(),
                    &[sum, part],
                    (&out, &info.shape),
                )?;
            }
            *parts = vec![sum];
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
}
