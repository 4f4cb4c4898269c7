//! Meshes and layouts: Python values to the core's, and back, in Paddle's
//! dims mappings and in DTensor's placements.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyInt, PyList, PyTuple};
use spmd_cli::parse::TensorArg;
use spmd_core::json::{Mapping, MappingEntry, Tensor};
use spmd_core::{DimsMapping, DistAttr, MeshDim, Partial, ReduceType};

use crate::errors::{self, Kind, guard, input};

/// A device mesh: an N-d grid of devices, ids row-major.
///
/// >>> spmd.Mesh([2, 4])
/// Mesh([2, 4])
#[pyclass(module = "spmd", frozen, eq, hash)]
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Mesh {
    pub inner: spmd_core::Mesh,
}

#[pymethods]
impl Mesh {
    #[new]
    fn new(shape: &Bound<'_, PyAny>) -> PyResult<Mesh> {
        guard(|| {
            Ok(Mesh {
                inner: mesh_of(shape)?,
            })
        })
    }

    /// The extent of each mesh dim.
    #[getter]
    fn shape(&self) -> Vec<usize> {
        self.inner.shape().to_vec()
    }

    /// The number of mesh dims.
    #[getter]
    fn ndim(&self) -> usize {
        self.inner.shape().len()
    }

    /// The number of devices.
    #[getter]
    fn size(&self) -> usize {
        self.inner.shape().iter().product()
    }

    fn __repr__(&self) -> String {
        format!("Mesh({:?})", self.inner.shape())
    }
}

/// A mesh from an `spmd.Mesh` or a list of extents.
pub fn mesh_of(obj: &Bound<'_, PyAny>) -> PyResult<spmd_core::Mesh> {
    if let Ok(m) = obj.cast::<Mesh>() {
        return Ok(m.get().inner.clone());
    }
    let shape: Vec<i64> = ints(obj, "mesh")?;
    let shape = shape
        .iter()
        .map(|&e| usize::try_from(e))
        .collect::<Result<Vec<usize>, _>>()
        .map_err(|_| {
            errors::error(
                Kind::Mesh,
                format!("mesh {shape:?}: extents must be positive"),
            )
        })?;
    spmd_core::Mesh::new(&shape).map_err(errors::core)
}

/// A list of ints, refusing strings and anything else.
fn ints(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<i64>> {
    if obj.is_instance_of::<pyo3::types::PyString>() {
        return Err(input(what, "expected a list of ints, got a str"));
    }
    obj.extract::<Vec<i64>>()
        .map_err(|_| input(what, format!("expected a list of ints, got {}", repr(obj))))
}

fn repr(obj: &Bound<'_, PyAny>) -> String {
    obj.repr()
        .map(|r| r.to_string())
        .unwrap_or_else(|_| "an unprintable value".into())
}

/// One tensor of a call: `None` (an absent optional tensor), a shape (a
/// replicated tensor), a `(shape, dims_mapping)` or `(shape, dims_mapping,
/// partial)` tuple, or an object with `shape`, `dims_mapping` and
/// `partial` attributes (`spmd.Tensor`). `what` names it in errors
/// (`input 0`); it is built only when one is raised, since this runs on
/// every call.
pub fn tensor_arg(
    obj: &Bound<'_, PyAny>,
    what: &dyn Fn() -> String,
) -> PyResult<Option<TensorArg>> {
    if obj.is_none() {
        return Ok(None);
    }
    let parts = if let Some(items) = sequence(obj) {
        let shape_only = items.first().is_none_or(|i| i.is_instance_of::<PyInt>());
        if shape_only {
            (obj.clone(), None, None)
        } else if (2..=3).contains(&items.len()) {
            let mut items = items.into_iter();
            let shape = items.next();
            let mapping = items.next();
            (shape.unwrap_or_else(|| obj.clone()), mapping, items.next())
        } else {
            return Err(input(
                &what(),
                format!(
                    "expected a shape, (shape, dims_mapping) or (shape, dims_mapping, partial), got {}",
                    repr(obj)
                ),
            ));
        }
    } else if obj.hasattr("dims_mapping")? && obj.hasattr("shape")? {
        let partial = if obj.hasattr("partial")? {
            Some(obj.getattr("partial")?)
        } else {
            None
        };
        (
            obj.getattr("shape")?,
            Some(obj.getattr("dims_mapping")?),
            partial,
        )
    } else {
        return Err(input(
            &what(),
            format!(
                "expected None, a shape, a (shape, dims_mapping) tuple or an spmd.Tensor, got {}",
                repr(obj)
            ),
        ));
    };
    let (shape, mapping, partial) = parts;
    let shape = ints(&shape, &format!("{}: shape", what()))?;
    let mapping = mapping.filter(|m| !m.is_none());
    let partial = partial.filter(|p| !p.is_none());
    // The common case, a mapping of ints and no partial values, is read
    // directly; anything else goes through the checked JSON form, which
    // says what is wrong with it.
    if partial.is_none() && shape.iter().all(|&e| e >= 0) {
        let direct = match &mapping {
            None => Some(None),
            Some(m) => sequence(m)
                .and_then(|items| {
                    items
                        .iter()
                        .map(|i| i.extract::<i64>().ok())
                        .collect::<Option<Vec<i64>>>()
                })
                .and_then(|ints| DimsMapping::from_paddle(&ints))
                .map(Some),
        };
        if let Some(mapping) = direct {
            return Ok(Some(TensorArg {
                text: String::new(),
                shape: shape.iter().map(|&e| e as usize).collect(),
                mapping,
                partial: Partial::default(),
            }));
        }
    }
    let dims_mapping = match mapping {
        Some(m) => Some(mapping_of(&m, &format!("{}: dims_mapping", what()))?),
        None => None,
    };
    let (partial_dims, partial_reduce) = match partial {
        Some(p) => partial_of(&p, &format!("{}: partial", what()))?,
        None => (Vec::new(), None),
    };
    let given = Tensor {
        shape: Some(shape),
        dims_mapping: dims_mapping.clone(),
        partial_dims,
        partial_reduce,
    };
    let (shape, attr) = given
        .to_parts()
        .map_err(|e| errors::error(Kind::Layout, format!("{}: {e}", what())))?;
    Ok(Some(TensorArg {
        text: String::new(),
        shape,
        mapping: dims_mapping.map(|_| attr.dims_mapping.clone()),
        partial: attr.partial,
    }))
}

/// The items of a list or tuple; `None` for anything else.
pub fn sequence<'py>(obj: &Bound<'py, PyAny>) -> Option<Vec<Bound<'py, PyAny>>> {
    if let Ok(t) = obj.cast::<PyTuple>() {
        Some(t.iter().collect())
    } else if let Ok(l) = obj.cast::<PyList>() {
        Some(l.iter().collect())
    } else {
        None
    }
}

/// A dims mapping: per dim `-1`, a mesh dim, or a list of mesh dims
/// (co-sharded, major first).
fn mapping_of(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Mapping> {
    if obj.is_instance_of::<pyo3::types::PyString>() {
        return Err(input(what, "expected a list, got a str"));
    }
    let items: Vec<Bound<'_, PyAny>> = obj
        .extract()
        .map_err(|_| input(what, format!("expected a list, got {}", repr(obj))))?;
    items
        .iter()
        .map(|item| {
            if let Ok(d) = item.extract::<i64>() {
                Ok(MappingEntry::Dim(d))
            } else {
                ints(item, what).map(MappingEntry::Co)
            }
        })
        .collect::<PyResult<Vec<_>>>()
        .map(Mapping)
}

type PartialParts = (Vec<i64>, Option<std::collections::BTreeMap<String, String>>);

/// Partial status: a list of mesh dims (summed), or a dict from mesh dim
/// to reduce type (`"sum"`, `"avg"`, `"max"`, ...).
fn partial_of(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<PartialParts> {
    if let Ok(d) = obj.cast::<PyDict>() {
        let mut dims = Vec::new();
        let mut reduce = std::collections::BTreeMap::new();
        for (k, v) in d.iter() {
            let dim: i64 = k
                .extract()
                .map_err(|_| input(what, format!("a key must be a mesh dim, got {}", repr(&k))))?;
            let r: String = v.extract().map_err(|_| {
                input(
                    what,
                    format!("a value must be a reduce type name, got {}", repr(&v)),
                )
            })?;
            dims.push(dim);
            reduce.insert(dim.to_string(), r);
        }
        return Ok((dims, Some(reduce)));
    }
    Ok((ints(obj, what)?, None))
}

/// A tensor's layout: its dims mapping (Paddle's form: per dim `-1` or
/// the mesh dim splitting it, a list where several do) and the mesh dims
/// it holds partial values over.
///
/// >>> r = spmd.infer("matmul", spmd.Mesh([2, 4]), inputs=[([64, 32], [1, 0]), ([32, 48], [-1, -1])])
/// >>> r.outputs[0].dims_mapping
/// [1, -1]
#[pyclass(module = "spmd", frozen)]
#[derive(Clone)]
pub struct Layout {
    pub attr: DistAttr,
    pub shape: Option<Vec<usize>>,
    pub mesh: spmd_core::Mesh,
}

#[pymethods]
impl Layout {
    #[new]
    #[pyo3(signature = (mesh, dims_mapping, partial = None, shape = None))]
    fn new(
        mesh: &Bound<'_, PyAny>,
        dims_mapping: &Bound<'_, PyAny>,
        partial: Option<&Bound<'_, PyAny>>,
        shape: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Layout> {
        guard(|| {
            let mesh = mesh_of(mesh)?;
            let mapping = mapping_of(dims_mapping, "dims_mapping")?;
            let (partial_dims, partial_reduce) = match partial.filter(|p| !p.is_none()) {
                Some(p) => partial_of(p, "partial")?,
                None => (Vec::new(), None),
            };
            let rank = mapping.0.len();
            let shape = match shape.filter(|s| !s.is_none()) {
                Some(s) => Some(ints(s, "shape")?),
                None => None,
            };
            let given = Tensor {
                shape: Some(shape.clone().unwrap_or_else(|| vec![0; rank])),
                dims_mapping: Some(mapping),
                partial_dims,
                partial_reduce,
            };
            let (shape_parts, attr) = given.to_parts().map_err(errors::json)?;
            let layout = Layout {
                attr,
                shape: shape.map(|_| shape_parts),
                mesh,
            };
            layout.check()?;
            Ok(layout)
        })
    }

    /// Per tensor dim: `-1`, the mesh dim splitting it, or a list of mesh
    /// dims (co-sharded, major first).
    #[getter]
    fn dims_mapping<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let entries: Vec<Bound<'py, PyAny>> = self
            .attr
            .dims_mapping
            .as_slice()
            .iter()
            .map(|s| {
                let dims: Vec<MeshDim> = s.iter().collect();
                match dims.as_slice() {
                    [] => Ok((-1i64).into_pyobject(py)?.into_any()),
                    [d] => Ok(i64::from(*d).into_pyobject(py)?.into_any()),
                    _ => PyList::new(py, dims).map(|v| v.into_any()),
                }
            })
            .collect::<PyResult<_>>()?;
        PyList::new(py, entries)
    }

    /// Mesh dim -> reduce type (`"sum"`, `"avg"`, ...) of the partial
    /// values the tensor holds; empty when it holds none.
    #[getter]
    fn partial<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (dim, r) in self.attr.partial.iter() {
            d.set_item(dim, reduce_name(r))?;
        }
        Ok(d)
    }

    #[getter]
    fn is_partial(&self) -> bool {
        self.attr.partial.is_partial()
    }

    /// The global shape, when the call knew it.
    #[getter]
    fn shape(&self) -> Option<Vec<usize>> {
        self.shape.clone()
    }

    #[getter]
    fn mesh(&self) -> Mesh {
        Mesh {
            inner: self.mesh.clone(),
        }
    }

    /// DTensor's placements, one per mesh dim: `"Shard(d)"`,
    /// `"Replicate()"` or `"Partial(sum)"`. A dim co-sharded with its minor
    /// mesh dim first has no such form and raises `LayoutError`.
    fn placements(&self) -> PyResult<Vec<String>> {
        guard(|| placements(&self.attr, self.mesh.shape().len()))
    }

    /// The layout DTensor's `placements` describe (see
    /// [`Layout.placements`]), for a tensor of rank `ndim`.
    #[staticmethod]
    #[pyo3(signature = (mesh, placements, ndim))]
    fn from_placements(
        mesh: &Bound<'_, PyAny>,
        placements: Vec<String>,
        ndim: usize,
    ) -> PyResult<Layout> {
        guard(|| {
            let mesh = mesh_of(mesh)?;
            let attr = from_placements(&placements, ndim, mesh.shape().len())?;
            Ok(Layout {
                attr,
                shape: None,
                mesh,
            })
        })
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<Layout>()
            .is_ok_and(|o| o.get().attr == self.attr && o.get().mesh == self.mesh)
    }

    fn __str__(&self) -> String {
        self.attr.to_string()
    }

    fn __repr__(&self) -> String {
        let partial = self
            .attr
            .partial
            .iter()
            .map(|(d, r)| format!("{d}: '{}'", reduce_name(r)))
            .collect::<Vec<_>>();
        let mut s = format!("Layout({}", self.attr.dims_mapping);
        if !partial.is_empty() {
            s.push_str(&format!(", partial={{{}}}", partial.join(", ")));
        }
        if let Some(shape) = &self.shape {
            s.push_str(&format!(", shape={shape:?}"));
        }
        s.push(')');
        s
    }

    /// The picture `spmd show` prints: the layout in words, then which
    /// device holds which block. Needs the shape.
    fn show(&self) -> PyResult<String> {
        guard(|| {
            let shape = self.shape.as_ref().ok_or_else(|| {
                errors::error(
                    Kind::Layout,
                    "layout without a shape: give shape= to draw it",
                )
            })?;
            spmd_cli::cmd::show::picture_of(&self.mesh, shape, &self.attr)
                .map(|t| crate::plain(&t))
                .ok_or_else(|| {
                    errors::error(Kind::Layout, "`show` draws meshes of at most 4096 devices")
                })
        })
    }

    /// The picture `spmd show` draws, as SVG (notebooks show it); `None`
    /// when the shape is not known.
    fn _repr_svg_(&self) -> Option<String> {
        let shape = self.shape.as_ref()?;
        spmd_cli::cmd::show::svg_of(&self.mesh, shape, &self.attr)
    }
}

impl Layout {
    /// Checks the layout against its mesh (and shape, when known).
    fn check(&self) -> PyResult<()> {
        let rank = self.attr.dims_mapping.rank();
        let arg = TensorArg {
            text: String::new(),
            shape: self.shape.clone().unwrap_or_else(|| vec![1; rank]),
            mapping: Some(self.attr.dims_mapping.clone()),
            partial: self.attr.partial,
        };
        arg.check(&self.mesh)
            .map_err(|e| errors::error(Kind::Layout, format!("layout {}: {e}", self.attr)))
    }
}

/// `sum`, `avg`, `max`, ...: DTensor's names.
pub fn reduce_name(r: ReduceType) -> String {
    r.paddle_name().to_ascii_lowercase()
}

pub fn placements(attr: &DistAttr, mesh_rank: usize) -> PyResult<Vec<String>> {
    let mut out = vec!["Replicate()".to_string(); mesh_rank];
    for (dim, s) in attr.dims_mapping.as_slice().iter().enumerate() {
        let dims: Vec<MeshDim> = s.iter().collect();
        if dims.windows(2).any(|w| w[0] > w[1]) {
            return Err(errors::error(
                Kind::Layout,
                format!(
                    "layout {attr}: dim {dim} is split over mesh dims {dims:?} with a later mesh dim major; DTensor's placements split a dim over mesh dims in mesh-dim order"
                ),
            ));
        }
        for d in dims {
            if let Some(slot) = out.get_mut(usize::from(d)) {
                *slot = format!("Shard({dim})");
            }
        }
    }
    for (d, r) in attr.partial.iter() {
        if let Some(slot) = out.get_mut(usize::from(d)) {
            *slot = format!("Partial({})", reduce_name(r));
        }
    }
    Ok(out)
}

pub fn from_placements(placements: &[String], ndim: usize, mesh_rank: usize) -> PyResult<DistAttr> {
    if placements.len() != mesh_rank {
        return Err(errors::error(
            Kind::Layout,
            format!(
                "{} placements for a mesh of {mesh_rank} dims: one per mesh dim",
                placements.len()
            ),
        ));
    }
    let mut mapping = DimsMapping::replicated(ndim);
    let mut partial = Partial::default();
    for (mesh_dim, p) in placements.iter().enumerate() {
        let text = p.trim();
        let (name, arg) = match text.split_once('(') {
            Some((name, rest)) => (name.trim(), rest.strip_suffix(')').map(str::trim)),
            None => (text, Some("")),
        };
        let bad = || {
            errors::error(
                Kind::Layout,
                format!(
                    "placement {mesh_dim} `{p}`: expected Shard(d), Replicate() or Partial(sum|avg|max|min)"
                ),
            )
        };
        let arg = arg.ok_or_else(bad)?;
        let mesh_dim = mesh_dim as MeshDim;
        match name {
            "Replicate" | "R" if arg.is_empty() => {}
            "Shard" | "S" => {
                let dim: usize = arg.parse().map_err(|_| bad())?;
                let s = mapping.get_mut(dim).ok_or_else(|| {
                    errors::error(
                        Kind::Layout,
                        format!(
                            "placement {mesh_dim} `{p}`: a tensor of rank {ndim} has no dim {dim}"
                        ),
                    )
                })?;
                s.push(mesh_dim);
            }
            "Partial" | "P" => {
                let r = if arg.is_empty() {
                    ReduceType::Sum
                } else {
                    ReduceType::from_name(arg).ok_or_else(bad)?
                };
                partial.set(mesh_dim, r);
            }
            _ => return Err(bad()),
        }
    }
    Ok(DistAttr::new(mapping).with_partial(partial))
}
