//! Rust errors as the Python exceptions of `spmd.errors`, and the guard
//! that keeps a panic from ever reaching Python.
//!
//! The exception classes are defined in Python (so that `InputError` can
//! also be a `ValueError`, `UnknownOpError` a `KeyError`); a Rust error is
//! raised as the class its kind maps to, with the Rust message unchanged.

use std::panic::{AssertUnwindSafe, catch_unwind};

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;
use spmd_autoshard::AutoshardError;
use spmd_core::SpmdError;
use spmd_core::json::JsonError;
use spmd_graph::GraphError;

/// The classes of `spmd.errors`, by name.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    Input,
    UnknownOp,
    Notation,
    Mesh,
    Layout,
    Shape,
    Conflict,
    Attr,
    Rule,
    Graph,
    UnsupportedOps,
    Plan,
    NoPlanFits,
    Internal,
}

impl Kind {
    fn class_name(self) -> &'static str {
        match self {
            Kind::Input => "InputError",
            Kind::UnknownOp => "UnknownOpError",
            Kind::Notation => "NotationError",
            Kind::Mesh => "MeshError",
            Kind::Layout => "LayoutError",
            Kind::Shape => "ShapeError",
            Kind::Conflict => "ConflictError",
            Kind::Attr => "AttrError",
            Kind::Rule => "RuleError",
            Kind::Graph => "GraphError",
            Kind::UnsupportedOps => "UnsupportedOpsError",
            Kind::Plan => "PlanError",
            Kind::NoPlanFits => "NoPlanFitsError",
            Kind::Internal => "InternalError",
        }
    }
}

static ERRORS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

/// The exception of `kind` with `message`.
pub fn error(kind: Kind, message: impl Into<String>) -> PyErr {
    let message = message.into();
    Python::attach(|py| {
        let class = ERRORS
            .get_or_try_init(py, || py.import("spmd.errors").map(Bound::unbind))
            .and_then(|m| m.bind(py).getattr(kind.class_name()))
            .and_then(|c| c.cast_into::<PyType>().map_err(PyErr::from));
        match class {
            Ok(class) => PyErr::from_type(class, message),
            // `spmd.errors` ships with the module; without it the message
            // still arrives.
            Err(_) => pyo3::exceptions::PyRuntimeError::new_err(message),
        }
    })
}

/// An error with `what` (the argument it is about) in front.
pub fn input(what: &str, message: impl std::fmt::Display) -> PyErr {
    error(Kind::Input, format!("{what}: {message}"))
}

/// The exception class a core error is raised as.
pub fn kind_of(e: &SpmdError) -> Kind {
    match e {
        SpmdError::InvalidMesh { .. } | SpmdError::MeshMismatch { .. } => Kind::Mesh,
        SpmdError::Notation(_) => Kind::Notation,
        SpmdError::Arity { .. }
        | SpmdError::Rank { .. }
        | SpmdError::ShapeMismatch { .. }
        | SpmdError::CompoundExtent { .. }
        | SpmdError::OutputShapesNeeded { .. }
        | SpmdError::AbsentTensor { .. } => Kind::Shape,
        SpmdError::MappingLength { .. }
        | SpmdError::MeshDimOutOfRange { .. }
        | SpmdError::MeshDimReused { .. }
        | SpmdError::PartialOutOfRange { .. }
        | SpmdError::PartialAndSharded { .. } => Kind::Layout,
        SpmdError::AxisConflict { .. } | SpmdError::MeshDimConflict { .. } => Kind::Conflict,
        SpmdError::InvalidAttr { .. } | SpmdError::UnknownAttr { .. } => Kind::Attr,
        SpmdError::UnknownRule { .. } => Kind::UnknownOp,
        _ => Kind::Rule,
    }
}

pub fn core(e: SpmdError) -> PyErr {
    error(kind_of(&e), e.to_string())
}

pub fn json(e: JsonError) -> PyErr {
    let kind = match e {
        JsonError::Parse(_) | JsonError::ParseAt { .. } => Kind::Input,
        _ => Kind::Layout,
    };
    error(kind, e.to_string())
}

/// The exception class a graph error is raised as.
pub fn graph_kind(e: &GraphError) -> Kind {
    match e {
        GraphError::MissingRules { .. } => Kind::UnsupportedOps,
        GraphError::BadPlan { .. } | GraphError::BadAnnotation { .. } => Kind::Plan,
        GraphError::EmptyMesh => Kind::Mesh,
        _ => Kind::Graph,
    }
}

pub fn graph(e: GraphError) -> PyErr {
    error(graph_kind(&e), e.to_string())
}

pub fn autoshard(e: AutoshardError) -> PyErr {
    match e {
        AutoshardError::Graph(g) => graph(g),
        AutoshardError::BadMesh { .. } => error(Kind::Mesh, e.to_string()),
        AutoshardError::NoPlanFits { smallest, .. } => {
            let message = e.to_string();
            Python::attach(|py| {
                let err = error(Kind::NoPlanFits, message);
                let _ = err.value(py).setattr("smallest", smallest);
                err
            })
        }
        _ => error(Kind::Rule, e.to_string()),
    }
}

/// Runs `f`, turning a panic into `InternalError`: no Rust panic crosses
/// into Python, whatever the input.
pub fn guard<T>(f: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            Err(error(
                Kind::Internal,
                format!("internal error in spmd (please report it): {what}"),
            ))
        }
    }
}
