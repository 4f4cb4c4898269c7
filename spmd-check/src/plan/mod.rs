//! Whole plans checked on the simulated mesh (docs/semantics.md §10): a
//! graph run op by op on every device, with exactly the reshards of its
//! plan, against a dense single-device run.
//!
//! Every device computes its blocks with the op's kernel ([`kernels`]),
//! reading its inputs as they are laid out when the op runs: resharded by
//! the plan's steps where the plan reshards them (each step taking data
//! only from the devices of its group), as they are otherwise. Every
//! tensor an op produces is compared with the dense run under the layout
//! the rule says it has, and again after each reshard; a graph result left
//! partial must be reduced by the plan. With the backward graph, the
//! gradients are computed the same way (saved inputs as the forward ops
//! read them, the seeds complete, zero gradients where nothing gives one)
//! and every parameter's gradient is compared with the dense gradient.
//!
//! The first value that differs is reported ([`Divergence`]): the op, the
//! tensor, the device and the element; so is a device that cannot compute
//! its part (a kernel's message) or a step whose group lacks the data.
//!
//! ```
//! use spmd_check::plan::{Inputs, check_plan};
//! use spmd_graph::{DType, json, plan, propagate};
//!
//! // x @ w with w's columns split: column-parallel, no communication.
//! let text = r#"{
//!   "mesh": [2],
//!   "tensors": [
//!     {"name": "x", "shape": [4, 6]},
//!     {"name": "w", "shape": [6, 8], "dims_mapping": [-1, 0], "param": true},
//!     {"name": "y", "shape": [4, 8]}
//!   ],
//!   "ops": [{"name": "mm", "op": "aten.mm", "inputs": ["x", "w"], "outputs": ["y"]}]
//! }"#;
//! let registry = spmd_ops::builtins();
//! let loaded = json::from_str(text, &registry)?;
//! let prop = propagate(&loaded.graph)?;
//! let p = plan(&loaded.graph, &prop, DType::F32)?;
//! let summary = check_plan(&loaded.graph, &prop, &p, None, &Inputs::default(), &registry)?;
//! assert_eq!(summary.ops, 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! [`kernels`]: crate::kernels

mod dist;
mod run;

use core::fmt;
use core::ops::Range;
use std::collections::HashMap;

use spmd_core::DistAttr;
use spmd_graph::json::Init;

use crate::kernels::Elem;
use crate::mesh_sim::Device;

pub use run::{check_plan, footprint};

/// The backward half of a check: the backward graph built from the
/// forward graph's propagation, its own propagation and reshard plan.
#[derive(Clone, Copy, Debug)]
pub struct BackwardPlan<'a> {
    pub backward: &'a spmd_graph::Backward,
    pub prop: &'a spmd_graph::Propagation,
    pub plan: &'a spmd_graph::ReshardPlan,
}

/// What the graph's inputs hold: each tensor's element kind (by name, as
/// an exported graph file gives it; floats by default) and the constants
/// the graph creates. Integer inputs read as an embedding's ids get ids
/// below the table's rows; other integer inputs count up from 0
/// (positions); boolean inputs are true; floats are distinct values of
/// both signs.
#[derive(Clone, Debug, Default)]
pub struct Inputs {
    pub elems: HashMap<String, Elem>,
    pub constants: HashMap<String, Init>,
}

impl Inputs {
    /// Element kinds and constants from a graph file's `dtype`s and
    /// `init`s.
    pub fn of_file(file: &spmd_graph::json::GraphFile) -> Inputs {
        Inputs {
            elems: file
                .tensors
                .iter()
                .filter_map(|t| t.dtype.as_deref().map(|d| (t.name.clone(), Elem::of(d))))
                .collect(),
            constants: file
                .tensors
                .iter()
                .filter_map(|t| t.init.map(|i| (t.name.clone(), i)))
                .collect(),
        }
    }
}

/// How a check went: what ran, and the largest difference from the dense
/// run (rounding: the two runs add in different orders).
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    /// Ops run (forward, then backward).
    pub ops: usize,
    /// Tensors compared with the dense run, after each op and reshard.
    pub compared: usize,
    /// Steps of the plans' reshards run, and of those the collectives.
    pub steps: usize,
    pub collectives: usize,
    pub devices: usize,
    /// Parameters whose gradients were compared.
    pub gradients: usize,
    pub max_error: f64,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ops on {} devices, {} reshard steps ({} collectives), {} tensors and {} parameter gradients equal to the dense run (largest difference {:.1e})",
            self.ops,
            self.devices,
            self.steps,
            self.collectives,
            self.compared,
            self.gradients,
            self.max_error
        )
    }
}

/// Which half of the graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Forward,
    Backward,
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Phase::Forward => "forward",
            Phase::Backward => "backward",
        })
    }
}

/// Where in an op's run a tensor was looked at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Moment {
    /// As the op computed it (its output `k`).
    Computed(usize),
    /// Before the op reads it as input `k`, after the plan's reshard.
    Read(usize),
    /// After the plan's reshard of the op's output `k` to its layout.
    Placed(usize),
    /// A result of the graph, as the user reads it.
    Result,
}

/// A value a device holds that differs from the dense run's.
#[derive(Clone, Debug, PartialEq)]
pub struct Wrong {
    pub device: Device,
    /// The element's global index.
    pub index: Vec<usize>,
    /// The block of the tensor the device holds (global ranges).
    pub block: Vec<Range<usize>>,
    pub got: f64,
    pub want: f64,
}

impl fmt::Display for Wrong {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b: Vec<String> = self
            .block
            .iter()
            .map(|r| format!("{}..{}", r.start, r.end))
            .collect();
        write!(
            f,
            "{}, block [{}]: element {:?} is {}, the dense run gives {}",
            self.device,
            b.join(", "),
            self.index,
            self.got,
            self.want
        )
    }
}

/// What was found wrong.
#[derive(Clone, Debug, PartialEq)]
pub enum Finding {
    /// A device's value differs from the dense run's.
    WrongValue(Wrong),
    /// The tensor is laid out as `held`, not as the op reads it (or as
    /// its own layout says), and the plan has no reshard for it: the
    /// devices' blocks, read as the layout they should have, are wrong.
    Unplanned { held: DistAttr, wrong: Wrong },
    /// A device cannot compute its part of the op (the kernel's message).
    Cannot {
        device: Option<Device>,
        message: String,
    },
    /// A reshard step needs data its group of devices does not hold, or
    /// the plan's steps do not reach the layout they aim at.
    Step { message: String },
    /// No kernel for the op (the simulator cannot run it).
    NoKernel,
    /// A result of the graph is left partial: the user would read a
    /// contribution.
    Partial,
    /// The rule refused the call, or the graph could not be read.
    Rule(String),
}

/// The first place a simulated plan differs from the dense run.
#[derive(Clone, Debug, PartialEq)]
pub struct Divergence {
    pub phase: Phase,
    /// The op's name and registry rule.
    pub op: String,
    pub rule: String,
    /// The tensor looked at (empty where the op itself failed).
    pub tensor: String,
    pub moment: Option<Moment>,
    /// The tensor's layout there.
    pub layout: Option<DistAttr>,
    pub finding: Finding,
}

impl fmt::Display for Divergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: op `{}` ({})", self.phase, self.op, self.rule)?;
        if !self.tensor.is_empty() {
            let when = match self.moment {
                Some(Moment::Computed(k)) => format!("output {k}"),
                Some(Moment::Read(k)) => format!("input {k}, as the op reads it,"),
                Some(Moment::Placed(k)) => format!("output {k}, in its layout in the plan,"),
                Some(Moment::Result) => "result".to_string(),
                None => "tensor".to_string(),
            };
            write!(f, ": {when} `{}`", self.tensor)?;
            if let Some(l) = &self.layout {
                write!(f, " laid out {l}")?;
            }
        }
        match &self.finding {
            Finding::WrongValue(w) => write!(f, " is wrong on {w}"),
            Finding::Unplanned { held, wrong } => {
                write!(
                    f,
                    " is held as {held}, and the plan has no reshard to it: wrong on {wrong}"
                )
            }
            Finding::Cannot {
                device: Some(d),
                message,
            } => write!(f, ": {d} cannot compute its part: {message}"),
            Finding::Cannot {
                device: None,
                message,
            } => write!(f, ": the dense run fails: {message}"),
            Finding::Step { message } => write!(f, ": the reshard cannot run: {message}"),
            Finding::NoKernel => f.write_str(": no kernel for this op in the simulator"),
            Finding::Partial => {
                f.write_str(" is left partial: the user reads one device's contribution")
            }
            Finding::Rule(m) => write!(f, ": {m}"),
        }
    }
}

impl std::error::Error for Divergence {}
