//! Name -> rule (docs/semantics.md §6). An explicit [`Registry`] value is the primary API:
//! deterministic, testable, and free of linker tricks; [`global`] offers a
//! process-wide one for `std` users.

use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use crate::attrs::Attrs;
use crate::error::SpmdError;
use crate::op::Op;
use crate::rule::SpmdRule;

/// One registered rule: how to list it and how to build it from attributes.
#[derive(Clone, Copy, Debug)]
pub struct RuleInfo {
    pub name: &'static str,
    pub notations: &'static [&'static str],
    pub attrs: &'static [&'static str],
    /// Tensor names, when the rule declares them (else empty).
    pub inputs: &'static [&'static str],
    pub outputs: &'static [&'static str],
    /// Inputs without a gradient (bit `i` = input `i`).
    pub no_grad: u64,
    pub build: fn(&Attrs) -> Result<Box<dyn SpmdRule>, SpmdError>,
}

impl RuleInfo {
    /// The entry of an op type.
    pub fn of<O: Op>() -> RuleInfo {
        RuleInfo {
            name: O::NAME,
            notations: O::NOTATIONS,
            attrs: O::ATTRS,
            inputs: O::INPUTS,
            outputs: O::OUTPUTS,
            no_grad: O::NO_GRAD,
            build: |attrs| Ok(Box::new(O::from_attrs(attrs)?)),
        }
    }

    /// The same entry under another name (Paddle registers one rule under
    /// several names: `embedding` and `lookup_table_v2`).
    pub fn renamed(mut self, name: &'static str) -> RuleInfo {
        self.name = name;
        self
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

    /// Builds the rule `name` from attributes.
    pub fn build(&self, name: &str, attrs: &Attrs) -> Result<Box<dyn SpmdRule>, SpmdError> {
        (self.get(name)?.build)(attrs)
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

    /// Up to three registered names close to `name` (edit distance at most a
    /// third of its length, or sharing it as a prefix), nearest first.
    fn near(&self, name: &str) -> Vec<String> {
        let limit = (name.len() / 3).max(1);
        let mut scored: Vec<(usize, &str)> = self
            .rules
            .keys()
            .map(|k| (edit_distance(name, k), *k))
            .filter(|(d, k)| *d <= limit || (name.len() >= 3 && k.starts_with(name)))
            .collect();
        scored.sort();
        scored
            .into_iter()
            .take(3)
            .map(|(_, k)| k.to_string())
            .collect()
    }
}

/// Levenshtein distance over bytes (names are ASCII).
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, &ca) in a.iter().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let next = (diag + usize::from(ca != cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            diag = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
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
