//! Sets of a call's tensors by position: which inputs have no gradient,
//! which follow the others, which outputs are never partial.

/// A set of input positions, or of output positions: bit `i` is tensor
/// `i`. Positions from 64 on are in no set (a rule names at most 64).
///
/// ```
/// use spmd_core::TensorSet;
///
/// let ids = TensorSet::of(&[0, 2]);
/// assert!(ids.contains(2) && !ids.contains(1) && !ids.contains(70));
/// assert_eq!(ids.with(1), TensorSet::of(&[0, 1, 2]));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct TensorSet(u64);

impl TensorSet {
    pub const EMPTY: TensorSet = TensorSet(0);

    /// The set whose bit `i` is tensor `i` (what `#[spmd_rule]` emits).
    pub const fn from_bits(bits: u64) -> TensorSet {
        TensorSet(bits)
    }

    pub const fn bits(self) -> u64 {
        self.0
    }

    /// The tensors at `positions` (those from 64 on are left out).
    pub const fn of(positions: &[usize]) -> TensorSet {
        let mut set = TensorSet::EMPTY;
        let mut k = 0;
        while k < positions.len() {
            set = set.with(positions[k]);
            k += 1;
        }
        set
    }

    #[inline(always)]
    pub const fn contains(self, i: usize) -> bool {
        i < 64 && self.0 & (1u64 << i) != 0
    }

    /// The set with tensor `i` added (unchanged from 64 on).
    pub const fn with(self, i: usize) -> TensorSet {
        if i < 64 {
            TensorSet(self.0 | 1u64 << i)
        } else {
            self
        }
    }

    pub const fn union(self, other: TensorSet) -> TensorSet {
        TensorSet(self.0 | other.0)
    }

    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
}
