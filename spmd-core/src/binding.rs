//! The last binding of a template, kept per template and thread: a call that
//! binds the same template for the same ranks and attribute values as the
//! one before it (a search asking about one op again and again) reuses the
//! plan instead of binding it anew. Binding is pure, so nothing else can
//! differ; a call that differs binds into the same buffer.

use spmd_notation::{BindError, MAX_BOUND_TERMS, PlanBuf, Pos, Side, Template};

use crate::engine::cache::RuleKey;

/// At most this many selectors, and this many values per list selector, are
/// remembered; a template or call beyond them binds every time.
const KEY_SELECTORS: usize = 4;
const KEY_LIST: usize = 8;

/// A selection value as remembered.
#[derive(Clone, Copy, PartialEq, Eq)]
enum KeyPos {
    Int(i64),
    All,
    Mask(u64),
    List { len: u8, values: [i64; KEY_LIST] },
}

impl KeyPos {
    fn of(p: Pos<'_>) -> Option<KeyPos> {
        Some(match p {
            Pos::Int(v) => KeyPos::Int(v),
            Pos::All => KeyPos::All,
            Pos::Mask(m) => KeyPos::Mask(m),
            Pos::List(l) if l.len() <= KEY_LIST => {
                let mut values = [0; KEY_LIST];
                values[..l.len()].copy_from_slice(l);
                KeyPos::List {
                    len: l.len() as u8,
                    values,
                }
            }
            Pos::List(_) => return None,
        })
    }

    /// By reference: a list key is 72 bytes, not worth a copy per call.
    #[inline]
    fn is(&self, p: Pos<'_>) -> bool {
        match (self, p) {
            (KeyPos::Int(a), Pos::Int(b)) => *a == b,
            (KeyPos::All, Pos::All) => true,
            (KeyPos::Mask(a), Pos::Mask(b)) => *a == b,
            // Element by element: lists are short, and a slice compare
            // calls `memcmp`.
            (KeyPos::List { len, values }, Pos::List(l)) => {
                usize::from(*len) == l.len() && values.iter().zip(l).all(|(a, b)| a == b)
            }
            _ => false,
        }
    }
}

/// What a binding was made for: how many tensors the call gives on each
/// side, their ranks, and each selection.
#[derive(Clone, Copy)]
struct Key {
    given: [usize; 2],
    /// `u32::MAX`: the tensor is absent.
    ranks: [u32; MAX_BOUND_TERMS],
    n_sels: u8,
    sels: [KeyPos; KEY_SELECTORS],
}

/// One template's last binding.
pub struct Binding {
    buf: PlanBuf<'static>,
    key: Option<Key>,
    /// Names this binding's plan in the engine's cache: a new one each
    /// time it binds anew.
    rule_key: RuleKey,
}

impl Binding {
    /// No binding yet. Const, and `Binding` owns no heap, so a thread-local
    /// slot of one is a plain thread-relative address: no lazy
    /// initialisation or destructor registration on the hot path.
    pub const fn new() -> Binding {
        Binding {
            buf: PlanBuf::new(""),
            key: None,
            rule_key: RuleKey::NONE,
        }
    }
}

impl Default for Binding {
    fn default() -> Self {
        Binding::new()
    }
}

fn encode(rank: Option<usize>) -> Option<u32> {
    match rank {
        None => Some(u32::MAX),
        Some(r) => u32::try_from(r).ok().filter(|&r| r != u32::MAX),
    }
}

impl Binding {
    /// The plan of `t` for these selections and ranks: the last one when
    /// they are the last call's, else bound now.
    pub(crate) fn bind(
        &mut self,
        t: &Template<'static>,
        sels: &[Pos<'_>],
        given: [usize; 2],
        rank: impl Fn(Side, usize) -> Option<usize>,
    ) -> Result<(&PlanBuf<'static>, RuleKey), BindError> {
        if let Some(k) = &self.key
            && k.given == given
            && usize::from(k.n_sels) == sels.len()
            && Self::ranks_match(k, given, &rank)
            && sels.iter().zip(&k.sels).all(|(&p, kp)| kp.is(p))
        {
            return Ok((&self.buf, self.rule_key));
        }
        self.key = None;
        self.rule_key = RuleKey::NONE;
        spmd_notation::bind_into(&mut self.buf, t, sels, given, &rank)?;
        self.key = Self::key(given, sels, &rank);
        // A binding that is not remembered is not named either: the next
        // call binds again, into this buffer.
        if self.key.is_some() {
            self.rule_key = RuleKey::unique();
        }
        Ok((&self.buf, self.rule_key))
    }

    /// Whether the call's ranks are the key's: its inputs', then its
    /// outputs', in order. Plain loops: this runs on every call, and the
    /// chained iterator it replaces cost a template rule ~10% of a call.
    #[inline]
    fn ranks_match(
        k: &Key,
        given: [usize; 2],
        rank: &impl Fn(Side, usize) -> Option<usize>,
    ) -> bool {
        // `given` is the key's, so it fits `MAX_BOUND_TERMS`.
        let (ins, outs) = k.ranks.split_at(given[0]);
        (0..given[0]).all(|i| encode(rank(Side::Input, i)) == Some(ins[i]))
            && (0..given[1]).all(|o| encode(rank(Side::Output, o)) == Some(outs[o]))
    }

    fn key(
        given: [usize; 2],
        sels: &[Pos<'_>],
        rank: &impl Fn(Side, usize) -> Option<usize>,
    ) -> Option<Key> {
        if given[0] + given[1] > MAX_BOUND_TERMS || sels.len() > KEY_SELECTORS {
            return None;
        }
        let mut key = Key {
            given,
            ranks: [u32::MAX; MAX_BOUND_TERMS],
            n_sels: sels.len() as u8,
            sels: [KeyPos::All; KEY_SELECTORS],
        };
        for i in 0..given[0] {
            key.ranks[i] = encode(rank(Side::Input, i))?;
        }
        for o in 0..given[1] {
            key.ranks[given[0] + o] = encode(rank(Side::Output, o))?;
        }
        for (slot, &p) in key.sels.iter_mut().zip(sels) {
            *slot = KeyPos::of(p)?;
        }
        Some(key)
    }
}

/// Where a rule keeps a template's [`Binding`]: a thread-local per template
/// with `std` (emitted by `#[spmd_rule]` through `binding_slot!`), a fresh
/// one per call without.
pub trait BindingSlot {
    fn with_binding<R>(&'static self, f: impl FnOnce(&mut Binding) -> R) -> R;
}

#[cfg(feature = "std")]
impl BindingSlot for std::thread::LocalKey<core::cell::RefCell<Binding>> {
    fn with_binding<R>(&'static self, f: impl FnOnce(&mut Binding) -> R) -> R {
        self.with(|cell| match cell.try_borrow_mut() {
            Ok(mut b) => f(&mut b),
            // A hook that binds this template inside its own binding.
            Err(_) => f(&mut Binding::default()),
        })
    }
}

/// A slot that keeps nothing (no `std`: no thread-locals).
pub struct NoSlot;

impl BindingSlot for NoSlot {
    fn with_binding<R>(&'static self, f: impl FnOnce(&mut Binding) -> R) -> R {
        f(&mut Binding::default())
    }
}

/// Declares a template's binding slot; the choice between a thread-local
/// and [`NoSlot`] is made when `spmd-core` is compiled.
#[cfg(feature = "std")]
#[doc(hidden)]
#[macro_export]
macro_rules! __spmd_binding_slot {
    ($name:ident) => {
        ::std::thread_local! {
            static $name: ::core::cell::RefCell<$crate::__private::Binding> =
                const { ::core::cell::RefCell::new($crate::__private::Binding::new()) };
        }
    };
}

#[cfg(not(feature = "std"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __spmd_binding_slot {
    ($name:ident) => {
        static $name: $crate::__private::NoSlot = $crate::__private::NoSlot;
    };
}
