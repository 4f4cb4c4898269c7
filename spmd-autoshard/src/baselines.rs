//! Plans built from one *role* per mesh dim, the way parallelism is usually
//! described ("data parallel over the first dim, Megatron over the
//! second"). The search starts from every combination of roles; the named
//! baselines the report compares with are four of them:
//! - **data parallel**: every mesh dim splits the batch;
//! - **Megatron TP**: every mesh dim splits the attention and MLP
//!   projections, column- then row-wise;
//! - **TP + DP** (meshes of rank ≥ 2): Megatron over the last mesh dim, the
//!   batch over the others;
//! - **fully sharded (FSDP)**: every mesh dim splits the batch and stores
//!   the parameters split (ZeRO-3: gathered for use, gradients
//!   reduce-scattered).
//!
//! A named baseline that cannot apply (a batch of 1 over 8 devices, a model
//! with no projection Megatron knows) says why instead. All are written in
//! the search's own decisions, so one model prices them all.

use spmd_core::{DistAttr, MeshDim};
use spmd_graph::Graph;

use crate::space::{Choice, Group, Layout, Space, split_attr, splits_evenly};

/// What one mesh dim does in a role-built plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// Nothing: it splits no leaf.
    Idle,
    /// Splits dim 0 of the data inputs (rank ≥ 2).
    Batch,
    /// Splits dim 1 of the data inputs (rank ≥ 2): the sequence.
    Sequence,
    /// Splits Megatron-LM's projections.
    Tensor,
    /// Splits the batch, and stores every parameter split.
    Zero,
}

impl Role {
    pub const ALL: [Role; 5] = [
        Role::Idle,
        Role::Batch,
        Role::Sequence,
        Role::Tensor,
        Role::Zero,
    ];
}

/// The baselines, in report order.
pub const NAMES: [&str; 4] = [
    "data parallel",
    "Megatron TP",
    "TP + DP",
    "fully sharded (FSDP)",
];

/// Module names Megatron-LM splits by output columns, then by input rows
/// (Hugging Face's spellings across architectures).
const COLUMN: &[&str] = &[
    "q_proj",
    "k_proj",
    "v_proj",
    "gate_proj",
    "up_proj",
    "fc1",
    "query_key_value",
    "dense_h_to_4h",
    "c_attn",
    "c_fc",
    "w1",
    "w3",
];
const ROW: &[&str] = &[
    "o_proj",
    "down_proj",
    "out_proj",
    "fc2",
    "dense",
    "dense_4h_to_h",
    "c_proj",
    "w2",
];

/// The roles of baseline `name` on a mesh of `rank` dims.
pub fn roles_of(name: &str, rank: usize) -> Result<Vec<Role>, String> {
    Ok(match name {
        "data parallel" => vec![Role::Batch; rank],
        "Megatron TP" => vec![Role::Tensor; rank],
        "TP + DP" if rank < 2 => return Err("needs a mesh of rank 2 or more".into()),
        "TP + DP" => {
            let mut r = vec![Role::Batch; rank];
            r[rank - 1] = Role::Tensor;
            r
        }
        "fully sharded (FSDP)" => vec![Role::Zero; rank],
        _ => return Err(format!("no baseline `{name}`")),
    })
}

/// Baseline `name`'s plan in `space`, or why it does not apply.
pub fn baseline(name: &str, space: &mut Space, graph: &Graph) -> Result<Choice, String> {
    let roles = roles_of(name, graph.mesh().rank())?;
    applies(&roles, space, graph)?;
    Ok(compose(&roles, space, graph))
}

/// Every combination of roles over the mesh dims, with its plan in `space`
/// (each plan once: of the combinations that give the same plan, the
/// first).
pub fn all_combinations(space: &mut Space, graph: &Graph) -> Vec<(Vec<Role>, Choice)> {
    let rank = graph.mesh().rank();
    let n = Role::ALL.len().pow(rank as u32);
    let mut out: Vec<(Vec<Role>, Choice)> = Vec::new();
    for code in 0..n {
        let mut c = code;
        let roles: Vec<Role> = (0..rank)
            .map(|_| {
                let r = Role::ALL[c % Role::ALL.len()];
                c /= Role::ALL.len();
                r
            })
            .collect();
        let choice = compose(&roles, space, graph);
        if !out.iter().any(|(_, c)| *c == choice) {
            out.push((roles, choice));
        }
    }
    out
}

/// Why `roles` cannot apply as a named baseline, if it cannot: each role
/// must split something.
fn applies(roles: &[Role], space: &Space, graph: &Graph) -> Result<(), String> {
    let mesh = graph.mesh();
    let dims = |want: &[Role]| -> Vec<MeshDim> {
        (0..roles.len())
            .filter(|&m| want.contains(&roles[m]))
            .map(|m| m as MeshDim)
            .collect()
    };
    let batch = dims(&[Role::Batch, Role::Zero]);
    if !batch.is_empty() {
        let n: usize = batch.iter().map(|&d| mesh.dim(d)).product();
        let data: Vec<&Group> = space
            .groups
            .iter()
            .filter(|g| g.decision && !g.param && g.shape.len() >= 2)
            .collect();
        if data.is_empty() {
            return Err("the graph has no data input of rank 2 or more to split".into());
        }
        if let Some(g) = data.iter().find(|g| !splits_evenly(g.shape[0], n)) {
            return Err(format!(
                "the batch of `{}` ({}) does not split over {n} devices",
                g.pattern, g.shape[0]
            ));
        }
    }
    let tensor = dims(&[Role::Tensor]);
    if !tensor.is_empty()
        && !space.groups.iter().any(|g| {
            megatron_dim(g, graph).is_some_and(|d| split(&g.shape, d, &tensor, graph).is_some())
        })
    {
        return Err(
            "no projection Megatron-LM splits (q_proj, fc1, c_attn, ...) splits evenly".into(),
        );
    }
    Ok(())
}

/// The plan `roles` describe: each group's dims take the mesh dims whose
/// role splits them (a mesh dim that would split a dim unevenly is left
/// out for that group).
pub fn compose(roles: &[Role], space: &mut Space, graph: &Graph) -> Choice {
    let layouts: Vec<Layout> = space
        .groups
        .iter()
        .map(|g| group_layout(g, roles, graph))
        .collect();
    layouts
        .into_iter()
        .enumerate()
        .map(|(g, l)| space.option(g, l))
        .collect()
}

fn group_layout(g: &Group, roles: &[Role], graph: &Graph) -> Layout {
    if !g.decision {
        return Layout::Free;
    }
    let mesh = graph.mesh();
    let rank = g.shape.len();
    let mut on: Vec<Vec<MeshDim>> = vec![Vec::new(); rank];
    let mut stored = false;
    for (m, role) in roles.iter().enumerate() {
        let m = m as MeshDim;
        let dim = match (role, g.param) {
            (Role::Idle, _) => None,
            (Role::Batch | Role::Zero, false) if rank >= 2 => Some(0),
            (Role::Sequence, false) if rank >= 2 => Some(1),
            (Role::Tensor, true) => megatron_dim(g, graph),
            (Role::Zero, true) => {
                stored = true;
                // The largest dim still splitting evenly.
                let mut dims: Vec<usize> = (0..rank).collect();
                dims.sort_by_key(|&d| std::cmp::Reverse(g.shape[d]));
                dims.into_iter().find(|&d| {
                    let n: usize =
                        on[d].iter().map(|&x| mesh.dim(x)).product::<usize>() * mesh.dim(m);
                    splits_evenly(g.shape[d], n)
                })
            }
            _ => None,
        };
        if let Some(d) = dim {
            let n: usize = on[d].iter().map(|&x| mesh.dim(x)).product::<usize>() * mesh.dim(m);
            if splits_evenly(g.shape[d], n) {
                on[d].push(m);
            }
        }
    }
    if !g.param && on.iter().all(Vec::is_empty) {
        // A data input no role splits is left to propagation.
        return Layout::Free;
    }
    let attr = split_attr(&on);
    let split = on.iter().any(|ms| !ms.is_empty());
    Layout::Fixed {
        attr,
        priority: u32::from(stored && split),
    }
}

/// The dim Megatron splits of a parameter group: a column projection's
/// output dim (and its bias), a row projection's input dim.
fn megatron_dim(g: &Group, graph: &Graph) -> Option<usize> {
    let mut parts = g.pattern.rsplit('.');
    let (leaf, module) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let column = COLUMN.contains(&module);
    let row = ROW.contains(&module);
    // A Linear weight is [out, in] and read through a transpose; a Conv1D
    // (GPT-2) or a plain matmul weight is [in, out].
    let transposed = g.tensors.first().is_some_and(|&t| {
        graph.tensor(t).consumers.iter().any(|&o| {
            matches!(
                graph.op(o).rule.as_str(),
                "aten.permute" | "aten.t" | "aten.transpose.int" | "aten.linear" | "transpose"
            )
        })
    });
    let (out_dim, in_dim) = if transposed { (0, 1) } else { (1, 0) };
    match (g.shape.len(), leaf) {
        (2, _) if column => Some(out_dim),
        (2, _) if row => Some(in_dim),
        (1, "bias") if column => Some(0),
        _ => None,
    }
}

fn split(shape: &[usize], dim: usize, dims: &[MeshDim], graph: &Graph) -> Option<DistAttr> {
    let n: usize = dims.iter().map(|&d| graph.mesh().dim(d)).product();
    let e = *shape.get(dim)?;
    if dims.is_empty() || !splits_evenly(e, n) {
        return None;
    }
    let mut on = vec![Vec::new(); shape.len()];
    on[dim] = dims.to_vec();
    Some(split_attr(&on))
}
