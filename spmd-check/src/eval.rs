//! A small dense einsum evaluator: the mathematics a rule's notation stands for.
//!
//! Every output is the einsum of its *product* operands onto its term: for each
//! index of the output's axes, their values are multiplied and the products
//! over the axes the output lacks (the contracted axes) are combined with the
//! rule's reduce type (`Sum`, `Max`, …; `Any`/`All` treat non-zero as true).
//! Each addend (`+n`) is then added, broadcast over the output's other axes.
//!
//! The notation's features (docs/semantics.md §3):
//! - `...` stands for the same trailing-aligned dims in every term (numpy
//!   broadcasting): a size-1 dim against a larger extent is broadcast;
//! - `1` is a dim of size 1 (index 0 only);
//! - `(hd)` is one dim of size `|h|·|d|` indexed `h·|d| + d` (a reshape);
//! - a label repeated in one input reads a diagonal.
//!
//! ```
//! use spmd_check::{Tensor, einsum};
//! use spmd_core::ReduceType;
//!
//! let x = Tensor::new(&[2, 3], vec![1., -2., 3., 4., 5., -6.]);
//! let y = Tensor::new(&[3], vec![1., 10., 100.]);
//! let out = einsum("ab,b->a", &[&x, &y], ReduceType::Sum)?;
//! assert_eq!(out[0].data(), &[281., -546.]);
//! let with_bias = einsum("ab,b,+a->a", &[&x, &y, &Tensor::new(&[2], vec![1000., 0.])], ReduceType::Sum)?;
//! assert_eq!(with_bias[0].data(), &[1281., -546.]);
//! let max = einsum("ab->a", &[&x], ReduceType::Max)?;
//! assert_eq!(max[0].data(), &[3., 5.]);
//! // A reshape: split the last dim into heads `h` of size `d` (one extent given).
//! let heads = spmd_check::einsum_sized("b(hd)->bhd", &[&x], ReduceType::Sum, &[('d', 1)])?;
//! assert_eq!(heads[0].shape(), &[2, 3, 1]);
//! # Ok::<(), spmd_check::EvalError>(())
//! ```

use core::fmt;

use spmd_core::ReduceType;
use spmd_core::notation::{Dim, Plan};

use crate::tensor::{Tensor, strides};

/// Why an einsum cannot be evaluated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EvalError(pub String);

impl fmt::Display for EvalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for EvalError {}

macro_rules! bail {
    ($($t:tt)*) => { return Err(EvalError(format!($($t)*))) };
}

/// One dim of a term once the ellipsis is expanded. Axis ids are the plan's
/// label ids, then `n_labels + k` for the `k`-th ellipsis dim (right-aligned
/// across terms, as inference numbers them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Slot {
    Axis(usize),
    One,
    Compound(Vec<usize>),
}

/// A notation bound to its inputs' ranks: every term as explicit slots.
#[derive(Clone, Debug)]
pub(crate) struct Layout {
    pub labels: Vec<char>,
    pub n_labels: usize,
    pub width: usize,
    pub inputs: Vec<Vec<Slot>>,
    pub outputs: Vec<Vec<Slot>>,
}

impl Layout {
    pub fn new(plan: &Plan<'_>, input_ranks: &[usize]) -> Result<Layout, EvalError> {
        if input_ranks.len() != plan.n_inputs() {
            bail!(
                "einsum {:?} has {} inputs, {} given",
                plan.source,
                plan.n_inputs(),
                input_ranks.len()
            );
        }
        let mut width = 0;
        for (i, &rank) in input_ranks.iter().enumerate() {
            let term = plan.input(i);
            let n = term.len as usize;
            match term.ellipsis {
                Some(_) if rank >= n => width = width.max(rank - n),
                None if rank == n => {}
                _ => bail!(
                    "input {i} of einsum {:?} has rank {rank}, which term `{}` cannot take",
                    plan.source,
                    plan.term_text(term)
                ),
            }
        }
        let n_labels = plan.n_axes();
        let slots = |term, ell: usize| -> Vec<Slot> {
            let dims = plan.dims_of(term);
            let slot = |d: &Dim| match *d {
                Dim::Axis(a) => Slot::Axis(a as usize),
                Dim::One => Slot::One,
                Dim::Compound { start, len } => Slot::Compound(
                    plan.compound(start, len)
                        .iter()
                        .map(|&a| a as usize)
                        .collect(),
                ),
            };
            let e = term.ellipsis.map_or(dims.len(), |e| e as usize);
            let mut out: Vec<Slot> = dims[..e].iter().map(slot).collect();
            if term.ellipsis.is_some() {
                out.extend((width - ell..width).map(|k| Slot::Axis(n_labels + k)));
            }
            out.extend(dims[e..].iter().map(slot));
            out
        };
        let inputs = input_ranks
            .iter()
            .enumerate()
            .map(|(i, &rank)| {
                let term = plan.input(i);
                slots(term, rank - term.len as usize)
            })
            .collect();
        let outputs = (0..plan.n_outputs())
            .map(|o| slots(plan.output(o), width))
            .collect();
        Ok(Layout {
            labels: plan.labels.iter().map(|&l| l as char).collect(),
            n_labels,
            width,
            inputs,
            outputs,
        })
    }

    pub fn n_axes(&self) -> usize {
        self.n_labels + self.width
    }

    /// A label, or `…k` for the `k`-th ellipsis dim.
    pub fn axis_name(&self, a: usize) -> String {
        if a < self.n_labels {
            self.labels[a].to_string()
        } else {
            format!("…{}", a - self.n_labels)
        }
    }

    /// Every axis's extent, learnt from the inputs' shapes like inference does
    /// (a size-1 dim against a larger extent broadcasts), then from `sizes`,
    /// then from compound dims with one unknown factor.
    pub fn extents(
        &self,
        shapes: &[&[usize]],
        sizes: &[(char, usize)],
    ) -> Result<Vec<usize>, EvalError> {
        const UNKNOWN: usize = usize::MAX;
        let mut extent = vec![UNKNOWN; self.n_axes()];
        for (i, (slots, shape)) in self.inputs.iter().zip(shapes).enumerate() {
            for (d, (slot, &size)) in slots.iter().zip(shape.iter()).enumerate() {
                match *slot {
                    Slot::Axis(a) => {
                        let known = extent[a];
                        if known == UNKNOWN || known == 1 {
                            extent[a] = size;
                        } else if size != known && size != 1 {
                            bail!(
                                "axis {} has extent {known}, but input {i} dim {d} has size {size}",
                                self.axis_name(a)
                            );
                        }
                    }
                    Slot::One if size != 1 => {
                        bail!("input {i} dim {d} is written `1` but has size {size}")
                    }
                    _ => {}
                }
            }
        }
        for &(label, size) in sizes {
            let Some(a) = self.labels.iter().position(|&l| l == label) else {
                bail!("size given for `{label}`, which the notation does not have");
            };
            if extent[a] != UNKNOWN && extent[a] != size {
                bail!(
                    "size {size} given for `{label}`, whose extent is {}",
                    extent[a]
                );
            }
            extent[a] = size;
        }
        // Compounds with a single unknown factor, until nothing changes.
        let compounds: Vec<(&[usize], usize, usize, usize)> = self
            .inputs
            .iter()
            .zip(shapes)
            .enumerate()
            .flat_map(|(i, (slots, shape))| {
                slots.iter().zip(shape.iter()).enumerate().filter_map(
                    move |(d, (s, &size))| match s {
                        Slot::Compound(f) => Some((f.as_slice(), size, i, d)),
                        _ => None,
                    },
                )
            })
            .collect();
        let mut progress = true;
        while progress {
            progress = false;
            for &(factors, size, i, d) in &compounds {
                let unknown: Vec<usize> = factors
                    .iter()
                    .copied()
                    .filter(|&f| extent[f] == UNKNOWN)
                    .collect();
                let known: usize = factors
                    .iter()
                    .filter(|&&f| extent[f] != UNKNOWN)
                    .map(|&f| extent[f])
                    .product();
                match unknown[..] {
                    [] if known != size => bail!(
                        "input {i} dim {d} has size {size}, but its factors' extents multiply to {known}"
                    ),
                    [f] if known != 0 && size % known == 0 => {
                        extent[f] = size / known;
                        progress = true;
                    }
                    [_] => bail!(
                        "input {i} dim {d} has size {size}, which its known factors ({known}) do not divide"
                    ),
                    _ => {}
                }
            }
        }
        if let Some(a) = extent.iter().position(|&e| e == UNKNOWN) {
            bail!(
                "the extent of axis {} is unknown: give it as a size",
                self.axis_name(a)
            );
        }
        Ok(extent)
    }
}

/// The shape of a term's tensor under these extents.
pub(crate) fn slots_shape(slots: &[Slot], extent: &[usize]) -> Vec<usize> {
    slots
        .iter()
        .map(|s| match s {
            Slot::Axis(a) => extent[*a],
            Slot::One => 1,
            Slot::Compound(f) => f.iter().map(|&a| extent[a]).product(),
        })
        .collect()
}

/// How a tensor's flat offset depends on the axes' values: `Σ coef · value`.
fn coefficients(
    slots: &[Slot],
    shape: &[usize],
    extent: &[usize],
    what: &str,
) -> Result<Vec<(usize, usize)>, EvalError> {
    if slots.len() != shape.len() {
        bail!("{what} has rank {}, its term {}", shape.len(), slots.len());
    }
    let stride = strides(shape);
    let mut coefs = Vec::new();
    for (d, (slot, &size)) in slots.iter().zip(shape).enumerate() {
        match slot {
            Slot::Axis(a) => {
                if size == extent[*a] && size != 1 {
                    coefs.push((*a, stride[d]));
                } else if size != 1 {
                    bail!(
                        "{what} dim {d} has size {size}, its axis has extent {}",
                        extent[*a]
                    );
                }
            }
            Slot::One => {
                if size != 1 {
                    bail!("{what} dim {d} is written `1` but has size {size}");
                }
            }
            Slot::Compound(factors) => {
                let need: usize = factors.iter().map(|&f| extent[f]).product();
                if size != need {
                    bail!("{what} dim {d} has size {size}, its factors make {need}");
                }
                let mut mult = 1;
                for &f in factors.iter().rev() {
                    coefs.push((f, stride[d] * mult));
                    mult *= extent[f];
                }
            }
        }
    }
    Ok(coefs)
}

/// The einsum of `inputs` (each with its slots) onto `out`: products of the
/// inputs, combined with `reduce` over the axes `out` lacks. Output positions
/// no index reaches (off a diagonal) stay 0.
pub(crate) fn contract(
    inputs: &[(&[Slot], &Tensor)],
    out: &[Slot],
    extent: &[usize],
    reduce: ReduceType,
) -> Result<Tensor, EvalError> {
    let n_axes = extent.len();
    let mut input_coefs = Vec::with_capacity(inputs.len());
    let mut in_axes = vec![false; n_axes];
    for (i, (slots, t)) in inputs.iter().enumerate() {
        for s in slots.iter() {
            match s {
                Slot::Axis(a) => in_axes[*a] = true,
                Slot::Compound(f) => f.iter().for_each(|&a| in_axes[a] = true),
                Slot::One => {}
            }
        }
        input_coefs.push(coefficients(
            slots,
            t.shape(),
            extent,
            &format!("operand {i}"),
        )?);
    }
    let out_shape = slots_shape(out, extent);
    let mut result = Tensor::full(&out_shape, 0.0);
    let out_coefs = coefficients(out, &out_shape, extent, "output")?;
    let mut is_out = vec![false; n_axes];
    for &(a, _) in &out_coefs {
        is_out[a] = true;
    }
    let out_axes: Vec<usize> = (0..n_axes).filter(|&a| is_out[a]).collect();
    let contracted: Vec<usize> = (0..n_axes).filter(|&a| in_axes[a] && !is_out[a]).collect();
    if out_axes.iter().any(|&a| extent[a] == 0) {
        return Ok(result);
    }
    let mut vals = vec![0usize; n_axes];
    let offset = |coefs: &[(usize, usize)], vals: &[usize]| -> usize {
        coefs.iter().map(|&(a, c)| c * vals[a]).sum()
    };
    loop {
        let mut acc = Acc::new(reduce);
        if contracted.iter().all(|&a| extent[a] > 0) {
            for &a in &contracted {
                vals[a] = 0;
            }
            loop {
                let mut p = 1.0;
                for ((_, t), coefs) in inputs.iter().zip(&input_coefs) {
                    p *= t.data()[offset(coefs, &vals)];
                }
                acc.push(p);
                if !step(&contracted, extent, &mut vals) {
                    break;
                }
            }
        }
        let off = offset(&out_coefs, &vals);
        result.data_mut()[off] = acc.finish();
        if !step(&out_axes, extent, &mut vals) {
            break;
        }
    }
    Ok(result)
}

/// Advances the odometer over `axes`; false when it wraps around.
fn step(axes: &[usize], extent: &[usize], vals: &mut [usize]) -> bool {
    for &a in axes.iter().rev() {
        vals[a] += 1;
        if vals[a] < extent[a] {
            return true;
        }
        vals[a] = 0;
    }
    false
}

/// A running reduction.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Acc {
    reduce: ReduceType,
    value: f64,
    count: usize,
}

impl Acc {
    pub fn new(reduce: ReduceType) -> Acc {
        let value = match reduce {
            ReduceType::Sum | ReduceType::Avg | ReduceType::Any => 0.0,
            ReduceType::Prod | ReduceType::All => 1.0,
            ReduceType::Max => f64::NEG_INFINITY,
            ReduceType::Min => f64::INFINITY,
        };
        Acc {
            reduce,
            value,
            count: 0,
        }
    }

    pub fn push(&mut self, x: f64) {
        self.count += 1;
        let v = self.value;
        self.value = match self.reduce {
            ReduceType::Sum | ReduceType::Avg => v + x,
            ReduceType::Prod => v * x,
            ReduceType::Max => v.max(x),
            ReduceType::Min => v.min(x),
            ReduceType::Any => f64::from(v != 0.0 || x != 0.0),
            ReduceType::All => f64::from(v != 0.0 && x != 0.0),
        };
    }

    /// The result; an average of nothing is NaN.
    pub fn finish(self) -> f64 {
        match self.reduce {
            ReduceType::Avg => self.value / self.count as f64,
            _ => self.value,
        }
    }
}

/// Reduces values with a reduce type (what a partial reduction over devices,
/// or a contraction, computes).
pub fn combine(reduce: ReduceType, values: impl IntoIterator<Item = f64>) -> f64 {
    let mut acc = Acc::new(reduce);
    values.into_iter().for_each(|x| acc.push(x));
    acc.finish()
}

/// Evaluates an einsum notation on dense inputs (see the module docs).
pub fn einsum(
    notation: &str,
    inputs: &[&Tensor],
    reduce: ReduceType,
) -> Result<Vec<Tensor>, EvalError> {
    einsum_sized(notation, inputs, reduce, &[])
}

/// [`einsum`], with the extents of labels the shapes do not determine (the
/// factors of a compound input dim, e.g. `h` and `d` of `(hd)`).
pub fn einsum_sized(
    notation: &str,
    inputs: &[&Tensor],
    reduce: ReduceType,
    sizes: &[(char, usize)],
) -> Result<Vec<Tensor>, EvalError> {
    let n = spmd_core::notation::parse(notation).map_err(|e| EvalError(e.to_string()))?;
    let plan = n.plan();
    let ranks: Vec<usize> = inputs.iter().map(|t| t.rank()).collect();
    let layout = Layout::new(&plan, &ranks)?;
    let shapes: Vec<&[usize]> = inputs.iter().map(|t| t.shape()).collect();
    let extent = layout.extents(&shapes, sizes)?;
    let operands: Vec<(&[Slot], &Tensor)> = layout
        .inputs
        .iter()
        .map(Vec::as_slice)
        .zip(inputs.iter().copied())
        .collect();
    // Products multiply; each addend (`+n`) is added, broadcast.
    let products: Vec<(&[Slot], &Tensor)> = (0..operands.len())
        .filter(|&i| !plan.is_addend(i))
        .map(|i| operands[i])
        .collect();
    layout
        .outputs
        .iter()
        .map(|out| {
            let mut sum = if products.is_empty() {
                Tensor::full(&slots_shape(out, &extent), 0.0)
            } else {
                contract(&products, out, &extent, reduce)?
            };
            for i in (0..operands.len()).filter(|&i| plan.is_addend(i)) {
                let added = contract(&[operands[i]], out, &extent, reduce)?;
                sum = sum.zip_with(&added, |a, b| a + b);
            }
            Ok(sum)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(shape: &[usize], data: &[f64]) -> Tensor {
        Tensor::new(shape, data.to_vec())
    }

    #[test]
    fn matmul_and_reductions() {
        let x = t(&[2, 2], &[1., 2., 3., 4.]);
        let y = t(&[2, 2], &[5., 6., 7., 8.]);
        let r = einsum("mk,kn->mn", &[&x, &y], ReduceType::Sum).unwrap();
        assert_eq!(r[0].data(), &[19., 22., 43., 50.]);
        let r = einsum("ab->", &[&x], ReduceType::Prod).unwrap();
        assert_eq!(r[0].data(), &[24.]);
        let r = einsum("ab->b", &[&x], ReduceType::Min).unwrap();
        assert_eq!(r[0].data(), &[1., 2.]);
        let r = einsum("ab->a", &[&x], ReduceType::Avg).unwrap();
        assert_eq!(r[0].data(), &[1.5, 3.5]);
        let b = t(&[2, 2], &[0., 1., 0., 0.]);
        assert_eq!(
            einsum("ab->a", &[&b], ReduceType::Any).unwrap()[0].data(),
            &[1., 0.]
        );
        assert_eq!(
            einsum("ab->a", &[&b], ReduceType::All).unwrap()[0].data(),
            &[0., 0.]
        );
    }

    #[test]
    fn diagonal_one_and_several_outputs() {
        let x = t(&[2, 2], &[1., 2., 3., 4.]);
        let r = einsum("ii->i", &[&x], ReduceType::Sum).unwrap();
        assert_eq!(r[0].data(), &[1., 4.]);
        let r = einsum("ab->a1,b", &[&x], ReduceType::Sum).unwrap();
        assert_eq!(r[0].shape(), &[2, 1]);
        assert_eq!(r[0].data(), &[3., 7.]);
        assert_eq!(r[1].data(), &[4., 6.]);
    }

    #[test]
    fn ellipsis_broadcasts_size_one_dims() {
        // x: [2, 1, 3], y: [4, 3] -> out[..., a] = x[..., a] * y[..., a]
        let x = Tensor::from_fn(&[2, 1, 3], |i| (i[0] * 10 + i[2]) as f64);
        let y = Tensor::from_fn(&[4, 3], |i| (i[0] * 100 + i[1]) as f64);
        let r = einsum("...a,...a->...a", &[&x, &y], ReduceType::Sum).unwrap();
        assert_eq!(r[0].shape(), &[2, 4, 3]);
        assert_eq!(r[0].get(&[1, 3, 2]), 12. * 302.);
        // An ellipsis in no output is contracted.
        let r = einsum("...a->a", &[&x], ReduceType::Sum).unwrap();
        assert_eq!(r[0].data(), &[10., 12., 14.]);
    }

    #[test]
    fn compound_dims_are_reshapes() {
        let x = Tensor::from_fn(&[2, 6], |i| (i[0] * 10 + i[1]) as f64);
        let r = einsum_sized("b(hd)->bhd", &[&x], ReduceType::Sum, &[('h', 3)]).unwrap();
        assert_eq!(r[0].shape(), &[2, 3, 2]);
        assert_eq!(r[0].get(&[1, 2, 1]), 15.);
        let back = einsum("bhd->b(hd)", &[&r[0]], ReduceType::Sum).unwrap();
        assert_eq!(back[0], x);
        // h and d unknown: an error that says what to give.
        let err = einsum("b(hd)->bhd", &[&x], ReduceType::Sum).unwrap_err();
        assert!(err.0.contains("unknown"), "{err}");
    }

    #[test]
    fn shape_errors() {
        let x = t(&[2, 3], &[0.; 6]);
        let y = t(&[4, 3], &[0.; 12]);
        assert!(einsum("ab,ab->a", &[&x, &y], ReduceType::Sum).is_err());
        assert!(einsum("abc->a", &[&x], ReduceType::Sum).is_err());
        assert!(einsum("a1->a", &[&x], ReduceType::Sum).is_err());
    }
}
