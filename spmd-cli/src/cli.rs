//! The command line, declared with clap's derive API.

use clap::{Args, Parser, Subcommand, ValueEnum};

const TENSOR_SYNTAX: &str = "\
Tensor syntax (TENSOR):  SHAPE[:MAPPING][:partial(DIMS)]
  SHAPE    extents joined by `x`: 64x32, 8; `scalar` (or nothing) for rank 0
  MAPPING  Paddle's dims mapping, one entry per dim: -1 = replicated, d = split
           over mesh dim d, [a,b] = co-sharded over mesh dims a then b (major
           first): [1,-1]  [[0,1],-1]  []. Omitted: replicated.
  partial  mesh dims holding partial values, each with an optional reduce type
           (sum avg max min prod any all; default sum): partial(0)  partial(0:sum,1:max)
Quote tensors in the shell if they contain brackets or parentheses:
  --in '64x32:[1,0]'   --in '8x4:[-1,-1]:partial(0:max)'

Attributes (--attr NAME=VALUE): true/false, integers, numbers, lists [0,1],
strings (quotes optional): --attr trans_x=true --attr axis=[-1] --attr keep_dim=false";

const ABSENT_SYNTAX: &str = "\
Absent optional tensors: `absent` (exactly, lowercase) in place of an --in or --out
TENSOR leaves that slot empty, for tensors the rule declares optional (layer_norm's
scale and bias, flash_attention's attn_mask); in --json-input, `null` does the same.
The report shows the slot as absent. Leaving out a tensor the rule does not declare
optional is an error naming it:
  spmd infer layer_norm --mesh 2x2 --in '8x16x32:[0,-1,1]' --in absent --in absent \\
      --attr begin_norm_axis=2";

const INFER_EXAMPLES: &str = "\
Examples:
  spmd infer matmul --mesh 2x4 --in 64x32:[1,0] --in 32x48:[-1,-1]
  spmd infer matmul --mesh 2x4 --in 32x64:[0,1] --in 32x48:[-1,-1] --attr trans_x=true
  spmd infer softmax --mesh 4 --in '8x16:[0,-1]' --attr axis=0
  spmd infer matmul --mesh 2x4 --backward --in 64x32 --in 32x48 --out '64x48:[0,1]'
  spmd infer matmul --mesh 2x4 --grad --in '64x32:[1,0]' --in 32x48 --out '64x48:[1,-1]'
  spmd infer --json-input case.json          (a case of the conformance schema; - reads stdin)
  spmd infer matmul --mesh 2x4 --in 64x32:[1,0] --in 32x48:[-1,-1] --json";

const EINSUM_EXAMPLES: &str = "\
Examples:
  spmd einsum 'mk,kn->mn' --mesh 2x4 --in 64x32:[1,0] --in 32x48:[-1,-1]
  spmd einsum 'bs(hd)->bshd' --mesh 2 --in '4x8x64:[-1,-1,0]'
  spmd einsum '...ij,...jk->...ik' --mesh 2x2 --in '8x4x6:[0,-1,1]' --in 6x2
  spmd einsum 'mk,kn->mn' --mesh 2x4 --backward --in 64x32 --in 32x48 --out '64x48:[1,0]'";

const EXPLAIN_EXAMPLES: &str = "\
Examples:
  spmd explain matmul --mesh 2x4 --in 64x32:[1,0] --in 32x48:[-1,-1]
  spmd explain 'mk,kn->mn' --mesh 2x4 --in '64x32:[0,1]' --in '32x48:[1,0]'
  spmd explain embedding --mesh 2x4 --in '16x128:[0,-1]' --in '1000x64:[1,-1]'

Absent optional tensors (`absent`, or `null` in --json-input) are not supported: the core
traces only calls whose tensors are all present. `spmd infer` runs such calls.";

const SHOW_EXAMPLES: &str = "\
Examples:
  spmd show --mesh 2x4 '64x48:[1,0]'
  spmd show --mesh 2x4 '64x48:[-1,1]:partial(0)'
  spmd show --mesh 2x2x2 '8x16x32:[0,[1,2],-1]' --svg layout.svg
  spmd show --mesh 4 '10:[0]' --json";

const CONFORMANCE_EXAMPLES: &str = "\
Examples:
  spmd conformance tests/conformance/paddle-suite.json
  spmd conformance tests/conformance/*.json --deviations tests/conformance/DEVIATIONS.md
  spmd conformance paddle-suite.json --op matmul --op einsum -v
  spmd conformance paddle-suite.json --json > results.json
  spmd conformance tests/conformance/*.json --deviations tests/conformance/DEVIATIONS.md --markdown > docs/conformance-per-op.md

Every case runs through the rule the project would use: `einsum` from its `equation`
attribute, other ops from the built-in registry with the case's attributes. Cases whose
op is not registered are counted as `not covered`, never as failed. The last line is
always `N passed, M failed`; the exit status is 1 when a covered case fails (a failure
listed in --deviations counts as a deviation, not a failure).";

const PROPAGATE_EXAMPLES: &str = "\
Examples:
  spmd propagate spmd-graph/graphs/gpt_layer.json
  spmd propagate spmd-graph/graphs/gpt_layer.json --backward
  spmd propagate graph.json --dtype bf16 --json
  spmd propagate spmd-graph/graphs/hf/llama.json --plan spmd-graph/graphs/hf/llama_tp_dp.json --backward
  spmd propagate spmd-graph/graphs/hf/llama.json --plan spmd-graph/graphs/hf/llama_tp_dp.json --backward --html plan.html

The graph file lists the mesh, every tensor (name, shape, optional dims_mapping /
partial_dims annotation with a priority, param flag) and the ops in a topological order (registry
name, attrs, input and output tensor names); see the README. Annotated tensors keep
their annotation; every other tensor gets the attr propagation finds (replicated
when no annotation reaches it). The reshard plan lists each collective with its
bytes per device (ring algorithms).";

const AUTOSHARD_EXAMPLES: &str = "\
Examples:
  spmd autoshard spmd-graph/graphs/hf/llama.json --mesh 4
  spmd autoshard spmd-graph/graphs/hf/llama-2-7b.json.gz --mesh 8 --memory 24GiB -o plan.json
  spmd autoshard graph.json --mesh 2x4 --device a100 --dtype bf16 --json
  spmd autoshard graph.json --mesh 2x4 --plan pins.json     (pinned layouts stay; the rest is chosen)

The plan written by -o is a plan file: `spmd propagate GRAPH --plan plan.json --backward`
shows every tensor and collective of it. The cost model (every constant, and its source)
is in docs/autoshard.md.";

const CHECK_EXAMPLES: &str = "\
Examples:
  spmd check spmd-graph/graphs/hf/llama.json --plan spmd-graph/graphs/hf/llama_tp_dp.json --backward
  spmd check spmd-graph/graphs/gpt_layer.json --backward
  spmd check graph.json --plan plan.json --json
  spmd check spmd-graph/graphs/hf/llama.json --plan spmd-graph/graphs/hf/llama_tp.json --skip-reshard view_14

Every device computes its blocks with the op's reference kernel (f64), every reshard
of the plan runs as the collective it names, and every tensor (with --backward, every
gradient too) is compared with a dense single-device run. The first value that differs
is reported: the op, the tensor and its layout, the device, its block and the element;
exit status 1. When everything matches, one line sums up what ran. An op the simulator
has no kernel for is an error (exit status 2): the plan could not be checked. The simulator holds
every tensor densely and on every device: check small configs of a model.";

const OPS_EXAMPLES: &str = "\
Examples:
  spmd ops
  spmd ops matmul
  spmd ops --json";

/// Sharding propagation (SPMD) rules from the command line: what layout an
/// op requires of its inputs, what its outputs get, and why.
#[derive(Parser, Debug)]
#[command(
    name = "spmd",
    version,
    about = "Sharding-propagation (SPMD) rules from the command line",
    long_about = "Sharding-propagation (SPMD) rules from the command line: given how an op's \
                  tensors are split over a device mesh, what the op requires of its inputs, \
                  how its outputs come out (and which are partial), which reshard each input \
                  needs, and why.",
    after_help = "Run `spmd <COMMAND> --help` for the tensor syntax and examples.\n\
                  Colors are off when the output is not a terminal or NO_COLOR is set.",
    propagate_version = true
)]
pub struct Cli {
    /// When to color the output: auto (on a terminal, unless NO_COLOR is set), always, never.
    #[arg(
        long,
        global = true,
        value_enum,
        default_value_t = ColorWhen::Auto,
        value_name = "WHEN",
        hide_possible_values = true
    )]
    pub color: ColorWhen,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ColorWhen {
    Auto,
    Always,
    Never,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run a registered op's rule: input requirements, outputs, reshards.
    #[command(after_help = format!("{TENSOR_SYNTAX}\n\n{ABSENT_SYNTAX}\n\n{INFER_EXAMPLES}"))]
    Infer(InferArgs),

    /// Run the rule of any einsum notation (no registered op needed).
    #[command(after_help = format!("{TENSOR_SYNTAX}\n\n{EINSUM_EXAMPLES}"))]
    Einsum(EinsumArgs),

    /// Like `infer`, step by step: which axis took which mesh dim from which
    /// tensor, which conflicts were settled and how, why an output is partial.
    #[command(after_help = format!("{TENSOR_SYNTAX}\n\n{EXPLAIN_EXAMPLES}"))]
    Explain(InferArgs),

    /// Draw a tensor's layout: which device holds which block.
    #[command(after_help = format!("{TENSOR_SYNTAX}\n\n{SHOW_EXAMPLES}"))]
    Show(ShowArgs),

    /// Run conformance vectors (JSON, the shared schema) and summarize per op.
    #[command(after_help = CONFORMANCE_EXAMPLES)]
    Conformance(ConformanceArgs),

    /// List the registered rules with their notations and attributes.
    #[command(after_help = OPS_EXAMPLES)]
    Ops(OpsArgs),

    /// Propagate a graph's annotations to every tensor and print the reshard plan.
    #[command(after_help = PROPAGATE_EXAMPLES)]
    Propagate(PropagateArgs),

    /// Run a graph's plan on a simulated mesh and compare every value with a dense run.
    #[command(after_help = CHECK_EXAMPLES)]
    Check(CheckArgs),

    /// Choose a plan for a graph: the cheapest training step that fits the memory budget.
    #[command(after_help = AUTOSHARD_EXAMPLES)]
    Autoshard(AutoshardArgs),
}

impl Command {
    /// Whether the command was asked for JSON: then its errors are JSON too.
    pub fn wants_json(&self) -> bool {
        match self {
            Command::Infer(a) | Command::Explain(a) => a.call.json,
            Command::Einsum(a) => a.call.json,
            Command::Show(a) => a.json,
            Command::Conformance(a) => a.json,
            Command::Ops(a) => a.json,
            Command::Propagate(a) => a.json,
            Command::Autoshard(a) => a.json,
            Command::Check(a) => a.json,
        }
    }
}

/// The tensors, mesh and direction of one rule call.
#[derive(Args, Debug, Clone, Default)]
pub struct CallArgs {
    /// The device mesh: extents joined by `x` (2x4 = 2 rows of 4 devices, ids row-major).
    #[arg(long, value_name = "SHAPE")]
    pub mesh: Option<String>,

    /// An input tensor, in order (forward: SHAPE:MAPPING; backward: SHAPE, any mapping is ignored by the rule; `absent` for an absent optional one).
    #[arg(long = "in", value_name = "TENSOR", allow_hyphen_values = true)]
    pub inputs: Vec<String>,

    /// An output tensor, in order (backward: the given outputs; grad: the output grads; `absent` for an absent optional one).
    #[arg(long = "out", value_name = "TENSOR", allow_hyphen_values = true)]
    pub outputs: Vec<String>,

    /// An op attribute, Paddle's name and a value (repeatable).
    #[arg(long = "attr", value_name = "NAME=VALUE", allow_hyphen_values = true)]
    pub attrs: Vec<String>,

    /// Backward (reverse) inference: from the outputs (--out) and the inputs' shapes (--in).
    #[arg(long, conflicts_with = "grad")]
    pub backward: bool,

    /// Grad inference: the gradient op of the forward inputs (--in) and output grads (--out).
    #[arg(long)]
    pub grad: bool,

    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug, Clone)]
pub struct InferArgs {
    /// The op's registry name (see `spmd ops`), or an einsum notation such as 'mk,kn->mn'.
    #[arg(required_unless_present = "json_input")]
    pub op: Option<String>,

    #[command(flatten)]
    pub call: CallArgs,

    /// Read the whole call from a JSON file (`-` = stdin): one case of the
    /// conformance schema (op, attrs, mesh_shape, direction, inputs, outputs), or an
    /// array of them. When the case has `expected`, the answer is checked against it.
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with_all = ["op", "mesh", "inputs", "outputs", "attrs", "backward", "grad"]
    )]
    pub json_input: Option<String>,
}

#[derive(Args, Debug, Clone)]
pub struct EinsumArgs {
    /// The notation: operands `->` outputs, e.g. 'mk,kn->mn', '...ij->...j', 'bs(hd)->bshd'.
    pub notation: String,

    #[command(flatten)]
    pub call: CallArgs,
}

#[derive(Args, Debug, Clone)]
pub struct ShowArgs {
    /// The device mesh: extents joined by `x`.
    #[arg(long, value_name = "SHAPE")]
    pub mesh: String,

    /// The tensor: SHAPE:MAPPING[:partial(...)].
    #[arg(value_name = "TENSOR", allow_hyphen_values = true)]
    pub tensor: String,

    /// Also write the picture as an SVG file.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<String>,

    /// Print each device's block as JSON instead of the picture.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug, Clone)]
pub struct ConformanceArgs {
    /// Vector files (JSON arrays of cases in the shared schema).
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<String>,

    /// A deviations table (DEVIATIONS.md format: first cell a case id, last
    /// cell the reason): listed failures count as deviations, not failures.
    #[arg(long, value_name = "FILE")]
    pub deviations: Option<String>,

    /// Only run cases of these ops (repeatable).
    #[arg(long = "op", value_name = "NAME")]
    pub ops: Vec<String>,

    /// List every failing case (by default the first 10).
    #[arg(short, long)]
    pub verbose: bool,

    /// Print per-case results as JSON.
    #[arg(long, conflicts_with = "markdown")]
    pub json: bool,

    /// Print the per-op table of each file as a Markdown document (the
    /// project's docs/conformance-per-op.md is this output).
    #[arg(long)]
    pub markdown: bool,
}

#[derive(Args, Debug, Clone)]
pub struct PropagateArgs {
    /// The graph JSON file (`-` = stdin).
    #[arg(value_name = "GRAPH.json")]
    pub graph: String,

    /// Element type for the volumes (f64 f32 f16 bf16 i64 i32 i8); default:
    /// the file's `dtype`, else f32.
    #[arg(long, value_name = "DTYPE")]
    pub dtype: Option<String>,

    /// Also build the backward graph (grad ops, gradient accumulation, each
    /// parameter's gradient in its parameter's layout) and print its plan.
    #[arg(long)]
    pub backward: bool,

    /// Annotate the graph from a plan file first: tensor-name patterns
    /// (`*` = any run of characters) and their layouts, optionally a mesh
    /// (see `spmd_graph::annotations`).
    #[arg(long, value_name = "PLAN.json")]
    pub plan: Option<String>,

    /// Let the plan file change annotations the graph file has (without
    /// it, that is an error naming the tensor).
    #[arg(long = "override", requires = "plan")]
    pub override_annotations: bool,

    /// Print the report as JSON (schema: docs/json.md).
    #[arg(long)]
    pub json: bool,

    /// List every tensor's layout and every reshard. By default a graph of
    /// more than 100 tensors gets a summary: the layouts counted, each
    /// collective's count and bytes, and the ten largest reshards.
    #[arg(long)]
    pub tensors: bool,

    /// Also write the whole plan as one self-contained HTML page: the ops in
    /// order, each tensor's layout on the mesh, each collective where it
    /// happens, with its bytes (and the backward graph's with --backward).
    #[arg(long, value_name = "FILE")]
    pub html: Option<String>,
}

#[derive(Args, Debug, Clone)]
pub struct CheckArgs {
    /// The graph JSON file, `.json` or `.json.gz` (`-` = stdin).
    #[arg(value_name = "GRAPH.json")]
    pub graph: String,

    /// Annotate the graph from a plan file first (as `spmd propagate --plan`).
    #[arg(long, value_name = "PLAN.json")]
    pub plan: Option<String>,

    /// Let the plan file change annotations the graph file has (as `spmd
    /// propagate --override`).
    #[arg(long = "override", requires = "plan")]
    pub override_annotations: bool,

    /// Also run the backward graph and compare every gradient.
    #[arg(long)]
    pub backward: bool,

    /// Run the plan without the reshards of this tensor (forward or
    /// backward graph; repeatable): what they guard.
    #[arg(long, value_name = "TENSOR")]
    pub skip_reshard: Vec<String>,

    /// Print the result as JSON (schema: docs/json.md).
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug, Clone)]
pub struct OpsArgs {
    /// Show only this op.
    pub name: Option<String>,

    /// Print the list as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug, Clone)]
pub struct AutoshardArgs {
    /// The graph JSON file, `.json` or `.json.gz` (`-` = stdin).
    #[arg(value_name = "GRAPH.json")]
    pub graph: String,

    /// The device mesh: extents joined by `x` (2x4; the last dim is the one inside a node).
    #[arg(long, value_name = "SHAPE")]
    pub mesh: String,

    /// Memory per device the plan must fit in: 24GiB, 80GB, 512MiB, or bytes (default: the device's memory).
    #[arg(long, value_name = "BYTES")]
    pub memory: Option<String>,

    /// Device preset: a100, h100, h200.
    #[arg(long, default_value = "h100", value_name = "NAME")]
    pub device: String,

    /// Element type of parameters, activations and messages (f32 bf16 ...); default: the file's.
    #[arg(long, value_name = "DTYPE")]
    pub dtype: Option<String>,

    /// Pinned layouts (a plan file): they stay as given; the search fills in the rest.
    #[arg(long, value_name = "PLAN.json")]
    pub plan: Option<String>,

    /// Write the chosen plan to this file (a plan file for `spmd propagate --plan`).
    #[arg(short = 'o', long = "output", value_name = "PLAN.json")]
    pub output: Option<String>,

    /// The fraction of peak FLOP/s an op reaches (default 0.6).
    #[arg(long, value_name = "FRACTION")]
    pub efficiency: Option<f64>,

    /// Override the preset's dense peak, TFLOP/s (for the chosen dtype).
    #[arg(long, value_name = "TFLOPS")]
    pub peak_tflops: Option<f64>,

    /// Override the intra-node link bandwidth, GB/s per direction.
    #[arg(long, value_name = "GB_PER_S")]
    pub intra_bandwidth: Option<f64>,

    /// Override the inter-node bandwidth, GB/s per device.
    #[arg(long, value_name = "GB_PER_S")]
    pub inter_bandwidth: Option<f64>,

    /// Devices per node (default 8).
    #[arg(long, value_name = "N")]
    pub gpus_per_node: Option<usize>,

    /// Descend from the N best role-built plans (default 1): slower, and better on rugged graphs.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub starts: usize,

    /// Branch-and-bound nodes the MIP solver (HiGHS) may search while bounding the step time and proposing a start (0: skip it).
    #[arg(long, value_name = "N", default_value_t = spmd_autoshard::Options::SOLVER_NODES)]
    pub solver_nodes: u64,

    /// Seconds the MIP solver may take, a safety net: a solve it cuts short is not used, and the plan may then depend on the machine's speed (0: skip the solver).
    #[arg(long, value_name = "SECONDS", default_value_t = spmd_autoshard::Options::SOLVER_TIME)]
    pub solver_time: f64,

    /// The largest MIP (columns) the solver is given; a larger one is reported, not built.
    #[arg(long, value_name = "N", default_value_t = spmd_autoshard::Options::SOLVER_COLUMNS)]
    pub solver_columns: usize,

    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}
