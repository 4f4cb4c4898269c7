//! The plans the search invents, judged whole: every plan `spmd autoshard`
//! chooses on the committed 2-layer graphs under a budget that rules out
//! replication, and every baseline plan it prices, runs on the simulated
//! mesh (`spmd_check::plan`) forward and backward with every tensor and
//! every parameter gradient equal to the dense run.

// A divergence is returned once per check, by value, as `check_plan` does.
#![allow(clippy::result_large_err)]

use spmd_autoshard::{AutoshardError, Options, autoshard};
use spmd_check::plan::{BackwardPlan, Divergence, Inputs, Summary, check_plan};
use spmd_graph::annotations::{AnnotationFile, apply};
use spmd_graph::json::GraphFile;
use spmd_graph::{DType, backward_graph, plan, propagate};

const GRAPHS: [(&str, &str); 5] = [
    ("llama", include_str!("../spmd-graph/graphs/hf/llama.json")),
    ("opt", include_str!("../spmd-graph/graphs/hf/opt.json")),
    (
        "gpt-neox",
        include_str!("../spmd-graph/graphs/hf/gpt-neox.json"),
    ),
    ("gpt2", include_str!("../spmd-graph/graphs/hf/gpt2.json")),
    ("qwen3", include_str!("../spmd-graph/graphs/hf/qwen3.json")),
];

fn graph(text: &str) -> GraphFile {
    serde_json::from_str(text).expect("graph JSON")
}

/// `text` under `annotations` (which name their mesh), checked forward and
/// backward.
fn check(text: &str, annotations: &AnnotationFile) -> Result<Summary, Divergence> {
    let mut file = graph(text);
    apply(&mut file, annotations).expect("the plan applies");
    let registry = spmd_ops::builtins();
    let loaded = spmd_graph::json::from_file(&file, &registry).unwrap();
    let g = &loaded.graph;
    let prop = propagate(g).unwrap();
    let forward = plan(g, &prop, DType::F32).unwrap();
    let bw = backward_graph(g, &prop, &registry, &loaded.outputs).unwrap();
    let bprop = propagate(&bw.graph).unwrap();
    let bplan = plan(&bw.graph, &bprop, DType::F32).unwrap();
    let backward = BackwardPlan {
        backward: &bw,
        prop: &bprop,
        plan: &bplan,
    };
    check_plan(
        g,
        &prop,
        &forward,
        Some(backward),
        &Inputs::of_file(&file),
        &registry,
    )
}

#[test]
fn chosen_and_baseline_plans_hold_on_the_simulated_mesh() {
    let registry = spmd_ops::builtins();
    let (mut chosen, mut baselines, mut split, mut pinning, mut reading) = (0, 0, 0, 0, 0);
    let mut failed = Vec::new();
    for (name, text) in GRAPHS {
        for mesh in [vec![4], vec![2, 2]] {
            // Unconstrained, the 2-layer graphs replicate; half that
            // memory forces a split plan.
            let free = autoshard(
                &graph(text),
                &registry,
                &Options::new(mesh.clone()),
                &mut |_| {},
            )
            .unwrap();
            let mut options = Options::new(mesh.clone());
            options.memory = Some(free.figures.memory.total / 2);
            let outcome = match autoshard(&graph(text), &registry, &options, &mut |_| {}) {
                Ok(o) => o,
                Err(AutoshardError::NoPlanFits { .. }) => {
                    options.memory = Some(free.figures.memory.total * 3 / 4);
                    autoshard(&graph(text), &registry, &options, &mut |_| {}).unwrap()
                }
                Err(e) => panic!("{name} on {mesh:?}: {e}"),
            };
            let splits = |a: &spmd_graph::annotations::Annotation| {
                a.dims_mapping.as_ref().is_some_and(|m| {
                    m.0.iter()
                        .any(|e| *e != spmd_core::json::MappingEntry::Dim(-1))
                })
            };
            if outcome.plan.annotations.iter().any(splits) {
                split += 1;
            }
            // Plans from the solver's starts pin produced tensors too.
            if outcome.solver_pins > 0 {
                pinning += 1;
            }
            // And some give weights read layouts (gathered where used).
            if outcome
                .plan
                .annotations
                .iter()
                .any(|a| a.read.is_some() || !a.read_by.is_empty())
            {
                reading += 1;
            }
            let mut plans = vec![("chosen", outcome.plan.clone())];
            for b in &outcome.baselines {
                if let Some(p) = &b.plan {
                    plans.push((b.name, p.clone()));
                }
            }
            for (what, p) in plans {
                match check(text, &p) {
                    Ok(s) => {
                        assert!(s.gradients > 0, "{name} {mesh:?} {what}: {s}");
                        if what == "chosen" {
                            chosen += 1;
                        } else {
                            baselines += 1;
                        }
                    }
                    Err(d) => failed.push(format!("{name} on {mesh:?}, {what}: {d}")),
                }
            }
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
    eprintln!(
        "{chosen} chosen plans ({split} split, {pinning} with the solver's pins, {reading} with read layouts) and {baselines} baseline plans hold"
    );
    assert!(pinning > 0, "no chosen plan carries the solver's pins");
    assert!(reading > 0, "no chosen plan gives a weight a read layout");
    assert_eq!(chosen, 2 * GRAPHS.len());
    assert!(
        split >= GRAPHS.len(),
        "only {split} chosen plans split anything"
    );
    assert!(
        baselines >= 3 * GRAPHS.len(),
        "only {baselines} baseline plans ran"
    );
}
