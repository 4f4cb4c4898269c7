//! Absent optional tensors (layer_norm without `bias`, flash attention without
//! `attn_mask`): which tensors of a call are absent, and the placeholders that
//! stand in their slots so every call keeps one slice entry per tensor.
//!
//! A rule declares the tensors that may be absent (`optional(..)` of
//! `#[spmd_rule]`, [`EinsumRule::with_optional`](crate::EinsumRule::with_optional));
//! the `*_optional` entry points of [`SpmdRule`](crate::SpmdRule) take
//! `Option`s. Inference leaves an absent tensor out of every step (rank
//! checks, extents, merge, partial status) and answers for it a replicated
//! mapping of its term's explicit dims (an ellipsis stands for none): `[]`
//! for an empty or `...` term, which is Paddle's empty dist attr of an absent
//! tensor, and `[-1]` for a `1` term, as Paddle's layer_norm answers an
//! absent `scale`.
//!
//! ```
//! use spmd_core::{Absent, DistAttr, Einsum, Mesh, Spec, SpmdError, SpmdRuleExt};
//!
//! // out = x * y, where y may be absent (then out = x).
//! let e = Einsum::new("ab,ab->ab")?;
//! let rule = e.rule().with_optional(Absent::new(0b10, 0));
//! let mesh = Mesh::new(&[2])?;
//! let x = DistAttr::from_paddle(&[0, -1]).unwrap();
//! let r = rule.forward_optional(&mesh, &[Some(Spec::new(&[4, 6], &x)), None])?;
//! assert_eq!(r.inputs[1].to_string(), "[-1, -1]");   // the term `ab`, replicated
//! assert_eq!(r.outputs[0].to_string(), "[0, -1]");
//! // x is not optional: leaving it out is an error naming it.
//! let err = rule.forward_optional(&mesh, &[None, Some(Spec::new(&[4, 6], &x))]).unwrap_err();
//! assert!(matches!(err, SpmdError::AbsentTensor { .. }), "{err}");
//! # Ok::<(), SpmdError>(())
//! ```

use smallvec::SmallVec;

use crate::dist_attr::{DimsMapping, DistAttr, Partial, Spec};
use crate::error::{SpmdError, TensorRef};

/// Which tensors of one call are absent: bit `i` of `inputs` is input `i`,
/// bit `o` of `outputs` output `o` (in grad calls: output grad `o`). Also the
/// form in which a rule declares which tensors *may* be absent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Absent {
    pub inputs: u64,
    pub outputs: u64,
}

impl Absent {
    /// Every tensor present.
    pub const NONE: Absent = Absent {
        inputs: 0,
        outputs: 0,
    };

    pub const fn new(inputs: u64, outputs: u64) -> Absent {
        Absent { inputs, outputs }
    }

    #[inline]
    pub const fn is_none(&self) -> bool {
        self.inputs == 0 && self.outputs == 0
    }

    /// Whether input `i` is absent.
    #[inline]
    pub const fn input(&self, i: usize) -> bool {
        i < 64 && self.inputs & (1u64 << i) != 0
    }

    /// Whether output `o` is absent.
    #[inline]
    pub const fn output(&self, o: usize) -> bool {
        o < 64 && self.outputs & (1u64 << o) != 0
    }

    /// Fails, naming the first such tensor, when a tensor absent here is
    /// not among `optional` (what rule `op` declares may be absent).
    #[inline]
    pub fn within(self, op: &'static str, optional: Absent) -> Result<(), SpmdError> {
        let stray = Absent::new(
            self.inputs & !optional.inputs,
            self.outputs & !optional.outputs,
        );
        if stray.is_none() {
            return Ok(());
        }
        let tensor = if stray.inputs != 0 {
            TensorRef::input(stray.inputs.trailing_zeros() as usize)
        } else {
            TensorRef::output(stray.outputs.trailing_zeros() as usize)
        };
        Err(SpmdError::AbsentTensor { op, tensor })
    }
}

/// The dist attr of an absent tensor's placeholder: rank 0, not partial.
static ABSENT_ATTR: DistAttr = DistAttr {
    dims_mapping: DimsMapping::EMPTY,
    partial: Partial::NONE,
};

impl Spec<'static> {
    /// What stands in the slot of an absent tensor: a 0-d, replicated spec.
    /// Only the call's [`Absent`] mask says that the slot is absent.
    pub fn absent() -> Spec<'static> {
        Spec {
            shape: &[],
            attr: &ABSENT_ATTR,
        }
    }
}

/// The specs of a call with placeholders in the absent slots, and which
/// slots those are. Inline (no heap allocation) up to 8 tensors.
pub fn fill_specs<'a>(given: &[Option<Spec<'a>>]) -> (SmallVec<[Spec<'a>; 8]>, u64) {
    fill(given, Spec::absent())
}

/// As [`fill_specs`], for backward's input shapes (an absent one is `[]`).
pub fn fill_shapes<'a>(given: &[Option<&'a [usize]>]) -> (SmallVec<[&'a [usize]; 8]>, u64) {
    fill(given, &[])
}

/// `given` with `placeholder` in its `None` slots, and the mask of those.
fn fill<T: Copy>(given: &[Option<T>], placeholder: T) -> (SmallVec<[T; 8]>, u64) {
    let mut mask = 0u64;
    let filled = given
        .iter()
        .enumerate()
        .map(|(i, s)| {
            s.unwrap_or_else(|| {
                if i < 64 {
                    mask |= 1 << i;
                }
                placeholder
            })
        })
        .collect();
    (filled, mask)
}
