//! ATen's ops that read or write positions along one dim, as
//! mixture-of-experts routing runs them: `topk` (the experts a token
//! chooses), `gather` (their scores), `scatter.value` (a mask of the chosen
//! groups), `slice_scatter` (a slice written into a tensor), and in
//! `transformers`' grouped form `sort` (tokens ordered by expert),
//! `index_select` (their rows) and `index_put` (the inverse order).
//!
//! The positions are global, so the dim they index must be whole on a
//! device (a device with part of it would read or write the wrong
//! elements); every other dim is computed block by block.

use super::{
    Arg, Call, Fail, GradCall, Kernel, Want, axis, dy, extents, input, int, num, same_range, saved,
    want, whole,
};
use crate::tensor::Tensor;

pub(super) fn kernel(name: &str) -> Option<Kernel> {
    let k = |forward, grad| Some(Kernel { forward, grad });
    match name {
        "aten.topk" => k(topk, Some(topk_grad)),
        "aten.gather" => k(gather, Some(gather_grad)),
        "aten.scatter.value" => k(scatter_value, Some(scatter_value_grad)),
        "aten.slice_scatter" => k(slice_scatter, Some(slice_scatter_grad)),
        "aten.sort" => k(sort, Some(sort_grad)),
        "aten.index_select" => k(index_select, Some(index_select_grad)),
        "aten.index_put" => k(index_put, Some(index_put_grad)),
        _ => None,
    }
}

/// The elements of a row-major block of `shape` along dim `d`: for every
/// position of the other dims, the offsets of the `shape[d]` elements of
/// its row, in order.
fn rows(shape: &[usize], d: usize) -> impl Iterator<Item = Vec<usize>> + use<> {
    let stride: usize = shape[d + 1..].iter().product();
    let n = shape[d];
    let outer: usize = shape[..d].iter().product();
    (0..outer * stride).map(move |r| {
        let (o, i) = (r / stride, r % stride);
        (0..n).map(|k| o * n * stride + k * stride + i).collect()
    })
}

/// Fails unless `a` and `b` cover the same range on every dim but `d`.
fn same_but(what: &str, a: &Arg<'_>, b: &[core::ops::Range<usize>], d: usize) -> Result<(), Fail> {
    for e in (0..a.rank()).filter(|&e| e != d) {
        same_range(what, a, e, &b[e], e)?;
    }
    Ok(())
}

/// The positions of a row (its elements' offsets in `data`) in order of
/// their values, largest first when `descending`, ties to the lower
/// position.
fn ordered(data: &[f64], row: &[usize], descending: bool) -> Vec<usize> {
    let mut order: Vec<usize> = (0..row.len()).collect();
    order.sort_by(|&a, &b| {
        let (va, vb) = (data[row[a]], data[row[b]]);
        let o = if descending {
            vb.total_cmp(&va)
        } else {
            va.total_cmp(&vb)
        };
        o.then(a.cmp(&b))
    });
    order
}

// ------------------------------------------------------------------ top-k

/// `aten.topk(self, k, dim, largest, sorted)`'s dim and the chosen
/// positions of each row of `x` (global: the dim is whole), best first,
/// ties to the lower position.
fn chosen(attrs: &spmd_core::Attrs, x: &Arg<'_>) -> Result<(usize, Vec<Vec<usize>>), Fail> {
    let d = axis(int(attrs, "dim", -1)?, x.rank())?;
    whole("input 0", x, d)?;
    let k = usize::try_from(int(attrs, "k", 1)?).map_err(|_| "a negative k".to_string())?;
    let n = x.shape[d];
    if k > n {
        return Err(format!("k = {k} of a dim of {n}"));
    }
    let largest = super::flag(attrs, "largest", true)?;
    let data = x.value.data();
    let picks = rows(&extents(x.block), d)
        .map(|row| {
            let mut order = ordered(data, &row, largest);
            order.truncate(k);
            order
        })
        .collect();
    Ok((d, picks))
}

fn topk(call: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    let x = input(call, 0)?;
    let (d, picks) = chosen(call.attrs, &x)?;
    let (values, indices) = (want(call, 0)?, want(call, 1)?);
    for w in [values, indices] {
        same_but("input 0", &x, w.block, d)?;
        if w.block[d] != (0..w.shape[d]) {
            return Err(format!("the top-k dim {d} of the result is split"));
        }
    }
    let local = values.local();
    let (mut v, mut i) = (Tensor::full(&local, 0.0), Tensor::full(&local, 0.0));
    let data = x.value.data();
    let xs = extents(x.block);
    for ((row, out), pick) in rows(&xs, d).zip(rows(&local, d)).zip(&picks) {
        for (slot, &p) in out.iter().zip(pick) {
            v.data_mut()[*slot] = data[row[p]];
            i.data_mut()[*slot] = p as f64;
        }
    }
    Ok(vec![v, i])
}

/// Each chosen element's gradient is its value's; the others get none.
fn topk_grad(call: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    let x = saved(call, 0)?;
    let g = dy(call, 0)?;
    let Some(w) = call.input_grads.first().cloned().flatten() else {
        return Ok(vec![None]);
    };
    let (d, picks) = chosen(call.attrs, &x)?;
    same_but("the values' gradient", &g, w.block, d)?;
    same_but("input 0", &x, w.block, d)?;
    let mut dx = Tensor::full(&w.local(), 0.0);
    let gs = extents(g.block);
    for ((row, grow), pick) in rows(&w.local(), d).zip(rows(&gs, d)).zip(&picks) {
        for (slot, &p) in grow.iter().zip(pick) {
            dx.data_mut()[row[p]] += g.value.data()[*slot];
        }
    }
    Ok(vec![Some(dx)])
}

// ------------------------------------------------------- gather, scatter

/// A position along dim `d` read from an index tensor: in range, counted
/// from the end when negative.
fn position(v: f64, n: usize, d: usize) -> Result<usize, Fail> {
    let p = v as i64;
    let p = if p < 0 { p + n as i64 } else { p };
    usize::try_from(p)
        .ok()
        .filter(|&p| p < n)
        .ok_or_else(|| format!("index {v} out of range for dim {d} of {n}"))
}

/// For each element of `index`'s block: its offset in `index`, and the
/// offset in a block of `target` extents of the same position with dim
/// `d` replaced by the index's value.
fn addressed(
    index: &Arg<'_>,
    target: &[usize],
    n: usize,
    d: usize,
) -> Result<Vec<(usize, usize)>, Fail> {
    let ix = extents(index.block);
    let mut out = Vec::with_capacity(index.value.len());
    let mut k = 0;
    let mut fail = None;
    super::each(&ix, |i| {
        match position(index.value.data()[k], n, d) {
            Ok(p) => {
                let mut j = i.to_vec();
                j[d] = p;
                out.push((k, super::offset(target, &j)));
            }
            Err(e) => {
                fail.get_or_insert(e);
            }
        }
        k += 1;
    });
    fail.map_or(Ok(out), Err)
}

/// The dim of `gather`/`scatter`, and the checks both make: `self` whole
/// along it, the index's other dims where `self`'s are.
fn indexed_dim(attrs: &spmd_core::Attrs, x: &Arg<'_>, index: &Arg<'_>) -> Result<usize, Fail> {
    let d = axis(int(attrs, "dim", 0)?, x.rank())?;
    whole("input 0", x, d)?;
    if index.rank() != x.rank() {
        return Err(format!(
            "an index of rank {} into a tensor of rank {}",
            index.rank(),
            x.rank()
        ));
    }
    for e in (0..x.rank()).filter(|&e| e != d) {
        if !(x.whole(e) && index.whole(e)) {
            same_range("the index", index, e, &x.block[e], e)?;
        }
    }
    Ok(d)
}

/// `aten.gather(self, dim, index)`: `out[i] = self[i with dim = index[i]]`,
/// `out` shaped like the index.
fn gather(call: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    let (x, index) = (input(call, 0)?, input(call, 1)?);
    let out = want(call, 0)?;
    let d = indexed_dim(call.attrs, &x, &index)?;
    for e in 0..index.rank() {
        same_range("the index", &index, e, &out.block[e], e)?;
    }
    let mut t = Tensor::full(&out.local(), 0.0);
    for (k, at) in addressed(&index, &extents(x.block), x.shape[d], d)? {
        t.data_mut()[k] = x.value.data()[at];
    }
    Ok(vec![t])
}

fn gather_grad(call: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    let (x, index, g) = (saved(call, 0)?, saved(call, 1)?, dy(call, 0)?);
    let Some(w) = call.input_grads.first().cloned().flatten() else {
        return Ok(vec![None, None]);
    };
    let d = indexed_dim(call.attrs, &x, &index)?;
    for e in 0..index.rank() {
        same_range("the output's gradient", &g, e, &index.block[e], e)?;
    }
    let mut dx = Tensor::full(&w.local(), 0.0);
    for (k, at) in addressed(&index, &w.local(), x.shape[d], d)? {
        dx.data_mut()[at] += g.value.data()[k];
    }
    Ok(vec![Some(dx), None])
}

/// `aten.scatter.value(self, dim, index, value)`: `self` with `value`
/// written at every position the index names.
fn scatter_value(call: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    let (x, index) = (input(call, 0)?, input(call, 1)?);
    let out = want(call, 0)?;
    let d = indexed_dim(call.attrs, &x, &index)?;
    for e in 0..x.rank() {
        same_range("input 0", &x, e, &out.block[e], e)?;
    }
    let v = num(call.attrs, "value", 0.0)?;
    let mut t = x.value.clone();
    for (_, at) in addressed(&index, &extents(x.block), x.shape[d], d)? {
        t.data_mut()[at] = v;
    }
    Ok(vec![t])
}

/// `self`'s gradient: the result's, except where the value overwrote it.
fn scatter_value_grad(call: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    let (x, index, g) = (saved(call, 0)?, saved(call, 1)?, dy(call, 0)?);
    let Some(w) = call.input_grads.first().cloned().flatten() else {
        return Ok(vec![None, None]);
    };
    let d = indexed_dim(call.attrs, &x, &index)?;
    for e in 0..x.rank() {
        same_range("the output's gradient", &g, e, &w.block[e], e)?;
    }
    let mut dx = g.value.clone();
    for (_, at) in addressed(&index, &w.local(), x.shape[d], d)? {
        dx.data_mut()[at] = 0.0;
    }
    Ok(vec![Some(dx), None])
}

// ----------------------------------------------------------- slice_scatter

/// `slice_scatter`'s dim and the positions along it that `src` fills.
fn slice_positions(
    call_attrs: &spmd_core::Attrs,
    x: &Arg<'_>,
) -> Result<(usize, Vec<usize>), Fail> {
    let d = axis(int(call_attrs, "dim", 0)?, x.rank())?;
    let n = x.shape[d] as i64;
    let clamp = |v: i64| (if v < 0 { v + n } else { v }).clamp(0, n) as usize;
    let start = clamp(int(call_attrs, "start", 0)?);
    let end = clamp(int(call_attrs, "end", n)?);
    let step = usize::try_from(int(call_attrs, "step", 1)?)
        .ok()
        .filter(|&s| s > 0)
        .ok_or("a step that is not positive")?;
    Ok((d, (start..end).step_by(step).collect()))
}

/// The checks of `slice_scatter` and its gradient: the sliced dim whole on
/// `self` and `src`, their other dims where the result's are.
fn slice_checks(
    x: &Arg<'_>,
    src: &Arg<'_>,
    out: &Want<'_>,
    d: usize,
    fills: usize,
) -> Result<(), Fail> {
    whole("input 0", x, d)?;
    whole("input 1", src, d)?;
    if src.shape[d] != fills {
        return Err(format!(
            "a source of {} along dim {d} for a slice of {fills}",
            src.shape[d]
        ));
    }
    for e in 0..x.rank() {
        same_range("input 0", x, e, &out.block[e], e)?;
        if e != d {
            same_range("input 1", src, e, &out.block[e], e)?;
        }
    }
    Ok(())
}

/// `aten.slice_scatter(self, src, dim, start, end, step)`: `self` with
/// `src` written over the slice.
fn slice_scatter(call: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    let (x, src) = (input(call, 0)?, input(call, 1)?);
    let out = want(call, 0)?;
    let (d, fills) = slice_positions(call.attrs, &x)?;
    slice_checks(&x, &src, out, d, fills.len())?;
    let mut t = x.value.clone();
    let ss = extents(src.block);
    let xs = extents(x.block);
    for (xrow, srow) in rows(&xs, d).zip(rows(&ss, d)) {
        for (&p, &s) in fills.iter().zip(&srow) {
            t.data_mut()[xrow[p]] = src.value.data()[s];
        }
    }
    Ok(vec![t])
}

/// `self`'s gradient is the result's off the slice; `src`'s, the slice's.
fn slice_scatter_grad(call: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    let (x, src, g) = (saved(call, 0)?, saved(call, 1)?, dy(call, 0)?);
    let (d, fills) = slice_positions(call.attrs, &x)?;
    let gw = Want {
        shape: g.shape,
        block: g.block,
    };
    slice_checks(&x, &src, &gw, d, fills.len())?;
    let w = |k: usize| call.input_grads.get(k).cloned().flatten();
    let gs = extents(g.block);
    let dself = w(0).map(|_| {
        let mut t = g.value.clone();
        for row in rows(&gs, d) {
            for &p in &fills {
                t.data_mut()[row[p]] = 0.0;
            }
        }
        t
    });
    let dsrc = w(1).map(|ws| {
        let mut t = Tensor::full(&ws.local(), 0.0);
        for (grow, srow) in rows(&gs, d).zip(rows(&ws.local(), d)) {
            for (&p, &s) in fills.iter().zip(&srow) {
                t.data_mut()[s] = g.value.data()[grow[p]];
            }
        }
        t
    });
    Ok(vec![dself, dsrc])
}

// ------------------------------------------------------------------- sort

/// `aten.sort(self, dim, descending)`'s dim and each row's order (global
/// positions: the dim is whole), ties to the lower position.
fn sorted(attrs: &spmd_core::Attrs, x: &Arg<'_>) -> Result<(usize, Vec<Vec<usize>>), Fail> {
    let d = axis(int(attrs, "dim", -1)?, x.rank())?;
    whole("input 0", x, d)?;
    let descending = super::flag(attrs, "descending", false)?;
    let data = x.value.data();
    let orders = rows(&extents(x.block), d)
        .map(|row| ordered(data, &row, descending))
        .collect();
    Ok((d, orders))
}

fn sort(call: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    let x = input(call, 0)?;
    let (d, orders) = sorted(call.attrs, &x)?;
    for o in 0..2 {
        let w = want(call, o)?;
        for e in 0..x.rank() {
            same_range("input 0", &x, e, &w.block[e], e)?;
        }
    }
    let xs = extents(x.block);
    let (mut v, mut i) = (Tensor::full(&xs, 0.0), Tensor::full(&xs, 0.0));
    for (row, order) in rows(&xs, d).zip(&orders) {
        for (slot, &p) in row.iter().zip(order) {
            v.data_mut()[*slot] = x.value.data()[row[p]];
            i.data_mut()[*slot] = p as f64;
        }
    }
    Ok(vec![v, i])
}

/// Each element's gradient is that of the place it was sorted to.
fn sort_grad(call: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    let x = saved(call, 0)?;
    let g = dy(call, 0)?;
    let Some(w) = call.input_grads.first().cloned().flatten() else {
        return Ok(vec![None]);
    };
    let (d, orders) = sorted(call.attrs, &x)?;
    for e in 0..x.rank() {
        same_range("the values' gradient", &g, e, &w.block[e], e)?;
    }
    let mut dx = Tensor::full(&w.local(), 0.0);
    for (row, order) in rows(&w.local(), d).zip(&orders) {
        for (slot, &p) in row.iter().zip(order) {
            dx.data_mut()[row[p]] += g.value.data()[*slot];
        }
    }
    Ok(vec![Some(dx)])
}

// ----------------------------------------------------------- index_select

/// `aten.index_select(self, dim, index)`: the slices of `self` along `dim`
/// at the (global) positions of the 1-d index, which may be split with the
/// result's dim.
fn index_select(call: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    let (x, index) = (input(call, 0)?, input(call, 1)?);
    let out = want(call, 0)?;
    let d = axis(int(call.attrs, "dim", 0)?, x.rank())?;
    whole("input 0", &x, d)?;
    same_range("the index", &index, 0, &out.block[d], d)?;
    same_but("input 0", &x, out.block, d)?;
    let n = x.shape[d];
    let picks = index
        .value
        .data()
        .iter()
        .map(|&v| position(v, n, d))
        .collect::<Result<Vec<_>, _>>()?;
    let xs = extents(x.block);
    let local = out.local();
    let mut t = Tensor::full(&local, 0.0);
    for (orow, xrow) in rows(&local, d).zip(rows(&xs, d)) {
        for (slot, &p) in orow.iter().zip(&picks) {
            t.data_mut()[*slot] = x.value.data()[xrow[p]];
        }
    }
    Ok(vec![t])
}

/// `self`'s gradient: each picked slice's gradient added back at its
/// position (over the index's block: a part of the sum where it is split).
fn index_select_grad(call: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    let (x, index, g) = (saved(call, 0)?, saved(call, 1)?, dy(call, 0)?);
    let Some(w) = call.input_grads.first().cloned().flatten() else {
        return Ok(vec![None, None]);
    };
    let d = axis(int(call.attrs, "dim", 0)?, x.rank())?;
    if w.block[d] != (0..w.shape[d]) {
        return Err(format!(
            "the gradient of input 0 is split on the selected dim {d}"
        ));
    }
    same_range("the index", &index, 0, &g.block[d], d)?;
    same_but("the output's gradient", &g, w.block, d)?;
    let n = x.shape[d];
    let picks = index
        .value
        .data()
        .iter()
        .map(|&v| position(v, n, d))
        .collect::<Result<Vec<_>, _>>()?;
    let gs = extents(g.block);
    let mut dx = Tensor::full(&w.local(), 0.0);
    for (grow, xrow) in rows(&gs, d).zip(rows(&w.local(), d)) {
        for (slot, &p) in grow.iter().zip(&picks) {
            dx.data_mut()[xrow[p]] += g.value.data()[*slot];
        }
    }
    Ok(vec![Some(dx), None])
}

// ---------------------------------------------------------------- index_put

/// `aten.index_put(self, indices, values, accumulate)`, its inputs as the
/// graph lists them: `self`, one 1-d index per leading dim, `values` last.
/// The indexed dims are whole; `values` is `[k, rest...]` or `[rest...]`,
/// `rest` the other dims of `self`, block for block.
struct Put<'a> {
    x: Arg<'a>,
    indices: Vec<Arg<'a>>,
    values: Arg<'a>,
}

impl<'a> Put<'a> {
    fn of(inputs: &[Option<Arg<'a>>]) -> Result<Put<'a>, Fail> {
        let (Some(Some(x)), Some(Some(values))) = (inputs.first(), inputs.last()) else {
            return Err("index_put without self or values".into());
        };
        let middle = &inputs[1..inputs.len() - 1];
        let indices: Vec<Arg<'a>> = middle.iter().map_while(|i| *i).collect();
        if indices.is_empty() || indices.len() != middle.len() || indices.len() > x.rank() {
            return Err(
                "index_put's indices must be the leading dims' 1-d tensors, none left out".into(),
            );
        }
        Ok(Put {
            x: *x,
            indices,
            values: *values,
        })
    }

    /// Checks the blocks; for each index element, the offset in `self`'s
    /// block of each of its slice's elements, and that element's offset in
    /// `values`'s block.
    fn places(&self) -> Result<Vec<(usize, usize)>, Fail> {
        let n = self.indices.len();
        let r = self.x.rank();
        for d in 0..n {
            whole("input 0", &self.x, d)?;
        }
        let k = self.indices[0].shape[0];
        for (j, i) in self.indices.iter().enumerate() {
            if i.rank() != 1 || i.shape[0] != k || !i.whole(0) {
                return Err(format!("index {j} is not a whole 1-d index of {k}"));
            }
        }
        let vr = self.values.rank();
        let lead = vr
            .checked_sub(r - n)
            .filter(|&l| l <= 1)
            .ok_or_else(|| format!("values of rank {vr} for {} dims of input 0 left", r - n))?;
        if lead == 1 && !self.values.whole(0) {
            return Err("the values' first dim is split".into());
        }
        for e in n..r {
            same_range(
                "the values",
                &self.values,
                e - n + lead,
                &self.x.block[e],
                e,
            )?;
        }
        let xs = extents(self.x.block);
        let vs = extents(self.values.block);
        let rest: Vec<usize> = xs[n..].to_vec();
        let mut places = Vec::new();
        for j in 0..k {
            let at = (0..n)
                .map(|d| position(self.indices[d].value.data()[j], self.x.shape[d], d))
                .collect::<Result<Vec<_>, _>>()?;
            super::each(&rest, |i| {
                let mut xi = at.clone();
                xi.extend_from_slice(i);
                let vi: Vec<usize> = if lead == 1 {
                    std::iter::once(j).chain(i.iter().copied()).collect()
                } else {
                    i.to_vec()
                };
                places.push((super::offset(&xs, &xi), super::offset(&vs, &vi)));
            });
        }
        Ok(places)
    }
}

fn index_put(call: &Call<'_>) -> Result<Vec<Tensor>, Fail> {
    let put = Put::of(call.inputs)?;
    let out = want(call, 0)?;
    for e in 0..put.x.rank() {
        same_range("input 0", &put.x, e, &out.block[e], e)?;
    }
    let accumulate = super::flag(call.attrs, "accumulate", false)?;
    let mut t = put.x.value.clone();
    for (at, from) in put.places()? {
        let v = put.values.value.data()[from];
        let d = t.data_mut();
        d[at] = if accumulate { d[at] + v } else { v };
    }
    Ok(vec![t])
}

/// `self`'s gradient: the result's, but where a value replaced it; each
/// value's: the result's gradient where it went.
fn index_put_grad(call: &GradCall<'_>) -> Result<Vec<Option<Tensor>>, Fail> {
    let put = Put::of(call.inputs)?;
    let g = dy(call, 0)?;
    for e in 0..put.x.rank() {
        same_range("the output's gradient", &g, e, &put.x.block[e], e)?;
    }
    let accumulate = super::flag(call.attrs, "accumulate", false)?;
    let places = put.places()?;
    let slots = call.input_grads.len();
    let mut grads: Vec<Option<Tensor>> = vec![None; slots];
    if let Some(w) = call.input_grads.first().cloned().flatten() {
        let mut dx = g.value.clone();
        if !accumulate {
            for &(at, _) in &places {
                dx.data_mut()[at] = 0.0;
            }
        }
        debug_assert_eq!(dx.shape(), w.local().as_slice());
        grads[0] = Some(dx);
    }
    if let Some(w) = call.input_grads.last().cloned().flatten() {
        let mut dv = Tensor::full(&w.local(), 0.0);
        for &(at, from) in &places {
            dv.data_mut()[from] += g.value.data()[at];
        }
        grads[slots - 1] = Some(dv);
    }
    Ok(grads)
}
