//! Name -> rule (docs/semantics.md §6). An explicit [`Registry`] value is the primary API:
//! deterministic, testable, and free of linker tricks; [`global`] offers a
//! process-wide one for `std` users.

use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use spmd_notation::edit_distance;

use crate::error::SpmdError;
use crate::op::Op;
use crate::op_attrs::Attrs;
use crate::rule::SpmdRule;

/// One registered rule: how to list it and how to build it from attributes.
#[derive(Clone, Copy, Debug)]
pub struct RuleInfo {
    pub name: &'static str,
    pub notations: &'static [&'static str],
    /// The attributes the rule reads.
    pub attrs: &'static [&'static str],
    /// Attributes the op takes that its sharding does not depend on
    /// (Paddle's `epsilon`, `dtype`, `is_test`, ...): accepted and dropped.
    /// Any other attribute is an error (docs/semantics.md §9).
    pub ignored: &'static [&'static str],
    /// Attributes given under another name than the rule reads, as
    /// `(given, read)` pairs: one rule under two frameworks' conventions
    /// (ATen's `aten.view` passes `size` where the reshape rule reads
    /// `shape`).
    pub aliases: &'static [(&'static str, &'static str)],
    /// Tensor names, when the rule declares them (else empty).
    pub inputs: &'static [&'static str],
    pub outputs: &'static [&'static str],
    /// Inputs without a gradient.
    pub no_grad: crate::TensorSet,
    /// The tensors that may be absent.
    pub optional: crate::optional::Absent,
    /// Per attribute of `attrs`: what its value looks like.
    pub attr_types: &'static [&'static str],
    /// Per attribute of `attrs`: `None` required, `Some("")` its type's
    /// default, else the default as written.
    pub attr_defaults: &'static [Option<&'static str>],
    /// The tensors the grad op takes.
    pub grad: crate::signature::GradSignature<'static>,
    /// The op passes shardings through unchanged (elementwise and pure
    /// layout ops): a whole-graph propagation settles such ops first, as
    /// Shardy does ([`RuleInfo::passing_through`]).
    pub pass_through: bool,
    pub build: fn(&Attrs) -> Result<Box<dyn SpmdRule>, SpmdError>,
}

impl RuleInfo {
    /// The entry of an op type.
    pub fn of<O: Op>() -> RuleInfo {
        RuleInfo {
            name: O::NAME,
            notations: O::NOTATIONS,
            attrs: O::ATTRS,
            ignored: &[],
            aliases: &[],
            inputs: O::INPUTS,
            outputs: O::OUTPUTS,
            no_grad: O::NO_GRAD,
            optional: O::OPTIONAL,
            attr_types: O::ATTR_TYPES,
            attr_defaults: O::ATTR_DEFAULTS,
            grad: O::GRAD,
            pass_through: false,
            build: |attrs| Ok(Box::new(O::from_attrs(attrs)?)),
        }
    }

    /// The same entry under another name (Paddle registers one rule under
    /// several names: `embedding` and `lookup_table_v2`).
    pub fn renamed(mut self, name: &'static str) -> RuleInfo {
        self.name = name;
        self
    }

    /// The same entry, also accepting `names`: attributes the op takes that
    /// do not change its sharding (layer_norm's `epsilon`, gelu's
    /// `approximate`).
    ///
    /// ```
    /// use spmd_core::{Attrs, Registry, RuleInfo, spmd_rule};
    ///
    /// #[spmd_rule(einsum = "ab->ab")]
    /// struct Gelu {}
    ///
    /// let mut r = Registry::new();
    /// r.insert(RuleInfo::of::<Gelu>().ignoring(&["approximate"]))?;
    /// assert!(r.build("gelu", &Attrs::new().with("approximate", true)).is_ok());
    /// let e = r.build("gelu", &Attrs::new().with("aproximate", true)).err().unwrap();
    /// assert_eq!(
    ///     e.to_string(),
    ///     "gelu: unknown attribute `aproximate` (did you mean `approximate`?); gelu takes: approximate"
    /// );
    /// # Ok::<(), spmd_core::SpmdError>(())
    /// ```
    pub fn ignoring(mut self, names: &'static [&'static str]) -> RuleInfo {
        self.ignored = names;
        self
    }

    /// The same entry, reading attribute `read` from the attribute given as
    /// `given`, for each `(given, read)` pair: one rule under another
    /// framework's argument names.
    ///
    /// ```
    /// use spmd_core::{Attrs, Registry, RuleInfo, spmd_rule};
    ///
    /// #[spmd_rule(einsum = "@->@{axis:1}")]
    /// struct Cumsum { axis: i64 }
    ///
    /// let mut r = Registry::new();
    /// r.insert(RuleInfo::of::<Cumsum>().renamed("aten.cumsum").reading(&[("dim", "axis")]))?;
    /// assert!(r.build("aten.cumsum", &Attrs::new().with("dim", -1_i64)).is_ok());
    /// // The rule's own name is not ATen's.
    /// assert!(r.build("aten.cumsum", &Attrs::new().with("axis", -1_i64)).is_err());
    /// # Ok::<(), spmd_core::SpmdError>(())
    /// ```
    pub fn reading(mut self, aliases: &'static [(&'static str, &'static str)]) -> RuleInfo {
        self.aliases = aliases;
        self
    }

    /// The same entry, marked as passing shardings through unchanged
    /// ([`RuleInfo::pass_through`]).
    pub fn passing_through(mut self) -> RuleInfo {
        self.pass_through = true;
        self
    }

    /// Every attribute the op takes: the ones its rule reads, then the
    /// ignored ones.
    pub fn all_attrs(&self) -> impl Iterator<Item = &'static str> + '_ {
        let aliased = |a: &&str| self.aliases.iter().any(|(_, read)| read == a);
        self.attrs
            .iter()
            .filter(move |a| !aliased(a))
            .chain(self.aliases.iter().map(|(given, _)| given))
            .chain(self.ignored)
            .copied()
    }
}

/// Rules by name.
#[derive(Clone, Debug, Default)]
pub struct Registry {
    rules: BTreeMap<&'static str, RuleInfo>,
}

impl Registry {
    pub fn new() -> Registry {
        Registry::default()
    }

    /// Registers an op type under its [`Op::NAME`]; a taken name is an error.
    pub fn register<O: Op>(&mut self) -> Result<&mut Registry, SpmdError> {
        self.insert(RuleInfo::of::<O>())
    }

    /// Registers an entry; a taken name is an error.
    pub fn insert(&mut self, info: RuleInfo) -> Result<&mut Registry, SpmdError> {
        if self.rules.contains_key(info.name) {
            return Err(SpmdError::DuplicateRule {
                name: info.name.to_string(),
            });
        }
        self.rules.insert(info.name, info);
        Ok(self)
    }

    /// The entry for `name`, or an error that suggests near names.
    pub fn get(&self, name: &str) -> Result<&RuleInfo, SpmdError> {
        self.rules.get(name).ok_or_else(|| SpmdError::UnknownRule {
            name: name.to_string(),
            suggestions: self.near(name),
        })
    }

    /// Builds the rule `name` from attributes. An attribute the op does not
    /// take is an error that names the op, suggests near names and lists
    /// the op's attributes; the ones the op ignores are dropped first.
    pub fn build(&self, name: &str, attrs: &Attrs) -> Result<Box<dyn SpmdRule>, SpmdError> {
        let info = self.get(name)?;
        let read_as = |attr: &str| -> Option<&'static str> {
            match info.aliases.iter().find(|(given, _)| *given == attr) {
                Some(&(_, read)) => Some(read),
                // A name an alias reads is not given as itself.
                None if info.aliases.iter().any(|(_, read)| *read == attr) => None,
                None => info.attrs.iter().copied().find(|a| *a == attr),
            }
        };
        let mut rebuild = !info.aliases.is_empty();
        for (attr, _) in attrs.iter() {
            if info.ignored.contains(&attr) {
                rebuild = true;
            } else if read_as(attr).is_none() {
                return Err(SpmdError::UnknownAttr {
                    op: info.name,
                    attr: attr.to_string(),
                    suggestions: near_names(attr, info.all_attrs()),
                    known: info.all_attrs().map(String::from).collect(),
                });
            }
        }
        let rule = if rebuild {
            let mut read = Attrs::new();
            for (attr, value) in attrs.iter() {
                if let Some(name) = read_as(attr).filter(|_| !info.ignored.contains(&attr)) {
                    read.set(name, value.clone());
                }
            }
            (info.build)(&read)
        } else {
            (info.build)(attrs)
        };
        // A rule registered under another name (`relu` for the elementwise
        // rule, `aten.view` for reshape) errs under the name it was called
        // by, when it is built and when it infers.
        match rule {
            Ok(rule) if rule.name() != info.name => Ok(Box::new(Renamed {
                name: info.name,
                rule,
            })),
            Ok(rule) => Ok(rule),
            Err(mut e) => {
                e.set_op(info.name);
                Err(e)
            }
        }
    }

    pub fn contains(&self, name: &str) -> bool {
        self.rules.contains_key(name)
    }

    /// Every entry, by name.
    pub fn iter(&self) -> impl Iterator<Item = &RuleInfo> {
        self.rules.values()
    }

    pub fn len(&self) -> usize {
        self.rules.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Up to three registered names close to `name`.
    fn near(&self, name: &str) -> Vec<String> {
        near_names(name, self.rules.keys().copied())
    }
}

/// Up to three of `candidates` close to `name`, nearest first: within an
/// edit distance of a third of the length that differs (after a dotted
/// prefix both share, so `aten.topk` is not near `aten.cos`), sharing `name`
/// as a prefix, or `name` with one run of characters added or dropped inside
/// (`transpose_y` and `trans_y`).
pub(crate) fn near_names<'c>(name: &str, candidates: impl Iterator<Item = &'c str>) -> Vec<String> {
    let mut scored: Vec<(usize, &str)> = candidates
        .map(|k| (edit_distance(name, k), k))
        .filter(|&(d, k)| {
            let own = name.len() - shared_namespace(name, k);
            d <= (own / 3).max(1)
                || (name.len() >= 3 && k.starts_with(name))
                || one_run_apart(name, k)
        })
        .collect();
    scored.sort();
    scored
        .into_iter()
        .take(3)
        .map(|(_, k)| k.to_string())
        .collect()
}

/// The length of the longest prefix of both that ends with a `.`.
fn shared_namespace(a: &str, b: &str) -> usize {
    a.bytes()
        .zip(b.bytes())
        .take_while(|(x, y)| x == y)
        .enumerate()
        .filter(|&(_, (x, _))| x == b'.')
        .map(|(i, _)| i + 1)
        .last()
        .unwrap_or(0)
}

/// Whether the shorter name is the longer with one run of characters taken
/// out (at least three characters kept in front, one behind).
fn one_run_apart(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let front = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let back = a
        .iter()
        .rev()
        .zip(b.iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    a.len() != b.len() && front >= 3 && back >= 1 && front + back >= a.len().min(b.len())
}

/// A rule under the name it was registered by: its name and its errors
/// say that name. Answering into the caller's result, it adds one call
/// through a pointer and moves no result.
struct Renamed {
    name: &'static str,
    rule: Box<dyn SpmdRule>,
}

impl SpmdRule for Renamed {
    fn name(&self) -> &'static str {
        self.name
    }

    fn infer_into(
        &self,
        call: &crate::Call<'_>,
        trace: Option<&mut dyn crate::Trace>,
        result: &mut crate::RuleResult,
    ) -> Result<(), SpmdError> {
        self.rule.infer_into(call, trace, result).map_err(|mut e| {
            e.set_op(self.name);
            e
        })
    }

    fn prepare(&self, call: &crate::Call<'_>) -> Result<crate::Prepared, SpmdError> {
        self.rule.prepare(call).map_err(|mut e| {
            e.set_op(self.name);
            e
        })
    }
}

#[cfg(test)]
mod distance_tests {
    use super::{edit_distance, near_names};

    #[test]
    fn distances() {
        assert_eq!(edit_distance("axis", "axis"), 0);
        assert_eq!(edit_distance("axsi", "axis"), 1);
        assert_eq!(edit_distance("matmull", "matmul"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(
            near_names("axsi", ["axis", "keep_dim"].into_iter()),
            ["axis"]
        );
        assert!(near_names("zzzz", ["axis"].into_iter()).is_empty());
        // One run of characters apart.
        assert_eq!(
            near_names("transpose_y", ["trans_x", "trans_y"].into_iter()),
            ["trans_y"]
        );
        // Inside a shared namespace, the rest is what must be near.
        assert!(near_names("aten.topk", ["aten.cos", "aten.mm"].into_iter()).is_empty());
        assert_eq!(
            near_names("aten.mmm", ["aten.mm", "aten.bmm", "aten.cos"].into_iter()),
            ["aten.bmm", "aten.mm"]
        );
    }
}

#[cfg(feature = "std")]
mod global_registry {
    use super::*;
    use std::sync::{OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};

    static GLOBAL: OnceLock<RwLock<Registry>> = OnceLock::new();

    fn lock() -> &'static RwLock<Registry> {
        GLOBAL.get_or_init(|| RwLock::new(Registry::new()))
    }

    /// The process-wide registry (empty until something registers into it).
    /// A panic in another thread while it held the lock does not poison it for
    /// readers: registration is a single insert, so the map is always whole.
    pub fn global() -> RwLockReadGuard<'static, Registry> {
        lock().read().unwrap_or_else(|e| e.into_inner())
    }

    /// Write access to the process-wide registry.
    pub fn global_mut() -> RwLockWriteGuard<'static, Registry> {
        lock().write().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers an op type in the process-wide registry.
    pub fn register_global<O: Op>() -> Result<(), SpmdError> {
        global_mut().register::<O>().map(|_| ())
    }
}

#[cfg(feature = "std")]
pub use global_registry::{global, global_mut, register_global};

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "inventory")]
    #[test]
    fn declared_rules_are_collected_with_the_inventory_feature() {
        #[crate::spmd_rule(einsum = "ij->ji", name = "collected_transpose")]
        struct CollectedTranspose {}

        let r = Registry::with_collected().unwrap();
        let rule = r
            .build("collected_transpose", &crate::Attrs::new())
            .unwrap();
        assert_eq!(rule.name(), "collected_transpose");
        // Names already registered explicitly are left alone.
        let mut mine = Registry::new();
        mine.register::<CollectedTranspose>().unwrap();
        assert!(mine.insert_collected().is_ok());
        assert_eq!(mine.len(), r.len());
    }

    #[test]
    fn edit_distance_counts_edits() {
        assert_eq!(edit_distance("matmul", "matmul"), 0);
        assert_eq!(edit_distance("matmal", "matmul"), 1);
        assert_eq!(edit_distance("softmx", "softmax"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
    }
}

/// A rule submitted by `#[spmd_rule]` when the `inventory` feature is on.
#[cfg(feature = "inventory")]
#[doc(hidden)]
pub struct Collected(pub fn() -> RuleInfo);

#[cfg(feature = "inventory")]
inventory::collect!(Collected);

#[cfg(feature = "inventory")]
impl Registry {
    /// A registry holding every rule declared with `#[spmd_rule]` in any
    /// crate linked into the program (feature `inventory`). The explicit
    /// registry stays the primary API: a crate whose items the program never
    /// names may not be linked, and then its rules are not here.
    pub fn with_collected() -> Result<Registry, SpmdError> {
        let mut r = Registry::new();
        r.insert_collected()?;
        Ok(r)
    }

    /// Adds every collected rule whose name is not registered yet, in name
    /// order; a name collected twice is an error.
    pub fn insert_collected(&mut self) -> Result<&mut Registry, SpmdError> {
        let mut infos: Vec<RuleInfo> = inventory::iter::<Collected>
            .into_iter()
            .map(|c| (c.0)())
            .collect();
        infos.sort_by_key(|i| i.name);
        for w in infos.windows(2) {
            if w[0].name == w[1].name {
                return Err(SpmdError::DuplicateRule {
                    name: w[0].name.to_string(),
                });
            }
        }
        for info in infos {
            if !self.contains(info.name) {
                self.insert(info)?;
            }
        }
        Ok(self)
    }
}
