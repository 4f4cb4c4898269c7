//! Op attributes as Paddle passes them (`trans_x = true`, `axis = [-1]`), and
//! the conversion into an op struct's typed fields.

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;

use crate::error::SpmdError;

/// One attribute value.
#[derive(Clone, Debug, PartialEq)]
pub enum AttrValue {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Bools(Vec<bool>),
    Ints(Vec<i64>),
    Floats(Vec<f64>),
    Strs(Vec<String>),
}

impl fmt::Display for AttrValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn list<T: fmt::Display>(f: &mut fmt::Formatter<'_>, v: &[T]) -> fmt::Result {
            f.write_str("[")?;
            for (i, x) in v.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{x}")?;
            }
            f.write_str("]")
        }
        match self {
            AttrValue::Bool(b) => write!(f, "{b}"),
            AttrValue::Int(i) => write!(f, "{i}"),
            AttrValue::Float(x) => write!(f, "{x}"),
            AttrValue::Str(s) => write!(f, "{s:?}"),
            AttrValue::Bools(v) => list(f, v),
            AttrValue::Ints(v) => list(f, v),
            AttrValue::Floats(v) => list(f, v),
            AttrValue::Strs(v) => list(f, v),
        }
    }
}

/// The attributes of one op call, by Paddle's names. Unknown names are
/// ignored by ops (Paddle passes attributes that no sharding rule reads).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Attrs {
    items: Vec<(String, AttrValue)>,
}

impl Attrs {
    pub fn new() -> Attrs {
        Attrs::default()
    }

    /// Adds or replaces an attribute.
    pub fn set(&mut self, name: &str, value: AttrValue) {
        match self.items.iter_mut().find(|(n, _)| n == name) {
            Some(slot) => slot.1 = value,
            None => self.items.push((name.to_string(), value)),
        }
    }

    /// Builder form of [`Attrs::set`].
    pub fn with(mut self, name: &str, value: impl Into<AttrValue>) -> Attrs {
        self.set(name, value.into());
        self
    }

    pub fn get(&self, name: &str) -> Option<&AttrValue> {
        self.items.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &AttrValue)> {
        self.items.iter().map(|(n, v)| (n.as_str(), v))
    }

    /// The attribute `name` as a `T`; an error when it is missing or of the
    /// wrong kind.
    pub fn require<T: FromAttr>(&self, op: &'static str, name: &str) -> Result<T, SpmdError> {
        match self.get(name) {
            Some(v) => convert(op, name, v),
            None => Err(SpmdError::InvalidAttr {
                op,
                attr: name.to_string(),
                message: alloc::format!("missing (expected {})", T::EXPECTED),
            }),
        }
    }

    /// Every given attribute must be one the op takes (`known`): a typo
    /// must never silently mean "the default" (docs/semantics.md §9).
    ///
    /// ```
    /// use spmd_core::{Attrs, SpmdError};
    ///
    /// let attrs = Attrs::new().with("axsi", 0_i64);
    /// let e = attrs.check_known("softmax", &["axis"]).unwrap_err();
    /// assert_eq!(
    ///     e.to_string(),
    ///     "softmax: unknown attribute `axsi` (did you mean `axis`?); softmax takes: axis"
    /// );
    /// assert!(Attrs::new().with("axis", 0_i64).check_known("softmax", &["axis"]).is_ok());
    /// ```
    pub fn check_known(&self, op: &'static str, known: &[&str]) -> Result<(), SpmdError> {
        for (name, _) in self.iter() {
            if !known.contains(&name) {
                return Err(SpmdError::UnknownAttr {
                    op,
                    attr: name.into(),
                    suggestions: crate::registry::near_names(name, known.iter().copied()),
                    known: known
                        .iter()
                        .map(|k| alloc::string::String::from(*k))
                        .collect(),
                });
            }
        }
        Ok(())
    }

    /// The attribute `name` as a `T`, or `default` when it is missing.
    pub fn get_or<T: FromAttr>(
        &self,
        op: &'static str,
        name: &str,
        default: T,
    ) -> Result<T, SpmdError> {
        match self.get(name) {
            Some(v) => convert(op, name, v),
            None => Ok(default),
        }
    }
}

impl AttrValue {
    /// Whether this is a list with no items. An empty list has no element
    /// type (JSON's `[]`), so every list field accepts one.
    pub fn is_empty_list(&self) -> bool {
        match self {
            AttrValue::Bools(v) => v.is_empty(),
            AttrValue::Ints(v) => v.is_empty(),
            AttrValue::Floats(v) => v.is_empty(),
            AttrValue::Strs(v) => v.is_empty(),
            _ => false,
        }
    }
}

fn convert<T: FromAttr>(op: &'static str, name: &str, v: &AttrValue) -> Result<T, SpmdError> {
    T::from_attr(v).ok_or_else(|| SpmdError::InvalidAttr {
        op,
        attr: name.to_string(),
        message: alloc::format!("expected {}, got {v}", T::EXPECTED),
    })
}

/// Types an op struct's fields may have.
pub trait FromAttr: Sized {
    /// What the value should look like, for error messages.
    const EXPECTED: &'static str;
    fn from_attr(v: &AttrValue) -> Option<Self>;
}

impl FromAttr for bool {
    const EXPECTED: &'static str = "a bool";
    fn from_attr(v: &AttrValue) -> Option<Self> {
        match v {
            AttrValue::Bool(b) => Some(*b),
            _ => None,
        }
    }
}

macro_rules! int_attr {
    ($($t:ty),*) => {$(
        impl FromAttr for $t {
            const EXPECTED: &'static str = concat!("an integer that fits ", stringify!($t));
            fn from_attr(v: &AttrValue) -> Option<Self> {
                match v {
                    AttrValue::Int(i) => <$t>::try_from(*i).ok(),
                    _ => None,
                }
            }
        }
        impl FromAttr for Vec<$t> {
            const EXPECTED: &'static str = concat!("a list of integers that fit ", stringify!($t));
            fn from_attr(v: &AttrValue) -> Option<Self> {
                match v {
                    v if v.is_empty_list() => Some(Vec::new()),
                    AttrValue::Ints(l) => l.iter().map(|&i| <$t>::try_from(i).ok()).collect(),
                    // Paddle accepts a scalar where a one-element list is meant.
                    AttrValue::Int(i) => <$t>::try_from(*i).ok().map(|x| alloc::vec![x]),
                    _ => None,
                }
            }
        }
    )*};
}
int_attr!(i64, i32, usize, u32, u8);

impl FromAttr for f64 {
    const EXPECTED: &'static str = "a number";
    fn from_attr(v: &AttrValue) -> Option<Self> {
        match v {
            AttrValue::Float(x) => Some(*x),
            AttrValue::Int(i) => Some(*i as f64),
            _ => None,
        }
    }
}

impl FromAttr for f32 {
    const EXPECTED: &'static str = "a number";
    fn from_attr(v: &AttrValue) -> Option<Self> {
        f64::from_attr(v).map(|x| x as f32)
    }
}

impl FromAttr for String {
    const EXPECTED: &'static str = "a string";
    fn from_attr(v: &AttrValue) -> Option<Self> {
        match v {
            AttrValue::Str(s) => Some(s.clone()),
            _ => None,
        }
    }
}

impl FromAttr for Vec<bool> {
    const EXPECTED: &'static str = "a list of bools";
    fn from_attr(v: &AttrValue) -> Option<Self> {
        match v {
            v if v.is_empty_list() => Some(Vec::new()),
            AttrValue::Bools(l) => Some(l.clone()),
            _ => None,
        }
    }
}

impl FromAttr for Vec<String> {
    const EXPECTED: &'static str = "a list of strings";
    fn from_attr(v: &AttrValue) -> Option<Self> {
        match v {
            v if v.is_empty_list() => Some(Vec::new()),
            AttrValue::Strs(l) => Some(l.clone()),
            _ => None,
        }
    }
}

impl<T: FromAttr> FromAttr for Option<T> {
    const EXPECTED: &'static str = T::EXPECTED;
    fn from_attr(v: &AttrValue) -> Option<Self> {
        T::from_attr(v).map(Some)
    }
}

macro_rules! into_attr {
    ($($t:ty => $v:ident $(as $c:ty)?),*) => {$(
        impl From<$t> for AttrValue {
            fn from(x: $t) -> AttrValue {
                AttrValue::$v(x $(as $c)?)
            }
        }
    )*};
}
into_attr!(bool => Bool, i64 => Int, i32 => Int as i64, usize => Int as i64, f64 => Float,
    String => Str, Vec<i64> => Ints, Vec<bool> => Bools, Vec<f64> => Floats, Vec<String> => Strs);

impl From<&str> for AttrValue {
    fn from(s: &str) -> AttrValue {
        AttrValue::Str(s.to_string())
    }
}

impl From<&[i64]> for AttrValue {
    fn from(v: &[i64]) -> AttrValue {
        AttrValue::Ints(v.to_vec())
    }
}

#[cfg(feature = "serde")]
impl Attrs {
    /// From a JSON object of Paddle attributes (`{"trans_x": false, "axis": [-1]}`).
    /// `null` values are skipped; nested objects and mixed lists are errors.
    pub fn from_json(op: &'static str, value: &serde_json::Value) -> Result<Attrs, SpmdError> {
        use serde_json::Value;
        let bad = |name: &str, why: &str| SpmdError::InvalidAttr {
            op,
            attr: name.to_string(),
            message: why.to_string(),
        };
        let mut attrs = Attrs::new();
        let map = match value {
            Value::Null => return Ok(attrs),
            Value::Object(map) => map,
            _ => return Err(bad("<attrs>", "attributes must be a JSON object")),
        };
        for (name, v) in map {
            let value = match v {
                Value::Null => continue,
                Value::Bool(b) => AttrValue::Bool(*b),
                Value::Number(n) => match n.as_i64() {
                    Some(i) => AttrValue::Int(i),
                    None => AttrValue::Float(n.as_f64().unwrap_or(f64::NAN)),
                },
                Value::String(s) => AttrValue::Str(s.clone()),
                Value::Array(items) => list_from_json(items).ok_or_else(|| {
                    bad(
                        name,
                        "a list must hold only bools, only integers, only numbers or only strings",
                    )
                })?,
                Value::Object(_) => {
                    return Err(bad(name, "nested objects are not attribute values"));
                }
            };
            attrs.set(name, value);
        }
        Ok(attrs)
    }
}

#[cfg(feature = "serde")]
fn list_from_json(items: &[serde_json::Value]) -> Option<AttrValue> {
    use serde_json::Value;
    if items.iter().all(Value::is_boolean) {
        Some(AttrValue::Bools(
            items.iter().filter_map(Value::as_bool).collect(),
        ))
    } else if items.iter().all(|v| v.as_i64().is_some()) {
        Some(AttrValue::Ints(
            items.iter().filter_map(Value::as_i64).collect(),
        ))
    } else if items.iter().all(Value::is_number) {
        Some(AttrValue::Floats(
            items.iter().filter_map(Value::as_f64).collect(),
        ))
    } else if items.iter().all(Value::is_string) {
        Some(AttrValue::Strs(
            items
                .iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect(),
        ))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_access_and_errors_name_the_attribute() {
        let a = Attrs::new()
            .with("trans_x", true)
            .with("axis", alloc::vec![-1i64]);
        assert!(a.require::<bool>("matmul", "trans_x").unwrap());
        assert_eq!(a.require::<Vec<i64>>("sum", "axis").unwrap(), [-1]);
        assert!(!a.get_or("matmul", "trans_y", false).unwrap());
        let e = a
            .require::<bool>("matmul", "trans_y")
            .unwrap_err()
            .to_string();
        assert_eq!(e, "matmul: attribute `trans_y`: missing (expected a bool)");
        let e = a
            .require::<i64>("matmul", "trans_x")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("expected an integer") && e.contains("got true"),
            "{e}"
        );
    }

    #[test]
    fn an_empty_list_fits_every_list_field() {
        let a = Attrs::new().with("axis", Vec::<bool>::new());
        assert_eq!(
            a.require::<Vec<i64>>("sum", "axis").unwrap(),
            Vec::<i64>::new()
        );
        assert_eq!(
            a.require::<Vec<String>>("op", "axis").unwrap(),
            Vec::<String>::new()
        );
        assert!(a.require::<i64>("op", "axis").is_err());
    }

    #[test]
    fn integers_must_fit_the_field() {
        let a = Attrs::new().with("n", -1i64);
        assert!(a.require::<usize>("op", "n").is_err());
        assert_eq!(a.require::<i32>("op", "n").unwrap(), -1);
    }
}
