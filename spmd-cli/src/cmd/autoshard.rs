//! `spmd autoshard`: choose a plan for a graph file, write it as a plan
//! file, and report it beside the baselines.

use std::io::Write;

use spmd_autoshard::{Device, Options, autoshard as search, report};
use spmd_graph::annotations::AnnotationFile;
use spmd_graph::json::GraphFile;

use crate::Output;
use crate::call::{display_path, read_input};
use crate::cli::AutoshardArgs;
use crate::error::{CliError, Result};

pub fn autoshard(args: &AutoshardArgs) -> Result<Output> {
    let mesh = crate::parse::mesh(&args.mesh)
        .map_err(|e| CliError::usage(format!("--mesh: {e}")))?
        .shape()
        .to_vec();
    let mut options = Options::new(mesh);
    options.device = args.device.parse::<Device>().map_err(CliError::usage)?;
    // Without --memory a plan must fit the device's own memory.
    options.memory = Some(match &args.memory {
        Some(m) => {
            spmd_autoshard::parse_bytes(m).map_err(|e| CliError::usage(format!("--memory: {e}")))?
        }
        None => options.device.memory,
    });
    if let Some(d) = &args.dtype {
        options.dtype = Some(d.parse().map_err(CliError::usage)?);
    }
    if let Some(e) = args.efficiency {
        if !(e > 0.0 && e <= 1.0) {
            return Err(CliError::usage(format!(
                "--efficiency {e}: a fraction of peak, above 0 and at most 1"
            )));
        }
        options.efficiency = e;
    }
    let positive = |name: &str, v: f64| -> Result<f64> {
        if v > 0.0 && v.is_finite() {
            Ok(v)
        } else {
            Err(CliError::usage(format!(
                "--{name} {v}: must be a positive number"
            )))
        }
    };
    if let Some(t) = args.peak_tflops {
        let t = positive("peak-tflops", t)? * 1e12;
        options.device.peak_flops_16 = t;
        options.device.peak_flops_32 = t;
    }
    if let Some(b) = args.intra_bandwidth {
        options.device.intra_bandwidth = positive("intra-bandwidth", b)? * 1e9;
    }
    if let Some(b) = args.inter_bandwidth {
        options.device.inter_bandwidth = positive("inter-bandwidth", b)? * 1e9;
    }
    if let Some(n) = args.gpus_per_node {
        if n == 0 {
            return Err(CliError::usage(
                "--gpus-per-node 0: a node has at least one device",
            ));
        }
        options.device.per_node = n;
    }
    if args.starts == 0 {
        return Err(CliError::usage(
            "--starts 0: the search needs at least one start",
        ));
    }
    options.starts = args.starts;
    if !(args.solver_time >= 0.0 && args.solver_time.is_finite()) {
        return Err(CliError::usage(format!(
            "--solver-time {}: a number of seconds, 0 or more",
            args.solver_time
        )));
    }
    options.solver_nodes = args.solver_nodes;
    options.solver_time = args.solver_time;
    options.solver_columns = args.solver_columns;
    if let Some(p) = &args.plan {
        let pins = AnnotationFile::from_json(&read_input(p)?)
            .map_err(|e| CliError::usage(format!("{}: plan JSON: {e}", display_path(p))))?;
        options.pins = Some(pins);
    }
    let file: GraphFile = spmd_graph::json::parse(&read_input(&args.graph)?)
        .map_err(|e| CliError::usage(format!("{}: graph JSON: {e}", display_path(&args.graph))))?;

    // One progress line per pass on stderr, once the search has run a second.
    let started = std::time::Instant::now();
    let mut progress = |line: &str| {
        if started.elapsed().as_secs_f64() >= 1.0 {
            let _ = writeln!(std::io::stderr(), "autoshard: {line}");
        }
    };
    let registry = spmd_ops::builtins();
    let outcome = search(&file, &registry, &options, &mut progress)
        .map_err(|e| CliError::usage(format!("{}: {e}", display_path(&args.graph))))?;

    if let Some(path) = &args.output {
        std::fs::write(path, report::plan_json(&outcome.plan))
            .map_err(|e| CliError::usage(format!("cannot write {path}: {e}")))?;
    }
    if args.json {
        let v = serde_json::to_value(&outcome)
            .map_err(|e| CliError::usage(format!("cannot write the report: {e}")))?;
        return Ok(Output::ok(format!("{}\n", crate::report::to_json(&v))));
    }
    let mut text = report::text(&outcome);
    if let Some(path) = &args.output {
        text.push_str(&format!("plan written to {path}\n"));
    }
    Ok(Output::ok(text))
}
