//! Convolutions: `conv2d`, `conv3d`, `depthwise_conv2d`, `conv2d_transpose`;
//! and `roi_align`, pooling over windows of an image.
//!
//! A convolution contracts the input channels `c` against the filter and
//! produces the filter's output channels `m`, per batch item `n`: on those
//! axes it is an einsum (`nc,mc->nm`). Its spatial dims are not: an output
//! pixel reads a window of input pixels, so a device holding a block of rows
//! would need its neighbours' edge rows (a halo exchange no sharding
//! expresses). They are written `1` (never sharded). Paddle 3.3.1 labels the
//! spatial dims of the input, the filter and the output alike and keeps
//! their shardings, which computes wrong values at block edges; we do not
//! copy that (docs/semantics.md §4). Paddle 3.3.1 also reads every layout as
//! channels-first; we honour `data_format` (`NHWC`, `NDHWC`). As Paddle
//! does for the input channels of a grouped convolution, the given
//! shardings of never-sharded dims are dropped before the merge, so their
//! mesh dims stay free for the batch and the output channels.

use spmd_core::{Call, MeshSet, Partial, ReduceType, RuleResult, SpmdError, spmd_rule};

use crate::notation::input_rank;

/// How the filter's dims line up with the channels.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Filter {
    /// `[M, C / groups, k...]`: every output channel reads every input channel
    /// (`groups == 1`), so `c` is contracted.
    Dense,
    /// `[M, C / groups, k...]` with `groups > 1` (depthwise included): an
    /// output channel reads only its group's input channels, whose index in
    /// the input differs from the filter's dim 1. Only `m` can be split: the
    /// input channels are never sharded.
    Grouped,
    /// `[C, M / groups, k...]` (transposed convolution): `c` is contracted;
    /// the filter's dim 1 is the output channels only when `groups == 1`.
    Transposed { grouped: bool },
}

/// Checks a convolution's layout and ranks: `data_format` is one of the
/// four, and the input and the filter have `spatial + 2` dims.
fn check_conv(
    op: &'static str,
    call: &Call<'_>,
    spatial: usize,
    data_format: &str,
) -> Result<(), SpmdError> {
    if !matches!(
        data_format,
        "NCHW" | "NCDHW" | "AnyLayout" | "" | "NHWC" | "NDHWC"
    ) {
        return Err(SpmdError::InvalidAttr {
            op,
            attr: "data_format".into(),
            message: format!("data_format {data_format:?} is not one of NCHW, NHWC, NCDHW, NDHWC"),
        });
    }
    for (i, name) in [(0, "input"), (1, "filter")] {
        let rank = input_rank(call, i).unwrap_or(spatial + 2);
        if rank != spatial + 2 {
            return Err(SpmdError::Rejected {
                op,
                message: format!(
                    "input {i} ({name}) has rank {rank}; {op} takes rank {}",
                    spatial + 2
                ),
            });
        }
    }
    Ok(())
}

/// The gradients of a convolution are linear in the output grad: a partial
/// (`Sum`) output grad may stay partial, and the input grads it produces
/// are partial over the same mesh dims (Paddle's `Conv2dGradInferSpmd`
/// keeps it so). The derived grad rule reduces it first; this puts it back
/// on the mesh dims that shard none of the grad op's tensors.
fn keep_partial_output_grad(call: &Call<'_>, result: &mut RuleResult) {
    let Call::Grad {
        inputs,
        output_grads,
        ..
    } = *call
    else {
        return;
    };
    let Some(dy) = output_grads.first() else {
        return;
    };
    let sums = dy
        .attr
        .partial
        .iter()
        .filter(|&(_, r)| r == ReduceType::Sum)
        .fold(MeshSet::EMPTY, |s, (m, _)| s.with(m));
    if sums.is_empty() {
        return;
    }
    // Only where no tensor of the grad op is split: there every device
    // holds the same blocks of x and the filter and a summand of dy, so its
    // grads are summands too.
    let split = result
        .inputs
        .iter()
        .fold(MeshSet::EMPTY, |m, a| m.union(a.dims_mapping.mesh_set()));
    let keep = sums.minus(split);
    let Some(required) = result.inputs.get_mut(inputs.len()) else {
        return;
    };
    required.partial = Partial::over(keep, ReduceType::Sum);
    for grad in &mut result.outputs {
        let dims = keep.minus(grad.dims_mapping.mesh_set());
        for m in dims.iter() {
            grad.partial.set(m, ReduceType::Sum);
        }
    }
}

macro_rules! conv {
    ($(#[$doc:meta])* $ty:ident, $name:literal, $spatial:literal, $format:literal, $filter:expr) => {
        $(#[$doc])*
        // The batch `n`, input channels `c`, output channels `m`; the
        // spatial dims are `1`s, after the channels or (channels-last)
        // before them.
        #[spmd_rule(
            name = $name,
            einsum = "nc@{..:1},mc*->nm@{..:1}",
            case(when = self.form() == (Filter::Dense, true), einsum = "n@{..:1}c,mc*->n@{..:1}m"),
            case(when = self.form() == (Filter::Grouped, false), einsum = "n1@{..:1},m1*->nm@{..:1}"),
            case(when = self.form() == (Filter::Grouped, true), einsum = "n@{..:1}1,m1*->n@{..:1}m"),
            case(
                when = self.form() == (Filter::Transposed { grouped: false }, false),
                einsum = "nc@{..:1},cm*->nm@{..:1}"
            ),
            case(
                when = self.form() == (Filter::Transposed { grouped: false }, true),
                einsum = "n@{..:1}c,cm*->n@{..:1}m"
            ),
            case(
                when = self.form() == (Filter::Transposed { grouped: true }, false),
                einsum = "nc@{..:1},c1*->n1@{..:1}"
            ),
            case(
                when = self.form() == (Filter::Transposed { grouped: true }, true),
                einsum = "n@{..:1}c,c1*->n@{..:1}1"
            ),
            validate = Self::check,
            merge(unsharded_claims = "ignore"),
            adjust = Self::linear_in_output_grad,
            inputs(input, filter),
            outputs(out)
        )]
        #[derive(Clone, Debug, PartialEq, Eq, Hash)]
        pub struct $ty {
            #[spmd(default = 1)]
            pub groups: i64,
            #[spmd(default = $format.to_string())]
            pub data_format: String,
        }

        impl Default for $ty {
            fn default() -> Self {
                $ty {
                    groups: 1,
                    data_format: $format.to_string(),
                }
            }
        }

        impl $ty {
            /// The filter's form and whether the channels are last.
            fn form(&self) -> (Filter, bool) {
                let filter: fn(bool) -> Filter = $filter;
                let last = matches!(self.data_format.as_str(), "NHWC" | "NDHWC");
                (filter(self.groups > 1), last)
            }

            fn check(&self, call: &Call<'_>) -> Result<(), SpmdError> {
                check_conv($name, call, $spatial, &self.data_format)
            }

            fn linear_in_output_grad(
                &self,
                call: &Call<'_>,
                result: &mut RuleResult,
            ) -> Result<(), SpmdError> {
                keep_partial_output_grad(call, result);
                Ok(())
            }
        }
    };
}

conv!(
    /// Paddle's `conv2d` (`input` `[N, C, H, W]`, `filter` `[M, C / groups,
    /// kh, kw]` → `out` `[N, M, H', W']`): the batch and the output channels
    /// keep their shardings; sharded input channels (`groups == 1` only)
    /// leave the output partial (`Sum`). Spatial dims are never sharded (see
    /// the module docs). Paddle 3.3.1's `Conv2dInferSpmd` and
    /// `Conv2dGradInferSpmd`: a partial output grad stays partial, on the
    /// mesh dims that split no tensor of the grad op (Paddle keeps it on
    /// the others too, which is unsound).
    ///
    /// ```
    /// use spmd_core::{Attrs, DistAttr, Mesh, Spec, SpmdRuleExt};
    ///
    /// let conv = spmd_ops::builtins().build("conv2d", &Attrs::new())?;
    /// let mesh = Mesh::new(&[2, 2])?;
    /// let x = DistAttr::from_paddle(&[0, 1, -1, -1]).unwrap();
    /// let w = DistAttr::from_paddle(&[-1, 1, -1, -1]).unwrap();
    /// let r = conv.forward(&mesh, &[Spec::new(&[8, 16, 32, 32], &x), Spec::new(&[32, 16, 3, 3], &w)])?;
    /// assert_eq!(r.outputs[0].to_string(), "[0, -1, -1, -1] partial{1: SUM}");
    /// # Ok::<(), spmd_core::SpmdError>(())
    /// ```
    Conv2d, "conv2d", 2, "NCHW", |grouped| if grouped { Filter::Grouped } else { Filter::Dense }
);

conv!(
    /// Paddle's `conv3d`: [`Conv2d`] with three spatial dims (`NCDHW` or
    /// `NDHWC`).
    Conv3d, "conv3d", 3, "NCDHW", |grouped| if grouped { Filter::Grouped } else { Filter::Dense }
);

conv!(
    /// Paddle's `depthwise_conv2d`: a grouped convolution whose filter is
    /// `[M, 1, kh, kw]`, one group per input channel. The input channels are
    /// never sharded (each output channel reads its own one); the batch and
    /// the output channels keep their shardings.
    DepthwiseConv2d, "depthwise_conv2d", 2, "NCHW", |_| Filter::Grouped
);

conv!(
    /// Paddle's `conv2d_transpose` (`input` `[N, C, H, W]`, `filter` `[C, M /
    /// groups, kh, kw]` → `out` `[N, M, H', W']`): the input channels are
    /// contracted (a sharded `C` leaves the output partial), the filter's dim
    /// 1 is the output channels when `groups == 1`.
    Conv2dTranspose, "conv2d_transpose", 2, "NCHW", |grouped| Filter::Transposed { grouped }
);

/// Paddle's `roi_align` (`x` `[N, C, H, W]`, `boxes` `[R, 4]`, `boxes_num`
/// `[N]` → `out` `[R, C, ph, pw]`): each box pools a window of its image.
/// Only the channels can stay sharded (a box may read any image and any
/// pixel); the boxes are replicated. Paddle 3.3.1's `RoiAlignInferSpmd`.
/// The boxes have no gradient; `boxes_num` is optional (absent, it takes
/// no part and is answered `[-1]`).
#[spmd_rule(
    name = "roi_align",
    einsum = "1c11,11,1->1c11",
    inputs(x, boxes, boxes_num),
    outputs(out),
    grad(none(boxes, boxes_num)),
    optional(boxes_num)
)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RoiAlign {}

#[cfg(test)]
mod tests {
    use spmd_core::{DistAttr, Mesh, Spec, SpmdRuleExt};

    use super::{Conv2d, Conv2dTranspose, DepthwiseConv2d};

    fn attr(m: &[i64]) -> DistAttr {
        DistAttr::from_paddle(m).unwrap()
    }

    /// A sharded spatial dim is gathered (no halo exchange is expressible),
    /// where Paddle 3.3.1 keeps it sharded on input, filter and output.
    #[test]
    fn spatial_dims_are_never_sharded() {
        let mesh = Mesh::new(&[2, 3]).unwrap();
        let (x, w) = (attr(&[-1, -1, 0, 1]), attr(&[-1, -1, 0, 1]));
        let r = Conv2d::default()
            .forward(
                &mesh,
                &[Spec::new(&[4, 6, 8, 8], &x), Spec::new(&[9, 6, 3, 3], &w)],
            )
            .unwrap();
        assert_eq!(r.inputs[0].to_string(), "[-1, -1, -1, -1]");
        assert_eq!(r.outputs[0].to_string(), "[-1, -1, -1, -1]");
    }

    /// NHWC puts the channels last: the filter's output channels shard the
    /// output's last dim, not its dim 1 (Paddle 3.3.1 reads NCHW regardless).
    #[test]
    fn channels_last_layout_moves_the_channel_dims() {
        let mesh = Mesh::new(&[2, 3]).unwrap();
        let (x, w) = (attr(&[0, -1, -1, 1]), attr(&[-1, 1, -1, -1]));
        let op = Conv2d {
            groups: 1,
            data_format: "NHWC".into(),
        };
        let r = op
            .forward(
                &mesh,
                &[Spec::new(&[4, 8, 8, 6], &x), Spec::new(&[9, 6, 3, 3], &w)],
            )
            .unwrap();
        assert_eq!(r.outputs[0].to_string(), "[0, -1, -1, -1] partial{1: SUM}");
        // Output channels on mesh dim 1, from the filter.
        let (x, w) = (attr(&[0, -1, -1, -1]), attr(&[1, -1, -1, -1]));
        let r = op
            .forward(
                &mesh,
                &[Spec::new(&[4, 8, 8, 6], &x), Spec::new(&[9, 6, 3, 3], &w)],
            )
            .unwrap();
        assert_eq!(r.inputs[0].to_string(), "[0, -1, -1, -1]");
        assert_eq!(r.outputs[0].to_string(), "[0, -1, -1, 1]");
    }

    /// With groups, a filter's dim 1 indexes channels within a group: input
    /// channels cannot be split consistently with it, output channels can.
    #[test]
    fn grouped_and_depthwise_never_split_input_channels() {
        let mesh = Mesh::new(&[2, 3]).unwrap();
        let (x, w) = (attr(&[0, 1, -1, -1]), attr(&[-1, 1, -1, -1]));
        let grouped = Conv2d {
            groups: 2,
            data_format: "NCHW".into(),
        };
        let r = grouped
            .forward(
                &mesh,
                &[Spec::new(&[4, 6, 8, 8], &x), Spec::new(&[9, 3, 3, 3], &w)],
            )
            .unwrap();
        assert_eq!(r.inputs[0].to_string(), "[0, -1, -1, -1]");
        assert_eq!(r.inputs[1].to_string(), "[-1, -1, -1, -1]");
        assert_eq!(r.outputs[0].to_string(), "[0, -1, -1, -1]");
        let (x, w) = (attr(&[0, -1, -1, -1]), attr(&[1, -1, -1, -1]));
        let r = DepthwiseConv2d::default()
            .forward(
                &mesh,
                &[Spec::new(&[4, 6, 8, 8], &x), Spec::new(&[6, 1, 3, 3], &w)],
            )
            .unwrap();
        assert_eq!(r.outputs[0].to_string(), "[0, 1, -1, -1]");
    }

    /// The transposed filter is `[C, M, ...]`: its dim 0 is contracted.
    #[test]
    fn transposed_filter_contracts_its_first_dim() {
        let mesh = Mesh::new(&[2, 3]).unwrap();
        let (x, w) = (attr(&[0, 1, -1, -1]), attr(&[1, -1, -1, -1]));
        let r = Conv2dTranspose::default()
            .forward(
                &mesh,
                &[Spec::new(&[4, 6, 8, 8], &x), Spec::new(&[6, 9, 3, 3], &w)],
            )
            .unwrap();
        assert_eq!(r.outputs[0].to_string(), "[0, -1, -1, -1] partial{1: SUM}");
    }
}
