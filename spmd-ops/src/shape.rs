//! Ops that move, add, drop or regroup dims without touching values:
//! `transpose`, `squeeze`, `unsqueeze`, `flatten`, `reshape`, `tile`,
//! `expand_as`. Each builds its notation from its attributes and the input's
//! shape; size-1 dims are `1` (splitting a size-1 dim splits nothing).

use spmd_core::notation::Pos;
use spmd_core::{Call, DimsMapping, Einsum, Mesh, RuleResult, Sharding, SpmdError, spmd_rule};

use crate::notation::{BuiltDim, built, letters, normalize_axis};

/// The shape of input `i`, or an error naming the op when the call lacks it.
pub(crate) fn input_shape<'c>(
    op: &'static str,
    call: &Call<'c>,
    i: usize,
) -> Result<&'c [usize], SpmdError> {
    call.input_shape(i).ok_or_else(|| SpmdError::Rejected {
        op,
        message: format!("input {i} is missing"),
    })
}

/// Paddle's `transpose` / `transpose2`: output dim `i` is input dim
/// `perm[i]`, so each dim keeps its sharding wherever it moves.
///
/// Paddle 3.3.1 drops a non-divisible sharding on the derived side only
/// (`PADDLE-3.3.1.md` §A), which leaves the two sides inconsistent; this rule
/// keeps uneven shards on both (the classic, sound answer; the differing
/// cases are listed deviations). Transpose is linear: a `Sum` partial input
/// passes to the output, as in Paddle 3.3.1. The reverse rule resets the
/// output's partial status, as 3.3.1 does.
#[spmd_rule(
    name = "transpose",
    einsum = "@->@[perm]",
    partial(backward = "reset", inputs = "linear"),
    inputs(x),
    outputs(out),
    grad(inputs())
)]
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Transpose {
    pub perm: Vec<i64>,
}

/// Paddle's `squeeze`: drops the size-1 dims listed in `axis` (every size-1
/// dim when `axis` is empty); a listed dim whose size is not 1 stays. The
/// other dims keep their sharding. The gradient reshapes `out_grad` back and
/// never reads `x`, so `x` keeps its layout in the grad op.
#[spmd_rule(
    name = "squeeze",
    // A dropped size-1 dim is an axis of extent 1, which never carries a
    // sharding: nothing is contracted over a shard.
    einsum = "@->@{axis(call):-}",
    partial(backward = "reset"),
    grad(ignores(x)),
    inputs(x),
    outputs(out)
)]
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Squeeze {
    #[spmd(default)]
    pub axis: Vec<i64>,
}

impl Squeeze {
    /// The dims squeezed away: those `axis` lists (every dim when it is
    /// empty) whose size is 1. A listed dim out of range is left for the
    /// binding to report, with the value as written.
    fn axis(&self, call: &Call<'_>) -> Pos<'_> {
        let shape = call.input_shape(0).unwrap_or(&[]);
        let rank = shape.len() as i64;
        let listed = |d: usize| {
            self.axis.is_empty()
                || self
                    .axis
                    .iter()
                    .any(|&a| (if a < 0 { a + rank } else { a }) == d as i64)
        };
        if self
            .axis
            .iter()
            .any(|&a| a >= rank.max(1) || a < -rank.max(1))
        {
            return Pos::List(&self.axis);
        }
        let mask = shape
            .iter()
            .enumerate()
            .filter(|&(d, &size)| d < 64 && size == 1 && listed(d))
            .fold(0u64, |m, (d, _)| m | 1 << d);
        Pos::Mask(mask)
    }
}

/// Paddle's `unsqueeze` / `unsqueeze2`: inserts a size-1 dim at each entry
/// of `axis`, in order (a negative entry counts from the end of the tensor
/// as it is at that point). The new dims are never sharded; the others keep
/// their sharding.
#[spmd_rule(
    name = "unsqueeze",
    einsum = "@->@{inserted(call):+1}",
    validate = Self::check,
    partial(backward = "reset"),
    grad(ignores(x)),
    inputs(x),
    outputs(out)
)]
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Unsqueeze {
    #[spmd(default)]
    pub axis: Vec<i64>,
}

impl Unsqueeze {
    /// The output's new dims, as bits: each entry of `axis` in turn, counted
    /// in the tensor as it is at that point. Paddle's grad rule takes no
    /// attributes: without them, the new dims are read off the shapes of `x`
    /// and `out_grad` (the size-1 dims `x` lacks).
    fn inserted_at(&self, call: &Call<'_>) -> Result<u64, SpmdError> {
        let rank = call.input_rank(0).unwrap_or(0);
        if self.axis.is_empty()
            && let (Call::Grad { .. }, Some(x), Some(dy)) =
                (call, call.input_shape(0), call.output_shape(0))
        {
            return new_dims(x, dy).ok_or_else(|| SpmdError::Rejected {
                op: "unsqueeze",
                message: format!("out_grad {dy:?} is not x {x:?} with size-1 dims inserted"),
            });
        }
        let mut mask = 0u64;
        for (len, &a) in (rank..).zip(&self.axis) {
            let at = if a < 0 { a + len as i64 + 1 } else { a };
            if !(0..=len as i64).contains(&at) || len >= 63 {
                return Err(SpmdError::InvalidAttr {
                    op: "unsqueeze",
                    attr: "axis".into(),
                    message: format!("axis {a} is out of range for a tensor of rank {len}"),
                });
            }
            let below = (1u64 << at) - 1;
            mask = (mask & below) | ((mask & !below) << 1) | (1 << at);
        }
        Ok(mask)
    }
    fn inserted(&self, call: &Call<'_>) -> Pos<'_> {
        Pos::Mask(self.inserted_at(call).unwrap_or(0))
    }
    fn check(&self, call: &Call<'_>) -> Result<(), SpmdError> {
        self.inserted_at(call).map(|_| ())
    }
}

/// The dims of `out` that are `x`'s with size-1 dims inserted, as bits:
/// `out`'s dims matched to `x`'s in order, a size-1 dim that does not match
/// being new. `None` when `out` is not such a shape.
fn new_dims(x: &[usize], out: &[usize]) -> Option<u64> {
    let (mut mask, mut j) = (0u64, 0);
    for (d, &n) in out.iter().enumerate() {
        if x.get(j) == Some(&n) {
            j += 1;
        } else if n == 1 && d < 64 {
            mask |= 1 << d;
        } else {
            return None;
        }
    }
    (j == x.len()).then_some(mask)
}

/// Paddle's `flatten`: dims `start_axis..=stop_axis` merge into one, written
/// as a compound `(cde)` on the output; only the group's first dim may carry
/// a sharding across (docs/semantics.md §3). Flatten is linear, so a `Sum` partial input
/// passes to the output, as Paddle 3.3.1 does.
///
/// Paddle's grad rule takes no attributes (`FlattenGradInferSpmd(x,
/// out_grad)`): without them, the grouping is read off the shapes of `x` and
/// `out_grad`, as `reshape` does.
#[spmd_rule(
    name = "flatten",
    build(Self::notation, cache),
    partial(backward = "reset", inputs = "linear"),
    merge(compounds = "absorb"),
    inputs(x),
    outputs(out)
)]
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Flatten {
    #[spmd(default)]
    pub start_axis: Option<i64>,
    #[spmd(default)]
    pub stop_axis: Option<i64>,
}

impl Flatten {
    /// For rank 4, `start_axis = 1`, `stop_axis = 2`: `abcd->a(bc)d`. Built
    /// per call: Paddle's grad gives no axes, so the grouping is read off
    /// the shapes of `x` and `out_grad` (shape values no template can see).
    fn notation(&self, call: &Call<'_>) -> Result<Einsum, SpmdError> {
        let shape = input_shape("flatten", call, 0)?;
        if let (None, None, Call::Grad { output_grads, .. }) =
            (self.start_axis, self.stop_axis, call)
            && let Some(dy) = output_grads.first()
        {
            return reshape_notation("flatten", shape, dy.shape);
        }
        let rank = shape.len();
        if rank == 0 {
            // A 0-d x flattens to one dim of size 1.
            return built("flatten", &[&[]], &[&[BuiltDim::One]]);
        }
        let start = normalize_axis("flatten", "start_axis", self.start_axis.unwrap_or(0), rank)?;
        let stop = normalize_axis("flatten", "stop_axis", self.stop_axis.unwrap_or(-1), rank)?;
        let names = letters("flatten", rank)?;
        // Size-1 dims are `1`: they hold nothing.
        let input: Vec<BuiltDim> = (0..rank)
            .map(|d| match shape[d] {
                1 => BuiltDim::One,
                _ => BuiltDim::Label(names[d]),
            })
            .collect();
        if start >= stop {
            return built("flatten", &[&input], &[&input]);
        }
        let mut output: Vec<BuiltDim> = input[..start].to_vec();
        output.push(merged(&names, shape, start..=stop));
        output.extend_from_slice(&input[stop + 1..]);
        built("flatten", &[&input], &[&output])
    }
}

/// Input dims `group` merged into one output dim: the compound of their
/// labels, size-1 dims left out (they hold nothing); a single remaining dim
/// is plain, none is `1`.
fn merged(names: &[u8], shape: &[usize], group: core::ops::RangeInclusive<usize>) -> BuiltDim {
    let kept: Vec<u8> = group.filter(|&d| shape[d] != 1).map(|d| names[d]).collect();
    match kept.as_slice() {
        [] => BuiltDim::One,
        [c] => BuiltDim::Label(*c),
        _ => BuiltDim::Compound(kept),
    }
}

/// Paddle's reshape dim transformation (`MakeReshapeDimTrans`) between two
/// shapes of equal volume, as a notation. Dims are grouped left to right
/// into the shortest runs of equal volume: a run of one dim on each side
/// shares a label; input dims merging into one output dim are a compound on
/// the output (`ab->(ab)`); an input dim splitting into several output dims
/// is a compound on the input (`(ab)->ab`); either way only the major factor
/// carries a sharding (docs/semantics.md §3). A run that both merges and splits has no
/// compound form: its dims are `1` here, and [`Reshape`]'s hook carries the
/// run's sharding (see [`for_each_carrying_run`]). Size-1 dims are `1`.
pub(crate) fn reshape_notation(
    op: &'static str,
    from: &[usize],
    to: &[usize],
) -> Result<Einsum, SpmdError> {
    let volume = |s: &[usize]| s.iter().try_fold(1usize, |a, &b| a.checked_mul(b));
    if volume(from) != volume(to) || volume(from) == Some(0) {
        return Err(SpmdError::Rejected {
            op,
            message: format!("cannot reshape {from:?} into {to:?}"),
        });
    }
    let mut letters = (b'a'..=b'z').chain(b'A'..=b'Z');
    let mut label = || {
        letters.next().ok_or_else(|| SpmdError::Rejected {
            op,
            message: "too many dims for a notation".into(),
        })
    };
    let (mut input, mut output) = (Vec::new(), Vec::new());
    let (mut i, mut o) = (0, 0);
    while i < from.len() || o < to.len() {
        let s = from.get(i).copied().unwrap_or(1);
        let t = to.get(o).copied().unwrap_or(1);
        if s == 1 && i < from.len() && (t != 1 || o == to.len()) {
            input.push(BuiltDim::One);
            i += 1;
            continue;
        }
        if t == 1 && o < to.len() {
            if i < from.len() && s == 1 {
                input.push(BuiltDim::One);
                i += 1;
            }
            output.push(BuiltDim::One);
            o += 1;
            continue;
        }
        // s, t > 1: the shortest runs of equal volume.
        let (mut ie, mut oe, mut vs, mut vt) = (i + 1, o + 1, s, t);
        while vs != vt {
            if vs < vt {
                vs *= from[ie];
                ie += 1;
            } else {
                vt *= to[oe];
                oe += 1;
            }
        }
        let big = |shape: &[usize], a: usize, b: usize| (a..b).filter(|&d| shape[d] != 1).count();
        let (ns, nt) = (big(from, i, ie), big(to, o, oe));
        let term = |shape: &[usize], a: usize, b: usize, ls: &[u8], out: &mut Vec<BuiltDim>| {
            // Labels go to the dims larger than 1 only: a size-1 dim is `1`
            // and must not use up the label of the next dim.
            let mut it = ls.iter();
            for &d in &shape[a..b] {
                match if d == 1 { None } else { it.next() } {
                    Some(&c) => out.push(BuiltDim::Label(c)),
                    None => out.push(BuiltDim::One),
                }
            }
        };
        if ns == 1 && nt == 1 {
            let c = [label()?];
            term(from, i, ie, &c, &mut input);
            term(to, o, oe, &c, &mut output);
        } else if nt == 1 {
            let cs: Vec<u8> = (0..ns).map(|_| label()).collect::<Result<_, _>>()?;
            term(from, i, ie, &cs, &mut input);
            output.push(BuiltDim::Compound(cs));
        } else if ns == 1 {
            let cs: Vec<u8> = (0..nt).map(|_| label()).collect::<Result<_, _>>()?;
            input.push(BuiltDim::Compound(cs.clone()));
            term(to, o, oe, &cs, &mut output);
        } else {
            term(from, i, ie, &[], &mut input);
            term(to, o, oe, &[], &mut output);
        }
        i = ie;
        o = oe;
    }
    built(op, &[&input], &[&output])
}

/// One run of a reshape (the shortest groups of dims of equal volume, dims
/// of size 1 left out) that splits: the first dims larger than 1 on each
/// side, and whether the input side is several dims (a run that merges and
/// splits, `[6, 12] -> [3, 24]`) rather than one (`[48] -> [6, 8]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct CarryingRun {
    from_dim: usize,
    to_dim: usize,
    merges_too: bool,
}

/// Calls `f` for each run of `from -> to` whose output side is several dims,
/// without allocating. Such a run's elements, in row-major order, are one
/// contiguous block on both sides, so splitting its first input dim `n` ways
/// and its first output dim `n` ways gives each device the same elements
/// when `n` divides both extents (Paddle's `Flatten` then `Split`): that is
/// the one sharding a run can carry. Stops at a volume mismatch (the
/// notation reports it).
fn for_each_carrying_run(from: &[usize], to: &[usize], mut f: impl FnMut(CarryingRun)) {
    let big = |shape: &[usize], mut k: usize| {
        while shape.get(k) == Some(&1) {
            k += 1;
        }
        k
    };
    let (mut i, mut o) = (big(from, 0), big(to, 0));
    while i < from.len() && o < to.len() {
        let (from_dim, to_dim) = (i, o);
        let (mut vs, mut vt) = (from[i], to[o]);
        let (mut ns, mut nt) = (1, 1);
        i = big(from, i + 1);
        o = big(to, o + 1);
        while vs != vt {
            let (next, n, k, shape) = if vs < vt {
                (&mut vs, &mut ns, &mut i, from)
            } else {
                (&mut vt, &mut nt, &mut o, to)
            };
            let Some(&d) = shape.get(*k) else { return };
            let Some(v) = next.checked_mul(d) else { return };
            *next = v;
            *n += 1;
            *k = big(shape, *k + 1);
        }
        if nt > 1 {
            f(CarryingRun {
                from_dim,
                to_dim,
                merges_too: ns > 1,
            });
        }
    }
}

/// `s` with trailing mesh dims dropped until their product divides every
/// extent of `extents`.
fn divisible(mesh: &Mesh, mut s: Sharding, extents: &[usize]) -> Sharding {
    while !s.is_empty() {
        let product: usize = s.iter().map(|m| mesh.dim(m)).product();
        if extents.iter().all(|e| e.is_multiple_of(product)) {
            break;
        }
        s = s.without_last();
    }
    s
}

/// Paddle's `reshape` / `reshape2`: the notation of
/// `reshape_notation` from the input's shape to the target `shape` (`0`
/// copies the input dim at that position, one `-1` takes what is left), or,
/// in backward and grad, to the given output's shape. Reshape is linear: a
/// `Sum` partial input passes to the output, as in Paddle 3.3.1.
///
/// A split (`[b, s, 64] -> [b, s, 4, 16]`) is the compound `(hd)` on the
/// input, whose major factor's extent the core cannot learn in forward (it
/// sees no output shape). The target shape knows it, so an `adjust` hook
/// hands the input dim's sharding to the major factor when the factor's
/// extent is divisible by it (dropping trailing mesh dims until it is), as
/// Paddle does. A run that merges and splits (`[6, 12] -> [3, 24]`) has no
/// compound form; the same hook carries its first dim's sharding across,
/// in every direction, when it divides both first dims.
#[spmd_rule(
    name = "reshape",
    build(Self::notation, cache),
    adjust = Self::carry_run_shardings,
    partial(inputs = "linear"),
    merge(compounds = "absorb"),
    inputs(x),
    outputs(out)
)]
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Reshape {
    /// The target shape: required in forward, where nothing else says it (a
    /// default of `[]` would only say "cannot reshape [8, 16] into []");
    /// backward and grad read it off the output (Paddle's reshape grad takes
    /// none).
    #[spmd(default)]
    pub shape: Option<Vec<i64>>,
}

impl Reshape {
    /// The plan pairs runs of dims whose products agree (`[6, 4] -> [24]`:
    /// `ab->(ab)`): it depends on the extents of both shapes, so it is built
    /// per call, as a plan, never as text.
    fn notation(&self, call: &Call<'_>) -> Result<Einsum, SpmdError> {
        let from = input_shape("reshape", call, 0)?;
        let given: Option<&[usize]> = match call {
            Call::Backward { outputs, .. } => outputs.first().map(|s| s.shape),
            Call::Grad { output_grads, .. } => output_grads.first().map(|s| s.shape),
            _ => None,
        };
        let to = match (given, &self.shape) {
            (Some(shape), _) => shape.to_vec(),
            (None, Some(shape)) => target_shape(from, shape)?,
            (None, None) => {
                return Err(SpmdError::InvalidAttr {
                    op: "reshape",
                    attr: "shape".into(),
                    message: "missing (a forward reshape needs its target shape)".into(),
                });
            }
        };
        reshape_notation("reshape", from, &to)
    }

    /// Hands each run's sharding across where the notation cannot: forward,
    /// a split's major factor (whose extent only the target shape knows) and
    /// a run that merges and splits, whose first dims carry it both ways
    /// ([`for_each_carrying_run`]); backward and grad, the latter only (the
    /// notation's compounds carry a split there, the output shape being
    /// known).
    fn carry_run_shardings(
        &self,
        call: &Call<'_>,
        result: &mut RuleResult,
    ) -> Result<(), SpmdError> {
        let RuleResult { inputs, outputs } = result;
        match *call {
            Call::Forward {
                mesh,
                inputs: given,
                ..
            } => {
                // (The notation already refused a forward call without `shape`.)
                let (Some(x), Some(shape)) = (given.first(), &self.shape) else {
                    return Ok(());
                };
                // Most reshapes (merges, no-ops) split nothing: answer them
                // without resolving the target shape, which allocates.
                if !may_split(x.shape, shape) {
                    return Ok(());
                }
                let to = target_shape(x.shape, shape)?;
                if let (Some(x_req), Some(out)) = (inputs.first_mut(), outputs.first_mut()) {
                    let runs = Runs {
                        mesh,
                        from: x.shape,
                        to: &to,
                        merging_only: false,
                    };
                    runs.carry(
                        Side::Input(&x.attr.dims_mapping),
                        &mut x_req.dims_mapping,
                        &mut out.dims_mapping,
                    );
                }
            }
            Call::Backward {
                mesh,
                input_shapes,
                outputs: given,
                ..
            } => {
                if let (Some(from), Some(out), Some(x_req), Some(out_res)) = (
                    input_shapes.first(),
                    given.first(),
                    inputs.first_mut(),
                    outputs.first_mut(),
                ) {
                    let runs = Runs {
                        mesh,
                        from,
                        to: out.shape,
                        merging_only: true,
                    };
                    runs.carry(
                        Side::Output(&out.attr.dims_mapping),
                        &mut x_req.dims_mapping,
                        &mut out_res.dims_mapping,
                    );
                }
            }
            Call::Grad {
                mesh,
                inputs: given,
                output_grads,
                ..
            } => {
                // The grad op's operands are (x, out_grad), its output x_grad.
                if let (Some(x), Some(dy), [x_req, dy_req, ..], Some(dx)) = (
                    given.first(),
                    output_grads.first(),
                    inputs.as_mut_slice(),
                    outputs.first_mut(),
                ) {
                    let runs = Runs {
                        mesh,
                        from: x.shape,
                        to: dy.shape,
                        merging_only: true,
                    };
                    runs.carry(
                        Side::Output(&dy.attr.dims_mapping),
                        &mut dx.dims_mapping,
                        &mut dy_req.dims_mapping,
                    );
                    // x is laid out as its grad (the grad layout rule): the
                    // framework gives x_grad the shape of x's block. Read
                    // for its layout only, it keeps a partial status, but
                    // not over a mesh dim that now splits it.
                    x_req.dims_mapping = dx.dims_mapping.clone();
                    let split = x_req.dims_mapping.mesh_set();
                    x_req.partial.remove(split);
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// The runs of one reshape call whose sharding the hook carries.
struct Runs<'a> {
    mesh: &'a Mesh,
    from: &'a [usize],
    to: &'a [usize],
    /// Only runs that merge and split (backward and grad, where the
    /// notation's compounds handle plain splits).
    merging_only: bool,
}

/// The tensor whose mapping a run's sharding is read from.
enum Side<'a> {
    Input(&'a DimsMapping),
    Output(&'a DimsMapping),
}

impl Runs<'_> {
    /// For each run, the given sharding of its first dim on the `given`
    /// side, trimmed until it divides both first dims' extents, is written
    /// to the first dim of the input-side and the output-side mappings.
    fn carry(&self, given: Side<'_>, input_side: &mut DimsMapping, output_side: &mut DimsMapping) {
        for_each_carrying_run(self.from, self.to, |run| {
            if self.merging_only && !run.merges_too {
                return;
            }
            let s = match given {
                Side::Input(m) => m.get(run.from_dim),
                Side::Output(m) => m.get(run.to_dim),
            };
            let Some(&s) = s else { return };
            let s = divisible(
                self.mesh,
                s,
                &[self.from[run.from_dim], self.to[run.to_dim]],
            );
            if let (Some(i), Some(o)) = (
                input_side.get_mut(run.from_dim),
                output_side.get_mut(run.to_dim),
            ) {
                *i = s;
                *o = s;
            }
        });
    }
}

/// Paddle's target shape: `0` copies the input dim at that index, one `-1`
/// is inferred from the volume.
/// Whether reshaping `from` by the `shape` attribute can split an input dim
/// across several output dims: some prefix product of the output is not a
/// prefix product of the input. `true` also when the answer needs the full
/// analysis (a zero or invalid dim, an overflow), which then reports it.
/// Allocation-free, unlike [`target_shape`] and [`reshape_runs`].
fn may_split(from: &[usize], shape: &[i64]) -> bool {
    let Some(volume) = from.iter().try_fold(1usize, |a, &b| a.checked_mul(b)) else {
        return true;
    };
    let dim = |j: usize, inferred: usize| -> Option<usize> {
        match shape[j] {
            -1 => Some(inferred),
            0 => from.get(j).copied(),
            d if d > 0 => usize::try_from(d).ok(),
            _ => None,
        }
    };
    let mut known = 1usize;
    for (j, &d) in shape.iter().enumerate() {
        if d != -1 {
            match dim(j, 1).and_then(|d| known.checked_mul(d)) {
                Some(k) => known = k,
                None => return true,
            }
        }
    }
    if volume == 0 || known == 0 || !volume.is_multiple_of(known) {
        return true;
    }
    let inferred = volume / known;
    let (mut p_in, mut i, mut p_out) = (1usize, 0, 1usize);
    for j in 0..shape.len() {
        let Some(next) = dim(j, inferred).and_then(|d| p_out.checked_mul(d)) else {
            return true;
        };
        p_out = next;
        while i < from.len() && p_in < p_out {
            p_in *= from[i];
            i += 1;
        }
        if p_in != p_out {
            return true;
        }
    }
    false
}

fn target_shape(from: &[usize], shape: &[i64]) -> Result<Vec<usize>, SpmdError> {
    let bad = |message: String| SpmdError::InvalidAttr {
        op: "reshape",
        attr: "shape".into(),
        message,
    };
    let mut out = Vec::with_capacity(shape.len());
    let mut infer = None;
    for (i, &d) in shape.iter().enumerate() {
        match d {
            -1 if infer.is_none() => {
                infer = Some(i);
                out.push(1);
            }
            -1 => return Err(bad(format!("{shape:?} has more than one -1"))),
            0 => out.push(
                *from
                    .get(i)
                    .ok_or_else(|| bad(format!("0 at index {i} has no input dim to copy")))?,
            ),
            d if d > 0 => out.push(d as usize),
            d => return Err(bad(format!("invalid dim {d} in {shape:?}"))),
        }
    }
    if let Some(i) = infer {
        let volume: usize = from.iter().product();
        let known: usize = out.iter().product();
        if known == 0 || !volume.is_multiple_of(known) {
            return Err(bad(format!(
                "cannot infer the -1 of {shape:?} from {from:?}"
            )));
        }
        out[i] = volume / known;
    }
    Ok(out)
}

/// Paddle's `tile`: repeats the tensor `repeat_times[i]` times along dim `i`
/// (`repeat_times` is aligned to the right; extra entries add leading dims).
/// A repeated dim is never sharded: its copies would all need the whole dim.
#[spmd_rule(
    name = "tile",
    einsum = "@{repeated(call):1}->@{repeated(call):1; leading(call):+1}",
    partial(backward = "reset"),
    inputs(x),
    outputs(out)
)]
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Tile {
    #[spmd(default)]
    pub repeat_times: Vec<i64>,
}

impl Tile {
    /// `x`'s rank and the number of leading dims `repeat_times` adds.
    fn ranks(&self, call: &Call<'_>) -> (usize, usize) {
        let rank = call.input_rank(0).unwrap_or(0);
        (rank, self.repeat_times.len().saturating_sub(rank))
    }
    /// The dims of `x` repeated more than once (`repeat_times` is aligned to
    /// the right), as bits. For `x: [4, 8]`, `repeat_times = [2, 1, 3]`: dim 1.
    fn repeated(&self, call: &Call<'_>) -> Pos<'_> {
        let (rank, _) = self.ranks(call);
        let skip = self.repeat_times.len().saturating_sub(rank);
        let pad = rank.saturating_sub(self.repeat_times.len());
        let mask = self.repeat_times[skip..]
            .iter()
            .enumerate()
            .filter(|&(i, &r)| r != 1 && pad + i < 64)
            .fold(0u64, |m, (i, _)| m | 1 << (pad + i));
        Pos::Mask(mask)
    }
    /// The output's leading dims that `x` lacks, as bits.
    fn leading(&self, call: &Call<'_>) -> Pos<'_> {
        let (_, new) = self.ranks(call);
        Pos::Mask(if new >= 64 {
            u64::MAX
        } else {
            (1u64 << new) - 1
        })
    }
}

/// Paddle's `expand_as` / `expand_as_v2`: broadcasts `x` to `y`'s shape
/// (`y` only gives the shape). Paddle's rule follows `y` alone: the output
/// takes `y`'s mapping and `x` the part of it its dims align with (right
/// aligned, size-1 dims replicated); `x`'s own mapping is not merged
/// (`merge(follows(x))`).
#[spmd_rule(
    name = "expand_as",
    einsum = "...,...->...",
    merge(follows(x)),
    validate = Self::check,
    partial(backward = "reset"),
    inputs(x, y),
    outputs(out)
)]
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ExpandAs {
    #[spmd(default)]
    pub target_shape: Vec<i64>,
}

impl ExpandAs {
    /// Broadcasting never drops dims: `x` has at most `y`'s rank.
    fn check(&self, call: &Call<'_>) -> Result<(), SpmdError> {
        match (call.input_rank(0), call.input_rank(1)) {
            (Some(x), Some(y)) if x > y => Err(SpmdError::Rejected {
                op: "expand_as",
                message: format!("input 0 (x) has rank {x}, above input 1 (y)'s rank {y}"),
            }),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{CarryingRun, for_each_carrying_run, may_split, reshape_notation, target_shape};
    use spmd_core::SpmdRuleExt;

    fn carrying_runs(from: &[usize], to: &[usize]) -> Vec<(usize, usize, bool)> {
        let mut runs = vec![];
        for_each_carrying_run(from, to, |r: CarryingRun| {
            runs.push((r.from_dim, r.to_dim, r.merges_too))
        });
        runs
    }

    /// The runs that split, with their first dims on each side (size-1
    /// dims skipped) and whether they merge too.
    #[test]
    fn carrying_runs_are_the_runs_that_split() {
        // The suite's case: [6, 12] -> [3, 24] merges and splits, 48 splits.
        assert_eq!(
            carrying_runs(&[6, 12, 48, 24], &[3, 24, 6, 8, 24]),
            [(0, 0, true), (2, 2, false)]
        );
        // Merges and no-ops carry nothing across a run boundary.
        assert_eq!(carrying_runs(&[2, 3, 4], &[6, 4]), []);
        assert_eq!(carrying_runs(&[4, 6], &[4, 6]), []);
        // Size-1 dims are never a run's first dim.
        assert_eq!(carrying_runs(&[1, 4, 6], &[1, 1, 6, 4]), [(1, 2, true)]);
        assert_eq!(carrying_runs(&[24], &[1, 2, 1, 12]), [(0, 1, false)]);
        // A volume mismatch stops the walk (the notation reports it).
        assert_eq!(carrying_runs(&[4, 5], &[2, 3]), []);
    }

    /// Grad: `x` is laid out as its grad and keeps a partial status it is
    /// given, but never over a mesh dim that now splits it (the robustness
    /// suite's case: `[8, 2, 4] -> [4, 8, 2]`, x partial over mesh dim 1,
    /// which the output grad's first dim takes).
    #[test]
    fn grad_keeps_no_partial_over_a_mesh_dim_that_splits_x() {
        use spmd_core::{DistAttr, Mesh, MeshSet, Partial, ReduceType, Spec};
        let registry = crate::builtins();
        let rule = registry.build("reshape", &spmd_core::Attrs::new()).unwrap();
        let mesh = Mesh::new(&[4, 2, 3]).unwrap();
        let x = DistAttr::from_paddle(&[2, 0, -1])
            .unwrap()
            .with_partial(Partial::over(MeshSet(1 << 1), ReduceType::Sum));
        let grad = |dy: &[i64]| {
            let dy = DistAttr::from_paddle(dy).unwrap();
            rule.grad_optional(
                &mesh,
                &[Some(Spec::new(&[8, 2, 4], &x))],
                &[Some(Spec::new(&[4, 8, 2], &dy))],
            )
            .unwrap()
        };
        let r = grad(&[1, -1, 2]);
        assert_eq!(r.inputs[0].to_string(), "[1, -1, -1]");
        assert_eq!(r.outputs[0].to_string(), "[1, -1, -1]");
        // Where the mesh dim stays free, the partial status stays.
        let r = grad(&[0, -1, 2]);
        assert_eq!(r.inputs[0].to_string(), "[0, -1, -1] partial{1: SUM}");
    }

    /// The allocation-free pre-check never hides a split the full run
    /// analysis finds (a run that merges and splits, `[6, 4] -> [2, 12]`,
    /// included), and clears merges and no-ops (what it is for).
    #[test]
    fn may_split_agrees_with_the_runs() {
        let cases: &[(&[usize], &[i64])] = &[
            (&[8, 1024, 16, 32], &[8, 1024, 512]),
            (&[8, 1024, 512], &[8, 1024, 16, 32]),
            (&[8], &[2, 4]),
            (&[8], &[-1, 4]),
            (&[4, 1, 6], &[4, 6]),
            (&[4, 6], &[4, 1, 6]),
            (&[6, 4], &[2, 12]),
            (&[6, 4], &[0, -1]),
            (&[2, 3, 4], &[6, 4]),
            (&[2, 3, 4], &[24]),
            (&[24], &[2, 3, 4]),
            (&[1, 1], &[1]),
        ];
        for &(from, shape) in cases {
            let to = target_shape(from, shape).unwrap();
            let splits = !carrying_runs(from, &to).is_empty();
            assert!(!splits || may_split(from, shape), "{from:?} -> {shape:?}");
        }
        for &(from, shape) in cases {
            let pure_merge_or_same = matches!(
                (from, shape),
                ([8, 1024, 16, 32], [8, 1024, 512])
                    | ([4, 1, 6], [4, 6])
                    | ([4, 6], [4, 1, 6])
                    | ([2, 3, 4], [6, 4])
                    | ([2, 3, 4], [24])
                    | ([1, 1], [1])
            );
            if pure_merge_or_same {
                assert!(!may_split(from, shape), "{from:?} -> {shape:?}");
            }
        }
        // Inputs the full analysis rejects are left to it.
        assert!(may_split(&[6], &[-1, -1]));
        assert!(may_split(&[6], &[4]) || target_shape(&[6], &[4]).is_err());
        assert!(may_split(&[0, 3], &[3, 0]));
    }
    use spmd_core::{Attrs, DistAttr, Mesh, Spec};

    /// The head split of attention, `[b, s, h] -> [b, s, heads, head_dim]`:
    /// `h`'s sharding goes to `heads` when the mesh dim divides it, and is
    /// dropped (the input gathered) when it does not.
    #[test]
    fn a_split_dim_keeps_its_sharding_on_the_major_factor() {
        let mesh = Mesh::new(&[2, 4]).unwrap();
        let x = DistAttr::from_paddle(&[0, -1, 1]).unwrap();
        let run = |shape: &[i64]| {
            let attrs = Attrs::new().with("shape", shape);
            let rule = crate::builtins().build("reshape", &attrs).unwrap();
            let r = rule.forward(&mesh, &[Spec::new(&[4, 8, 64], &x)]).unwrap();
            (r.inputs[0].to_string(), r.outputs[0].to_string())
        };
        let kept = ("[0, -1, 1]".to_string(), "[0, -1, 1, -1]".to_string());
        assert_eq!(run(&[4, 8, 16, 4]), kept);
        assert_eq!(
            run(&[0, 0, 8, -1]),
            ("[0, -1, 1]".into(), "[0, -1, 1, -1]".into())
        );
        // 2 heads cannot be split 4 ways.
        assert_eq!(
            run(&[4, 8, 2, 32]),
            ("[0, -1, -1]".into(), "[0, -1, -1, -1]".into())
        );
    }

    /// A run that merges and splits (`[6, 4] -> [4, 6]`) keeps its first
    /// dim's sharding when the mesh dim divides both first dims, so each
    /// device's block is one contiguous range of the run on both sides;
    /// otherwise it is gathered. Answers checked against Paddle 3.3.1.
    #[test]
    fn a_run_that_merges_and_splits_carries_its_first_dim() {
        let run = |mesh: &[usize], from: &[usize], mapping: &[i64], shape: &[i64]| {
            let mesh = Mesh::new(mesh).unwrap();
            let x = DistAttr::from_paddle(mapping).unwrap();
            let attrs = Attrs::new().with("shape", shape);
            let rule = crate::builtins().build("reshape", &attrs).unwrap();
            let r = rule.forward(&mesh, &[Spec::new(from, &x)]).unwrap();
            (r.inputs[0].to_string(), r.outputs[0].to_string())
        };
        let pair = |x: &str, out: &str| (x.to_string(), out.to_string());
        assert_eq!(
            run(&[2], &[6, 4], &[0, -1], &[4, 6]),
            pair("[0, -1]", "[0, -1]")
        );
        assert_eq!(
            run(&[3], &[6, 4], &[0, -1], &[4, 6]),
            pair("[-1, -1]", "[-1, -1]")
        );
        // 5 rows do not split evenly in two, though the output's 4 would.
        assert_eq!(
            run(&[2], &[5, 4], &[0, -1], &[4, 5]),
            pair("[-1, -1]", "[-1, -1]")
        );
        // Only the run's first dim carries: the minor dim's sharding is gathered.
        assert_eq!(
            run(&[2, 2], &[4, 6], &[1, 0], &[6, 4]),
            pair("[1, -1]", "[1, -1]")
        );
        assert_eq!(
            run(&[2], &[4, 12], &[0, -1], &[2, 6, 4]),
            pair("[0, -1]", "[0, -1, -1]")
        );

        // Backward: the output's first dim carries back to the input.
        let back = |mesh: &[usize], from: &[usize], to: &[usize], mapping: &[i64]| {
            let mesh = Mesh::new(mesh).unwrap();
            let out = DistAttr::from_paddle(mapping).unwrap();
            let rule = crate::builtins().build("reshape", &Attrs::new()).unwrap();
            let r = rule
                .backward(&mesh, &[from], &[Spec::new(to, &out)])
                .unwrap();
            (r.inputs[0].to_string(), r.outputs[0].to_string())
        };
        assert_eq!(
            back(&[2, 2], &[4, 6], &[6, 4], &[0, -1]),
            pair("[0, -1]", "[0, -1]")
        );
        assert_eq!(
            back(&[3], &[4, 6], &[6, 4], &[0, -1]),
            pair("[-1, -1]", "[-1, -1]")
        );
    }

    /// A size-1 dim inside a merged run is `1` and leaves the labels to the
    /// dims larger than 1 (not `a11->(ab)`).
    #[test]
    fn size_one_dims_in_a_merged_run_take_no_label() {
        let e = reshape_notation("reshape", &[2, 1, 2], &[4]).unwrap();
        assert_eq!(e.notation().source(), "a1b->(ab)");
    }
}
