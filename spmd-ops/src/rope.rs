//! `fused_rotary_position_embedding`: rotary position embedding of q, k and
//! v in one kernel.

use spmd_core::{
    Call, DimsMapping, DistAttr, GradTensor, RuleResult, Sharding, SpmdError, spmd_rule,
};

/// Paddle's `fused_rotary_position_embedding` (`q`, `k`, `v`, `sin`, `cos`,
/// `position_ids` → `out_q`, `out_k`, `out_v`): rotates pairs of the head
/// dim of `[batch, seq, heads, head_dim]` tensors (`[seq, batch, ...]` when
/// `time_major`) by angles that depend on the position. Paddle 3.3.1's
/// `FusedRopeInferSpmd` / `FusedRopeInferSpmdReverse` /
/// `FusedRopeGradInferSpmd`:
/// - q, k and v merge (forward; the outputs in backward); the head dim is
///   never sharded (the rotation pairs its elements across the dim).
/// - The sequence stays sharded only when `sin` and `cos` are given (each
///   device then holds the angles of its own positions) and `position_ids`
///   is not (gathering angles by position needs the whole sequence).
/// - `sin`, `cos` and `position_ids` follow the merged axes (`follows`):
///   their own shardings do not vote.
/// - `k`, `v`, `sin`, `cos` and `position_ids` are optional; an absent
///   tensor and its output are answered with an empty dist attr.
/// - The grad op takes (`sin`, `cos`, `position_ids`, the three output
///   grads).
#[spmd_rule(
    name = "fused_rotary_position_embedding",
    // An absent optional input takes the empty form (Paddle answers it an
    // empty dist attr); sin and cos are `[1, seq, 1, head_dim]` or `[seq,
    // head_dim]`.
    // Paddle's grad op gives no q, k or v (their terms' first forms): an
    // output grad's presence says whether its tensor was there.
    einsum = "bshd,|bshd,|bshd,|1s1d|sd,|1s1d|sd,|bs->bshd,bshd,bshd",
    case(
        when = self.time_major && matches!(call, Call::Grad { .. }),
        einsum = "sbhd,sbhd,sbhd,|1s1d|sd,|1s1d|sd,|bs->sbhd,|sbhd,|sbhd"
    ),
    case(
        when = self.time_major,
        einsum = "sbhd,|sbhd,|sbhd,|1s1d|sd,|1s1d|sd,|bs->sbhd,sbhd,sbhd"
    ),
    case(
        when = matches!(call, Call::Grad { .. }),
        einsum = "bshd,bshd,bshd,|1s1d|sd,|1s1d|sd,|bs->bshd,|bshd,|bshd"
    ),
    validate = Self::check,
    merge(never_sharded = "d", follows(sin, cos, position_ids)),
    partial(backward = "reset"),
    adjust = Self::finish,
    inputs(q, k, v, sin, cos, position_ids),
    outputs(out_q, out_k, out_v),
    optional(k, v, sin, cos, position_ids, out_k, out_v),
    grad(none(sin, cos, position_ids), inputs(sin, cos, position_ids))
)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FusedRotaryPositionEmbedding {
    #[spmd(default)]
    pub time_major: bool,
    #[spmd(default = true)]
    pub use_neox_rotary_style: bool,
}

impl FusedRotaryPositionEmbedding {
    /// Whether the sequence stays sharded: `sin` and `cos` given (each
    /// device then holds the angles of its own positions) and no
    /// `position_ids` (gathering angles by position needs the whole
    /// sequence). Otherwise it merges like any axis, then is replicated.
    fn sequence_kept(call: &Call<'_>) -> bool {
        let given = |i: usize| call.input_shape(i).is_some();
        given(3) && given(4) && !given(5)
    }

    /// q (or, in the grad op, its grad) is `[batch, seq, heads, head_dim]`,
    /// and sin and cos have 4 or 2 dims.
    fn check(&self, call: &Call<'_>) -> Result<(), SpmdError> {
        const OP: &str = "fused_rotary_position_embedding";
        let rank = |i: usize| call.input_shape(i).map(<[usize]>::len);
        // q's rank; the grad op has no q: its grad's.
        let q_rank = rank(0).or_else(|| call.output_shape(0).map(<[usize]>::len));
        if q_rank != Some(4) {
            return Err(SpmdError::Rejected {
                op: OP,
                message: format!(
                    "q has rank {}; fused_rotary_position_embedding takes [batch, seq, heads, head_dim]",
                    q_rank.map_or_else(|| "unknown".into(), |r| r.to_string())
                ),
            });
        }
        for i in [3, 4] {
            if let Some(r) = rank(i).filter(|r| !matches!(r, 2 | 4)) {
                return Err(SpmdError::Rejected {
                    op: OP,
                    message: format!(
                        "input {i} has rank {r}; sin and cos are [1, seq, 1, head_dim] or [seq, head_dim]"
                    ),
                });
            }
        }
        Ok(())
    }

    /// Replicates the sequence where it is not kept, and gives an output
    /// whose input is absent (forward), or that is absent itself (backward,
    /// grad), Paddle's empty dist attr.
    fn finish(&self, call: &Call<'_>, result: &mut RuleResult) -> Result<(), SpmdError> {
        if !Self::sequence_kept(call) {
            let seq = usize::from(!self.time_major);
            let rank = |i: usize| call.input_shape(i).map(<[usize]>::len);
            // The sequence dim of forward input `i`: q, k and v's `seq`, the
            // angles' dim 1 when 4-d (else 0), the position ids' dim 1.
            let of_input = |i: usize| match i {
                0..=2 => Some(seq),
                3 | 4 => rank(i).map(|r| usize::from(r == 4)),
                5 => rank(5).map(|_| 1),
                _ => None,
            };
            // The sequence dim of each requirement, in the call's order: a
            // grad call's slots follow its signature (Paddle's `(sin, cos,
            // position_ids; grads)` or the derived `(q, ..., position_ids;
            // grads)`), then the output grads.
            let dims: Vec<Option<usize>> = match *call {
                Call::Grad {
                    inputs, signature, ..
                } => (0..inputs.len())
                    .map(|k| match signature.tensor(k) {
                        GradTensor::Input(i) => of_input(usize::from(i)),
                        GradTensor::Output(_) => Some(seq),
                    })
                    .chain([Some(seq); 3])
                    .collect(),
                _ => (0..6).map(of_input).collect(),
            };
            let replicate = |attr: &mut DistAttr, dim: usize| {
                if dim < attr.dims_mapping.rank() {
                    let mut s: Vec<Sharding> = attr.dims_mapping.as_slice().to_vec();
                    s[dim] = Sharding::REPLICATED;
                    attr.dims_mapping = DimsMapping::from_shardings(&s);
                }
            };
            for (attr, dim) in result.inputs.iter_mut().zip(&dims) {
                if let Some(dim) = *dim {
                    replicate(attr, dim);
                }
            }
            for attr in result.outputs.iter_mut() {
                replicate(attr, seq);
            }
        }
        let absent = call.absent();
        // An absent input is answered an empty dist attr (Paddle's), whatever
        // form its term took.
        for k in 0..call.n_inputs() {
            if absent.input(k)
                && let Some(r) = result.inputs.get_mut(k)
            {
                *r = DistAttr::default();
            }
        }
        for o in 1..3 {
            let gone = match *call {
                Call::Forward { .. } => call.input_absent(o),
                _ => absent.output(o),
            };
            if gone && let Some(out) = result.outputs.get_mut(o) {
                *out = DistAttr::default();
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use spmd_core::{DistAttr, Mesh, Spec, SpmdRuleExt};

    use super::FusedRotaryPositionEmbedding;

    fn attr(m: &[i64]) -> DistAttr {
        DistAttr::from_paddle(m).unwrap()
    }

    const ROPE: FusedRotaryPositionEmbedding = FusedRotaryPositionEmbedding {
        time_major: false,
        use_neox_rotary_style: true,
    };

    /// With sin and cos and no position ids the sequence stays sharded;
    /// sin and cos follow it whatever they were given.
    #[test]
    fn the_sequence_stays_sharded_with_angles_and_no_positions() {
        let mesh = Mesh::new(&[2, 2]).unwrap();
        let (q, sin) = (attr(&[0, 1, -1, -1]), attr(&[-1, -1, -1, 1]));
        let r = ROPE
            .forward_optional(
                &mesh,
                &[
                    Some(Spec::new(&[4, 8, 2, 16], &q)),
                    None,
                    None,
                    Some(Spec::new(&[1, 8, 1, 16], &sin)),
                    Some(Spec::new(&[1, 8, 1, 16], &sin)),
                    None,
                ],
            )
            .unwrap();
        let ins: Vec<String> = r.inputs.iter().map(ToString::to_string).collect();
        assert_eq!(
            ins,
            [
                "[0, 1, -1, -1]",
                "[]",
                "[]",
                "[-1, 1, -1, -1]",
                "[-1, 1, -1, -1]",
                "[]"
            ]
        );
        let outs: Vec<String> = r.outputs.iter().map(ToString::to_string).collect();
        assert_eq!(outs, ["[0, 1, -1, -1]", "[]", "[]"]);
    }

    /// Position ids gather angles by position: the sequence is replicated.
    #[test]
    fn position_ids_replicate_the_sequence() {
        let mesh = Mesh::new(&[2, 2]).unwrap();
        let (q, pos) = (attr(&[0, 1, -1, -1]), attr(&[-1, 1]));
        let sin = attr(&[-1, -1, -1, -1]);
        let r = ROPE
            .forward_optional(
                &mesh,
                &[
                    Some(Spec::new(&[4, 8, 2, 16], &q)),
                    Some(Spec::new(&[4, 8, 2, 16], &q)),
                    None,
                    Some(Spec::new(&[1, 8, 1, 16], &sin)),
                    Some(Spec::new(&[1, 8, 1, 16], &sin)),
                    Some(Spec::new(&[4, 8], &pos)),
                ],
            )
            .unwrap();
        assert_eq!(r.inputs[5].to_string(), "[0, -1]");
        let outs: Vec<String> = r.outputs.iter().map(ToString::to_string).collect();
        assert_eq!(outs, ["[0, -1, -1, -1]", "[0, -1, -1, -1]", "[]"]);
    }
}
