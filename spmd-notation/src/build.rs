//! Plans built by hand, dim by dim, for the few rules whose notation depends
//! on shape values (a reshape's grouping, an index's tuple length): no text
//! is written or parsed, and the checks a parser would make are made here.
//!
//! ```
//! use spmd_notation::PlanBuilder;
//!
//! // reshape [4, 6] -> [24]: `ab->(ab)`.
//! let mut b = PlanBuilder::new("reshape");
//! b.label(b'a').label(b'b').end_input();
//! b.compound(b"ab").end_output();
//! let plan = b.finish().unwrap();
//! let p = plan.plan();
//! assert_eq!(p.term_text(p.output(0)), "(ab)");
//! // An output axis no input has is an error, as in a notation.
//! let mut b = PlanBuilder::new("bad");
//! b.label(b'a').end_input();
//! b.label(b'q').end_output();
//! assert!(b.finish().is_err());
//! ```

use crate::plan::{AxisSet, Dim, Term};
use crate::template::{
    BindError, MAX_BOUND_COMPOUND_AXES, MAX_BOUND_DIMS, MAX_BOUND_TERMS, PlanBuf, label_bit,
};

/// Builds a [`PlanBuf`] term by term: inputs first, then outputs.
#[derive(Clone, Debug)]
pub struct PlanBuilder<'t> {
    buf: PlanBuf<'t>,
    /// The current term's axes, and where its dims start.
    seen: AxisSet,
    start: u16,
    /// An output term was ended: no input may follow.
    outputs: bool,
    /// The first misuse, reported by [`PlanBuilder::finish`].
    error: Option<BindError>,
}

impl<'t> PlanBuilder<'t> {
    /// An empty plan; `source` names it in messages (the op's name).
    pub fn new(source: &'t str) -> Self {
        PlanBuilder {
            buf: PlanBuf::new(source),
            seen: AxisSet::EMPTY,
            start: 0,
            outputs: false,
            error: None,
        }
    }

    fn fail(&mut self, e: BindError) -> &mut Self {
        self.error.get_or_insert(e);
        self
    }

    fn room(&mut self, dims: usize) -> bool {
        if usize::from(self.buf.n_dims) + dims > MAX_BOUND_DIMS {
            self.fail(BindError::TooLarge {
                what: "dims",
                limit: MAX_BOUND_DIMS,
            });
            return false;
        }
        true
    }

    /// A labelled dim (`a-z`, `A-Z`).
    pub fn label(&mut self, c: u8) -> &mut Self {
        if label_bit(c).is_none() {
            return self.fail(BindError::Malformed("a label is one ASCII letter"));
        }
        if self.room(1) {
            let mut seen = self.seen;
            // The term's side is only known when it ends: a repeat inside
            // it is checked then.
            self.buf.axis(c, false, &mut seen, false);
            self.seen = seen;
        }
        self
    }

    /// A `1` dim (never sharded).
    pub fn one(&mut self) -> &mut Self {
        if self.room(1) {
            self.buf.push(Dim::One);
        }
        self
    }

    /// A compound dim of these labels, major first (at least two, each once).
    pub fn compound(&mut self, labels: &[u8]) -> &mut Self {
        let distinct = labels
            .iter()
            .enumerate()
            .all(|(i, c)| label_bit(*c).is_some() && !labels[..i].contains(c));
        if labels.len() < 2 || !distinct {
            return self.fail(BindError::Malformed(
                "a compound dim has two or more distinct labels",
            ));
        }
        if usize::from(self.buf.n_compound_axes) + labels.len() > MAX_BOUND_COMPOUND_AXES {
            return self.fail(BindError::TooLarge {
                what: "compound axes",
                limit: MAX_BOUND_COMPOUND_AXES,
            });
        }
        if self.room(1) {
            let mut seen = self.seen;
            self.buf.compound(labels, false, &mut seen, |_| false);
            self.seen = seen;
        }
        self
    }

    /// Ends an input term.
    pub fn end_input(&mut self) -> &mut Self {
        if self.outputs {
            return self.fail(BindError::Malformed("an input after an output"));
        }
        self.end_term(false)
    }

    /// Ends an output term.
    pub fn end_output(&mut self) -> &mut Self {
        self.outputs = true;
        self.end_term(true)
    }

    fn end_term(&mut self, output: bool) -> &mut Self {
        if usize::from(self.buf.n_terms) == MAX_BOUND_TERMS {
            return self.fail(BindError::TooLarge {
                what: "terms",
                limit: MAX_BOUND_TERMS,
            });
        }
        let b = &mut self.buf;
        let dims = &b.dims[usize::from(self.start)..usize::from(b.n_dims)];
        // A label twice in one input is a diagonal; in an output, an error.
        let mut once = AxisSet::EMPTY;
        for d in dims {
            let axes: &[u8] = match d {
                Dim::Axis(a) => core::slice::from_ref(a),
                Dim::Compound { start, len } => {
                    &b.compound_axes[usize::from(*start)..usize::from(*start) + usize::from(*len)]
                }
                Dim::One => &[],
            };
            for &a in axes {
                if once.contains(a) {
                    if output {
                        self.error
                            .get_or_insert(BindError::Malformed("a label twice in one output"));
                    } else {
                        b.diagonal = b.diagonal.with(a);
                    }
                }
                once = once.with(a);
            }
        }
        if output {
            b.output_axes = b.output_axes.union(self.seen);
        } else {
            b.input_axes = b.input_axes.union(self.seen);
            b.n_inputs += 1;
        }
        b.terms[usize::from(b.n_terms)] = Term {
            start: self.start,
            len: b.n_dims - self.start,
            ellipsis: None,
        };
        b.n_terms += 1;
        self.start = b.n_dims;
        self.seen = AxisSet::EMPTY;
        self
    }

    /// The plan, or the first problem: a misuse, too large a plan, or an
    /// output axis no input has.
    pub fn finish(self) -> Result<PlanBuf<'t>, BindError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let b = &self.buf;
        let missing = b.output_axes.minus(b.input_axes);
        if !missing.is_empty() {
            let p = b.plan();
            let output = (0..p.n_outputs())
                .position(|o| !p.axes_of(p.output(o)).intersect(missing).is_empty())
                .unwrap_or(0);
            return Err(BindError::OutputOnly { output });
        }
        Ok(self.buf)
    }
}
