//! The run: values for the graph's inputs, every op on every device and
//! densely, the plan's reshards, and the comparisons.

use core::ops::Range;
use std::collections::HashMap;

use spmd_core::{DistAttr, Mesh, Registry, TensorSet};
use spmd_graph::json::Init;
use spmd_graph::{Edge, Given, Graph, OpId, OpKind, Propagation, Reshard, ReshardPlan, TensorId};

use super::dist::{Dist, Mismatch, complete, ranges};
use super::{BackwardPlan, Divergence, Finding, Inputs, Moment, Phase, Summary, Wrong};
use crate::kernels::{self, Arg, Call, Elem, GradCall, Kernel, Want, whole_block};
use crate::mesh_sim::{Device, devices};
use crate::tensor::{Tensor, Values, splitmix};

/// Runs `graph` under `prop` with the reshards of `plan` (and, with
/// `backward`, its backward graph) on the simulated mesh and densely, and
/// compares every value (see the module docs).
pub fn check_plan(
    graph: &Graph,
    prop: &Propagation,
    plan: &ReshardPlan,
    backward: Option<BackwardPlan<'_>>,
    inputs: &Inputs,
    registry: &Registry,
) -> Result<Summary, Divergence> {
    let mesh = graph.mesh().clone();
    let devices = devices(&mesh);
    let mut sim = Sim {
        mesh: &mesh,
        devices: &devices,
        registry,
        summary: Summary {
            ops: 0,
            compared: 0,
            steps: 0,
            collectives: 0,
            devices: devices.len(),
            gradients: 0,
            max_error: 0.0,
        },
    };
    let elems: Vec<Elem> = graph
        .tensor_ids()
        .map(|t| match inputs.elems.get(&graph.tensor(t).name) {
            Some(&e) => e,
            // A graph file without dtypes: an embedding's ids are integers.
            None if id_rows(graph, t).is_some() => Elem::Int,
            None => Elem::default(),
        })
        .collect();
    let mut fwd = State::new(graph, prop, plan, elems, Phase::Forward);
    for t in graph.tensor_ids() {
        if graph.tensor(t).producer.is_none() {
            let dense = match inputs.constants.get(&graph.tensor(t).name) {
                Some(&init) => constant(graph.shape(t), init),
                None => input_value(graph, t, fwd.elems[t.index()]),
            };
            fwd.set_input(&sim, t, dense);
        }
    }
    for o in graph.op_ids() {
        sim.run_op(&mut fwd, o)?;
    }
    let Some(bw) = backward else {
        return Ok(sim.summary);
    };
    let bg = &bw.backward.graph;
    let elems = vec![Elem::Float; bg.tensors().len()];
    let mut back = State::new(bg, bw.prop, bw.plan, elems, Phase::Backward);
    for (t, given) in bw.backward.given() {
        let shape = bg.shape(t);
        match given {
            Given::Saved { op, input } => {
                let ft = graph.inputs(op)[input];
                back.elems[t.index()] = fwd.elems[ft.index()];
                back.dense[t.index()] = fwd.dense[ft.index()].clone();
                // The blocks the forward op read: what it saved.
                back.dist[t.index()] = fwd.saved.get(&(op, input)).cloned();
            }
            Given::Seed { .. } => {
                let dense =
                    Tensor::probe(shape, 0x5eed ^ t.0 as u64, Values::NearOne).map(|v| v * 0.5);
                back.set_input(&sim, t, dense);
            }
            Given::Zero => back.set_input(&sim, t, Tensor::full(shape, 0.0)),
        }
    }
    for o in bg.op_ids() {
        sim.run_op(&mut back, o)?;
    }
    sim.summary.gradients = bw.backward.param_grads.len();
    Ok(sim.summary)
}

/// How many values a check of `graph` (and its backward graph) holds at
/// most: every tensor densely and every device's block of it, as many
/// `f64`s. The simulator is meant for small configs of a model; a caller
/// can refuse a graph whose footprint is out of reach.
pub fn footprint(graph: &Graph, prop: &Propagation, backward: Option<BackwardPlan<'_>>) -> u64 {
    let one = |graph: &Graph, prop: &Propagation| -> u64 {
        let mesh = graph.mesh();
        let devices = devices(mesh);
        graph
            .tensor_ids()
            .map(|t| {
                let shape = graph.shape(t);
                let numel = |s: &[usize]| s.iter().product::<usize>() as u64;
                let blocks: u64 = devices
                    .iter()
                    .map(|d| {
                        let r = ranges(shape, &prop.attr(t).dims_mapping, mesh, d);
                        r.iter().map(|r| (r.end - r.start) as u64).product::<u64>()
                    })
                    .sum();
                numel(shape) + blocks
            })
            .sum()
    };
    one(graph, prop) + backward.map_or(0, |b| one(&b.backward.graph, b.prop))
}

/// The dense value of a graph input: floats of both signs below 1 in
/// magnitude, distinct; an embedding's ids below its table's rows; other
/// integers counting up from 0 (positions); booleans true.
fn input_value(graph: &Graph, t: TensorId, elem: Elem) -> Tensor {
    let shape = graph.shape(t);
    match elem {
        Elem::Float => Tensor::probe(shape, 1 + t.0 as u64, Values::NearOne).map(|v| v * 0.5),
        Elem::Bool => Tensor::full(shape, 1.0),
        Elem::Int => match id_rows(graph, t) {
            Some(rows) => {
                let mut k = 0u64;
                Tensor::from_fn(shape, |_| {
                    k += 1;
                    (splitmix(k ^ (t.0 as u64) << 20) % rows.max(1) as u64) as f64
                })
            }
            None => {
                let mut k = 0.0;
                Tensor::from_fn(shape, |_| {
                    k += 1.0;
                    k - 1.0
                })
            }
        },
    }
}

/// A constant's value.
fn constant(shape: &[usize], init: Init) -> Tensor {
    match init {
        Init::Full(v) => Tensor::full(shape, v),
        Init::Arange { start, step } => {
            let mut k = 0.0;
            Tensor::from_fn(shape, |_| {
                k += 1.0;
                start + step * (k - 1.0)
            })
        }
    }
}

/// The rows of the table an embedding reads `t` as ids of, if one does.
fn id_rows(graph: &Graph, t: TensorId) -> Option<usize> {
    for &o in &graph.tensor(t).consumers {
        let op = graph.op(o);
        let (ids, table) = match op.rule.as_str() {
            "aten.embedding" => (1, 0),
            "embedding" | "lookup_table_v2" => (0, 1),
            _ => continue,
        };
        if graph.inputs(o).get(ids) == Some(&t) {
            return graph.inputs(o).get(table).map(|&w| graph.shape(w)[0]);
        }
    }
    None
}

/// One graph's run: its values, densely and on the mesh.
struct State<'g> {
    graph: &'g Graph,
    prop: &'g Propagation,
    phase: Phase,
    /// The plan's reshards by op and edge.
    reshards: HashMap<(OpId, Edge), &'g Reshard>,
    elems: Vec<Elem>,
    dense: Vec<Option<Tensor>>,
    dist: Vec<Option<Dist>>,
    /// Conversions the plan made, shared by the readers that need them.
    converted: HashMap<(TensorId, DistAttr), Dist>,
    /// What each forward op read, as it read it (its saved inputs).
    saved: HashMap<(OpId, usize), Dist>,
}

impl<'g> State<'g> {
    fn new(
        graph: &'g Graph,
        prop: &'g Propagation,
        plan: &'g ReshardPlan,
        elems: Vec<Elem>,
        phase: Phase,
    ) -> State<'g> {
        let n = graph.tensors().len();
        State {
            graph,
            prop,
            phase,
            reshards: plan.reshards.iter().map(|r| ((r.op, r.edge), r)).collect(),
            elems,
            dense: vec![None; n],
            dist: vec![None; n],
            converted: HashMap::new(),
            saved: HashMap::new(),
        }
    }

    /// Input `t` holds `dense`, laid out as propagation says.
    fn set_input(&mut self, sim: &Sim<'_>, t: TensorId, dense: Tensor) {
        self.dist[t.index()] = Some(Dist::scatter(
            &dense,
            self.prop.attr(t),
            sim.mesh,
            sim.devices,
        ));
        self.dense[t.index()] = Some(dense);
    }
}

struct Sim<'a> {
    mesh: &'a Mesh,
    devices: &'a [Device],
    registry: &'a Registry,
    summary: Summary,
}

/// The report of op `o` in `state`.
fn at(
    state: &State<'_>,
    o: OpId,
    tensor: Option<TensorId>,
    moment: Option<Moment>,
    layout: Option<&DistAttr>,
    finding: Finding,
) -> Divergence {
    let op = state.graph.op(o);
    Divergence {
        phase: state.phase,
        op: op.name.clone(),
        rule: op.rule.clone(),
        tensor: tensor.map_or(String::new(), |t| state.graph.tensor(t).name.clone()),
        moment,
        layout: layout.cloned(),
        finding,
    }
}

impl Sim<'_> {
    /// Compares `value` (tensor `t`) with the dense run: where it differs,
    /// the first wrong element.
    fn compare(&mut self, state: &State<'_>, t: TensorId, value: &Dist) -> Result<(), Wrong> {
        let dense = state.dense[t.index()]
            .as_ref()
            .expect("dense values exist before they are compared");
        match value.verify(dense, self.mesh, self.devices) {
            Ok(e) => {
                self.summary.max_error = self.summary.max_error.max(e);
                Ok(())
            }
            Err(Mismatch {
                device,
                index,
                got,
                want,
            }) => {
                let device = self.devices[device].clone();
                let block = ranges(dense.shape(), &value.attr.dims_mapping, self.mesh, &device);
                Err(Wrong {
                    device,
                    index,
                    block,
                    got,
                    want,
                })
            }
        }
    }

    /// Compares `value` (tensor `t`) with the dense run, counting it.
    fn verify(
        &mut self,
        state: &State<'_>,
        o: OpId,
        t: TensorId,
        moment: Moment,
        value: &Dist,
    ) -> Result<(), Divergence> {
        self.summary.compared += 1;
        self.compare(state, t, value).map_err(|w| {
            at(
                state,
                o,
                Some(t),
                Some(moment),
                Some(&value.attr),
                Finding::WrongValue(w),
            )
        })
    }

    /// A tensor the plan leaves laid out as `held` where it must be as
    /// `value.attr` says: fine only if the blocks the devices hold are
    /// already right under that layout.
    fn unplanned(
        &mut self,
        state: &State<'_>,
        o: OpId,
        t: TensorId,
        moment: Moment,
        held: &DistAttr,
        value: &Dist,
    ) -> Result<(), Divergence> {
        self.compare(state, t, value).map_err(|wrong| {
            let finding = Finding::Unplanned {
                held: held.clone(),
                wrong,
            };
            at(state, o, Some(t), Some(moment), Some(&value.attr), finding)
        })
    }

    /// Runs a reshard's steps on `value` (tensor `t`), counting them.
    fn reshard(
        &mut self,
        state: &State<'_>,
        r: &Reshard,
        value: &Dist,
    ) -> Result<Dist, Divergence> {
        let shape = state.graph.shape(r.tensor);
        let mut v = value.clone();
        for (step, _) in &r.steps {
            v = v
                .step(step, &r.to, shape, self.mesh, self.devices)
                .map_err(|message| {
                    at(
                        state,
                        r.op,
                        Some(r.tensor),
                        None,
                        Some(&v.attr),
                        Finding::Step { message },
                    )
                })?;
            self.summary.steps += 1;
            self.summary.collectives += usize::from(step.communicates());
        }
        if v.attr != r.to {
            let message = format!("its steps reach {}, not {}", v.attr, r.to);
            return Err(at(
                state,
                r.op,
                Some(r.tensor),
                None,
                Some(&v.attr),
                Finding::Step { message },
            ));
        }
        Ok(v)
    }

    fn run_op(&mut self, state: &mut State<'_>, o: OpId) -> Result<(), Divergence> {
        let graph = state.graph;
        let op = graph.op(o);
        let answer = spmd_graph::answer(graph, state.prop, o)
            .map_err(|e| at(state, o, None, None, None, Finding::Rule(e.to_string())))?;
        let Some(kernel) = kernels::kernel(&op.rule) else {
            return Err(at(state, o, None, None, None, Finding::NoKernel));
        };
        // The op's inputs as it reads them.
        let mut used: Vec<Dist> = Vec::with_capacity(graph.inputs(o).len());
        for (i, &t) in graph.inputs(o).iter().enumerate() {
            let current = state.dist[t.index()]
                .clone()
                .expect("an op's inputs exist before it runs");
            let need = &answer.inputs[i];
            let value = if current.attr == *need {
                current
            } else if let Some(r) = state.reshards.get(&(o, Edge::Input(i))).copied() {
                let v = self.reshard(state, r, &current)?;
                self.verify(state, o, t, Moment::Read(i), &v)?;
                state.converted.insert((t, need.clone()), v.clone());
                v
            } else if let Some(v) = state.converted.get(&(t, need.clone())) {
                v.clone()
            } else {
                // No reshard in the plan: the devices read what they hold,
                // as if it were laid out as the op requires.
                let read = Dist {
                    attr: need.clone(),
                    blocks: current.blocks.clone(),
                };
                self.unplanned(state, o, t, Moment::Read(i), &current.attr, &read)?;
                read
            };
            if state.phase == Phase::Forward {
                state.saved.insert((o, i), value.clone());
            }
            used.push(value);
        }
        let outputs = self.compute(state, o, kernel, &used, &answer.outputs)?;
        self.summary.ops += 1;
        for (k, (&t, (dense, value))) in graph.outputs(o).iter().zip(outputs).enumerate() {
            state.dense[t.index()] = Some(dense);
            self.verify(state, o, t, Moment::Computed(k), &value)?;
            let target = state.prop.attr(t).clone();
            let value = match state.reshards.get(&(o, Edge::Output(k))).copied() {
                _ if value.attr == target => value,
                Some(r) => {
                    let v = self.reshard(state, r, &value)?;
                    self.verify(state, o, t, Moment::Placed(k), &v)?;
                    v
                }
                None => {
                    let placed = Dist {
                        attr: target,
                        blocks: value.blocks.clone(),
                    };
                    self.unplanned(state, o, t, Moment::Placed(k), &value.attr, &placed)?;
                    placed
                }
            };
            // A result wanted partial was verified against its layout above.
            if graph.result_wanted_whole(t) && value.attr.partial.is_partial() {
                let Some(r) = state.reshards.get(&(o, Edge::Result(k))).copied() else {
                    return Err(at(
                        state,
                        o,
                        Some(t),
                        Some(Moment::Result),
                        Some(&value.attr),
                        Finding::Partial,
                    ));
                };
                let whole = self.reshard(state, r, &value)?;
                debug_assert_eq!(whole.attr, complete(&value.attr));
                self.verify(state, o, t, Moment::Result, &whole)?;
            }
            state.dist[t.index()] = Some(value);
        }
        Ok(())
    }

    /// The op's outputs, densely and on every device (laid out as the rule
    /// says it produces them).
    fn compute(
        &mut self,
        state: &State<'_>,
        o: OpId,
        kernel: Kernel,
        used: &[Dist],
        made: &[DistAttr],
    ) -> Result<Vec<(Tensor, Dist)>, Divergence> {
        let graph = state.graph;
        let op = graph.op(o);
        let shape = |t: TensorId| graph.shape(t);
        // The op's input slots: the absent ones empty.
        let (n_forward, grads) = match graph.kind(o) {
            OpKind::Forward => (graph.inputs(o).len(), 0),
            OpKind::Grad { forward_inputs } => {
                (forward_inputs, graph.inputs(o).len() - forward_inputs)
            }
        };
        let slots = n_forward + op.absent.bits().count_ones() as usize;
        let mut slot_of = Vec::with_capacity(n_forward);
        for j in 0..slots {
            if !op.absent.contains(j) {
                slot_of.push(j);
            }
        }
        let no_grad = match graph.kind(o) {
            OpKind::Forward => TensorSet::EMPTY,
            OpKind::Grad { .. } => {
                self.registry
                    .get(&op.rule)
                    .map_err(|e| at(state, o, None, None, None, Finding::Rule(e.to_string())))?
                    .no_grad
            }
        };
        // The grad op's outputs, by the slot whose gradient each is.
        let mut grad_slot = Vec::new();
        if grads > 0 || matches!(graph.kind(o), OpKind::Grad { .. }) {
            for j in 0..slots {
                if !no_grad.contains(j) && !op.absent.contains(j) {
                    grad_slot.push(j);
                }
            }
            // A grad op may list fewer outputs (the tail of its slots).
            grad_slot.truncate(graph.outputs(o).len());
        }
        let run = |blocks: &dyn Fn(usize) -> Vec<Range<usize>>,
                   values: &dyn Fn(usize) -> Tensor,
                   outs: &dyn Fn(usize) -> Vec<Range<usize>>|
         -> Result<Vec<Tensor>, String> {
            let vals: Vec<Tensor> = (0..graph.inputs(o).len()).map(values).collect();
            let bls: Vec<Vec<Range<usize>>> = (0..graph.inputs(o).len()).map(blocks).collect();
            let args: Vec<Arg<'_>> = graph
                .inputs(o)
                .iter()
                .enumerate()
                .map(|(i, &t)| Arg {
                    value: &vals[i],
                    block: &bls[i],
                    shape: shape(t),
                    elem: state.elems[t.index()],
                })
                .collect();
            let out_blocks: Vec<Vec<Range<usize>>> =
                (0..graph.outputs(o).len()).map(outs).collect();
            let wants: Vec<Want<'_>> = graph
                .outputs(o)
                .iter()
                .zip(&out_blocks)
                .map(|(&t, b)| Want {
                    shape: shape(t),
                    block: b,
                })
                .collect();
            let mut inputs: Vec<Option<Arg<'_>>> = vec![None; slots];
            for (k, &j) in slot_of.iter().enumerate() {
                inputs[j] = Some(args[k]);
            }
            let outputs = match graph.kind(o) {
                OpKind::Forward => (kernel.forward)(&Call {
                    op: &op.rule,
                    attrs: &op.attrs,
                    inputs: &inputs,
                    outputs: &wants,
                })?,
                OpKind::Grad { .. } => {
                    let grad = kernel.grad.ok_or("no gradient kernel for this op")?;
                    let mut input_grads: Vec<Option<Want<'_>>> = vec![None; slots];
                    for (k, &j) in grad_slot.iter().enumerate() {
                        input_grads[j] = Some(wants[k].clone());
                    }
                    let out = grad(&GradCall {
                        op: &op.rule,
                        attrs: &op.attrs,
                        inputs: &inputs,
                        output_grads: &args[n_forward..],
                        input_grads: &input_grads,
                    })?;
                    grad_slot
                        .iter()
                        .map(|&j| {
                            out.get(j)
                                .cloned()
                                .flatten()
                                .ok_or_else(|| format!("no gradient for input {j}"))
                        })
                        .collect::<Result<_, _>>()?
                }
            };
            if outputs.len() != wants.len() {
                return Err(format!(
                    "{} outputs computed for {}",
                    outputs.len(),
                    wants.len()
                ));
            }
            for (k, (t, w)) in outputs.iter().zip(&wants).enumerate() {
                if t.shape() != w.local().as_slice() {
                    return Err(format!(
                        "output {k} computed with shape {:?} where its block is {:?}",
                        t.shape(),
                        w.local()
                    ));
                }
            }
            Ok(outputs)
        };
        // Dense: whole tensors.
        let dense = run(
            &|i| whole_block(shape(graph.inputs(o)[i])),
            &|i| {
                state.dense[graph.inputs(o)[i].index()]
                    .clone()
                    .expect("inputs have dense values")
            },
            &|k| whole_block(shape(graph.outputs(o)[k])),
        )
        .map_err(|message| {
            at(
                state,
                o,
                None,
                None,
                None,
                Finding::Cannot {
                    device: None,
                    message,
                },
            )
        })?;
        // Every device: its blocks.
        let mut blocks: Vec<Vec<Tensor>> =
            vec![Vec::with_capacity(self.devices.len()); graph.outputs(o).len()];
        for d in self.devices {
            let out = run(
                &|i| {
                    ranges(
                        shape(graph.inputs(o)[i]),
                        &used[i].attr.dims_mapping,
                        self.mesh,
                        d,
                    )
                },
                &|i| used[i].blocks[d.rank].clone(),
                &|k| {
                    ranges(
                        shape(graph.outputs(o)[k]),
                        &made[k].dims_mapping,
                        self.mesh,
                        d,
                    )
                },
            )
            .map_err(|message| {
                at(
                    state,
                    o,
                    None,
                    None,
                    None,
                    Finding::Cannot {
                        device: Some(d.clone()),
                        message,
                    },
                )
            })?;
            for (k, t) in out.into_iter().enumerate() {
                blocks[k].push(t);
            }
        }
        Ok(dense
            .into_iter()
            .zip(blocks)
            .zip(made)
            .map(|((d, b), m)| {
                (
                    d,
                    Dist {
                        attr: m.clone(),
                        blocks: b,
                    },
                )
            })
            .collect())
    }
}
