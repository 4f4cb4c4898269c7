//! Two deliberately wrong custom rules, declared with `#[spmd_rule]`, and the
//! checker catching each on a simulated 2x2 mesh; then their fixed versions
//! passing.
//!
//! Run with `cargo run -p spmd-check --example catch_wrong_rule`.

use spmd_check::{EinsumCheck, Input, Tensor, check_forward};
use spmd_core::{Call, DistAttr, Mesh, Partial, RuleResult, Spec, SpmdError, spmd_rule};

/// WRONG: a matmul rule whose `adjust` hook "cleans up" the output's partial
/// status, claiming the output is complete where it is only partial.
#[spmd_rule(name = "linear_no_partial", einsum = "mk,kn->mn", adjust = Self::forget_partial)]
struct LinearNoPartial {}

impl LinearNoPartial {
    fn forget_partial(&self, _: &Call<'_>, r: &mut RuleResult) -> Result<(), SpmdError> {
        for out in &mut r.outputs {
            out.partial = Partial::NONE;
        }
        Ok(())
    }
}

/// RIGHT: the same rule without the hook.
#[spmd_rule(name = "linear", einsum = "mk,kn->mn")]
struct Linear {}

/// WRONG: row normalization (`y[a, b] = x[a, b] / Σ_b |x[a, b]|`) declared as
/// an elementwise op, so it keeps the normalized axis `b` sharded.
#[spmd_rule(name = "row_normalize_elementwise", einsum = "ab->ab")]
struct RowNormalizeElementwise {}

/// RIGHT: the normalized axis is never sharded.
#[spmd_rule(name = "row_normalize", einsum = "ab->ab", merge(never_sharded = "b"))]
struct RowNormalize {}

/// The op's mathematics, densely: what every device runs on its blocks too.
fn row_normalize(x: &[Tensor]) -> Vec<Tensor> {
    let x = &x[0];
    let (rows, cols) = (x.shape()[0], x.shape()[1]);
    let norm: Vec<f64> = (0..rows)
        .map(|a| (0..cols).map(|b| x.get(&[a, b]).abs()).sum())
        .collect();
    vec![Tensor::from_fn(x.shape(), |i| x.get(i) / norm[i[0]])]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mesh = Mesh::new(&[2, 2])?;
    // x: [5, 6] with k on mesh dim 1 (uneven rows on mesh dim 0); y: [6, 3] replicated.
    let x = DistAttr::from_paddle(&[0, 1]).unwrap();
    let y = DistAttr::from_paddle(&[-1, -1]).unwrap();
    let inputs = [Spec::new(&[5, 6], &x), Spec::new(&[6, 3], &y)];
    let matmul = EinsumCheck::new("mk,kn->mn")?;

    println!("== 1. a rule that forgets a partial output ==\n");
    let report = matmul
        .forward(&LinearNoPartial {}, &mesh, &inputs)
        .expect_err("the checker must catch linear_no_partial");
    println!("{report}\n");
    matmul.forward(&Linear {}, &mesh, &inputs)?;
    println!("the fixed rule `linear` passes.\n");

    println!("== 2. a rule that keeps a normalized axis sharded ==\n");
    let x = Input::probe(&[3, 8], DistAttr::from_paddle(&[1, 0]).unwrap(), 7);
    let report = check_forward(
        &RowNormalizeElementwise {},
        &mesh,
        std::slice::from_ref(&x),
        row_normalize,
    )
    .expect_err("the checker must catch row_normalize_elementwise");
    println!("{report}\n");
    check_forward(&RowNormalize {}, &mesh, &[x], row_normalize)?;
    println!("the fixed rule `row_normalize` passes.");
    Ok(())
}
