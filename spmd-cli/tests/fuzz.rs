//! Structured fuzzing of every front door that takes text or values from a
//! user, on stable Rust (proptest, run at scale; cargo-fuzz needs nightly):
//!
//! - the notation and template parsers, on random and on mutated notations,
//!   and every template that parses bound at random ranks and attributes;
//! - the CLI's mesh, tensor, mapping and attribute parsers;
//! - the conformance-case loaders (the CLI's `--json` calls and the test
//!   suite's `parse_cases`), on mutated real cases, each loaded call run;
//! - the graph JSON loader, on a mutated real graph, each loaded graph
//!   propagated forward and backward, and planned by `autoshard` on a random
//!   mesh and budget;
//! - the plan simulator (`spmd check`), on a mutated exported Llama graph,
//!   forward and backward;
//! - every registered rule, built with random attributes and called in each
//!   direction with random shapes and mappings.
//!
//! Nothing may panic: a panic fails the test (proptest reports the input,
//! shrunk). Typed errors are fine. Each target tries `FUZZ_CASES` inputs
//! (default 256, the short run `.ci/run` makes) from a fixed seed, so a
//! run is repeatable; `FUZZ_SEED=n` draws other inputs. The long run:
//!
//! ```text
//! FUZZ_CASES=100000 cargo test --release -p spmd-cli --test fuzz -- --nocapture
//! ```
//!
//! prints the inputs tried per target.

use spmd_core::SpmdRuleExt;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use spmd_core::{Attrs, Call, DimsMapping, DistAttr, Mesh, Registry, Sharding, Spec};

fn cases() -> u32 {
    std::env::var("FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

/// Runs `test` on `cases()` inputs of `strategy`; a panic is a failure.
/// `test` says whether the input went all the way (loaded, built and
/// answered), so the report shows how deep the inputs reach.
fn fuzz<S: Strategy>(target: &str, strategy: S, test: impl Fn(S::Value) -> bool)
where
    S::Value: std::fmt::Debug,
{
    fuzz_n(target, cases(), strategy, test)
}

/// [`fuzz`] on `n` inputs (for targets whose every input runs a search).
fn fuzz_n<S: Strategy>(target: &str, n: u32, strategy: S, test: impl Fn(S::Value) -> bool)
where
    S::Value: std::fmt::Debug,
{
    let config = Config {
        cases: n,
        failure_persistence: None,
        ..Config::default()
    };
    // A fixed seed by default, so that a run (CI's) is repeatable;
    // `FUZZ_SEED=n` explores elsewhere.
    let seed: u64 = std::env::var("FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x5eed);
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &bytes);
    let mut runner = TestRunner::new_with_rng(config, rng);
    let deep = AtomicUsize::new(0);
    let result = runner.run(&strategy, |v| {
        if test(v) {
            deep.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{target}: {e}");
    }
    println!(
        "{target}: {n} inputs, {} answered all the way, 0 panics",
        deep.into_inner()
    );
}

fn registry() -> &'static Registry {
    static R: OnceLock<Registry> = OnceLock::new();
    R.get_or_init(spmd_ops::builtins)
}

/// A string from the characters notations and templates are made of (and a
/// few that are not).
fn notation_text() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::sample::select(
            "abcdkmnxyzAB1.,()->+@{}:[]*- éZ9\u{0}"
                .chars()
                .collect::<Vec<_>>(),
        ),
        0..40,
    )
    .prop_map(|v| v.into_iter().collect())
}

/// One edit of a text: a character replaced, inserted or removed.
#[derive(Clone, Debug)]
enum Edit {
    Replace(usize, char),
    Insert(usize, char),
    Remove(usize),
}

fn edits(alphabet: &'static str) -> impl Strategy<Value = Vec<Edit>> {
    let c = prop::sample::select(alphabet.chars().collect::<Vec<_>>());
    prop::collection::vec(
        prop_oneof![
            (any::<usize>(), c.clone()).prop_map(|(i, c)| Edit::Replace(i, c)),
            (any::<usize>(), c).prop_map(|(i, c)| Edit::Insert(i, c)),
            any::<usize>().prop_map(Edit::Remove),
        ],
        1..6,
    )
}

fn apply(text: &str, edits: &[Edit]) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    for e in edits {
        let n = chars.len();
        match *e {
            Edit::Replace(i, c) if n > 0 => chars[i % n] = c,
            Edit::Insert(i, c) => chars.insert(i % (n + 1), c),
            Edit::Remove(i) if n > 0 => {
                chars.remove(i % n);
            }
            _ => {}
        }
    }
    chars.into_iter().collect()
}

const NOTATIONS: &[&str] = &[
    "@{axis:1}^->@{axis:1}",
    "@{axis:1}->@{axis:1}^pieces()",
    "...mk,...kn->...mn",
    "bsk,kn,+n->bsn",
    "abc->(ab)c",
    "bs(hg)d,bthd,bthe->bs(hg)e",
    "ii->i",
    "k,k->",
    "@{axis:a}->@{axis:a}",
    "@->@{axis():-}",
    "@{begin_norm_axis..:1},*,*->@{begin_norm_axis..:1},@{begin_norm_axis..:-}",
    "@->@[perm]",
    "@{..axis:1}->@{..:-}",
];

#[test]
fn notation_and_template_parsers() {
    fuzz("notation text", notation_text(), |text| {
        let parsed = spmd_notation::parse(&text).is_ok();
        parsed | spmd_notation::parse_template(&text).is_ok()
    });
    let mutated = (
        prop::sample::select(NOTATIONS),
        edits("abkmn1.,()->+@{}:[]*-xyz"),
    );
    fuzz("mutated notation", mutated, |(base, e)| {
        let text = apply(base, &e);
        let parsed = match spmd_notation::parse(&text) {
            // What parses must print.
            Ok(n) => !n.plan().to_string().is_empty(),
            Err(_) => false,
        };
        parsed | spmd_notation::parse_template(&text).is_ok()
    });
}

#[test]
fn templates_bind_at_any_rank_and_attribute() {
    let strategy = (
        prop::sample::select(NOTATIONS),
        edits("abkmn1.,@{}:[]*-"),
        // Mostly small ranks and in-range values, sometimes anything.
        prop::collection::vec(prop_oneof![4 => 0usize..7, 1 => 0usize..200], 0..6),
        prop::collection::vec(prop_oneof![4 => -6i64..6, 1 => any::<i64>()], 0..6),
        prop_oneof![4 => -6i64..6, 1 => any::<i64>()],
        0usize..6,
    );
    fuzz(
        "template binding",
        strategy,
        |(base, e, ranks, list, int, given)| {
            let text = apply(base, &e);
            let Ok(t) = spmd_notation::parse_template(&text) else {
                return false;
            };
            let names: Vec<&str> = t.selectors().iter().map(String::as_str).collect();
            let template = t.template(&names);
            let sels: Vec<spmd_notation::Pos<'_>> = names
                .iter()
                .enumerate()
                .map(|(k, _)| match k % 4 {
                    0 => spmd_notation::Pos::List(&list),
                    1 => spmd_notation::Pos::Int(int),
                    2 => spmd_notation::Pos::Mask(int as u64),
                    _ => spmd_notation::Pos::All,
                })
                .collect();
            let mut buf = spmd_notation::PlanBuf::new("");
            // The ranks drawn are the call's tensors, inputs first; the
            // split between the sides is drawn too (`given`).
            let n_in = given.min(ranks.len());
            let rank = |side: spmd_notation::Side, i: usize| match side {
                spmd_notation::Side::Input => ranks.get(i).copied(),
                spmd_notation::Side::Output => ranks.get(n_in + i).copied(),
            };
            spmd_notation::bind_into(&mut buf, &template, &sels, [n_in, ranks.len() - n_in], rank)
                .is_ok()
                && !buf.plan().to_string().is_empty()
        },
    );
}

#[test]
fn cli_parsers() {
    let text = prop::collection::vec(
        prop::sample::select(
            "0123456789x,-:[]() partial{}sumaxbfloat16=truefalse\"'é"
                .chars()
                .collect::<Vec<_>>(),
        ),
        0..30,
    )
    .prop_map(|v| v.into_iter().collect::<String>());
    fuzz("cli parsers", text, |t| {
        let mut ok = spmd_cli::parse::mesh(&t).is_ok();
        ok |= spmd_cli::parse::tensor(&t).is_ok();
        ok |= spmd_cli::parse::mapping(&t).is_ok();
        ok |= spmd_cli::parse::attr(&t).is_ok();
        ok |= spmd_cli::parse::slot(&t).is_ok();
        ok | spmd_cli::parse::attrs(std::slice::from_ref(&t)).is_ok()
    });
}

/// Real calls, as JSON text: the first few vectors of the Paddle suite.
fn case_texts() -> &'static [String] {
    static T: OnceLock<Vec<String>> = OnceLock::new();
    T.get_or_init(|| {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/conformance/paddle-suite.json"
        );
        let text = std::fs::read_to_string(path).expect("the conformance vectors");
        let cases: Vec<serde_json::Value> = serde_json::from_str(&text).expect("a JSON array");
        cases
            .iter()
            .step_by(7)
            .map(|c| serde_json::to_string(c).expect("JSON"))
            .collect()
    })
}

#[test]
fn conformance_case_loaders_and_runs() {
    let n = case_texts().len();
    let strategy = (0..n, edits("0123456789-,[]{}\":truefalsnul abxyz"));
    fuzz("conformance case", strategy, |(k, e)| {
        let text = apply(&case_texts()[k], &e);
        let _ = spmd_conformance::parse_cases(&format!("[{text}]"));
        let Ok(requests) = spmd_cli::call::Request::from_json_text(&text, "fuzz", registry())
        else {
            return false;
        };
        let mut answered = false;
        for req in requests {
            if let Ok(built) = req.rule(registry()) {
                answered |= req.run(&built).is_ok();
            }
        }
        answered
    });
}

fn graph_text() -> &'static str {
    static T: OnceLock<String> = OnceLock::new();
    T.get_or_init(|| {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../spmd-graph/graphs/gpt_layer.json"
        );
        std::fs::read_to_string(path).expect("the GPT layer graph")
    })
}

#[test]
fn graph_loader_and_propagation() {
    fuzz(
        "graph json",
        edits("0123456789-,[]{}\":truefalsnul abxyz_"),
        |e| {
            let text = apply(graph_text(), &e);
            let Ok(loaded) = spmd_graph::json::from_str(&text, registry()) else {
                return false;
            };
            let Ok(p) = spmd_graph::propagate(&loaded.graph) else {
                return false;
            };
            let _ = spmd_graph::plan(&loaded.graph, &p, loaded.dtype);
            let backward =
                spmd_graph::backward_graph(&loaded.graph, &p, registry(), &loaded.outputs);
            match backward {
                Ok(b) => match spmd_graph::propagate(&b.graph) {
                    Ok(bp) => spmd_graph::plan(&b.graph, &bp, loaded.dtype).is_ok(),
                    Err(_) => false,
                },
                Err(_) => false,
            }
        },
    );
}

/// The planner on mutated graphs, random meshes and budgets: a plan or a
/// typed error, never a panic, and never a plan over budget. Each input runs
/// a whole search, so this target takes a sixteenth of the inputs.
#[test]
fn autoshard_on_mutated_graphs() {
    let strategy = (
        edits("0123456789-,[]{}\":truefalsnul abxyz_"),
        prop::collection::vec(1usize..5, 2..3),
        prop::option::of(1u64 << 10..1u64 << 26),
    );
    fuzz_n(
        "autoshard",
        (cases() / 16).max(4),
        strategy,
        |(e, mesh, memory)| {
            let text = apply(graph_text(), &e);
            let Ok(file) = serde_json::from_str::<spmd_graph::json::GraphFile>(&text) else {
                return false;
            };
            let mut options = spmd_autoshard::Options::new(mesh);
            options.memory = memory;
            // The solver too meets the mutated graphs, briefly.
            options.solver_nodes = 10;
            options.solver_time = 0.2;
            match spmd_autoshard::autoshard(&file, registry(), &options, &mut |_| {}) {
                Ok(o) => {
                    assert!(memory.is_none_or(|m| o.figures.memory.total <= m));
                    true
                }
                Err(_) => false,
            }
        },
    );
}

fn llama_text() -> &'static str {
    static T: OnceLock<String> = OnceLock::new();
    T.get_or_init(|| {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../spmd-graph/graphs/hf/llama.json"
        );
        std::fs::read_to_string(path).expect("the exported Llama graph")
    })
}

/// The plan simulator on Llama under random meshes and random layouts of
/// any of its tensors, intermediate ones and constants included, some of
/// them invalid (a mesh dim the mesh lacks, one mesh dim on two dims,
/// partial on a split mesh dim): never a panic, and whatever plan loads and
/// propagates must hold forward and backward. Each input runs a whole
/// simulation, so this target takes an eighth of the inputs.
#[test]
fn plan_simulation_on_random_layouts() {
    use spmd_check::plan::{BackwardPlan, Finding, Inputs, check_plan};
    use spmd_core::json::{Mapping, MappingEntry};
    fuzz_n(
        "plan check",
        (cases() / 8).max(4),
        (
            prop::collection::vec(1usize..4, 1..3),
            // (tensor pick, per dim (mesh dim or -1, a second one), partial mesh dim)
            prop::collection::vec(
                (
                    any::<usize>(),
                    prop::collection::vec((-2i64..3, -2i64..3), 6),
                    prop::option::weighted(0.15, 0u8..3),
                    prop::bool::weighted(0.1),
                ),
                1..6,
            ),
        ),
        |(mesh, layouts)| {
            let mut file: spmd_graph::json::GraphFile =
                serde_json::from_str(llama_text()).expect("the exported Llama graph");
            file.mesh = mesh.clone();
            let rank = mesh.len() as i64;
            for (pick, dims, partial, invalid) in &layouts {
                let n = file.tensors.len();
                let t = &mut file.tensors[pick % n];
                // Valid unless `invalid`: mesh dims the mesh has, each once.
                let mut used: Vec<i64> = partial.iter().map(|&m| m as i64).collect();
                let mut take = |m: i64| {
                    let ok = *invalid || (m < rank && !used.contains(&m));
                    used.push(m);
                    ok
                };
                let entries = dims[..t.shape.len().min(6)]
                    .iter()
                    .map(|&(a, b)| match (a, b) {
                        (a, _) if a < 0 || !take(a) => MappingEntry::Dim(-1),
                        (a, b) if b >= 0 && b != a && take(b) => MappingEntry::Co(vec![a, b]),
                        (a, _) => MappingEntry::Dim(a),
                    })
                    .collect();
                t.dims_mapping = Some(Mapping(entries));
                t.partial_dims = partial
                    .iter()
                    .copied()
                    .filter(|&m| *invalid || (m as i64) < rank)
                    .collect();
            }
            let Ok(loaded) = spmd_graph::json::from_file(&file, registry()) else {
                return false;
            };
            let graph = &loaded.graph;
            let Ok(p) = spmd_graph::propagate(graph) else {
                return false;
            };
            let Ok(forward) = spmd_graph::plan(graph, &p, loaded.dtype) else {
                return false;
            };
            let Ok(b) = spmd_graph::backward_graph(graph, &p, registry(), &loaded.outputs) else {
                return false;
            };
            let Ok(bp) = spmd_graph::propagate(&b.graph) else {
                return false;
            };
            let Ok(bplan) = spmd_graph::plan(&b.graph, &bp, loaded.dtype) else {
                return false;
            };
            let backward = BackwardPlan {
                backward: &b,
                prop: &bp,
                plan: &bplan,
            };
            match check_plan(
                graph,
                &p,
                &forward,
                Some(backward),
                &Inputs::of_file(&file),
                registry(),
            ) {
                Ok(_) => true,
                // An op the simulator cannot run is no verdict on the plan.
                Err(d) if matches!(d.finding, Finding::NoKernel | Finding::Rule(_)) => false,
                Err(d) => panic!("mesh {mesh:?}, layouts {layouts:?}: {d}"),
            }
        },
    );
}

/// A mapping of `rank` dims over a mesh of `mesh_rank` dims: mostly in
/// range, sometimes not.
fn attr_for(rank: usize, seeds: &[i64]) -> DistAttr {
    let dims: Vec<Sharding> = (0..rank)
        .map(|d| match seeds.get(d).copied().unwrap_or(-1) {
            v if v < 0 => Sharding::REPLICATED,
            v => Sharding::co(&[(v % 9) as u8]).unwrap_or(Sharding::REPLICATED),
        })
        .collect();
    DistAttr::new(DimsMapping::from_shardings(&dims))
}

#[test]
fn every_rule_with_random_attributes_and_tensors() {
    let names: Vec<&'static str> = registry().iter().map(|i| i.name).collect();
    // Shapes of ranks 0..5 with small extents (a zero now and then); the
    // call takes the declared number of tensors most of the time.
    let shape = prop::collection::vec(prop_oneof![8 => 1usize..9, 1 => Just(0usize)], 0..5);
    let strategy = (
        prop::sample::select(names),
        prop::collection::vec(shape, 0..7),
        prop::collection::vec(-2i64..5, 0..12),
        prop::collection::vec(1usize..5, 1..4),
        any::<u64>(),
        0u8..3,
        any::<bool>(),
    );
    fuzz(
        "rule calls",
        strategy,
        |(name, mut shapes, seeds, mesh, pick, direction, declared)| {
            let Ok(info) = registry().get(name) else {
                return false;
            };
            // Each attribute the rule reads, as one of a few value kinds.
            let mut attrs = Attrs::new();
            for (k, a) in info.attrs.iter().enumerate() {
                let v = pick.rotate_left(k as u32 * 7);
                attrs = match v % 5 {
                    0 => attrs.with(a, (v % 7) as i64 - 3),
                    1 => attrs.with(a, vec![(v % 5) as i64 - 2, (v % 3) as i64]),
                    2 => attrs.with(a, v % 2 == 0),
                    3 => attrs.with(a, 0.5_f64),
                    _ => attrs,
                };
            }
            let Ok(rule) = registry().build(name, &attrs) else {
                return false;
            };
            // The declared tensors: inputs, then (backward, grad) outputs.
            let want = match direction {
                0 => info.inputs.len(),
                _ => info.inputs.len() + info.outputs.len(),
            };
            if declared && want > 0 {
                // Every tensor shaped alike: what most ops take.
                let first = shapes.first().cloned().unwrap_or_else(|| vec![4, 4]);
                shapes = vec![first; want];
            }
            let Ok(mesh) = Mesh::new(&mesh) else {
                return false;
            };
            let dist: Vec<DistAttr> = shapes
                .iter()
                .enumerate()
                .map(|(i, s)| attr_for(s.len(), &seeds[i.min(seeds.len())..]))
                .collect();
            let specs: Vec<Spec<'_>> = shapes
                .iter()
                .zip(&dist)
                .map(|(s, a)| Spec::new(s, a))
                .collect();
            let shape_refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
            let half = if declared && !info.inputs.is_empty() {
                info.inputs.len().min(specs.len())
            } else {
                specs.len() / 2
            };
            let call = match direction {
                0 => Call::forward(&mesh, &specs),
                1 => Call::backward(&mesh, &shape_refs[..half], &specs[half..]),
                _ => Call::grad(&mesh, &specs[..half], &specs[half..]),
            };
            rule.infer(&call, None).is_ok()
        },
    );
}
