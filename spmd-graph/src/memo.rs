//! Rule answers remembered by op signature. Ops with the same rule,
//! attributes, kind and tensor shapes (the layers of a stacked model) give
//! the same answer for the same attrs, since rules are pure functions of
//! those; so each distinct call runs its rule once, and every repeat costs
//! a hash and a compare of the attrs it read.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use rustc_hash::{FxBuildHasher, FxHasher};

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

/// Remembered answers (errors are not remembered: they end the run). A
/// lookup hashes the attrs in place and compares them with the entry's, so
/// a hit copies nothing; callers read the answer by where it is
/// ([`Answer`], [`Memo::result`]).
#[derive(Clone, Default)]
pub(crate) struct Memo {
    by_hash: HashMap<u64, SmallVec<[u32; 2]>, FxBuildHasher>,
    entries: Vec<Entry>,
    /// The last answer of an op no other op shares a signature with: it
    /// could never hit, so it is not remembered (a `RuleResult` is ~600
    /// bytes; remembering 100k of them cost more than the calls).
    scratch: RuleResult,
}

/// Where one of [`Memo`]'s answers is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Remembered, at this index.
    Remembered(u32),
    /// The last answer of an op that shares its signature with no other:
    /// valid until the next call.
    Last,
}

impl Memo {
    /// An answer of [`Memo::forward`] or [`Memo::backward`].
    pub(crate) fn result(&self, at: Answer) -> &RuleResult {
        match at {
            Answer::Remembered(id) => self
                .entries
                .get(id as usize)
                .map_or(&self.scratch, |e| &e.result),
            Answer::Last => &self.scratch,
        }
    }

    /// A remembered answer, with the attrs its rule read (the inputs' in
    /// forward); `None` for the unremembered last answer.
    pub(crate) fn entry(&self, at: Answer) -> Option<(&[DistAttr], &RuleResult)> {
        match at {
            Answer::Remembered(id) => self
                .entries
                .get(id as usize)
                .map(|e| (e.attrs.as_slice(), &e.result)),
            Answer::Last => None,
        }
    }

    /// [`Graph::call_resolving_into`], remembered; where the answer is.
    pub(crate) fn forward(
        &mut self,
        graph: &Graph,
        o: OpId,
        attrs: &[DistAttr],
        keep: usize,
    ) -> Result<Answer, SpmdError> {
        let (inputs, _) = graph.io(o);
        if !graph.shared[o.index()] {
            graph.call_resolving_into(o, attrs, keep, &mut self.scratch)?;
            return Ok(Answer::Last);
        }
        self.answer(
            graph.signatures[o.index()],
            Direction::Forward { keep },
            inputs.iter().map(|&t| graph.seen(o, t, attrs)),
            |r| graph.call_resolving_into(o, attrs, keep, r),
        )
    }

    /// [`Graph::call_backward`], remembered; where the answer is.
    pub(crate) fn backward(
        &mut self,
        graph: &Graph,
        o: OpId,
        attrs: &[DistAttr],
    ) -> Result<Answer, SpmdError> {
        let (_, outputs) = graph.io(o);
        if !graph.shared[o.index()] {
            graph.call_backward(o, attrs, &mut self.scratch)?;
            return Ok(Answer::Last);
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
    ) -> Result<Answer, SpmdError> {
        let mut h = FxHasher::default();
        signature.hash(&mut h);
        direction.hash(&mut h);
        for a in attrs.clone() {
            a.hash(&mut h);
        }
        let hash = h.finish();
        if let Some(ids) = self.by_hash.get(&hash) {
            for &id in ids {
                let e = &self.entries[id as usize];
                if e.signature == signature
                    && e.direction == direction
                    && e.attrs.iter().eq(attrs.clone())
                {
                    return Ok(Answer::Remembered(id));
                }
            }
        }
        // Answered into the scratch result, then kept: one copy, only for
        // a call worth remembering (and while ids fit the index).
        call(&mut self.scratch)?;
        let Ok(id) = u32::try_from(self.entries.len()) else {
            return Ok(Answer::Last);
        };
        let result = self.scratch.clone();
        self.entries.push(Entry {
            signature,
            direction,
            attrs: attrs.cloned().collect(),
            result,
        });
        self.by_hash.entry(hash).or_default().push(id);
        Ok(Answer::Remembered(id))
    }
}
