//! The parser: text -> [`Notation`], collecting every error instead of stopping
//! at the first one (a macro user wants to see all problems of a literal at once).

use alloc::string::String;
use alloc::vec::Vec;
use core::ops::Range;

use crate::error::{ErrorKind, NotationError, NotationErrors};
use crate::plan::{AxisId, AxisSet, Dim, Plan, Term};

/// A parsed, validated notation that owns its storage; [`Notation::plan`] lends
/// the [`Plan`] that inference reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notation {
    source: String,
    labels: Vec<u8>,
    terms: Vec<Term>,
    n_inputs: u16,
    dims: Vec<Dim>,
    compound_axes: Vec<AxisId>,
    input_axes: AxisSet,
    output_axes: AxisSet,
    diagonal: AxisSet,
    compound_minor: AxisSet,
    compound_major: AxisSet,
    addends: u64,
}

impl Notation {
    pub fn plan(&self) -> Plan<'_> {
        Plan {
            source: &self.source,
            labels: &self.labels,
            terms: &self.terms,
            n_inputs: self.n_inputs,
            dims: &self.dims,
            compound_axes: &self.compound_axes,
            input_axes: self.input_axes,
            output_axes: self.output_axes,
            diagonal: self.diagonal,
            compound_minor: self.compound_minor,
            compound_major: self.compound_major,
            addends: self.addends,
        }
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// An owned copy of a plan built by hand ([`PlanBuilder`](crate::PlanBuilder)):
    /// its source is the plan written out, for messages only.
    pub fn from_plan(plan: Plan<'_>) -> Notation {
        let side = |r: core::ops::Range<usize>| {
            r.map(|i| plan.term_text(plan.terms[i]))
                .collect::<Vec<_>>()
                .join(",")
        };
        let n_in = plan.n_inputs();
        let source = alloc::format!("{}->{}", side(0..n_in), side(n_in..plan.terms.len()));
        Notation {
            source,
            labels: plan.labels.to_vec(),
            terms: plan.terms.to_vec(),
            n_inputs: plan.n_inputs,
            dims: plan.dims.to_vec(),
            compound_axes: plan.compound_axes.to_vec(),
            input_axes: plan.input_axes,
            output_axes: plan.output_axes,
            diagonal: plan.diagonal,
            compound_minor: plan.compound_minor,
            compound_major: plan.compound_major,
            addends: plan.addends,
        }
    }
}

/// Parses and validates a notation, returning every problem found.
pub fn parse(source: &str) -> Result<Notation, NotationErrors> {
    parse_with(source, false, &[])
}

/// Builds a notation from its terms, for notations built at run time. Unlike
/// the text form it can say "one scalar operand": `parse_terms(&[""],
/// &["11"])` is a 0-d input unsqueezed to `[1, 1]`, while the text `"->11"`
/// is an empty operand list (an error). The notation's source is the terms
/// joined with `,` and `->`; errors point into it. A term holding `,` or
/// `->` is an error (it would be read as several terms).
///
/// ```
/// use spmd_notation::{ErrorKind, parse_terms};
///
/// let n = parse_terms(&[""], &["11"]).unwrap();
/// assert_eq!((n.plan().n_inputs(), n.plan().n_outputs()), (1, 1));
/// assert_eq!(n.source(), "->11");
/// // No operand at all is still an empty operand list.
/// let e = parse_terms(&[], &["11"]).unwrap_err();
/// assert_eq!(e.errors[0].kind, ErrorKind::EmptyOperands);
/// ```
pub fn parse_terms(inputs: &[&str], outputs: &[&str]) -> Result<Notation, NotationErrors> {
    let mut source = inputs.join(",");
    source.push_str("->");
    // Where each term starts in the joined source, to point at a bad one.
    let mut bad = Vec::new();
    let mut at = 0;
    for (i, t) in inputs.iter().enumerate() {
        if i > 0 {
            at += 1;
        }
        bad.extend(separators(t, at));
        at += t.len();
    }
    at += 2;
    for (i, t) in outputs.iter().enumerate() {
        if i > 0 {
            source.push(',');
            at += 1;
        }
        source.push_str(t);
        bad.extend(separators(t, at));
        at += t.len();
    }
    let lone_scalar = inputs.len() == 1 && inputs[0].trim().is_empty();
    parse_with(&source, lone_scalar, &bad)
}

/// The byte ranges (offset by `at`) of `,` and `->` inside one term.
fn separators(term: &str, at: usize) -> impl Iterator<Item = NotationError> + '_ {
    term.char_indices().filter_map(move |(i, c)| match c {
        ',' => Some(NotationError::new(
            ErrorKind::UnexpectedChar(','),
            at + i..at + i + 1,
        )),
        '-' if term[i..].starts_with("->") => Some(NotationError::new(
            ErrorKind::ExtraArrow,
            at + i..at + i + 2,
        )),
        _ => None,
    })
}

/// The byte ranges of the comma-separated terms of `range` in `src` (an
/// empty side is one empty term). Both parsers, notations and templates, read
/// a side so.
pub(crate) fn term_ranges(
    src: &str,
    range: Range<usize>,
) -> impl Iterator<Item = Range<usize>> + '_ {
    let commas = range.clone().filter(|&i| src.as_bytes()[i] == b',');
    let starts = core::iter::once(range.start).chain(commas.clone().map(|i| i + 1));
    let ends = commas.chain(core::iter::once(range.end));
    starts.zip(ends).map(|(s, e)| s..e)
}

/// `lone_scalar`: the text before the arrow is one empty (scalar) operand,
/// not an empty operand list. `found`: errors already known.
fn parse_with(
    source: &str,
    lone_scalar: bool,
    found: &[NotationError],
) -> Result<Notation, NotationErrors> {
    let mut p = Parser {
        src: source,
        errors: Vec::new(),
        n: Notation {
            source: String::from(source),
            labels: Vec::new(),
            terms: Vec::new(),
            n_inputs: 0,
            dims: Vec::new(),
            compound_axes: Vec::new(),
            input_axes: AxisSet::EMPTY,
            output_axes: AxisSet::EMPTY,
            diagonal: AxisSet::EMPTY,
            compound_minor: AxisSet::EMPTY,
            compound_major: AxisSet::EMPTY,
            addends: 0,
        },
        no_operands: false,
        lone_scalar,
        addend_at: Vec::new(),
    };
    if !found.is_empty() {
        // A separator inside a term: the joined text does not say what the
        // terms were, so report only that.
        p.errors.extend_from_slice(found);
    } else {
        p.run();
    }
    crate::error::finish(source, p.n, p.errors)
}

struct Parser<'s> {
    src: &'s str,
    errors: Vec<NotationError>,
    n: Notation,
    /// Nothing before the arrow: output labels cannot be checked against the
    /// operands, and reporting each as unknown would only repeat that error.
    no_operands: bool,
    /// See [`parse_terms`].
    lone_scalar: bool,
    /// Where each addend operand's `+` is (indexed by input).
    addend_at: Vec<usize>,
}

impl Parser<'_> {
    fn err(&mut self, kind: ErrorKind, range: Range<usize>) {
        self.errors.push(NotationError::new(kind, range));
    }

    fn run(&mut self) {
        let bytes = self.src.as_bytes();
        let arrows: Vec<usize> = (0..bytes.len().saturating_sub(1))
            .filter(|&i| bytes[i] == b'-' && bytes[i + 1] == b'>')
            .collect();
        for &a in arrows.iter().skip(1) {
            self.err(ErrorKind::ExtraArrow, a..a + 2);
        }
        let Some(&first) = arrows.first() else {
            self.err(ErrorKind::MissingArrow, 0..self.src.len());
            // Still read the text as operands so stray characters are reported too.
            self.side(0..self.src.len(), false);
            return;
        };
        if self.src[..first].trim().is_empty() && !self.lone_scalar {
            self.err(ErrorKind::EmptyOperands, first..first + 2);
            self.no_operands = true;
        } else {
            self.side(0..first, false);
        }
        self.n.n_inputs = self.n.terms.len() as u16;
        let end = arrows.get(1).copied().unwrap_or(self.src.len());
        self.side(first + 2..end, true);
        // Text after an extra arrow is read for its own errors only (the
        // notation is invalid anyway); its terms are dropped.
        let (terms, dims) = (self.n.terms.len(), self.n.dims.len());
        for (i, &a) in arrows.iter().enumerate().skip(1) {
            let end = arrows.get(i + 1).copied().unwrap_or(self.src.len());
            self.side(a + 2..end, true);
        }
        self.n.terms.truncate(terms);
        self.n.dims.truncate(dims);
        self.check_addends();
    }

    /// An addend is added to the result, so the result must have every one
    /// of its labels (else the addend would be summed over an axis, which is
    /// a product's job), and with several outputs it would not say which one
    /// it is added to.
    fn check_addends(&mut self) {
        if self.n.addends == 0 || self.no_operands {
            return;
        }
        let n_in = self.n.n_inputs as usize;
        let n_out = self.n.terms.len() - n_in;
        for i in 0..n_in.min(64) {
            if self.n.addends & (1u64 << i) == 0 {
                continue;
            }
            let at = self.addend_at[i];
            if n_out > 1 {
                self.err(ErrorKind::AddendWithSeveralOutputs, at..at + 1);
                continue;
            }
            let term = self.n.terms[i];
            let own = self.n.plan().axes_of(term);
            let out_axes = match self.n.terms.get(n_in) {
                Some(&o) => self.n.plan().axes_of(o),
                None => AxisSet::EMPTY,
            };
            for a in own.minus(out_axes).iter() {
                let c = self.n.labels[a as usize] as char;
                // Point at the label inside the addend's own text.
                let text = &self.src[at..];
                let end = text
                    .find(',')
                    .or_else(|| text.find("->"))
                    .unwrap_or(text.len());
                let off = text[..end].find(c).map_or(at, |o| at + o);
                self.err(ErrorKind::AddendLabelNotInOutput(c), off..off + 1);
            }
        }
    }

    /// Parses one side of the arrow: terms separated by commas.
    fn side(&mut self, range: Range<usize>, output: bool) {
        for term in term_ranges(self.src, range) {
            self.term(term, output);
        }
    }

    fn term(&mut self, range: Range<usize>, output: bool) {
        let text = &self.src[range.clone()];
        let base = range.start;
        let dims_start = self.n.dims.len();
        let mut ellipsis: Option<u16> = None;
        // An open compound dim: where its `(` is and its axes so far.
        let mut open: Option<(usize, Vec<AxisId>)> = None;
        // `(`s opened inside a compound (each already an error): their `)`s
        // close them, not the compound, so no second error follows.
        let mut nested = 0usize;
        let mut seen = AxisSet::EMPTY;
        // Nothing but white space read yet: where a `+` may stand.
        let mut at_start = true;
        let index = self.n.terms.len();
        if !output {
            self.addend_at.push(base);
        }
        let mut chars = text.char_indices().peekable();
        while let Some((off, c)) = chars.next() {
            let at = base + off;
            let here = at..at + c.len_utf8();
            if !c.is_whitespace() && c != '+' {
                at_start = false;
            }
            match c {
                c if c.is_whitespace() => {}
                '+' if output => self.err(ErrorKind::AddendInOutput, here),
                '+' if !at_start || self.n.addends & (1u64 << index.min(63)) != 0 => {
                    self.err(ErrorKind::MisplacedPlus, here)
                }
                '+' if index >= 64 => self.err(ErrorKind::MisplacedPlus, here),
                '+' => {
                    at_start = false;
                    self.n.addends |= 1u64 << index;
                    self.addend_at[index] = at;
                }
                'a'..='z' | 'A'..='Z' => {
                    let Some(id) = self.axis(c, output, here.clone()) else {
                        continue;
                    };
                    if seen.contains(id) {
                        if output {
                            self.err(ErrorKind::RepeatedOutputLabel(c), here.clone());
                        } else {
                            self.n.diagonal = self.n.diagonal.with(id);
                        }
                    }
                    seen = seen.with(id);
                    match &mut open {
                        Some((_, axes)) => {
                            if axes.contains(&id) {
                                self.err(ErrorKind::RepeatedInCompound(c), here);
                            } else {
                                axes.push(id);
                            }
                        }
                        None => self.n.dims.push(Dim::Axis(id)),
                    }
                }
                '1' => {
                    if open.is_some() {
                        self.err(ErrorKind::OneInCompound, here);
                    } else {
                        self.n.dims.push(Dim::One);
                    }
                }
                '.' => {
                    let mut run = 1;
                    while chars.next_if(|&(_, c)| c == '.').is_some() {
                        run += 1;
                    }
                    let range = at..at + run;
                    if run != 3 {
                        self.err(ErrorKind::MalformedEllipsis, range);
                    } else if open.is_some() {
                        self.err(ErrorKind::EllipsisInCompound, range);
                    } else if ellipsis.is_some() {
                        self.err(ErrorKind::RepeatedEllipsis, range);
                    } else {
                        ellipsis = Some((self.n.dims.len() - dims_start) as u16);
                    }
                }
                '(' => {
                    if open.is_some() {
                        self.err(ErrorKind::NestedParen, here);
                        nested += 1;
                    } else {
                        open = Some((at, Vec::new()));
                    }
                }
                ')' if nested > 0 => nested -= 1,
                ')' => match open.take() {
                    None => self.err(ErrorKind::UnopenedParen, here),
                    Some((from, axes)) if axes.len() < 2 => {
                        self.err(ErrorKind::ShortCompound, from..at + 1)
                    }
                    Some((_, axes)) => {
                        self.n.compound_major = self.n.compound_major.with(axes[0]);
                        for &minor in &axes[1..] {
                            self.n.compound_minor = self.n.compound_minor.with(minor);
                        }
                        let start = self.n.compound_axes.len() as u16;
                        self.n.compound_axes.extend_from_slice(&axes);
                        self.n.dims.push(Dim::Compound {
                            start,
                            len: axes.len() as u8,
                        });
                    }
                },
                c => self.err(ErrorKind::UnexpectedChar(c), here),
            }
        }
        if let Some((from, _)) = open {
            self.err(ErrorKind::UnclosedParen, from..from + 1);
        }
        if output && ellipsis.is_some() && !self.inputs_have_ellipsis() && !self.no_operands {
            let at = text.find("...").map_or(base, |o| base + o);
            self.err(ErrorKind::OutputEllipsisWithoutInput, at..at + 3);
        }
        if output {
            self.n.output_axes = self.n.output_axes.union(seen);
        } else {
            self.n.input_axes = self.n.input_axes.union(seen);
        }
        self.n.terms.push(Term {
            start: dims_start as u16,
            len: (self.n.dims.len() - dims_start) as u16,
            ellipsis,
        });
    }

    fn inputs_have_ellipsis(&self) -> bool {
        self.n.terms[..self.n.n_inputs as usize]
            .iter()
            .any(|t| t.ellipsis.is_some())
    }

    /// The id of a label: interned on the input side, looked up on the output side.
    fn axis(&mut self, c: char, output: bool, here: Range<usize>) -> Option<AxisId> {
        let b = c as u8;
        if let Some(p) = self.n.labels.iter().position(|&l| l == b) {
            return Some(p as AxisId);
        }
        if output {
            if !self.no_operands {
                self.err(ErrorKind::UnknownOutputLabel(c), here);
            }
            return None;
        }
        self.n.labels.push(b);
        Some((self.n.labels.len() - 1) as AxisId)
    }
}
