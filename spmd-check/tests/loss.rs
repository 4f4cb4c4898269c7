//! `cross_entropy_with_softmax` against its reference kernel on random
//! shapes, meshes of at most 4 devices and random mappings: forward,
//! backward and the (derived) grad, with hard or soft labels, with or
//! without the softmax, on any axis.
//!
//! Its vocab-parallel case (a hard label, the class axis last and sharded,
//! the softmax fused in) does not run the op on local blocks, which is the
//! checker's premise: the kernel all-reduces the rows' maxima, sums and
//! label logits across the class shards. Answers that keep the class axis
//! sharded are therefore run by a simulation of that kernel
//! ([`class_parallel`]), which one property exercises on purpose. Besides
//! the checked/refused tallies, every property counts the answers that
//! split work and fails when too few do.
//!
//! Default: 48 cases per property; `SPMD_CHECK_CASES=N` for more.

mod common;

use proptest::prelude::*;
use spmd_check::{
    Device, Input, Tensor, Values, block_of, check_backward, check_forward, check_grad, devices,
};
use spmd_core::SpmdRuleExt;
use spmd_core::{Attrs, DistAttr, Mesh, MeshDim, ReduceType, RuleResult, Sharding, Spec};
use std::ops::Range;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{atomic::AtomicUsize, atomic::Ordering};

use common::kernels::loss::CrossEntropy;
use common::nn::{Counts, complete, force, force_split, input_specs, small, small_mesh};
use common::{CASES, attrs, registry, run};

// -------------------------------------- the vocab-parallel kernel, simulated

/// A tensor of a [`class_parallel`] run: its name, dense value, layout, and
/// which of its dims is the class axis (if it has it).
struct Held<'a> {
    name: &'a str,
    value: &'a Tensor,
    attr: &'a DistAttr,
    class: Option<usize>,
}

/// Checks that `h.attr` is a layout of `h.value` on `mesh`.
fn well_formed(mesh: &Mesh, h: &Held<'_>) -> Result<(), String> {
    let bad = |why: String| Err(format!("malformed answer: {} {} {why}", h.name, h.attr));
    let mapping = h.attr.dims_mapping.as_slice();
    if mapping.len() != h.value.rank() {
        return bad(format!(
            "has {} dims, the tensor {}",
            mapping.len(),
            h.value.rank()
        ));
    }
    let mut used = vec![false; mesh.shape().len()];
    for m in mapping.iter().flat_map(Sharding::iter) {
        match used.get_mut(usize::from(m)) {
            None => return bad(format!("names mesh dim {m}")),
            Some(u) if *u => return bad(format!("uses mesh dim {m} twice")),
            Some(u) => *u = true,
        }
    }
    for (m, _) in h.attr.partial.iter() {
        if used.get(usize::from(m)) != Some(&false) {
            return bad(format!(
                "is partial over mesh dim {m}, out of range or sharding"
            ));
        }
    }
    Ok(())
}

/// A device's block of `h`; when `h` is partial, its contribution, which
/// sums (over each partial mesh dim in turn) to the value. Only `Sum`
/// partial inputs are simulated.
fn local(mesh: &Mesh, h: &Held<'_>, dev: &Device) -> Result<Tensor, String> {
    let block = block_of(h.value.shape(), &h.attr.dims_mapping, mesh, &dev.coord);
    let mut t = h.value.block(&block);
    for (m, reduce) in h.attr.partial.iter() {
        let m = usize::from(m);
        let (n, c) = (mesh.shape()[m], dev.coord[m]);
        if n == 1 {
            continue;
        }
        if reduce != ReduceType::Sum {
            return Err(format!(
                "{} is required {}: only Sum partials are simulated",
                h.name, h.attr
            ));
        }
        // Small integers, varied over the values and devices.
        let share = |k: usize, c: usize| ((k * 7 + c * 5 + m * 3) % 9) as f64 - 4.0;
        for (k, v) in t.data_mut().iter_mut().enumerate() {
            *v = if c == 0 {
                *v - (1..n).map(|c2| share(k, c2)).sum::<f64>()
            } else {
                share(k, c)
            };
        }
    }
    Ok(t)
}

/// What `dev` holds of `h` after gathering its class axis from `group` (the
/// devices that differ from it only on the mesh dims `class_dims` that split
/// the class axis); a tensor without the class axis is its own block.
fn gather(
    mesh: &Mesh,
    h: &Held<'_>,
    dev: &Device,
    group: &[&Device],
    class_dims: &Sharding,
) -> Result<Tensor, String> {
    let Some(c) = h.class else {
        return local(mesh, h, dev);
    };
    if h.attr.dims_mapping[c] != *class_dims {
        return Err(format!(
            "{} is required {}: its class dim {c} is split otherwise than the logits' ({class_dims}), \
             so a device's class blocks of the two differ",
            h.name, h.attr
        ));
    }
    let own = block_of(h.value.shape(), &h.attr.dims_mapping, mesh, &dev.coord);
    let mut shape: Vec<usize> = own.iter().map(Range::len).collect();
    shape[c] = h.value.shape()[c];
    let mut whole = Tensor::full(&shape, f64::NAN);
    for peer in group {
        let block = block_of(h.value.shape(), &h.attr.dims_mapping, mesh, &peer.coord);
        let part = local(mesh, h, peer)?;
        let start = block[c].start;
        for (k, &v) in part.data().iter().enumerate() {
            // The index of value k of the peer's block, in `whole`.
            let mut at = vec![0; shape.len()];
            let mut rest = k;
            for (d, s) in part.strides().iter().enumerate() {
                at[d] = rest / s;
                rest %= s;
            }
            at[c] += start;
            whole.set(&at, v);
        }
    }
    Ok(whole)
}

/// The message of a caught panic.
fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "panicked".into())
}

/// Reduces every device's result over `h`'s partial mesh dims.
fn reduce(
    mesh: &Mesh,
    devs: &[Device],
    h: &Held<'_>,
    mut locals: Vec<Tensor>,
) -> Result<Vec<Tensor>, String> {
    for (m, op) in h.attr.partial.iter() {
        let m = usize::from(m);
        let mut next = Vec::with_capacity(devs.len());
        for dev in devs {
            let group: Vec<&Tensor> = devs
                .iter()
                .filter(|p| (0..mesh.shape().len()).all(|d| d == m || p.coord[d] == dev.coord[d]))
                .map(|p| &locals[p.rank])
                .collect();
            if group.iter().any(|t| t.shape() != group[0].shape()) {
                return Err(format!(
                    "{} is claimed {}, but the partial results to reduce have different shapes",
                    h.name, h.attr
                ));
            }
            let fold = |k: usize| -> Result<f64, String> {
                let vals = group.iter().map(|t| t.data()[k]);
                Ok(match op {
                    ReduceType::Sum => vals.sum(),
                    ReduceType::Avg => vals.sum::<f64>() / group.len() as f64,
                    ReduceType::Max => vals.fold(f64::NEG_INFINITY, f64::max),
                    ReduceType::Min => vals.fold(f64::INFINITY, f64::min),
                    other => return Err(format!("{} is claimed partial {other}", h.name)),
                })
            };
            let data = (0..group[0].len()).map(fold).collect::<Result<_, _>>()?;
            next.push(Tensor::new(group[0].shape(), data));
        }
        locals = next;
    }
    Ok(locals)
}

/// Every device's result must be its claimed block of `h`'s dense value.
fn compare(mesh: &Mesh, devs: &[Device], h: &Held<'_>, got: &[Tensor]) -> Result<(), String> {
    let close = |a: f64, b: f64| {
        a == b
            || (a.is_nan() && b.is_nan())
            || (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
    };
    for (dev, g) in devs.iter().zip(got) {
        let block = block_of(h.value.shape(), &h.attr.dims_mapping, mesh, &dev.coord);
        let want = h.value.block(&block);
        if want.shape() != g.shape() {
            return Err(format!(
                "{} is claimed {}: {dev} should hold block {block:?} (shape {:?}) but computes shape {:?}",
                h.name,
                h.attr,
                want.shape(),
                g.shape()
            ));
        }
        if let Some(k) = (0..want.len()).find(|&k| !close(want.data()[k], g.data()[k])) {
            return Err(format!(
                "{} is claimed {}: {dev} holds block {block:?}; its value {k} should be {}, got {}",
                h.name,
                h.attr,
                want.data()[k],
                g.data()[k]
            ));
        }
    }
    Ok(())
}

/// Runs an answer the way a vocab-parallel kernel runs it: every device
/// reads its blocks of `reads` as the answer lays them out; the kernel's
/// all-reduces over the devices that split the class axis of `reads[0]`
/// (the logits) give each device the whole rows' maxima, sums and label
/// logits, which is what running `kernel` on the rows gathered from those
/// devices computes; each result with the class axis then keeps the
/// device's own part of it. The results, reduced over their claimed partial
/// mesh dims, must be every device's claimed block of `claims`.
fn class_parallel(
    mesh: &Mesh,
    reads: &[Held<'_>],
    claims: &[Held<'_>],
    kernel: &dyn Fn(&[Tensor]) -> Vec<Tensor>,
) -> Result<(), String> {
    for h in reads.iter().chain(claims) {
        well_formed(mesh, h)?;
    }
    let logits = &reads[0];
    let class = logits.class.expect("the logits have the class axis");
    let class_dims = logits.attr.dims_mapping[class];
    let split: Vec<MeshDim> = class_dims.iter().collect();
    let devs = devices(mesh);
    let mut results: Vec<Vec<Tensor>> = claims.iter().map(|_| Vec::new()).collect();
    for dev in &devs {
        let group: Vec<&Device> = devs
            .iter()
            .filter(|p| {
                (0..mesh.shape().len())
                    .all(|m| split.contains(&(m as MeshDim)) || p.coord[m] == dev.coord[m])
            })
            .collect();
        let locals = reads
            .iter()
            .map(|h| gather(mesh, h, dev, &group, &class_dims))
            .collect::<Result<Vec<_>, _>>()?;
        let outs = catch_unwind(AssertUnwindSafe(|| kernel(&locals)))
            .map_err(|p| format!("the kernel failed on {dev}: {}", panic_message(&*p)))?;
        if outs.len() != claims.len() {
            return Err(format!(
                "{} results for {} claims",
                outs.len(),
                claims.len()
            ));
        }
        let own = block_of(
            logits.value.shape(),
            &logits.attr.dims_mapping,
            mesh,
            &dev.coord,
        )[class]
            .clone();
        for ((t, h), res) in outs.into_iter().zip(claims).zip(&mut results) {
            res.push(match h.class {
                Some(c) => {
                    let mut part: Vec<Range<usize>> = t.shape().iter().map(|&n| 0..n).collect();
                    if t.rank() <= c || t.shape()[c] != logits.value.shape()[class] {
                        return Err(format!(
                            "the kernel's {} on {dev} has shape {:?}",
                            h.name,
                            t.shape()
                        ));
                    }
                    part[c] = own.clone();
                    t.block(&part)
                }
                None => t,
            });
        }
    }
    for (h, locals) in claims.iter().zip(results) {
        let reduced = reduce(mesh, &devs, h, locals)?;
        compare(mesh, &devs, h, &reduced)?;
    }
    Ok(())
}

/// A finding of the simulation, with the answer it ran.
fn own_report(direction: &str, mesh: &Mesh, r: &RuleResult, finding: String) -> String {
    let list = |a: &[DistAttr]| {
        a.iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "UNSOUND: rule `cross_entropy_with_softmax` ({direction}, vocab-parallel kernel) on mesh {:?}\n  \
         answered inputs [{}]\n  answered outputs [{}]\n  {finding}",
        mesh.shape(),
        list(&r.inputs),
        list(&r.outputs)
    )
}

// ------------------------------------ cross_entropy_with_softmax properties

#[derive(Clone, Debug)]
struct CeCase {
    mesh: Vec<usize>,
    shape: Vec<usize>,
    /// `axis` as given (maybe negative).
    axis_attr: i64,
    op: CrossEntropy,
    /// logits, label; softmax, loss (backward's outputs, the grad's output
    /// grads).
    attrs: Vec<DistAttr>,
}

/// Cases of `cross_entropy_with_softmax`; with `vocab_parallel`, only the
/// vocab-parallel configuration (hard label, last axis, fused softmax) with
/// the logits' (and mostly the softmax's) class axis sharded.
fn ce_case(vocab_parallel: bool) -> impl Strategy<Value = CeCase> {
    (
        prop_oneof![
            1 => prop::collection::vec(1usize..=4, 1),
            4 => prop::collection::vec(1usize..=4, 2..=3),
        ],
        (
            any::<prop::sample::Index>(),
            any::<bool>(),
            prop::bool::weighted(0.5),
        ),
        (
            prop::bool::weighted(0.35),
            prop::bool::weighted(0.75),
            prop::bool::weighted(0.3),
        ),
        small_mesh(),
    )
        .prop_flat_map(
            move |(shape, (axis, negative, last), (soft, use_softmax, ignore), mesh)| {
                let rank = shape.len();
                let (soft, use_softmax, last) = if vocab_parallel {
                    (false, true, true)
                } else {
                    (soft, use_softmax, last)
                };
                let axis = if last { rank - 1 } else { axis.index(rank) };
                let axis_attr = axis as i64 - if negative { rank as i64 } else { 0 };
                let op = CrossEntropy {
                    soft,
                    use_softmax,
                    axis,
                    // Class 0 stands for "no label" in some cases.
                    ignore_index: if ignore && !soft { 0 } else { -100 },
                };
                let m = mesh.len();
                let c = CeCase {
                    mesh,
                    shape,
                    axis_attr,
                    op,
                    attrs: Vec::new(),
                };
                // The vocab-parallel property always shards the class axis.
                let forced = if vocab_parallel { 1.0 } else { 0.8 };
                (
                    Just(c),
                    attrs(vec![rank; 4], m, true),
                    prop::bool::weighted(0.5),
                    (
                        prop::bool::weighted(forced),
                        any::<prop::sample::Index>(),
                        any::<prop::sample::Index>(),
                    ),
                    force(),
                    prop::bool::weighted(0.7),
                )
            },
        )
        .prop_map(
            move |(mut c, mut a, aligned, f_logits, f_softmax, keep_class)| {
                let axis = c.op.axis;
                if aligned {
                    // The label, softmax and loss laid out as the logits (a
                    // size-1 class dim replicated): random ones mostly conflict.
                    let mut rows = a[0].dims_mapping.clone();
                    if let Some(s) = rows.get_mut(axis) {
                        *s = Sharding::REPLICATED;
                    }
                    let logits = DistAttr::new(a[0].dims_mapping.clone());
                    a[1] = if c.op.soft {
                        logits.clone()
                    } else {
                        DistAttr::new(rows.clone())
                    };
                    a[2] = logits;
                    a[3] = DistAttr::new(rows);
                }
                // Shard the class axis (vocab-parallel) or else a row dim of
                // the logits and of the softmax.
                let dims: Vec<usize> = if vocab_parallel {
                    vec![axis]
                } else {
                    (0..c.shape.len()).filter(|&d| d != axis).collect()
                };
                a[0] = force_split(&a[0], &c.mesh, &dims, f_logits);
                // The same dim and mesh dim: two mostly conflict.
                let (_, dim, m) = f_logits;
                a[2] = force_split(&a[2], &c.mesh, &dims, (f_softmax.0, dim, m));
                let shardable = !c.op.soft && c.op.use_softmax && axis + 1 == c.shape.len();
                if !shardable && keep_class {
                    // Mostly leave the class axis of the logits replicated
                    // where it may not be sharded: the rule refuses those
                    // calls, and one such call in a few is enough.
                    let mut dims = a[0].dims_mapping.clone();
                    if let Some(s) = dims.get_mut(axis) {
                        *s = Sharding::REPLICATED;
                    }
                    a[0] = DistAttr::new(dims).with_partial(a[0].partial);
                }
                c.attrs = a;
                c
            },
        )
}

/// Checks forward, backward and the (derived) grad of one case. An answer
/// that shards the class axis in the vocab-parallel configuration is run by
/// [`class_parallel`] (the kernel all-reduces across the class shards, it is
/// not the op on local blocks), and counted in `parallel`; any other answer
/// by the checker.
fn check_cross_entropy(
    c: &CeCase,
    counts: &[Counts; 3],
    parallel: &[AtomicUsize; 3],
) -> Result<(), TestCaseError> {
    let op = c.op;
    let rule = registry()
        .build(
            "cross_entropy_with_softmax",
            &Attrs::new()
                .with("soft_label", op.soft)
                .with("use_softmax", op.use_softmax)
                .with("axis", c.axis_attr)
                .with("ignore_index", op.ignore_index),
        )
        .unwrap();
    let mesh = Mesh::new(&c.mesh).unwrap();
    let (shape, axis) = (c.shape.clone(), op.axis);
    let mut row_shape = shape.clone();
    row_shape[axis] = 1;
    let classes = shape[axis];
    let logits = if op.use_softmax {
        small(&shape, 1).map(|v| 3.0 * v)
    } else {
        // Probabilities already: positive.
        small(&shape, 1).map(|v| v.abs() + 0.1)
    };
    let label = if op.soft {
        small(&shape, 2).map(f64::abs)
    } else {
        Tensor::from_fn(&row_shape, |i| {
            let h: usize = i.iter().enumerate().map(|(d, &x)| (2 * d + 3) * x).sum();
            ((h + 1) % classes) as f64
        })
    };
    let kernel = move |v: &[Tensor]| op.forward(&v[0], &v[1]);
    let shardable = !op.soft && op.use_softmax && axis + 1 == shape.len();
    // (Answers of other lengths go to the checker, which reports them.)
    let class_split = |r: &RuleResult, inputs: usize| {
        shardable
            && r.inputs.len() == inputs
            && r.outputs.len() == 2
            && r.inputs[0]
                .dims_mapping
                .get(axis)
                .is_some_and(|s| !s.is_replicated())
    };
    let values = [logits.clone(), label.clone()];
    let dense = kernel(&values);
    let run_forward_of = |r: &RuleResult| {
        let reads = [
            Held {
                name: "logits",
                value: &logits,
                attr: &r.inputs[0],
                class: Some(axis),
            },
            Held {
                name: "label",
                value: &label,
                attr: &r.inputs[1],
                class: None,
            },
        ];
        let claims = [
            Held {
                name: "softmax",
                value: &dense[0],
                attr: &r.outputs[0],
                class: Some(axis),
            },
            Held {
                name: "loss",
                value: &dense[1],
                attr: &r.outputs[1],
                class: None,
            },
        ];
        class_parallel(&mesh, &reads, &claims, &kernel)
    };

    let inputs = [
        Input::new(logits.clone(), c.attrs[0].clone()),
        Input::new(label.clone(), c.attrs[1].clone()),
    ];
    let answer = rule.forward(&mesh, &input_specs(&inputs));
    match &answer {
        Ok(r) if class_split(r, 2) => {
            parallel[0].fetch_add(1, Ordering::Relaxed);
            let found = run_forward_of(r).map_err(|f| own_report("forward", &mesh, r, f));
            counts[0].record_own(&mesh, r, found)?;
        }
        _ => counts[0].record(
            &mesh,
            &answer,
            check_forward(&*rule, &mesh, &inputs, kernel),
        )?,
    }

    let outs = complete(&c.attrs[2..4]);
    let out_specs = [Spec::new(&shape, &outs[0]), Spec::new(&row_shape, &outs[1])];
    let shapes = [logits.shape(), label.shape()];
    let answer = rule.backward(&mesh, &shapes, &out_specs);
    match &answer {
        Ok(r) if class_split(r, 2) => {
            parallel[1].fetch_add(1, Ordering::Relaxed);
            // As check_backward: the requirements, run forward, give the
            // answered outputs, and the rule's forward answers them too.
            let found = run_forward_of(r).and_then(|()| {
                let req = [
                    Spec::new(&shape, &r.inputs[0]),
                    Spec::new(label.shape(), &r.inputs[1]),
                ];
                match rule.forward(&mesh, &req) {
                    Ok(fw) if fw.outputs == r.outputs => Ok(()),
                    other => Err(format!(
                        "forward from backward's requirements answers {:?}",
                        other.map(|fw| fw
                            .outputs
                            .iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>())
                    )),
                }
            });
            let found = found.map_err(|f| own_report("backward", &mesh, r, f));
            counts[1].record_own(&mesh, r, found)?;
        }
        _ => counts[1].record(
            &mesh,
            &answer,
            check_backward(&*rule, &mesh, &values, &outs, kernel),
        )?,
    }

    // The grad reads the softmax value (laid out as its grad's requirement).
    let grad =
        move |v: &[Tensor], o: &[Tensor], dy: &[Tensor]| op.grad(&v[1], &o[0], &dy[0], &dy[1]);
    let dy_specs = [
        Spec::new(&shape, &c.attrs[2]),
        Spec::new(&row_shape, &c.attrs[3]),
    ];
    let answer = rule.grad(&mesh, &input_specs(&inputs), &dy_specs);
    match &answer {
        Ok(r) if class_split(r, 4) => {
            parallel[2].fetch_add(1, Ordering::Relaxed);
            // The output grads' values as check_grad makes them; the
            // forward values laid out as their grads, not partial.
            let dys = [
                Tensor::probe(&shape, 0xd7, Values::Integers),
                Tensor::probe(&row_shape, 0xd8, Values::Integers),
            ];
            let expected = grad(&values, &dense, &dys);
            let forward_attrs = complete(&r.inputs[2..4]);
            let h = |name, value, attr, class| Held {
                name,
                value,
                attr,
                class,
            };
            let reads = [
                h("logits", &logits, &r.inputs[0], Some(axis)),
                h("label", &label, &r.inputs[1], None),
                h(
                    "softmax (forward value)",
                    &dense[0],
                    &forward_attrs[0],
                    Some(axis),
                ),
                h("loss (forward value)", &dense[1], &forward_attrs[1], None),
                h("softmax grad", &dys[0], &r.inputs[2], Some(axis)),
                h("loss grad", &dys[1], &r.inputs[3], None),
            ];
            let claims = [
                h("logits grad", &expected[0], &r.outputs[0], Some(axis)),
                h("label grad", &expected[1], &r.outputs[1], None),
            ];
            let local = |l: &[Tensor]| grad(&l[..2], &l[2..4], &l[4..]);
            let found = class_parallel(&mesh, &reads, &claims, &local)
                .map_err(|f| own_report("grad", &mesh, r, f));
            counts[2].record_own(&mesh, r, found)?;
        }
        _ => counts[2].record(
            &mesh,
            &answer,
            check_grad(&*rule, &mesh, &inputs, &c.attrs[2..4], kernel, grad),
        )?,
    }
    Ok(())
}

#[test]
fn cross_entropy_with_softmax_against_the_kernel() {
    let counts = [Counts::new(), Counts::new(), Counts::new()];
    let parallel = [
        AtomicUsize::new(0),
        AtomicUsize::new(0),
        AtomicUsize::new(0),
    ];
    run(CASES, ce_case(false), |c| {
        check_cross_entropy(&c, &counts, &parallel)
    });
    counts[0].assert_meaningful("cross_entropy_with_softmax forward");
    counts[1].assert_meaningful("cross_entropy_with_softmax backward");
    counts[2].assert_meaningful("cross_entropy_with_softmax grad");
}

#[test]
fn cross_entropy_vocab_parallel() {
    let counts = [Counts::new(), Counts::new(), Counts::new()];
    let parallel = [
        AtomicUsize::new(0),
        AtomicUsize::new(0),
        AtomicUsize::new(0),
    ];
    run(CASES, ce_case(true), |c| {
        check_cross_entropy(&c, &counts, &parallel)
    });
    for (k, what) in ["forward", "backward", "grad"].into_iter().enumerate() {
        let what = format!("cross_entropy_with_softmax vocab-parallel {what}");
        counts[k].assert_meaningful(&what);
        let p = parallel[k].load(Ordering::Relaxed);
        eprintln!("{what}: {p} answers keep the class axis sharded");
        // The point of the property: the class axis stays sharded.
        assert!(
            4 * p >= CASES as usize,
            "{what}: only {p} answers shard the class axis"
        );
    }
}
