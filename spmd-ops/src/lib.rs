//! The standard rule library: PaddlePaddle's operators under Paddle's registry
//! and attribute names, each declared with `#[spmd_rule]`.
//!
//! ```
//! use spmd_core::{Attrs, DistAttr, Mesh, Spec};
//!
//! let registry = spmd_ops::builtins();
//! let matmul = registry.build("matmul", &Attrs::new().with("trans_x", false).with("trans_y", false))?;
//! let mesh = Mesh::new(&[2, 3])?;
//! let (x, y) = (DistAttr::from_paddle(&[1, 0]).unwrap(), DistAttr::from_paddle(&[-1, -1]).unwrap());
//! let r = matmul.forward(&mesh, &[Spec::new(&[64, 32], &x), Spec::new(&[32, 48], &y)])?;
//! assert_eq!(r.outputs[0].to_string(), "[1, -1] partial{0: SUM}");
//! # Ok::<(), spmd_core::SpmdError>(())
//! ```

mod attention;
mod elementwise;
mod embedding;
mod gather;
mod index;
mod loss;
mod matmul;
mod misc;
mod nn;
mod norm;
mod notation;
mod reduce;
mod rope;
mod shape;
mod softmax;
mod split;
mod swiglu;

pub use attention::FlashAttention;
pub use elementwise::{BINARY, ElementwiseBinary, ElementwiseUnary, Multiply, UNARY};
pub use embedding::Embedding;
pub use gather::Gather;
pub use index::{ArgMax, ArgMin, ArgSort, Cumsum, OneHot, TopK, TrilTriu, Triu};
pub use loss::CrossEntropyWithSoftmax;
pub use matmul::Matmul;
pub use misc::{DefaultDataParallel, MeanAll, Replicated, Where};
pub use norm::{FusedRmsNorm, LayerNorm};
pub use reduce::{All, Amax, Amin, Any, Max, Min, Prod, ReduceBase, Sum};
pub use rope::FusedRotaryPositionEmbedding;
pub use shape::{ExpandAs, Flatten, Reshape, Squeeze, Tile, Transpose, Unsqueeze};
pub use softmax::Softmax;
pub use split::{Concat, Slice, Split, SplitWithNum, Stack, StridedSlice, Unbind};
pub use swiglu::Swiglu;

use spmd_core::{Registry, RuleInfo, SpmdError};

/// Registers every built-in rule under Paddle's names.
pub fn register_builtins(registry: &mut Registry) -> Result<(), SpmdError> {
    registry
        .register::<Matmul>()?
        .insert(RuleInfo::of::<Matmul>().renamed("matmul_v2"))?
        .register::<Embedding>()?
        .insert(RuleInfo::of::<Embedding>().renamed("lookup_table_v2"))?
        .register::<Softmax>()?
        .register::<Sum>()?
        .register::<Max>()?
        .register::<Min>()?
        .register::<Prod>()?;
    elementwise::register(registry)?;
    shape::register(registry)?;
    misc::register(registry)?;
    nn::register(registry)?;
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
        for name in crate::UNARY.iter().chain(crate::BINARY) {
            assert!(r.contains(name), "{name} is not registered");
        }
    }
}
