//! What `#[spmd_rule]` implements for an op struct: [`Op`] (name, notations,
//! construction from attributes) on top of [`SpmdRule`], and the [`Call`] that
//! its validation and adjustment hooks receive.

use crate::dist_attr::Spec;
use crate::error::SpmdError;
use crate::mesh::Mesh;
use crate::op_attrs::Attrs;
use crate::optional::Absent;
use crate::prepared::Prepared;
use crate::rule::SpmdRule;
use crate::signature::{GradSignature, GradTensor};

/// The direction and the given tensors of one inference call. `absent`
/// names the absent optional tensors, whose slots hold placeholders
/// ([`Spec::absent`]); [`Call::input_shape`] answers `None` for them. A
/// forward call carries the outputs' shapes when the caller knows them
/// ([`Call::forward_with_output_shapes`]);
/// otherwise `output_shapes` is empty.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub enum Call<'c> {
    Forward {
        mesh: &'c Mesh,
        inputs: &'c [Spec<'c>],
        output_shapes: &'c [&'c [usize]],
        absent: Absent,
        /// The call's shapes compiled once ([`SpmdRule::prepare`]): a rule
        /// answers by it when the call has those shapes, and as if it were
        /// `None` otherwise.
        prepared: Option<&'c Prepared>,
    },
    Backward {
        mesh: &'c Mesh,
        input_shapes: &'c [&'c [usize]],
        outputs: &'c [Spec<'c>],
        absent: Absent,
    },
    /// The gradient op: the forward tensors `signature` lists (by default
    /// the forward inputs) and the grads it lists (by default one per output).
    Grad {
        mesh: &'c Mesh,
        inputs: &'c [Spec<'c>],
        output_grads: &'c [Spec<'c>],
        absent: Absent,
        signature: GradSignature<'c>,
    },
}

impl<'c> Call<'c> {
    /// Appends the shapes the call gives to `key`, flattened: the count of
    /// each list, then each shape's rank and dims (forward: inputs, declared
    /// outputs; backward: inputs, outputs; grad: the grad op's tensors,
    /// output grads). What compiled calls and built notations are kept under.
    pub(crate) fn push_shapes<A: smallvec::Array<Item = usize>>(
        &self,
        key: &mut smallvec::SmallVec<A>,
    ) {
        let mut push = |shapes: &mut dyn Iterator<Item = &[usize]>| {
            let at = key.len();
            key.push(0);
            let mut n = 0;
            for shape in shapes {
                n += 1;
                key.push(shape.len());
                key.extend_from_slice(shape);
            }
            key[at] = n;
        };
        match *self {
            Call::Forward {
                inputs,
                output_shapes,
                ..
            } => {
                push(&mut inputs.iter().map(|s| s.shape));
                push(&mut output_shapes.iter().copied());
            }
            Call::Backward {
                input_shapes,
                outputs,
                ..
            } => {
                push(&mut input_shapes.iter().copied());
                push(&mut outputs.iter().map(|s| s.shape));
            }
            Call::Grad {
                inputs,
                output_grads,
                ..
            } => {
                push(&mut inputs.iter().map(|s| s.shape));
                push(&mut output_grads.iter().map(|s| s.shape));
            }
        }
    }

    /// A forward call with every input present and no output shapes, the
    /// common case (hooks and caches are tested with it; the fields of
    /// `Call` grow as the core learns new call forms).
    #[inline]
    pub fn forward(mesh: &'c Mesh, inputs: &'c [Spec<'c>]) -> Call<'c> {
        Call::Forward {
            mesh,
            inputs,
            output_shapes: &[],
            absent: Absent::NONE,
            prepared: None,
        }
    }

    /// A forward call with every input present and the outputs' shapes
    /// (rules whose notation depends on them, Paddle's variadic fallbacks
    /// `replicated` and `default_data_parallel`, need them; a graph knows
    /// them and has them checked).
    #[inline]
    pub fn forward_with_output_shapes(
        mesh: &'c Mesh,
        inputs: &'c [Spec<'c>],
        output_shapes: &'c [&'c [usize]],
    ) -> Call<'c> {
        Call::Forward {
            mesh,
            inputs,
            output_shapes,
            absent: Absent::NONE,
            prepared: None,
        }
    }

    /// The call answered by `prepared` where it applies (see
    /// [`Prepared`]); other directions are unchanged.
    #[inline]
    pub fn with_prepared(self, prepared: &'c Prepared) -> Call<'c> {
        match self {
            Call::Forward {
                mesh,
                inputs,
                output_shapes,
                absent,
                ..
            } => Call::Forward {
                mesh,
                inputs,
                output_shapes,
                absent,
                prepared: Some(prepared),
            },
            other => other,
        }
    }

    /// The preparation a forward call carries.
    #[inline]
    pub fn prepared(&self) -> Option<&'c Prepared> {
        match *self {
            Call::Forward { prepared, .. } => prepared,
            _ => None,
        }
    }

    /// A backward call with every tensor present.
    #[inline]
    pub fn backward(
        mesh: &'c Mesh,
        input_shapes: &'c [&'c [usize]],
        outputs: &'c [Spec<'c>],
    ) -> Call<'c> {
        Call::Backward {
            mesh,
            input_shapes,
            outputs,
            absent: Absent::NONE,
        }
    }

    /// A grad call with every tensor present, in the default signature; a
    /// rule answers it in its own ([`Call::with_grad_signature`]).
    #[inline]
    pub fn grad(mesh: &'c Mesh, inputs: &'c [Spec<'c>], output_grads: &'c [Spec<'c>]) -> Call<'c> {
        Call::Grad {
            mesh,
            inputs,
            output_grads,
            absent: Absent::NONE,
            signature: GradSignature::DERIVED.for_call(inputs.len(), output_grads.len()),
        }
    }

    /// The call with the tensors `absent` names marked absent (their slots
    /// hold placeholders).
    #[inline]
    pub fn with_absent(self, absent: Absent) -> Call<'c> {
        match self {
            Call::Forward {
                mesh,
                inputs,
                output_shapes,
                prepared,
                ..
            } => Call::Forward {
                mesh,
                inputs,
                output_shapes,
                absent,
                prepared,
            },
            Call::Backward {
                mesh,
                input_shapes,
                outputs,
                ..
            } => Call::Backward {
                mesh,
                input_shapes,
                outputs,
                absent,
            },
            Call::Grad {
                mesh,
                inputs,
                output_grads,
                signature,
                ..
            } => Call::Grad {
                mesh,
                inputs,
                output_grads,
                absent,
                signature,
            },
        }
    }

    /// The call with a grad call's tensors read in `signature` (the rule's
    /// grad op's); other directions are unchanged.
    #[inline]
    pub fn with_grad_signature(self, signature: GradSignature<'c>) -> Call<'c> {
        match self {
            Call::Grad {
                mesh,
                inputs,
                output_grads,
                absent,
                ..
            } => Call::Grad {
                mesh,
                inputs,
                output_grads,
                absent,
                signature: signature.for_call(inputs.len(), output_grads.len()),
            },
            other => other,
        }
    }

    #[inline]
    pub fn mesh(&self) -> &'c Mesh {
        match *self {
            Call::Forward { mesh, .. } | Call::Backward { mesh, .. } | Call::Grad { mesh, .. } => {
                mesh
            }
        }
    }
    #[inline]
    pub fn is_forward(&self) -> bool {
        matches!(self, Call::Forward { .. })
    }
    #[inline]
    pub fn is_backward(&self) -> bool {
        matches!(self, Call::Backward { .. })
    }

    /// The absent tensors of this call.
    #[inline]
    pub fn absent(&self) -> Absent {
        match *self {
            Call::Forward { absent, .. }
            | Call::Backward { absent, .. }
            | Call::Grad { absent, .. } => absent,
        }
    }

    /// Whether forward input `i` is an absent optional tensor (`case(when =
    /// call.input_absent(1), ..)` picks a notation for a call without it).
    #[inline]
    pub fn input_absent(&self, i: usize) -> bool {
        match self.input_slot(i) {
            Some(k) => self.absent().input(k),
            None => false,
        }
    }

    /// Where forward input `i` is in the call's inputs: `i` itself, except
    /// in a grad call whose signature reorders or leaves it out.
    #[inline]
    fn input_slot(&self, i: usize) -> Option<usize> {
        match *self {
            Call::Grad {
                inputs, signature, ..
            } => signature.position(GradTensor::Input(i as u8), inputs.len()),
            _ => Some(i),
        }
    }

    /// The rank of input `i`, whichever the direction (`case(when = ..)` can
    /// pick a notation by rank: `call.input_rank(0) == Some(1)`).
    #[inline]
    pub fn input_rank(&self, i: usize) -> Option<usize> {
        self.input_shape(i).map(<[usize]>::len)
    }

    /// The shape of output `o`, whichever the direction: in forward, when
    /// the call carries the outputs' shapes; in grad, from its grad or (when
    /// the grad op takes it) its value.
    #[inline]
    pub fn output_shape(&self, o: usize) -> Option<&'c [usize]> {
        match *self {
            Call::Forward {
                output_shapes,
                absent,
                ..
            } => (!absent.output(o))
                .then(|| output_shapes.get(o).copied())
                .flatten(),
            Call::Backward {
                outputs, absent, ..
            } => (!absent.output(o))
                .then(|| outputs.get(o).map(|s| s.shape))
                .flatten(),
            Call::Grad {
                inputs,
                output_grads,
                absent,
                signature,
                ..
            } => {
                let n_out = output_grads.len().max(o + 1);
                if let Some(g) = signature.grad_position(o, n_out)
                    && !absent.output(g)
                    && let Some(s) = output_grads.get(g)
                {
                    return Some(s.shape);
                }
                signature
                    .position(GradTensor::Output(o as u8), inputs.len())
                    .filter(|&k| !absent.input(k))
                    .and_then(|k| inputs.get(k))
                    .map(|s| s.shape)
            }
        }
    }

    /// How many input tensors the call gives (forward inputs, backward's
    /// input shapes, the grad op's forward tensors).
    #[inline]
    pub fn n_inputs(&self) -> usize {
        match *self {
            Call::Forward { inputs, .. } | Call::Grad { inputs, .. } => inputs.len(),
            Call::Backward { input_shapes, .. } => input_shapes.len(),
        }
    }

    /// How many outputs the call gives (shapes or specs); 0 for a forward
    /// call without the outputs' shapes.
    #[inline]
    pub fn n_outputs(&self) -> usize {
        match *self {
            Call::Forward { output_shapes, .. } => output_shapes.len(),
            Call::Backward { outputs, .. } => outputs.len(),
            Call::Grad { output_grads, .. } => output_grads.len(),
        }
    }

    /// The shape of input `i`, whichever the direction; `None` when the call
    /// has no input `i` or it is absent.
    #[inline]
    pub fn input_shape(&self, i: usize) -> Option<&'c [usize]> {
        if self.input_absent(i) {
            return None;
        }
        let k = self.input_slot(i)?;
        match *self {
            Call::Forward { inputs, .. } | Call::Grad { inputs, .. } => {
                inputs.get(k).map(|s| s.shape)
            }
            Call::Backward { input_shapes, .. } => input_shapes.get(k).copied(),
        }
    }
}

/// An op type with a sharding rule: what registries need to list it and to
/// build it from Paddle-style attributes. `#[spmd_rule]` implements it.
pub trait Op: SpmdRule + Sized + 'static {
    /// The registry name.
    const NAME: &'static str;
    /// The notations the rule can use (the first is the default); empty when
    /// the notation is built at run time.
    const NOTATIONS: &'static [&'static str];
    /// The attribute names the op reads (its fields).
    const ATTRS: &'static [&'static str];
    /// The inputs' and outputs' names, when the rule declares them.
    const INPUTS: &'static [&'static str] = &[];
    const OUTPUTS: &'static [&'static str] = &[];
    /// Inputs without a gradient (bit `i` = input `i`): grad inference
    /// returns grads for the others only, in order.
    const NO_GRAD: crate::TensorSet = crate::TensorSet::EMPTY;
    /// The tensors that may be absent.
    const OPTIONAL: Absent = Absent::NONE;
    /// Per attribute of [`Op::ATTRS`]: what its value looks like ("a bool").
    const ATTR_TYPES: &'static [&'static str] = &[];
    /// Per attribute: `None` when it is required, `Some("")` when its
    /// type's default is the default, else the default as written.
    const ATTR_DEFAULTS: &'static [Option<&'static str>] = &[];
    /// The tensors the grad op takes.
    const GRAD: GradSignature<'static> = GradSignature::DERIVED;
    /// Builds the op from attributes by name; missing attributes without a
    /// default and values of the wrong kind are errors.
    fn from_attrs(attrs: &Attrs) -> Result<Self, SpmdError>;
}
