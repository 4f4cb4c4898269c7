//! Checking ops against the reference kernels of [`super::kernels`] on
//! small meshes (at most 4 devices, each runs the kernel): a [`Case`] draws
//! op parameters, a mesh and attrs, some forced to split work; [`Dirs`] runs
//! forward, backward and the grad in each form the rule takes, and counts
//! the answers that split work so that a property whose answers all
//! replicate fails.

use super::attrs;
use super::nn::Counts;
use super::nn::complete;
use super::nn::force;
use super::nn::force_split;
use super::nn::input_specs;
use super::nn::small_mesh;
use super::shape;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use spmd_check::{
    Input, Tensor, check_backward, check_forward, check_grad, check_grad_of_signature,
};
use spmd_core::SpmdRuleExt;
use spmd_core::{DimsMapping, DistAttr, Mesh, Sharding, Spec, SpmdRule};

pub type Kernel<'a> = dyn Fn(&[Tensor]) -> Vec<Tensor> + 'a;

pub type GradKernel<'a> = dyn Fn(&[Tensor], &[Tensor], &[Tensor]) -> Vec<Tensor> + 'a;

// ------------------------------------------------------------ cases, runs

/// A random case: op parameters, a small mesh and attrs (what each is for
/// is the property's business).
#[derive(Clone, Debug)]
pub struct Case<P> {
    pub mesh: Vec<usize>,
    pub p: P,
    pub a: Vec<DistAttr>,
}

/// What a property's attrs are: their ranks, and for some (by index) the
/// dims a rule may keep sharded, one of which is forced to shard most of
/// the time (random mappings alone rarely do).
pub type Layout = (Vec<usize>, Vec<(usize, Vec<usize>)>);

pub fn case<P, S>(params: S, layout: fn(&P) -> Layout) -> impl Strategy<Value = Case<P>>
where
    P: Clone + std::fmt::Debug,
    S: Strategy<Value = P>,
{
    (params, small_mesh())
        .prop_flat_map(move |(p, mesh)| {
            let (ranks, forced) = layout(&p);
            let m = mesh.len();
            let draws = prop::collection::vec(force(), forced.len());
            (
                Just(p),
                Just(mesh),
                attrs(ranks, m, true),
                draws,
                Just(forced),
            )
        })
        .prop_map(|(p, mesh, mut a, draws, forced)| {
            for ((i, dims), d) in forced.iter().zip(draws) {
                a[*i] = force_split(&a[*i], &mesh, dims, d);
            }
            Case { mesh, p, a }
        })
}

/// The counts of a property: forward, backward, and two grad forms.
pub struct Dirs {
    pub fw: Counts,
    pub bw: Counts,
    pub gr: Counts,
    pub gd: Counts,
}

impl Dirs {
    pub const fn new() -> Dirs {
        Dirs {
            fw: Counts::new(),
            bw: Counts::new(),
            gr: Counts::new(),
            gd: Counts::new(),
        }
    }

    /// Forward from `inputs`; backward from the outputs laid out as `outs`.
    pub fn forward_backward(
        &self,
        rule: &dyn SpmdRule,
        mesh: &Mesh,
        inputs: &[Input],
        outs: &[DistAttr],
        op: &Kernel<'_>,
    ) -> Result<(), TestCaseError> {
        self.fw.record(
            mesh,
            &rule.forward(mesh, &input_specs(inputs)),
            check_forward(rule, mesh, inputs, op),
        )?;
        let values: Vec<Tensor> = inputs.iter().map(|x| x.value.clone()).collect();
        let dense = op(&values);
        let outs = complete(outs);
        let out_specs: Vec<Spec<'_>> = dense
            .iter()
            .zip(&outs)
            .map(|(t, a)| Spec::new(t.shape(), a))
            .collect();
        let shapes: Vec<&[usize]> = values.iter().map(Tensor::shape).collect();
        self.bw.record(
            mesh,
            &rule.backward(mesh, &shapes, &out_specs),
            check_backward(rule, mesh, &values, &outs, op),
        )
    }

    /// A grad call with `sig` (the grad op's inputs) and output grads laid
    /// out as `dys`; `derived` picks the count of the derived form.
    #[allow(clippy::too_many_arguments)]
    pub fn grad(
        &self,
        derived: bool,
        rule: &dyn SpmdRule,
        mesh: &Mesh,
        sig: &[Input],
        dys: &[DistAttr],
        forward: &Kernel<'_>,
        grad: &GradKernel<'_>,
    ) -> Result<(), TestCaseError> {
        let values: Vec<Tensor> = sig.iter().map(|x| x.value.clone()).collect();
        let outs = forward(&values);
        let dy_specs: Vec<Spec<'_>> = outs
            .iter()
            .zip(dys)
            .map(|(t, a)| Spec::new(t.shape(), a))
            .collect();
        let counts = if derived { &self.gd } else { &self.gr };
        let checked = if derived {
            check_grad(rule, mesh, sig, dys, forward, grad)
        } else {
            check_grad_of_signature(rule, mesh, sig, dys, forward, grad)
        };
        counts.record(
            mesh,
            &rule.grad(mesh, &input_specs(sig), &dy_specs),
            checked,
        )
    }

    /// Forward and backward, and the grad forms named (`Some`) here, each
    /// with a share of answers that split work but for the directions in
    /// `unsplit` (`"backward"`, `"grad"`), whose cases cannot split work
    /// (the properties say why).
    pub fn assert_meaningful(
        &self,
        op: &str,
        paddle: Option<&str>,
        derived: bool,
        unsplit: &[&str],
    ) {
        let check = |counts: &Counts, dir: &str, what: String| {
            if unsplit.contains(&dir) {
                counts.assert_checked(&what);
            } else {
                counts.assert_meaningful(&what);
            }
        };
        check(&self.fw, "forward", format!("{op} forward"));
        check(&self.bw, "backward", format!("{op} backward"));
        if let Some(sig) = paddle {
            check(&self.gr, "grad", format!("{op} grad ({sig})"));
        }
        if derived {
            check(&self.gd, "grad", format!("{op} grad (derived form)"));
        }
    }
}

pub fn inputs(values: &[Tensor], attrs: &[&DistAttr]) -> Vec<Input> {
    values
        .iter()
        .zip(attrs)
        .map(|(v, a)| Input::new(v.clone(), (*a).clone()))
        .collect()
}

/// An axis as an attribute: maybe negative.
pub fn axis_attr(axis: usize, rank: usize, negative: bool) -> i64 {
    axis as i64 - if negative { rank as i64 } else { 0 }
}

/// A shape and an axis of it.
pub fn shape_axis(
    ranks: std::ops::RangeInclusive<usize>,
) -> impl Strategy<Value = (Vec<usize>, usize, bool)> {
    (shape(ranks), any::<prop::sample::Index>(), any::<bool>()).prop_map(|(s, i, neg)| {
        let axis = i.index(s.len());
        (s, axis, neg)
    })
}

/// `attr` with dim `dim` replicated.
pub fn unshard(attr: &DistAttr, dim: usize) -> DistAttr {
    let mut dims = attr.dims_mapping.as_slice().to_vec();
    dims[dim] = Sharding::REPLICATED;
    DistAttr::new(DimsMapping::from_shardings(&dims)).with_partial(attr.partial)
}
