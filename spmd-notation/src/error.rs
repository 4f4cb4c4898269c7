//! Notation errors: a kind plus the byte range of the offending fragment.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use core::ops::Range;

/// Which side of the arrow a term is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Input,
    Output,
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Side::Input => "operand",
            Side::Output => "output",
        })
    }
}

/// What is wrong with a fragment of a notation.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// No `->` at all.
    MissingArrow,
    /// A second (third, ...) `->`.
    ExtraArrow,
    /// Nothing before the `->`.
    EmptyOperands,
    /// A character outside the grammar.
    UnexpectedChar(char),
    /// `.` or `..` that is not a full `...`.
    MalformedEllipsis,
    /// A second `...` in one term.
    RepeatedEllipsis,
    /// `...` inside a compound dim.
    EllipsisInCompound,
    /// `1` inside a compound dim.
    OneInCompound,
    /// `(` with no matching `)`.
    UnclosedParen,
    /// `)` with no matching `(`.
    UnopenedParen,
    /// `(` inside a compound dim.
    NestedParen,
    /// A compound dim with fewer than two labels.
    ShortCompound,
    /// A label twice inside one compound dim.
    RepeatedInCompound(char),
    /// `...` in an output when no input has one.
    OutputEllipsisWithoutInput,
    /// An output label that no input has.
    UnknownOutputLabel(char),
    /// A label twice in one output.
    RepeatedOutputLabel(char),
    /// The number of operands or outputs disagrees with the op's declaration.
    Arity {
        side: Side,
        expected: usize,
        found: usize,
    },
    /// `+` in an output term (only operands can be added).
    AddendInOutput,
    /// `+` anywhere but at the start of an operand, or twice.
    MisplacedPlus,
    /// An addend's label that the output lacks (an addend is added to the
    /// result elementwise, broadcast over the output's other axes).
    AddendLabelNotInOutput(char),
    /// An addend in a notation with several outputs (which one gets it?).
    AddendWithSeveralOutputs,
    /// A template's input 0 without exactly one `@` (it defines the positions).
    FirstInputPositions,
    /// A template's input 0 dropping or permuting positions.
    DropInFirstInput,
    /// `*` beside positions (`@`) or another `*` in its term: which would
    /// fill the tensor's other dims?
    OnesNotAlone,
    /// `+1` (new dims) in an operand, or twice in one `@{..}`.
    MisplacedInsert,
    /// `|` (forms by rank) in a template's input 0, whose rank sets the
    /// positions.
    FirstInputForms,
    /// `@{` or `@[` without its closing bracket.
    UnclosedSelector,
    /// A character of the plain notation that templates do not take (`...`,
    /// compound dims, addends).
    NotInTemplate(char),
    /// A selector that is not an attribute name or `method()`.
    BadSelector,
    /// `@{axis}` without `:fate`.
    MissingFate,
    /// A fate other than a label, `1` or `-`.
    BadFate,
    /// More than [`MAX_PICKS`](crate::MAX_PICKS) distinct selections in one template.
    TooManyPicks,
    /// Text after `^` or `^count` (it ends its term).
    RepeatNotAtEnd,
    /// Two terms of one side repeat (`^`): which tensors would be whose?
    RepeatTwice,
    /// A label named by a rule option (never-sharded axes, reduce types, ...)
    /// that the notation does not have.
    UnknownLabel(char),
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ErrorKind::MissingArrow => f.write_str("missing `->`"),
            ErrorKind::ExtraArrow => f.write_str("more than one `->`"),
            ErrorKind::EmptyOperands => f.write_str("empty operand list before `->`"),
            ErrorKind::UnexpectedChar(c) => write!(
                f,
                "unexpected character {c:?} (expected an ASCII letter a-z or A-Z, `1`, `...`, `(`, `)`, `+`, `,` or `->`)"
            ),
            ErrorKind::MalformedEllipsis => f.write_str("malformed ellipsis (expected `...`)"),
            ErrorKind::RepeatedEllipsis => f.write_str("more than one `...` in one term"),
            ErrorKind::EllipsisInCompound => f.write_str("`...` inside a compound dim"),
            ErrorKind::OneInCompound => f.write_str("`1` inside a compound dim"),
            ErrorKind::UnclosedParen => f.write_str("unclosed `(`"),
            ErrorKind::UnopenedParen => f.write_str("`)` without a matching `(`"),
            ErrorKind::NestedParen => f.write_str("nested `(` (compound dims do not nest)"),
            ErrorKind::ShortCompound => {
                f.write_str("compound dim with fewer than two labels (write `(hd)`)")
            }
            ErrorKind::RepeatedInCompound(c) => {
                write!(f, "label `{c}` twice in one compound dim")
            }
            ErrorKind::OutputEllipsisWithoutInput => {
                f.write_str("`...` in an output but in no operand")
            }
            ErrorKind::UnknownOutputLabel(c) => write!(f, "unknown output label `{c}`"),
            ErrorKind::RepeatedOutputLabel(c) => write!(f, "label `{c}` twice in one output"),
            ErrorKind::Arity {
                side,
                expected,
                found,
            } => write!(f, "{found} {side}(s) where the op declares {expected}"),
            ErrorKind::UnknownLabel(c) => write!(f, "label `{c}` is not in the notation"),
            ErrorKind::FirstInputPositions => {
                f.write_str("the first operand of a template must hold `@` once")
            }
            ErrorKind::DropInFirstInput => f.write_str(
                "the first operand of a template keeps every position (no `-` fate, no `@[..]`)",
            ),
            ErrorKind::OnesNotAlone => {
                f.write_str("`*` beside `@` or another `*` in one term")
            }
            ErrorKind::FirstInputForms => {
                f.write_str("the first operand of a template has one form (no `|`)")
            }
            ErrorKind::MisplacedInsert => {
                f.write_str("`+1` (new dims) stands in an output, once per `@{..}`")
            }
            ErrorKind::UnclosedSelector => f.write_str("`@{` or `@[` without its closing bracket"),
            ErrorKind::NotInTemplate(c) => write!(f, "{c:?} is not allowed in a template"),
            ErrorKind::BadSelector => {
                f.write_str("a selector names an attribute (`axis`) or a method (`axes()`)")
            }
            ErrorKind::MissingFate => {
                f.write_str("a selection without its fate (`@{axis:a}`, `@{axis:1}`, `@{axis:-}`)")
            }
            ErrorKind::BadFate => f.write_str("a fate is one label, `1`, `-` or `+1`"),
            ErrorKind::TooManyPicks => f.write_str(
                "a template selects positions in at most 4 distinct ways (`@{axis:..}`, `@{k..:..}`, ...)",
            ),
            ErrorKind::RepeatNotAtEnd => {
                f.write_str("`^` or `^count` ends its term")
            }
            ErrorKind::RepeatTwice => f.write_str(
                "one operand and one output at most may repeat (`term^` or `term^count`)",
            ),
            ErrorKind::AddendInOutput => {
                f.write_str("`+` in an output (only an operand can be an addend)")
            }
            ErrorKind::MisplacedPlus => {
                f.write_str("`+` must stand once, at the start of an operand (`+n` adds n)")
            }
            ErrorKind::AddendLabelNotInOutput(c) => {
                write!(f, "addend label `{c}` is not in the output")
            }
            ErrorKind::AddendWithSeveralOutputs => {
                f.write_str("an addend in a notation with several outputs")
            }
        }
    }
}

impl ErrorKind {
    /// A short clause after the location, where the kind needs one.
    pub(crate) fn hint(&self) -> Option<&'static str> {
        match self {
            ErrorKind::UnknownOutputLabel(_) => Some("no input has it"),
            ErrorKind::AddendLabelNotInOutput(_) => {
                Some("an addend is added to the result, so the result has every one of its axes")
            }
            ErrorKind::AddendWithSeveralOutputs => Some("which output would it be added to?"),
            ErrorKind::FirstInputPositions => {
                Some("its `@` stands for the dims the attributes select from")
            }
            ErrorKind::OnesNotAlone => Some("`*` fills the dims its term's labels leave over"),
            ErrorKind::NotInTemplate(_) => Some("write the dims with `@`, `@{..}` and `@[..]`"),
            _ => None,
        }
    }
}

/// One problem of a notation: its kind and the byte range of the fragment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotationError {
    pub kind: ErrorKind,
    /// Byte range in the notation text (an empty range points between bytes).
    pub range: Range<usize>,
}

impl NotationError {
    pub fn new(kind: ErrorKind, range: Range<usize>) -> Self {
        NotationError { kind, range }
    }

    /// 1-based column (in characters) where the fragment starts.
    pub fn column(&self, source: &str) -> usize {
        let start = self.range.start.min(source.len());
        source
            .char_indices()
            .take_while(|(i, _)| *i < start)
            .count()
            + 1
    }

    /// The message for this error in `source`: the kind, the column and the
    /// notation, e.g. ``unknown output label `q` at column 9 of einsum "mk,kn->mq"``.
    pub fn message(&self, source: &str) -> String {
        use core::fmt::Write;
        let mut s = String::new();
        let _ = write!(
            s,
            "{} at column {} of einsum {:?}",
            self.kind,
            self.column(source),
            source
        );
        if let Some(h) = self.kind.hint() {
            let _ = write!(s, " ({h})");
        }
        s
    }
}

/// All problems of one notation, with the text they refer to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotationErrors {
    pub source: String,
    pub errors: Vec<NotationError>,
}

impl fmt::Display for NotationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.errors.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            f.write_str(&e.message(&self.source))?;
        }
        Ok(())
    }
}

impl core::error::Error for NotationErrors {}

/// A parse's answer: `value`, or every error found, in source order.
pub(crate) fn finish<T>(
    source: &str,
    value: T,
    mut errors: Vec<NotationError>,
) -> Result<T, NotationErrors> {
    if errors.is_empty() {
        return Ok(value);
    }
    errors.sort_by_key(|e| (e.range.start, e.range.end));
    Err(NotationErrors {
        source: String::from(source),
        errors,
    })
}
