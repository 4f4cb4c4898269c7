//! The project's main job for now: on a 2x4 mesh, print the shardings inferred
//! for a matmul whose contraction is sharded and for an embedding with a
//! row-sharded table, forward and backward, with what each result means; then
//! the whole-graph propagation of a GPT layer annotated with Megatron-LM's
//! tensor parallelism, with its all-reduce counts checked.
//!
//! Run with `cargo run --release -p shard-report`.

use spmd_core::SpmdRuleExt;
use std::fmt::Write as _;

use spmd_core::{
    AxisName, DistAttr, Einsum, Mesh, MeshDim, MeshSet, Partial, Policy, ReduceType, RuleResult,
    Spec, SpmdError, Trace,
    notation::{Dim, Plan},
};

/// One op to report: a rule and the inputs' shapes and mappings.
struct Case {
    op: &'static str,
    equation: &'static str,
    policy: Policy,
    inputs: &'static [(&'static [usize], &'static [i64])],
}

const CASES: &[Case] = &[
    Case {
        op: "matmul",
        equation: "mk,kn->mn",
        policy: Policy::CLASSIC,
        // x splits its contraction dim k over mesh dim 1; so does y.
        inputs: &[(&[64, 32], &[-1, 1]), (&[32, 48], &[1, -1])],
    },
    Case {
        op: "embedding",
        equation: "ab,jk->abk",
        // Paddle's embedding rule does not resolve mesh-dim conflicts.
        policy: Policy::STRICT,
        // Ids split over mesh dim 1 on the batch; the table's rows over mesh dim 0.
        inputs: &[(&[4, 1024], &[1, -1]), (&[512, 768], &[0, -1])],
    },
];

/// Records why each output is partial and which axes lost a mesh dim.
#[derive(Default)]
struct Why {
    /// (output, reason) for each contracted sharded axis an output lacks.
    partial: Vec<(usize, String)>,
    conflicts: Vec<String>,
    /// Backward: (output, reason) for each given partial mesh dim explained
    /// by a sharded contraction (Partial Stage-II), and the axes that did it.
    explained: Vec<(usize, String)>,
    explaining: Vec<AxisName>,
}

impl Trace for Why {
    fn conflict(&mut self, mesh_dim: MeshDim, kept: AxisName, lost: AxisName) {
        self.conflicts.push(format!(
            "mesh dim {mesh_dim} was claimed by axes {kept} and {lost}: {kept} keeps it"
        ));
    }
    fn explained(&mut self, output: usize, mesh_dim: MeshDim, axis: Option<AxisName>) {
        let reason = match axis {
            Some(a) => {
                self.explaining.push(a);
                format!(
                    "its given partial over mesh dim {mesh_dim} is explained by the contracted \
                     axis {a}, now sharded over mesh dim {mesh_dim} in every input that has it"
                )
            }
            None => {
                format!("its given partial over mesh dim {mesh_dim} is explained by partial inputs")
            }
        };
        self.explained.push((output, reason));
    }
    fn partial(&mut self, output: usize, axis: AxisName, mesh_dims: MeshSet, _: ReduceType) {
        self.partial.push((
            output,
            format!(
                "axis {axis} is sharded over {} but is in no output",
                mesh_dims_text(mesh_dims)
            ),
        ));
    }
}

fn mesh_dims_text(dims: MeshSet) -> String {
    let list: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
    match list.len() {
        1 => format!("mesh dim {}", list[0]),
        _ => format!("mesh dims {}", list.join(", ")),
    }
}

/// The extents of each output, from the inputs' shapes (plain labels only,
/// which is all these cases use).
fn output_shapes(plan: &Plan<'_>, input_shapes: &[&[usize]]) -> Vec<Vec<usize>> {
    let mut extent = vec![None; plan.n_axes()];
    for (i, shape) in input_shapes.iter().enumerate() {
        for (d, dim) in plan.dims_of(plan.input(i)).iter().enumerate() {
            if let Dim::Axis(a) = *dim {
                extent[a as usize] = Some(shape[d]);
            }
        }
    }
    (0..plan.n_outputs())
        .map(|o| {
            plan.dims_of(plan.output(o))
                .iter()
                .map(|dim| match *dim {
                    Dim::Axis(a) => extent[a as usize].expect("output axis comes from an input"),
                    _ => unreachable!("the report's cases use plain labels"),
                })
                .collect()
        })
        .collect()
}

/// What a partial output needs before it can be used as a full value;
/// `because` says where the partial status comes from.
fn partial_note(name: &str, p: &Partial, because: &[&str]) -> Option<String> {
    if !p.is_partial() {
        return None;
    }
    let mut by_reduce: Vec<(ReduceType, MeshSet)> = Vec::new();
    for (d, r) in p.iter() {
        match by_reduce.iter_mut().find(|(x, _)| *x == r) {
            Some((_, set)) => *set = set.with(d),
            None => by_reduce.push((r, MeshSet::single(d))),
        }
    }
    let parts: Vec<String> = by_reduce
        .iter()
        .map(|(r, dims)| format!("{} ({r})", mesh_dims_text(*dims)))
        .collect();
    let because = if because.is_empty() {
        String::new()
    } else {
        format!(" because {}", because.join(" and "))
    };
    Some(format!(
        "{name} is partial over {}{because}: an all-reduce is needed",
        parts.join(" and ")
    ))
}

fn reshard_note(name: &str, given: &DistAttr, required: &DistAttr) -> Option<String> {
    (given != required).then(|| format!("{name} must be resharded from {given} to {required}"))
}

fn row(out: &mut String, tensor: &str, shape: &[usize], given: &str, result: &DistAttr) {
    let shape = format!("{shape:?}");
    let _ = writeln!(out, "    {tensor:<9} {shape:<15} {given:<28} {result}");
}

fn header(out: &mut String, title: &str, result_col: &str) {
    let _ = writeln!(out, "  {title}");
    let _ = writeln!(
        out,
        "    {:<9} {:<15} {:<28} {result_col}",
        "tensor", "shape", "given"
    );
}

fn report(mesh: &Mesh, case: &Case) -> Result<String, SpmdError> {
    let op = Einsum::new(case.equation)?.with_policy(case.policy);
    let plan = op.notation().plan();
    let given: Vec<DistAttr> = case
        .inputs
        .iter()
        .map(|(_, m)| DistAttr::from_paddle(m).expect("valid Paddle mapping"))
        .collect();
    let in_shapes: Vec<&[usize]> = case.inputs.iter().map(|(s, _)| *s).collect();
    let out_shapes = output_shapes(&plan, &in_shapes);
    let specs: Vec<Spec<'_>> = in_shapes
        .iter()
        .zip(&given)
        .map(|(s, a)| Spec::new(s, a))
        .collect();

    let mut out = String::new();
    let _ = writeln!(
        out,
        "== {}  einsum \"{}\"  mesh {}  ({:?} conflicts)",
        case.op, case.equation, mesh, case.policy.conflicts
    );

    // Forward: the inputs' mappings give the requirements and the outputs.
    let mut why = Why::default();
    let fwd: RuleResult = op.forward_traced(mesh, &specs, &mut why)?;
    header(&mut out, "forward", "required / inferred");
    let mut notes = Vec::new();
    for (i, required) in fwd.inputs.iter().enumerate() {
        let name = format!("input {i}");
        row(
            &mut out,
            &name,
            in_shapes[i],
            &given[i].to_string(),
            required,
        );
        notes.extend(reshard_note(&name, &given[i], required));
    }
    if notes.is_empty() {
        notes.push("the inputs already have the required mappings: no reshard".into());
    }
    for (o, attr) in fwd.outputs.iter().enumerate() {
        let name = format!("output {o}");
        row(&mut out, &name, &out_shapes[o], "-", attr);
        let because: Vec<&str> = why
            .partial
            .iter()
            .filter(|(x, _)| *x == o)
            .map(|(_, r)| r.as_str())
            .collect();
        notes.extend(partial_note(&name, &attr.partial, &because));
    }
    notes.extend(why.conflicts);
    for n in &notes {
        let _ = writeln!(out, "    -> {n}");
    }

    // Backward: the forward's outputs (partial status included) and the inputs'
    // shapes give the inputs' requirements; the inputs' mappings are not used.
    // A given partial output is explained by a sharded contraction
    // (docs/semantics.md, "Backward").
    let out_specs: Vec<Spec<'_>> = out_shapes
        .iter()
        .zip(&fwd.outputs)
        .map(|(s, a)| Spec::new(s, a))
        .collect();
    let mut why = Why::default();
    let bwd = op.backward_traced(mesh, &in_shapes, &out_specs, &mut why)?;
    header(
        &mut out,
        "backward (from the forward's outputs; inputs' mappings are not used)",
        "required / inferred",
    );
    let mut notes = Vec::new();
    for (i, required) in bwd.inputs.iter().enumerate() {
        row(&mut out, &format!("input {i}"), in_shapes[i], "-", required);
    }
    let missing = plan.input_axes.minus(plan.output_axes);
    for a in missing.iter() {
        if !why.explaining.contains(&AxisName::Label(plan.label(a))) {
            notes.push(format!(
                "axis `{}` is in no output and explains no partial, so it is replicated on the inputs",
                plan.label(a)
            ));
        }
    }
    for (o, attr) in bwd.outputs.iter().enumerate() {
        let name = format!("output {o}");
        row(
            &mut out,
            &name,
            &out_shapes[o],
            &fwd.outputs[o].to_string(),
            attr,
        );
        notes.extend(reshard_note(&name, &fwd.outputs[o], attr));
        let because: Vec<&str> = why
            .explained
            .iter()
            .filter(|(x, _)| *x == o)
            .map(|(_, r)| r.as_str())
            .collect();
        notes.extend(partial_note(&name, &attr.partial, &because));
    }
    // Backward answers are fixed points of forward: checked, not assumed.
    let req: Vec<Spec<'_>> = in_shapes
        .iter()
        .zip(&bwd.inputs)
        .map(|(s, a)| Spec::new(s, a))
        .collect();
    if op.forward(mesh, &req)?.outputs != bwd.outputs {
        return Err(SpmdError::Rejected {
            op: case.op,
            message: "forward on backward's requirements disagrees with backward".into(),
        });
    }
    notes.push("forward on these requirements gives exactly these outputs (checked)".into());
    for n in &notes {
        let _ = writeln!(out, "    -> {n}");
    }
    Ok(out)
}

/// The GPT layer example's checks, shown here in brief.
#[path = "../../gpt_layer.rs"]
mod gpt_layer;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mesh = Mesh::new(&[2, 4])?;
    println!(
        "Sharding report on a {mesh} mesh (mappings in Paddle's form: -1 = replicated, d = mesh dim d)\n"
    );
    for case in CASES {
        println!("{}", report(&mesh, case)?);
    }
    // Whole-graph propagation: the per-op rules above, through a model.
    println!(
        "Whole-graph propagation (full report: `cargo run --release --example gpt_layer`, \
         or `spmd propagate spmd-graph/graphs/gpt_layer.json --backward`)"
    );
    let failures = gpt_layer::check(true)?;
    if !failures.is_empty() {
        return Err(format!("{} claim(s) failed", failures.len()).into());
    }
    Ok(())
}
