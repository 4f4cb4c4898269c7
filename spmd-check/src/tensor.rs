//! A minimal dense n-d array of `f64` (row-major) and the probe values the
//! checker feeds to rules.

use core::fmt;
use core::ops::Range;

/// A dense row-major n-d array of `f64`. A rank-0 tensor (shape `[]`) holds
/// one value.
#[derive(Clone, PartialEq)]
pub struct Tensor {
    shape: Vec<usize>,
    data: Vec<f64>,
}

impl Tensor {
    /// A tensor of this shape over `data` (row-major).
    ///
    /// # Panics
    /// When `data.len()` is not the product of `shape`.
    pub fn new(shape: &[usize], data: Vec<f64>) -> Tensor {
        assert_eq!(
            data.len(),
            shape.iter().product::<usize>(),
            "Tensor::new: {} values for shape {shape:?}",
            data.len()
        );
        Tensor {
            shape: shape.to_vec(),
            data,
        }
    }

    /// A tensor filled with `value`.
    pub fn full(shape: &[usize], value: f64) -> Tensor {
        Tensor::new(shape, vec![value; shape.iter().product()])
    }

    /// A tensor whose value at each multi-index is `f(index)`.
    pub fn from_fn(shape: &[usize], mut f: impl FnMut(&[usize]) -> f64) -> Tensor {
        let mut data = Vec::with_capacity(shape.iter().product());
        for_each_index(shape, |i| data.push(f(i)));
        Tensor::new(shape, data)
    }

    /// Probe values for a tensor of this shape (see [`Values`]), derived from a
    /// hash of `seed` and each element's global index: a rule cannot pass by
    /// luck, and the same seed gives the same tensor.
    pub fn probe(shape: &[usize], seed: u64, values: Values) -> Tensor {
        let n: usize = shape.iter().product();
        let hash = |i: usize, salt: u64| splitmix(seed ^ splitmix(i as u64 ^ salt));
        let data = match values {
            Values::Integers | Values::NearOne => {
                // A hash-ordered permutation of 1..=n: distinct magnitudes.
                let mut order: Vec<usize> = (0..n).collect();
                order.sort_by_key(|&i| hash(i, 0x9e37));
                let mut magnitude = vec![0usize; n];
                for (rank, &i) in order.iter().enumerate() {
                    magnitude[i] = rank + 1;
                }
                (0..n)
                    .map(|i| {
                        let sign = if hash(i, 0x51) & 1 == 0 { 1.0 } else { -1.0 };
                        let m = magnitude[i] as f64;
                        match values {
                            Values::Integers => sign * m,
                            // The spread shrinks with n, so that the product
                            // of all n stays below e^32.
                            _ => sign * (1.0 + m / (n as f64 + 1.0) * (64.0 / n as f64).min(1.0)),
                        }
                    })
                    .collect()
            }
            Values::Bits { ones_per_mille } => (0..n)
                .map(|i| f64::from(hash(i, 0xb1) % 1000 < u64::from(ones_per_mille)))
                .collect(),
        };
        Tensor::new(shape, data)
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    pub fn rank(&self) -> usize {
        self.shape.len()
    }
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.data.len()
    }
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
    /// The values, row-major.
    pub fn data(&self) -> &[f64] {
        &self.data
    }
    pub fn data_mut(&mut self) -> &mut [f64] {
        &mut self.data
    }

    /// Row-major strides.
    pub fn strides(&self) -> Vec<usize> {
        strides(&self.shape)
    }

    /// The flat offset of a multi-index.
    ///
    /// # Panics
    /// When the index has the wrong rank or is out of bounds.
    pub fn offset(&self, index: &[usize]) -> usize {
        assert_eq!(
            index.len(),
            self.rank(),
            "index {index:?} into {:?}",
            self.shape
        );
        let mut off = 0;
        for (d, (&i, &n)) in index.iter().zip(&self.shape).enumerate() {
            assert!(
                i < n,
                "index {index:?} out of bounds of {:?} at dim {d}",
                self.shape
            );
            off = off * n + i;
        }
        off
    }

    /// The value at a multi-index.
    pub fn get(&self, index: &[usize]) -> f64 {
        self.data[self.offset(index)]
    }

    /// Sets the value at a multi-index.
    pub fn set(&mut self, index: &[usize], value: f64) {
        let off = self.offset(index);
        self.data[off] = value;
    }

    /// The sub-block `ranges` (one range per dim).
    ///
    /// # Panics
    /// When a range is out of bounds or the rank differs.
    pub fn block(&self, ranges: &[Range<usize>]) -> Tensor {
        assert_eq!(
            ranges.len(),
            self.rank(),
            "block {ranges:?} of {:?}",
            self.shape
        );
        for (r, &n) in ranges.iter().zip(&self.shape) {
            assert!(
                r.start <= r.end && r.end <= n,
                "block {ranges:?} of {:?}",
                self.shape
            );
        }
        let shape: Vec<usize> = ranges.iter().map(|r| r.end - r.start).collect();
        let mut global = vec![0; self.rank()];
        Tensor::from_fn(&shape, |i| {
            for (d, r) in ranges.iter().enumerate() {
                global[d] = r.start + i[d];
            }
            self.get(&global)
        })
    }

    /// This tensor with every value mapped by `f`.
    pub fn map(&self, f: impl Fn(f64) -> f64) -> Tensor {
        Tensor::new(&self.shape, self.data.iter().map(|&x| f(x)).collect())
    }

    /// Elementwise `f(self, other)`; the shapes must be equal.
    pub fn zip_with(&self, other: &Tensor, f: impl Fn(f64, f64) -> f64) -> Tensor {
        assert_eq!(self.shape, other.shape, "zip_with of different shapes");
        Tensor::new(
            &self.shape,
            self.data
                .iter()
                .zip(&other.data)
                .map(|(&a, &b)| f(a, b))
                .collect(),
        )
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tensor{:?} ", self.shape)?;
        if self.len() <= 64 {
            f.debug_list().entries(&self.data).finish()
        } else {
            write!(f, "[{} values]", self.len())
        }
    }
}

/// Which probe values [`Tensor::probe`] makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Values {
    /// `±1, ±2, …, ±n` in a hashed order with hashed signs: distinct,
    /// sign-varying, and exact under `f64` sums and products of small tensors.
    #[default]
    Integers,
    /// `±(1 + c·k/(n+1))` for distinct `k`, `c = min(1, 64/n)`: distinct
    /// magnitudes near 1, so that even the product of all `n` stays finite
    /// (below e^32) and nonzero (for `Prod`).
    NearOne,
    /// `0.0` or `1.0`, `1.0` with probability `ones_per_mille / 1000` (for
    /// `Any` / `All`).
    Bits { ones_per_mille: u16 },
}

/// Row-major strides of a shape.
pub(crate) fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

/// Calls `f` with every multi-index of `shape`, row-major.
pub(crate) fn for_each_index(shape: &[usize], mut f: impl FnMut(&[usize])) {
    if shape.contains(&0) {
        return;
    }
    let mut index = vec![0; shape.len()];
    loop {
        f(&index);
        let mut d = shape.len();
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            index[d] += 1;
            if index[d] < shape[d] {
                break;
            }
            index[d] = 0;
        }
    }
}

/// The multi-index of flat (row-major) position `k` in `shape`.
pub(crate) fn unflatten(shape: &[usize], mut k: usize) -> Vec<usize> {
    let mut index = vec![0; shape.len()];
    for (i, &n) in index.iter_mut().zip(shape).rev() {
        *i = k % n.max(1);
        k /= n.max(1);
    }
    index
}

/// SplitMix64: a fast, well-mixed 64-bit hash.
pub(crate) fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_values_are_distinct_and_signed() {
        let t = Tensor::probe(&[3, 4, 5], 7, Values::Integers);
        let mut mags: Vec<i64> = t.data().iter().map(|v| v.abs() as i64).collect();
        mags.sort();
        assert_eq!(mags, (1..=60).collect::<Vec<_>>());
        assert!(t.data().iter().any(|&v| v < 0.0) && t.data().iter().any(|&v| v > 0.0));
        assert_eq!(t, Tensor::probe(&[3, 4, 5], 7, Values::Integers));
        assert_ne!(t, Tensor::probe(&[3, 4, 5], 8, Values::Integers));
    }

    #[test]
    fn blocks_and_indices() {
        let t = Tensor::from_fn(&[3, 4], |i| (i[0] * 10 + i[1]) as f64);
        assert_eq!(t.get(&[2, 3]), 23.0);
        let b = t.block(&[1..3, 2..4]);
        assert_eq!(b.shape(), &[2, 2]);
        assert_eq!(b.data(), &[12.0, 13.0, 22.0, 23.0]);
        assert_eq!(t.block(&[0..0, 0..4]).len(), 0);
        let s = Tensor::full(&[], 5.0);
        assert_eq!(s.get(&[]), 5.0);
        assert_eq!(strides(&[2, 3, 4]), vec![12, 4, 1]);
    }
}
