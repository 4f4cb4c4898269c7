//! The decisions a plan makes, and the layouts each can take.
//!
//! A plan annotates the graph's leaves, the tensors no op produces:
//! parameters and data inputs. Propagation, with the rules, decides every
//! other tensor, so the search never proposes a layout the rules would not
//! derive. Leaves that differ only in a layer index (`layers.3.mlp.w` and
//! `layers.7.mlp.w`) and have one shape are **one decision**: layers that
//! repeat are decided once, and the plan file names them with a `*`
//! pattern.
//!
//! Each decision's layouts are every way its dims can take mesh dims (each
//! mesh dim splits at most one dim, evenly; several mesh dims on one dim
//! co-shard it), plus two that are not a fixed layout:
//! - *free*: no annotation, propagation decides;
//! - for parameters, each split layout also at priority 1, as *stored*
//!   split: the ops read the parameter as propagation from the data decides
//!   (an all-gather before use), the gradient is reduce-scattered back to
//!   the stored layout. That is ZeRO-3/FSDP, in spmd's own plans.

use spmd_core::{DimsMapping, DistAttr, MeshDim, Sharding};
use spmd_graph::annotations::{Annotation, matches};
use spmd_graph::{Graph, OpId, TensorId};

/// One layout a decision can take.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    /// No annotation: propagation decides.
    Free,
    /// Annotated: at priority 0 the layout the ops see; at priority 1 the
    /// stored layout of a parameter the ops may read otherwise.
    Fixed { attr: DistAttr, priority: u32 },
    /// Annotated `stored`, and every op that reads it given `read` (a
    /// parameter stored split and gathered where it is used, whatever
    /// propagation from the data would let the op read).
    Read { stored: DistAttr, read: DistAttr },
    /// Annotated `attr`, and each op of `read_by` given its own layout of
    /// it (a single tensor's: the ops are its readers).
    Each {
        attr: DistAttr,
        read_by: Vec<(OpId, DistAttr)>,
    },
}

/// What a fixed layout annotates a tensor with: its attr and priority,
/// and the layouts its readers are given.
#[derive(Clone, Copy, Debug)]
pub struct Parts<'l> {
    pub attr: &'l DistAttr,
    pub priority: u32,
    pub read: Option<&'l DistAttr>,
    pub read_by: &'l [(OpId, DistAttr)],
}

impl Layout {
    pub fn fixed(attr: DistAttr) -> Layout {
        Layout::Fixed { attr, priority: 0 }
    }

    /// The annotation this layout gives a tensor; `None` when free.
    pub fn parts(&self) -> Option<Parts<'_>> {
        let (attr, priority, read, read_by) = match self {
            Layout::Free => return None,
            Layout::Fixed { attr, priority } => (attr, *priority, None, &[][..]),
            Layout::Read { stored, read } => (stored, 0, Some(read), &[][..]),
            Layout::Each { attr, read_by } => (attr, 0, None, &read_by[..]),
        };
        Some(Parts {
            attr,
            priority,
            read,
            read_by,
        })
    }

    /// `free`, `[0, -1]`, `stored [[0, 1], -1]`.
    pub fn describe(&self) -> String {
        match self {
            Layout::Free => "free".into(),
            Layout::Fixed { attr, priority: 0 } => attr.to_string(),
            Layout::Fixed { attr, .. } => format!("stored {attr}"),
            Layout::Read { stored, read } => format!("stored {stored} read {read}"),
            Layout::Each { attr, read_by } if read_by.is_empty() => attr.to_string(),
            Layout::Each { attr, read_by } => {
                format!("{attr} read by {} ops otherwise", read_by.len())
            }
        }
    }
}

/// Leaves decided together, or tensors a start pins together.
#[derive(Clone, Debug)]
pub struct Group {
    /// The plan-file pattern: the name with each all-digit component `*`
    /// (a produced tensor's: its name).
    pub pattern: String,
    pub tensors: Vec<TensorId>,
    pub shape: Vec<usize>,
    pub param: bool,
    /// A decision of the search (leaves of one pattern). A pin group
    /// ([`Space::pin`]: produced tensors, or a leaf the solver's solution
    /// lays out unlike its decision) is not: only a start fixes it, and the
    /// search never moves it.
    pub decision: bool,
}

/// Every decision of a graph and the layouts each can take; option 0 is
/// always [`Layout::Free`].
#[derive(Clone, Debug)]
pub struct Space {
    pub groups: Vec<Group>,
    pub options: Vec<Vec<Layout>>,
}

/// A plan in a [`Space`]: per group, the index of its option.
pub type Choice = Vec<u16>;

impl Space {
    /// The decisions of `graph`: its unannotated leaves that some op reads
    /// (annotated ones are the user's pins and stay as they are).
    pub fn new(graph: &Graph) -> Space {
        let mut groups: Vec<Group> = Vec::new();
        for t in graph.tensor_ids() {
            let info = graph.tensor(t);
            if info.producer.is_some()
                || info.annotation.is_some()
                || info.read.is_some()
                || info.consumers.is_empty()
                || graph.shape(t).is_empty()
            {
                continue;
            }
            let pattern = pattern_of(&info.name);
            match groups.iter_mut().find(|g| {
                g.pattern == pattern && g.shape == graph.shape(t) && g.param == info.param
            }) {
                Some(g) => g.tensors.push(t),
                None => groups.push(Group {
                    pattern,
                    tensors: vec![t],
                    shape: graph.shape(t).to_vec(),
                    param: info.param,
                    decision: true,
                }),
            }
        }
        let mesh = graph.mesh().shape();
        let options = groups
            .iter()
            .map(|g| layouts(&g.shape, mesh, g.param))
            .collect();
        Space { groups, options }
    }

    /// A group for `tensors` (of one shape) that a start may pin to
    /// `layout`, option 1; option 0, free, leaves them as the rest of the
    /// plan lays them out (a produced tensor unannotated, a leaf as its
    /// decision says). The search never moves it.
    pub fn pin(&mut self, graph: &Graph, tensors: Vec<TensorId>, layout: Layout) -> usize {
        let first = tensors[0];
        self.groups.push(Group {
            pattern: graph.tensor(first).name.clone(),
            tensors,
            shape: graph.shape(first).to_vec(),
            param: graph.tensor(first).param,
            decision: false,
        });
        self.options.push(vec![Layout::Free, layout]);
        self.groups.len() - 1
    }

    /// The groups the search decides: the leaves'.
    pub fn decisions(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.groups.len()).filter(|&g| self.groups[g].decision)
    }

    /// The option of `group` that is `layout`, added if it is not one yet
    /// (a baseline's uneven split, say).
    pub fn option(&mut self, group: usize, layout: Layout) -> u16 {
        let options = &mut self.options[group];
        let i = options
            .iter()
            .position(|l| *l == layout)
            .unwrap_or_else(|| {
                options.push(layout);
                options.len() - 1
            });
        i as u16
    }

    /// The plan that gives each leaf group the layout `layout_of` gives
    /// its first tensor (`None`: free), each added as an option if it is
    /// not one yet; produced tensors free.
    pub fn choice_of(&mut self, layout_of: impl Fn(TensorId) -> Option<Layout>) -> Choice {
        (0..self.groups.len())
            .map(|g| match self.groups[g].decision {
                true => match layout_of(self.groups[g].tensors[0]) {
                    Some(l) => self.option(g, l),
                    None => 0,
                },
                false => 0,
            })
            .collect()
    }

    /// Annotates `graph` as `choice` says. A free pin leaves its tensors
    /// as the groups before it laid them out (a leaf as its decision; a
    /// produced tensor as another start's pin of it, else unannotated).
    pub fn apply(&self, graph: &mut Graph, choice: &[u16]) -> Result<(), spmd_graph::GraphError> {
        // Tensors a group has laid out in this plan: a later free pin of
        // them changes nothing.
        let mut laid_out = vec![false; graph.tensors().len()];
        for (g, group) in self.groups.iter().enumerate() {
            let layout = self.layout(g, choice);
            let parts = layout.parts();
            let annotation = parts.map(|p| (p.attr.clone(), p.priority));
            let read = parts.and_then(|p| p.read.cloned());
            let read_by = parts.map_or(&[][..], |p| p.read_by);
            let free_pin = !group.decision && *layout == Layout::Free;
            for &t in &group.tensors {
                if free_pin && (laid_out[t.index()] || is_leaf(graph, t)) {
                    continue;
                }
                graph.set_annotation(t, annotation.clone())?;
                graph.set_read(t, read.clone())?;
                graph.set_read_by(t, read_by.to_vec())?;
                laid_out[t.index()] |= *layout != Layout::Free;
            }
        }
        Ok(())
    }

    /// The layout `choice` gives group `g`; free for a group added after
    /// `choice` was made.
    pub fn layout(&self, g: usize, choice: &[u16]) -> &Layout {
        &self.options[g][choice.get(g).map_or(0, |&o| o as usize)]
    }

    /// The plan file's annotations for `choice`: one per fixed group, by its
    /// pattern where the pattern names exactly the group's tensors, else
    /// one per tensor.
    pub fn annotations(&self, graph: &Graph, choice: &[u16]) -> Vec<Annotation> {
        // Leaves a pin lays out otherwise than their decision.
        let pinned: Vec<TensorId> = (0..self.groups.len())
            .filter(|&g| !self.groups[g].decision && *self.layout(g, choice) != Layout::Free)
            .flat_map(|g| self.groups[g].tensors.iter().copied())
            .filter(|&t| is_leaf(graph, t))
            .collect();
        let mut out = Vec::new();
        for (g, group) in self.groups.iter().enumerate() {
            let Some(Parts {
                attr,
                priority,
                read,
                read_by,
            }) = self.layout(g, choice).parts()
            else {
                continue;
            };
            let own: Vec<TensorId> = match group.decision {
                true => group
                    .tensors
                    .iter()
                    .copied()
                    .filter(|t| !pinned.contains(t))
                    .collect(),
                false => group.tensors.clone(),
            };
            let entry = |tensors: String| Annotation {
                tensors,
                dims_mapping: Some(spmd_core::json::Mapping::from_dims_mapping(
                    &attr.dims_mapping,
                )),
                partial_dims: attr.partial.dims().iter().collect(),
                priority: (priority > 0).then_some(priority),
                read: read.map(|r| spmd_core::json::Mapping::from_dims_mapping(&r.dims_mapping)),
                read_by: read_by
                    .iter()
                    .map(|(o, a)| {
                        let mapping = spmd_core::json::Mapping::from_dims_mapping(&a.dims_mapping);
                        (graph.op(*o).name.clone(), mapping)
                    })
                    .collect(),
            };
            let named: Vec<TensorId> = graph
                .tensor_ids()
                .filter(|&t| matches(&group.pattern, &graph.tensor(t).name))
                .collect();
            if named == own {
                out.push(entry(group.pattern.clone()));
            } else {
                out.extend(own.iter().map(|&t| entry(graph.tensor(t).name.clone())));
            }
        }
        out
    }
}

fn is_leaf(graph: &Graph, t: TensorId) -> bool {
    graph.tensor(t).producer.is_none()
}

/// A leaf's name with each all-digit dotted component replaced by `*`.
pub fn pattern_of(name: &str) -> String {
    name.split('.')
        .map(|c| {
            if !c.is_empty() && c.bytes().all(|b| b.is_ascii_digit()) {
                "*"
            } else {
                c
            }
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// The layout that splits each dim over its mesh dims (major first).
pub fn split_attr(on: &[Vec<MeshDim>]) -> DistAttr {
    let shardings: Vec<Sharding> = on
        .iter()
        .map(|ms| Sharding::co(ms).unwrap_or(Sharding::REPLICATED))
        .collect();
    DistAttr::new(DimsMapping::from_shardings(&shardings))
}

/// Whether `parts` devices split `extent` into equal non-empty blocks.
pub fn splits_evenly(extent: usize, parts: usize) -> bool {
    extent >= parts && extent.is_multiple_of(parts)
}

/// Free, then every even split of `shape` over `mesh` (replicated
/// included), then, for parameters, each split again as stored.
pub fn layouts(shape: &[usize], mesh: &[usize], param: bool) -> Vec<Layout> {
    let rank = shape.len();
    let mut out = vec![Layout::Free];
    let mut stored = Vec::new();
    // Each mesh dim takes a tensor dim or none (`rank`): (rank + 1)^mesh.
    let count = (rank + 1).pow(mesh.len() as u32);
    for code in 0..count {
        let mut c = code;
        let mut on: Vec<Vec<MeshDim>> = vec![Vec::new(); rank];
        for m in 0..mesh.len() {
            let d = c % (rank + 1);
            c /= rank + 1;
            if d < rank {
                on[d].push(m as MeshDim);
            }
        }
        let even = on.iter().zip(shape).all(|(ms, &e)| {
            let n: usize = ms.iter().map(|&m| mesh[m as usize]).product();
            splits_evenly(e, n)
        });
        if !even {
            continue;
        }
        let attr = split_attr(&on);
        let split = on.iter().any(|ms| !ms.is_empty());
        if param && split {
            stored.push(Layout::Fixed {
                attr: attr.clone(),
                priority: 1,
            });
        }
        out.push(Layout::fixed(attr));
    }
    out.extend(stored);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_indices_become_stars() {
        assert_eq!(
            pattern_of("model.layers.12.mlp.up_proj.weight"),
            "model.layers.*.mlp.up_proj.weight"
        );
        assert_eq!(pattern_of("h2.0.w1"), "h2.*.w1");
        assert_eq!(pattern_of("input_ids"), "input_ids");
    }

    /// A pin overrides one leaf of a decision: the plan file then names
    /// each leaf on its own (one entry per tensor), and the pin left free
    /// gives the leaf back to its decision.
    #[test]
    fn a_pinned_leaf_leaves_its_decision() {
        use spmd_core::Attrs;
        use spmd_graph::GraphBuilder;
        let mut b = GraphBuilder::new(spmd_core::Mesh::new(&[2]).unwrap());
        let x = b.tensor("x", &[4, 8]).unwrap();
        let w0 = b.param("l.0.w", &[8, 8], None).unwrap();
        let w1 = b.param("l.1.w", &[8, 8], None).unwrap();
        let y = b
            .apply("mm0", "matmul", Attrs::new(), &[x, w0], ("y", &[4, 8]))
            .unwrap();
        b.apply("mm1", "matmul", Attrs::new(), &[y, w1], ("z", &[4, 8]))
            .unwrap();
        let mut graph = b.build(&spmd_ops::builtins()).unwrap();
        let mut space = Space::new(&graph);
        let g = space
            .decisions()
            .find(|&g| space.groups[g].pattern == "l.*.w")
            .unwrap();
        assert_eq!(space.groups[g].tensors, [w0, w1]);
        let col = DistAttr::from_paddle(&[-1, 0]).unwrap();
        let row = DistAttr::from_paddle(&[0, -1]).unwrap();
        let mut choice = space.choice_of(|t| (t == w0).then(|| Layout::fixed(col.clone())));
        let pin = space.pin(&graph, vec![w1], Layout::fixed(row.clone()));
        assert_eq!(space.decisions().count(), space.groups.len() - 1);
        choice.push(1);
        space.apply(&mut graph, &choice).unwrap();
        assert_eq!(graph.tensor(w0).annotation, Some(col.clone()));
        assert_eq!(graph.tensor(w1).annotation, Some(row));
        let names = |space: &Space, graph: &Graph, choice: &[u16]| -> Vec<String> {
            let entries = space.annotations(graph, choice).into_iter();
            entries.map(|a| a.tensors).collect()
        };
        assert_eq!(names(&space, &graph, &choice), ["l.0.w", "l.1.w"]);
        choice[pin] = 0;
        space.apply(&mut graph, &choice).unwrap();
        assert_eq!(graph.tensor(w1).annotation, Some(col));
        assert_eq!(names(&space, &graph, &choice), ["l.*.w"]);
    }

    /// Two starts pin one produced tensor (each its own pin group): a
    /// start's pin holds whatever the other start's free pin of it says,
    /// and a plan that frees both leaves it unannotated. A read layout is
    /// set and cleared with its group.
    #[test]
    fn a_free_pin_keeps_what_another_pin_laid_out() {
        use spmd_core::Attrs;
        use spmd_graph::GraphBuilder;
        let mut b = GraphBuilder::new(spmd_core::Mesh::new(&[2]).unwrap());
        let x = b.tensor("x", &[4, 8]).unwrap();
        let w = b.param("w", &[8, 8], None).unwrap();
        let y = b
            .apply("mm", "matmul", Attrs::new(), &[x, w], ("y", &[4, 8]))
            .unwrap();
        b.apply("relu", "relu", Attrs::new(), &[y], ("z", &[4, 8]))
            .unwrap();
        let mut graph = b.build(&spmd_ops::builtins()).unwrap();
        let mut space = Space::new(&graph);
        let row = DistAttr::from_paddle(&[0, -1]).unwrap();
        let whole = DistAttr::replicated(2);
        let read = Layout::Read {
            stored: row.clone(),
            read: whole.clone(),
        };
        let mut choice = space.choice_of(|t| (t == w).then(|| read.clone()));
        let first = space.pin(&graph, vec![y], Layout::fixed(row.clone()));
        let second = space.pin(&graph, vec![y], Layout::fixed(whole.clone()));
        choice.extend([1, 0]);
        space.apply(&mut graph, &choice).unwrap();
        assert_eq!(graph.tensor(y).annotation, Some(row.clone()));
        assert_eq!(graph.tensor(w).annotation, Some(row.clone()));
        assert_eq!(graph.tensor(w).read, Some(whole.clone()));
        (choice[first], choice[second]) = (0, 1);
        space.apply(&mut graph, &choice).unwrap();
        assert_eq!(graph.tensor(y).annotation, Some(whole));
        choice[second] = 0;
        let g = space
            .decisions()
            .find(|&g| space.groups[g].tensors == [w])
            .unwrap();
        choice[g] = space.option(g, Layout::fixed(row.clone()));
        space.apply(&mut graph, &choice).unwrap();
        assert_eq!(graph.tensor(y).annotation, None);
        assert_eq!(graph.tensor(w).annotation, Some(row));
        assert_eq!(graph.tensor(w).read, None);
    }

    #[test]
    fn layouts_are_every_even_split_once() {
        // [8, 6] on [2, 4]: mesh dim 0 on dim 0, 1 or none; mesh dim 1 on
        // dim 0 or none (6 % 4 != 0); co-shard [[0, 1], -1] is 8 | 8.
        let l = layouts(&[8, 6], &[2, 4], false);
        let mut names: Vec<String> = l.iter().map(Layout::describe).collect();
        assert_eq!(names[0], "free");
        names.sort();
        assert_eq!(
            names,
            [
                "[-1, -1]",
                "[-1, 0]",
                "[0, -1]",
                "[1, -1]",
                "[1, 0]",
                "[[0,1], -1]",
                "free"
            ]
        );
        let p = layouts(&[8, 6], &[2, 4], true);
        assert_eq!(p.len(), names.len() + 5, "each split again as stored");
        assert!(p.iter().all(
            |l| !matches!(l, Layout::Fixed { attr, priority: 1 } if attr.to_string() == "[-1, -1]")
        ));
    }
}
