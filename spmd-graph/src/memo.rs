//! Rule answers remembered by op signature. Ops with the same rule,
//! attributes, kind and tensor shapes (the layers of a stacked model) give
//! the same answer for the same attrs, since rules are pure functions of
//! those; so each distinct call runs its rule once. Run-time built rules
//! (reshape, transpose, softmax, ...) parse a notation on every call, which
//! costs microseconds; a remembered answer costs a hash and a copy.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use smallvec::SmallVec;
use spmd_core::{DistAttr, RuleResult, SpmdError};

use crate::graph::{Graph, OpId};

#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    signature: u32,
    /// Forward (with the input that wins a conflict) or backward.
    direction: Direction,
    /// The attrs the rule reads: the inputs' in forward, the outputs' in
    /// backward.
    attrs: SmallVec<[DistAttr; 4]>,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Direction {
    Forward { keep: usize },
    Backward,
}

/// A fast non-cryptographic hasher (the multiply-rotate scheme of rustc's
/// `FxHasher`): keys are a few small attrs, and SipHash showed in profiles.
#[derive(Default)]
struct Fx(u64);

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

/// Remembered answers (errors are not remembered: they end the run).
#[derive(Default)]
pub(crate) struct Memo {
    answers: HashMap<Key, RuleResult, BuildHasherDefault<Fx>>,
    /// Tests compare against rule calls that remember nothing.
    #[cfg(test)]
    pub(crate) off: bool,
}

impl Memo {
    /// [`Graph::call_resolving`], remembered.
    pub(crate) fn forward(
        &mut self,
        graph: &Graph,
        o: OpId,
        attrs: &[DistAttr],
        keep: usize,
    ) -> Result<RuleResult, SpmdError> {
        let op = graph.op(o);
        let key = Key {
            signature: graph.signatures[o.index()],
            direction: Direction::Forward { keep },
            attrs: op.inputs.iter().map(|t| attrs[t.index()].clone()).collect(),
        };
        self.answer(key, || graph.call_resolving(o, attrs, keep))
    }

    /// [`Graph::call_backward`], remembered.
    pub(crate) fn backward(
        &mut self,
        graph: &Graph,
        o: OpId,
        attrs: &[DistAttr],
    ) -> Result<RuleResult, SpmdError> {
        let op = graph.op(o);
        let key = Key {
            signature: graph.signatures[o.index()],
            direction: Direction::Backward,
            attrs: op
                .outputs
                .iter()
                .map(|t| attrs[t.index()].clone())
                .collect(),
        };
        self.answer(key, || graph.call_backward(o, attrs))
    }

    fn answer(
        &mut self,
        key: Key,
        call: impl FnOnce() -> Result<RuleResult, SpmdError>,
    ) -> Result<RuleResult, SpmdError> {
        #[cfg(test)]
        if self.off {
            return call();
        }
        if let Some(r) = self.answers.get(&key) {
            return Ok(r.clone());
        }
        let r = call()?;
        self.answers.insert(key, r.clone());
        Ok(r)
    }
}
