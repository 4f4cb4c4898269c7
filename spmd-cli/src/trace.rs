//! A [`Trace`] that records every step of an inference call, and the
//! literal notations of a registered op that reproduce its answer.

use serde_json::{Value, json};
use spmd_core::json::Direction;
use spmd_core::{
    AxisName, Einsum, Mesh, MeshDim, MeshSet, ReduceType, RuleInfo, RuleResult, Sharding,
    SpmdError, TensorRef, Trace,
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
    axes: Vec<(AxisName, Sharding)>,
}

impl Trace for Recorder {
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
    pub fn text(&self) -> String {
        match self {
            Event::Merged {
                axis,
                tensor,
                dim,
                given,
                before,
                now,
            } => {
                let what = mesh_dims_text(given.as_slice());
                if before.is_replicated() {
                    format!("{tensor} dim {dim}: axis {axis} takes {what}")
                } else if before == now && given == now {
                    format!("{tensor} dim {dim}: {what} agrees with axis {axis} (already {now})")
                } else if before == now {
                    format!(
                        "{tensor} dim {dim}: {what} is a prefix of axis {axis}'s {now}, which stays"
                    )
                } else {
                    format!("{tensor} dim {dim}: {what} extends axis {axis} from {before} to {now}")
                }
            }
            Event::Conflict {
                mesh_dim,
                kept,
                lost,
            } => format!(
                "mesh dim {mesh_dim} is claimed by axis {kept} and axis {lost}: {kept} keeps it (it claimed it first), {lost} loses it"
            ),
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
            } => format!(
                "output {output} has no axis {axis}, which is sharded over {}: each device holds a partial result, so output {output} is partial {reduce} over {}",
                set_text(*mesh_dims),
                set_text(*mesh_dims)
            ),
        }
    }

    pub fn json(&self) -> Value {
        let axis = |a: &AxisName| a.to_string().trim_matches('`').to_string();
        let dims = |s: &Sharding| s.as_slice().to_vec();
        match self {
            Event::Merged {
                axis: a,
                tensor,
                dim,
                given,
                before,
                now,
            } => json!({"step": "merge", "axis": axis(a), "tensor": tensor.to_string(), "dim": dim,
                        "given": dims(given), "before": dims(before), "now": dims(now)}),
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
        }
    }
}

/// The literal notations of `info` whose classic einsum rule gives the same
/// answer as the registered rule on this call (a registered rule picks one of
/// its notations from its attributes, which the registry does not expose).
pub fn matching_notations(
    info: &RuleInfo,
    mesh: &Mesh,
    direction: Direction,
    ins: &[(Vec<usize>, spmd_core::DistAttr)],
    outs: &[(Vec<usize>, spmd_core::DistAttr)],
    answer: &Result<RuleResult, SpmdError>,
) -> Vec<&'static str> {
    info.notations
        .iter()
        .copied()
        .filter(|n| {
            let Ok(e) = Einsum::new(n) else { return false };
            let got = crate::call::run_parts(&e, mesh, direction, ins, outs);
            match (&got, answer) {
                (Ok(a), Ok(b)) => a == b,
                _ => false,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use spmd_core::{DistAttr, Spec};

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
        let texts: Vec<String> = rec.events.iter().map(Event::text).collect();
        assert_eq!(texts[0], "input 0 dim 0: axis `m` takes mesh dim 1");
        assert_eq!(texts[1], "input 0 dim 1: axis `k` takes mesh dim 0");
        assert!(
            texts[2].starts_with("input 1 dim 1: axis `n` takes mesh dim 0"),
            "{texts:?}"
        );
        assert!(
            texts.iter().any(|t| t.contains("mesh dim 0 is claimed by axis `k` and axis `n`: `k` keeps it")),
            "{texts:?}"
        );
        assert!(
            texts.iter().any(|t| t.contains("output 0 has no axis `k`")
                && t.contains("partial SUM over mesh dim 0")),
            "{texts:?}"
        );
        assert_eq!(rec.events[0].json()["axis"], "m");
    }

    #[test]
    fn merge_wording() {
        let m = |given: &[u8], before: &[u8], now: &[u8]| {
            Event::Merged {
                axis: AxisName::Label('k'),
                tensor: TensorRef::input(1),
                dim: 0,
                given: Sharding::co(given).unwrap(),
                before: Sharding::co(before).unwrap(),
                now: Sharding::co(now).unwrap(),
            }
            .text()
        };
        assert!(m(&[0], &[0], &[0]).contains("agrees with axis `k`"));
        assert!(m(&[0], &[0, 1], &[0, 1]).contains("is a prefix of axis `k`'s [0,1]"));
        assert!(m(&[0, 1], &[0], &[0, 1]).contains("extends axis `k` from 0 to [0,1]"));
    }
}
