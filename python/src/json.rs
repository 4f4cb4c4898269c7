//! Python values as JSON values: attributes, plan annotations.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::{Map, Number, Value};

use crate::errors::input;

/// `obj` as JSON: None, bools, ints, floats, strs, lists, tuples and dicts
/// with str keys.
pub fn value_of(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Value> {
    if obj.is_none() {
        Ok(Value::Null)
    } else if obj.is_instance_of::<PyBool>() {
        Ok(Value::Bool(obj.extract()?))
    } else if obj.is_instance_of::<PyInt>() {
        let v: i64 = obj
            .extract()
            .map_err(|_| input(what, "an int beyond 64 bits"))?;
        Ok(Value::from(v))
    } else if obj.is_instance_of::<PyFloat>() {
        let v: f64 = obj.extract()?;
        Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| input(what, format!("{v} is not a finite number")))
    } else if obj.is_instance_of::<PyString>() {
        Ok(Value::String(obj.extract()?))
    } else if obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>() {
        obj.try_iter()?
            .map(|item| value_of(&item?, what))
            .collect::<PyResult<Vec<_>>>()
            .map(Value::Array)
    } else if let Ok(d) = obj.cast::<PyDict>() {
        let mut map = Map::new();
        for (k, v) in d.iter() {
            let key: String = k
                .extract()
                .map_err(|_| input(what, "dict keys must be str"))?;
            let value = value_of(&v, &format!("{what}[{key:?}]"))?;
            map.insert(key, value);
        }
        Ok(Value::Object(map))
    } else {
        let t = obj
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default();
        Err(input(what, format!("a value of type {t} has no JSON form")))
    }
}
