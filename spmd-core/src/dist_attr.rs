//! The data model of docs/semantics.md §2: how one tensor is laid out on the mesh.

use core::fmt;

use smallvec::SmallVec;

use crate::mesh::{MAX_MESH_RANK, MeshDim, MeshSet};

/// How one tensor dim is split: the mesh dims that split it, major to minor.
/// Empty means replicated; two or more is co-sharding. Spare storage is
/// always zero, so equality compares two words rather than two slices.
#[derive(Clone, Copy, Default)]
pub struct Sharding {
    len: u8,
    dims: [MeshDim; MAX_MESH_RANK],
}

impl Sharding {
    pub const REPLICATED: Sharding = Sharding {
        len: 0,
        dims: [0; MAX_MESH_RANK],
    };

    /// Split over a single mesh dim.
    pub const fn on(d: MeshDim) -> Sharding {
        let mut s = Sharding::REPLICATED;
        s.dims[0] = d;
        s.len = 1;
        s
    }

    /// Split over several mesh dims, major first. `None` when there are more
    /// than [`MAX_MESH_RANK`] of them.
    pub fn co(dims: &[MeshDim]) -> Option<Sharding> {
        if dims.len() > MAX_MESH_RANK {
            return None;
        }
        let mut s = Sharding::REPLICATED;
        s.dims[..dims.len()].copy_from_slice(dims);
        s.len = dims.len() as u8;
        Some(s)
    }

    #[inline]
    pub fn as_slice(&self) -> &[MeshDim] {
        &self.dims[..self.len as usize]
    }
    #[inline]
    pub const fn is_replicated(&self) -> bool {
        self.len == 0
    }
    #[inline]
    pub const fn len(&self) -> usize {
        self.len as usize
    }
    #[inline]
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The mesh dims as a set (order lost).
    #[inline]
    pub fn mesh_set(&self) -> MeshSet {
        let mut m = MeshSet::EMPTY;
        for &d in self.as_slice() {
            m = m.with(d);
        }
        m
    }
    /// Whether `prefix` lists the same leading mesh dims.
    #[inline]
    pub fn starts_with(&self, prefix: &Sharding) -> bool {
        // Element by element: at most 8 bytes, cheaper than a memcmp call.
        prefix.len <= self.len && (0..prefix.len as usize).all(|i| self.dims[i] == prefix.dims[i])
    }
    /// This sharding without mesh dim `d` (order of the rest kept).
    pub fn without(&self, d: MeshDim) -> Sharding {
        let mut s = Sharding::REPLICATED;
        for &x in self.as_slice() {
            if x != d {
                s.dims[s.len as usize] = x;
                s.len += 1;
            }
        }
        s
    }
    /// This sharding with its last (most minor) mesh dim removed.
    pub fn without_last(&self) -> Sharding {
        let mut s = *self;
        if s.len > 0 {
            s.len -= 1;
            s.dims[s.len as usize] = 0;
        }
        s
    }
    /// Appends a mesh dim (ignored when full).
    pub fn push(&mut self, d: MeshDim) {
        if (self.len as usize) < MAX_MESH_RANK {
            self.dims[self.len as usize] = d;
            self.len += 1;
        }
    }
}

impl PartialEq for Sharding {
    #[inline]
    fn eq(&self, other: &Sharding) -> bool {
        // Spare storage is zero (every constructor keeps it so).
        self.len == other.len && self.dims == other.dims
    }
}

impl Eq for Sharding {}

impl core::hash::Hash for Sharding {
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state)
    }
}

impl fmt::Debug for Sharding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Paddle's notation: `-1` replicated, `d` one mesh dim, `[d0,d1]` co-sharded.
impl fmt::Display for Sharding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.as_slice() {
            [] => f.write_str("-1"),
            [d] => write!(f, "{d}"),
            ds => {
                f.write_str("[")?;
                for (i, d) in ds.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{d}")?;
                }
                f.write_str("]")
            }
        }
    }
}

/// One [`Sharding`] per tensor dim. Inline up to rank 8.
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct DimsMapping(SmallVec<[Sharding; 8]>);

impl DimsMapping {
    /// The mapping of a 0-d tensor (no dims).
    pub const EMPTY: DimsMapping = DimsMapping(SmallVec::new_const());

    /// A mapping of rank `rank` with every dim replicated.
    pub fn replicated(rank: usize) -> DimsMapping {
        DimsMapping(smallvec::smallvec![Sharding::REPLICATED; rank])
    }

    /// From one optional mesh dim per tensor dim (the common, non-co-sharded case).
    pub fn from_dims<I: IntoIterator<Item = Option<MeshDim>>>(dims: I) -> DimsMapping {
        DimsMapping(
            dims.into_iter()
                .map(|d| d.map_or(Sharding::REPLICATED, Sharding::on))
                .collect(),
        )
    }

    /// From one list of mesh dims per tensor dim (major first; empty =
    /// replicated): `[[0, 1], []]` splits dim 0 over mesh dims 0 then 1.
    /// `None` when a list is longer than [`MAX_MESH_RANK`].
    pub fn from_nested(dims: &[&[MeshDim]]) -> Option<DimsMapping> {
        dims.iter()
            .map(|d| Sharding::co(d))
            .collect::<Option<SmallVec<_>>>()
            .map(DimsMapping)
    }

    pub fn from_shardings(s: &[Sharding]) -> DimsMapping {
        DimsMapping(SmallVec::from_slice(s))
    }

    /// Paddle's integer form at a parse boundary: `-1` is replicated, `d >= 0`
    /// is mesh dim `d`. `None` for a value below -1 or above 255.
    pub fn from_paddle(dims: &[i64]) -> Option<DimsMapping> {
        dims.iter()
            .map(|&d| match d {
                -1 => Some(Sharding::REPLICATED),
                0..=255 => Some(Sharding::on(d as MeshDim)),
                _ => None,
            })
            .collect::<Option<SmallVec<_>>>()
            .map(DimsMapping)
    }

    pub fn rank(&self) -> usize {
        self.0.len()
    }
    pub fn as_slice(&self) -> &[Sharding] {
        &self.0
    }
    /// The sharding of `dim`, to change in place (a hook adjusting a rule's
    /// answer); keeping each mesh dim at most once is the caller's job.
    pub fn get_mut(&mut self, dim: usize) -> Option<&mut Sharding> {
        self.0.get_mut(dim)
    }
    pub fn get(&self, dim: usize) -> Option<&Sharding> {
        self.0.get(dim)
    }
    pub fn push(&mut self, s: Sharding) {
        self.0.push(s)
    }
    pub fn clear(&mut self) {
        self.0.clear()
    }
    /// Every mesh dim used by some dim of this mapping.
    pub fn mesh_set(&self) -> MeshSet {
        self.0
            .iter()
            .fold(MeshSet::EMPTY, |m, s| m.union(s.mesh_set()))
    }
    /// Paddle's integer form, when no dim is co-sharded.
    pub fn to_paddle(&self) -> Option<SmallVec<[i64; 8]>> {
        self.0
            .iter()
            .map(|s| match s.as_slice() {
                [] => Some(-1),
                [d] => Some(*d as i64),
                _ => None,
            })
            .collect()
    }
}

impl core::ops::Index<usize> for DimsMapping {
    type Output = Sharding;
    fn index(&self, i: usize) -> &Sharding {
        &self.0[i]
    }
}

impl fmt::Debug for DimsMapping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for DimsMapping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, s) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{s}")?;
        }
        f.write_str("]")
    }
}

/// The reduction a partial value is waiting for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum ReduceType {
    #[default]
    Sum,
    Avg,
    Max,
    Min,
    Prod,
    Any,
    All,
}

impl ReduceType {
    pub const ALL: [ReduceType; 7] = [
        ReduceType::Sum,
        ReduceType::Avg,
        ReduceType::Max,
        ReduceType::Min,
        ReduceType::Prod,
        ReduceType::Any,
        ReduceType::All,
    ];

    /// Paddle's upper-case name (`SUM`, `AVG`, ...).
    pub const fn paddle_name(self) -> &'static str {
        match self {
            ReduceType::Sum => "SUM",
            ReduceType::Avg => "AVG",
            ReduceType::Max => "MAX",
            ReduceType::Min => "MIN",
            ReduceType::Prod => "PROD",
            ReduceType::Any => "ANY",
            ReduceType::All => "ALL",
        }
    }

    /// From Paddle's name, in any case (`"sum"`, `"SUM"`, `"kRedSum"`, and
    /// `"PRODUCT"`, which Paddle's Python side prints for `Prod`).
    pub fn from_name(s: &str) -> Option<ReduceType> {
        let s = s.strip_prefix("kRed").unwrap_or(s);
        if s.eq_ignore_ascii_case("product") {
            return Some(ReduceType::Prod);
        }
        ReduceType::ALL
            .into_iter()
            .find(|r| r.paddle_name().eq_ignore_ascii_case(s))
    }
}

impl fmt::Display for ReduceType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.paddle_name())
    }
}

/// The mesh dims over which a tensor holds partial values, each with its
/// reduce type. Iteration is in increasing mesh-dim order. Equality and
/// hashing look at the partial mesh dims and their reduce types only.
#[derive(Clone, Copy, Default)]
pub struct Partial {
    dims: MeshSet,
    reduce: [ReduceType; MAX_MESH_RANK],
}

impl Partial {
    pub const NONE: Partial = Partial {
        dims: MeshSet::EMPTY,
        reduce: [ReduceType::Sum; MAX_MESH_RANK],
    };

    /// Partial over `dims`, all with reduce type `r`.
    pub fn over(dims: MeshSet, r: ReduceType) -> Partial {
        let mut p = Partial::NONE;
        for d in dims.iter() {
            p.set(d, r);
        }
        p
    }

    pub fn set(&mut self, d: MeshDim, r: ReduceType) {
        if (d as usize) < MAX_MESH_RANK {
            self.dims = self.dims.with(d);
            self.reduce[d as usize] = r;
        }
    }
    pub fn remove(&mut self, dims: MeshSet) {
        self.dims = self.dims.minus(dims);
    }
    pub fn dims(&self) -> MeshSet {
        self.dims
    }
    pub fn is_partial(&self) -> bool {
        !self.dims.is_empty()
    }
    pub fn reduce_type(&self, d: MeshDim) -> Option<ReduceType> {
        self.dims.contains(d).then(|| self.reduce[d as usize])
    }
    pub fn iter(&self) -> impl Iterator<Item = (MeshDim, ReduceType)> + '_ {
        self.dims.iter().map(|d| (d, self.reduce[d as usize]))
    }
}

impl PartialEq for Partial {
    fn eq(&self, other: &Partial) -> bool {
        self.dims == other.dims && self.iter().eq(other.iter())
    }
}

impl Eq for Partial {}

impl core::hash::Hash for Partial {
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        for entry in self.iter() {
            entry.hash(state);
        }
    }
}

impl FromIterator<(MeshDim, ReduceType)> for Partial {
    fn from_iter<I: IntoIterator<Item = (MeshDim, ReduceType)>>(iter: I) -> Partial {
        let mut p = Partial::NONE;
        for (d, r) in iter {
            p.set(d, r);
        }
        p
    }
}

impl fmt::Debug for Partial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Partial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (i, (d, r)) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}: {r}")?;
        }
        f.write_str("}")
    }
}

/// A tensor's layout: dims mapping plus partial status.
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct DistAttr {
    pub dims_mapping: DimsMapping,
    pub partial: Partial,
}

impl DistAttr {
    pub fn new(dims_mapping: DimsMapping) -> DistAttr {
        DistAttr {
            dims_mapping,
            partial: Partial::NONE,
        }
    }
    pub fn replicated(rank: usize) -> DistAttr {
        DistAttr::new(DimsMapping::replicated(rank))
    }
    pub fn with_partial(mut self, partial: Partial) -> DistAttr {
        self.partial = partial;
        self
    }
    /// From Paddle's integer mapping (see [`DimsMapping::from_paddle`]).
    pub fn from_paddle(dims: &[i64]) -> Option<DistAttr> {
        DimsMapping::from_paddle(dims).map(DistAttr::new)
    }
}

impl fmt::Debug for DistAttr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for DistAttr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.dims_mapping)?;
        if self.partial.is_partial() {
            write!(f, " partial{}", self.partial)?;
        }
        Ok(())
    }
}

/// What a rule receives per tensor: the global shape and the dist attr. A
/// borrowed view, so building the argument list of a call copies nothing;
/// [`OwnedSpec`] holds both for a caller that makes them on the spot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spec<'a> {
    pub shape: &'a [usize],
    pub attr: &'a DistAttr,
}

impl<'a> Spec<'a> {
    pub fn new(shape: &'a [usize], attr: &'a DistAttr) -> Spec<'a> {
        Spec { shape, attr }
    }
}

/// A tensor's shape and dist attr, owned: what to build when the attr is
/// made in the same expression (a [`Spec`] would borrow a temporary).
///
/// ```
/// use spmd_core::{DistAttr, Mesh, OwnedSpec, Spec, SpmdRule, spmd_rule};
///
/// #[spmd_rule(einsum = "mk,kn->mn")]
/// struct Matmul {}
///
/// let x = OwnedSpec::new(&[8, 16], DistAttr::from_paddle(&[0, -1]).unwrap());
/// let w = OwnedSpec::new(&[16, 4], DistAttr::replicated(2));
/// let r = Matmul {}.forward(&Mesh::new(&[2])?, &[x.spec(), w.spec()])?;
/// assert_eq!(r.outputs[0].to_string(), "[0, -1]");
/// # Ok::<(), spmd_core::SpmdError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct OwnedSpec {
    pub shape: SmallVec<[usize; 8]>,
    pub attr: DistAttr,
}

impl OwnedSpec {
    pub fn new(shape: &[usize], attr: DistAttr) -> OwnedSpec {
        OwnedSpec {
            shape: SmallVec::from_slice(shape),
            attr,
        }
    }

    /// The borrowed view a rule takes.
    pub fn spec(&self) -> Spec<'_> {
        Spec::new(&self.shape, &self.attr)
    }
}

#[cfg(test)]
mod tests {
    use super::Sharding;

    #[test]
    fn equality_ignores_how_a_sharding_was_made() {
        // Equality compares whole words, so every way to a sharding must
        // leave the spare storage alike.
        let two = Sharding::co(&[1, 2]).unwrap();
        assert_eq!(two.without_last(), Sharding::on(1));
        assert_eq!(two.without(2), Sharding::on(1));
        assert_eq!(two.without_last().without_last(), Sharding::REPLICATED);
        let mut pushed = Sharding::on(1);
        pushed.push(2);
        assert_eq!(pushed, two);
        assert_ne!(Sharding::on(1), Sharding::on(2));
        assert_ne!(two, Sharding::co(&[2, 1]).unwrap());
    }
}
