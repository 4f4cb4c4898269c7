//! Two custom ops declared downstream, registered next to the built-ins.
//!
//! Run with `cargo run -p custom-ops`.

use sharding::SpmdRuleExt;
use sharding::{Attrs, Call, DistAttr, Mesh, Registry, Spec, SpmdError, spmd_rule};

/// Attention scores `q @ k^T` per head. The keys may be stored transposed
/// (`k_transposed`), which picks another literal notation at run time.
#[spmd_rule(
    crate = ::sharding,
    name = "attention_scores",
    einsum = "bhqd,bhkd->bhqk",
    case(when = self.k_transposed, einsum = "bhqd,bhdk->bhqk"),
    inputs(q, k),
    outputs(scores)
)]
struct AttentionScores {
    #[spmd(default)]
    k_transposed: bool,
}

/// A mixture-of-experts gate: tokens `t` are scored against experts `e`. The
/// expert axis of the gate weight must not be sharded (every rank must see
/// every expert's score to pick the top ones): a validation hook says so.
#[spmd_rule(
    crate = ::sharding,
    name = "moe_gate",
    einsum = "th,he->te",
    validate = Self::experts_whole,
    inputs(tokens, gate_weight),
    outputs(scores)
)]
struct MoeGate {
    top_k: i64,
}

impl MoeGate {
    fn experts_whole(&self, call: &Call<'_>) -> Result<(), SpmdError> {
        if let Call::Forward { inputs, .. } = *call
            && let Some(s) = inputs.get(1).and_then(|w| w.attr.dims_mapping.get(1))
            && !s.is_replicated()
        {
            return Err(SpmdError::Rejected {
                op: "moe_gate",
                message: format!(
                    "input 1 (gate_weight) dim 1 (experts) is sharded on mesh dim {s}; \
                     top-{} selection needs every expert on every rank",
                    self.top_k
                ),
            });
        }
        Ok(())
    }
}

fn attr(m: &[i64]) -> DistAttr {
    DistAttr::from_paddle(m).expect("valid mapping literal")
}

fn main() -> Result<(), SpmdError> {
    let mut registry: Registry = spmd_ops::builtins();
    registry
        .register::<AttentionScores>()?
        .register::<MoeGate>()?;
    println!("{} rules registered, including:", registry.len());
    for name in ["matmul", "attention_scores", "moe_gate"] {
        let info = registry.get(name)?;
        println!(
            "  {:<17} {:?} attrs {:?}",
            info.name, info.notations, info.attrs
        );
    }

    let mesh = Mesh::new(&[2, 4])?;

    // Heads split over mesh dim 1 (tensor parallel), batch over mesh dim 0.
    let scores = registry.build("attention_scores", &Attrs::new().with("k_transposed", true))?;
    let (q, k) = (attr(&[0, 1, -1, -1]), attr(&[-1, 1, -1, -1]));
    let r = scores.forward(
        &mesh,
        &[
            Spec::new(&[8, 16, 128, 64], &q),
            Spec::new(&[8, 16, 64, 128], &k),
        ],
    )?;
    println!("\nattention_scores (k stored transposed) on mesh {mesh}:");
    println!("  q      requires {}", r.inputs[0]);
    println!("  k      requires {}", r.inputs[1]);
    println!("  scores is       {}", r.outputs[0]);

    let gate = registry.build("moe_gate", &Attrs::new().with("top_k", 2i64))?;
    let (t, w) = (attr(&[0, 1]), attr(&[1, -1]));
    let r = gate.forward(
        &mesh,
        &[Spec::new(&[4096, 1024], &t), Spec::new(&[1024, 64], &w)],
    )?;
    println!("\nmoe_gate with the hidden dim split on mesh dim 1:");
    println!(
        "  scores is {} (an all-reduce over mesh dim 1 completes them)",
        r.outputs[0]
    );

    let bad = attr(&[-1, 1]);
    match gate.forward(
        &mesh,
        &[Spec::new(&[4096, 1024], &t), Spec::new(&[1024, 64], &bad)],
    ) {
        Err(e) => println!("\nmoe_gate with experts sharded is refused:\n  {e}"),
        Ok(r) => println!("\nunexpectedly accepted: {:?}", r.outputs),
    }

    match registry.build("atention_scores", &Attrs::new()) {
        Err(e) => println!("\na typo in an op name:\n  {e}"),
        Ok(_) => println!("\nunexpectedly found a misspelled op"),
    }
    Ok(())
}
