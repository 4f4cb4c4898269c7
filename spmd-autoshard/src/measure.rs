//! What a plan costs: one training step's compute, communication and
//! per-device memory, read off spmd's own propagation and reshard plans,
//! forward and backward.
//!
//! The model (`docs/autoshard.md` gives it whole):
//! - **communication**: every communicating step of the forward and the
//!   backward reshard plans, at the plans' ring volumes, timed by
//!   [`CostModel::collective_time`];
//! - **compute**: each op's FLOPs ([`op_flops`]) divided by the product of the
//!   mesh dims its outputs are split or partial over (a device computes its
//!   block); a grad op costs twice its forward op, divided as it is;
//! - **memory**: each parameter's local block, its gradient's (laid out like
//!   it), Adam's two fp32 moments, a fp32 master copy when the parameters
//!   are 16-bit, and the activations the backward reads: every tensor a
//!   gradient-path op reads, counted once per storage (a view shares its
//!   base's);
//! - **step time** = compute + communication (no overlap assumed).

use std::collections::BTreeMap;

use serde::Serialize;
use spmd_core::{AttrValue, DistAttr, Mesh, MeshDim, MeshSet, Registry};
use spmd_graph::reshard::local_shape;
use spmd_graph::steps::Step;
use spmd_graph::{
    Backward, DType, Graph, GraphError, OpKind, Propagation, ReshardPlan, TensorId, backward_graph,
    plan, propagate,
};

use crate::cost::{Collective, CostModel};

/// Per-device bytes of one training step's resident state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Memory {
    pub parameters: u64,
    pub gradients: u64,
    /// Adam's two fp32 moments, and the fp32 master copy under mixed precision.
    pub optimizer: u64,
    /// Tensors the backward reads.
    pub activations: u64,
    pub total: u64,
}

/// One kind of collective on one set of mesh dims, in one pass.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CollectiveCost {
    /// `forward` or `backward`.
    pub pass: &'static str,
    pub kind: Collective,
    pub mesh_dims: Vec<MeshDim>,
    pub count: usize,
    /// Bytes sent per device, summed over the count.
    pub bytes: u64,
    /// Modelled seconds, summed over the count.
    pub time: f64,
}

/// Everything the cost model says of one plan.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Figures {
    pub memory: Memory,
    pub collectives: Vec<CollectiveCost>,
    /// Seconds of arithmetic per device, forward and backward.
    pub compute_time: f64,
    /// Seconds of communication per device, forward and backward.
    pub communication_time: f64,
    /// compute + communication, seconds.
    pub step_time: f64,
}

impl Figures {
    /// Bytes every collective sends per device.
    pub fn communication_bytes(&self) -> u64 {
        self.collectives.iter().map(|c| c.bytes).sum()
    }
}

/// Collectives by pass, kind and mesh dims.
type Collectives = BTreeMap<(&'static str, Collective, Vec<MeshDim>), CollectiveCost>;

/// What the forward pass alone shows of a plan: its memory (exact) and a
/// lower bound on its step time (the forward's compute and collectives,
/// plus the backward's arithmetic split perfectly, with no communication).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bound {
    pub memory: Memory,
    pub step_time: f64,
}

/// A plan priced whole, or stopped after its forward pass.
#[derive(Clone, Debug, PartialEq)]
pub enum Priced {
    Full(Figures),
    Bounded(Bound),
}

/// A graph made ready to price plans on: what does not depend on the plan
/// (FLOPs, the gradient path, view aliasing) is worked out once.
#[derive(Clone)]
pub struct Measurer<'r> {
    pub graph: Graph,
    registry: &'r Registry,
    outputs: Vec<TensorId>,
    dtype: DType,
    pub(crate) model: CostModel,
    /// Per forward op: its FLOPs.
    pub(crate) flops: Vec<f64>,
    /// Per tensor: autograd's requires_grad (a parameter, or an output of
    /// an op that reads one).
    pub(crate) grad: Vec<bool>,
    /// Per tensor: read by an op on the gradient path (kept for backward).
    pub(crate) saved: Vec<bool>,
    /// Per tensor: the tensor whose storage it is (itself unless a view).
    pub(crate) storage: Vec<TensorId>,
    /// Every forward op's FLOPs, plus twice those of the ops on the
    /// gradient path (their grad ops): the work any plan divides.
    step_flops: f64,
    /// Twice the FLOPs of the ops on the gradient path: the grad ops' work.
    grad_flops: f64,
    /// The backward graph, built for the first plan priced and re-annotated
    /// for each later one (its structure does not depend on the plan).
    backward: Option<Backward>,
}

/// Op kinds whose output is a view of their first input: no storage of
/// their own.
pub const VIEWS: &[&str] = &[
    "aten.view",
    "aten._unsafe_view",
    "aten.reshape",
    "aten.permute",
    "aten.t",
    "aten.transpose.int",
    "aten.unsqueeze",
    "aten.squeeze",
    "aten.squeeze.dim",
    "aten.expand",
    "aten.slice.Tensor",
    "aten.select.int",
    "aten.alias",
    "aten.detach",
    "reshape",
    "transpose",
    "unsqueeze",
    "squeeze",
    "expand",
    "slice",
];

impl<'r> Measurer<'r> {
    pub fn new(
        graph: Graph,
        registry: &'r Registry,
        outputs: Vec<TensorId>,
        dtype: DType,
        model: CostModel,
    ) -> Measurer<'r> {
        let n = graph.tensors().len();
        // Autograd's requires_grad: a parameter, or an output of an op that
        // reads one (ops come in topological order).
        let mut grad = vec![false; n];
        for t in graph.tensor_ids() {
            grad[t.index()] = graph.tensor(t).param;
        }
        let mut saved = vec![false; n];
        let mut storage: Vec<TensorId> = graph.tensor_ids().collect();
        let mut flops = Vec::with_capacity(graph.ops().len());
        let mut step_flops = 0.0;
        let mut grad_flops = 0.0;
        for o in graph.op_ids() {
            let (op, inputs, outputs) = (graph.op(o), graph.inputs(o), graph.outputs(o));
            let on_path = inputs.iter().any(|t| grad[t.index()]);
            if on_path {
                for &t in inputs {
                    saved[t.index()] |= !graph.tensor(t).param;
                }
                for &t in outputs {
                    grad[t.index()] = true;
                }
            }
            if VIEWS.contains(&op.rule.as_str())
                && let (Some(&base), Some(&out)) = (inputs.first(), outputs.first())
            {
                storage[out.index()] = storage[base.index()];
            }
            let shapes =
                |ts: &[TensorId]| -> Vec<&[usize]> { ts.iter().map(|&t| graph.shape(t)).collect() };
            let f = op_flops(&op.rule, &op.attrs, &shapes(inputs), &shapes(outputs));
            step_flops += f;
            if on_path {
                grad_flops += 2.0 * f;
            }
            flops.push(f);
        }
        Measurer {
            graph,
            registry,
            outputs,
            dtype,
            model,
            flops,
            grad,
            saved,
            storage,
            step_flops: step_flops + grad_flops,
            grad_flops,
            backward: None,
        }
    }

    /// A lower bound on any plan's step time: the step's arithmetic split
    /// perfectly over every device, with no communication.
    pub fn step_time_bound(&self) -> f64 {
        self.model
            .compute_time(self.step_flops / self.mesh().size() as f64, self.dtype)
    }

    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    pub fn mesh(&self) -> &Mesh {
        self.graph.mesh()
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Prices the graph as it is annotated now.
    pub fn measure(&mut self) -> Result<Figures, GraphError> {
        match self.measure_unless(|_| false)? {
            Priced::Full(f) => Ok(f),
            Priced::Bounded(_) => unreachable!("nothing is hopeless"),
        }
    }

    /// Prices the graph as it is annotated now, stopping after the forward
    /// pass when what it shows is `hopeless`: the backward is most of the
    /// work, and a plan whose memory or forward alone rules it out need not
    /// pay for it.
    pub fn measure_unless(
        &mut self,
        hopeless: impl Fn(&Bound) -> bool,
    ) -> Result<Priced, GraphError> {
        let (p, forward) = self.forward()?;
        let mesh = self.graph.mesh();
        let mut compute = 0.0;
        // Each op on the gradient path's grad op: twice its work, divided as
        // the op's own (the solver's program charges it so).
        let mut grad_compute = 0.0;
        for o in self.graph.op_ids() {
            let work = self.flops[o.index()] / split(mesh, &p, self.graph.outputs(o)) as f64;
            compute += work;
            if self.on_path(o) {
                grad_compute += 2.0 * work;
            }
        }
        let mut collectives = BTreeMap::new();
        // (The plan reduces a result left partial: its collective is in it.)
        self.add_collectives(&mut collectives, "forward", &forward);
        let memory = self.memory(&p);
        let bound = Bound {
            memory,
            step_time: self
                .model
                .compute_time(compute + self.grad_flops / mesh.size() as f64, self.dtype)
                + collectives
                    .values()
                    .fold(0.0, |t, c: &CollectiveCost| t + c.time),
        };
        if hopeless(&bound) {
            return Ok(Priced::Bounded(bound));
        }

        match &mut self.backward {
            Some(bw) => bw.reannotate(&self.graph, &p)?,
            None => {
                self.backward = Some(backward_graph(
                    &self.graph,
                    &p,
                    self.registry,
                    &self.outputs,
                )?)
            }
        }
        let bw = self.backward.as_ref().expect("built above");
        let bp = propagate(&bw.graph)?;
        let backward = plan(&bw.graph, &bp, self.dtype)?;
        let mesh = self.graph.mesh();
        // The grad ops are counted above; the backward graph's own ops are
        // the gradient accumulation's adds.
        compute += grad_compute;
        for o in bw.graph.op_ids() {
            if let OpKind::Forward = bw.graph.kind(o) {
                let numel = |t: &TensorId| bw.graph.shape(*t).iter().product::<usize>();
                let adds = bw.graph.outputs(o).iter().map(numel).sum::<usize>() as f64;
                compute += adds / split(mesh, &bp, bw.graph.outputs(o)) as f64;
            }
        }
        let compute_time = self.model.compute_time(compute, self.dtype);
        self.add_collectives(&mut collectives, "backward", &backward);
        let collectives: Vec<CollectiveCost> = collectives.into_values().collect();
        let communication_time = collectives.iter().fold(0.0, |t, c| t + c.time);
        Ok(Priced::Full(Figures {
            memory,
            collectives,
            compute_time,
            communication_time,
            step_time: compute_time + communication_time,
        }))
    }

    /// Adds `plan`'s communicating steps to `into`, by pass, kind and mesh
    /// dims.
    fn add_collectives(&self, into: &mut Collectives, pass: &'static str, plan: &ReshardPlan) {
        for r in &plan.reshards {
            self.add_steps(into, pass, r.steps.iter().map(|(s, b)| (s, *b)));
        }
    }

    /// Adds communicating `steps` (with their bytes) to `into`.
    fn add_steps<'s>(
        &self,
        into: &mut Collectives,
        pass: &'static str,
        steps: impl Iterator<Item = (&'s Step, u64)>,
    ) {
        for (step, bytes) in steps {
            let Some((kind, dims)) = collective(step) else {
                continue;
            };
            let time = self.model.collective_time(kind, self.mesh(), &dims, bytes);
            let c = into
                .entry((pass, kind, dims.clone()))
                .or_insert(CollectiveCost {
                    pass,
                    kind,
                    mesh_dims: dims,
                    count: 0,
                    bytes: 0,
                    time: 0.0,
                });
            c.count += 1;
            c.bytes += bytes;
            c.time += time;
        }
    }

    /// The forward propagation and its reshard plan, as annotated now.
    pub fn forward(&self) -> Result<(Propagation, ReshardPlan), GraphError> {
        let p = propagate(&self.graph)?;
        let forward = plan(&self.graph, &p, self.dtype)?;
        Ok((p, forward))
    }

    /// Per-device resident bytes under the propagated attrs `p`.
    pub fn memory(&self, p: &Propagation) -> Memory {
        let mesh = self.mesh();
        let bytes = self.dtype.bytes();
        let local = |t: TensorId| -> u64 {
            local_shape(self.graph.shape(t), p.attr(t), mesh)
                .iter()
                .product::<usize>() as u64
        };
        let mut m = Memory::default();
        let mut counted = vec![false; self.graph.tensors().len()];
        for t in self.graph.tensor_ids() {
            if self.graph.tensor(t).param {
                let elements = local(t);
                m.parameters += elements * bytes;
                m.gradients += elements * bytes;
                let master = if bytes < 4 { 4 } else { 0 };
                m.optimizer += elements * (8 + master);
            } else if self.saved[t.index()] {
                let base = self.storage[t.index()];
                if !std::mem::replace(&mut counted[base.index()], true) {
                    m.activations += local(base) * bytes;
                }
            }
        }
        m.total = m.parameters + m.gradients + m.optimizer + m.activations;
        m
    }
}

impl Measurer<'_> {
    /// Whether forward op `o` is on the gradient path (reads a tensor that
    /// takes a gradient): the backward graph gives it a grad op.
    fn on_path(&self, o: spmd_graph::OpId) -> bool {
        self.graph.inputs(o).iter().any(|t| self.grad[t.index()])
    }
}

/// How many blocks an op's work is cut into: the product of the mesh dims
/// its outputs are split or partial over.
fn split(mesh: &Mesh, p: &Propagation, outputs: &[TensorId]) -> usize {
    let used = outputs.iter().fold(MeshSet::EMPTY, |s, &t| {
        let a: &DistAttr = p.attr(t);
        s.union(a.dims_mapping.mesh_set()).union(a.partial.dims())
    });
    mesh.product(used).max(1)
}

/// The collective a communicating step runs, and over which mesh dims.
pub(crate) fn collective(step: &Step) -> Option<(Collective, Vec<MeshDim>)> {
    Some(match step {
        Step::AllReduce { mesh_dims, .. } => (Collective::AllReduce, mesh_dims.clone()),
        Step::ReduceScatter { mesh_dims, .. } => (Collective::ReduceScatter, mesh_dims.clone()),
        Step::AllGather { mesh_dims, .. } => (Collective::AllGather, mesh_dims.clone()),
        Step::AllToAll { mesh_dim, .. } => (Collective::AllToAll, vec![*mesh_dim]),
        Step::Reorder { mesh_dims, .. } => (Collective::Reorder, mesh_dims.clone()),
        Step::Slice { .. } | Step::MakePartial { .. } => return None,
    })
}

/// An op's floating-point operations, from its kind and its tensors'
/// global shapes: `2·m·k·n` for a product (batched, `addmm` and
/// `linear` included), `4·b·h·s·t·d` for attention (its two products),
/// and one per output element for everything else.
pub fn op_flops(
    rule: &str,
    attrs: &spmd_core::Attrs,
    inputs: &[&[usize]],
    outputs: &[&[usize]],
) -> f64 {
    let numel = |s: &[usize]| s.iter().product::<usize>() as f64;
    let out = outputs.first().map_or(0.0, |s| numel(s));
    let last = |i: usize| inputs.get(i).and_then(|s| s.last().copied());
    let contracted = match rule {
        "aten.mm" | "aten.bmm" | "aten.matmul" | "aten.linear" => last(0),
        "aten.addmm" | "aten.baddbmm" => last(1),
        "matmul" => {
            let trans_x = matches!(attrs.get("trans_x"), Some(AttrValue::Bool(true)));
            let x = inputs.first();
            x.and_then(|s| {
                if trans_x && s.len() >= 2 {
                    s.get(s.len() - 2).copied()
                } else {
                    s.last().copied()
                }
            })
        }
        "aten.scaled_dot_product_attention" | "aten._scaled_dot_product_flash_attention" => {
            // q [.., s, d], k [.., t, d]: q·kᵀ then softmax·v.
            let (Some(q), Some(k)) = (inputs.first(), inputs.get(1)) else {
                return out;
            };
            let t = k.len().checked_sub(2).map_or(1, |i| k[i]);
            return 4.0 * numel(q) * t as f64;
        }
        _ => None,
    };
    match contracted {
        Some(k) => 2.0 * out * k as f64,
        None => outputs.iter().map(|s| numel(s)).sum(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spmd_core::Attrs;

    #[test]
    fn products_count_two_flops_per_multiply_add() {
        let a = Attrs::new();
        assert_eq!(
            op_flops("aten.mm", &a, &[&[8, 16], &[16, 4]], &[&[8, 4]]),
            2.0 * 8.0 * 16.0 * 4.0
        );
        assert_eq!(
            op_flops("aten.addmm", &a, &[&[4], &[8, 16], &[16, 4]], &[&[8, 4]]),
            2.0 * 8.0 * 16.0 * 4.0
        );
        let t = Attrs::new().with("trans_x", true);
        assert_eq!(
            op_flops("matmul", &t, &[&[16, 8], &[16, 4]], &[&[8, 4]]),
            2.0 * 8.0 * 16.0 * 4.0
        );
        let q: &[usize] = &[2, 4, 32, 8];
        let k: &[usize] = &[2, 4, 64, 8];
        assert_eq!(
            op_flops("aten.scaled_dot_product_attention", &a, &[q, k, k], &[q]),
            4.0 * (2 * 4 * 32 * 8) as f64 * 64.0
        );
        assert_eq!(
            op_flops("aten.add.Tensor", &a, &[&[3, 5], &[3, 5]], &[&[3, 5]]),
            15.0
        );
    }
}
