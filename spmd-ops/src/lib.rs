//! The standard rule library: PaddlePaddle's operators under Paddle's registry
//! and attribute names, each declared with `#[spmd_rule]`.
//!
//! ```
//! use spmd_core::{Attrs, DistAttr, Mesh, Spec, SpmdRuleExt};
//!
//! let registry = spmd_ops::builtins();
//! let matmul = registry.build("matmul", &Attrs::new().with("trans_x", false).with("trans_y", false))?;
//! let mesh = Mesh::new(&[2, 3])?;
//! let (x, y) = (DistAttr::from_paddle(&[1, 0]).unwrap(), DistAttr::from_paddle(&[-1, -1]).unwrap());
//! let r = matmul.forward(&mesh, &[Spec::new(&[64, 32], &x), Spec::new(&[32, 48], &y)])?;
//! assert_eq!(r.outputs[0].to_string(), "[1, -1] partial{0: SUM}");
//! # Ok::<(), spmd_core::SpmdError>(())
//! ```

mod aten;
mod attention;
mod conv;
mod elementwise;
mod embedding;
mod gather;
mod index;
mod loss;
mod matmul;
mod misc;
mod norm;
mod notation;
mod reduce;
mod rope;
mod scatter;
mod shape;
mod softmax;
mod split;
mod swiglu;

pub use aten::{
    AtenAddmm, AtenAmax, AtenBincount, AtenClampTensor, AtenConstantPadNd, AtenConvolution,
    AtenEmbedding, AtenExpand, AtenHistc, AtenMaxDim, AtenMeanDim, AtenNativeLayerNorm,
    AtenScaledDotProductAttention, AtenScatterSrc, AtenScatterValue, AtenSelect, AtenSlice,
    AtenSliceScatter, AtenVarCorrection, AtenViewAsComplex, AtenViewAsReal, GroupedMmFallback,
};
pub use attention::{FlashAttention, FlashMask};
pub use conv::{Conv2d, Conv2dTranspose, Conv3d, DepthwiseConv2d, RoiAlign};
pub use elementwise::{
    AddN, BINARY, ElementwiseBinary, ElementwiseUnary, FusedDropoutAdd, LabelSmooth, Multiply,
    UNARY,
};
pub use embedding::{CEmbedding, Embedding};
pub use gather::{Gather, GatherNd, MoeCombine, MoeGateDispatch, TakeAlongAxis};
pub use index::{
    ArgMax, ArgMin, ArgSort, Cummax, Cummin, Cumsum, OneHot, Pad, Roll, TopK, TrilTriu, Triu,
};
pub use loss::{
    CSoftmaxWithCrossEntropy, CSoftmaxWithMultiLabelCrossEntropy, CrossEntropyWithSoftmax,
};
pub use matmul::{Bmm, EinsumOp, FusedGemmEpilogue, FusedLinearParamGradAdd, LinearV2, Matmul};
pub use misc::{DefaultDataParallel, MeanAll, NonZero, Numel, Replicated, Unique, Where};
pub use norm::{BatchNorm, FusedRmsNorm, GroupNorm, InstanceNorm, LayerNorm};
pub use reduce::{
    All, Amax, Amin, Any, FrobeniusNorm, LogSumExp, Max, Min, PNorm, Prod, ReduceBase,
    SquaredL2Norm, Sum,
};
pub use rope::FusedRotaryPositionEmbedding;
pub use scatter::{IndexPut, PutAlongAxis, Scatter, ScatterNdAdd};
pub use shape::{ExpandAs, Flatten, Reshape, Squeeze, Tile, Transpose, Unsqueeze};
pub use softmax::Softmax;
pub use split::{Concat, Slice, Split, SplitWithNum, Stack, StridedSlice, Unbind};
pub use swiglu::Swiglu;

use spmd_core::{Registry, RuleInfo, SpmdError};

/// Paddle's cross entropy attributes that do not change its sharding.
const CROSS_ENTROPY_IGNORED: &[&str] = &["ignore_index", "numeric_stable_mode"];

/// ATen's pointwise ops with one tensor operand, each with the arguments
/// that do not change a layout (a number operand, a dtype, a rounding mode).
const ATEN_UNARY: &[(&str, &[&str])] = &[
    ("aten.abs", &[]),
    ("aten.alias", &[]),
    ("aten.bitwise_not", &[]),
    ("aten.clone", &["memory_format"]),
    ("aten.cos", &[]),
    ("aten.erf", &[]),
    ("aten.exp", &[]),
    ("aten.gelu", &["approximate"]),
    ("aten.log", &[]),
    ("aten.log1p", &[]),
    ("aten.expm1", &[]),
    ("aten.floor", &[]),
    ("aten.clamp", &["min", "max"]),
    // Filled with a number: laid out as its input, whose values it never
    // reads (a partial input is reduced first, as for any unary op).
    (
        "aten.full_like",
        &[
            "fill_value",
            "dtype",
            "layout",
            "device",
            "pin_memory",
            "memory_format",
        ],
    ),
    ("aten.logical_not", &[]),
    ("aten.neg", &[]),
    ("aten.pow.Tensor_Scalar", &["exponent"]),
    ("aten.reciprocal", &[]),
    ("aten.relu", &[]),
    ("aten.rsqrt", &[]),
    ("aten.sigmoid", &[]),
    ("aten.sin", &[]),
    ("aten.sqrt", &[]),
    ("aten.tanh", &[]),
    (
        "aten._to_copy",
        &[
            "dtype",
            "layout",
            "device",
            "pin_memory",
            "non_blocking",
            "memory_format",
        ],
    ),
    // A number operand (`torch_export` writes `aten.add.Tensor(x, 2.0)` as
    // ATen's `aten.add.Scalar`).
    ("aten.add.Scalar", &["other", "alpha"]),
    ("aten.sub.Scalar", &["other", "alpha"]),
    // A number minus a tensor (`torch_export` writes `aten.sub.Tensor(2.0,
    // x)` as ATen's `aten.rsub.Scalar(x, 2.0)`).
    ("aten.rsub.Scalar", &["other", "alpha"]),
    ("aten.mul.Scalar", &["other"]),
    ("aten.div.Scalar", &["other"]),
    ("aten.div.Scalar_mode", &["other", "rounding_mode"]),
    // A number raised to a tensor power: `self` is the number.
    ("aten.pow.Scalar", &["self"]),
    ("aten.eq.Scalar", &["other"]),
    ("aten.ne.Scalar", &["other"]),
    ("aten.lt.Scalar", &["other"]),
    ("aten.le.Scalar", &["other"]),
    ("aten.gt.Scalar", &["other"]),
    ("aten.ge.Scalar", &["other"]),
];

/// ATen's pointwise ops of two tensors (numpy broadcasting), but
/// `aten.mul.Tensor`, which is the library's `multiply`.
const ATEN_BINARY: &[(&str, &[&str])] = &[
    ("aten.add.Tensor", &["alpha"]),
    ("aten.sub.Tensor", &["alpha"]),
    ("aten.div.Tensor", &[]),
    ("aten.div.Tensor_mode", &["rounding_mode"]),
    // `self` takes `src`'s values broadcast to its own shape.
    ("aten.copy", &["non_blocking"]),
    ("aten.pow.Tensor_Tensor", &[]),
    ("aten.maximum", &[]),
    ("aten.minimum", &[]),
    // The complex number of magnitude `abs` and angle `angle`.
    ("aten.polar", &[]),
    ("aten.eq.Tensor", &[]),
    ("aten.ne.Tensor", &[]),
    ("aten.lt.Tensor", &[]),
    ("aten.le.Tensor", &[]),
    ("aten.gt.Tensor", &[]),
    ("aten.ge.Tensor", &[]),
    ("aten.bitwise_and.Tensor", &[]),
    ("aten.bitwise_or.Tensor", &[]),
    ("aten.logical_and", &[]),
    ("aten.logical_or", &[]),
];

/// Registers every built-in rule under Paddle's names: the one list of the
/// library's ops, by family, then ATen's names (`aten.*`, core ATen IR as
/// `torch.export` writes it) for the ATen ops that are library ops. `renamed` registers a rule under a second
/// Paddle name; `ignoring` lists attributes Paddle passes that do not change
/// a layout (any other unknown attribute is an error).
pub fn register_builtins(registry: &mut Registry) -> Result<(), SpmdError> {
    registry
        // Contractions.
        .register::<Matmul>()?
        .insert(RuleInfo::of::<Matmul>().renamed("matmul_v2"))?
        .register::<Bmm>()?
        .register::<EinsumOp>()?
        .register::<LinearV2>()?
        .register::<FusedGemmEpilogue>()?
        .register::<FusedLinearParamGradAdd>()?
        .register::<Embedding>()?
        .insert(RuleInfo::of::<Embedding>().renamed("lookup_table_v2"))?
        .register::<CEmbedding>()?
        .register::<RoiAlign>()?
        .register::<Conv2d>()?
        .register::<Conv3d>()?
        .register::<DepthwiseConv2d>()?
        .register::<Conv2dTranspose>()?
        // Pointwise (the named unary and binary ops follow the chain).
        .insert(RuleInfo::of::<ElementwiseUnary>().passing_through())?
        .insert(RuleInfo::of::<ElementwiseBinary>().passing_through())?
        .insert(RuleInfo::of::<Multiply>().passing_through())?
        .insert(
            RuleInfo::of::<Multiply>()
                .renamed("elementwise_mul")
                .passing_through(),
        )?
        .register::<AddN>()?
        .register::<LabelSmooth>()?
        .register::<FusedDropoutAdd>()?
        .register::<Where>()?
        .register::<Swiglu>()?
        // Reductions, and Paddle's legacy names for two of them.
        .register::<Sum>()?
        .register::<Max>()?
        .register::<Min>()?
        .register::<Prod>()?
        .insert(RuleInfo::of::<Sum>().renamed("reduce_sum"))?
        .insert(RuleInfo::of::<Max>().renamed("reduce_max"))?
        .register::<All>()?
        .register::<Any>()?
        .register::<Amax>()?
        .register::<Amin>()?
        .register::<ReduceBase>()?
        .register::<MeanAll>()?
        .register::<Numel>()?
        .register::<SquaredL2Norm>()?
        .register::<FrobeniusNorm>()?
        .register::<LogSumExp>()?
        .register::<PNorm>()?
        // Along an axis: softmax, scans, sorts and index picks.
        .register::<Softmax>()?
        // Paddle 3.3.1 registers `log_softmax` with the softmax rule.
        .insert(RuleInfo::of::<Softmax>().renamed("log_softmax"))?
        .register::<Cumsum>()?
        // The indices' dtype does not change a layout.
        .insert(RuleInfo::of::<Cummax>().ignoring(&["dtype"]))?
        .insert(RuleInfo::of::<Cummin>().ignoring(&["dtype"]))?
        .insert(RuleInfo::of::<ArgMax>().ignoring(&["dtype"]))?
        .insert(RuleInfo::of::<ArgMin>().ignoring(&["dtype"]))?
        .register::<TopK>()?
        .register::<ArgSort>()?
        .register::<Roll>()?
        .register::<OneHot>()?
        .register::<Triu>()?
        .register::<TrilTriu>()?
        .register::<NonZero>()?
        .register::<Unique>()?
        // Views: dims moved, added, dropped or regrouped (the pure layout
        // ops pass shardings through).
        .insert(RuleInfo::of::<Transpose>().passing_through())?
        .insert(
            RuleInfo::of::<Transpose>()
                .renamed("transpose2")
                .passing_through(),
        )?
        .insert(RuleInfo::of::<Squeeze>().passing_through())?
        .insert(RuleInfo::of::<Unsqueeze>().passing_through())?
        .insert(
            RuleInfo::of::<Unsqueeze>()
                .renamed("unsqueeze2")
                .passing_through(),
        )?
        .insert(RuleInfo::of::<Flatten>().passing_through())?
        .insert(RuleInfo::of::<Reshape>().passing_through())?
        .insert(
            RuleInfo::of::<Reshape>()
                .renamed("reshape2")
                .passing_through(),
        )?
        .register::<Tile>()?
        .register::<ExpandAs>()?
        .insert(RuleInfo::of::<ExpandAs>().renamed("expand_as_v2"))?
        .register::<Pad>()?
        // Cuts and joins.
        .register::<Split>()?
        .register::<SplitWithNum>()?
        .register::<Unbind>()?
        .register::<Slice>()?
        .register::<StridedSlice>()?
        .register::<Concat>()?
        .register::<Stack>()?
        // Gathers and scatters.
        .register::<Gather>()?
        // Paddle 3.3.1's `index_select` answers as its gather rule: the
        // selected axis replicated, the index's dim in its place.
        .insert(RuleInfo::of::<Gather>().renamed("index_select"))?
        .register::<GatherNd>()?
        .register::<TakeAlongAxis>()?
        .register::<MoeCombine>()?
        .register::<MoeGateDispatch>()?
        .register::<Scatter>()?
        .register::<ScatterNdAdd>()?
        .register::<PutAlongAxis>()?
        .register::<IndexPut>()?
        // Normalizations.
        .insert(RuleInfo::of::<LayerNorm>().ignoring(&["epsilon"]))?
        .insert(RuleInfo::of::<FusedRmsNorm>().ignoring(&["epsilon"]))?
        .insert(RuleInfo::of::<GroupNorm>().ignoring(&["epsilon"]))?
        .register::<BatchNorm>()?
        .register::<InstanceNorm>()?
        // Losses.
        .insert(RuleInfo::of::<CrossEntropyWithSoftmax>().ignoring(CROSS_ENTROPY_IGNORED))?
        .insert(
            RuleInfo::of::<CrossEntropyWithSoftmax>()
                .renamed("softmax_with_cross_entropy")
                .ignoring(CROSS_ENTROPY_IGNORED),
        )?
        .register::<CSoftmaxWithCrossEntropy>()?
        .register::<CSoftmaxWithMultiLabelCrossEntropy>()?
        // Attention. The flags that choose the kernel's math, not its layout.
        .insert(RuleInfo::of::<FlashAttention>().ignoring(&[
            "dropout",
            "causal",
            "return_softmax",
            "is_test",
            "rng_name",
        ]))?
        .insert(RuleInfo::of::<FlashMask>().ignoring(&["return_softmax", "is_test", "rng_name"]))?
        .insert(RuleInfo::of::<FusedRotaryPositionEmbedding>().ignoring(&["rotary_emb_base"]))?
        // Fallbacks for ops without a rule of their own.
        .register::<Replicated>()?
        .register::<DefaultDataParallel>()?
        // Paddle 3.3.1 registers the data-parallel fallback under this
        // second name too (checked with the oracle).
        .insert(RuleInfo::of::<DefaultDataParallel>().renamed("default_"))?;
    // The named pointwise ops, each under the generic unary or binary rule.
    for name in UNARY {
        let ignored = elementwise::UNARY_ATTRS
            .iter()
            .find(|(n, _)| n == name)
            .map_or(&[][..], |(_, a)| *a);
        registry.insert(
            RuleInfo::of::<ElementwiseUnary>()
                .renamed(name)
                .ignoring(ignored)
                .passing_through(),
        )?;
    }
    for name in BINARY {
        registry.insert(
            RuleInfo::of::<ElementwiseBinary>()
                .renamed(name)
                .passing_through(),
        )?;
    }
    register_aten(registry)
}

/// ATen's names, in `register_builtins`' order of families: the library's
/// rules again where the ATen op is a library op (reading ATen's argument
/// names), the `aten` module's where it differs.
fn register_aten(registry: &mut Registry) -> Result<(), SpmdError> {
    registry
        // Contractions.
        .insert(RuleInfo::of::<Matmul>().renamed("aten.mm"))?
        .insert(RuleInfo::of::<Bmm>().renamed("aten.bmm"))?
        .register::<AtenAddmm>()?
        .register::<AtenEmbedding>()?
        .insert(RuleInfo::of::<AtenConvolution>())?
        // Pointwise: `aten.mul.Tensor` is linear in each operand, like
        // `multiply`; `where` has ATen's operand order.
        .insert(
            RuleInfo::of::<Multiply>()
                .renamed("aten.mul.Tensor")
                .passing_through(),
        )?
        .insert(RuleInfo::of::<Where>().renamed("aten.where.self"))?
        // Reductions.
        .insert(
            RuleInfo::of::<Sum>()
                .renamed("aten.sum.dim_IntList")
                .reading(&[("dim", "axis"), ("keepdim", "keep_dim")])
                .ignoring(&["dtype"]),
        )?
        .insert(RuleInfo::of::<AtenMeanDim>().ignoring(&["dtype"]))?
        .insert(RuleInfo::of::<AtenVarCorrection>())?
        .register::<AtenAmax>()?
        // `aten.max(self)`: the largest element of all, `amax` over every dim.
        .insert(RuleInfo::of::<AtenAmax>().renamed("aten.max"))?
        // `aten.any.dims(self, dim, keepdim)`: whether any element is true,
        // the largest of booleans (a split dim leaves it partial `Max`).
        .insert(RuleInfo::of::<AtenAmax>().renamed("aten.any.dims"))?
        .register::<AtenClampTensor>()?
        .register::<AtenViewAsComplex>()?
        .register::<AtenViewAsReal>()?
        .register::<AtenHistc>()?
        .register::<AtenBincount>()?
        // Along an axis.
        .insert(
            RuleInfo::of::<TopK>()
                .renamed("aten.topk")
                .reading(&[("dim", "axis")]),
        )?
        .insert(
            RuleInfo::of::<ArgSort>()
                .renamed("aten.sort")
                .reading(&[("dim", "axis")]),
        )?
        .register::<AtenMaxDim>()?
        .insert(
            RuleInfo::of::<Softmax>()
                .renamed("aten._softmax")
                .reading(&[("dim", "axis")])
                .ignoring(&["half_to_float"]),
        )?
        .insert(
            RuleInfo::of::<Softmax>()
                .renamed("aten._log_softmax")
                .reading(&[("dim", "axis")])
                .ignoring(&["half_to_float"]),
        )?
        .insert(
            RuleInfo::of::<Cumsum>()
                .renamed("aten.cumsum")
                .reading(&[("dim", "axis")])
                .ignoring(&["dtype"]),
        )?
        // Views.
        .insert(
            RuleInfo::of::<Transpose>()
                .renamed("aten.permute")
                .reading(&[("dims", "perm")])
                .passing_through(),
        )?
        .insert(
            RuleInfo::of::<Squeeze>()
                .renamed("aten.squeeze.dims")
                .reading(&[("dim", "axis")])
                .passing_through(),
        )?
        .register::<AtenSelect>()?
        .insert(
            RuleInfo::of::<Tile>()
                .renamed("aten.repeat")
                .reading(&[("repeats", "repeat_times")]),
        )?
        .insert(
            RuleInfo::of::<Unsqueeze>()
                .renamed("aten.unsqueeze")
                .reading(&[("dim", "axis")])
                .passing_through(),
        )?
        .insert(
            RuleInfo::of::<Reshape>()
                .renamed("aten.view")
                .reading(&[("size", "shape")])
                .passing_through(),
        )?
        .insert(
            RuleInfo::of::<Reshape>()
                .renamed("aten._unsafe_view")
                .reading(&[("size", "shape")])
                .passing_through(),
        )?
        .insert(
            RuleInfo::of::<Reshape>()
                .renamed("aten.reshape")
                .passing_through(),
        )?
        .insert(RuleInfo::of::<AtenExpand>().passing_through())?
        // Cuts and joins.
        .register::<AtenSlice>()?
        .register::<AtenConstantPadNd>()?
        .register::<AtenSliceScatter>()?
        .insert(
            RuleInfo::of::<Split>()
                .renamed("aten.split_with_sizes")
                .reading(&[("split_sizes", "sections"), ("dim", "axis")]),
        )?
        .insert(
            RuleInfo::of::<Concat>()
                .renamed("aten.cat")
                .reading(&[("dim", "axis")]),
        )?
        // Normalizations and attention.
        .insert(RuleInfo::of::<AtenNativeLayerNorm>().ignoring(&["eps"]))?
        .register::<AtenScaledDotProductAttention>()?
        // Gathers and scatters by index tensors.
        .insert(
            RuleInfo::of::<TakeAlongAxis>()
                .renamed("aten.gather")
                .reading(&[("dim", "axis")])
                .ignoring(&["sparse_grad"]),
        )?
        .insert(
            RuleInfo::of::<Gather>()
                .renamed("aten.index_select")
                .reading(&[("dim", "axis")]),
        )?
        .insert(RuleInfo::of::<IndexPut>().renamed("aten.index_put"))?
        // `aten.scatter_add(self, dim, index, src)`: `put_along_axis` adding.
        .insert(
            RuleInfo::of::<PutAlongAxis>()
                .renamed("aten.scatter_add")
                .reading(&[("dim", "axis")]),
        )?
        // The number written (a float, an int or a bool) changes no layout.
        .insert(RuleInfo::of::<AtenScatterValue>().ignoring(&["value"]))?
        .register::<AtenScatterSrc>()?
        // The experts' products of transformers' mixture-of-experts layers.
        .register::<GroupedMmFallback>()?
        // Advanced indexing by index tensors: every tensor replicated, until
        // the op has a rule of its own (a whole-tensor answer is always sound).
        .insert(RuleInfo::of::<Replicated>().renamed("aten.index.Tensor"))?;
    for (name, ignored) in ATEN_UNARY {
        registry.insert(
            RuleInfo::of::<ElementwiseUnary>()
                .renamed(name)
                .ignoring(ignored)
                .passing_through(),
        )?;
    }
    for (name, ignored) in ATEN_BINARY {
        registry.insert(
            RuleInfo::of::<ElementwiseBinary>()
                .renamed(name)
                .ignoring(ignored)
                .passing_through(),
        )?;
    }
    Ok(())
}

/// A registry holding every built-in rule.
pub fn builtins() -> Registry {
    let mut r = Registry::new();
    // The built-in names are distinct, so registration cannot fail; a failure
    // would leave some built-ins out, which the test suite checks for.
    let _ = register_builtins(&mut r);
    r
}

#[cfg(test)]
mod tests {
    use spmd_core::SpmdRuleExt;

    /// `builtins()` cannot report a failed registration, so this does: a name
    /// registered twice would silently drop every rule after it.
    #[test]
    fn every_builtin_registers() {
        let mut r = spmd_core::Registry::new();
        assert_eq!(
            super::register_builtins(&mut r).map_err(|e| e.to_string()),
            Ok(())
        );
        assert_eq!(r.len(), super::builtins().len());
        for name in crate::UNARY.iter().chain(crate::BINARY).chain(LIBRARY) {
            assert!(r.contains(name), "{name} is not registered");
        }
    }

    /// An attribute is read by the rule or ignored, never both (an ignored
    /// one is dropped before the rule reads it: it would read its default).
    #[test]
    fn ignored_attributes_are_not_read() {
        for info in super::builtins().iter() {
            for a in info.ignored {
                assert!(
                    !info.attrs.contains(a),
                    "{}: `{a}` is read and ignored",
                    info.name
                );
            }
        }
    }

    /// Unknown attributes are errors that name the op as it was called and
    /// suggest the near name; ignored ones are accepted; a renamed entry
    /// checks its own attributes.
    #[test]
    fn unknown_attributes_are_errors() {
        use spmd_core::{Attrs, SpmdError};
        let r = super::builtins();
        let err = |op: &str, attrs: Attrs| r.build(op, &attrs).err().map(|e| e.to_string());
        assert_eq!(
            err("softmax", Attrs::new().with("axsi", 0_i64)).as_deref(),
            Some("softmax: unknown attribute `axsi` (did you mean `axis`?); softmax takes: axis")
        );
        assert_eq!(
            err("matmul", Attrs::new().with("transpose_y", true)).as_deref(),
            Some(
                "matmul: unknown attribute `transpose_y` (did you mean `trans_y`?); matmul takes: trans_x, trans_y"
            )
        );
        assert!(err("layer_norm", Attrs::new().with("epsilon", 1e-5)).is_none());
        assert!(err("gelu", Attrs::new().with("approximate", true)).is_none());
        let e = r
            .build("gelu", &Attrs::new().with("aproximate", true))
            .err();
        assert!(
            matches!(&e, Some(SpmdError::UnknownAttr { op: "gelu", suggestions, .. }) if suggestions == &["approximate"]),
            "{e:?}"
        );
        // relu takes no attribute at all.
        assert_eq!(
            err("relu", Attrs::new().with("alpha", 0.1)).as_deref(),
            Some("relu: unknown attribute `alpha`; relu takes: no attributes")
        );
        // reduce_all reduces every dim, whatever `axis` says.
        let mesh = spmd_core::Mesh::new(&[2]).unwrap();
        let x = spmd_core::DistAttr::from_paddle(&[-1, 0]).unwrap();
        let max = r
            .build(
                "max",
                &Attrs::new()
                    .with("axis", vec![0_i64])
                    .with("reduce_all", true),
            )
            .unwrap();
        let out = max
            .forward(&mesh, &[spmd_core::Spec::new(&[4, 6], &x)])
            .unwrap();
        assert_eq!(out.outputs[0].to_string(), "[] partial{0: MAX}");
    }

    /// Paddle 3.3.1's registered names with a rule of their own here (the
    /// unary and binary aliases are checked from their lists).
    const LIBRARY: &[&str] = &[
        "add_n",
        "all",
        "amax",
        "amin",
        "any",
        "argmax",
        "argmin",
        "argsort",
        "batch_norm",
        "bmm",
        "c_embedding",
        "c_softmax_with_cross_entropy",
        "c_softmax_with_multi_label_cross_entropy",
        "concat",
        "conv2d",
        "conv2d_transpose",
        "conv3d",
        "cross_entropy_with_softmax",
        "cummax",
        "cummin",
        "cumsum",
        "default_",
        "default_data_parallel",
        "depthwise_conv2d",
        "einsum",
        "elementwise_binary",
        "elementwise_unary",
        "embedding",
        "expand_as",
        "expand_as_v2",
        "flash_attention",
        "flash_mask",
        "flatten",
        "frobenius_norm",
        "fused_dropout_add",
        "fused_gemm_epilogue",
        "fused_rms_norm",
        "fused_rotary_position_embedding",
        "gather",
        "gather_nd",
        "group_norm",
        "index_put",
        "index_select",
        "instance_norm",
        "label_smooth",
        "layer_norm",
        "linear_v2",
        "log_softmax",
        "logsumexp",
        "lookup_table_v2",
        "matmul",
        "matmul_v2",
        "max",
        "mean_all",
        "min",
        "multiply",
        "nonzero",
        "one_hot",
        "p_norm",
        "pad",
        "prod",
        "put_along_axis",
        "reduce_base",
        "reduce_max",
        "reduce_sum",
        "replicated",
        "reshape",
        "reshape2",
        "roi_align",
        "roll",
        "scatter",
        "scatter_nd_add",
        "slice",
        "softmax",
        "softmax_with_cross_entropy",
        "split",
        "split_with_num",
        "squared_l2_norm",
        "squeeze",
        "stack",
        "strided_slice",
        "sum",
        "swiglu",
        "take_along_axis",
        "tile",
        "topk",
        "transpose",
        "transpose2",
        "tril_triu",
        "triu",
        "unbind",
        "unique",
        "unsqueeze",
        "unsqueeze2",
        "where",
    ];

    /// Every registered rule builds from default attributes, or fails with a
    /// typed error naming a missing attribute (never a panic).
    #[test]
    fn every_builtin_builds_or_names_its_missing_attribute() {
        let r = super::builtins();
        for info in r.iter() {
            match r.build(info.name, &spmd_core::Attrs::new()) {
                Ok(rule) => assert!(!rule.name().is_empty()),
                Err(e) => assert!(
                    matches!(e, spmd_core::SpmdError::InvalidAttr { .. }),
                    "{}: {e}",
                    info.name
                ),
            }
        }
    }
}
