//! The data model of docs/semantics.md §2: how one tensor is laid out on the mesh.

use core::fmt;

use smallvec::SmallVec;

use crate::mesh::{MAX_MESH_RANK, MeshDim, MeshSet};

/// How one tensor dim is split: the mesh dims that split it, major to minor.
/// Empty means replicated; two or more is co-sharding.
///
/// Packed in one `u32`: four bits per mesh dim (the dim plus one, `0` ending
/// the list), major first from the low bits, so a dims mapping of rank 8 is
/// 32 bytes and comparing two shardings compares two words. A mesh dim is
/// below [`MAX_MESH_RANK`] on any mesh; the parsers reject larger ones, and
/// the constructors store a larger one as 14, which no mesh has either, so
/// inference still reports it out of range.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sharding(u32);

/// The nibble of mesh dim `d`.
const fn nibble(d: MeshDim) -> u32 {
    (if d > 14 { 14 } else { d }) as u32 + 1
}

/// The low `n` nibbles.
const fn low(n: usize) -> u32 {
    if n >= 8 {
        u32::MAX
    } else {
        (1u32 << (4 * n)) - 1
    }
}

impl Sharding {
    pub const REPLICATED: Sharding = Sharding(0);

    /// Split over a single mesh dim.
    pub const fn on(d: MeshDim) -> Sharding {
        Sharding(nibble(d))
    }

    /// Split over several mesh dims, major first. `None` when there are more
    /// than [`MAX_MESH_RANK`] of them.
    pub fn co(dims: &[MeshDim]) -> Option<Sharding> {
        if dims.len() > MAX_MESH_RANK {
            return None;
        }
        let mut s = Sharding::REPLICATED;
        for &d in dims {
            s.push(d);
        }
        Some(s)
    }

    /// The mesh dims, major first.
    #[inline]
    #[doc(alias = "as_slice")]
    pub fn iter(&self) -> MeshDims {
        MeshDims(self.0)
    }
    /// The `i`-th mesh dim, major first.
    #[inline]
    pub const fn get(&self, i: usize) -> Option<MeshDim> {
        if i >= 8 {
            return None;
        }
        match (self.0 >> (4 * i)) & 15 {
            0 => None,
            n => Some((n - 1) as MeshDim),
        }
    }
    /// The major mesh dim.
    #[inline]
    pub const fn first(&self) -> Option<MeshDim> {
        self.get(0)
    }
    /// The most minor mesh dim.
    #[inline]
    pub const fn last(&self) -> Option<MeshDim> {
        match self.len() {
            0 => None,
            n => self.get(n - 1),
        }
    }
    #[inline]
    pub const fn is_replicated(&self) -> bool {
        self.0 == 0
    }
    #[inline]
    pub const fn len(&self) -> usize {
        (32 - self.0.leading_zeros() as usize).div_ceil(4)
    }
    #[inline]
    pub const fn is_empty(&self) -> bool {
        self.0 == 0
    }
    /// Whether mesh dim `d` splits this dim.
    #[inline]
    pub fn contains(&self, d: MeshDim) -> bool {
        self.iter().any(|x| x == d)
    }
    /// The mesh dims as a set (order lost).
    #[inline]
    pub fn mesh_set(&self) -> MeshSet {
        match self.single_bits() {
            Some(bits) => MeshSet(bits),
            None => self.iter().fold(MeshSet::EMPTY, MeshSet::with),
        }
    }
    /// The mesh dims as a bit set when there is at most one of them (the
    /// common case), in one shift; `None` for a co-sharding. A mesh dim past
    /// [`MAX_MESH_RANK`] has no bit, as in [`MeshSet::single`].
    #[inline]
    pub(crate) const fn single_bits(&self) -> Option<u8> {
        if self.0 < 16 {
            Some(((1u32 << self.0) >> 1) as u8)
        } else {
            None
        }
    }
    /// Whether `prefix` lists the same leading mesh dims.
    #[inline]
    pub const fn starts_with(&self, prefix: &Sharding) -> bool {
        let n = prefix.len();
        n <= self.len() && self.0 & low(n) == prefix.0
    }
    /// Its first `n` mesh dims, when it has that many.
    #[inline]
    pub const fn prefix(&self, n: usize) -> Option<Sharding> {
        if n <= self.len() {
            Some(Sharding(self.0 & low(n)))
        } else {
            None
        }
    }
    /// This sharding without mesh dim `d` (order of the rest kept).
    pub fn without(&self, d: MeshDim) -> Sharding {
        let mut s = Sharding::REPLICATED;
        for x in self.iter().filter(|&x| x != d) {
            s.push(x);
        }
        s
    }
    /// This sharding with its last (most minor) mesh dim removed.
    #[inline]
    pub const fn without_last(&self) -> Sharding {
        match self.len() {
            0 => *self,
            n => Sharding(self.0 & low(n - 1)),
        }
    }
    /// Appends a mesh dim (ignored when full).
    #[inline]
    pub fn push(&mut self, d: MeshDim) {
        let n = self.len();
        if n < MAX_MESH_RANK {
            self.0 |= nibble(d) << (4 * n);
        }
    }
}

/// The mesh dims of a [`Sharding`], major first.
#[derive(Clone, Copy, Debug)]
pub struct MeshDims(u32);

impl Iterator for MeshDims {
    type Item = MeshDim;
    #[inline]
    fn next(&mut self) -> Option<MeshDim> {
        match self.0 & 15 {
            0 => None,
            n => {
                self.0 >>= 4;
                Some((n - 1) as MeshDim)
            }
        }
    }
    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = Sharding(self.0).len();
        (n, Some(n))
    }
}

impl ExactSizeIterator for MeshDims {}

impl fmt::Debug for Sharding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Paddle's notation: `-1` replicated, `d` one mesh dim, `[d0,d1]` co-sharded.
impl fmt::Display for Sharding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.len() {
            0 => f.write_str("-1"),
            1 => write!(f, "{}", self.0 - 1),
            _ => {
                f.write_str("[")?;
                for (i, d) in self.iter().enumerate() {
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
#[derive(PartialEq, Eq, Hash, Default)]
pub struct DimsMapping(SmallVec<[Sharding; 8]>);

/// A copy of the words (`Sharding` is `Copy`), not an element-wise clone:
/// graphs clone mappings per op.
impl Clone for DimsMapping {
    #[inline]
    fn clone(&self) -> DimsMapping {
        DimsMapping(SmallVec::from_slice(&self.0))
    }
    #[inline]
    fn clone_from(&mut self, source: &DimsMapping) {
        self.0.clear();
        self.0.extend_from_slice(&source.0);
    }
}

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
    /// is mesh dim `d`. `None` for a value below -1 or above 7 (a mesh has at
    /// most 8 dims).
    pub fn from_paddle(dims: &[i64]) -> Option<DimsMapping> {
        dims.iter()
            .map(|&d| match d {
                -1 => Some(Sharding::REPLICATED),
                // A mesh has at most MAX_MESH_RANK dims.
                0..=7 => Some(Sharding::on(d as MeshDim)),
                _ => None,
            })
            .collect::<Option<SmallVec<_>>>()
            .map(DimsMapping)
    }

    #[inline]
    pub fn rank(&self) -> usize {
        self.0.len()
    }
    #[inline]
    pub fn as_slice(&self) -> &[Sharding] {
        &self.0
    }
    /// The sharding of `dim`, to change in place (a hook adjusting a rule's
    /// answer); keeping each mesh dim at most once is the caller's job.
    pub fn get_mut(&mut self, dim: usize) -> Option<&mut Sharding> {
        self.0.get_mut(dim)
    }
    #[inline]
    pub fn get(&self, dim: usize) -> Option<&Sharding> {
        self.0.get(dim)
    }
    pub fn push(&mut self, s: Sharding) {
        self.0.push(s)
    }
    /// The first `rank` (at most 8) shardings of `dims`, inline in one
    /// move: answers' mappings are written this way, without
    /// a capacity check per dim.
    #[inline(always)]
    pub(crate) fn from_array(dims: [Sharding; 8], rank: usize) -> DimsMapping {
        DimsMapping(SmallVec::from_buf_and_len(dims, rank))
    }
    /// This mapping's `rank` dims, to overwrite: in place when
    /// it has that rank already (a result reused for one op's calls), so
    /// the engine writes an answer's dims without a move or a drop.
    #[inline(always)]
    pub(crate) fn overwrite(&mut self, rank: usize) -> &mut [Sharding] {
        if self.0.len() != rank {
            if rank <= 8 {
                *self = DimsMapping::from_array([Sharding::REPLICATED; 8], rank);
            } else {
                self.0.clear();
                self.0.resize(rank, Sharding::REPLICATED);
            }
        }
        &mut self.0
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
            .map(|s| match (s.len(), s.first()) {
                (0, _) => Some(-1),
                (1, Some(d)) => Some(i64::from(d)),
                _ => None,
            })
            .collect()
    }
}

impl core::ops::Index<usize> for DimsMapping {
    type Output = Sharding;
    #[inline]
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
/// reduce type. Iteration is in increasing mesh-dim order.
///
/// Packed in one `u32`: the low byte is the set of partial mesh dims, then
/// three bits per mesh dim for its reduce type (zero where a dim is not
/// partial), so equality and hashing compare one word.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Partial(u32);

impl Partial {
    pub const NONE: Partial = Partial(0);

    /// Partial over `dims`, all with reduce type `r`.
    pub fn over(dims: MeshSet, r: ReduceType) -> Partial {
        let mut p = Partial::NONE;
        for d in dims.iter() {
            p.set(d, r);
        }
        p
    }

    /// Marks mesh dim `d` partial with reduce type `r` (a dim beyond any
    /// mesh, `d >= MAX_MESH_RANK`, is ignored).
    #[inline]
    pub fn set(&mut self, d: MeshDim, r: ReduceType) {
        if (d as usize) < MAX_MESH_RANK {
            let shift = 8 + 3 * u32::from(d);
            self.0 = (self.0 & !(7 << shift)) | (r as u32) << shift | 1 << d;
        }
    }
    #[inline]
    pub fn remove(&mut self, dims: MeshSet) {
        for d in dims.iter() {
            if (d as usize) < MAX_MESH_RANK {
                self.0 &= !(1 << d | 7 << (8 + 3 * u32::from(d)));
            }
        }
    }
    #[inline]
    pub fn dims(&self) -> MeshSet {
        MeshSet(self.0 as u8)
    }
    #[inline]
    pub fn is_partial(&self) -> bool {
        self.0 & 0xff != 0
    }
    #[inline]
    pub fn reduce_type(&self, d: MeshDim) -> Option<ReduceType> {
        self.dims()
            .contains(d)
            .then(|| ReduceType::ALL[((self.0 >> (8 + 3 * u32::from(d))) & 7) as usize])
    }
    pub fn iter(&self) -> impl Iterator<Item = (MeshDim, ReduceType)> + '_ {
        self.dims()
            .iter()
            .filter_map(|d| Some((d, self.reduce_type(d)?)))
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
/// use spmd_core::{DistAttr, Mesh, OwnedSpec, Spec, SpmdRuleExt, spmd_rule};
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
