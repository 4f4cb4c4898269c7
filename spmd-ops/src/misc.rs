//! `where` (a three-way elementwise select), `mean_all`, `numel`,
//! `nonzero`, `unique`, and Paddle's fallback rules `replicated` and
//! `default_data_parallel`.

use spmd_core::{Call, DimsMapping, RuleResult, Sharding, SpmdError, spmd_rule};

/// Paddle's `where`: `out = condition ? x : y`, elementwise with numpy
/// broadcasting of the three inputs. The condition has no gradient. Paddle
/// 3.3.1 keeps uneven shardings and returns the reverse rule's output
/// non-partial.
#[spmd_rule(
    name = "where",
    einsum = "...,...,...->...",
    partial(backward = "reset"),
    inputs(condition, x, y),
    outputs(out),
    grad(none(condition))
)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Where {}

/// Paddle's `mean_all`: the mean of every element, a 0-d output that is
/// partial (`Avg`) over the mesh dims sharding the input. Its gradient
/// broadcasts the output grad and never reads `x`.
#[spmd_rule(
    name = "mean_all",
    einsum = "@->",
    partial(reduce = "avg"),
    inputs(x),
    outputs(out),
    grad(ignores(x))
)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct MeanAll {}

/// Paddle's `numel`: the number of elements, a 0-d output. Each device
/// counts its own block, so the output is partial (`Sum`) over the mesh
/// dims sharding the input (Paddle's `NumelInferSpmd`). An integer count
/// has no gradient.
#[spmd_rule(name = "numel", einsum = "@->", inputs(x), outputs(out), grad(none(x)))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Numel {}

/// Paddle's `nonzero`: the coordinates of the non-zero elements, `[count,
/// rank]`. How many a block holds depends on the data, so nothing is
/// sharded: `x` is gathered and the output replicated (Paddle 3.3.1's
/// `NonZeroInferSpmd`). No gradient.
#[spmd_rule(
    name = "nonzero",
    einsum = "*->11",
    inputs(x),
    outputs(out),
    grad(none(x))
)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct NonZero {}

/// Paddle's `unique` (`x` → `out`, `indices`, `inverse`, `counts`): the
/// distinct values (or slices along `axis`) and where they were. Their
/// number depends on the data, so nothing is sharded: `x` is gathered and
/// every output replicated. `out` has `x`'s rank with an `axis`, else one
/// dim; `indices`, `inverse` and `counts` have one dim (`inverse` is
/// flattened). No gradient.
#[spmd_rule(
    name = "unique",
    einsum = "*->1,1,1,1",
    case(when = !self.axis.is_empty(), einsum = "@{..:1}->@{..:1},1,1,1"),
    inputs(x),
    outputs(out, indices, inverse, counts),
    grad(none(x))
)]
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Unique {
    #[spmd(default)]
    pub axis: Vec<i64>,
}

/// Paddle's `replicated` rule (the fallback for ops without a rule): every
/// input and output is fully replicated and non-partial. The op has any
/// number of inputs and outputs (`*^`: a term of `1`s per tensor given), so
/// forward needs the outputs' shapes
/// ([`SpmdRuleExt::forward_with_output_shapes`](spmd_core::SpmdRuleExt::forward_with_output_shapes)).
#[spmd_rule(name = "replicated", einsum = "*^->*^", partial(backward = "reset"))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Replicated {}

/// Paddle's `default_data_parallel` rule: dim 0 of every tensor is the batch
/// axis, merged across the given tensors (two different mesh dims are an
/// error) and applied to every tensor; every other dim is replicated, nothing
/// is partial. Dim 0 extents may differ between tensors, so the batch merge
/// is an `adjust` hook over an all-replicated notation. Forward merges the
/// inputs, backward the outputs; forward needs the outputs' shapes, like
/// [`Replicated`].
#[spmd_rule(
    name = "default_data_parallel",
    einsum = "*^->*^",
    adjust = Self::batch,
    partial(backward = "reset")
)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DefaultDataParallel {}

impl DefaultDataParallel {
    /// Merges dim 0 of the given tensors and shards dim 0 of every tensor so.
    fn batch(&self, call: &Call<'_>, result: &mut RuleResult) -> Result<(), SpmdError> {
        let given: &[spmd_core::Spec<'_>] = match *call {
            Call::Forward { inputs, .. } => inputs,
            Call::Backward { outputs, .. } => outputs,
            _ => return Ok(()),
        };
        let mut batch = Sharding::default();
        for (i, spec) in given.iter().enumerate() {
            let Some(s) = spec.attr.dims_mapping.get(0) else {
                continue;
            };
            if s.is_replicated() || *s == batch {
                continue;
            }
            if !batch.is_replicated() {
                return Err(SpmdError::Rejected {
                    op: "default_data_parallel",
                    message: format!(
                        "the batch dim (dim 0) is sharded on mesh dims {batch} and, by tensor {i}, {s}"
                    ),
                });
            }
            batch = *s;
        }
        for attr in result.inputs.iter_mut().chain(result.outputs.iter_mut()) {
            let mut dims: Vec<Sharding> = attr.dims_mapping.as_slice().to_vec();
            if let Some(d0) = dims.first_mut() {
                *d0 = batch;
                attr.dims_mapping = DimsMapping::from_shardings(&dims);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{DefaultDataParallel, Replicated};
    use spmd_core::{DistAttr, Mesh, Spec, SpmdRuleExt};

    fn attr(m: &[i64]) -> DistAttr {
        DistAttr::from_paddle(m).unwrap()
    }

    /// Paddle's suite, `default_data_parallel_backward_204`: dim 0 of the
    /// outputs merges to mesh dim 0, which every tensor takes.
    #[test]
    fn default_data_parallel_backward() {
        let mesh = Mesh::new(&[2, 3]).unwrap();
        let (o0, o1) = (attr(&[-1, 0, 1, -1]), attr(&[0, 1, -1]));
        let outs = [
            Spec::new(&[10, 10, 32, 48], &o0),
            Spec::new(&[10, 32, 48], &o1),
        ];
        let r = DefaultDataParallel {}
            .backward(&mesh, &[&[10, 10, 32, 48], &[32, 48]], &outs)
            .unwrap();
        let s: Vec<String> = r
            .inputs
            .iter()
            .chain(&r.outputs)
            .map(|a| a.to_string())
            .collect();
        assert_eq!(
            s,
            [
                "[0, -1, -1, -1]",
                "[0, -1]",
                "[0, -1, -1, -1]",
                "[0, -1, -1]"
            ]
        );

        // Two mesh dims on the batch dim are an error; forward is rejected.
        let o1 = attr(&[1, -1, -1]);
        let outs = [
            Spec::new(&[10, 10, 32, 48], &o0),
            Spec::new(&[10, 32, 48], &o1),
        ];
        let o0 = attr(&[0, -1, -1, -1]);
        let outs2 = [Spec::new(&[10, 10, 32, 48], &o0), outs[1]];
        assert!(
            DefaultDataParallel {}
                .backward(&mesh, &[&[4]], &outs2)
                .is_err()
        );
        assert!(DefaultDataParallel {}.forward(&mesh, &outs).is_err());
    }

    /// `replicated_backward_s1_1936`: everything replicated, partials reset.
    #[test]
    fn replicated_backward() {
        let mesh = Mesh::new(&[2, 2]).unwrap();
        let p = spmd_core::Partial::over(spmd_core::MeshSet::EMPTY.with(1), Default::default());
        let (o0, o1) = (attr(&[-1, 0]).with_partial(p), attr(&[0]).with_partial(p));
        let outs = [Spec::new(&[2, 6], &o0), Spec::new(&[2], &o1)];
        let r = Replicated {}
            .backward(&mesh, &[&[2, 8, 8, 4], &[2]], &outs)
            .unwrap();
        let s: Vec<String> = r
            .inputs
            .iter()
            .chain(&r.outputs)
            .map(|a| a.to_string())
            .collect();
        assert_eq!(s, ["[-1, -1, -1, -1]", "[-1]", "[-1, -1]", "[-1]"]);
    }

    /// `default_data_parallel_forward_s1_1897`: forward merges the inputs'
    /// dim 0 (the outputs' given mappings are not read, only their shapes)
    /// and shards dim 0 of every tensor so.
    #[test]
    fn default_data_parallel_forward_uses_output_shapes() {
        let mesh = Mesh::new(&[2, 2, 2]).unwrap();
        let (x, y) = (attr(&[-1, -1, -1]), attr(&[2, -1, 0, -1]));
        let ins = [Spec::new(&[4, 6, 4], &x), Spec::new(&[4, 4, 2, 2], &y)];
        let r = DefaultDataParallel {}
            .forward_with_output_shapes(&mesh, &ins, &[&[4], &[4, 3]])
            .unwrap();
        let s: Vec<String> = r
            .inputs
            .iter()
            .chain(&r.outputs)
            .map(|a| a.to_string())
            .collect();
        assert_eq!(s, ["[2, -1, -1]", "[2, -1, -1, -1]", "[2]", "[2, -1]"]);
        assert!(matches!(
            DefaultDataParallel {}.forward(&mesh, &ins),
            Err(spmd_core::SpmdError::OutputShapesNeeded { .. })
        ));
    }

    #[test]
    fn replicated_forward_answers_every_output() {
        let mesh = Mesh::new(&[2]).unwrap();
        let x = attr(&[0, -1]);
        let r = Replicated {}
            .forward_with_output_shapes(&mesh, &[Spec::new(&[4, 6], &x)], &[&[], &[4, 6, 2]])
            .unwrap();
        let s: Vec<String> = r
            .inputs
            .iter()
            .chain(&r.outputs)
            .map(|a| a.to_string())
            .collect();
        assert_eq!(s, ["[-1, -1]", "[]", "[-1, -1, -1]"]);
    }
}
