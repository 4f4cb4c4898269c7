//! Grad op signatures: which tensors a gradient operator takes.
//!
//! The derived grad rule (docs/semantics.md §4) takes the forward inputs and one grad per
//! output. Paddle's hand-written grad ops often take other tensors: forward
//! outputs (`topk`'s indices, layer_norm's mean and variance), no forward
//! input at all (`transpose`'s grad reads only `out_grad`), or grads of only
//! some outputs. A [`GradSignature`] lists them; the grad call's `inputs` are
//! then the listed forward tensors in that order, its `output_grads` the
//! listed grads, and the result's requirements follow the same order. The
//! input grads are still one per forward input that has a gradient: an input
//! the grad op does not take gets its rank from its term.
//!
//! The derived form stays accepted: a grad call whose counts of tensors and
//! grads do not fit the signature is read as (forward inputs..., one grad
//! per output), so generic callers (the soundness checker) need not know
//! each op's signature ([`GradSignature::for_call`]).
//!
//! ```
//! use spmd_core::{DistAttr, Einsum, GradSignature, GradTensor, Mesh, Spec, SpmdRuleExt};
//!
//! // out = x^T; its grad op reads only out_grad.
//! let e = Einsum::new("ab->ba")?;
//! let rule = e.rule().with_grad_signature(GradSignature::new(&[], &[0]));
//! let dy = DistAttr::from_paddle(&[1, 0]).unwrap();
//! let r = rule.grad(&Mesh::new(&[2, 2])?, &[], &[Spec::new(&[6, 4], &dy)])?;
//! assert_eq!(r.inputs[0].to_string(), "[1, 0]");   // out_grad as given
//! assert_eq!(r.outputs[0].to_string(), "[0, 1]");  // x_grad, transposed back
//! # let _ = GradTensor::Input(0);
//! # Ok::<(), spmd_core::SpmdError>(())
//! ```

/// A forward tensor a grad op takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GradTensor {
    /// Forward input `i`.
    Input(u8),
    /// The value of forward output `o` (not its grad).
    Output(u8),
}

/// The tensors a grad op takes: forward tensors, then grads of outputs.
/// `None` in a field is the derived default: every forward input in order,
/// one grad per output in order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct GradSignature<'a> {
    pub tensors: Option<&'a [GradTensor]>,
    /// The outputs whose grads the grad op takes, in order.
    pub grads: Option<&'a [u8]>,
}

impl<'a> GradSignature<'a> {
    /// (forward inputs..., one grad per output).
    pub const DERIVED: GradSignature<'static> = GradSignature {
        tensors: None,
        grads: None,
    };

    /// Takes `tensors`, then the grads of the outputs `grads`.
    pub const fn new(tensors: &'a [GradTensor], grads: &'a [u8]) -> GradSignature<'a> {
        GradSignature {
            tensors: Some(tensors),
            grads: Some(grads),
        }
    }

    /// The signature a grad call with `n_given` forward tensors and
    /// `n_grads` grads is read with: this one when the counts fit it, else
    /// the derived form.
    ///
    /// ```
    /// use spmd_core::{GradSignature, GradTensor};
    ///
    /// // topk's grad op: (x, indices, out_grad).
    /// const TOPK: GradSignature<'static> =
    ///     GradSignature::new(&[GradTensor::Input(0), GradTensor::Output(1)], &[0]);
    /// assert_eq!(TOPK.for_call(2, 1), TOPK);
    /// // (x; out_grad, indices_grad): the derived form.
    /// assert_eq!(TOPK.for_call(1, 2), GradSignature::DERIVED);
    /// ```
    pub fn for_call(self, n_given: usize, n_grads: usize) -> GradSignature<'a> {
        let fits = self.tensors.is_none_or(|t| t.len() == n_given)
            && self.grads.is_none_or(|g| g.len() == n_grads);
        if fits { self } else { GradSignature::DERIVED }
    }

    /// The forward tensor the grad call gives at position `k` of its inputs.
    #[inline]
    pub fn tensor(&self, k: usize) -> GradTensor {
        match self.tensors {
            Some(t) => t[k],
            None => GradTensor::Input(k as u8),
        }
    }

    /// How many forward tensors the grad call gives, for a notation with
    /// `n_inputs` inputs.
    #[inline]
    pub fn n_tensors(&self, n_inputs: usize) -> usize {
        self.tensors.map_or(n_inputs, <[GradTensor]>::len)
    }

    /// The output whose grad is at position `g` of the grad call's grads.
    #[inline]
    pub fn grad_of(&self, g: usize) -> usize {
        self.grads.map_or(g, |v| v[g] as usize)
    }

    /// How many grads the grad call gives, for `n_outputs` outputs.
    #[inline]
    pub fn n_grads(&self, n_outputs: usize) -> usize {
        self.grads.map_or(n_outputs, <[u8]>::len)
    }

    /// Where forward tensor `t` is among the grad call's inputs, when given.
    #[inline]
    pub fn position(&self, t: GradTensor, n_inputs: usize) -> Option<usize> {
        match (self.tensors, t) {
            (None, GradTensor::Input(i)) => ((i as usize) < n_inputs).then_some(i as usize),
            (None, GradTensor::Output(_)) => None,
            (Some(list), t) => list.iter().position(|&x| x == t),
        }
    }

    /// Where the grad of output `o` is among the grad call's grads, when given.
    #[inline]
    pub fn grad_position(&self, o: usize, n_outputs: usize) -> Option<usize> {
        match self.grads {
            None => (o < n_outputs).then_some(o),
            Some(list) => list.iter().position(|&x| x as usize == o),
        }
    }
}
