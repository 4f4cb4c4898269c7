//! Dense reference kernels of the ops the exported models run, forward and
//! gradient, on whole tensors or on one device's blocks.
//!
//! A kernel is handed each input's values together with the global range
//! every dim of it covers ([`Arg`]), and the block each output must fill
//! ([`Want`]): a whole tensor covers `0..n` on every dim, a device's block
//! the ranges its layout gives it. The same kernel then serves the dense
//! run and every device of a simulated mesh, so a layout that cannot be
//! computed locally shows as an error naming what the device lacks, and a
//! layout computed into the wrong values shows when the blocks are compared
//! with the dense run.
//!
//! Kernels read global positions where an op's meaning depends on them (a
//! slice's bounds, an embedding row's id, a concatenation's offsets) and
//! local extents everywhere else (a view's target is the output block's
//! shape; a mean divides by the count the device holds, as a local kernel
//! does).
//!
//! Every gradient kernel is checked against central differences of its
//! forward kernel (this module's tests).

mod aten;
mod indexing;
mod math;
mod paddle;

use core::ops::Range;

use spmd_core::{AttrValue, Attrs};

use crate::tensor::Tensor;

pub use math::erf;

/// What a tensor's elements are: the values a simulation gives its inputs,
/// and how a mask reads them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Elem {
    #[default]
    Float,
    Int,
    Bool,
}

impl Elem {
    /// From the element type names of exported graphs (`float32`,
    /// `int64`, `bool`, ...).
    pub fn of(dtype: &str) -> Elem {
        match dtype {
            "bool" => Elem::Bool,
            d if d.starts_with("int") || d.starts_with("uint") => Elem::Int,
            _ => Elem::Float,
        }
    }
}

/// One tensor handed to a kernel: its values (a device's block, or the
/// whole tensor), the global range each of its dims covers, its global
/// shape and its element kind.
#[derive(Clone, Copy, Debug)]
pub struct Arg<'a> {
    pub value: &'a Tensor,
    pub block: &'a [Range<usize>],
    pub shape: &'a [usize],
    pub elem: Elem,
}

impl<'a> Arg<'a> {
    /// The rank of the tensor.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }
    /// Where dim `d`'s block starts in the tensor.
    pub fn start(&self, d: usize) -> usize {
        self.block[d].start
    }
    /// Whether dim `d`'s block is the whole dim.
    pub fn whole(&self, d: usize) -> bool {
        self.block[d] == (0..self.shape[d])
    }
}

/// An output a kernel must fill: its global shape and the block of it.
#[derive(Clone, Debug)]
pub struct Want<'a> {
    pub shape: &'a [usize],
    pub block: &'a [Range<usize>],
}

impl Want<'_> {
    /// The block's extents: the local tensor's shape.
    pub fn local(&self) -> Vec<usize> {
        self.block.iter().map(|r| r.end - r.start).collect()
    }
}

/// A forward call: the op's attributes, its inputs (`None` in an absent
/// optional slot) and the blocks of its outputs to compute.
#[derive(Debug)]
pub struct Call<'a> {
    pub op: &'a str,
    pub attrs: &'a Attrs,
    pub inputs: &'a [Option<Arg<'a>>],
    pub outputs: &'a [Want<'a>],
}

/// A gradient call: the forward op's inputs (as the forward op read them),
/// one gradient per forward output, and for each forward input the block
/// of its gradient to compute (`None`: not wanted).
#[derive(Debug)]
pub struct GradCall<'a> {
    pub op: &'a str,
    pub attrs: &'a Attrs,
    pub inputs: &'a [Option<Arg<'a>>],
    pub output_grads: &'a [Arg<'a>],
    pub input_grads: &'a [Option<Want<'a>>],
}

/// What a kernel says when a call cannot be computed.
pub type Fail = String;

/// A forward kernel: one tensor per output, of its block's shape.
pub type Forward = fn(&Call<'_>) -> Result<Vec<Tensor>, Fail>;
/// A gradient kernel: per forward input, its gradient's block where one is
/// wanted.
pub type Grad = fn(&GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail>;

/// The kernels of one op.
#[derive(Clone, Copy, Debug)]
pub struct Kernel {
    pub forward: Forward,
    pub grad: Option<Grad>,
}

/// The kernels of op `name` (a registry name: ATen's or Paddle's), when
/// this crate has them.
pub fn kernel(name: &str) -> Option<Kernel> {
    aten::kernel(name).or_else(|| paddle::kernel(name))
}

/// Every op name with kernels.
pub fn names() -> Vec<&'static str> {
    let mut all = aten::NAMES.to_vec();
    all.extend_from_slice(paddle::NAMES);
    all
}

// ------------------------------------------------------------- attributes

/// Integer attribute `name`, or `default`.
pub(crate) fn int(attrs: &Attrs, name: &str, default: i64) -> Result<i64, Fail> {
    match attrs.get(name) {
        None => Ok(default),
        Some(AttrValue::Int(v)) => Ok(*v),
        Some(AttrValue::Bool(b)) => Ok(i64::from(*b)),
        Some(AttrValue::Float(f)) if f.fract() == 0.0 => Ok(*f as i64),
        Some(other) => Err(format!("attribute `{name}` is {other}, not an integer")),
    }
}

/// Number attribute `name`, or `default`.
pub(crate) fn num(attrs: &Attrs, name: &str, default: f64) -> Result<f64, Fail> {
    match attrs.get(name) {
        None => Ok(default),
        Some(AttrValue::Int(v)) => Ok(*v as f64),
        Some(AttrValue::Float(f)) => Ok(*f),
        Some(AttrValue::Bool(b)) => Ok(f64::from(u8::from(*b))),
        Some(other) => Err(format!("attribute `{name}` is {other}, not a number")),
    }
}

/// Boolean attribute `name`, or `default`.
pub(crate) fn flag(attrs: &Attrs, name: &str, default: bool) -> Result<bool, Fail> {
    match attrs.get(name) {
        None => Ok(default),
        Some(AttrValue::Bool(b)) => Ok(*b),
        Some(AttrValue::Int(v)) => Ok(*v != 0),
        Some(other) => Err(format!("attribute `{name}` is {other}, not a bool")),
    }
}

/// Integer list attribute `name` (a single integer is a list of one).
pub(crate) fn ints(attrs: &Attrs, name: &str) -> Result<Option<Vec<i64>>, Fail> {
    match attrs.get(name) {
        None => Ok(None),
        Some(AttrValue::Ints(v)) => Ok(Some(v.clone())),
        Some(AttrValue::Int(v)) => Ok(Some(vec![*v])),
        Some(other) => Err(format!(
            "attribute `{name}` is {other}, not a list of integers"
        )),
    }
}

/// String attribute `name`, or `default`.
pub(crate) fn text<'a>(attrs: &'a Attrs, name: &str, default: &'a str) -> Result<&'a str, Fail> {
    match attrs.get(name) {
        None => Ok(default),
        Some(AttrValue::Str(s)) => Ok(s),
        Some(other) => Err(format!("attribute `{name}` is {other}, not a string")),
    }
}

/// A dim attribute (negative counts from the end) of a tensor of rank `rank`.
pub(crate) fn axis(d: i64, rank: usize) -> Result<usize, Fail> {
    let r = rank as i64;
    let a = if d < 0 { d + r } else { d };
    if (0..r.max(1)).contains(&a) {
        Ok(a as usize)
    } else {
        Err(format!("dim {d} is out of range for rank {rank}"))
    }
}

// ------------------------------------------------------------- arguments

/// Input `i`, which must be present.
pub(crate) fn input<'a>(call: &Call<'a>, i: usize) -> Result<Arg<'a>, Fail> {
    call.inputs
        .get(i)
        .copied()
        .flatten()
        .ok_or_else(|| format!("input {i} is missing"))
}

/// Forward input `i` of a gradient call, which must be present.
pub(crate) fn saved<'a>(call: &GradCall<'a>, i: usize) -> Result<Arg<'a>, Fail> {
    call.inputs
        .get(i)
        .copied()
        .flatten()
        .ok_or_else(|| format!("input {i} is missing"))
}

/// Output gradient `o`.
pub(crate) fn dy<'a>(call: &GradCall<'a>, o: usize) -> Result<Arg<'a>, Fail> {
    call.output_grads
        .get(o)
        .copied()
        .ok_or_else(|| format!("the gradient of output {o} is missing"))
}

/// The block of output `o` to fill.
pub(crate) fn want<'a>(call: &'a Call<'a>, o: usize) -> Result<&'a Want<'a>, Fail> {
    call.outputs
        .get(o)
        .ok_or_else(|| format!("output {o} is not asked for"))
}

/// Fails unless `arg`'s dim `d` covers the same global range as `want`'s
/// dim `e` (two tensors a device combines element by element).
pub(crate) fn same_range(
    what: &str,
    arg: &Arg<'_>,
    d: usize,
    other: &Range<usize>,
    e: usize,
) -> Result<(), Fail> {
    if arg.block[d] == *other {
        Ok(())
    } else {
        Err(format!(
            "{what} dim {d} holds [{}..{}) where dim {e} of the result needs [{}..{})",
            arg.block[d].start, arg.block[d].end, other.start, other.end
        ))
    }
}

/// Fails unless `arg` holds its whole dim `d` (a dim an op reads whole:
/// a normalized row, a softmax axis, the keys of attention).
pub(crate) fn whole(what: &str, arg: &Arg<'_>, d: usize) -> Result<(), Fail> {
    if arg.whole(d) {
        Ok(())
    } else {
        Err(format!(
            "{what} dim {d} holds [{}..{}) of {}, and the op reads it whole",
            arg.block[d].start, arg.block[d].end, arg.shape[d]
        ))
    }
}

/// The local extents of a block.
pub(crate) fn extents(block: &[Range<usize>]) -> Vec<usize> {
    block.iter().map(|r| r.end - r.start).collect()
}

/// The whole-tensor block of a shape.
pub fn whole_block(shape: &[usize]) -> Vec<Range<usize>> {
    shape.iter().map(|&n| 0..n).collect()
}

/// Reads `arg` element by element as broadcast onto the block `out` of a
/// tensor of rank `rank` (numpy's right alignment: a global size-1 dim
/// repeats, every other dim must hold the result's range). Returns, for an
/// index into `out`'s block, the offset into `arg`'s values.
pub(crate) fn broadcaster(
    what: &str,
    arg: &Arg<'_>,
    out: &[Range<usize>],
) -> Result<impl Fn(&[usize]) -> usize + use<>, Fail> {
    let lead = out
        .len()
        .checked_sub(arg.rank())
        .ok_or_else(|| format!("{what} has more dims than the result"))?;
    let mut strides = vec![0usize; out.len()];
    let local = extents(arg.block);
    let mut stride = 1;
    for d in (0..arg.rank()).rev() {
        if arg.shape[d] != 1 {
            same_range(what, arg, d, &out[lead + d], lead + d)?;
            strides[lead + d] = stride;
        }
        stride *= local[d];
    }
    Ok(move |i: &[usize]| i.iter().zip(&strides).map(|(&i, &s)| i * s).sum())
}

/// A tensor of shape `shape` from `f` of each multi-index.
pub(crate) fn build(shape: &[usize], f: impl FnMut(&[usize]) -> f64) -> Tensor {
    Tensor::from_fn(shape, f)
}

/// The row-major offset of `i` in `shape`.
pub(crate) fn offset(shape: &[usize], i: &[usize]) -> usize {
    i.iter().zip(shape).fold(0, |o, (&i, &n)| o * n + i)
}

/// Calls `f` with every multi-index of `shape`, row-major.
pub(crate) fn each(shape: &[usize], mut f: impl FnMut(&[usize])) {
    if shape.contains(&0) {
        return;
    }
    let mut i = vec![0; shape.len()];
    loop {
        f(&i);
        let mut d = shape.len();
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            i[d] += 1;
            if i[d] < shape[d] {
                break;
            }
            i[d] = 0;
        }
    }
}

/// `g` summed onto `arg`'s block over the dims `arg` is broadcast along
/// (the gradient of a broadcast read).
pub(crate) fn unbroadcast(
    what: &str,
    g: &Tensor,
    gblock: &[Range<usize>],
    arg: &Want<'_>,
) -> Result<Tensor, Fail> {
    let a = Arg {
        value: g,
        block: arg.block,
        shape: arg.shape,
        elem: Elem::Float,
    };
    let read = broadcaster(what, &a, gblock)?;
    let mut out = Tensor::full(&arg.local(), 0.0);
    let data = out.data_mut();
    let shape = g.shape().to_vec();
    let mut k = 0;
    each(&shape, |i| {
        data[read(i)] += g.data()[k];
        k += 1;
    });
    Ok(out)
}

#[cfg(test)]
mod tests;
