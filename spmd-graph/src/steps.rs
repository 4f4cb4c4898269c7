//! What it takes to turn one layout into another: the collectives (or local
//! steps) between a tensor's given dist attr and the one a rule requires.
//! (Shared by the graph's reshard plan and the `spmd` CLI's reports.)
//!
//! Pure logic over a pair of [`DistAttr`]s. Each mesh dim is looked at on its
//! own: where it splits the tensor (which dim, at which co-shard position) or
//! whether it is partial, before and after.
//!
//! | before on mesh dim m        | after                      | step |
//! |-----------------------------|----------------------------|------|
//! | partial (r)                 | replicated                 | all-reduce r over m |
//! | partial (r)                 | splits dim d               | reduce-scatter r along d over m |
//! | partial (r)                 | partial (r') with r' != r  | all-reduce r, then mark partial r' |
//! | splits dim d                | replicated                 | all-gather along d over m |
//! | replicated                  | splits dim d               | local slice along d over m (no communication) |
//! | splits dim d                | splits dim e != d          | all-to-all over m, from dim d to dim e |
//! | splits dim d                | splits dim d, other place in the co-shard order | reorder of d's blocks (a permutation between devices) |
//! | replicated                  | partial (r)                | local: mark partial (one rank keeps the value) |
//! | splits dim d                | partial (r)                | all-gather along d over m, then mark partial |
//!
//! A tensor dim keeps a mesh dim in place only when everything before it in
//! the co-shard list is unchanged: going from `[[0,1]]` to `[[1]]` changes
//! which block every device holds along mesh dim 1 too. Steps are grouped (one
//! all-reduce per reduce type, one all-gather or slice per tensor dim) and
//! listed in a fixed order: reductions, all-to-alls, all-gathers, reorders,
//! slices, partial marks.

use std::fmt;

use serde::Serialize;
use spmd_core::{DistAttr, MeshDim, ReduceType};

/// One step of a reshard.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Step {
    /// Reduce partial values over these mesh dims; the result is replicated there.
    AllReduce {
        reduce: ReduceType,
        mesh_dims: Vec<MeshDim>,
    },
    /// Reduce partial values and keep only this device's block of `tensor_dim`.
    ReduceScatter {
        reduce: ReduceType,
        tensor_dim: usize,
        mesh_dims: Vec<MeshDim>,
    },
    /// Mesh dim `mesh_dim` stops splitting `from_dim` and splits `to_dim` instead.
    AllToAll {
        mesh_dim: MeshDim,
        from_dim: usize,
        to_dim: usize,
    },
    /// Gather the blocks of `tensor_dim` held along these mesh dims (sharded -> replicated).
    AllGather {
        tensor_dim: usize,
        mesh_dims: Vec<MeshDim>,
    },
    /// These mesh dims keep splitting `tensor_dim`, but in another co-shard
    /// position, so blocks move between devices.
    Reorder {
        tensor_dim: usize,
        mesh_dims: Vec<MeshDim>,
    },
    /// Keep only this device's block of `tensor_dim` (replicated -> sharded):
    /// no communication.
    Slice {
        tensor_dim: usize,
        mesh_dims: Vec<MeshDim>,
    },
    /// Make the value partial over these mesh dims (one rank keeps it, the
    /// others hold the reduction's identity): no communication.
    MakePartial {
        reduce: ReduceType,
        mesh_dims: Vec<MeshDim>,
    },
}

impl Step {
    /// Whether the step moves data between devices.
    pub fn communicates(&self) -> bool {
        !matches!(self, Step::Slice { .. } | Step::MakePartial { .. })
    }

    /// The step's kind as JSON spells it, in the step's own `kind` field
    /// and in a report's `counts` keys: `all_reduce`, `slice`, ...
    pub fn id(&self) -> &'static str {
        match self {
            Step::AllReduce { .. } => "all_reduce",
            Step::ReduceScatter { .. } => "reduce_scatter",
            Step::AllToAll { .. } => "all_to_all",
            Step::AllGather { .. } => "all_gather",
            Step::Reorder { .. } => "reorder",
            Step::Slice { .. } => "slice",
            Step::MakePartial { .. } => "make_partial",
        }
    }

    /// The name of the collective (or local step) in text: `all-reduce`.
    pub fn kind(&self) -> &'static str {
        match self {
            Step::AllReduce { .. } => "all-reduce",
            Step::ReduceScatter { .. } => "reduce-scatter",
            Step::AllToAll { .. } => "all-to-all",
            Step::AllGather { .. } => "all-gather",
            Step::Reorder { .. } => "reorder",
            Step::Slice { .. } => "local slice",
            Step::MakePartial { .. } => "make partial",
        }
    }
}

fn dims(ds: &[MeshDim]) -> String {
    match ds {
        [d] => format!("mesh dim {d}"),
        _ => {
            let list: Vec<String> = ds.iter().map(|d| d.to_string()).collect();
            format!("mesh dims {}", list.join(","))
        }
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::AllReduce { reduce, mesh_dims } => {
                write!(f, "all-reduce {reduce} over {}", dims(mesh_dims))
            }
            Step::ReduceScatter {
                reduce,
                tensor_dim,
                mesh_dims,
            } => write!(
                f,
                "reduce-scatter {reduce} along dim {tensor_dim} over {}",
                dims(mesh_dims)
            ),
            Step::AllToAll {
                mesh_dim,
                from_dim,
                to_dim,
            } => write!(
                f,
                "all-to-all over mesh dim {mesh_dim}: dim {from_dim} -> dim {to_dim}"
            ),
            Step::AllGather {
                tensor_dim,
                mesh_dims,
            } => write!(
                f,
                "all-gather along dim {tensor_dim} over {}",
                dims(mesh_dims)
            ),
            Step::Reorder {
                tensor_dim,
                mesh_dims,
            } => write!(
                f,
                "reorder dim {tensor_dim}'s blocks along {} (co-shard order changes)",
                dims(mesh_dims)
            ),
            Step::Slice {
                tensor_dim,
                mesh_dims,
            } => write!(
                f,
                "local slice along dim {tensor_dim} over {} (no communication)",
                dims(mesh_dims)
            ),
            Step::MakePartial { reduce, mesh_dims } => write!(
                f,
                "mark partial {reduce} over {} (no communication)",
                dims(mesh_dims)
            ),
        }
    }
}

/// Where one mesh dim is in one dist attr.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    Replicated,
    Partial(ReduceType),
    /// Splits tensor dim `dim`; `kept` = its position and everything before
    /// it in that dim's co-shard list are the same on both sides.
    Splits {
        dim: usize,
        kept: bool,
    },
}

fn place(a: &DistAttr, other: &DistAttr, m: MeshDim) -> Place {
    for (dim, s) in a.dims_mapping.as_slice().iter().enumerate() {
        if let Some(pos) = s.iter().position(|x| x == m) {
            let kept = other
                .dims_mapping
                .get(dim)
                .is_some_and(|o| o.prefix(pos + 1) == s.prefix(pos + 1));
            return Place::Splits { dim, kept };
        }
    }
    match a.partial.reduce_type(m) {
        Some(r) => Place::Partial(r),
        None => Place::Replicated,
    }
}

fn mesh_dims_of(a: &DistAttr) -> impl Iterator<Item = MeshDim> + '_ {
    a.dims_mapping
        .as_slice()
        .iter()
        .flat_map(|s| s.iter())
        .chain(a.partial.dims().iter())
}

/// The steps that turn `from` into `to` (empty when they are equal). Both
/// should have the same rank; extra dims on either side are compared as if
/// replicated on the other.
pub fn classify(from: &DistAttr, to: &DistAttr) -> Vec<Step> {
    let mut all: Vec<MeshDim> = mesh_dims_of(from).chain(mesh_dims_of(to)).collect();
    all.sort_unstable();
    all.dedup();

    let mut steps = Vec::new();
    let mut reduce: Vec<(ReduceType, Vec<MeshDim>)> = Vec::new();
    let mut scatter: Vec<((ReduceType, usize), Vec<MeshDim>)> = Vec::new();
    let mut a2a = Vec::new();
    let mut gather: Vec<(usize, Vec<MeshDim>)> = Vec::new();
    let mut reorder: Vec<(usize, Vec<MeshDim>)> = Vec::new();
    let mut slice: Vec<(usize, Vec<MeshDim>)> = Vec::new();
    let mut mark: Vec<(ReduceType, Vec<MeshDim>)> = Vec::new();

    fn add<K: PartialEq>(groups: &mut Vec<(K, Vec<MeshDim>)>, key: K, m: MeshDim) {
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(m),
            None => groups.push((key, vec![m])),
        }
    }

    for m in all {
        match (place(from, to, m), place(to, from, m)) {
            (Place::Replicated, Place::Replicated) => {}
            (Place::Partial(a), Place::Partial(b)) if a == b => {}
            (Place::Splits { kept: true, .. }, Place::Splits { kept: true, .. }) => {}
            (Place::Partial(r), Place::Replicated) => add(&mut reduce, r, m),
            (Place::Partial(r), Place::Splits { dim, .. }) => add(&mut scatter, (r, dim), m),
            (Place::Partial(r), Place::Partial(r2)) => {
                add(&mut reduce, r, m);
                add(&mut mark, r2, m);
            }
            (Place::Splits { dim, .. }, Place::Replicated) => add(&mut gather, dim, m),
            (Place::Splits { dim, .. }, Place::Partial(r)) => {
                add(&mut gather, dim, m);
                add(&mut mark, r, m);
            }
            (Place::Replicated, Place::Splits { dim, .. }) => add(&mut slice, dim, m),
            (Place::Replicated, Place::Partial(r)) => add(&mut mark, r, m),
            (Place::Splits { dim: d1, .. }, Place::Splits { dim: d2, .. }) if d1 != d2 => {
                a2a.push(Step::AllToAll {
                    mesh_dim: m,
                    from_dim: d1,
                    to_dim: d2,
                })
            }
            (Place::Splits { dim, .. }, Place::Splits { .. }) => add(&mut reorder, dim, m),
        }
    }

    // Slices go major to minor in the target's co-shard order, gathers minor
    // to major in the source's, so that each step is a contiguous one.
    let order = |a: &DistAttr, dim: usize, ms: &mut Vec<MeshDim>, rev: bool| {
        if let Some(s) = a.dims_mapping.get(dim) {
            ms.sort_by_key(|m| s.iter().position(|x| x == *m));
            if rev {
                ms.reverse();
            }
        }
    };
    for (dim, ms) in &mut gather {
        order(from, *dim, ms, true);
    }
    for (dim, ms) in &mut slice {
        order(to, *dim, ms, false);
    }
    gather.sort_by_key(|(d, _)| *d);
    slice.sort_by_key(|(d, _)| *d);
    reorder.sort_by_key(|(d, _)| *d);

    steps.extend(
        reduce
            .into_iter()
            .map(|(reduce, mesh_dims)| Step::AllReduce { reduce, mesh_dims }),
    );
    steps.extend(
        scatter
            .into_iter()
            .map(|((reduce, tensor_dim), mesh_dims)| Step::ReduceScatter {
                reduce,
                tensor_dim,
                mesh_dims,
            }),
    );
    steps.extend(a2a);
    steps.extend(
        gather
            .into_iter()
            .map(|(tensor_dim, mesh_dims)| Step::AllGather {
                tensor_dim,
                mesh_dims,
            }),
    );
    steps.extend(
        reorder
            .into_iter()
            .map(|(tensor_dim, mesh_dims)| Step::Reorder {
                tensor_dim,
                mesh_dims,
            }),
    );
    steps.extend(
        slice
            .into_iter()
            .map(|(tensor_dim, mesh_dims)| Step::Slice {
                tensor_dim,
                mesh_dims,
            }),
    );
    steps.extend(
        mark.into_iter()
            .map(|(reduce, mesh_dims)| Step::MakePartial { reduce, mesh_dims }),
    );
    steps
}

/// A one-phrase summary of a list of steps: `none`, `local only`, or the
/// collectives joined with ` + `.
pub fn summary(steps: &[Step]) -> String {
    if steps.is_empty() {
        return "none".into();
    }
    steps
        .iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>()
        .join(" + ")
}

/// The steps that finish a partial value: one all-reduce per reduce type.
pub fn finish_partial(attr: &DistAttr) -> Vec<Step> {
    let mut done = attr.clone();
    done.partial = spmd_core::Partial::NONE;
    classify(attr, &done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use spmd_core::{DimsMapping, Partial, Sharding};

    fn a(paddle: &[i64]) -> DistAttr {
        DistAttr::from_paddle(paddle).unwrap()
    }
    fn co(dims: &[&[u8]]) -> DistAttr {
        DistAttr::new(DimsMapping::from_nested(dims).unwrap())
    }
    fn partial(attr: DistAttr, ps: &[(u8, ReduceType)]) -> DistAttr {
        attr.with_partial(ps.iter().copied().collect::<Partial>())
    }
    fn text(from: &DistAttr, to: &DistAttr) -> String {
        summary(&classify(from, to))
    }
    use ReduceType::*;

    #[test]
    fn equal_attrs_need_nothing() {
        for x in [
            a(&[1, 0]),
            a(&[-1, -1]),
            co(&[&[0, 1], &[]]),
            partial(a(&[-1, 1]), &[(0, Sum)]),
        ] {
            assert!(classify(&x, &x).is_empty(), "{x}");
        }
        assert_eq!(summary(&[]), "none");
    }

    #[test]
    fn replicated_to_sharded_is_a_local_slice() {
        let s = classify(&a(&[-1, -1]), &a(&[0, -1]));
        assert_eq!(
            s,
            [Step::Slice {
                tensor_dim: 0,
                mesh_dims: vec![0]
            }]
        );
        assert!(!s[0].communicates());
        assert_eq!(
            text(&a(&[-1, -1]), &a(&[0, -1])),
            "local slice along dim 0 over mesh dim 0 (no communication)"
        );
        // Co-sharding from nothing: one slice, major mesh dim first.
        assert_eq!(
            classify(&a(&[-1]), &co(&[&[1, 0]])),
            [Step::Slice {
                tensor_dim: 0,
                mesh_dims: vec![1, 0]
            }]
        );
    }

    #[test]
    fn sharded_to_replicated_is_an_all_gather() {
        assert_eq!(
            classify(&a(&[1, 0]), &a(&[1, -1])),
            [Step::AllGather {
                tensor_dim: 1,
                mesh_dims: vec![0]
            }]
        );
        // Two dims gathered: one step per tensor dim, in dim order.
        assert_eq!(
            text(&a(&[1, 0]), &a(&[-1, -1])),
            "all-gather along dim 0 over mesh dim 1 + all-gather along dim 1 over mesh dim 0"
        );
        // A co-sharded dim is gathered minor first.
        assert_eq!(
            classify(&co(&[&[0, 1]]), &a(&[-1])),
            [Step::AllGather {
                tensor_dim: 0,
                mesh_dims: vec![1, 0]
            }]
        );
        // Dropping the minor mesh dim of a co-shard keeps the major one in place.
        assert_eq!(
            classify(&co(&[&[0, 1]]), &co(&[&[0]])),
            [Step::AllGather {
                tensor_dim: 0,
                mesh_dims: vec![1]
            }]
        );
    }

    #[test]
    fn a_mesh_dim_moving_between_dims_is_an_all_to_all() {
        assert_eq!(
            classify(&a(&[0, -1]), &a(&[-1, 0])),
            [Step::AllToAll {
                mesh_dim: 0,
                from_dim: 0,
                to_dim: 1
            }]
        );
        // Swapping two mesh dims: two all-to-alls.
        assert_eq!(
            text(&a(&[0, 1]), &a(&[1, 0])),
            "all-to-all over mesh dim 0: dim 0 -> dim 1 + all-to-all over mesh dim 1: dim 1 -> dim 0"
        );
    }

    #[test]
    fn partial_values_are_reduced() {
        let p = partial(a(&[1, -1]), &[(0, Sum)]);
        assert_eq!(
            classify(&p, &a(&[1, -1])),
            [Step::AllReduce {
                reduce: Sum,
                mesh_dims: vec![0]
            }]
        );
        assert_eq!(text(&p, &a(&[1, -1])), "all-reduce SUM over mesh dim 0");
        assert_eq!(finish_partial(&p), classify(&p, &a(&[1, -1])));
        // Grouped by reduce type.
        let q = partial(a(&[-1]), &[(0, Max), (1, Max), (2, Sum)]);
        assert_eq!(
            classify(&q, &a(&[-1])),
            [
                Step::AllReduce {
                    reduce: Max,
                    mesh_dims: vec![0, 1]
                },
                Step::AllReduce {
                    reduce: Sum,
                    mesh_dims: vec![2]
                }
            ]
        );
        // Partial -> sharded on that mesh dim: a reduce-scatter.
        assert_eq!(
            classify(&partial(a(&[-1, -1]), &[(0, Sum)]), &a(&[-1, 0])),
            [Step::ReduceScatter {
                reduce: Sum,
                tensor_dim: 1,
                mesh_dims: vec![0]
            }]
        );
        // Another reduce type: reduce, then mark again.
        assert_eq!(
            text(
                &partial(a(&[-1]), &[(0, Sum)]),
                &partial(a(&[-1]), &[(0, Max)])
            ),
            "all-reduce SUM over mesh dim 0 + mark partial MAX over mesh dim 0 (no communication)"
        );
    }

    #[test]
    fn becoming_partial_is_local() {
        let s = classify(&a(&[-1]), &partial(a(&[-1]), &[(1, Sum)]));
        assert_eq!(
            s,
            [Step::MakePartial {
                reduce: Sum,
                mesh_dims: vec![1]
            }]
        );
        assert!(!s[0].communicates());
        assert_eq!(
            text(&a(&[0]), &partial(a(&[-1]), &[(0, Sum)])),
            "all-gather along dim 0 over mesh dim 0 + mark partial SUM over mesh dim 0 (no communication)"
        );
    }

    #[test]
    fn co_shard_order_changes_are_reorders() {
        assert_eq!(
            classify(&co(&[&[0, 1]]), &co(&[&[1, 0]])),
            [Step::Reorder {
                tensor_dim: 0,
                mesh_dims: vec![0, 1]
            }]
        );
        // Removing the major mesh dim moves the minor one's blocks.
        assert_eq!(
            text(&co(&[&[0, 1]]), &co(&[&[1]])),
            "all-gather along dim 0 over mesh dim 0 + reorder dim 0's blocks along mesh dim 1 (co-shard order changes)"
        );
        // Adding a minor mesh dim keeps the major one: a plain slice.
        assert_eq!(
            classify(&a(&[0]), &co(&[&[0, 1]])),
            [Step::Slice {
                tensor_dim: 0,
                mesh_dims: vec![1]
            }]
        );
    }

    #[test]
    fn combinations_come_in_a_fixed_order() {
        // [0 partial? no] from: dim0 on 1, partial over 0 (MAX); to: dim1 on 1, dim0 on 2.
        let from = partial(a(&[1, -1, -1]), &[(0, Max)]);
        let to = DistAttr::new(DimsMapping::from_shardings(&[
            Sharding::on(2),
            Sharding::on(1),
            Sharding::REPLICATED,
        ]));
        let steps = classify(&from, &to);
        let kinds: Vec<&str> = steps.iter().map(Step::kind).collect();
        assert_eq!(kinds, ["all-reduce", "all-to-all", "local slice"]);
        assert!(steps.iter().any(Step::communicates));
    }

    #[test]
    fn steps_serialize_with_a_kind() {
        let s = classify(&partial(a(&[-1]), &[(0, Sum)]), &a(&[-1]));
        assert_eq!(
            serde_json::to_string(&s).unwrap(),
            r#"[{"kind":"all_reduce","reduce":"SUM","mesh_dims":[0]}]"#
        );
        let s = classify(&a(&[0, -1]), &a(&[-1, 0]));
        assert_eq!(
            serde_json::to_string(&s).unwrap(),
            r#"[{"kind":"all_to_all","mesh_dim":0,"from_dim":0,"to_dim":1}]"#
        );
    }

    /// `id` is the serialized `kind`, for every variant, so a report's
    /// count keys and its steps' kinds are one vocabulary.
    #[test]
    fn ids_are_the_serialized_kinds() {
        let dims = vec![0];
        let every = [
            Step::AllReduce {
                reduce: Sum,
                mesh_dims: dims.clone(),
            },
            Step::ReduceScatter {
                reduce: Sum,
                tensor_dim: 0,
                mesh_dims: dims.clone(),
            },
            Step::AllToAll {
                mesh_dim: 0,
                from_dim: 0,
                to_dim: 1,
            },
            Step::AllGather {
                tensor_dim: 0,
                mesh_dims: dims.clone(),
            },
            Step::Reorder {
                tensor_dim: 0,
                mesh_dims: dims.clone(),
            },
            Step::Slice {
                tensor_dim: 0,
                mesh_dims: dims.clone(),
            },
            Step::MakePartial {
                reduce: Sum,
                mesh_dims: dims,
            },
        ];
        for s in &every {
            assert_eq!(serde_json::to_value(s).unwrap()["kind"], s.id(), "{s:?}");
        }
    }

    #[test]
    fn rank_mismatch_does_not_panic() {
        let s = classify(&a(&[0]), &a(&[-1, 0]));
        assert_eq!(
            s,
            [Step::AllToAll {
                mesh_dim: 0,
                from_dim: 0,
                to_dim: 1
            }]
        );
    }
}
