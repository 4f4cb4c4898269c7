//! Property tests of parsing and inference (docs/semantics.md §3, §4, §9).
//!
//! The generators build random valid notations from a small alphabet (1–3
//! operands, rank ≤ 4, optional `...`, occasional `1` and repeated labels),
//! shapes consistent with them (with occasional size-1 broadcast dims), meshes
//! of 1–3 dims with extents 1–4, valid dims mappings (each mesh dim at most
//! once per tensor, sometimes co-sharded) and partial sets.

use proptest::prelude::*;
use spmd_core::SpmdRuleExt;

use spmd_core::notation::parse;
use spmd_core::{
    Conflicts, DimsMapping, DistAttr, Divisibility, EinsumRule, Mesh, MeshDim, MeshSet,
    MissingAxis, Partial, Policy, ReduceType, RuleResult, Sharding, Spec, SpmdError,
};

const LABELS: &[u8] = b"abcde";
const MAX_MESH: usize = 3;
/// Largest number of dims one ellipsis stands for.
const MAX_ELL: usize = 2;

// ------------------------------------------------------------- notations

#[derive(Clone, Copy, Debug, PartialEq)]
enum D {
    /// Index into `LABELS`.
    L(usize),
    One,
}

#[derive(Clone, Debug)]
struct TermSpec {
    dims: Vec<D>,
    /// `...` stands before `dims[ell]` (or after the last dim when equal).
    ell: Option<usize>,
}

impl TermSpec {
    fn text(&self) -> String {
        let mut s = String::new();
        for (i, d) in self.dims.iter().enumerate() {
            if self.ell == Some(i) {
                s.push_str("...");
            }
            match *d {
                D::L(l) => s.push(LABELS[l] as char),
                D::One => s.push('1'),
            }
        }
        if self.ell == Some(self.dims.len()) {
            s.push_str("...");
        }
        s
    }
}

#[derive(Clone, Debug)]
struct Sym {
    inputs: Vec<TermSpec>,
    outputs: Vec<TermSpec>,
}

impl Sym {
    fn text(&self) -> String {
        let side = |ts: &[TermSpec]| ts.iter().map(TermSpec::text).collect::<Vec<_>>().join(",");
        format!("{}->{}", side(&self.inputs), side(&self.outputs))
    }
    /// Labels repeated inside one input term: never sharded.
    fn diagonal(&self, l: usize) -> bool {
        self.inputs
            .iter()
            .any(|t| t.dims.iter().filter(|&&d| d == D::L(l)).count() > 1)
    }
}

fn dim() -> impl Strategy<Value = D> {
    prop_oneof![6 => (0..LABELS.len()).prop_map(D::L), 1 => Just(D::One)]
}

fn input_term() -> impl Strategy<Value = TermSpec> {
    (
        prop::collection::vec(dim(), 0..=3),
        prop::bool::weighted(0.35),
        0usize..=3,
    )
        .prop_map(|(dims, has_ell, pos)| TermSpec {
            ell: has_ell.then(|| pos.min(dims.len())),
            dims,
        })
}

/// An output over the given labels: a shuffled subset, maybe a `1`, maybe
/// `...` (only when an input has one).
fn output_term(labels: Vec<usize>, ell_ok: bool) -> impl Strategy<Value = TermSpec> {
    let n = labels.len();
    (
        Just(labels).prop_shuffle(),
        0..=n,
        prop::bool::weighted(if ell_ok { 0.6 } else { 0.0 }),
        prop::bool::weighted(0.1),
        0usize..=3,
        0usize..=3,
    )
        .prop_map(|(labels, take, has_ell, has_one, ell_pos, one_pos)| {
            let mut dims: Vec<D> = labels.into_iter().take(take.min(3)).map(D::L).collect();
            if has_one {
                dims.insert(one_pos.min(dims.len()), D::One);
            }
            TermSpec {
                ell: has_ell.then(|| ell_pos.min(dims.len())),
                dims,
            }
        })
}

fn sym() -> impl Strategy<Value = Sym> {
    prop::collection::vec(input_term(), 1..=3).prop_flat_map(|mut inputs| {
        // `->` alone is an empty operand list (an error), not one scalar.
        if inputs.len() == 1 && inputs[0].dims.is_empty() && inputs[0].ell.is_none() {
            inputs[0].dims.push(D::L(0));
        }
        let mut labels: Vec<usize> = inputs
            .iter()
            .flat_map(|t| t.dims.iter())
            .filter_map(|d| match *d {
                D::L(l) => Some(l),
                D::One => None,
            })
            .collect();
        labels.sort_unstable();
        labels.dedup();
        let ell_ok = inputs.iter().any(|t| t.ell.is_some());
        (
            Just(inputs),
            prop::collection::vec(output_term(labels, ell_ok), 1..=2),
        )
            .prop_map(|(inputs, outputs)| Sym { inputs, outputs })
    })
}

// ------------------------------------------------------- shapes and mappings

/// Raw random choices a tensor's dist attr is built from.
#[derive(Clone, Debug)]
struct RawAttr {
    /// Per mesh dim: the tensor dim it shards (mod rank), if any.
    dim_of: [Option<u8>; MAX_MESH],
    /// Per mesh dim: sort key ordering co-shards (major first).
    order: [u8; MAX_MESH],
    /// Per mesh dim: partial with this reduce type (when it shards nothing).
    partial: [Option<u8>; MAX_MESH],
}

fn raw_attr() -> impl Strategy<Value = RawAttr> {
    (
        prop::array::uniform3(prop::option::weighted(0.45, any::<u8>())),
        prop::array::uniform3(any::<u8>()),
        prop::array::uniform3(prop::option::weighted(0.2, 0u8..7)),
    )
        .prop_map(|(dim_of, order, partial)| RawAttr {
            dim_of,
            order,
            partial,
        })
}

impl RawAttr {
    /// A valid attr for a tensor of `rank` on a mesh of `mesh_rank` dims.
    fn build(&self, rank: usize, mesh_rank: usize, with_partial: bool) -> DistAttr {
        let mut dims: Vec<MeshDim> = (0..mesh_rank as MeshDim).collect();
        dims.sort_by_key(|&m| (self.order[m as usize], m));
        let mut s = vec![Sharding::REPLICATED; rank];
        let mut used = [false; MAX_MESH];
        if rank > 0 {
            for m in dims {
                if let Some(d) = self.dim_of[m as usize] {
                    s[d as usize % rank].push(m);
                    used[m as usize] = true;
                }
            }
        }
        let mut p = Partial::NONE;
        if with_partial {
            for (m, (&u, &r)) in used.iter().zip(&self.partial).enumerate().take(mesh_rank) {
                if let (false, Some(r)) = (u, r) {
                    p.set(m as MeshDim, ReduceType::ALL[r as usize]);
                }
            }
        }
        DistAttr::new(DimsMapping::from_shardings(&s)).with_partial(p)
    }
}

/// Which axis each dim of a tensor is.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Ax {
    Label(usize),
    /// The k-th dim of the broadcast block (right-aligned across tensors).
    Ell(usize),
    One,
}

#[derive(Clone, Debug)]
struct World {
    sym: Sym,
    mesh: Vec<usize>,
    label_extent: [usize; 5],
    /// How many dims each input's `...` stands for (before clamping).
    ell_len: [usize; 3],
    ell_extent: [usize; MAX_ELL],
    /// Per input, per dim: broadcast this dim (size 1).
    bcast: [[bool; 6]; 3],
    inputs: [RawAttr; 3],
    outputs: [RawAttr; 2],
    /// A random axis -> sharding table (for property (e)).
    table: RawAttr,
    policy: (u8, u8, u8, u8),
}

fn world() -> impl Strategy<Value = World> {
    (
        sym(),
        prop::collection::vec(1usize..=4, 1..=MAX_MESH),
        prop::array::uniform5(1usize..=6),
        prop::array::uniform3(0usize..=MAX_ELL),
        prop::array::uniform2(1usize..=5),
        prop::array::uniform3(prop::array::uniform6(prop::bool::weighted(0.15))),
        prop::array::uniform3(raw_attr()),
        prop::array::uniform2(raw_attr()),
        raw_attr(),
        (0u8..2, 0u8..3, 0u8..2, 0u8..7),
    )
        .prop_map(
            |(
                sym,
                mesh,
                label_extent,
                ell_len,
                ell_extent,
                bcast,
                inputs,
                outputs,
                table,
                policy,
            )| World {
                sym,
                mesh,
                label_extent,
                ell_len,
                ell_extent,
                bcast,
                inputs,
                outputs,
                table,
                policy,
            },
        )
}

impl World {
    fn mesh(&self) -> Mesh {
        Mesh::new(&self.mesh).unwrap()
    }

    /// Dims the `...` of input `i` stands for (rank stays ≤ 4).
    fn input_ell(&self, i: usize) -> usize {
        let t = &self.sym.inputs[i];
        match t.ell {
            Some(_) => self.ell_len[i].min(4 - t.dims.len()),
            None => 0,
        }
    }

    /// Width of the broadcast block.
    fn width(&self) -> usize {
        (0..self.sym.inputs.len())
            .map(|i| self.input_ell(i))
            .max()
            .unwrap_or(0)
    }

    fn axes_of(&self, t: &TermSpec, ell: usize) -> Vec<Ax> {
        let w = self.width();
        let mut v = Vec::new();
        for (i, d) in t.dims.iter().enumerate() {
            if t.ell == Some(i) {
                v.extend((w - ell..w).map(Ax::Ell));
            }
            v.push(match *d {
                D::L(l) => Ax::Label(l),
                D::One => Ax::One,
            });
        }
        if t.ell == Some(t.dims.len()) {
            v.extend((w - ell..w).map(Ax::Ell));
        }
        v
    }

    fn input_axes(&self, i: usize) -> Vec<Ax> {
        self.axes_of(&self.sym.inputs[i], self.input_ell(i))
    }

    fn output_axes(&self, o: usize) -> Vec<Ax> {
        let t = &self.sym.outputs[o];
        let ell = if t.ell.is_some() { self.width() } else { 0 };
        self.axes_of(t, ell)
    }

    fn extent(&self, a: Ax) -> usize {
        match a {
            Ax::Label(l) => self.label_extent[l],
            Ax::Ell(k) => self.ell_extent[k],
            Ax::One => 1,
        }
    }

    fn input_shape(&self, i: usize) -> Vec<usize> {
        self.input_axes(i)
            .iter()
            .enumerate()
            .map(|(d, &a)| if self.bcast[i][d] { 1 } else { self.extent(a) })
            .collect()
    }

    fn input_shapes(&self) -> Vec<Vec<usize>> {
        (0..self.sym.inputs.len())
            .map(|i| self.input_shape(i))
            .collect()
    }

    /// An output dim's size: the broadcast (largest) size of its axis over
    /// the inputs.
    fn output_shape(&self, o: usize) -> Vec<usize> {
        let shapes = self.input_shapes();
        self.output_axes(o)
            .iter()
            .map(|&a| {
                if a == Ax::One {
                    return 1;
                }
                (0..shapes.len())
                    .flat_map(|i| {
                        self.input_axes(i)
                            .into_iter()
                            .zip(shapes[i].clone())
                            .filter(move |&(b, _)| b == a)
                            .map(|(_, s)| s)
                    })
                    .max()
                    .expect("every output axis is in some input")
            })
            .collect()
    }

    fn output_shapes(&self) -> Vec<Vec<usize>> {
        (0..self.sym.outputs.len())
            .map(|o| self.output_shape(o))
            .collect()
    }

    fn input_attrs(&self, with_partial: bool) -> Vec<DistAttr> {
        let r = self.mesh.len();
        (0..self.sym.inputs.len())
            .map(|i| self.inputs[i].build(self.input_axes(i).len(), r, with_partial))
            .collect()
    }

    fn output_attrs(&self, with_partial: bool) -> Vec<DistAttr> {
        let r = self.mesh.len();
        (0..self.sym.outputs.len())
            .map(|o| self.outputs[o].build(self.output_axes(o).len(), r, with_partial))
            .collect()
    }

    fn policy(&self) -> (Policy, ReduceType) {
        let (c, d, m, r) = self.policy;
        let p = Policy::CLASSIC
            .with_conflicts([Conflicts::FirstWins, Conflicts::Strict][c as usize])
            .with_divisibility(
                [
                    Divisibility::Uneven,
                    Divisibility::Drop,
                    Divisibility::DropDerived,
                ][d as usize],
            )
            .with_missing_axis([MissingAxis::Replicate, MissingAxis::Error][m as usize]);
        (p, ReduceType::ALL[r as usize])
    }

    /// A consistent axis -> sharding table: every mesh dim on at most one
    /// axis; only axes some output has, never a diagonal or a size-1 dim
    /// (never sharded: splitting it splits nothing).
    fn table(&self) -> (Vec<Sharding>, Vec<Sharding>) {
        let mut labels = vec![Sharding::REPLICATED; LABELS.len()];
        let mut ell = vec![Sharding::REPLICATED; self.width()];
        let out_shapes = self.output_shapes();
        let mut axes: Vec<Ax> = (0..self.sym.outputs.len())
            .flat_map(|o| self.output_axes(o).into_iter().zip(out_shapes[o].clone()))
            .filter(|&(a, size)| match a {
                Ax::Label(l) => !self.sym.diagonal(l) && size > 1,
                Ax::Ell(_) => size > 1,
                Ax::One => false,
            })
            .map(|(a, _)| a)
            .collect();
        axes.dedup();
        if axes.is_empty() {
            return (labels, ell);
        }
        let mut dims: Vec<MeshDim> = (0..self.mesh.len() as MeshDim).collect();
        dims.sort_by_key(|&m| (self.table.order[m as usize], m));
        for m in dims {
            // Each mesh dim shards nothing (~1/2) or one output axis.
            let Some(pick) = self.table.dim_of[m as usize].or(self.table.partial[m as usize])
            else {
                continue;
            };
            match axes[pick as usize % axes.len()] {
                Ax::Label(l) => labels[l].push(m),
                Ax::Ell(k) => ell[k].push(m),
                Ax::One => unreachable!(),
            }
        }
        (labels, ell)
    }

    fn project(&self, axes: &[Ax], table: &(Vec<Sharding>, Vec<Sharding>)) -> DistAttr {
        let s: Vec<Sharding> = axes
            .iter()
            .map(|&a| match a {
                Ax::Label(l) => table.0[l],
                Ax::Ell(k) => table.1[k],
                Ax::One => Sharding::REPLICATED,
            })
            .collect();
        DistAttr::new(DimsMapping::from_shardings(&s))
    }
}

fn specs<'a>(shapes: &'a [Vec<usize>], attrs: &'a [DistAttr]) -> Vec<Spec<'a>> {
    shapes
        .iter()
        .zip(attrs)
        .map(|(s, a)| Spec::new(s, a))
        .collect()
}

fn shape_refs(shapes: &[Vec<usize>]) -> Vec<&[usize]> {
    shapes.iter().map(Vec::as_slice).collect()
}

/// One tensor's attr is well formed: its rank, mesh dims in range, no mesh
/// dim twice, none both partial and sharding.
fn well_formed(what: &str, a: &DistAttr, rank: usize, mesh_rank: usize) -> Result<(), String> {
    let m = &a.dims_mapping;
    if m.rank() != rank {
        return Err(format!(
            "{what} {a}: mapping has {} dims, tensor {rank}",
            m.rank()
        ));
    }
    let mut seen = [false; 256];
    for s in m.as_slice() {
        for d in s.iter() {
            if d as usize >= mesh_rank {
                return Err(format!("{what} {a}: mesh dim {d} out of range"));
            }
            if seen[d as usize] {
                return Err(format!("{what} {a}: mesh dim {d} twice"));
            }
            seen[d as usize] = true;
        }
    }
    for (d, _) in a.partial.iter() {
        if d as usize >= mesh_rank {
            return Err(format!("{what} {a}: partial mesh dim {d} out of range"));
        }
        if seen[d as usize] {
            return Err(format!("{what} {a}: mesh dim {d} partial and sharding"));
        }
    }
    Ok(())
}

fn result_well_formed_attr(a: &DistAttr, rank: usize, mesh_rank: usize) -> Result<(), String> {
    well_formed("grad", a, rank, mesh_rank)
}

fn result_well_formed(
    w: &World,
    r: &RuleResult,
    in_shapes: &[Vec<usize>],
    out_shapes: &[Vec<usize>],
) -> Result<(), String> {
    let mr = w.mesh.len();
    if r.inputs.len() != in_shapes.len() || r.outputs.len() != out_shapes.len() {
        return Err(format!("arity of {r:?}"));
    }
    for (i, a) in r.inputs.iter().enumerate() {
        well_formed(&format!("input {i}"), a, in_shapes[i].len(), mr)?;
        if a.partial.is_partial() {
            return Err(format!("input {i} requirement {a} is partial"));
        }
    }
    for (o, a) in r.outputs.iter().enumerate() {
        well_formed(&format!("output {o}"), a, out_shapes[o].len(), mr)?;
    }
    Ok(())
}

/// An attr as plain data: mesh dims per tensor dim, then the partial dims.
/// (Compared this way rather than with `==`, whose derived impls also compare
/// storage past the live entries; `inference.rs` pins that separately.)
type Plain = (Vec<Vec<MeshDim>>, Vec<(MeshDim, ReduceType)>);

fn plain(a: &DistAttr) -> Plain {
    (
        a.dims_mapping
            .as_slice()
            .iter()
            .map(|s| s.iter().collect::<Vec<_>>())
            .collect(),
        a.partial.iter().collect(),
    )
}

fn plains(a: &[DistAttr]) -> Vec<Plain> {
    a.iter().map(plain).collect()
}

fn is_replicated(a: &DistAttr) -> bool {
    a.dims_mapping
        .as_slice()
        .iter()
        .all(Sharding::is_replicated)
        && !a.partial.is_partial()
}

/// 256 cases by default (seconds in debug); `PROPTEST_CASES` overrides.
fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    ProptestConfig {
        cases,
        ..ProptestConfig::default()
    }
}

// ------------------------------------------------- (a) nothing ever panics

/// Tokens random notation text is made of (valid and invalid ones).
fn token() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "a", "b", "i", "j", "k", "A", "1", "...", "..", ".", "(", ")", ",", "->", "-", ">", " ",
        "é", "#", "2",
    ])
}

fn random_text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::collection::vec(token(), 0..14).prop_map(|t| t.concat()),
        1 => ".{0,16}",
        // Valid compound notations (rarely hit by chance) for the wild tensors.
        2 => prop::sample::select(vec![
            "bs(hd)->bshd",
            "bshd->bs(hd)",
            "(abc)d->a(dc)b",
            "b(hd),d->bhd",
            "(hd)->d",
            "(hd)->(dh)",
            "...(ij)k,1k->...ik",
            "ii(jk)->kj,i",
        ])
        .prop_map(String::from),
    ]
}

/// Arbitrary (often invalid) attrs: any mapping length, mesh dims up to 9,
/// co-shards, partial dims up to 7.
fn wild_attr() -> impl Strategy<Value = DistAttr> {
    (
        prop::collection::vec(
            prop_oneof![
                3 => Just(vec![]),
                2 => prop::collection::vec(prop_oneof![8 => 0u8..3, 1 => 0u8..10], 1),
                1 => prop::collection::vec(0u8..10, 0..3),
            ],
            0..6,
        ),
        prop::collection::vec((0u8..8, 0u8..7), 0..2),
    )
        .prop_map(|(dims, partial)| {
            let s: Vec<Sharding> = dims.iter().map(|d| Sharding::co(d).unwrap()).collect();
            let mut p = Partial::NONE;
            for (d, r) in partial {
                p.set(d, ReduceType::ALL[r as usize]);
            }
            DistAttr::new(DimsMapping::from_shardings(&s)).with_partial(p)
        })
}

fn wild_shape() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0usize..7, 0..6)
}

/// A global shape and a dist attr.
type Tensor = (Vec<usize>, DistAttr);

fn run_all(
    src: &str,
    mesh: &Mesh,
    policy: Policy,
    ins: &[(Vec<usize>, DistAttr)],
    outs: &[(Vec<usize>, DistAttr)],
) {
    let Ok(n) = parse(src) else { return };
    let r = EinsumRule::new("op", n.plan()).with_policy(policy);
    let in_specs: Vec<Spec<'_>> = ins.iter().map(|(s, a)| Spec::new(s, a)).collect();
    let _ = r.forward(mesh, &in_specs);
    let in_shapes: Vec<&[usize]> = ins.iter().map(|(s, _)| s.as_slice()).collect();
    let out_specs: Vec<Spec<'_>> = outs.iter().map(|(s, a)| Spec::new(s, a)).collect();
    let _ = r.backward(mesh, &in_shapes, &out_specs);
    let _ = r.grad(mesh, &in_specs, &out_specs);
}

/// Bends arbitrary tensors towards a notation so that calls get past the
/// arity and rank checks: as many tensors as the plan has terms, ranks that
/// fit the terms (any number of dims for an ellipsis), mappings of that rank.
/// Sizes and mesh dims stay arbitrary.
fn fit_to(src: &str, ins: &[Tensor], outs: &[Tensor]) -> Option<(Vec<Tensor>, Vec<Tensor>)> {
    let n = parse(src).ok()?;
    let p = n.plan();
    let bend = |k: usize, term: spmd_core::notation::Term, pool: &[(Vec<usize>, DistAttr)]| {
        let (shape, attr) = pool.get(k % pool.len().max(1)).cloned().unwrap_or_default();
        let extra = if term.ellipsis.is_some() {
            shape.len() % 3
        } else {
            0
        };
        let rank = term.len as usize + extra;
        let shape: Vec<usize> = (0..rank)
            .map(|d| shape.get(d).copied().unwrap_or(4))
            .collect();
        let mut s: Vec<Sharding> = attr.dims_mapping.as_slice().to_vec();
        s.resize(rank, Sharding::REPLICATED);
        let attr = DistAttr::new(DimsMapping::from_shardings(&s)).with_partial(attr.partial);
        (shape, attr)
    };
    let i = (0..p.n_inputs())
        .map(|i| bend(i, p.input(i), ins))
        .collect();
    let o = (0..p.n_outputs())
        .map(|o| bend(o, p.output(o), outs))
        .collect();
    Some((i, o))
}

proptest! {
    #![proptest_config(config())]

    /// (a) Random text: parse returns Ok or every error with a range inside
    /// the text, sorted; valid text then runs forward and backward on
    /// arbitrary tensors without panicking.
    #[test]
    fn random_text_never_panics(
        src in random_text(),
        mesh in prop::collection::vec(1usize..=4, 0..=3),
        ins in prop::collection::vec((wild_shape(), wild_attr()), 0..4),
        outs in prop::collection::vec((wild_shape(), wild_attr()), 0..3),
        policy in (0usize..2, 0usize..3),
    ) {
        match parse(&src) {
            Ok(n) => prop_assert_eq!(n.source(), src.as_str()),
            Err(e) => {
                prop_assert!(!e.errors.is_empty());
                for x in &e.errors {
                    prop_assert!(x.range.start <= x.range.end && x.range.end <= src.len(), "{:?}", x);
                    prop_assert!(src.is_char_boundary(x.range.start) && src.is_char_boundary(x.range.end));
                    let _ = x.message(&src);
                }
                let keys: Vec<_> = e.errors.iter().map(|x| (x.range.start, x.range.end)).collect();
                let mut sorted = keys.clone();
                sorted.sort();
                prop_assert_eq!(keys, sorted);
                let _ = e.to_string();
            }
        }
        let mesh = Mesh::new(&mesh).unwrap();
        let policy = Policy::CLASSIC
            .with_conflicts([Conflicts::FirstWins, Conflicts::Strict][policy.0])
            .with_divisibility([Divisibility::Uneven, Divisibility::Drop, Divisibility::DropDerived][policy.1]);
        run_all(&src, &mesh, policy, &ins, &outs);
        if let Some((ins, outs)) = fit_to(&src, &ins, &outs) {
            run_all(&src, &mesh, policy, &ins, &outs);
        }
    }

    /// (a) Random valid notations with tensors of the right ranks but random,
    /// possibly invalid mappings and shapes never panic.
    #[test]
    fn random_notations_with_wild_tensors_never_panic(
        w in world(),
        ins in prop::collection::vec(wild_attr(), 0..4),
        outs in prop::collection::vec(wild_attr(), 0..3),
        sizes in prop::collection::vec(0usize..7, 24),
        mutate in prop::collection::vec(0u8..4, 6),
    ) {
        let src = w.sym.text();
        let (policy, _) = w.policy();
        // Shapes: the consistent ones, or random sizes of the right rank, or
        // a rank off by one.
        let shape = |rank: usize, k: usize, good: Vec<usize>| -> Vec<usize> {
            match mutate[k % mutate.len()] {
                0 => good,
                1 => (0..rank).map(|d| sizes[(k * 4 + d) % sizes.len()]).collect(),
                2 => good.into_iter().skip(1).collect(),
                _ => { let mut g = good; g.push(2); g }
            }
        };
        let in_t: Vec<(Vec<usize>, DistAttr)> = (0..w.sym.inputs.len())
            .map(|i| {
                let good = w.input_shape(i);
                (shape(good.len(), i, good), ins.get(i).cloned().unwrap_or_default())
            })
            .collect();
        let out_t: Vec<(Vec<usize>, DistAttr)> = (0..w.sym.outputs.len())
            .map(|o| {
                let good = w.output_shape(o);
                (shape(good.len(), 3 + o, good), outs.get(o).cloned().unwrap_or_default())
            })
            .collect();
        run_all(&src, &w.mesh(), policy, &in_t, &out_t);
    }

    /// (b) All-replicated inputs give all-replicated, non-partial requirements
    /// and outputs; the same backward from all-replicated outputs.
    #[test]
    fn replicated_in_replicated_out(w in world()) {
        let src = w.sym.text();
        let n = parse(&src).unwrap();
        let (policy, reduce) = w.policy();
        let r = EinsumRule::new("op", n.plan()).with_policy(policy).with_reduce(reduce);
        let mesh = w.mesh();
        let in_shapes = w.input_shapes();
        let out_shapes = w.output_shapes();
        let ins: Vec<DistAttr> = in_shapes.iter().map(|s| DistAttr::replicated(s.len())).collect();
        let res = r.forward(&mesh, &specs(&in_shapes, &ins)).unwrap();
        prop_assert!(result_well_formed(&w, &res, &in_shapes, &out_shapes).is_ok());
        prop_assert!(res.inputs.iter().chain(&res.outputs).all(is_replicated), "{:?}", res);

        let outs: Vec<DistAttr> = out_shapes.iter().map(|s| DistAttr::replicated(s.len())).collect();
        match r.backward(&mesh, &shape_refs(&in_shapes), &specs(&out_shapes, &outs)) {
            Ok(res) => {
                prop_assert!(result_well_formed(&w, &res, &in_shapes, &out_shapes).is_ok());
                prop_assert!(res.inputs.iter().chain(&res.outputs).all(is_replicated), "{:?}", res);
            }
            // The only possible failure: the rule forbids axes no output has.
            Err(SpmdError::MissingAxis { .. }) => prop_assert_eq!(policy.missing_axis, MissingAxis::Error),
            Err(e) => prop_assert!(false, "{}: {}", src, e),
        }
    }

    /// (c) Every result of valid tensors is well formed, and the only errors
    /// are the merge's (valid tensors pass every check).
    #[test]
    fn results_are_well_formed(w in world()) {
        let src = w.sym.text();
        let n = parse(&src).unwrap();
        let (policy, reduce) = w.policy();
        let r = EinsumRule::new("op", n.plan()).with_policy(policy).with_reduce(reduce);
        let mesh = w.mesh();
        let in_shapes = w.input_shapes();
        let out_shapes = w.output_shapes();

        let ins = w.input_attrs(true);
        match r.forward(&mesh, &specs(&in_shapes, &ins)) {
            Ok(res) => {
                if let Err(e) = result_well_formed(&w, &res, &in_shapes, &out_shapes) {
                    prop_assert!(false, "forward {} {:?}: {}", src, ins, e);
                }
                // Partial only over mesh dims some input shards (and with the
                // rule's reduce type).
                let given = ins.iter().fold(0u8, |m, a| m | a.dims_mapping.mesh_set().0);
                for o in &res.outputs {
                    for (d, t) in o.partial.iter() {
                        prop_assert!(given & (1 << d) != 0, "{} {:?} -> {:?}", src, ins, res);
                        prop_assert_eq!(t, reduce);
                    }
                }
            }
            Err(SpmdError::AxisConflict { .. }) => {}
            Err(SpmdError::MeshDimConflict { .. }) => prop_assert_eq!(policy.conflicts, Conflicts::Strict),
            Err(e) => prop_assert!(false, "forward {}: unexpected error {}", src, e),
        }

        let outs = w.output_attrs(true);
        match r.backward(&mesh, &shape_refs(&in_shapes), &specs(&out_shapes, &outs)) {
            Ok(res) => {
                if let Err(e) = result_well_formed(&w, &res, &in_shapes, &out_shapes) {
                    prop_assert!(false, "backward {} {:?}: {}", src, outs, e);
                }
            }
            Err(SpmdError::AxisConflict { .. }) => {}
            Err(SpmdError::MeshDimConflict { .. }) => prop_assert_eq!(policy.conflicts, Conflicts::Strict),
            Err(SpmdError::MissingAxis { .. }) => prop_assert_eq!(policy.missing_axis, MissingAxis::Error),
            Err(e) => prop_assert!(false, "backward {}: unexpected error {}", src, e),
        }
    }

    /// (d) Backward on forward's outputs agrees with forward's requirements
    /// on every axis some output has; an axis no output has is sharded only
    /// over mesh dims forward's outputs are partial over (Partial Stage-II
    /// explains them), and backward's answer is a fixed point of forward.
    #[test]
    fn backward_of_forward_agrees(w in world(), drop in any::<bool>()) {
        let src = w.sym.text();
        let n = parse(&src).unwrap();
        let div = if drop { Divisibility::Drop } else { Divisibility::Uneven };
        let r = EinsumRule::new("op", n.plan()).with_policy(Policy::CLASSIC.with_divisibility(div));
        let mesh = w.mesh();
        let in_shapes = w.input_shapes();
        let out_shapes = w.output_shapes();
        let ins = w.input_attrs(true);
        let Ok(f) = r.forward(&mesh, &specs(&in_shapes, &ins)) else {
            // Only an axis sharded two ways can fail (first-wins settles the rest).
            return Ok(());
        };
        let b = r.backward(&mesh, &shape_refs(&in_shapes), &specs(&out_shapes, &f.outputs));
        prop_assert!(b.is_ok(), "{}: backward of {:?} failed: {:?}", src, f.outputs, b);
        let b = b.unwrap();
        // The mappings come back unchanged; the partial status is forward's,
        // or the part of it Stage-II could explain (an uneven contracted
        // split is not re-derived).
        let f_partial = f.outputs.iter().fold(MeshSet::EMPTY, |m, a| m.union(a.partial.dims()));
        for (bo, fo) in b.outputs.iter().zip(&f.outputs) {
            prop_assert_eq!(&bo.dims_mapping, &fo.dims_mapping, "{}", src);
            for (d, red) in bo.partial.iter() {
                prop_assert_eq!(fo.partial.reduce_type(d), Some(red), "{}: {:?} vs {:?}", src, b, f);
            }
        }
        let out_axes: Vec<Ax> = (0..w.sym.outputs.len()).flat_map(|o| w.output_axes(o)).collect();
        for (i, (fa, ba)) in f.inputs.iter().zip(&b.inputs).enumerate() {
            for (d, ax) in w.input_axes(i).into_iter().enumerate() {
                let (fs, bs) = (fa.dims_mapping[d], ba.dims_mapping[d]);
                if out_axes.contains(&ax) {
                    prop_assert_eq!(fs, bs, "{} input {} dim {}: forward {:?} backward {:?}", src, i, d, f, b);
                } else {
                    prop_assert!(bs.mesh_set().minus(f_partial).is_empty(), "{} input {} dim {} ({:?}) not in any output, sharded beyond the partial dims: {}", src, i, d, ax, ba);
                }
            }
        }
        let again = r.forward(&mesh, &specs(&in_shapes, &b.inputs));
        prop_assert!(again.is_ok(), "{}: forward of {:?} failed: {:?}", src, b.inputs, again);
        prop_assert_eq!(plains(&again.unwrap().outputs), plains(&b.outputs), "{}: not a fixed point", src);
    }

    /// (e) Forward on backward's requirements reproduces the given outputs
    /// when they do not conflict (one axis -> sharding table projected onto
    /// every output). Every axis no output has came back replicated, so an
    /// output is partial exactly over the mesh dims of the axes that other
    /// outputs have and it lacks.
    #[test]
    fn forward_of_backward_reproduces_outputs(w in world()) {
        let src = w.sym.text();
        let n = parse(&src).unwrap();
        let r = EinsumRule::new("op", n.plan());
        let mesh = w.mesh();
        let in_shapes = w.input_shapes();
        let out_shapes = w.output_shapes();
        let table = w.table();
        let outs: Vec<DistAttr> = (0..w.sym.outputs.len())
            .map(|o| w.project(&w.output_axes(o), &table))
            .collect();
        let b = r.backward(&mesh, &shape_refs(&in_shapes), &specs(&out_shapes, &outs));
        prop_assert!(b.is_ok(), "{}: backward of {:?} failed: {:?}", src, outs, b);
        let b = b.unwrap();
        let maps = |a: &[DistAttr]| plains(a).into_iter().map(|p| p.0).collect::<Vec<_>>();
        prop_assert_eq!(maps(&b.outputs), maps(&outs), "{}: backward changed consistent outputs", src);
        let f = r.forward(&mesh, &specs(&in_shapes, &b.inputs));
        prop_assert!(f.is_ok(), "{}: forward of {:?} failed: {:?}", src, b.inputs, f);
        let f = f.unwrap();
        // Backward's outputs, partial status included, are what forward
        // computes from backward's requirements (an output lacking an axis
        // another output carries is partial over its mesh dims).
        prop_assert_eq!(plains(&b.outputs), plains(&f.outputs), "{}: backward vs forward of its requirements", src);
        prop_assert_eq!(plains(&f.inputs), plains(&b.inputs), "{}: requirements of requirements", src);
        let all_out: Vec<Ax> = (0..w.sym.outputs.len()).flat_map(|o| w.output_axes(o)).collect();
        for (o, (got, want)) in f.outputs.iter().zip(&outs).enumerate() {
            let (got_map, got_partial) = plain(got);
            prop_assert_eq!(got_map, plain(want).0, "{} output {}: {:?} -> {:?}", src, o, b.inputs, f.outputs);
            let mine = w.output_axes(o);
            let mut lacks: Vec<MeshDim> = Vec::new();
            for a in &all_out {
                if *a != Ax::One && !mine.contains(a) {
                    lacks.extend(w.project(&[*a], &table).dims_mapping[0].iter());
                }
            }
            lacks.sort_unstable();
            lacks.dedup();
            let want_partial: Vec<(MeshDim, ReduceType)> =
                lacks.into_iter().map(|d| (d, ReduceType::Sum)).collect();
            prop_assert_eq!(got_partial, want_partial, "{} output {}: {}", src, o, got);
        }
    }

    /// (f) Issue 5: the derived grad rule agrees with forward. Feed the grad
    /// op forward's own answer (the inputs as forward requires them, each
    /// output grad laid out like its output, not partial): it requires
    /// exactly that back, and each input grad is laid out like its input.
    #[test]
    fn grad_agrees_with_forward(w in world()) {
        let src = w.sym.text();
        let n = parse(&src).unwrap();
        let r = EinsumRule::new("op", n.plan());
        let mesh = w.mesh();
        let in_shapes = w.input_shapes();
        let out_shapes = w.output_shapes();
        let ins = w.input_attrs(false);
        let Ok(f) = r.forward(&mesh, &specs(&in_shapes, &ins)) else {
            return Ok(());
        };
        let dy: Vec<DistAttr> = f.outputs.iter().map(|o| DistAttr::new(o.dims_mapping.clone())).collect();
        let g = r.grad(&mesh, &specs(&in_shapes, &f.inputs), &specs(&out_shapes, &dy));
        prop_assert!(g.is_ok(), "{}: grad of consistent tensors failed: {:?}", src, g);
        let g = g.unwrap();
        let expected: Vec<Plain> = plains(&f.inputs).into_iter().chain(plains(&dy)).collect();
        prop_assert_eq!(plains(&g.inputs), expected, "{}: requirements differ from forward's", src);
        for (j, grad) in g.outputs.iter().enumerate() {
            prop_assert_eq!(&grad.dims_mapping, &f.inputs[j].dims_mapping, "{} grad {}", src, j);
            prop_assert!(result_well_formed_attr(grad, in_shapes[j].len(), mesh.rank()).is_ok());
        }
    }
}
