//! Compiled calls kept per thread, so that a rule called again with the
//! same shapes (a search asking about many layouts of one op) runs its
//! program without compiling it again.
//!
//! An entry is found by the rule's [`RuleKey`] and checked against the
//! call's direction, absent tensors and shapes. A key names what a rule
//! compiles from (its plan, policy, never-sharded axes, optional tensors, names,
//! grad signature): `#[spmd_rule]` gives each notation of an op a key, a
//! template's binding a new key each time it binds, and an [`Einsum`]
//! one when it is built and a new one with each policy or reduce type it
//! is given. What a call reads per call (a reduce type an attribute sets)
//! is not compiled. A rule without a key ([`RuleKey::NONE`]) is
//! compiled on every call.
//!
//! [`Einsum`]: crate::Einsum

use core::sync::atomic::{AtomicU64, Ordering};

use super::Compiled;

/// Names what a rule compiles from (see the module docs). Two rules with
/// one key must compile alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RuleKey(u64);

/// The next key to give.
static NEXT: AtomicU64 = AtomicU64::new(1);

impl RuleKey {
    /// No key: never cached.
    pub const NONE: RuleKey = RuleKey(0);

    /// A key no rule has had.
    pub fn unique() -> RuleKey {
        RuleKey(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

/// A key given on first use: what a `static` holds for a rule declared at
/// compile time (`#[spmd_rule]` emits one per notation).
#[derive(Debug)]
pub struct KeySite(AtomicU64);

impl KeySite {
    #[allow(clippy::new_without_default)]
    pub const fn new() -> KeySite {
        KeySite(AtomicU64::new(0))
    }

    /// This site's key.
    #[inline]
    pub fn key(&self) -> RuleKey {
        match self.0.load(Ordering::Relaxed) {
            0 => self.first_key(),
            k => RuleKey(k),
        }
    }

    #[cold]
    fn first_key(&self) -> RuleKey {
        let fresh = RuleKey::unique().0;
        match self
            .0
            .compare_exchange(0, fresh, Ordering::Relaxed, Ordering::Relaxed)
        {
            Ok(_) => RuleKey(fresh),
            // Another thread gave it one first.
            Err(k) => RuleKey(k),
        }
    }
}

#[cfg(feature = "std")]
mod kept {
    use alloc::boxed::Box;
    use core::cell::RefCell;

    use super::{Compiled, RuleKey};
    use crate::error::SpmdError;
    use crate::op::Call;
    use crate::rule::EinsumRule;

    /// Entries per thread: one per key (modulo collisions), so that the
    /// ops of a model, asked in turn, keep theirs.
    const ENTRIES: usize = 64;

    struct Cache {
        entries: [Option<(RuleKey, Box<Compiled>)>; ENTRIES],
    }

    std::thread_local! {
        static CACHE: RefCell<Cache> = const {
            RefCell::new(Cache { entries: [const { None }; ENTRIES] })
        };
    }

    /// The entry of `key`.
    #[inline(always)]
    fn index(key: RuleKey) -> usize {
        // Fibonacci hashing: consecutive keys spread over the table.
        (key.0.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 58) as usize % ENTRIES
    }

    /// Calls `f` with the compiled form of `call` for `rule` (named by
    /// `key`): the kept one when it fits the call, else one compiled now
    /// and kept. `Err` when the call does not compile (nothing is kept).
    /// `fresh` tells `f` whether the call was compiled now (its layouts
    /// then checked already).
    #[inline]
    pub(crate) fn with_compiled<R>(
        key: RuleKey,
        rule: &EinsumRule<'_>,
        call: &Call<'_>,
        f: impl FnOnce(&Compiled, bool) -> Result<R, SpmdError>,
    ) -> Result<R, SpmdError> {
        CACHE.with(|cache| {
            let Ok(mut cache) = cache.try_borrow_mut() else {
                // Inference inside inference (a trace or hook that infers):
                // compiled here, not kept.
                let mut c = Compiled::empty();
                c.compile(rule, call)?;
                return f(&c, true);
            };
            let entry = &mut cache.entries[index(key)];
            if let Some((k, c)) = entry
                && *k == key
                && c.fits(call)
            {
                return f(c, false);
            }
            let mut c = match entry.take() {
                Some((_, c)) => c,
                None => Box::new(Compiled::empty()),
            };
            c.compile(rule, call)?;
            let (_, c) = entry.insert((key, c));
            f(c, true)
        })
    }
}

#[cfg(feature = "std")]
pub(crate) use kept::with_compiled;
