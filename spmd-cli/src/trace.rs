//! A [`Trace`] that records every step of an inference call, and the words
//! for each step.

use serde_json::{Value, json};
use spmd_conformance::Direction;
use spmd_core::{
    AxisName, MeshDim, MeshSet, ReduceType, Role, RuleInfo, Sharding, TensorRef, Trace,
};

/// One recorded step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    Merged {
        axis: AxisName,
        tensor: TensorRef,
        dim: usize,
        given: Sharding,
        before: Sharding,
        now: Sharding,
    },
    Unsharded {
        tensor: TensorRef,
        dim: usize,
        given: Sharding,
    },
    MissingAxis {
        tensor: TensorRef,
        dim: usize,
        axis: AxisName,
    },
    Conflict {
        mesh_dim: MeshDim,
        kept: AxisName,
        lost: AxisName,
    },
    NotDivisible {
        axis: AxisName,
        extent: usize,
        mesh_dim: MeshDim,
    },
    Partial {
        output: usize,
        axis: AxisName,
        mesh_dims: MeshSet,
        reduce: ReduceType,
    },
}

/// Records the steps, remembering each axis's sharding so that a merge can
/// say what it changed.
#[derive(Default)]
pub struct Recorder {
    pub events: Vec<Event>,
    /// The notation the call ran on, written out.
    pub notation: Option<String>,
    axes: Vec<(AxisName, Sharding)>,
}

impl Trace for Recorder {
    fn plan(&mut self, plan: &spmd_core::Plan<'_>) {
        self.notation = Some(plan.notation_text());
    }
    fn merged(
        &mut self,
        axis: AxisName,
        tensor: TensorRef,
        dim: usize,
        given: Sharding,
        now: Sharding,
    ) {
        let before = match self.axes.iter_mut().find(|(a, _)| *a == axis) {
            Some((_, s)) => std::mem::replace(s, now),
            None => {
                self.axes.push((axis, now));
                Sharding::REPLICATED
            }
        };
        self.events.push(Event::Merged {
            axis,
            tensor,
            dim,
            given,
            before,
            now,
        });
    }
    fn unsharded(&mut self, tensor: TensorRef, dim: usize, given: Sharding) {
        self.events.push(Event::Unsharded { tensor, dim, given });
    }
    fn missing_axis(&mut self, tensor: TensorRef, dim: usize, axis: AxisName) {
        self.events.push(Event::MissingAxis { tensor, dim, axis });
    }
    fn conflict(&mut self, mesh_dim: MeshDim, kept: AxisName, lost: AxisName) {
        self.events.push(Event::Conflict {
            mesh_dim,
            kept,
            lost,
        });
    }
    fn not_divisible(&mut self, axis: AxisName, extent: usize, mesh_dim: MeshDim) {
        self.events.push(Event::NotDivisible {
            axis,
            extent,
            mesh_dim,
        });
    }
    fn partial(&mut self, output: usize, axis: AxisName, mesh_dims: MeshSet, reduce: ReduceType) {
        self.events.push(Event::Partial {
            output,
            axis,
            mesh_dims,
            reduce,
        });
    }
}

/// How an explanation names the tensors of a call: by position, followed by
/// the rule's name for the tensor when it declares one (`input 0 (x)`).
#[derive(Clone, Debug)]
pub struct Labels {
    pub direction: Direction,
    inputs: &'static [&'static str],
    outputs: &'static [&'static str],
    /// Inputs without a gradient (bit `i` = input `i`).
    no_grad: spmd_core::TensorSet,
}

impl Labels {
    /// Positions only (an einsum's tensors have no names).
    pub fn plain(direction: Direction) -> Labels {
        Labels {
            direction,
            inputs: &[],
            outputs: &[],
            no_grad: spmd_core::TensorSet::EMPTY,
        }
    }

    /// The names a registered rule declares.
    pub fn of(info: &RuleInfo, direction: Direction) -> Labels {
        Labels {
            direction,
            inputs: info.inputs,
            outputs: info.outputs,
            no_grad: info.no_grad,
        }
    }

    fn named(base: String, name: Option<&&str>) -> String {
        match name {
            Some(n) => format!("{base} ({n})"),
            None => base,
        }
    }

    pub fn input(&self, i: usize) -> String {
        Labels::named(format!("input {i}"), self.inputs.get(i))
    }

    /// An output; in grad inference, the grad of an output.
    pub fn output(&self, o: usize) -> String {
        let base = match self.direction {
            Direction::Grad => format!("out_grad {o}"),
            _ => format!("output {o}"),
        };
        Labels::named(base, self.outputs.get(o))
    }

    /// The grad of input `i`.
    pub fn grad(&self, i: usize) -> String {
        Labels::named(format!("input {i} grad"), self.inputs.get(i))
    }

    /// The inputs that have a grad, in the order grad inference returns them.
    pub fn grad_inputs(&self, n_inputs: usize) -> Vec<usize> {
        (0..n_inputs)
            .filter(|&i| !self.no_grad.contains(i))
            .collect()
    }

    pub fn tensor(&self, t: TensorRef) -> String {
        match t.role {
            Role::Input => self.input(t.index),
            Role::Output => self.output(t.index),
        }
    }
}

pub fn mesh_dims_text(s: &[MeshDim]) -> String {
    match s {
        [] => "no mesh dim".into(),
        [d] => format!("mesh dim {d}"),
        ds => format!(
            "mesh dims {} (co-sharded, major first)",
            ds.iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(",")
        ),
    }
}

/// `axis `k``, or what a never-sharded dim is.
fn axis_text(a: AxisName) -> String {
    match a {
        AxisName::Unsharded => "a dim that never carries a sharding".into(),
        a => format!("axis {a}"),
    }
}

fn set_text(s: MeshSet) -> String {
    let v: Vec<MeshDim> = s.iter().collect();
    match v.as_slice() {
        [d] => format!("mesh dim {d}"),
        ds => format!(
            "mesh dims {}",
            ds.iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(",")
        ),
    }
}

impl Event {
    /// The step in words.
    pub fn text(&self, labels: &Labels) -> String {
        match self {
            Event::Merged {
                axis,
                tensor,
                dim,
                given,
                before,
                now,
            } => {
                let tensor = labels.tensor(*tensor);
                let what = mesh_dims_text(&given.iter().collect::<Vec<_>>());
                if before.is_replicated() {
                    format!("{tensor} dim {dim}: axis {axis} takes {what}")
                } else if before == now && given == now {
                    format!("{tensor} dim {dim}: {what} agrees with axis {axis} (already {now})")
                } else if before == now && now.starts_with(given) {
                    format!(
                        "{tensor} dim {dim}: {what} is a prefix of axis {axis}'s {now}, which stays"
                    )
                } else if before == now {
                    format!(
                        "{tensor} dim {dim}: {what} differs from axis {axis}'s {now}, the earlier claim, which stays: this tensor is resharded to it"
                    )
                } else {
                    format!("{tensor} dim {dim}: {what} extends axis {axis} from {before} to {now}")
                }
            }
            Event::Unsharded { tensor, dim, given } => format!(
                "{} dim {dim}: {} is dropped: this dim never carries a sharding (a `1`, a broadcast size-1 dim, a diagonal, a minor factor of a compound, or an axis the rule keeps whole); it is replicated, but its mesh dims stay claimed against later axes",
                labels.tensor(*tensor),
                mesh_dims_text(&given.iter().collect::<Vec<_>>())
            ),
            Event::MissingAxis { tensor, dim, axis } => format!(
                "{} dim {dim}: axis {axis} is in no output, so no output says how to shard it: it is replicated",
                labels.tensor(*tensor)
            ),
            Event::Conflict {
                mesh_dim,
                kept,
                lost,
            } => {
                let (kept, lost) = (axis_text(*kept), axis_text(*lost));
                format!(
                    "mesh dim {mesh_dim} is claimed by {kept} and {lost}: {kept} keeps it, {lost} loses it"
                )
            }
            Event::NotDivisible {
                axis,
                extent,
                mesh_dim,
            } => format!(
                "axis {axis} (extent {extent}) drops mesh dim {mesh_dim}: its shards would be uneven"
            ),
            Event::Partial {
                output,
                axis,
                mesh_dims,
                reduce,
            } => {
                let dims = set_text(*mesh_dims);
                if labels.direction == Direction::Grad {
                    let g = labels.grad(*output);
                    format!(
                        "{g}: the gradient's operands carry axis {axis}, sharded over {dims}, and input {output} has none: each device sums its own part, so {g} is partial {reduce} over {dims}"
                    )
                } else {
                    let o = labels.output(*output);
                    format!(
                        "{o} has no axis {axis}, which is sharded over {dims}: each device holds a partial result, so {o} is partial {reduce} over {dims}"
                    )
                }
            }
        }
    }

    /// The step as JSON.
    pub fn json(&self, labels: &Labels) -> Value {
        let axis = |a: &AxisName| a.to_string().trim_matches('`').to_string();
        let dims = |s: &Sharding| s.iter().collect::<Vec<_>>();
        let mut v = match self {
            Event::Merged {
                axis: a,
                tensor,
                dim,
                given,
                before,
                now,
            } => {
                json!({"step": "merge", "axis": axis(a), "tensor": labels.tensor(*tensor), "dim": dim,
                        "given": dims(given), "before": dims(before), "now": dims(now)})
            }
            Event::Unsharded { tensor, dim, given } => {
                json!({"step": "unsharded", "tensor": labels.tensor(*tensor), "dim": dim, "given": dims(given)})
            }
            Event::MissingAxis {
                tensor,
                dim,
                axis: a,
            } => {
                json!({"step": "missing_axis", "tensor": labels.tensor(*tensor), "dim": dim, "axis": axis(a)})
            }
            Event::Conflict {
                mesh_dim,
                kept,
                lost,
            } => {
                json!({"step": "conflict", "mesh_dim": mesh_dim, "kept": axis(kept), "lost": axis(lost)})
            }
            Event::NotDivisible {
                axis: a,
                extent,
                mesh_dim,
            } => {
                json!({"step": "not_divisible", "axis": axis(a), "extent": extent, "mesh_dim": mesh_dim})
            }
            Event::Partial {
                output,
                axis: a,
                mesh_dims,
                reduce,
            } => json!({"step": "partial", "output": output, "axis": axis(a),
                        "mesh_dims": mesh_dims.iter().collect::<Vec<_>>(), "reduce": reduce}),
        };
        v["text"] = Value::String(self.text(labels));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spmd_core::{DistAttr, Einsum, Mesh, Spec, SpmdRuleExt};

    #[test]
    fn records_a_matmul() {
        let mesh = Mesh::new(&[2, 4]).unwrap();
        let x = DistAttr::from_paddle(&[1, 0]).unwrap();
        let y = DistAttr::from_paddle(&[-1, 0]).unwrap();
        let mut rec = Recorder::default();
        Einsum::new("mk,kn->mn")
            .unwrap()
            .forward_traced(
                &mesh,
                &[Spec::new(&[64, 32], &x), Spec::new(&[32, 48], &y)],
                &mut rec,
            )
            .unwrap();
        let labels = Labels::plain(Direction::Forward);
        let texts: Vec<String> = rec.events.iter().map(|e| e.text(&labels)).collect();
        assert_eq!(texts[0], "input 0 dim 0: axis `m` takes mesh dim 1");
        assert_eq!(texts[1], "input 0 dim 1: axis `k` takes mesh dim 0");
        assert!(
            texts[2].starts_with("input 1 dim 1: axis `n` takes mesh dim 0"),
            "{texts:?}"
        );
        assert!(
            texts
                .iter()
                .any(|t| t
                    .contains("mesh dim 0 is claimed by axis `k` and axis `n`: axis `k` keeps it")),
            "{texts:?}"
        );
        assert!(
            texts.iter().any(|t| t.contains("output 0 has no axis `k`")
                && t.contains("partial SUM over mesh dim 0")),
            "{texts:?}"
        );
        assert_eq!(rec.events[0].json(&labels)["axis"], "m");
    }

    #[test]
    fn records_unsharded_dims_and_missing_axes() {
        let mesh = Mesh::new(&[2, 2]).unwrap();
        let diag = DistAttr::from_paddle(&[0, 1]).unwrap();
        let mut rec = Recorder::default();
        let e = Einsum::new("ii->i").unwrap();
        e.forward_traced(&mesh, &[Spec::new(&[4, 4], &diag)], &mut rec)
            .unwrap();
        let labels = Labels::plain(Direction::Forward);
        assert!(
            rec.events.iter().any(|e| e
                .text(&labels)
                .starts_with("input 0 dim 1: mesh dim 1 is dropped")),
            "{:?}",
            rec.events
        );

        let mut rec = Recorder::default();
        let out = DistAttr::from_paddle(&[0, -1]).unwrap();
        spmd_core::SpmdRuleExt::backward_traced(
            &Einsum::new("mk,kn->mn").unwrap(),
            &mesh,
            &[&[4, 6], &[6, 8]],
            &[Spec::new(&[4, 8], &out)],
            &mut rec,
        )
        .unwrap();
        let labels = Labels::plain(Direction::Backward);
        let texts: Vec<String> = rec.events.iter().map(|e| e.text(&labels)).collect();
        assert!(
            texts.contains(
                &"input 0 dim 1: axis `k` is in no output, so no output says how to shard it: it is replicated".to_string()
            ),
            "{texts:?}"
        );
    }

    #[test]
    fn labels_use_the_rules_names() {
        let info = spmd_ops::builtins().get("matmul").copied().unwrap();
        let l = Labels::of(&info, Direction::Grad);
        assert_eq!(l.tensor(TensorRef::input(1)), "input 1 (y)");
        assert_eq!(l.tensor(TensorRef::output(0)), "out_grad 0 (out)");
        assert_eq!(l.grad(0), "input 0 grad (x)");
        assert_eq!(l.grad_inputs(2), vec![0, 1]);
    }

    #[test]
    fn merge_wording() {
        let labels = Labels::plain(Direction::Forward);
        let m = |given: &[u8], before: &[u8], now: &[u8]| {
            Event::Merged {
                axis: AxisName::Label('k'),
                tensor: TensorRef::input(1),
                dim: 0,
                given: Sharding::co(given).unwrap(),
                before: Sharding::co(before).unwrap(),
                now: Sharding::co(now).unwrap(),
            }
            .text(&labels)
        };
        assert!(m(&[0], &[0], &[0]).contains("agrees with axis `k`"));
        assert!(m(&[0], &[0, 1], &[0, 1]).contains("is a prefix of axis `k`'s [0,1]"));
        assert!(m(&[0, 1], &[0], &[0, 1]).contains("extends axis `k` from 0 to [0,1]"));
    }
}
