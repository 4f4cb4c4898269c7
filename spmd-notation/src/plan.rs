//! The compiled, borrowed form of a notation.
//!
//! Everything is flat slices of small `Copy` values so that the macro can emit a
//! plan as a `const` and the run-time parser can lend one out of its own vectors
//! (no self-references, no allocation when inference reads it).

use core::fmt;

/// Index of a labelled axis in [`Plan::labels`].
pub type AxisId = u8;

/// A set of axis ids (or, in `spmd-core`, of mesh dims) as a 64-bit mask.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AxisSet(pub u64);

impl AxisSet {
    pub const EMPTY: AxisSet = AxisSet(0);

    #[inline]
    pub const fn with(self, id: AxisId) -> AxisSet {
        AxisSet(self.0 | (1u64 << id))
    }
    #[inline]
    pub const fn contains(self, id: AxisId) -> bool {
        id < 64 && self.0 & (1u64 << id) != 0
    }
    #[inline]
    pub const fn union(self, other: AxisSet) -> AxisSet {
        AxisSet(self.0 | other.0)
    }
    #[inline]
    pub const fn intersect(self, other: AxisSet) -> AxisSet {
        AxisSet(self.0 & other.0)
    }
    #[inline]
    pub const fn minus(self, other: AxisSet) -> AxisSet {
        AxisSet(self.0 & !other.0)
    }
    #[inline]
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
    #[inline]
    pub const fn len(self) -> u32 {
        self.0.count_ones()
    }
    /// Members in increasing order.
    #[inline]
    pub fn iter(self) -> impl Iterator<Item = AxisId> {
        let mut bits = self.0;
        core::iter::from_fn(move || {
            if bits == 0 {
                return None;
            }
            let id = bits.trailing_zeros() as AxisId;
            bits &= bits - 1;
            Some(id)
        })
    }
}

impl fmt::Debug for AxisSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

/// One dim of a term.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dim {
    /// A labelled axis.
    Axis(AxisId),
    /// `1`: a dim that is never sharded.
    One,
    /// `(hd)`: a dim made of several axes, major first; the axes are
    /// `compound_axes[start .. start + len]` of the plan.
    Compound { start: u16, len: u8 },
}

/// One operand or output: `dims[start .. start + len]` of the plan, with the
/// ellipsis (if any) standing just before the dim at index `ellipsis` of the term.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Term {
    pub start: u16,
    pub len: u16,
    pub ellipsis: Option<u16>,
}

/// A compiled notation: inputs' terms then outputs' terms over one axis table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan<'a> {
    /// The notation as written (for messages and `explain`; never parsed again).
    pub source: &'a str,
    /// Axis id -> its label, in order of first appearance.
    pub labels: &'a [u8],
    /// Inputs' terms, then outputs' terms.
    pub terms: &'a [Term],
    pub n_inputs: u16,
    pub dims: &'a [Dim],
    pub compound_axes: &'a [AxisId],
    /// Axes of any input.
    pub input_axes: AxisSet,
    /// Axes of any output.
    pub output_axes: AxisSet,
    /// Axes repeated inside one input term (diagonals): never sharded.
    pub diagonal: AxisSet,
    /// Axes that are a non-major factor of some compound dim: never sharded,
    /// because only the major factor of a reshape carries a sharding across it.
    pub compound_minor: AxisSet,
    /// Axes that are the major factor of some compound dim: their sharding must
    /// divide their extent, or a reshape could not carry it.
    pub compound_major: AxisSet,
    /// Inputs (bit `i` = input `i`) that are *added* to the result (`+n`: a
    /// bias, a residual) rather than multiplied into it. An addend's labels
    /// are all in the one output, so it never contracts an axis.
    pub addends: u64,
}

impl<'a> Plan<'a> {
    /// No terms: the placeholder of a rule whose plan is bound per call.
    pub const EMPTY: Plan<'static> = Plan {
        source: "",
        labels: &[],
        terms: &[],
        n_inputs: 0,
        dims: &[],
        compound_axes: &[],
        input_axes: AxisSet::EMPTY,
        output_axes: AxisSet::EMPTY,
        diagonal: AxisSet::EMPTY,
        compound_minor: AxisSet::EMPTY,
        compound_major: AxisSet::EMPTY,
        addends: 0,
    };

    #[inline]
    pub const fn n_inputs(&self) -> usize {
        self.n_inputs as usize
    }
    #[inline]
    pub const fn n_outputs(&self) -> usize {
        self.terms.len() - self.n_inputs as usize
    }
    #[inline]
    pub const fn n_axes(&self) -> usize {
        self.labels.len()
    }
    #[inline]
    pub fn input(&self, i: usize) -> Term {
        self.terms[i]
    }
    #[inline]
    pub fn output(&self, i: usize) -> Term {
        self.terms[self.n_inputs as usize + i]
    }
    /// The dims of a term (without the ellipsis).
    #[inline]
    pub fn dims_of(&self, term: Term) -> &'a [Dim] {
        &self.dims[term.start as usize..term.start as usize + term.len as usize]
    }
    /// The axes of a compound dim, major first.
    #[inline]
    pub fn compound(&self, start: u16, len: u8) -> &'a [AxisId] {
        &self.compound_axes[start as usize..start as usize + len as usize]
    }
    /// Axes in some input but in no output.
    #[inline]
    pub const fn contracted(&self) -> AxisSet {
        self.input_axes.minus(self.output_axes)
    }
    /// The label of an axis as a `char`.
    #[inline]
    pub fn label(&self, id: AxisId) -> char {
        self.labels[id as usize] as char
    }
    /// The axis with this label.
    #[inline]
    pub fn axis(&self, label: char) -> Option<AxisId> {
        self.labels
            .iter()
            .position(|&l| l as char == label)
            .map(|p| p as AxisId)
    }
    /// Axes that appear in a term (compound factors included).
    #[inline]
    pub fn axes_of(&self, term: Term) -> AxisSet {
        let mut set = AxisSet::EMPTY;
        for d in self.dims_of(term) {
            match *d {
                Dim::Axis(a) => set = set.with(a),
                Dim::One => {}
                Dim::Compound { start, len } => {
                    for &a in self.compound(start, len) {
                        set = set.with(a);
                    }
                }
            }
        }
        set
    }
    /// A term written back as notation text, e.g. `b...(hd)`.
    pub fn term_text(&self, term: Term) -> alloc::string::String {
        let mut s = alloc::string::String::new();
        for (i, d) in self.dims_of(term).iter().enumerate() {
            if term.ellipsis == Some(i as u16) {
                s.push_str("...");
            }
            match *d {
                Dim::Axis(a) => s.push(self.label(a)),
                Dim::One => s.push('1'),
                Dim::Compound { start, len } => {
                    s.push('(');
                    for &a in self.compound(start, len) {
                        s.push(self.label(a));
                    }
                    s.push(')');
                }
            }
        }
        if term.ellipsis == Some(term.len) {
            s.push_str("...");
        }
        s
    }

    /// Whether input `i` is an addend (`+` before its term).
    #[inline]
    pub const fn is_addend(&self, i: usize) -> bool {
        i < 64 && self.addends & (1u64 << i) != 0
    }

    /// Whether any input is an addend.
    #[inline]
    pub const fn has_addends(&self) -> bool {
        self.addends != 0
    }

    /// The notation the plan stands for, written out (`+` before addends):
    /// for a plan bound from a template, the notation of this call.
    pub fn notation_text(&self) -> alloc::string::String {
        let mut s = alloc::string::String::new();
        for (i, &t) in self.terms.iter().enumerate() {
            if i == self.n_inputs() {
                s.push_str("->");
            } else if i > 0 {
                s.push(',');
            }
            if self.is_addend(i) {
                s.push('+');
            }
            s.push_str(&self.term_text(t));
        }
        if self.n_inputs() == self.terms.len() {
            s.push_str("->");
        }
        s
    }

    /// Whether any term has a compound dim.
    #[inline]
    pub const fn has_compound(&self) -> bool {
        !self.compound_axes.is_empty()
    }

    /// Whether any input term has an ellipsis.
    #[inline]
    pub fn inputs_have_ellipsis(&self) -> bool {
        self.terms[..self.n_inputs()]
            .iter()
            .any(|t| t.ellipsis.is_some())
    }
}

impl fmt::Display for Plan<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.source)
    }
}
