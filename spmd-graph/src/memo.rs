//! Rule answers remembered by op signature. Ops with the same rule,
//! attributes, kind and tensor shapes (the layers of a stacked model) give
//! the same answer for the same attrs, since rules are pure functions of
//! those; so each distinct call runs its rule once. Run-time built rules
//! (reshape, transpose, softmax, ...) parse a notation on every call, which
//! costs microseconds; a remembered answer costs a hash and a copy.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};

use smallvec::SmallVec;
use spmd_core::{DistAttr, RuleResult, SpmdError};

use crate::graph::{Graph, OpId};

/// One remembered call: the op signature, the direction, the attrs the
/// rule read (the inputs' in forward, the outputs' in backward) and the
/// answer.
#[derive(Clone)]
struct Entry {
    signature: u32,
    direction: Direction,
    attrs: SmallVec<[DistAttr; 4]>,
    result: RuleResult,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Direction {
    /// Forward, with the input that wins a conflict.
    Forward {
        keep: usize,
    },
    Backward,
}

/// Fx-hashed maps and sets, for the crate's own keys.
pub(crate) type FxBuild = BuildHasherDefault<Fx>;

/// A fast non-cryptographic hasher (the multiply-rotate scheme of rustc's
/// `FxHasher`): keys are a few small attrs, and SipHash showed in profiles.
#[derive(Default)]
pub(crate) struct Fx(u64);

impl Hasher for Fx {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
    }
    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }
    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }
    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }
    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

impl Fx {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

/// Remembered answers (errors are not remembered: they end the run). A
/// lookup hashes the attrs in place and compares them with the entry's, so
/// a hit copies nothing; callers read the answer by index
/// ([`Memo::result`]; `usize::MAX` is the unremembered last answer).
#[derive(Clone, Default)]
pub(crate) struct Memo {
    by_hash: HashMap<u64, SmallVec<[u32; 2]>, FxBuild>,
    entries: Vec<Entry>,
    /// The last answer of an op no other op shares a signature with: it
    /// could never hit, so it is not remembered (a `RuleResult` is ~600
    /// bytes; remembering 100k of them cost more than the calls).
    scratch: RuleResult,
    /// Tests compare against rule calls that remember nothing.
    #[cfg(test)]
    pub(crate) off: bool,
}

impl Memo {
    /// The answer at `index` (from [`Memo::forward`] or [`Memo::backward`]).
    pub(crate) fn result(&self, index: usize) -> &RuleResult {
        self.entries.get(index).map_or(&self.scratch, |e| &e.result)
    }

    /// Remembered answer `index`, with the attrs its rule read (the
    /// inputs' in forward); `None` for the unremembered last answer.
    pub(crate) fn entry(&self, index: usize) -> Option<(&[DistAttr], &RuleResult)> {
        self.entries
            .get(index)
            .map(|e| (e.attrs.as_slice(), &e.result))
    }

    /// [`Graph::call_resolving_into`], remembered; the answer's index.
    pub(crate) fn forward(
        &mut self,
        graph: &Graph,
        o: OpId,
        attrs: &[DistAttr],
        keep: usize,
    ) -> Result<usize, SpmdError> {
        let (inputs, _) = graph.io(o);
        if !graph.shared[o.index()] {
            graph.call_resolving_into(o, attrs, keep, &mut self.scratch)?;
            return Ok(usize::MAX);
        }
        self.answer(
            graph.signatures[o.index()],
            Direction::Forward { keep },
            inputs.iter().map(|t| &attrs[t.index()]),
            |r| graph.call_resolving_into(o, attrs, keep, r),
        )
    }

    /// [`Graph::call_backward`], remembered; the answer's index.
    pub(crate) fn backward(
        &mut self,
        graph: &Graph,
        o: OpId,
        attrs: &[DistAttr],
    ) -> Result<usize, SpmdError> {
        let (_, outputs) = graph.io(o);
        if !graph.shared[o.index()] {
            graph.call_backward(o, attrs, &mut self.scratch)?;
            return Ok(usize::MAX);
        }
        self.answer(
            graph.signatures[o.index()],
            Direction::Backward,
            outputs.iter().map(|t| &attrs[t.index()]),
            |r| graph.call_backward(o, attrs, r),
        )
    }

    fn answer<'a>(
        &mut self,
        signature: u32,
        direction: Direction,
        attrs: impl Iterator<Item = &'a DistAttr> + Clone,
        call: impl FnOnce(&mut RuleResult) -> Result<(), SpmdError>,
    ) -> Result<usize, SpmdError> {
        let mut h = Fx::default();
        signature.hash(&mut h);
        direction.hash(&mut h);
        for a in attrs.clone() {
            a.hash(&mut h);
        }
        let hash = h.finish();
        #[cfg(test)]
        let remember = !self.off;
        #[cfg(not(test))]
        let remember = true;
        if remember && let Some(ids) = self.by_hash.get(&hash) {
            for &id in ids {
                let e = &self.entries[id as usize];
                if e.signature == signature
                    && e.direction == direction
                    && e.attrs.iter().eq(attrs.clone())
                {
                    return Ok(id as usize);
                }
            }
        }
        // Answered into the scratch result, then kept: one copy, only for
        // a call worth remembering.
        call(&mut self.scratch)?;
        let result = self.scratch.clone();
        let id = self.entries.len();
        self.entries.push(Entry {
            signature,
            direction,
            attrs: attrs.cloned().collect(),
            result,
        });
        self.by_hash.entry(hash).or_default().push(id as u32);
        Ok(id)
    }
}
