//! Templates bound per call (docs/semantics.md §3): the attribute values a
//! template's selectors read ([`Positions`]) and the errors of a binding,
//! named by op and attribute.

use spmd_notation::{BindError, Pos, Template};

use crate::error::SpmdError;
use crate::op::Call;

/// An attribute a template selector reads (`@{axis:a}`, `@[perm]`): the
/// positions it picks. Integers pick one position, lists several (negative
/// values count from the end).
///
/// A method selector (`@{reduced():-}`) returns a [`Pos`] itself, so a rule
/// can say "every dim when the list is empty":
///
/// ```
/// use spmd_core::notation::Pos;
///
/// struct Sum { axis: Vec<i64> }
/// impl Sum {
///     fn reduced(&self) -> Pos<'_> {
///         if self.axis.is_empty() { Pos::All } else { Pos::List(&self.axis) }
///     }
/// }
/// assert_eq!(Sum { axis: vec![] }.reduced(), Pos::All);
/// ```
pub trait Positions {
    fn positions(&self) -> Pos<'_>;
}

impl Positions for i64 {
    fn positions(&self) -> Pos<'_> {
        Pos::Int(*self)
    }
}

impl Positions for [i64] {
    fn positions(&self) -> Pos<'_> {
        Pos::List(self)
    }
}

impl Positions for alloc::vec::Vec<i64> {
    fn positions(&self) -> Pos<'_> {
        Pos::List(self)
    }
}

impl Positions for Pos<'_> {
    fn positions(&self) -> Pos<'_> {
        *self
    }
}

/// What a method selector may return: a [`Pos`] or an integer.
pub trait IntoPos<'a> {
    fn into_pos(self) -> Pos<'a>;
}

impl<'a> IntoPos<'a> for Pos<'a> {
    fn into_pos(self) -> Pos<'a> {
        self
    }
}

impl<'a> IntoPos<'a> for i64 {
    fn into_pos(self) -> Pos<'a> {
        Pos::Int(self)
    }
}

impl<'a> IntoPos<'a> for &'a [i64] {
    fn into_pos(self) -> Pos<'a> {
        Pos::List(self)
    }
}

/// A binding error as the op's error: the attribute a selector reads, the
/// value, and the rank it was checked against.
pub(crate) fn bind_error(
    op: &'static str,
    t: &Template<'_>,
    call: &Call<'_>,
    e: BindError,
) -> SpmdError {
    let attr = |k: u8| -> alloc::string::String {
        let name = t.selectors.get(k as usize).copied().unwrap_or("?");
        name.strip_suffix("()")
            .or_else(|| name.strip_suffix("(call)"))
            .unwrap_or(name)
            .into()
    };
    match e {
        BindError::OutOfRange {
            selector,
            value,
            rank,
        } => SpmdError::InvalidAttr {
            op,
            attr: attr(selector),
            message: alloc::format!("axis {value} is out of range for a tensor of rank {rank}"),
        },
        BindError::NotOne { selector, count } => SpmdError::InvalidAttr {
            op,
            attr: attr(selector),
            message: alloc::format!("selects {count} dims where the rule takes exactly one"),
        },
        BindError::NoneGiven { side } => SpmdError::Rejected {
            op,
            message: alloc::format!("no {side}s given; the rule takes at least one"),
        },
        BindError::BadCount { selector, value } => SpmdError::InvalidAttr {
            op,
            attr: attr(selector),
            message: alloc::format!("makes {value} tensors, and the rule takes at least one"),
        },
        BindError::NotPermutation { selector, rank } => SpmdError::InvalidAttr {
            op,
            attr: attr(selector),
            message: alloc::format!(
                "is not a permutation of the {rank} dims (each of 0..{rank} once; negative values count from the end)"
            ),
        },
        BindError::RankBelow { need, rank } => SpmdError::Rejected {
            op,
            message: alloc::format!(
                "input 0 has rank {rank}, and the rule writes {need} of its dims out"
            ),
        },
        BindError::TooLarge {
            what: "labels",
            limit,
        } => SpmdError::Rejected {
            op,
            message: alloc::format!(
                "input 0 has rank {}, above the {limit} axes a notation can name",
                call.input_rank(0).unwrap_or(0)
            ),
        },
        BindError::TooLarge { what, limit } => SpmdError::Rejected {
            op,
            message: alloc::format!(
                "input 0 has rank {}: the rule's tensors would hold more than {limit} {what} together",
                call.input_rank(0).unwrap_or(0)
            ),
        },
        BindError::Malformed(what) => SpmdError::Rejected {
            op,
            message: alloc::format!("the rule built a malformed plan: {what}"),
        },
        BindError::TermRank {
            side,
            index,
            need,
            rank,
        } => SpmdError::Rejected {
            op,
            message: alloc::format!(
                "{side} {index} has rank {rank}, and the rule writes {need} of its dims out"
            ),
        },
        BindError::OutputOnly { output } => SpmdError::Rejected {
            op,
            message: alloc::format!(
                "output {output} keeps a dim that every input writes `1` (a template that cannot bind)"
            ),
        },
    }
}

/// An error of a plan built dim by dim ([`Einsum::from_plan`](crate::Einsum::from_plan)).
pub(crate) fn built_plan_error(op: &'static str, e: BindError) -> SpmdError {
    let message = match e {
        BindError::TooLarge { what, limit } => {
            alloc::format!("the plan would hold more than {limit} {what}")
        }
        BindError::OutputOnly { output } => {
            alloc::format!("output {output} has an axis no input has")
        }
        BindError::Malformed(what) => alloc::format!("the rule built a malformed plan: {what}"),
        other => alloc::format!("{other:?}"),
    };
    SpmdError::Rejected { op, message }
}
