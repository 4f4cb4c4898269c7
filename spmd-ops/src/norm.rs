//! Normalizations over trailing axes: `layer_norm` and `fused_rms_norm`. The
//! normalized axes cannot stay sharded (mean and variance need the whole of
//! them); the statistics keep the leading axes.

use spmd_core::{Call, SpmdError, spmd_rule};

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
    einsum = "@{begin_norm_axis..:1},*,*->@{begin_norm_axis..:1},@{begin_norm_axis..:-},@{begin_norm_axis..:-}",
    inputs(x, scale, bias),
    outputs(out, mean, variance),
    optional(scale, bias),
    grad(inputs(x, scale, bias, mean, variance), of(out))
)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LayerNorm {
    #[spmd(default = 1)]
    pub begin_norm_axis: i64,
}

/// Paddle's `fused_rms_norm` (`x`, `scale` → `out`, `invvar`): `out = x /
/// sqrt(mean(x², last axis) + epsilon) * scale`. The last axis is never
/// sharded, `invvar` has the leading dims, `scale` is replicated. Paddle
/// 3.3.1's `RmsNormInferSpmd` / `RmsNormInferSpmdReverse`, whose reverse
/// returns the outputs non-partial.
#[spmd_rule(
    name = "fused_rms_norm",
    einsum = "@1,*->@1,@",
    partial(backward = "reset"),
    inputs(x, scale),
    outputs(out, invvar)
)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FusedRmsNorm {}

/// Paddle's `group_norm` (`x`, `scale`, `bias` → `y`, `mean`, `variance`):
/// each sample's channels are normalized in `groups` groups, over the
/// channels and spatial dims of the group. Only the batch dim (dim 0, in
/// NCHW and NHWC alike) can stay sharded; `scale` and `bias` (per channel)
/// are replicated; `mean` and `variance` are `[N, groups]`. Paddle 3.3.1's
/// `GroupNormInferSpmd`. The grad takes Paddle's `GroupNormGradInferSpmd`
/// arguments, `(x, scale, bias, y, mean, variance; y_grad)`, and returns
/// `x_grad`, `scale_grad` and `bias_grad`, the last two partial (`Sum`) over
/// the batch's mesh dims.
#[spmd_rule(
    name = "group_norm",
    // The statistics are `[N, groups]`, or as given (the grad op's may come
    // flattened, `[N * groups]`).
    einsum = "n@{..:1},*,*->n@{..:1},n1|n*,n1|n*",
    inputs(x, scale, bias),
    outputs(y, mean, variance),
    grad(inputs(x, scale, bias, y, mean, variance), of(y))
)]
#[derive(Clone, Debug, PartialEq)]
pub struct GroupNorm {
    #[spmd(default = -1)]
    pub groups: i64,
    #[spmd(default = "NCHW".to_string())]
    pub data_format: String,
}

/// Whether a `data_format` puts the channels last (`NHWC`, `NDHWC`, `NLC`).
fn channels_last(op: &'static str, data_format: &str) -> Result<bool, SpmdError> {
    match data_format {
        "NCHW" | "NCDHW" | "NCL" | "NC" | "AnyLayout" | "" => Ok(false),
        "NHWC" | "NDHWC" | "NLC" => Ok(true),
        other => Err(SpmdError::InvalidAttr {
            op,
            attr: "data_format".into(),
            message: format!(
                "data_format {other:?} is not a channels-first or channels-last layout"
            ),
        }),
    }
}

/// Paddle's `batch_norm` (`x`, `mean`, `variance`, `scale`, `bias` → `out`,
/// `mean_out`, `variance_out`, `saved_mean`, `saved_variance`,
/// `reserve_space`): statistics per channel over the batch and spatial
/// dims, which are therefore never sharded; the channel dim keeps its
/// sharding, as do the running and saved statistics and `scale` and `bias`
/// (`[C]`, per channel: a device needs its own channels' ones). Paddle
/// 3.3.1's `BatchNormInferSpmd` replicates `scale` and `bias`, which leaves
/// a device holding channels `[c0, c1)` with all C scales and no offset to
/// pick its own (and reads dim 1 as the channels in every layout). The grad
/// takes Paddle's `BatchNormGradInferSpmd` arguments, `(x, scale, bias,
/// mean_out, variance_out, saved_mean, saved_variance, reserve_space;
/// out_grad)`, and returns `x_grad`, `scale_grad`, `bias_grad`, the last two
/// sharded with the channels.
#[spmd_rule(
    name = "batch_norm",
    einsum = "1c@{..:1},c,c,c,c->1c@{..:1},c,c,c,c,1",
    // The grad op's `reserve_space` has a rank of its own.
    case(when = self.channels_last() && !call.is_forward(), einsum = "@{..:1}c,c,c,c,c->@{..:1}c,c,c,c,c,*"),
    case(when = self.channels_last(), einsum = "@{..:1}c,c,c,c,c->@{..:1}c,c,c,c,c,1"),
    case(when = !call.is_forward(), einsum = "1c@{..:1},c,c,c,c->1c@{..:1},c,c,c,c,*"),
    validate = Self::check,
    grad(
        inputs(x, scale, bias, mean_out, variance_out, saved_mean, saved_variance, reserve_space),
        of(out),
        none(mean, variance)
    ),
    inputs(x, mean, variance, scale, bias),
    // Scale and bias take the channels' layout; their own does not vote.
    merge(follows(scale, bias)),
    outputs(out, mean_out, variance_out, saved_mean, saved_variance, reserve_space),
    // reserve_space is a buffer, not a sum.
    partial(none(reserve_space))
)]
#[derive(Clone, Debug, PartialEq)]
pub struct BatchNorm {
    #[spmd(default = "NCHW".to_string())]
    pub data_format: String,
}

impl BatchNorm {
    /// Whether the channels are the last dim (`NHWC`, `NDHWC`, `NLC`).
    fn channels_last(&self) -> bool {
        channels_last("batch_norm", &self.data_format).unwrap_or(false)
    }
    /// A layout that is neither channels-first nor channels-last is an error.
    fn check(&self, _call: &Call<'_>) -> Result<(), SpmdError> {
        channels_last("batch_norm", &self.data_format).map(|_| ())
    }
}

/// Paddle's `instance_norm` (`x`, `scale`, `bias` → `y`, `saved_mean`,
/// `saved_variance`): statistics per sample and channel over the spatial
/// dims, which are never sharded. The saved statistics are `[N * C]`,
/// batch-major, written `(nc)`: a device's block of them is one contiguous
/// range only when it holds whole samples (every channel), so the channels
/// are never sharded and the batch must divide evenly; a channel sharding
/// moves onto the batch when the batch divides by both (`compounds =
/// "absorb"`). `scale` and `bias` are then whole on every device. Paddle
/// 3.3.1 keeps the channels sharded with replicated `scale` and `bias` and
/// answers the two-entry mapping `[n, c]` for the 1-D statistics, which no
/// device's block matches. The grad takes Paddle's `InstanceNormGradInferSpmd`
/// arguments, `(x, scale, bias, saved_mean, saved_variance; y_grad)`.
#[spmd_rule(
    name = "instance_norm",
    einsum = "nc@{..:1},*,*->nc@{..:1},(nc),(nc)",
    merge(compounds = "absorb"),
    inputs(x, scale, bias),
    outputs(y, saved_mean, saved_variance),
    grad(inputs(x, scale, bias, saved_mean, saved_variance), of(y))
)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct InstanceNorm {}

#[cfg(test)]
mod tests {
    use spmd_core::{DistAttr, Mesh, Spec, SpmdRuleExt};

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
