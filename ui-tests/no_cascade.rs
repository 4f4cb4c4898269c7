use spmd_core::{Attrs, Mesh, Op, SpmdRule, SpmdRuleExt, spmd_rule};

// The attribute is invalid, but the struct and stub `Op`/`SpmdRule` impls are
// still emitted: code using the type reports nothing beyond the macro's error.
#[spmd_rule(einsum = "mk,kn->mq")]
struct Matmul {
    #[spmd(default)]
    trans_x: bool,
}

fn uses(rule: &dyn SpmdRule) -> &'static str {
    rule.name()
}

fn main() {
    let op = Matmul::from_attrs(&Attrs::new()).unwrap();
    let _ = op.trans_x;
    let _ = (Matmul::NAME, Matmul::NOTATIONS, uses(&op));
    let mesh = Mesh::new(&[2]).unwrap();
    let _ = op.forward(&mesh, &[]);
}
