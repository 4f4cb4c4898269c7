//! The built-in ops' benchmark cases, shared by `benches/library.rs` (wall
//! time, divan) and `examples/calls.rs` (instructions per call, run under
//! callgrind by `benches/instructions.sh`): each is a rule built once from
//! the registry by Paddle name and attributes, called through `dyn SpmdRule`
//! with `[8, 1024, 512]`-sized tensors on a 2x4 mesh, and checked once so
//! that no measurement runs an error path.

use spmd_core::SpmdRuleExt;
use spmd_core::{Attrs, Call, DistAttr, Mesh, RuleResult, Spec, SpmdError, SpmdRule};

pub enum Direction {
    Forward,
    Backward,
}

/// One call: the op, its direction and tensors, and what its answer must say.
pub struct Case {
    pub name: &'static str,
    pub op: Box<dyn SpmdRule>,
    pub direction: Direction,
    /// Forward: the inputs; backward: the outputs.
    pub given: Vec<(Vec<usize>, DistAttr)>,
    /// Backward: the inputs' shapes.
    pub input_shapes: Vec<Vec<usize>>,
    /// Forward: output 0's attr; backward: input 0's requirement.
    pub expect: &'static str,
}

fn attr(dims: &[i64]) -> DistAttr {
    DistAttr::from_paddle(dims).expect("valid Paddle mapping")
}

pub fn mesh() -> Mesh {
    Mesh::new(&[2, 4]).expect("valid mesh")
}

fn op(name: &str, attrs: Attrs) -> Box<dyn SpmdRule> {
    spmd_ops::builtins()
        .build(name, &attrs)
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn forward(
    name: &'static str,
    o: &str,
    attrs: Attrs,
    given: &[(&[usize], &[i64])],
    expect: &'static str,
) -> Case {
    Case {
        name,
        op: op(o, attrs),
        direction: Direction::Forward,
        given: given.iter().map(|(s, a)| (s.to_vec(), attr(a))).collect(),
        input_shapes: Vec::new(),
        expect,
    }
}

fn backward(
    name: &'static str,
    o: &str,
    attrs: Attrs,
    shapes: &[&[usize]],
    outputs: &[(&[usize], &[i64])],
    expect: &'static str,
) -> Case {
    Case {
        name,
        op: op(o, attrs),
        direction: Direction::Backward,
        given: outputs.iter().map(|(s, a)| (s.to_vec(), attr(a))).collect(),
        input_shapes: shapes.iter().map(|s| s.to_vec()).collect(),
        expect,
    }
}

impl Case {
    /// Runs `f` with the call's specs and input shapes, built once.
    pub fn with_specs<R>(&self, f: impl FnOnce(&[Spec<'_>], &[&[usize]]) -> R) -> R {
        let specs: Vec<Spec<'_>> = self.given.iter().map(|(s, a)| Spec::new(s, a)).collect();
        let shapes: Vec<&[usize]> = self.input_shapes.iter().map(Vec::as_slice).collect();
        f(&specs, &shapes)
    }

    /// One call.
    #[inline(always)]
    pub fn call(
        &self,
        mesh: &Mesh,
        specs: &[Spec<'_>],
        shapes: &[&[usize]],
    ) -> Result<RuleResult, SpmdError> {
        match self.direction {
            Direction::Forward => self.op.forward(mesh, specs),
            Direction::Backward => self.op.backward(mesh, shapes, specs),
        }
    }

    /// One call answered into `out`, which the caller reuses: the API a
    /// search that asks many questions calls.
    #[inline(always)]
    pub fn call_into(
        &self,
        mesh: &Mesh,
        specs: &[Spec<'_>],
        shapes: &[&[usize]],
        out: &mut RuleResult,
    ) -> Result<(), SpmdError> {
        let call = match self.direction {
            Direction::Forward => Call::forward(mesh, specs),
            Direction::Backward => Call::backward(mesh, shapes, specs),
        };
        self.op.infer_into(&call, None, out)
    }

    /// A forward case's call prepared for its shapes
    /// (`SpmdRule::prepare`), the way a graph prepares an op; `None` for a
    /// backward case or a rule that compiles nothing.
    #[allow(dead_code)] // Not every target that includes this file calls it.
    pub fn prepare(&self, mesh: &Mesh) -> Option<spmd_core::Prepared> {
        let Direction::Forward = self.direction else {
            return None;
        };
        self.with_specs(|specs, _| {
            let prepared = self
                .op
                .prepare(&Call::forward(mesh, specs))
                .expect("the case prepares");
            prepared.is_compiled().then_some(prepared)
        })
    }

    /// One call answered by `prepared` into `out`.
    #[allow(dead_code)] // As `prepare`.
    #[inline(always)]
    pub fn call_prepared(
        &self,
        mesh: &Mesh,
        specs: &[Spec<'_>],
        prepared: &spmd_core::Prepared,
        out: &mut RuleResult,
    ) -> Result<(), SpmdError> {
        prepared.infer_into(&*self.op, &Call::forward(mesh, specs), out)
    }

    /// Panics unless the call answers what the case expects.
    pub fn check(&self) {
        let mesh = mesh();
        let got = self.with_specs(|specs, shapes| {
            let r = self
                .call(&mesh, specs, shapes)
                .unwrap_or_else(|e| panic!("{}: {e}", self.name));
            match self.direction {
                Direction::Forward => r.outputs[0].to_string(),
                Direction::Backward => r.inputs[0].to_string(),
            }
        });
        assert_eq!(got, self.expect, "{}", self.name);
    }
}

/// Every case, by name.
pub fn all() -> Vec<Case> {
    let big: &[usize] = &[8, 1024, 512];
    let sum = || {
        Attrs::new()
            .with("axis", vec![-1_i64])
            .with("keep_dim", false)
    };
    let softmax = || Attrs::new().with("axis", -1_i64);
    let reshape = || Attrs::new().with("shape", vec![8_i64, 1024, 512]);
    let layer_norm = || Attrs::new().with("begin_norm_axis", 2_i64);
    vec![
        // The engine alone: the notation `mk,kn->mn` with the default
        // policy, no op in front of it (the performance goal's "direct
        // matmul forward").
        Case {
            name: "direct_matmul_forward",
            op: Box::new(spmd_core::Einsum::new("mk,kn->mn").expect("valid notation")),
            direction: Direction::Forward,
            given: vec![
                (vec![1024, 512], attr(&[0, 1])),
                (vec![512, 256], attr(&[1, -1])),
            ],
            input_shapes: Vec::new(),
            expect: "[0, -1] partial{1: SUM}",
        },
        forward(
            "matmul_forward",
            "matmul",
            Attrs::new(),
            &[(big, &[0, -1, 1]), (&[512, 256], &[1, -1])],
            "[0, -1, -1] partial{1: SUM}",
        ),
        backward(
            "matmul_backward",
            "matmul",
            Attrs::new(),
            &[big, &[512, 256]],
            &[(&[8, 1024, 256], &[0, -1, 1])],
            "[0, -1, -1]",
        ),
        // `[8, 1024, 512] + [512]`: the bias broadcasts over the two leading dims.
        forward(
            "add_broadcast_forward",
            "add",
            Attrs::new(),
            &[(big, &[0, -1, 1]), (&[512], &[-1])],
            "[0, -1, 1]",
        ),
        backward(
            "add_broadcast_backward",
            "add",
            Attrs::new(),
            &[big, &[512]],
            &[(big, &[0, -1, 1])],
            "[0, -1, 1]",
        ),
        // Ids data parallel, the table split by rows: the output is partial.
        forward(
            "embedding_forward",
            "embedding",
            Attrs::new(),
            &[(&[8, 1024], &[0, -1]), (&[32000, 512], &[1, -1])],
            "[0, -1, -1] partial{1: SUM}",
        ),
        backward(
            "embedding_backward",
            "embedding",
            Attrs::new(),
            &[&[8, 1024], &[32000, 512]],
            &[(big, &[0, -1, 1])],
            "[0, -1]",
        ),
        // `sum` over the last axis, which is sharded: the output is partial.
        forward(
            "sum_forward",
            "sum",
            sum(),
            &[(big, &[0, -1, 1])],
            "[0, -1] partial{1: SUM}",
        ),
        backward(
            "sum_backward",
            "sum",
            sum(),
            &[big],
            &[(&[8, 1024], &[0, 1])],
            "[0, 1, -1]",
        ),
        // `softmax` on the last axis, which must be replicated.
        forward(
            "softmax_forward",
            "softmax",
            softmax(),
            &[(big, &[0, 1, -1])],
            "[0, 1, -1]",
        ),
        backward(
            "softmax_backward",
            "softmax",
            softmax(),
            &[big],
            &[(big, &[0, -1, 1])],
            "[0, -1, -1]",
        ),
        // Head merge: the heads' sharding carries to the merged dim.
        forward(
            "reshape_forward",
            "reshape",
            reshape(),
            &[(&[8, 1024, 16, 32], &[0, -1, 1, -1])],
            "[0, -1, 1]",
        ),
        backward(
            "reshape_backward",
            "reshape",
            reshape(),
            &[&[8, 1024, 16, 32]],
            &[(big, &[0, -1, 1])],
            "[0, -1, 1, -1]",
        ),
        // `layer_norm` over the last axis: the normalized axis is replicated.
        forward(
            "layer_norm_forward",
            "layer_norm",
            layer_norm(),
            &[(big, &[0, -1, 1]), (&[512], &[-1]), (&[512], &[-1])],
            "[0, -1, -1]",
        ),
        backward(
            "layer_norm_backward",
            "layer_norm",
            layer_norm(),
            &[big, &[512], &[512]],
            &[
                (big, &[0, -1, -1]),
                (&[8, 1024], &[0, -1]),
                (&[8, 1024], &[0, -1]),
            ],
            "[0, -1, -1]",
        ),
    ]
}

/// The seven calls the Paddle C++ benchmark (see `benches/vs_paddle.sh`) times Paddle 3.3.1's
/// C++ rules on (its README's table, same shapes, mappings and attributes,
/// mesh 2x4), named `paddle_` and its key, so that `examples/vs_paddle.rs`
/// can time both sides alike. Each expectation is Paddle's own answer.
pub fn paddle() -> Vec<Case> {
    let big: &[usize] = &[64, 32, 48];
    vec![
        forward(
            "paddle_matmul_forward",
            "matmul",
            Attrs::new(),
            &[(&[64, 32], &[1, 0]), (&[32, 48], &[-1, -1])],
            "[1, -1] partial{0: SUM}",
        ),
        backward(
            "paddle_matmul_reverse",
            "matmul",
            Attrs::new(),
            &[&[64, 32], &[32, 48]],
            &[(&[64, 48], &[1, -1])],
            "[1, -1]",
        ),
        forward(
            "paddle_add_forward_broadcast",
            "add",
            Attrs::new(),
            &[(&[64, 36, 12], &[0, 1, -1]), (&[12], &[-1])],
            "[0, 1, -1]",
        ),
        forward(
            "paddle_embedding_forward",
            "embedding",
            Attrs::new()
                .with("padding_idx", -1_i64)
                .with("sparse", false),
            &[(&[4, 1024], &[1, -1]), (&[512, 768], &[0, -1])],
            "[1, -1, -1] partial{0: SUM}",
        ),
        forward(
            "paddle_sum_forward",
            "sum",
            Attrs::new()
                .with("axis", vec![1_i64, 2])
                .with("keep_dim", false),
            &[(big, &[0, 1, -1])],
            "[0] partial{1: SUM}",
        ),
        forward(
            "paddle_softmax_forward",
            "softmax",
            Attrs::new().with("axis", -1_i64),
            &[(&[8, 16, 48], &[1, -1, -1])],
            "[1, -1, -1]",
        ),
        forward(
            "paddle_layer_norm_forward",
            "layer_norm",
            Attrs::new()
                .with("epsilon", 1e-5_f64)
                .with("begin_norm_axis", 2_i64),
            &[(big, &[0, 1, -1]), (&[48], &[-1]), (&[48], &[-1])],
            "[0, 1, -1]",
        ),
    ]
}

/// The case called `name`, of [`all`] or [`paddle`].
pub fn by_name(name: &str) -> Option<Case> {
    all().into_iter().chain(paddle()).find(|c| c.name == name)
}

/// The name of [`with_prepared_matmul`]'s case.
pub const PREPARED_MATMUL: &str = "prepared_matmul_forward";

/// [`with_prepared_matmul`]'s call answered into an `InlineResult`
/// (`PreparedForward::forward_inline`).
#[allow(dead_code)] // Not every bench target that includes this file names it.
pub const INLINE_MATMUL: &str = "inline_matmul_forward";

/// `direct_matmul_forward`'s call prepared once
/// (`EinsumRule::prepare_forward`), as a search asking about many layouts
/// of the same tensors calls it: `f` gets the prepared call and the
/// layouts, checked once.
#[allow(dead_code)] // Not every bench target that includes this file calls it.
pub fn with_prepared_matmul<R>(
    f: impl FnOnce(&spmd_core::PreparedForward<'_>, &[&DistAttr]) -> R,
) -> R {
    let einsum = spmd_core::Einsum::new("mk,kn->mn").expect("valid notation");
    let rule = einsum.rule();
    let call = rule.prepare_forward(&[&[1024, 512], &[512, 256]], &[]);
    assert!(call.is_compiled(), "{PREPARED_MATMUL} compiles its shapes");
    let (x, w) = (attr(&[0, 1]), attr(&[1, -1]));
    let mut out = RuleResult::default();
    call.forward_into(&mesh(), &[&x, &w], &mut out)
        .expect("the case answers");
    assert_eq!(out.outputs[0].to_string(), "[0, -1] partial{1: SUM}");
    f(&call, &[&x, &w])
}
