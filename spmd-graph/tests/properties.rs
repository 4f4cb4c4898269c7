//! Propagation on random graphs: it terminates within its bound, is
//! deterministic, never overrides an annotation, and leaves every tensor a
//! valid attr for its shape; the reshard plan of the result can be computed.

use proptest::prelude::*;
use spmd_core::{Attrs, DimsMapping, DistAttr, Mesh, MeshDim, Sharding};
use spmd_graph::{Graph, GraphBuilder, TensorId, plan, propagate};

/// One op of a random graph, over earlier tensors picked by index (modulo
/// the number of tensors so far).
#[derive(Clone, Debug)]
enum RandomOp {
    Unary(usize, &'static str),
    Add(usize, usize),
    /// `x @ w` with a new weight of `n` columns.
    Matmul(usize, usize),
    Transpose(usize),
    Sum(usize),
}

fn random_op() -> impl Strategy<Value = RandomOp> {
    prop_oneof![
        (
            any::<usize>(),
            prop::sample::select(vec!["relu", "gelu", "exp"])
        )
            .prop_map(|(a, u)| RandomOp::Unary(a, u)),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| RandomOp::Add(a, b)),
        (any::<usize>(), prop::sample::select(vec![4usize, 8]))
            .prop_map(|(a, n)| RandomOp::Matmul(a, n)),
        any::<usize>().prop_map(RandomOp::Transpose),
        any::<usize>().prop_map(RandomOp::Sum),
    ]
}

/// A mapping for a rank-2 tensor on a mesh of `mesh_rank` dims: each tensor
/// dim takes a distinct mesh dim or none (`choice` picks which).
fn mapping(choice: (u8, u8), mesh_rank: u8) -> DistAttr {
    let pick = |c: u8| (c % (mesh_rank + 1)).checked_sub(1);
    let a = pick(choice.0);
    let b = pick(choice.1).filter(|&d| Some(d) != a);
    let s = |d: Option<MeshDim>| d.map_or(Sharding::REPLICATED, Sharding::on);
    DistAttr::new(DimsMapping::from_shardings(&[s(a), s(b)]))
}

#[derive(Clone, Debug)]
struct Spec {
    mesh: Vec<usize>,
    ops: Vec<RandomOp>,
    /// (tensor index, mapping choice, priority) to annotate.
    annotations: Vec<(usize, (u8, u8), u32)>,
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        prop::sample::select(vec![vec![2usize], vec![2, 2], vec![2, 4]]),
        prop::collection::vec(random_op(), 1..24),
        prop::collection::vec((any::<usize>(), (any::<u8>(), any::<u8>()), 0..3u32), 0..6),
    )
        .prop_map(|(mesh, ops, annotations)| Spec {
            mesh,
            ops,
            annotations,
        })
}

/// One random component being added to a builder: its tensors so far.
struct Component<'s> {
    spec: &'s Spec,
    prefix: &'static str,
    ts: Vec<(TensorId, [usize; 2])>,
}

impl<'s> Component<'s> {
    fn new(b: &mut GraphBuilder, spec: &'s Spec, prefix: &'static str) -> Component<'s> {
        let x = b.tensor(&format!("{prefix}x"), &[8, 4]).unwrap();
        Component {
            spec,
            prefix,
            ts: vec![(x, [8, 4])],
        }
    }

    /// Adds op `i` of the spec.
    fn add(&mut self, b: &mut GraphBuilder, i: usize) {
        let ts = &mut self.ts;
        let pick = |k: usize| ts[k % ts.len()];
        let name = format!("{}t{i}", self.prefix);
        let none = Attrs::new;
        let made = match self.spec.ops[i] {
            RandomOp::Unary(a, rule) => {
                let (t, s) = pick(a);
                (b.apply("", rule, none(), &[t], (&name, &s)).unwrap(), s)
            }
            RandomOp::Add(a, c) => {
                let (t, s) = pick(a);
                // The second operand: a tensor of the same shape, else `t`.
                let u = (0..ts.len())
                    .map(|k| ts[(c + k) % ts.len()])
                    .find(|(_, s2)| *s2 == s)
                    .map_or(t, |(u, _)| u);
                (b.apply("", "add", none(), &[t, u], (&name, &s)).unwrap(), s)
            }
            RandomOp::Matmul(a, n) => {
                let (t, [m, k]) = pick(a);
                let w = b.tensor(&format!("{}w{i}", self.prefix), &[k, n]).unwrap();
                ts.push((w, [k, n]));
                (
                    b.apply("", "matmul", none(), &[t, w], (&name, &[m, n]))
                        .unwrap(),
                    [m, n],
                )
            }
            RandomOp::Transpose(a) => {
                let (t, [m, n]) = pick(a);
                let perm = Attrs::new().with("perm", &[1i64, 0][..]);
                (
                    b.apply("", "transpose", perm, &[t], (&name, &[n, m]))
                        .unwrap(),
                    [n, m],
                )
            }
            RandomOp::Sum(a) => {
                // Sum over dim 1, keeping it: [m, n] -> [m, 1].
                let (t, [m, _]) = pick(a);
                let attrs = Attrs::new()
                    .with("axis", &[1i64][..])
                    .with("keep_dim", true);
                (
                    b.apply("", "sum", attrs, &[t], (&name, &[m, 1])).unwrap(),
                    [m, 1],
                )
            }
        };
        ts.push(made);
    }

    fn annotate(&self, b: &mut GraphBuilder, mesh_rank: u8) {
        for &(k, choice, priority) in &self.spec.annotations {
            let (t, _) = self.ts[k % self.ts.len()];
            b.annotate_with_priority(t, mapping(choice, mesh_rank), priority)
                .unwrap();
        }
    }
}

fn build(spec: &Spec) -> Graph {
    let mut b = GraphBuilder::new(Mesh::new(&spec.mesh).unwrap());
    let mut c = Component::new(&mut b, spec, "");
    for i in 0..spec.ops.len() {
        c.add(&mut b, i);
    }
    c.annotate(&mut b, spec.mesh.len() as u8);
    b.build(&spmd_ops::builtins()).unwrap()
}

/// Components `a` and `b` (on `a`'s mesh) in one graph, their ops
/// interleaved as `order` says (true: the next op of `a`).
fn interleaved(a: &Spec, b_spec: &Spec, order: &[bool]) -> Graph {
    let mut b = GraphBuilder::new(Mesh::new(&a.mesh).unwrap());
    let mut ca = Component::new(&mut b, a, "a.");
    let mut cb = Component::new(&mut b, b_spec, "b.");
    let (mut i, mut j) = (0, 0);
    for &take_a in order.iter().chain(std::iter::repeat(&true)) {
        match (take_a && i < a.ops.len(), j < b_spec.ops.len()) {
            (true, _) => {
                ca.add(&mut b, i);
                i += 1;
            }
            (false, true) => {
                cb.add(&mut b, j);
                j += 1;
            }
            (false, false) if i < a.ops.len() => {
                ca.add(&mut b, i);
                i += 1;
            }
            (false, false) => break,
        }
    }
    let rank = a.mesh.len() as u8;
    ca.annotate(&mut b, rank);
    cb.annotate(&mut b, rank);
    b.build(&spmd_ops::builtins()).unwrap()
}

fn valid(graph: &Graph, t: TensorId, a: &DistAttr) -> Result<(), String> {
    let shape = graph.shape(t);
    if a.dims_mapping.rank() != shape.len() {
        return Err(format!(
            "rank {} for shape {shape:?}",
            a.dims_mapping.rank()
        ));
    }
    let mut used = spmd_core::MeshSet::EMPTY;
    for m in a
        .dims_mapping
        .as_slice()
        .iter()
        .flat_map(|s| s.iter())
        .chain(a.partial.dims().iter())
    {
        if m as usize >= graph.mesh().rank() || used.contains(m) {
            return Err(format!("mesh dim {m} out of range or used twice in {a}"));
        }
        used = used.with(m);
    }
    for (d, s) in a.dims_mapping.as_slice().iter().enumerate() {
        let n: usize = s.iter().map(|m| graph.mesh().dim(m)).product();
        if shape[d] > 1 && !shape[d].is_multiple_of(n) {
            return Err(format!("dim {d} of {shape:?} not divisible by {n} in {a}"));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn propagation_is_a_deterministic_terminating_fixed_point(spec in spec()) {
        let graph = build(&spec);
        let p = propagate(&graph).unwrap();
        // Termination bound of the crate docs: each sweep with a change
        // makes a tensor known; each restart and each priority round costs
        // at most one extra sweep per stage.
        let bound = 2 * (graph.tensors().len() as u32 + 3 + 1) * 2;
        prop_assert!(p.stats.sweeps <= bound, "{} sweeps > {bound}", p.stats.sweeps);
        // Deterministic.
        prop_assert_eq!(&propagate(&graph).unwrap(), &p);
        for t in graph.tensor_ids() {
            if let Some(a) = &graph.tensor(t).annotation {
                prop_assert_eq!(p.attr(t), a, "annotation of {} overridden", graph.tensor(t).name);
            }
            if let Err(e) = valid(&graph, t, p.attr(t)) {
                prop_assert!(false, "tensor {}: {e}", graph.tensor(t).name);
            }
        }
        // The plan reshards exactly where attrs disagree.
        let plan = plan(&graph, &p, spmd_graph::DType::F32).unwrap();
        for r in &plan.reshards {
            prop_assert!(r.from != r.to);
        }
    }

    /// The graph's JSON form propagates to the same attrs: the result
    /// depends on the graph, not on how it was constructed.
    #[test]
    fn a_graph_read_back_from_json_propagates_the_same(spec in spec()) {
        let graph = build(&spec);
        let file = spmd_graph::json::to_file(&graph, &[], None);
        let text = serde_json::to_string(&file).unwrap();
        let back = spmd_graph::json::from_str(&text, &spmd_ops::builtins()).unwrap();
        prop_assert_eq!(propagate(&back.graph).unwrap(), propagate(&graph).unwrap());
    }

    /// Two independent components, their ops interleaved in any order:
    /// each propagates exactly as it does alone (the order of the crate
    /// docs depends only on each component's own topological order).
    #[test]
    fn independent_components_do_not_depend_on_interleaving(
        a in spec(),
        b in spec(),
        order in prop::collection::vec(any::<bool>(), 0..48),
    ) {
        let alone = build(&a);
        let p_alone = propagate(&alone).unwrap();
        let mixed = interleaved(&a, &b, &order);
        let p_mixed = propagate(&mixed).unwrap();
        for t in alone.tensor_ids() {
            let name = &alone.tensor(t).name;
            let u = mixed.find(&format!("a.{name}")).unwrap();
            prop_assert_eq!(p_mixed.attr(u), p_alone.attr(t), "tensor {}", name);
        }
    }

    /// Without annotations nothing is known: every tensor stays unreached
    /// and replicated, and nothing needs a reshard.
    #[test]
    fn nothing_annotated_means_nothing_to_do(spec in spec()) {
        let graph = build(&Spec { annotations: Vec::new(), ..spec });
        let p = propagate(&graph).unwrap();
        for t in graph.tensor_ids() {
            prop_assert_eq!(p.origin(t), spmd_graph::Origin::Unreached);
        }
        prop_assert!(plan(&graph, &p, spmd_graph::DType::F32).unwrap().reshards.is_empty());
    }
}
