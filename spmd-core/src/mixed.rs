//! Calls whose tensors may be dense (no dist attr) or distributed, as Paddle's
//! generated code makes them: when any tensor is distributed, every dense one is
//! first promoted to a fully replicated tensor on that mesh; when none is, no
//! rule runs. Dist tensors on two different meshes are an error.

use smallvec::SmallVec;

use crate::dist_attr::{DistAttr, Spec};
use crate::error::{SpmdError, TensorRef};
use crate::mesh::Mesh;
use crate::rule::{RuleResult, SpmdRule, SpmdRuleExt};

/// One tensor of a mixed call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tensor<'a> {
    /// A plain tensor: only its shape is known.
    Dense { shape: &'a [usize] },
    /// A distributed tensor on `mesh`.
    Dist {
        mesh: &'a Mesh,
        shape: &'a [usize],
        attr: &'a DistAttr,
    },
}

impl<'a> Tensor<'a> {
    pub fn shape(&self) -> &'a [usize] {
        match *self {
            Tensor::Dense { shape } | Tensor::Dist { shape, .. } => shape,
        }
    }
}

/// The tensors of a call after promotion: one dist attr per tensor, all on one mesh.
#[derive(Clone, Debug)]
pub struct Promoted<'a> {
    pub mesh: &'a Mesh,
    shapes: SmallVec<[&'a [usize]; 8]>,
    attrs: SmallVec<[DistAttr; 8]>,
}

impl<'a> Promoted<'a> {
    /// The specs to hand to a rule.
    pub fn specs(&self) -> SmallVec<[Spec<'_>; 8]> {
        self.shapes
            .iter()
            .zip(&self.attrs)
            .map(|(s, a)| Spec::new(s, a))
            .collect()
    }
}

/// Tensors of one role, with how to name the i-th of them in an error.
type Group<'g, 'a> = (&'g [Tensor<'a>], fn(usize) -> TensorRef);

/// The mesh shared by every dist tensor of `groups` (checked to be one mesh),
/// or `None` when all are dense.
fn common_mesh<'a>(
    op: &'static str,
    groups: &[Group<'_, 'a>],
) -> Result<Option<&'a Mesh>, SpmdError> {
    let mut mesh: Option<&'a Mesh> = None;
    for (tensors, role) in groups {
        for (i, t) in tensors.iter().enumerate() {
            if let Tensor::Dist { mesh: m, .. } = *t {
                match mesh {
                    None => mesh = Some(m),
                    Some(first) if first != m => {
                        return Err(SpmdError::MeshMismatch {
                            op,
                            tensor: role(i),
                            expected: alloc::format!("{first}"),
                            found: alloc::format!("{m}"),
                        });
                    }
                    Some(_) => {}
                }
            }
        }
    }
    Ok(mesh)
}

fn promote_on<'a>(mesh: &'a Mesh, tensors: &[Tensor<'a>]) -> Promoted<'a> {
    Promoted {
        mesh,
        shapes: tensors.iter().map(Tensor::shape).collect(),
        attrs: tensors
            .iter()
            .map(|t| match *t {
                Tensor::Dense { shape } => DistAttr::replicated(shape.len()),
                Tensor::Dist { attr, .. } => attr.clone(),
            })
            .collect(),
    }
}

/// Promotes the dense tensors of a call: `Ok(None)` when no tensor is
/// distributed (no sharding applies), an error when two meshes differ.
pub fn promote<'a>(
    op: &'static str,
    tensors: &[Tensor<'a>],
) -> Result<Option<Promoted<'a>>, SpmdError> {
    Ok(common_mesh(op, &[(tensors, TensorRef::input)])?.map(|m| promote_on(m, tensors)))
}

/// Forward inference over a mixed call; `Ok(None)` when every input is dense.
pub fn forward_mixed(
    rule: &dyn SpmdRule,
    inputs: &[Tensor<'_>],
) -> Result<Option<RuleResult>, SpmdError> {
    let Some(p) = promote(rule.name(), inputs)? else {
        return Ok(None);
    };
    rule.forward(p.mesh, &p.specs()).map(Some)
}

/// Backward inference over a mixed call: the inputs only lend their shapes, the
/// outputs may be dense or dist; `Ok(None)` when every tensor is dense.
pub fn backward_mixed(
    rule: &dyn SpmdRule,
    inputs: &[Tensor<'_>],
    outputs: &[Tensor<'_>],
) -> Result<Option<RuleResult>, SpmdError> {
    let groups: [Group<'_, '_>; 2] = [(inputs, TensorRef::input), (outputs, TensorRef::output)];
    let Some(mesh) = common_mesh(rule.name(), &groups)? else {
        return Ok(None);
    };
    let shapes: SmallVec<[&[usize]; 8]> = inputs.iter().map(Tensor::shape).collect();
    let outs = promote_on(mesh, outputs);
    rule.backward(mesh, &shapes, &outs.specs()).map(Some)
}

/// What a mixed grad call answers: the requirements of the grad op's inputs
/// (forward inputs, then output grads) and one attr per input grad, `None`
/// where that grad is not needed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MixedGrad {
    pub requirements: SmallVec<[DistAttr; 8]>,
    pub input_grads: SmallVec<[Option<DistAttr>; 4]>,
}

/// Grad inference over a mixed call, as Paddle's generated backward nodes do
/// it: when any forward input or output grad is distributed, the dense ones
/// are promoted to replicated on its mesh, the rule runs, and each input grad
/// whose `needs_grad` entry is false (stop-gradient) gets no attr. `Ok(None)`
/// when every tensor is dense.
pub fn grad_mixed(
    rule: &dyn SpmdRule,
    inputs: &[Tensor<'_>],
    output_grads: &[Tensor<'_>],
    needs_grad: &[bool],
) -> Result<Option<MixedGrad>, SpmdError> {
    let groups: [Group<'_, '_>; 2] = [
        (inputs, TensorRef::input),
        (output_grads, TensorRef::output),
    ];
    let Some(mesh) = common_mesh(rule.name(), &groups)? else {
        return Ok(None);
    };
    let (ins, outs) = (promote_on(mesh, inputs), promote_on(mesh, output_grads));
    let r = rule.grad(mesh, &ins.specs(), &outs.specs())?;
    Ok(Some(MixedGrad {
        input_grads: outputs_needing_grad(&r, needs_grad),
        requirements: r.inputs.into_iter().collect(),
    }))
}

/// The outputs' attrs of a result with `None` for each output that needs no
/// gradient (Paddle's `SetGradOutputDistAttr` skips stop-gradient outputs).
pub fn outputs_needing_grad(
    result: &RuleResult,
    needs_grad: &[bool],
) -> SmallVec<[Option<DistAttr>; 4]> {
    result
        .outputs
        .iter()
        .enumerate()
        .map(|(i, a)| {
            needs_grad
                .get(i)
                .copied()
                .unwrap_or(true)
                .then(|| a.clone())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Einsum;

    fn attr(m: &[i64]) -> DistAttr {
        DistAttr::from_paddle(m).unwrap()
    }

    #[test]
    fn all_dense_runs_no_rule() {
        let mm = Einsum::new("mk,kn->mn").unwrap();
        let ins = [
            Tensor::Dense { shape: &[4, 8] },
            Tensor::Dense { shape: &[8, 2] },
        ];
        assert_eq!(forward_mixed(&mm, &ins).unwrap(), None);
    }

    #[test]
    fn a_dense_input_is_replicated_on_the_dist_inputs_mesh() {
        let mesh = Mesh::new(&[2, 2]).unwrap();
        let mm = Einsum::new("mk,kn->mn").unwrap();
        let y = attr(&[-1, 1]);
        let ins = [
            Tensor::Dense { shape: &[4, 8] },
            Tensor::Dist {
                mesh: &mesh,
                shape: &[8, 2],
                attr: &y,
            },
        ];
        let r = forward_mixed(&mm, &ins).unwrap().unwrap();
        // x had no sharding to offer, y's n sharding flows to the output.
        assert_eq!(r.inputs[0], attr(&[-1, -1]));
        assert_eq!(r.outputs[0], attr(&[-1, 1]));
    }

    #[test]
    fn two_meshes_are_an_error_naming_the_second_tensor() {
        let a = Mesh::new(&[2, 2]).unwrap();
        let b = Mesh::new(&[4]).unwrap();
        let (x, y) = (attr(&[0, -1]), attr(&[-1]));
        let ins = [
            Tensor::Dist {
                mesh: &a,
                shape: &[4, 8],
                attr: &x,
            },
            Tensor::Dense { shape: &[8, 2] },
        ];
        let outs = [Tensor::Dist {
            mesh: &b,
            shape: &[4],
            attr: &y,
        }];
        let err = backward_mixed(&Einsum::new("mk,kn->m").unwrap(), &ins, &outs).unwrap_err();
        assert!(
            matches!(err, SpmdError::MeshMismatch { tensor, .. } if tensor == TensorRef::output(0)),
            "{err}"
        );
    }

    #[test]
    fn same_shape_different_process_ids_are_different_meshes() {
        let a = Mesh::new(&[2]).unwrap();
        let b = Mesh::with_process_ids(&[2], &[4, 5]).unwrap();
        let (x, y) = (attr(&[0]), attr(&[-1]));
        let ins = [
            Tensor::Dist {
                mesh: &a,
                shape: &[4],
                attr: &x,
            },
            Tensor::Dist {
                mesh: &b,
                shape: &[4],
                attr: &y,
            },
        ];
        assert!(promote("add", &ins).is_err());
    }

    #[test]
    fn outputs_that_need_no_grad_get_no_attr() {
        let r = RuleResult {
            inputs: SmallVec::new(),
            outputs: [attr(&[0]), attr(&[-1])].into_iter().collect(),
        };
        let got = outputs_needing_grad(&r, &[true, false]);
        assert_eq!(got.as_slice(), &[Some(attr(&[0])), None]);
    }
}
