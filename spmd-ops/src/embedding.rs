//! `embedding` / `lookup_table_v2`: rows of a table picked by integer ids;
//! `c_embedding`, its vocab-parallel form.

use spmd_core::{Call, SpmdError, spmd_rule};

/// Paddle's `embedding`: `out[..., k] = weight[ids[...], k]`. A table split by
/// rows (`j`) gives partial outputs (each rank holds the rows it owns and zeros
/// elsewhere), which Paddle supports only without `padding_idx` and `sparse`:
/// with either, backward never shards the rows to explain a partial output
/// (forward would reject that table).
#[spmd_rule(
    name = "embedding",
    einsum = "...,jk->...k",
    case(when = call.is_backward() && self.row_parallel_unsupported(), einsum = "...,1k->...k"),
    merge(conflicts = "strict"),
    validate = Self::check_row_parallel,
    inputs(x, weight),
    outputs(out),
    // The ids have no gradient; the table's gradient scatters the output
    // grad by the ids and never reads the table itself.
    grad(none(x), ignores(weight))
)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Embedding {
    #[spmd(default = -1)]
    pub padding_idx: i64,
    #[spmd(default)]
    pub sparse: bool,
}

impl Default for Embedding {
    fn default() -> Self {
        Embedding {
            padding_idx: -1,
            sparse: false,
        }
    }
}

impl Embedding {
    fn row_parallel_unsupported(&self) -> bool {
        self.padding_idx != -1 || self.sparse
    }

    /// A row-sharded table supports neither `padding_idx` nor `sparse`.
    fn check_row_parallel(&self, call: &Call<'_>) -> Result<(), SpmdError> {
        let Call::Forward { inputs, .. } = *call else {
            return Ok(());
        };
        let Some(rows) = inputs.get(1).and_then(|w| w.attr.dims_mapping.get(0)) else {
            return Ok(());
        };
        if rows.is_replicated() || !self.row_parallel_unsupported() {
            return Ok(());
        }
        let what = if self.sparse {
            "sparse = true".to_string()
        } else {
            format!("padding_idx = {}", self.padding_idx)
        };
        Err(SpmdError::Rejected {
            op: "embedding",
            message: format!(
                "input 1 (weight) dim 0 (its rows) is sharded on mesh dim {rows}, and row-parallel \
                 embedding does not support {what} (use padding_idx = -1 and sparse = false, or \
                 replicate the rows)"
            ),
        })
    }
}

/// Paddle's `c_embedding` (`weight`, `x` → `out`): the vocab-parallel
/// embedding, the table first. Each device holds rows `start_index..` of
/// the table and looks up the ids that fall there, zeros elsewhere: a
/// row-sharded table leaves the output partial (`Sum`). One mesh dim on two
/// axes is an error, as in Paddle 3.3.1's `CEmbeddingInferSpmd`. The ids
/// have no gradient; the table's gradient never reads the table.
#[spmd_rule(
    name = "c_embedding",
    einsum = "jk,...->...k",
    merge(conflicts = "strict"),
    inputs(weight, x),
    outputs(out),
    grad(none(x), ignores(weight))
)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CEmbedding {
    #[spmd(default)]
    pub start_index: i64,
}
