//! The native module of the `spmd` Python package (`spmd._spmd`): the
//! core's rule calls, layouts, graphs and the plan search, as Python
//! classes and functions. The pure-Python part (`python/spmd`) re-exports
//! them and defines the exceptions.
//!
//! Every entry point runs under `errors::guard`, so no panic reaches
//! Python, and every Rust error arrives as its `spmd.errors` class.

use pyo3::prelude::*;

mod calls;
mod errors;
mod graphs;
mod json;
mod layouts;

/// Text without its ANSI styles: the CLI's reports, as Python shows them.
pub(crate) fn plain(text: &str) -> String {
    anstream::adapter::strip_str(text).to_string()
}

#[pymodule]
fn _spmd(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<layouts::Mesh>()?;
    m.add_class::<layouts::Layout>()?;
    m.add_class::<calls::Rule>()?;
    m.add_class::<calls::InferResult>()?;
    m.add_class::<graphs::Graph>()?;
    m.add_class::<graphs::Propagation>()?;
    m.add_class::<graphs::Autoshard>()?;
    m.add_function(wrap_pyfunction!(calls::infer, m)?)?;
    m.add_function(wrap_pyfunction!(calls::explain, m)?)?;
    m.add_function(wrap_pyfunction!(calls::ops, m)?)?;
    m.add_function(wrap_pyfunction!(calls::signature, m)?)?;
    m.add_function(wrap_pyfunction!(calls::_rust_infer_seconds, m)?)?;
    Ok(())
}
