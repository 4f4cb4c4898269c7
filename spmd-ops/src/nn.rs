//! Registration of the neural-network layer ops: normalizations, the fused
//! softmax cross entropy, `log_softmax`, `swiglu`, gathers and scatters,
//! `flash_attention`, `fused_rotary_position_embedding`.

use spmd_core::{Registry, RuleInfo, SpmdError};

use crate::{
    BatchNorm, CSoftmaxWithCrossEntropy, CSoftmaxWithMultiLabelCrossEntropy,
    CrossEntropyWithSoftmax, FlashAttention, FlashMask, FusedRmsNorm, FusedRotaryPositionEmbedding,
    Gather, GatherNd, GroupNorm, IndexPut, InstanceNorm, LayerNorm, MoeCombine, MoeGateDispatch,
    PutAlongAxis, Scatter, ScatterNdAdd, Softmax, Swiglu, TakeAlongAxis,
};

/// Paddle's cross entropy attributes that do not change its sharding.
const CROSS_ENTROPY_IGNORED: &[&str] = &["ignore_index", "numeric_stable_mode"];

pub(crate) fn register(registry: &mut Registry) -> Result<(), SpmdError> {
    registry
        .insert(RuleInfo::of::<LayerNorm>().ignoring(&["epsilon"]))?
        .insert(RuleInfo::of::<FusedRmsNorm>().ignoring(&["epsilon"]))?
        .insert(RuleInfo::of::<CrossEntropyWithSoftmax>().ignoring(CROSS_ENTROPY_IGNORED))?
        .insert(
            RuleInfo::of::<CrossEntropyWithSoftmax>()
                .renamed("softmax_with_cross_entropy")
                .ignoring(CROSS_ENTROPY_IGNORED),
        )?
        // Paddle 3.3.1 registers `log_softmax` with the softmax rule.
        .insert(RuleInfo::of::<Softmax>().renamed("log_softmax"))?
        .register::<Swiglu>()?
        .register::<CSoftmaxWithCrossEntropy>()?
        .register::<CSoftmaxWithMultiLabelCrossEntropy>()?
        .insert(RuleInfo::of::<GroupNorm>().ignoring(&["epsilon"]))?
        .register::<BatchNorm>()?
        .register::<InstanceNorm>()?
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
        // The flags that choose the kernel's math, not its layout.
        .insert(RuleInfo::of::<FlashAttention>().ignoring(&[
            "dropout",
            "causal",
            "return_softmax",
            "is_test",
            "rng_name",
        ]))?
        .insert(RuleInfo::of::<FlashMask>().ignoring(&["return_softmax", "is_test", "rng_name"]))?
        .insert(RuleInfo::of::<FusedRotaryPositionEmbedding>().ignoring(&["rotary_emb_base"]))?;
    Ok(())
}
