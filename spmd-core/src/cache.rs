//! Memoized run-time notations: docs/semantics.md §8 asks that a notation built at run
//! time be compiled "once per distinct run-time notation", not once per call.
//!
//! A rule declared with `build = ...` derives its notation from its attributes
//! and the call's shapes (softmax's axis and rank, a reduction's axes, a
//! reshape's target shape). Building it means formatting and parsing a string
//! and allocating the parsed plan: several hundred nanoseconds and about ten
//! heap allocations per call. [`NotationCache`] keeps each built [`Einsum`]
//! under the key it was built from, so a repeated call costs one hash of a few
//! integers and a reference-count increment.
//!
//! The key is the rule's value (its attributes) plus the call's *shape key*:
//! its direction and every shape it carries. It deliberately leaves out the
//! dist attrs, so a cached build function must not read them (the macro's
//! `cache` option documents that contract).

use alloc::rc::Rc;
use core::hash::{Hash, Hasher};
use std::collections::HashMap;

use rustc_hash::{FxBuildHasher, FxHasher};
use smallvec::SmallVec;

use crate::einsum::Einsum;
use crate::error::SpmdError;
use crate::op::Call;

/// Entries kept per cache before it is cleared: a bound on memory for a
/// caller that sweeps through many shapes. Clearing (rather than evicting one
/// entry) keeps the hot path free of bookkeeping; a working set of a real
/// model is far smaller.
const CAPACITY: usize = 4096;

/// The direction, all shapes and the absent-tensor masks of a call, flattened:
/// `[n, rank, dims.., rank, dims.., ..., n, ..., (grad tag), absent masks]`
/// (forward: inputs, then the output shapes it was given; backward: input
/// shapes, then outputs; grad: the grad op's inputs, then output grads). Inline for up to 32 numbers, so building it for a
/// lookup does not allocate for ordinary ops.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShapeKey(SmallVec<[usize; 32]>);

impl Hash for ShapeKey {
    // Word by word: the derived form hashes the slice as bytes, which the
    // hasher would take as bytes.
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_usize(self.0.len());
        for &n in &self.0 {
            state.write_usize(n);
        }
    }
}

impl ShapeKey {
    /// The key of `call`.
    pub fn of(call: &Call<'_>) -> ShapeKey {
        let mut key = SmallVec::new();
        // Known output shapes (`replicated`, `default_data_parallel`) may
        // shape the notation; an empty list is its own key.
        call.push_shapes(&mut key);
        let absent = match *call {
            Call::Forward { absent, .. } | Call::Backward { absent, .. } => absent,
            Call::Grad { absent, .. } => {
                // Grad has the same shape lists as a backward call could;
                // the tag keeps the two apart.
                key.push(usize::MAX);
                absent
            }
        };
        // Which optional tensors are absent is part of the call's form.
        key.push(absent.inputs as usize);
        key.push(absent.outputs as usize);
        ShapeKey(key)
    }
}

/// Built notations of one rule type, keyed by (rule value, [`ShapeKey`]).
///
/// ```
/// use spmd_core::{Call, DistAttr, Einsum, Mesh, NotationCache, Spec};
///
/// let mut cache = NotationCache::<i64>::new();
/// let mesh = Mesh::new(&[2])?;
/// let x = DistAttr::from_paddle(&[0, -1]).unwrap();
/// let inputs = [Spec::new(&[4, 8], &x)];
/// let call = Call::forward(&mesh, &inputs);
/// let mut builds = 0;
/// for _ in 0..3 {
///     let e = cache.get_or_build(&-1, &call, || {
///         builds += 1;
///         Einsum::new("ab->a")
///     })?;
///     assert_eq!(e.notation().source(), "ab->a");
/// }
/// assert_eq!(builds, 1);
/// # Ok::<(), spmd_core::SpmdError>(())
/// ```
#[derive(Debug)]
pub struct NotationCache<A> {
    /// Bucketed by the Fx hash of (rule, shape key). A `HashMap<(A, ShapeKey),
    /// _>` would need an owned key, that is a clone of the rule value, for
    /// every lookup; buckets let a lookup compare by reference.
    buckets: HashMap<u64, Bucket<A>, FxBuildHasher>,
    len: usize,
}

type Bucket<A> = SmallVec<[(A, ShapeKey, Rc<Einsum>); 1]>;

impl<A> Default for NotationCache<A> {
    fn default() -> Self {
        NotationCache {
            buckets: HashMap::default(),
            len: 0,
        }
    }
}

impl<A> NotationCache<A> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of notations held.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl<A: Hash + Eq + Clone> NotationCache<A> {
    /// The notation built for (`rule`, `call`'s shapes), building it with
    /// `build` on a miss. Errors are not cached: a failing call fails again
    /// the same way.
    pub fn get_or_build(
        &mut self,
        rule: &A,
        call: &Call<'_>,
        build: impl FnOnce() -> Result<Einsum, SpmdError>,
    ) -> Result<Rc<Einsum>, SpmdError> {
        let key = ShapeKey::of(call);
        let hash = fx_hash(rule, &key);
        if let Some(e) = self.lookup(hash, rule, &key) {
            return Ok(e);
        }
        let built = Rc::new(build()?);
        self.insert(hash, rule, key, &built);
        Ok(built)
    }

    fn insert(&mut self, hash: u64, rule: &A, key: ShapeKey, e: &Rc<Einsum>) {
        if self.len >= CAPACITY {
            self.buckets.clear();
            self.len = 0;
        }
        self.buckets
            .entry(hash)
            .or_default()
            .push((rule.clone(), key, Rc::clone(e)));
        self.len += 1;
    }

    fn lookup(&self, hash: u64, rule: &A, key: &ShapeKey) -> Option<Rc<Einsum>> {
        self.buckets
            .get(&hash)?
            .iter()
            .find(|(r, k, _)| r == rule && k == key)
            .map(|(_, _, e)| Rc::clone(e))
    }
}

fn fx_hash<A: Hash>(rule: &A, key: &ShapeKey) -> u64 {
    let mut h = FxHasher::default();
    rule.hash(&mut h);
    key.hash(&mut h);
    h.finish()
}

/// [`NotationCache::get_or_build`] through a `RefCell`, for the per-thread
/// cache `#[spmd_rule(build(.., cache))]` generates: the cell is borrowed for
/// the lookup and for the insert, never while `build` runs, so a build
/// function that itself calls a cached rule of the same type cannot trip a
/// double borrow.
#[doc(hidden)]
pub fn cached_notation<A: Hash + Eq + Clone>(
    cache: &core::cell::RefCell<NotationCache<A>>,
    rule: &A,
    call: &Call<'_>,
    build: impl FnOnce() -> Result<Einsum, SpmdError>,
) -> Result<Rc<Einsum>, SpmdError> {
    let key = ShapeKey::of(call);
    let hash = fx_hash(rule, &key);
    if let Some(e) = cache.borrow().lookup(hash, rule, &key) {
        return Ok(e);
    }
    let built = Rc::new(build()?);
    cache.borrow_mut().insert(hash, rule, key, &built);
    Ok(built)
}
