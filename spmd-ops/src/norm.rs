//! Normalizations over trailing axes: `layer_norm` and `fused_rms_norm`. The
//! normalized axes cannot stay sharded (mean and variance need the whole of
//! them); the statistics keep the leading axes.

use spmd_core::{Call, Einsum, SpmdError, spmd_rule};

use crate::notation::{input_rank, labels};

/// `lead` leading labels, then `norm` dims written `1` (never sharded).
fn split_term(op: &'static str, lead: usize, norm: usize) -> Result<String, SpmdError> {
    let mut term: String = labels(op, lead)?.into_iter().collect();
    term.extend(std::iter::repeat_n('1', norm));
    Ok(term)
}

/// Paddle's `layer_norm`: `out = (x - mean) / sqrt(variance + epsilon) * scale
/// + bias`, with mean and variance taken over the dims from
/// `begin_norm_axis` on. Those dims are never sharded; `mean` and `variance`
/// have the leading dims and follow x's sharding of them. `scale` and `bias`
/// (the normalized dims, flattened or not) are always replicated. Paddle
/// 3.3.1's `LayerNormInferSpmd` / `LayerNormInferSpmdReverse`: the backward
/// keeps the given outputs' partial status; the gradient (`x_grad`,
/// `scale_grad`, `bias_grad`) is the one derived from this notation, with
/// `scale_grad` and `bias_grad` partial over the mesh dims of sharded
/// leading dims, as Paddle's `LayerNormGradInferSpmd` answers. `scale` and
/// `bias` are optional: an absent one takes no part and is answered `[-1]`
/// (its term `1`), as Paddle answers it.
#[spmd_rule(
    name = "layer_norm",
    build = Self::notation,
    inputs(x, scale, bias),
    outputs(out, mean, variance),
    optional(scale, bias),
    grad_inputs(x, scale, bias, mean, variance),
    grads_for(out)
)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LayerNorm {
    #[spmd(default = 1)]
    pub begin_norm_axis: i64,
}

impl LayerNorm {
    /// For rank 3 and `begin_norm_axis = 1`: `a11,1,1->a11,a,a` (scale and
    /// bias are written with their own rank).
    fn notation(&self, call: &Call<'_>) -> Result<Einsum, SpmdError> {
        const OP: &str = "layer_norm";
        let rank = input_rank(call, 0).unwrap_or(0);
        let begin = if self.begin_norm_axis < 0 {
            self.begin_norm_axis + rank as i64
        } else {
            self.begin_norm_axis
        };
        if !(0..=rank as i64).contains(&begin) {
            return Err(SpmdError::InvalidAttr {
                op: OP,
                attr: "begin_norm_axis".into(),
                message: format!(
                    "begin_norm_axis {} is out of range for x of rank {rank}",
                    self.begin_norm_axis
                ),
            });
        }
        let begin = begin as usize;
        let x = split_term(OP, begin, rank - begin)?;
        let lead = split_term(OP, begin, 0)?;
        let scale = "1".repeat(input_rank(call, 1).unwrap_or(1));
        let bias = "1".repeat(input_rank(call, 2).unwrap_or(1));
        Einsum::new(&format!("{x},{scale},{bias}->{x},{lead},{lead}"))
    }
}

/// Paddle's `fused_rms_norm` (`x`, `scale` → `out`, `invvar`): `out = x /
/// sqrt(mean(x², last axis) + epsilon) * scale`. The last axis is never
/// sharded, `invvar` has the leading dims, `scale` is replicated. Paddle
/// 3.3.1's `RmsNormInferSpmd` / `RmsNormInferSpmdReverse`, whose reverse
/// returns the outputs non-partial.
#[spmd_rule(
    name = "fused_rms_norm",
    build = Self::notation,
    backward_partial = "reset",
    inputs(x, scale),
    outputs(out, invvar)
)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FusedRmsNorm {}

impl FusedRmsNorm {
    /// For rank 3: `ab1,1->ab1,ab`.
    fn notation(&self, call: &Call<'_>) -> Result<Einsum, SpmdError> {
        const OP: &str = "fused_rms_norm";
        let rank = input_rank(call, 0).unwrap_or(1).max(1);
        let x = split_term(OP, rank - 1, 1)?;
        let lead = split_term(OP, rank - 1, 0)?;
        let scale = "1".repeat(input_rank(call, 1).unwrap_or(1));
        Einsum::new(&format!("{x},{scale}->{x},{lead}"))
    }
}

#[cfg(test)]
mod tests {
    use spmd_core::{DistAttr, Mesh, Spec, SpmdRule};

    use super::LayerNorm;

    fn attr(dims: &[i64]) -> DistAttr {
        DistAttr::from_paddle(dims).unwrap()
    }

    #[test]
    fn layer_norm_forward_keeps_leading_dims() {
        let mesh = Mesh::new(&[2, 3]).unwrap();
        let (x, w) = (attr(&[1, 0, -1]), attr(&[0]));
        let r = LayerNorm { begin_norm_axis: 2 }
            .forward(
                &mesh,
                &[
                    Spec::new(&[64, 32, 1024], &x),
                    Spec::new(&[1024], &w),
                    Spec::new(&[1024], &w),
                ],
            )
            .unwrap();
        let got: Vec<String> = r.outputs.iter().map(ToString::to_string).collect();
        assert_eq!(got, ["[1, 0, -1]", "[1, 0]", "[1, 0]"]);
        assert_eq!(r.inputs[1].to_string(), "[-1]");
    }

    /// Paddle's `LayerNormGradInferSpmd(x, scale, bias, mean, variance,
    /// out_grad)` (suite case layer_norm_grad_278): the grad op takes the
    /// forward outputs mean and variance and only out's grad.
    #[test]
    fn layer_norm_grad_matches_paddle() {
        let mesh = Mesh::new(&[2, 2]).unwrap();
        let (x, w, stat) = (attr(&[0, 1, -1]), attr(&[0]), attr(&[0, 1]));
        let r = LayerNorm { begin_norm_axis: 2 }
            .grad(
                &mesh,
                &[
                    Spec::new(&[16, 32, 32], &x),
                    Spec::new(&[32], &w),
                    Spec::new(&[32], &w),
                    Spec::new(&[16, 32], &stat),
                    Spec::new(&[16, 32], &stat),
                ],
                &[Spec::new(&[16, 32, 32], &x)],
            )
            .unwrap();
        let req: Vec<String> = r.inputs.iter().map(ToString::to_string).collect();
        assert_eq!(
            req,
            [
                "[0, 1, -1]",
                "[-1]",
                "[-1]",
                "[0, 1]",
                "[0, 1]",
                "[0, 1, -1]"
            ]
        );
        let got: Vec<String> = r.outputs.iter().map(ToString::to_string).collect();
        assert_eq!(
            got,
            [
                "[0, 1, -1]",
                "[-1] partial{0: SUM, 1: SUM}",
                "[-1] partial{0: SUM, 1: SUM}"
            ]
        );
        assert_eq!(r.inputs[1].to_string(), "[-1]");
    }
}
