//! The Hugging Face models exported by `tools/torch_export` (Llama, OPT,
//! GPT-NeoX, GPT-2; 2 layers, small sizes) and committed under
//! `graphs/hf/`:
//!
//! - the loader reads every one, and would name every ATen op kind the
//!   registry has no rule for, with its count and first op, all at once
//!   (the expected report is computed here from the file itself, so the
//!   test stays true as rules are added);
//! - under PyTorch's tensor-parallel plan (`graphs/hf/dtensor_counts.json`,
//!   recorded by `tools/torch_export/dtensor_counts.py` with DTensor's
//!   `CommDebugMode` on a fake 4-rank process group), spmd's forward and
//!   backward reshard plans have the collectives DTensor runs;
//! - with data parallelism added on a second mesh dim (`[2, 4]`, the batch
//!   split over mesh dim 0), the backward gains exactly one gradient
//!   all-reduce over mesh dim 0 per parameter, and nothing else.

use std::collections::BTreeMap;

use spmd_graph::json::GraphFile;
use spmd_graph::{DType, GraphError, MissingRule, backward_graph, plan, propagate};

const DTENSOR: &str = include_str!("../graphs/hf/dtensor_counts.json");

const MODELS: &[(&str, &str)] = &[
    ("llama", include_str!("../graphs/hf/llama.json")),
    ("opt", include_str!("../graphs/hf/opt.json")),
    ("gpt-neox", include_str!("../graphs/hf/gpt-neox.json")),
    ("gpt2", include_str!("../graphs/hf/gpt2.json")),
];

/// The op kinds of the file without a rule: (name, count, first op), in
/// the order they first appear.
fn without_rules(text: &str, registry: &spmd_core::Registry) -> Vec<MissingRule> {
    let file: serde_json::Value = serde_json::from_str(text).unwrap();
    let mut order: Vec<String> = Vec::new();
    let mut seen: BTreeMap<String, (usize, String)> = BTreeMap::new();
    for op in file["ops"].as_array().unwrap() {
        let rule = op["op"].as_str().unwrap().to_string();
        if registry.contains(&rule) {
            continue;
        }
        let name = op["name"].as_str().unwrap().to_string();
        let entry = seen.entry(rule.clone()).or_insert_with(|| {
            order.push(rule.clone());
            (0, name)
        });
        entry.0 += 1;
    }
    order
        .into_iter()
        .map(|rule| {
            let (ops, first_op) = seen[&rule].clone();
            MissingRule {
                suggestions: match registry.get(&rule) {
                    Err(spmd_core::SpmdError::UnknownRule { suggestions, .. }) => suggestions,
                    _ => Vec::new(),
                },
                rule,
                ops,
                first_op,
            }
        })
        .collect()
}

#[test]
fn exported_models_load_or_name_every_op_without_a_rule() {
    let registry = spmd_ops::builtins();
    for (model, text) in MODELS {
        let expected = without_rules(text, &registry);
        match spmd_graph::json::from_str(text, &registry) {
            Err(GraphError::MissingRules { missing }) => {
                assert_eq!(missing, expected, "{model}");
                let message = GraphError::MissingRules {
                    missing: missing.clone(),
                }
                .to_string();
                for m in &missing {
                    assert!(message.contains(&m.rule), "{model}: {message}");
                }
            }
            Err(e) => panic!("{model}: {e}"),
            Ok(loaded) => {
                assert!(expected.is_empty(), "{model}: loaded with {expected:?}");
                spmd_graph::propagate(&loaded.graph).unwrap_or_else(|e| panic!("{model}: {e}"));
            }
        }
    }
}

#[test]
fn exported_files_carry_params_dtypes_and_outputs() {
    for (model, text) in MODELS {
        let file: spmd_graph::json::GraphFile = serde_json::from_str(text).unwrap();
        let params = file.tensors.iter().filter(|t| t.param).count();
        // Embedding, two layers' projections and norms, the final norm.
        assert!(params > 10, "{model}: {params} params");
        assert!(
            file.tensors.iter().all(|t| t.dtype.is_some()),
            "{model}: a tensor without a dtype"
        );
        let ids = file.tensors.iter().find(|t| t.name == "input_ids");
        assert_eq!(
            ids.map(|t| (t.shape.clone(), t.dtype.clone())),
            Some((vec![2, 16], Some("int64".to_string()))),
            "{model}"
        );
        // One output: the logits, [batch, seq, vocab].
        assert_eq!(file.outputs.len(), 1, "{model}");
        let logits = file.tensors.iter().find(|t| t.name == file.outputs[0]);
        assert_eq!(
            logits.map(|t| t.shape.clone()),
            Some(vec![2, 16, 128]),
            "{model}"
        );
    }
}

/// The model's graph with DTensor's plan as annotations: each planned
/// weight laid out as `spmd_plan` says, the input ids replicated.
fn with_plan(text: &str, model: &str) -> GraphFile {
    with_plans(text, model, false)
}

/// [`with_plan`], or with `data_parallel` on a `[2, 4]` mesh: the tensor
/// parallelism on mesh dim 1, the input ids' batch split over mesh dim 0.
fn with_plans(text: &str, model: &str, data_parallel: bool) -> GraphFile {
    let counts: serde_json::Value = serde_json::from_str(DTENSOR).unwrap();
    let mut file: GraphFile = serde_json::from_str(text).unwrap();
    let spmd_plan = counts[model]["spmd_plan"].as_object().unwrap();
    let mut planned = 0;
    if data_parallel {
        file.mesh = vec![2, 4];
    }
    for t in &mut file.tensors {
        if let Some(m) = spmd_plan.get(&t.name) {
            let mut m: Vec<i64> = serde_json::from_value(m.clone()).unwrap();
            if data_parallel {
                // The tensor-parallel mesh dim is 1 now.
                m = m.iter().map(|&d| if d == 0 { 1 } else { d }).collect();
            }
            t.dims_mapping = Some(serde_json::from_value(m.into()).unwrap());
            planned += 1;
        } else if t.name == "input_ids" {
            let ids = if data_parallel { "[0, -1]" } else { "[-1, -1]" };
            t.dims_mapping = Some(serde_json::from_str(ids).unwrap());
        }
    }
    assert_eq!(
        planned,
        spmd_plan.len(),
        "{model}: a planned weight is not in the graph"
    );
    file
}

/// DTensor's counts in one direction: all-reduces, and collectives of any
/// kind.
fn dtensor(model: &str, direction: &str) -> (usize, usize) {
    let counts: serde_json::Value = serde_json::from_str(DTENSOR).unwrap();
    let kinds = counts[model][direction].as_object().unwrap();
    let count = |v: &serde_json::Value| v.as_u64().unwrap() as usize;
    (
        kinds.get("all_reduce").map_or(0, count),
        kinds.values().map(count).sum(),
    )
}

#[test]
fn tensor_parallel_plans_run_dtensors_collectives() {
    let registry = spmd_ops::builtins();
    for (model, text) in MODELS {
        let loaded = spmd_graph::json::from_file(&with_plan(text, model), &registry)
            .unwrap_or_else(|e| panic!("{model}: {e}"));
        let p = propagate(&loaded.graph).unwrap_or_else(|e| panic!("{model}: {e}"));
        let forward = plan(&loaded.graph, &p, DType::F32).unwrap();
        assert_eq!(
            (forward.count("all-reduce"), forward.collectives()),
            dtensor(model, "forward"),
            "{model} forward: {}",
            spmd_graph::report::plan_text(&loaded.graph, &forward)
        );
        let bw = backward_graph(&loaded.graph, &p, &registry, &loaded.outputs)
            .unwrap_or_else(|e| panic!("{model}: {e}"));
        let bp = propagate(&bw.graph).unwrap_or_else(|e| panic!("{model}: {e}"));
        let backward = plan(&bw.graph, &bp, DType::F32).unwrap();
        assert_eq!(
            (backward.count("all-reduce"), backward.collectives()),
            dtensor(model, "backward"),
            "{model} backward: {}",
            spmd_graph::report::plan_text(&bw.graph, &backward)
        );
    }
}

#[test]
fn data_parallelism_adds_one_gradient_all_reduce_per_parameter() {
    use spmd_graph::steps::Step;
    let registry = spmd_ops::builtins();
    for (model, text) in MODELS {
        let file = with_plans(text, model, true);
        let params = file.tensors.iter().filter(|t| t.param).count();
        let loaded = spmd_graph::json::from_file(&file, &registry).unwrap();
        let p = propagate(&loaded.graph).unwrap();
        let bw = backward_graph(&loaded.graph, &p, &registry, &loaded.outputs).unwrap();
        let bp = propagate(&bw.graph).unwrap();
        let backward = plan(&bw.graph, &bp, DType::F32).unwrap();
        let over = |dims: &[u8]| {
            backward
                .steps()
                .filter(|s| matches!(s, Step::AllReduce { mesh_dims, .. } if mesh_dims.as_slice() == dims))
                .count()
        };
        assert_eq!(
            (over(&[0]), over(&[1]), backward.collectives()),
            (
                params,
                dtensor(model, "backward").0,
                params + dtensor(model, "backward").1
            ),
            "{model}: {}",
            spmd_graph::report::plan_text(&bw.graph, &backward)
        );
    }
}

/// `graphs/hf/llama-2-7b.json.gz`: `LlamaConfig()`'s own sizes (Llama-2-7B:
/// 32 layers, hidden 4096, vocabulary 32000), exported on the meta device
/// (`export.py llama --full-size --layers 0 --batch 1 --seq 2048`).
fn llama_7b() -> String {
    use std::io::Read;
    let gz = include_bytes!("../graphs/hf/llama-2-7b.json.gz");
    let mut text = String::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_string(&mut text)
        .unwrap();
    text
}

/// The full-size Llama under the TP plan of `graphs/hf/llama_tp.json`:
/// Megatron's two forward all-reduces per layer and DTensor's five backward
/// ones (one per column-parallel projection's input grad), for 32 layers.
#[test]
fn full_size_llama_has_two_forward_and_five_backward_all_reduces_per_layer() {
    use spmd_graph::annotations::{AnnotationFile, apply};
    let registry = spmd_ops::builtins();
    let mut file: GraphFile = serde_json::from_str(&llama_7b()).unwrap();
    let tp: AnnotationFile =
        serde_json::from_str(include_str!("../graphs/hf/llama_tp.json")).unwrap();
    apply(&mut file, &tp).unwrap();
    let layers = file
        .tensors
        .iter()
        .filter(|t| t.name.ends_with("self_attn.q_proj.weight"))
        .count();
    assert_eq!(layers, 32);
    let loaded = spmd_graph::json::from_file(&file, &registry).unwrap();
    let p = propagate(&loaded.graph).unwrap();
    let forward = plan(&loaded.graph, &p, DType::F32).unwrap();
    assert_eq!(
        (forward.count("all-reduce"), forward.collectives()),
        (2 * layers, 2 * layers)
    );
    let bw = backward_graph(&loaded.graph, &p, &registry, &loaded.outputs).unwrap();
    let bp = propagate(&bw.graph).unwrap();
    let backward = plan(&bw.graph, &bp, DType::F32).unwrap();
    assert_eq!(
        (backward.count("all-reduce"), backward.collectives()),
        (5 * layers, 5 * layers)
    );
}
