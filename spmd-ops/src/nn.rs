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

pub(crate) fn register(registry: &mut Registry) -> Result<(), SpmdError> {
    registry
        .register::<LayerNorm>()?
        .register::<FusedRmsNorm>()?
        .register::<CrossEntropyWithSoftmax>()?
        .insert(RuleInfo::of::<CrossEntropyWithSoftmax>().renamed("softmax_with_cross_entropy"))?
        // Paddle 3.3.1 registers `log_softmax` with the softmax rule.
        .insert(RuleInfo::of::<Softmax>().renamed("log_softmax"))?
        .register::<Swiglu>()?
        .register::<CSoftmaxWithCrossEntropy>()?
        .register::<CSoftmaxWithMultiLabelCrossEntropy>()?
        .register::<GroupNorm>()?
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
        .register::<FlashAttention>()?
        .register::<FlashMask>()?
        .register::<FusedRotaryPositionEmbedding>()?;
    Ok(())
}
