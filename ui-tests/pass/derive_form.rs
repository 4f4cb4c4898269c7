use spmd_core::{Attrs, DistAttr, Mesh, Op, Registry, Spec, SpmdRule, SpmdRuleExt};

// The derive form: options in `#[spmd(...)]` on the struct (several
// attributes are one list), field options as in the attribute form.
#[derive(SpmdRule, Clone, Debug)]
#[spmd(name = "scores", einsum = "bhqd,bhkd->bhqk")]
#[spmd(case(when = self.k_transposed, einsum = "bhqd,bhdk->bhqk"), inputs(q, k), outputs(s))]
struct Scores {
    #[spmd(default)]
    k_transposed: bool,
}

fn main() {
    let mut registry = Registry::new();
    registry.register::<Scores>().unwrap();
    let rule = registry
        .build("scores", &Attrs::new().with("k_transposed", true))
        .unwrap();
    let mesh = Mesh::new(&[2]).unwrap();
    let q = DistAttr::from_paddle(&[0, -1, -1, -1]).unwrap();
    let k = DistAttr::replicated(4);
    let r = rule
        .forward(&mesh, &[Spec::new(&[2, 4, 8, 16], &q), Spec::new(&[2, 4, 16, 8], &k)])
        .unwrap();
    assert_eq!(r.outputs[0].to_string(), "[0, -1, -1, -1]");
    assert_eq!(Scores::NAME, "scores");
    let _ = Scores { k_transposed: false }.clone();
}
