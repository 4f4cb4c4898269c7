//! Registration of the neural-network layer ops: normalizations, the fused
//! softmax cross entropy, `log_softmax`, `swiglu`, `gather`, `flash_attention`,
//! `fused_rotary_position_embedding`.

use spmd_core::{Registry, RuleInfo, SpmdError};

use crate::{
    CrossEntropyWithSoftmax, FlashAttention, FusedRmsNorm, FusedRotaryPositionEmbedding, Gather,
    LayerNorm, Softmax, Swiglu,
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
        .register::<Gather>()?
        .register::<FlashAttention>()?
        .register::<FusedRotaryPositionEmbedding>()?;
    Ok(())
}
