//! Soundness is the judge (`docs/semantics.md`, "Soundness"): every
//! conformance vector the checker can simulate is run twice through
//! `spmd_check::check_answer`, once with our answer and once with Paddle's
//! (the vector's `expected`), on values laid out per device, with each op's
//! reference kernel run on every device's blocks.
//!
//! - No answer of ours may be unsound.
//! - A deviation listed because Paddle's answer is unsound (kinds
//!   `unexplained partial`, `unsound paddle answer`, `grad layout`) must be
//!   confirmed: Paddle's answer fails the checker, ours passes. A listed
//!   reason the checker does not confirm fails the test.
//! - Every vector the checker cannot simulate is counted, with its reason,
//!   and the counts are printed (`--nocapture`) and bounded.
//!
//! Extents are shrunk before simulating, preserving what a rule looks at:
//! an extent `e` above twice the mesh's device count `P` becomes
//! `P + e mod P` (every product of mesh dims divides `P`, so divisibility by
//! them, and having at least as many elements as shards, are unchanged).
//! Ops whose attributes name extents (reshape, flatten, split) keep theirs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde_json::Value;
use spmd_check::{Direction as Dir, LocalCall, Tensor, Values, check_answer};
use spmd_conformance::{Case, Direction, parse_cases};
use spmd_core::{DimsMapping, DistAttr, Mesh, Partial, ReduceType, RuleResult};

const FILES: [&str; 2] = ["paddle-suite.json", "paddle-3.3.1-random.json"];
/// Elements of all inputs and outputs of one simulated case, at most (the
/// test runs in debug builds in CI).
const MAX_ELEMENTS: usize = 40_000;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/conformance")
}

fn load(file: &str) -> Vec<Case> {
    let text =
        std::fs::read_to_string(dir().join(file)).expect("the vectors are in the repository");
    parse_cases(&text).expect("the vectors parse")
}

// ---------------------------------------------------------------- tensors

fn idx_iter(shape: &[usize]) -> Vec<Vec<usize>> {
    let n: usize = shape.iter().product();
    let mut out = Vec::with_capacity(n);
    let mut i = vec![0; shape.len()];
    for _ in 0..n {
        out.push(i.clone());
        for d in (0..shape.len()).rev() {
            i[d] += 1;
            if i[d] < shape[d] {
                break;
            }
            i[d] = 0;
        }
    }
    out
}

/// numpy broadcasting of two tensors with `f`.
fn broadcast2(x: &Tensor, y: &Tensor, f: impl Fn(f64, f64) -> f64) -> Tensor {
    let r = x.rank().max(y.rank());
    let dim = |t: &Tensor, d: usize| {
        let off = r - t.rank();
        if d < off { 1 } else { t.shape()[d - off] }
    };
    let shape: Vec<usize> = (0..r)
        .map(|d| {
            let (a, b) = (dim(x, d), dim(y, d));
            assert!(
                a == b || a == 1 || b == 1,
                "shapes {:?} and {:?} do not broadcast",
                x.shape(),
                y.shape()
            );
            a.max(b)
        })
        .collect();
    let pick = |t: &Tensor, i: &[usize]| {
        let off = r - t.rank();
        let j: Vec<usize> = (0..t.rank())
            .map(|d| if t.shape()[d] == 1 { 0 } else { i[d + off] })
            .collect();
        t.get(&j)
    };
    Tensor::from_fn(&shape, |i| f(pick(x, i), pick(y, i)))
}

/// Reduces the dims in `axes` with `f` (over the values along them).
fn reduce(x: &Tensor, axes: &[bool], keep: bool, f: &dyn Fn(&[f64]) -> f64) -> Tensor {
    let shape: Vec<usize> = x
        .shape()
        .iter()
        .zip(axes)
        .filter_map(|(&e, &r)| if r { keep.then_some(1) } else { Some(e) })
        .collect();
    let mut groups: BTreeMap<Vec<usize>, Vec<f64>> = BTreeMap::new();
    for i in idx_iter(x.shape()) {
        let key: Vec<usize> = i
            .iter()
            .zip(axes)
            .filter_map(|(&v, &r)| if r { keep.then_some(0) } else { Some(v) })
            .collect();
        groups.entry(key).or_default().push(x.get(&i));
    }
    Tensor::from_fn(&shape, |i| f(groups.get(i).map_or(&[][..], Vec::as_slice)))
}

/// Applies `f` to every line of `x` along `axis` (same length out).
fn along(x: &Tensor, axis: usize, f: &dyn Fn(&[f64]) -> Vec<f64>) -> Tensor {
    let mut out = x.clone();
    let n = x.shape()[axis];
    for i in idx_iter(x.shape()) {
        if i[axis] != 0 {
            continue;
        }
        let mut j = i.clone();
        let line: Vec<f64> = (0..n)
            .map(|k| {
                j[axis] = k;
                x.get(&j)
            })
            .collect();
        for (k, v) in f(&line).into_iter().enumerate() {
            j[axis] = k;
            out.set(&j, v);
        }
    }
    out
}

fn permute(x: &Tensor, perm: &[usize]) -> Tensor {
    let shape: Vec<usize> = perm.iter().map(|&p| x.shape()[p]).collect();
    Tensor::from_fn(&shape, |i| {
        let mut j = vec![0; perm.len()];
        for (d, &p) in perm.iter().enumerate() {
            j[p] = i[d];
        }
        x.get(&j)
    })
}

fn concat(xs: &[Tensor], axis: usize) -> Tensor {
    let mut shape = xs[0].shape().to_vec();
    shape[axis] = xs.iter().map(|t| t.shape()[axis]).sum();
    Tensor::from_fn(&shape, |i| {
        let mut k = i[axis];
        for t in xs {
            if k < t.shape()[axis] {
                let mut j = i.to_vec();
                j[axis] = k;
                return t.get(&j);
            }
            k -= t.shape()[axis];
        }
        unreachable!()
    })
}

fn reshaped(x: &Tensor, shape: &[usize]) -> Tensor {
    assert_eq!(
        x.len(),
        shape.iter().product::<usize>(),
        "a local block of {:?} cannot be laid out as {shape:?}",
        x.shape()
    );
    Tensor::new(shape, x.data().to_vec())
}

fn block_shape(b: &[std::ops::Range<usize>]) -> Vec<usize> {
    b.iter().map(|r| r.len()).collect()
}

// ---------------------------------------------------------------- attrs

fn attr_i64(case: &Case, name: &str) -> Option<i64> {
    case.attrs.get(name).and_then(Value::as_i64)
}
fn attr_bool(case: &Case, name: &str, default: bool) -> bool {
    case.attrs
        .get(name)
        .and_then(Value::as_bool)
        .unwrap_or(default)
}
fn attr_list(case: &Case, name: &str) -> Option<Vec<i64>> {
    match case.attrs.get(name)? {
        Value::Array(a) => a.iter().map(Value::as_i64).collect(),
        Value::Number(n) => n.as_i64().map(|v| vec![v]),
        _ => None,
    }
}
fn norm(axis: i64, rank: usize) -> Option<usize> {
    let r = rank.max(1) as i64;
    let a = if axis < 0 { axis + r } else { axis };
    (0..r).contains(&a).then_some(a as usize)
}

// ---------------------------------------------------------------- kernels

/// A kernel run on one device's blocks.
type Kernel = Box<dyn Fn(&LocalCall<'_>) -> Vec<Tensor>>;
/// A kernel that needs only the local values.
type Plain = Box<dyn Fn(&[Tensor]) -> Vec<Tensor>>;

/// An op as the checker runs it: the kernel (run densely and on every
/// device) and the values of its inputs.
struct Op {
    kernel: Kernel,
    inputs: Vec<Tensor>,
    /// Outputs the kernel does not compute (the answer's extra outputs, such
    /// as a seed): answers are judged on the first `n_outputs` only.
    n_outputs: usize,
}

const UNARY: &[&str] = &[
    "relu",
    "gelu",
    "exp",
    "tanh",
    "sigmoid",
    "silu",
    "celu",
    "elu",
    "logit",
    "mish",
    "selu",
    "softplus",
    "softshrink",
    "stanh",
    "thresholded_relu",
    "round",
    "cast",
    "pow",
    "clip",
];
const BINARY: &[&str] = &[
    "add",
    "subtract",
    "multiply",
    "divide",
    "maximum",
    "minimum",
    "elementwise_pow",
    "greater_than",
    "less_than",
];
const REDUCTIONS: &[&str] = &[
    "sum",
    "max",
    "min",
    "prod",
    "amax",
    "amin",
    "all",
    "any",
    "reduce_base",
    "squared_l2_norm",
    "mean_all",
];

/// The op of a case, or why the checker cannot simulate it.
fn op_for(case: &Case, shapes: &[Vec<usize>], present: &[bool]) -> Result<Op, String> {
    if present.iter().any(|p| !p) && !matches!(case.op.as_str(), "layer_norm" | "flash_attention") {
        return Err("absent optional tensors".into());
    }
    let probe = |i: usize, v: Values| Tensor::probe(&shapes[i], 11 + i as u64, v);
    let n_in = shapes.len();
    let plain = |f: Plain, inputs: Vec<Tensor>| Op {
        kernel: Box::new(move |c: &LocalCall<'_>| f(c.inputs)),
        inputs,
        n_outputs: usize::MAX,
    };
    let op = case.op.as_str();
    if UNARY.contains(&op) && n_in == 1 {
        // A nonlinear pointwise stand-in: partial inputs do not pass through.
        let f = |t: &[Tensor]| vec![t[0].map(|v| v * v + 0.5 * v)];
        return Ok(plain(Box::new(f), vec![probe(0, Values::Integers)]));
    }
    if op == "scale" && n_in == 1 {
        let s = case
            .attrs
            .get("scale")
            .and_then(Value::as_f64)
            .unwrap_or(1.0);
        let b = case
            .attrs
            .get("bias")
            .and_then(Value::as_f64)
            .unwrap_or(0.0);
        let f = move |t: &[Tensor]| vec![t[0].map(|v| s * v + b)];
        return Ok(plain(Box::new(f), vec![probe(0, Values::Integers)]));
    }
    if BINARY.contains(&op) && n_in == 2 {
        let g: fn(f64, f64) -> f64 = match op {
            "add" => |a, b| a + b,
            "subtract" => |a, b| a - b,
            "multiply" => |a, b| a * b,
            "divide" => |a, b| a / (b * b + 1.0),
            "maximum" => f64::max,
            "minimum" => f64::min,
            "elementwise_pow" => |a, b| a * a * b,
            "greater_than" => |a, b| f64::from(u8::from(a > b)),
            _ => |a, b| f64::from(u8::from(a < b)),
        };
        let f = move |t: &[Tensor]| vec![broadcast2(&t[0], &t[1], g)];
        return Ok(plain(
            Box::new(f),
            vec![probe(0, Values::Integers), probe(1, Values::Integers)],
        ));
    }
    if op == "einsum" {
        let eq = case.attr_str("equation").ok_or("no equation")?.to_string();
        let f = move |t: &[Tensor]| {
            let refs: Vec<&Tensor> = t.iter().collect();
            spmd_check::einsum(&eq, &refs, ReduceType::Sum).expect("the einsum evaluates")
        };
        let inputs = (0..n_in).map(|i| probe(i, Values::Integers)).collect();
        return Ok(plain(Box::new(f), inputs));
    }
    if op == "matmul" && n_in == 2 {
        let (tx, ty) = (
            attr_bool(case, "trans_x", false),
            attr_bool(case, "trans_y", false),
        );
        let (rx, ry) = (shapes[0].len(), shapes[1].len());
        let x = match (rx, tx) {
            (1, _) => "k",
            (_, false) => "...mk",
            (_, true) => "...km",
        };
        let y = match (ry, ty) {
            (1, _) => "k",
            (_, false) => "...kn",
            (_, true) => "...nk",
        };
        let out = format!(
            "{}{}{}",
            if rx > 1 || ry > 1 { "..." } else { "" },
            if rx > 1 { "m" } else { "" },
            if ry > 1 { "n" } else { "" }
        );
        let eq = format!("{x},{y}->{out}");
        let f = move |t: &[Tensor]| {
            spmd_check::einsum(&eq, &[&t[0], &t[1]], ReduceType::Sum).expect("matmul evaluates")
        };
        return Ok(plain(
            Box::new(f),
            vec![probe(0, Values::Integers), probe(1, Values::Integers)],
        ));
    }
    if REDUCTIONS.contains(&op) && n_in == 1 {
        let rank = shapes[0].len();
        let axis = attr_list(case, "axis").unwrap_or_default();
        let keep = attr_bool(case, "keep_dim", false) || attr_bool(case, "keepdim", false);
        let mut flags = vec![axis.is_empty() || op == "mean_all"; rank];
        for a in axis {
            flags[norm(a, rank).ok_or("axis out of range")?] = true;
        }
        let kind = match op {
            "reduce_base" => match attr_i64(case, "reduce_type").unwrap_or(0) {
                0 => "sum",
                1 => "max",
                2 => "min",
                3 => "prod",
                4 => "mean",
                5 => "any",
                _ => "all",
            },
            "amax" => "max",
            "amin" => "min",
            "mean_all" => "mean",
            k => k,
        };
        let values = match kind {
            "prod" => Values::NearOne,
            // Ones for `all`; for `any`, ones at half the places, so that
            // several devices' blocks of one result hold a one and a sum
            // of their results counts it several times.
            "all" => Values::Bits {
                ones_per_mille: 1000,
            },
            "any" => Values::Bits {
                ones_per_mille: 500,
            },
            _ => Values::Integers,
        };
        let g: fn(&[f64]) -> f64 = match kind {
            "sum" => |v| v.iter().sum(),
            "squared_l2_norm" => |v| v.iter().map(|a| a * a).sum(),
            // A max or min of nothing has no value (Paddle's kernels fail).
            "max" => |v| {
                assert!(!v.is_empty(), "the max of an empty block");
                v.iter().copied().fold(f64::NEG_INFINITY, f64::max)
            },
            "min" => |v| {
                assert!(!v.is_empty(), "the min of an empty block");
                v.iter().copied().fold(f64::INFINITY, f64::min)
            },
            "prod" => |v| v.iter().product(),
            "mean" => |v| v.iter().sum::<f64>() / v.len() as f64,
            "any" => |v| f64::from(u8::from(v.iter().any(|&a| a != 0.0))),
            _ => |v| f64::from(u8::from(v.iter().all(|&a| a != 0.0))),
        };
        let f = move |t: &[Tensor]| vec![reduce(&t[0], &flags, keep, &g)];
        return Ok(plain(Box::new(f), vec![probe(0, values)]));
    }
    if matches!(op, "softmax" | "log_softmax") && n_in == 1 {
        let axis = norm(attr_i64(case, "axis").unwrap_or(-1), shapes[0].len()).ok_or("axis")?;
        let log = op == "log_softmax";
        let f = move |t: &[Tensor]| {
            let x = if t[0].rank() == 0 {
                return vec![t[0].map(|_| if log { 0.0 } else { 1.0 })];
            } else {
                &t[0]
            };
            vec![along(x, axis, &|v| {
                let m = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let s: f64 = v.iter().map(|a| (a - m).exp()).sum();
                v.iter()
                    .map(|a| {
                        if log {
                            a - m - s.ln()
                        } else {
                            (a - m).exp() / s
                        }
                    })
                    .collect()
            })]
        };
        return Ok(plain(Box::new(f), vec![probe(0, Values::Integers)]));
    }
    if op == "cumsum" && n_in == 1 && !attr_bool(case, "flatten", false) {
        let axis = norm(attr_i64(case, "axis").unwrap_or(-1), shapes[0].len()).ok_or("axis")?;
        let (excl, rev) = (
            attr_bool(case, "exclusive", false),
            attr_bool(case, "reverse", false),
        );
        let f = move |t: &[Tensor]| {
            vec![along(&t[0], axis, &|v| {
                let n = v.len();
                let mut out = vec![0.0; n];
                let mut acc = 0.0;
                for k in 0..n {
                    let i = if rev { n - 1 - k } else { k };
                    if excl {
                        out[i] = acc;
                        acc += v[i];
                    } else {
                        acc += v[i];
                        out[i] = acc;
                    }
                }
                out
            })]
        };
        return Ok(plain(Box::new(f), vec![probe(0, Values::Integers)]));
    }
    if op == "transpose" && n_in == 1 {
        let rank = shapes[0].len();
        let perm: Option<Vec<usize>> = attr_list(case, "perm")
            .ok_or("no perm")?
            .into_iter()
            .map(|p| norm(p, rank))
            .collect();
        let perm = perm.ok_or("perm out of range")?;
        let f = move |t: &[Tensor]| vec![permute(&t[0], &perm)];
        return Ok(plain(Box::new(f), vec![probe(0, Values::Integers)]));
    }
    if matches!(op, "concat" | "stack") {
        let rank = shapes[0].len();
        let stack = op == "stack";
        let axis = norm(
            attr_i64(case, "axis").unwrap_or(0),
            rank + usize::from(stack),
        )
        .ok_or("axis")?;
        let f = move |t: &[Tensor]| {
            let parts: Vec<Tensor> = if stack {
                t.iter()
                    .map(|x| {
                        let mut s = x.shape().to_vec();
                        s.insert(axis, 1);
                        reshaped(x, &s)
                    })
                    .collect()
            } else {
                t.to_vec()
            };
            vec![concat(&parts, axis)]
        };
        let inputs = (0..n_in).map(|i| probe(i, Values::Integers)).collect();
        return Ok(plain(Box::new(f), inputs));
    }
    if matches!(op, "reshape" | "flatten" | "squeeze" | "unsqueeze") && n_in == 1 {
        // A view: the local block laid out as the output block the answer
        // says the device holds (a block that is not one contiguous run of
        // the output fails: wrong values).
        let target = view_shape(case, &shapes[0])?;
        let n = target.clone();
        return Ok(Op {
            kernel: Box::new(move |c: &LocalCall<'_>| {
                let shape = c
                    .output_blocks
                    .first()
                    .map_or(n.clone(), |b| block_shape(b));
                vec![reshaped(&c.inputs[0], &shape)]
            }),
            inputs: vec![probe(0, Values::Integers)],
            n_outputs: 1,
        });
    }
    if matches!(op, "embedding") && n_in == 2 {
        let rows = *shapes[1].first().ok_or("0-d table")?;
        let ids = Tensor::from_fn(&shapes[0], |i| {
            (i.iter().sum::<usize>() * 7 + i.len()) as f64 % rows as f64
        });
        return Ok(Op {
            kernel: Box::new(move |c: &LocalCall<'_>| {
                let (ids, w) = (&c.inputs[0], &c.inputs[1]);
                let start = c.input_blocks[1][0].start;
                let mut shape = ids.shape().to_vec();
                shape.push(w.shape()[1]);
                // Row-parallel: a device looks up the ids in its rows, zeros elsewhere.
                vec![Tensor::from_fn(&shape, |i| {
                    let id = ids.get(&i[..i.len() - 1]) as usize;
                    match id.checked_sub(start) {
                        Some(r) if r < w.shape()[0] => w.get(&[r, i[i.len() - 1]]),
                        _ => 0.0,
                    }
                })]
            }),
            inputs: vec![ids, probe(1, Values::Integers)],
            n_outputs: 1,
        });
    }
    if op == "gather" && n_in == 2 && shapes[1].len() <= 1 {
        let rank = shapes[0].len();
        let axis = norm(attr_i64(case, "axis").unwrap_or(0), rank).ok_or("axis")?;
        let n = shapes[0][axis];
        let k = shapes[1].first().copied().unwrap_or(1);
        let index = Tensor::from_fn(&shapes[1], |i| {
            ((i.first().copied().unwrap_or(0) * 5 + 3) % n) as f64
        });
        let scalar = shapes[1].is_empty();
        let _ = k;
        let f = move |t: &[Tensor]| {
            let (x, idx) = (&t[0], &t[1]);
            let mut shape = x.shape().to_vec();
            if scalar {
                shape.remove(axis);
            } else {
                shape[axis] = idx.shape()[0];
            }
            vec![Tensor::from_fn(&shape, |i| {
                let mut j = i.to_vec();
                if scalar {
                    j.insert(axis, idx.get(&[]) as usize);
                } else {
                    j[axis] = idx.get(&[i[axis]]) as usize;
                }
                assert!(
                    j[axis] < x.shape()[axis],
                    "index {} out of the local block",
                    j[axis]
                );
                x.get(&j)
            })]
        };
        return Ok(plain(Box::new(f), vec![probe(0, Values::Integers), index]));
    }
    if op == "layer_norm" && present.len() == 3 && present[0] {
        let rank = shapes[0].len();
        let begin = norm(attr_i64(case, "begin_norm_axis").unwrap_or(1), rank).ok_or("axis")?;
        let (has_scale, has_bias) = (present[1], present[2]);
        let f = move |t: &[Tensor]| {
            let x = &t[0];
            let scale = has_scale.then(|| &t[1]);
            let bias = has_bias.then(|| &t[if has_scale { 2 } else { 1 }]);
            let flags: Vec<bool> = (0..rank).map(|d| d >= begin).collect();
            let mean = reduce(x, &flags, false, &|v| {
                v.iter().sum::<f64>() / v.len() as f64
            });
            let var = reduce(x, &flags, false, &|v| {
                let m = v.iter().sum::<f64>() / v.len() as f64;
                v.iter().map(|a| (a - m) * (a - m)).sum::<f64>() / v.len() as f64
            });
            let out = Tensor::from_fn(x.shape(), |i| {
                let (m, s) = (mean.get(&i[..begin]), var.get(&i[..begin]));
                let flat = i[begin..]
                    .iter()
                    .zip(&x.shape()[begin..])
                    .fold(0, |acc, (&v, &e)| acc * e + v);
                let g = scale.map_or(1.0, |t| t.get(&[flat]));
                let b = bias.map_or(0.0, |t| t.get(&[flat]));
                (x.get(i) - m) / (s + 1e-5).sqrt() * g + b
            });
            vec![out, mean, var]
        };
        let inputs = (0..shapes.len())
            .map(|i| probe(i, Values::Integers))
            .collect();
        return Ok(plain(Box::new(f), inputs));
    }
    if matches!(op, "argmax" | "argmin") && n_in == 1 {
        let rank = shapes[0].len();
        let flatten = attr_bool(case, "flatten", false);
        let keep = attr_bool(case, "keepdims", false);
        let axis = norm(attr_i64(case, "axis").unwrap_or(0), rank).ok_or("axis")?;
        let min = op == "argmin";
        let f = move |t: &[Tensor]| {
            let x = &t[0];
            let flags: Vec<bool> = (0..x.rank()).map(|d| flatten || d == axis).collect();
            // The index along the reduced dims of the local block.
            let keyed = Tensor::from_fn(x.shape(), |i| {
                let k = i
                    .iter()
                    .zip(x.shape())
                    .zip(&flags)
                    .filter(|(_, f)| **f)
                    .fold(0, |acc, ((&v, &e), _)| acc * e + v);
                k as f64 * 1e6 + x.get(i)
            });
            vec![reduce(&keyed, &flags, keep, &|v| {
                assert!(!v.is_empty(), "an arg-reduction of an empty block");
                let val = |k: f64| k - (k / 1e6).round() * 1e6;
                let best = v.iter().copied().fold(None, |b: Option<f64>, k| match b {
                    Some(b) if (min && val(b) <= val(k)) || (!min && val(b) >= val(k)) => Some(b),
                    _ => Some(k),
                });
                (best.unwrap() / 1e6).round()
            })]
        };
        return Ok(plain(Box::new(f), vec![probe(0, Values::Integers)]));
    }
    if op == "one_hot" && n_in == 1 {
        let classes = attr_i64(case, "num_classes").ok_or("no num_classes")? as usize;
        let ids = Tensor::from_fn(&shapes[0], |i| {
            ((i.iter().sum::<usize>() * 3 + 1) % classes.max(1)) as f64
        });
        let f = move |t: &[Tensor]| {
            let x = &t[0];
            let mut shape = x.shape().to_vec();
            shape.push(classes);
            vec![Tensor::from_fn(&shape, |i| {
                f64::from(u8::from(x.get(&i[..i.len() - 1]) == i[i.len() - 1] as f64))
            })]
        };
        return Ok(plain(Box::new(f), vec![ids]));
    }
    if op == "cross_entropy_with_softmax" && n_in == 2 && attr_bool(case, "use_softmax", true) {
        let rank = shapes[0].len();
        let axis = norm(attr_i64(case, "axis").unwrap_or(-1), rank).ok_or("axis")?;
        let soft = attr_bool(case, "soft_label", false);
        let classes = shapes[0][axis];
        let label = if soft {
            probe(1, Values::Integers).map(|v| v.abs())
        } else {
            Tensor::from_fn(&shapes[1], |i| {
                ((i.iter().sum::<usize>() * 5 + 2) % classes) as f64
            })
        };
        let f = move |t: &[Tensor]| {
            let sm = along(&t[0], axis, &|v| {
                let m = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let s: f64 = v.iter().map(|a| (a - m).exp()).sum();
                v.iter().map(|a| (a - m).exp() / s).collect()
            });
            let mut shape = sm.shape().to_vec();
            shape[axis] = 1;
            let loss = Tensor::from_fn(&shape, |i| {
                let mut j = i.to_vec();
                if soft {
                    (0..sm.shape()[axis])
                        .map(|c| {
                            j[axis] = c;
                            -t[1].get(&j) * sm.get(&j).ln()
                        })
                        .sum()
                } else {
                    let c = t[1].get(i) as usize;
                    assert!(c < sm.shape()[axis], "label {c} outside the local classes");
                    j[axis] = c;
                    -sm.get(&j).ln()
                }
            });
            vec![sm, loss]
        };
        let logits = probe(0, Values::Integers).map(|v| v / 8.0);
        let globals = [logits.clone(), label.clone()];
        return Ok(Op {
            kernel: Box::new(move |c: &LocalCall<'_>| {
                let blocks = c.input_blocks;
                if blocks[0][axis].len() == classes {
                    return f(c.inputs);
                }
                // The vocab-parallel kernel (a hard label on the last axis):
                // it all-reduces the max and the sum over the class shards,
                // so each device ends with its block of the softmax and the
                // whole loss of its rows, given that it holds its rows'
                // labels and no partial logits.
                assert!(
                    !soft && axis + 1 == rank,
                    "the class axis is sharded without the vocab-parallel kernel"
                );
                for d in (0..rank).filter(|&d| d != axis) {
                    assert_eq!(
                        blocks[0][d], blocks[1][d],
                        "the device does not hold its rows' labels"
                    );
                }
                let full = f(&globals);
                let mut rows = blocks[0].clone();
                rows[axis] = 0..1;
                vec![full[0].block(&blocks[0]), full[1].block(&rows)]
            }),
            inputs: vec![logits, label],
            n_outputs: 2,
        });
    }
    if op == "flash_attention" && present.len() == 5 && present[..3].iter().all(|&p| p) {
        let (has_seed, has_mask) = (present[3], present[4]);
        let f = move |t: &[Tensor]| {
            let (q, k, v) = (&t[0], &t[1], &t[2]);
            let seed = has_seed.then(|| &t[3]);
            let mask = has_mask.then(|| &t[if has_seed { 4 } else { 3 }]);
            let (b, s, h, d) = (q.shape()[0], q.shape()[1], q.shape()[2], q.shape()[3]);
            let (tk, hk, e) = (k.shape()[1], k.shape()[2], v.shape()[3]);
            assert!(hk > 0 && h % hk == 0, "{h} query heads over {hk} kv heads");
            assert_eq!(k.shape()[3], d, "q and k head dims");
            let group = h / hk;
            let mut p = Tensor::full(&[b, h, s, tk], 0.0);
            let mut lse = Tensor::full(&[b, h, s], 0.0);
            for (bi, hi, si) in
                (0..b).flat_map(|x| (0..h).flat_map(move |y| (0..s).map(move |z| (x, y, z))))
            {
                let scores: Vec<f64> = (0..tk)
                    .map(|ti| {
                        let dot: f64 = (0..d)
                            .map(|di| q.get(&[bi, si, hi, di]) * k.get(&[bi, ti, hi / group, di]))
                            .sum();
                        let m = mask.map_or(0.0, |m| {
                            m.get(&[bi.min(m.shape()[0] - 1), hi.min(m.shape()[1] - 1), si, ti])
                        });
                        dot / 16.0 + m
                    })
                    .collect();
                let mx = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let z: f64 = scores.iter().map(|a| (a - mx).exp()).sum();
                for (ti, sc) in scores.iter().enumerate() {
                    p.set(&[bi, hi, si, ti], (sc - mx).exp() / z);
                }
                lse.set(&[bi, hi, si], mx + z.ln());
            }
            let out = Tensor::from_fn(&[b, s, h, e], |i| {
                (0..tk)
                    .map(|ti| {
                        p.get(&[i[0], i[2], i[1], ti]) * v.get(&[i[0], ti, i[2] / group, i[3]])
                    })
                    .sum()
            });
            // The kernel reads the seed and the offset together.
            let seed_offset = match seed {
                Some(sd) => {
                    assert_eq!(
                        sd.len(),
                        2,
                        "a device holds {} of the seed and offset",
                        sd.len()
                    );
                    sd.clone()
                }
                None => Tensor::full(&[2], 0.0),
            };
            vec![out, p, lse, seed_offset]
        };
        let inputs = (0..shapes.len())
            .map(|i| probe(i, Values::Integers).map(|v| v / 4.0))
            .collect();
        return Ok(plain(Box::new(f), inputs));
    }
    Err(format!(
        "no reference kernel for `{op}` in the vector judge"
    ))
}

/// The output shape of a view op.
fn view_shape(case: &Case, x: &[usize]) -> Result<Vec<usize>, String> {
    let total: usize = x.iter().product();
    match case.op.as_str() {
        "reshape" => {
            let s = attr_list(case, "shape").ok_or("no shape")?;
            let known: usize = s
                .iter()
                .enumerate()
                .map(|(i, &d)| {
                    if d == 0 {
                        x[i]
                    } else if d < 0 {
                        1
                    } else {
                        d as usize
                    }
                })
                .product();
            Ok(s.iter()
                .enumerate()
                .map(|(i, &d)| {
                    if d == 0 {
                        x[i]
                    } else if d < 0 {
                        total / known.max(1)
                    } else {
                        d as usize
                    }
                })
                .collect())
        }
        "flatten" => {
            let r = x.len();
            if r == 0 {
                return Ok(vec![1]);
            }
            let a = norm(attr_i64(case, "start_axis").unwrap_or(1), r).ok_or("start")?;
            let b = norm(attr_i64(case, "stop_axis").unwrap_or(-1), r).ok_or("stop")?;
            let mut s = x[..a].to_vec();
            s.push(x[a..=b].iter().product());
            s.extend(&x[b + 1..]);
            Ok(s)
        }
        "squeeze" => {
            let axes = attr_list(case, "axis").unwrap_or_default();
            let drop: BTreeSet<usize> = if axes.is_empty() {
                (0..x.len()).filter(|&d| x[d] == 1).collect()
            } else {
                axes.iter()
                    .filter_map(|&a| norm(a, x.len()))
                    .filter(|&d| x[d] == 1)
                    .collect()
            };
            Ok((0..x.len())
                .filter(|d| !drop.contains(d))
                .map(|d| x[d])
                .collect())
        }
        _ => {
            let axes = attr_list(case, "axis").unwrap_or_default();
            let mut s = x.to_vec();
            let r = x.len() + axes.len();
            let mut at: Vec<usize> = axes.iter().filter_map(|&a| norm(a, r)).collect();
            at.sort_unstable();
            for a in at {
                s.insert(a.min(s.len()), 1);
            }
            Ok(s)
        }
    }
}

// ---------------------------------------------------------------- the judge

/// What the checker says of one answer.
#[derive(Debug, PartialEq)]
enum Verdict {
    Sound,
    Unsound(String),
}

/// A case ready to simulate: the (shrunk) mesh-independent shapes and the op.
struct Sim {
    mesh: Mesh,
    op: Op,
    expected: Vec<Tensor>,
    /// Which input slots the vector fills (answers name the absent ones too).
    present: Vec<bool>,
}

fn shrink(e: usize, p: usize) -> usize {
    if e > 2 * p { p + e % p } else { e }
}

fn prepare(case: &Case) -> Result<Sim, String> {
    let mesh = Mesh::new(&case.mesh_shape).map_err(|e| e.to_string())?;
    if case.direction == Direction::Grad {
        return prepare_grad(case, mesh);
    }
    let slots = case.input_slots().map_err(|e| e.to_string())?;
    let present: Vec<bool> = slots.iter().map(Option::is_some).collect();
    if case
        .output_slots()
        .map_err(|e| e.to_string())?
        .iter()
        .any(Option::is_none)
    {
        return Err("absent optional tensors".into());
    }
    let p: usize = case.mesh_shape.iter().product();
    let keeps_extents = matches!(case.op.as_str(), "reshape" | "flatten");
    let shapes: Vec<Vec<usize>> = slots
        .iter()
        .flatten()
        .map(|(s, _)| {
            s.iter()
                .map(|&e| if keeps_extents { e } else { shrink(e, p) })
                .collect()
        })
        .collect();
    let op = op_for(case, &shapes, &present)?;
    let whole: Vec<Vec<std::ops::Range<usize>>> = op
        .inputs
        .iter()
        .map(|t| t.shape().iter().map(|&e| 0..e).collect())
        .collect();
    // The dense result: the kernel on one device holding everything.
    let dev = spmd_check::devices(&Mesh::new(&[1]).unwrap()).remove(0);
    let dense = || {
        let probe_outs = (op.kernel)(&LocalCall {
            device: &dev,
            inputs: &op.inputs,
            input_blocks: &whole,
            output_blocks: &[],
        });
        let out_blocks: Vec<Vec<std::ops::Range<usize>>> = probe_outs
            .iter()
            .map(|t| t.shape().iter().map(|&e| 0..e).collect())
            .collect();
        (op.kernel)(&LocalCall {
            device: &dev,
            inputs: &op.inputs,
            input_blocks: &whole,
            output_blocks: &out_blocks,
        })
    };
    let expected = std::panic::catch_unwind(std::panic::AssertUnwindSafe(dense))
        .map_err(|_| "the vector's shapes do not fit the op's kernel".to_string())?;
    let elements: usize = op.inputs.iter().chain(&expected).map(Tensor::len).sum();
    if elements > MAX_ELEMENTS {
        return Err(format!(
            "too large to simulate in a debug build ({elements} elements)"
        ));
    }
    Ok(Sim {
        mesh,
        op,
        expected,
        present,
    })
}

/// A grad vector as a framework runs the grad op: its inputs (the forward
/// inputs, then the output grads) laid out as the answer requires, the grad
/// kernel run on every device's blocks (each input grad takes its shape from
/// its input's block), and each input grad compared with its claimed layout.
fn prepare_grad(case: &Case, mesh: Mesh) -> Result<Sim, String> {
    let ins = case
        .input_parts()
        .map_err(|_| "absent optional tensors".to_string())?;
    let outs = case
        .output_parts()
        .map_err(|_| "absent optional tensors".to_string())?;
    let shapes: Vec<Vec<usize>> = ins.iter().chain(&outs).map(|(s, _)| s.clone()).collect();
    let n_in = ins.len();
    let probe = |i: usize| Tensor::probe(&shapes[i], 31 + i as u64, Values::Integers);
    let inputs: Vec<Tensor> = (0..shapes.len()).map(probe).collect();
    let op = case.op.as_str();
    let kernel: Kernel = if op == "einsum" && outs.len() == 1 {
        let eq = case.attr_str("equation").ok_or("no equation")?;
        let (lhs, rhs) = eq.split_once("->").ok_or("no ->")?;
        let terms: Vec<Vec<char>> = lhs.split(',').map(|t| t.chars().collect()).collect();
        let out: Vec<char> = rhs.chars().collect();
        let plain = |t: &[char]| t.iter().all(char::is_ascii_alphabetic);
        if terms.len() != n_in || !terms.iter().all(|t| plain(t)) || !plain(&out) {
            return Err("grad: an einsum with `...` or scalars".into());
        }
        Box::new(move |c: &LocalCall<'_>| {
            (0..terms.len())
                .map(|j| einsum_grad(&terms, &out, j, c.inputs))
                .collect()
        })
    } else if UNARY.contains(&op) && outs.len() == 1 {
        // d/dx of the stand-in x² + x/2, read from x and the output grad.
        Box::new(move |c: &LocalCall<'_>| {
            let (x, dy) = (&c.inputs[0], &c.inputs[c.inputs.len() - 1]);
            vec![broadcast2(x, dy, |a, g| (2.0 * a + 0.5) * g)]
        })
    } else if matches!(op, "squeeze" | "unsqueeze" | "flatten" | "reshape") && n_in == 1 {
        // The output grad laid out as x's block.
        Box::new(move |c: &LocalCall<'_>| {
            vec![reshaped(&c.inputs[1], &block_shape(&c.input_blocks[0]))]
        })
    } else {
        return Err("grad: no grad kernel for the op in the judge".into());
    };
    let whole: Vec<Vec<std::ops::Range<usize>>> = inputs
        .iter()
        .map(|t| t.shape().iter().map(|&e| 0..e).collect())
        .collect();
    let dev = spmd_check::devices(&Mesh::new(&[1]).unwrap()).remove(0);
    let expected = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        kernel(&LocalCall {
            device: &dev,
            inputs: &inputs,
            input_blocks: &whole,
            output_blocks: &[],
        })
    }))
    .map_err(|_| "the vector's shapes do not fit the op's kernel".to_string())?;
    let elements: usize = inputs.iter().chain(&expected).map(Tensor::len).sum();
    if elements > MAX_ELEMENTS {
        return Err(format!(
            "too large to simulate in a debug build ({elements} elements)"
        ));
    }
    let present = vec![true; inputs.len()];
    Ok(Sim {
        mesh,
        op: Op {
            kernel,
            inputs,
            n_outputs: usize::MAX,
        },
        expected,
        present,
    })
}

/// The grad of operand `j` of the einsum `terms -> out` (plain labels):
/// `d x_j[idx] = Σ Π_{k≠j} x_k · dy` over every assignment of the labels
/// that agrees with `idx`, with extents read from the tensors (a device's
/// local blocks must agree on every label they share).
fn einsum_grad(terms: &[Vec<char>], out: &[char], j: usize, t: &[Tensor]) -> Tensor {
    let mut extent: BTreeMap<char, usize> = BTreeMap::new();
    let all: Vec<(&[char], &Tensor)> = terms
        .iter()
        .map(Vec::as_slice)
        .chain([out])
        .zip(t)
        .collect();
    for (term, x) in &all {
        for (&l, &e) in term.iter().zip(x.shape()) {
            let prev = *extent.entry(l).or_insert(e);
            assert_eq!(
                prev, e,
                "label {l} has extents {prev} and {e} on one device"
            );
        }
    }
    let labels: Vec<char> = extent.keys().copied().collect();
    let sizes: Vec<usize> = labels.iter().map(|l| extent[l]).collect();
    let pos = |l: char| labels.iter().position(|&m| m == l).unwrap();
    let shape_j: Vec<usize> = terms[j].iter().map(|&l| extent[&l]).collect();
    let mut g = Tensor::full(&shape_j, 0.0);
    for a in idx_iter(&sizes) {
        let at = |term: &[char]| -> Vec<usize> { term.iter().map(|&l| a[pos(l)]).collect() };
        let mut v = 1.0;
        for (k, (term, x)) in all.iter().enumerate() {
            if k != j {
                v *= x.get(&at(term));
            }
        }
        let i = at(&terms[j]);
        g.set(&i, g.get(&i) + v);
    }
    g
}

fn judge(case: &Case, sim: &Sim, answer: &RuleResult) -> Verdict {
    let n = sim.expected.len().min(sim.op.n_outputs);
    let mut a = answer.clone();
    if a.outputs.len() > n {
        a.outputs.truncate(n);
    }
    if a.inputs.len() == sim.present.len() {
        a.inputs = a
            .inputs
            .iter()
            .zip(&sim.present)
            .filter(|(_, p)| **p)
            .map(|(x, _)| x.clone())
            .collect();
    }
    let dir = match case.direction {
        Direction::Forward => Dir::Forward,
        Direction::Backward => Dir::Backward,
        Direction::Grad => Dir::Grad,
    };
    match check_answer(
        &case.op,
        dir,
        &sim.mesh,
        &sim.op.inputs,
        &a,
        &sim.expected,
        &*sim.op.kernel,
    ) {
        Ok(()) => Verdict::Sound,
        Err(r) if r.is_unsound() => Verdict::Unsound(r.to_string()),
        Err(r) => Verdict::Unsound(format!("not checked: {r}")),
    }
}

/// Paddle's answer as a rule result; `None` where the vector expects an
/// error, leaves a tensor out, or does not state an output's partial status
/// (Paddle's suite often asserts mappings only).
fn paddle_answer(case: &Case) -> Option<RuleResult> {
    let e = serde_json::to_value(&case.expected).ok()?;
    let attr_of = |a: &Value, output: bool| -> Option<DistAttr> {
        let m = a
            .get("multi_dims_mapping")
            .or_else(|| a.get("dims_mapping"))?
            .as_array()?;
        let mapping = if m.iter().all(Value::is_i64) {
            let m: Vec<i64> = m.iter().filter_map(Value::as_i64).collect();
            DimsMapping::from_paddle(&m)?
        } else {
            let nested: Option<Vec<Vec<u8>>> = m
                .iter()
                .map(|d| match d {
                    Value::Array(v) => v.iter().map(|x| x.as_u64().map(|x| x as u8)).collect(),
                    Value::Number(n) => Some(match n.as_i64()? {
                        -1 => vec![],
                        x => vec![x as u8],
                    }),
                    _ => None,
                })
                .collect();
            let nested = nested?;
            let refs: Vec<&[u8]> = nested.iter().map(Vec::as_slice).collect();
            DimsMapping::from_nested(&refs)?
        };
        let mut partial = Partial::NONE;
        match a.get("partial_dims").and_then(Value::as_array) {
            Some(p) => {
                let reduces = a.get("partial_reduce");
                for d in p {
                    let d = d.as_u64()? as u8;
                    let r = reduces
                        .and_then(|r| r.get(d.to_string()))
                        .and_then(Value::as_str)
                        .and_then(ReduceType::from_name)
                        .unwrap_or(ReduceType::Sum);
                    partial.set(d, r);
                }
            }
            None if output => return None,
            None => {}
        }
        Some(DistAttr::new(mapping).with_partial(partial))
    };
    let side = |key: &str, output: bool| -> Option<Vec<DistAttr>> {
        e.get(key)?
            .as_array()?
            .iter()
            .map(|a| attr_of(a, output))
            .collect()
    };
    Some(RuleResult {
        inputs: side("inputs", false)?.into_iter().collect(),
        outputs: side("outputs", true)?.into_iter().collect(),
    })
}

/// Our answer to a case, through the runner the conformance test and the
/// CLI use; `None` when the rule rejects the call.
fn our_answer(case: &Case, registry: &spmd_core::Registry) -> Option<RuleResult> {
    spmd_conformance::run_case(case, registry).1?.ok()
}

/// Kinds of DEVIATIONS.md whose reason says Paddle's answer is unsound.
const UNSOUND_KINDS: &[&str] = &[
    "unexplained partial",
    "unsound paddle answer",
    "grad layout",
];

/// Kinds of DEVIATIONS.md for calls whose input the contract rejects.
const INVALID_INPUT_KINDS: &[&str] = &["notation outside the grammar", "invalid input mapping"];

fn deviation_kinds() -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(dir().join("DEVIATIONS.md")).unwrap();
    let mut kinds = BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() >= 4 {
            kinds.insert(cells[1].trim_matches('`').to_string(), cells[2].to_string());
        }
    }
    kinds
}

#[test]
fn no_answer_of_ours_is_unsound_and_listed_unsound_paddle_answers_are_confirmed() {
    let registry = spmd_ops::builtins();
    let kinds = deviation_kinds();
    // Kernels run on blocks a wrong answer gives them may panic: that is a
    // finding, not noise (the default hook is back before the asserts).
    std::panic::set_hook(Box::new(|_| {}));
    let mut not_simulated: BTreeMap<String, usize> = BTreeMap::new();
    let (mut ours_sound, mut paddle_sound, mut paddle_unsound) = (0, 0, 0);
    // Per file: [ours judged sound, Paddle's sound, Paddle's unsound].
    let mut per_file: BTreeMap<&str, [usize; 3]> = BTreeMap::new();
    let mut problems = Vec::new();
    let mut confirmed = 0;
    let mut total = 0;
    let mut errors_where_paddle_is_sound = Vec::new();
    let mut sound_choices: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut checked_kinds: BTreeMap<(String, &str), usize> = BTreeMap::new();
    for file in FILES {
        for case in load(file) {
            total += 1;
            let listed_unsound = kinds
                .get(&case.id)
                .is_some_and(|k| UNSOUND_KINDS.contains(&k.as_str()));
            let sim = match prepare(&case) {
                Ok(s) => s,
                Err(why) => {
                    let why = if why.starts_with("no reference kernel") {
                        "no reference kernel for the op".into()
                    } else if why.starts_with("too large") {
                        "too large to simulate in a debug build".into()
                    } else {
                        why
                    };
                    *not_simulated.entry(why).or_default() += 1;
                    if listed_unsound && case.direction != Direction::Grad {
                        problems.push(format!("{}: listed as an unsound Paddle answer, but the checker cannot simulate it", case.id));
                    }
                    continue;
                }
            };
            match our_answer(&case, &registry) {
                Some(ours) => match judge(&case, &sim, &ours) {
                    Verdict::Sound => {
                        ours_sound += 1;
                        per_file.entry(file).or_default()[0] += 1;
                    }
                    Verdict::Unsound(r) => {
                        problems.push(format!("{}: OUR answer is unsound:\n{r}", case.id))
                    }
                },
                None => {
                    *not_simulated
                        .entry("our rule answers an error".into())
                        .or_default() += 1;
                }
            }
            let paddle = paddle_answer(&case);
            let verdict = paddle.as_ref().map(|p| judge(&case, &sim, p));
            // An error for input the contract rejects (a notation outside the
            // grammar, a mesh dim used twice by one tensor) is the answer.
            let rejected_input = kinds
                .get(&case.id)
                .is_some_and(|k| INVALID_INPUT_KINDS.contains(&k.as_str()));
            if our_answer(&case, &registry).is_none()
                && verdict == Some(Verdict::Sound)
                && !rejected_input
            {
                errors_where_paddle_is_sound.push(case.id.clone());
            }
            if let Some(kind) = kinds.get(&case.id) {
                let shown = match &verdict {
                    Some(Verdict::Sound) => "Paddle's answer sound",
                    Some(Verdict::Unsound(_)) => "Paddle's answer unsound",
                    None => "Paddle errs or states no full answer",
                };
                *checked_kinds.entry((kind.clone(), shown)).or_default() += 1;
            }
            // A listed deviation from a sound Paddle answer is a sound choice
            // of ours: counted by kind.
            if verdict == Some(Verdict::Sound)
                && !rejected_input
                && let Some(kind) = kinds.get(&case.id)
            {
                sound_choices
                    .entry(kind.clone())
                    .or_default()
                    .push(case.id.clone());
            }
            match &verdict {
                Some(Verdict::Sound) => {
                    paddle_sound += 1;
                    per_file.entry(file).or_default()[1] += 1;
                }
                Some(Verdict::Unsound(_)) => {
                    paddle_unsound += 1;
                    per_file.entry(file).or_default()[2] += 1;
                }
                _ => {}
            }
            if listed_unsound {
                match verdict {
                    Some(Verdict::Unsound(_)) => confirmed += 1,
                    Some(Verdict::Sound) => problems.push(format!("{}: listed as an unsound Paddle answer, but the checker finds it sound", case.id)),
                    None => problems.push(format!("{}: listed as an unsound Paddle answer, which the vector does not state in full", case.id)),
                }
            }
        }
    }
    let _ = std::panic::take_hook();
    println!(
        "{total} vectors; our answers judged sound: {ours_sound}; Paddle's: {paddle_sound} sound, {paddle_unsound} unsound"
    );
    for (file, [o, ps, pu]) in &per_file {
        println!("  {file}: ours judged {o}, all sound; Paddle's {ps} sound, {pu} unsound");
    }
    println!("listed unsound Paddle answers confirmed by the checker: {confirmed}");
    println!(
        "our rule errs where Paddle's answer is sound: {} {errors_where_paddle_is_sound:?}",
        errors_where_paddle_is_sound.len()
    );
    println!("deviations from sound Paddle answers (our sound choices), by kind:");
    for (kind, ids) in &sound_choices {
        println!("  {:5}  {kind}: {}", ids.len(), ids.join(", "));
    }
    println!("simulated deviations, by listed kind and what the checker shows:");
    for ((kind, shown), n) in &checked_kinds {
        println!("  {n:5}  {kind}: {shown}");
    }
    println!("not simulated, by reason:");
    for (why, n) in &not_simulated {
        println!("  {n:5}  {why}");
    }
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
    assert!(
        errors_where_paddle_is_sound.is_empty(),
        "we answer an error where Paddle answers soundly: {errors_where_paddle_is_sound:?}"
    );
    let choices: usize = sound_choices.values().map(Vec::len).sum();
    assert!(
        choices <= 10,
        "{choices} deviations from sound Paddle answers: {sound_choices:?}"
    );
    assert!(
        ours_sound >= 1000,
        "only {ours_sound} of our answers simulated"
    );
}

/// A measurement, not a check: judges a vector file that is not in the
/// repository (fresh random vectors from Paddle's own rules) the way the
/// test above judges the committed ones, and prints each case where we
/// differ from a Paddle answer the checker finds sound, and each error of
/// ours where Paddle answers soundly. Run it with
/// `SPMD_VECTORS=cases.json cargo test --release --test soundness -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement on the vector file SPMD_VECTORS names"]
fn judge_outside_vectors() {
    let Some(path) = std::env::var_os("SPMD_VECTORS") else {
        panic!("set SPMD_VECTORS to a vector file in the conformance schema");
    };
    let text = std::fs::read_to_string(&path).expect("SPMD_VECTORS is readable");
    let cases = parse_cases(&text).expect("the vectors parse");
    let registry = spmd_ops::builtins();
    std::panic::set_hook(Box::new(|_| {}));
    let (mut agree, mut not_simulated, mut paddle_unsound) = (0, 0, 0);
    let (mut differ, mut errors, mut ours_unsound) = (Vec::new(), Vec::new(), Vec::new());
    for case in &cases {
        let (status, got) = spmd_conformance::run_case(case, &registry);
        if matches!(status, spmd_conformance::Status::Passed(_)) {
            agree += 1;
            continue;
        }
        let Ok(sim) = prepare(case) else {
            not_simulated += 1;
            continue;
        };
        let paddle = paddle_answer(case).map(|p| judge(case, &sim, &p));
        let what = format!("{} {} {:?}", case.id, case.op, case.direction);
        match (got, paddle) {
            (Some(Ok(ours)), verdict) => {
                if let Verdict::Unsound(r) = judge(case, &sim, &ours) {
                    ours_unsound.push(format!("{what}: {r}"));
                }
                match verdict {
                    Some(Verdict::Sound) => differ.push(what),
                    Some(Verdict::Unsound(_)) => paddle_unsound += 1,
                    None => {}
                }
            }
            (Some(Err(e)), Some(Verdict::Sound)) => errors.push(format!("{what}: {e}")),
            _ => {}
        }
    }
    let _ = std::panic::take_hook();
    println!(
        "{} vectors: {agree} agree with Paddle; of the others {not_simulated} not simulated, {paddle_unsound} where Paddle's answer is unsound",
        cases.len()
    );
    println!("we differ from a sound Paddle answer: {}", differ.len());
    for d in &differ {
        println!("  {d}");
    }
    println!(
        "we answer an error where Paddle answers soundly: {}",
        errors.len()
    );
    for e in &errors {
        println!("  {e}");
    }
    println!(
        "our answers the checker finds unsound: {}",
        ours_unsound.len()
    );
    for u in &ours_unsound {
        println!("  {u}");
    }
}
