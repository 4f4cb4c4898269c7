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
//! which block every device holds along mesh dim 1 too. And only when its
//! splits nest: an extent split unevenly over a co-shard (64 over `[[0,1]]`
//! on a 2x3 mesh, blocks of 11, 11, 11, 11, 10, 10) does not split evenly
//! along the major mesh dim alone (32, 32), so [`classify_sized`] rebuilds
//! such a dim: an all-gather of every mesh dim that splits it, then a slice
//! by every mesh dim that will. Steps are grouped (one
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

/// Where mesh dim `m` is in `a`, compared with `other`; a tensor dim in
/// `rebuilt` keeps none of its mesh dims.
fn place(a: &DistAttr, other: &DistAttr, m: MeshDim, rebuilt: &[usize]) -> Place {
    for (dim, s) in a.dims_mapping.as_slice().iter().enumerate() {
        if let Some(pos) = s.iter().position(|x| x == m) {
            let kept = !rebuilt.contains(&dim)
                && other
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

/// The steps that turn `from` into `to` (empty when they are equal), for
/// splits that divide their extents evenly (see [`classify_sized`] for a
/// tensor of known shape). Both should have the same rank; extra dims on
/// either side are compared as if replicated on the other.
pub fn classify(from: &DistAttr, to: &DistAttr) -> Vec<Step> {
    classify_rebuilding(from, to, Vec::new())
}

/// The steps that turn `from` into `to` for a tensor of `shape` on a mesh of
/// extents `mesh`: [`classify`], except that a tensor dim whose mapping
/// changes and which either side splits unevenly is rebuilt (gathered
/// whole, then sliced), since its blocks do not nest.
///
/// ```
/// use spmd_core::{DimsMapping, DistAttr};
/// use spmd_graph::steps::{classify_sized, summary};
///
/// let co = DistAttr::new(DimsMapping::from_nested(&[&[0, 1]]).unwrap());
/// let major = DistAttr::from_paddle(&[0]).unwrap();
/// // 96 over 2x3 splits evenly: gathering mesh dim 1 leaves mesh dim 0's blocks.
/// let even = classify_sized(&co, &major, &[96], &[2, 3]);
/// assert_eq!(summary(&even), "all-gather along dim 0 over mesh dim 1");
/// // 64 does not (blocks of 11 and 10 do not add up to 32s).
/// let uneven = classify_sized(&co, &major, &[64], &[2, 3]);
/// assert_eq!(
///     summary(&uneven),
///     "all-gather along dim 0 over mesh dims 1,0 + local slice along dim 0 over mesh dim 0 (no communication)"
/// );
/// ```
pub fn classify_sized(
    from: &DistAttr,
    to: &DistAttr,
    shape: &[usize],
    mesh: &[usize],
) -> Vec<Step> {
    let parts = |a: &DistAttr, d: usize| -> usize {
        a.dims_mapping.get(d).map_or(1, |s| {
            s.iter()
                .map(|m| mesh.get(m as usize).copied().unwrap_or(1))
                .product()
        })
    };
    let uneven: Vec<usize> = (0..shape.len())
        .filter(|&d| {
            from.dims_mapping.get(d) != to.dims_mapping.get(d)
                && (!shape[d].is_multiple_of(parts(from, d).max(1))
                    || !shape[d].is_multiple_of(parts(to, d).max(1)))
        })
        .collect();
    classify_rebuilding(from, to, uneven)
}

/// The mesh dims of tensor dim `d` in `a`, major first.
fn list(a: &DistAttr, d: usize) -> Vec<MeshDim> {
    a.dims_mapping
        .get(d)
        .map_or(Vec::new(), |s| s.iter().collect())
}

/// How a mesh dim leaves or joins a tensor dim's co-shard list, in the
/// order the steps run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Join {
    /// Reduce-scatter of a partial value (first).
    Scatter,
    /// All-to-all from another tensor dim.
    Moved,
    /// Reorder within the dim.
    Reordered,
    /// Local slice (last).
    Sliced,
}

/// Whether tensor dim `d` can change from `from`'s list to `to`'s with the
/// steps in their fixed order (reductions and scatters, all-to-alls,
/// gathers minor to major, reorders, slices), each a contiguous split or
/// join: every join appends at the minor end, every gather removes the
/// minor end. Where not, the dim is rebuilt (gathered whole, then sliced).
fn runs_in_order(from: &DistAttr, to: &DistAttr, d: usize, rebuilt: &[usize]) -> bool {
    let (f, t) = (list(from, d), list(to, d));
    let p = f.iter().zip(&t).take_while(|(a, b)| a == b).count();
    let (removed, added) = (&f[p..], &t[p..]);
    let mut joins = Vec::with_capacity(added.len());
    for &m in added {
        joins.push(match place(from, to, m, rebuilt) {
            Place::Partial(r) => (Join::Scatter, Some(r)),
            Place::Splits { dim, .. } if dim == d => (Join::Reordered, None),
            Place::Splits { dim, .. } if !rebuilt.contains(&dim) => {
                // Leaves its dim at the minor end, before any gather.
                if list(from, dim).last() != Some(&m) || joins_early(from, to, dim, rebuilt) {
                    return false;
                }
                (Join::Moved, None)
            }
            _ => (Join::Sliced, None),
        });
    }
    // Joins run in kind order (scatters one group, all-to-alls by mesh dim).
    let sorted = joins.windows(2).zip(added.windows(2)).all(|(j, m)| {
        j[0].0 < j[1].0
            || (j[0].0 == j[1].0
                && (j[0].0 != Join::Scatter || j[0].1 == j[1].1)
                && (j[0].0 != Join::Moved || m[0] < m[1]))
    });
    // Scatters and all-to-alls run before the gathers: they append only to
    // a list nothing leaves, and nothing reorders after them (a reorder
    // over the other mesh dims cannot move the blocks they appended).
    let early = joins
        .iter()
        .any(|(j, _)| matches!(j, Join::Scatter | Join::Moved));
    if early && joins.iter().any(|(j, _)| *j == Join::Reordered) {
        return false;
    }
    let leaves = removed.iter().any(|m| !added.contains(m));
    // What stays (reordered) precedes what leaves: gathers take the minor end.
    let stays_major = removed
        .iter()
        .skip_while(|m| added.contains(m))
        .all(|m| !added.contains(m));
    sorted && !(early && leaves) && stays_major
}

/// Whether a mesh dim joins tensor dim `d` by a reduce-scatter or an
/// all-to-all (steps that run before the gathers).
fn joins_early(from: &DistAttr, to: &DistAttr, d: usize, rebuilt: &[usize]) -> bool {
    let (f, t) = (list(from, d), list(to, d));
    let p = f.iter().zip(&t).take_while(|(a, b)| a == b).count();
    t[p..].iter().any(|&m| match place(from, to, m, rebuilt) {
        Place::Partial(_) => true,
        Place::Splits { dim, .. } => dim != d && !rebuilt.contains(&dim),
        Place::Replicated => false,
    })
}

fn classify_rebuilding(from: &DistAttr, to: &DistAttr, mut rebuilt: Vec<usize>) -> Vec<Step> {
    let rank = from.dims_mapping.rank().max(to.dims_mapping.rank());
    // Rebuilding a dim changes how mesh dims join others: to a fixed point.
    while let Some(d) = (0..rank).find(|&d| {
        !rebuilt.contains(&d)
            && list(from, d) != list(to, d)
            && !runs_in_order(from, to, d, &rebuilt)
    }) {
        rebuilt.push(d);
    }
    let rebuilt = rebuilt.as_slice();
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
        let (before, after) = (place(from, to, m, rebuilt), place(to, from, m, rebuilt));
        match (before, after) {
            (Place::Replicated, Place::Replicated) => {}
            (Place::Partial(a), Place::Partial(b)) if a == b => {}
            (Place::Splits { kept: true, .. }, Place::Splits { kept: true, .. }) => {}
            (Place::Partial(r), Place::Replicated) => add(&mut reduce, r, m),
            // A rebuilt dim is sliced once whole: reduce, then slice.
            (Place::Partial(r), Place::Splits { dim, .. }) if rebuilt.contains(&dim) => {
                add(&mut reduce, r, m);
                add(&mut slice, dim, m);
            }
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
            (Place::Splits { dim: d1, .. }, Place::Splits { dim: d2, .. })
                if rebuilt.contains(&d1) || rebuilt.contains(&d2) =>
            {
                add(&mut gather, d1, m);
                add(&mut slice, d2, m);
            }
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
        // Swapping two mesh dims is not two all-to-alls: the first one
        // appends its mesh dim to dim 1 after mesh dim 1 (`[1,0]`), and the
        // second would then take the major end of that list, which leaves
        // every device non-contiguous rows. Both dims are rebuilt.
        assert_eq!(
            text(&a(&[0, 1]), &a(&[1, 0])),
            "all-gather along dim 0 over mesh dim 0 + all-gather along dim 1 over mesh dim 1 \
             + local slice along dim 0 over mesh dim 1 (no communication) \
             + local slice along dim 1 over mesh dim 0 (no communication)"
        );
        // Moving one mesh dim next to a dim that stays put is one all-to-all.
        assert_eq!(
            text(&a(&[0, 1]), &co(&[&[], &[1, 0]])),
            "all-to-all over mesh dim 0: dim 0 -> dim 1"
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
    fn a_scatter_is_not_followed_by_a_reorder() {
        // The reduce-scatter appends mesh dim 0 after mesh dim 1 (`[1,0]`);
        // reaching `[0,1]` from there moves blocks across both mesh dims,
        // which no reorder along mesh dim 1 can: the dim is rebuilt.
        let from = partial(a(&[-1, 1]), &[(0, Sum)]);
        assert_eq!(
            text(&from, &co(&[&[], &[0, 1]])),
            "all-reduce SUM over mesh dim 0 + all-gather along dim 1 over mesh dim 1 \
             + local slice along dim 1 over mesh dims 0,1 (no communication)"
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
        // Removing the major mesh dim of a co-shard cannot be one gather
        // (each device would hold rows far apart): the dim is rebuilt.
        assert_eq!(
            text(&co(&[&[0, 1]]), &co(&[&[1]])),
            "all-gather along dim 0 over mesh dims 1,0 + local slice along dim 0 over mesh dim 1 (no communication)"
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
