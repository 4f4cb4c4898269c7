//! Notation templates: notations whose dims depend on an op's attributes and
//! on the rank of its first input, bound per call into a [`Plan`] without
//! building or parsing any text.
//!
//! ```text
//! template := terms "->" terms
//! terms    := term ("," term)*       (a side's last term may repeat)
//! term     := form ("|" form)* [repeat]
//! form     := item*                  (a tensor takes the first that fits)
//! repeat   := "^"                     as many tensors as the call gives
//!           | "^" name                as many as the attribute says
//! item     := label | "1"                 (as in a notation)
//!           | "(" label label+ ")"        a compound dim, major first
//!           | "@"                         every dim of input 0, one axis each
//!           | "@{" pick (";" pick)* "}"   the same, the selected dims changed
//!           | "@[" name "]"               the same, permuted by attribute `name`
//!           | "*"                         `1`s for the tensor's other dims
//! pick     := select ":" fate            (a later pick wins where two select)
//! select   := name | name ".." | ".." name | ".."
//! fate     := label | "1" | "-" | "+1"
//! name     := an attribute (a field of the op), `method()`, or
//!             `method(call)` (a method that reads the call's shapes too)
//! ```
//!
//! `@` stands for the dims of input 0 that its term does not write out, in
//! order; each gets a label of its own (the letters the template does not use
//! literally, `a`, `b`, ... in order), so the same position is the same axis in
//! every term. A selector picks positions from an attribute: `axis` (an
//! integer or a list; negative values count from the end), `axis..` (every
//! position from it on), `..axis` (every position before it), `..` (all). The
//! fate says what the picked positions become in this term: one literal label
//! (exactly one position), `1` (a dim never sharded, e.g. a kept reduced dim),
//! or `-` (no dim: reduced, squeezed); `+1` (outputs only) inserts new `1`
//! dims where the output's positions are selected (`unsqueeze`, `stack`),
//! counted in the output, so `-1` is its last dim. `@[perm]` writes the
//! positions in the order the attribute `perm` lists. `*` writes a `1` for
//! each dim of its tensor that the term's labels and `1`s leave over (the
//! whole tensor when alone). A term with several forms (`bhst|*`) takes, for
//! each tensor, the first form whose dim count is the tensor's rank; an
//! absent tensor, or an output whose rank the call does not give, takes the
//! first form (so `|bhst|*` reads "absent, 4-d or anything"). A method selector may return a set it
//! computes ([`Pos::Mask`]). The last term of a side may stand for several
//! tensors: `^` for as many as the call gives, `^name` for as many as an
//! attribute (or `method()`) says. Examples:
//!
//! | op | template |
//! |---|---|
//! | softmax along `axis` | `@{axis:a}->@{axis:a}` (with `a` never sharded) |
//! | sum over `axis` | `@->@{axis:-}`, or `@->@{axis:1}` with `keep_dim` |
//! | transpose | `@->@[perm]` |
//! | concat along `axis` (any number of inputs) | `@{axis:1}^->@{axis:1}` |
//! | split into `num` pieces | `@{axis:1}->@{axis:1}^num` |
//! | layer norm | `@{begin_norm_axis..:1},*,*->@{begin_norm_axis..:1},@{begin_norm_axis..:-},@{begin_norm_axis..:-}` |
//! | slice, dropping `decrease_axis` | `@{axes:1}->@{axes:1; decrease_axis:-}` |
//! | stack along a new `axis` | `@^->@{axis:+1}` |
//! | group norm (batch, then `1`s) | `n@{..:1},*,*->n@{..:1},n1,n1` |
//! | attention, optional mask | `bshd,bthd,bthe,\|bhst\|*->bshe` |
//!
//! [`parse_template`] checks a template (the macro does so at compile time,
//! with the same errors as values); [`bind`] turns one into a [`PlanBuf`] for
//! the attributes' positions ([`Pos`]) and the call's ranks.

use alloc::string::String;
use alloc::vec::Vec;
use core::ops::Range;

use crate::error::{ErrorKind, NotationError, NotationErrors, Side};
use crate::plan::{AxisId, AxisSet, Dim, Plan, Term};

/// What a selector picks (`@{axis:..}`, `@{axis..:..}`, `@{..axis:..}`, `@{..:..}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Select {
    /// The positions the attribute lists.
    At(u8),
    /// Every position from the attribute's value on.
    From(u8),
    /// Every position before the attribute's value.
    Before(u8),
    /// Every position.
    Every,
}

/// What the selected positions become in one term.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// This literal label (one position only).
    Label(u8),
    /// A `1` dim.
    One,
    /// No dim.
    Drop,
    /// New `1` dims at the selected positions of the output (`+1`).
    Insert,
}

/// One item of a template term.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Item {
    /// A literal label.
    Label(u8),
    /// A literal `1`.
    One,
    /// `@`, or `@{select:fate}`.
    Positions(Option<(Select, Fate)>),
    /// A further pick of the `@{..; select:fate}` just before it.
    Also(Select, Fate),
    /// `@[perm]`: the positions in the order the attribute lists.
    Permuted(u8),
    /// `*`: `1`s, one per dim of the tensor.
    Ones,
    /// `(hg)`: a compound dim of literal labels, `compounds[start .. start +
    /// len]` of the template, major first.
    Compound { start: u8, len: u8 },
    /// `|`: the term's next form; a tensor takes the first form whose dim
    /// count is its rank (the first when its rank is unknown).
    Or,
}

/// How many tensors the last term of a side stands for (`term^`,
/// `term^name`): variadic ops (concat's inputs, split's outputs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Repeat {
    /// One tensor.
    Once,
    /// As many as the call gives on that side (`^`).
    Given,
    /// As many as the attribute (or `method()`) at this selector index says
    /// (`^name`).
    Count(u8),
}

/// A compiled template: items per term over a selector table. Const
/// constructible, so `#[spmd_rule]` emits one as a `const`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Template<'a> {
    /// The template as written (messages only; never parsed again).
    pub source: &'a str,
    /// Inputs' terms, then outputs' terms: `items[start .. start + len]`.
    pub terms: &'a [(u16, u16)],
    pub n_inputs: u16,
    pub items: &'a [Item],
    /// The attribute (or `method()`) each selector index reads.
    pub selectors: &'a [&'a str],
    /// Labels the template writes literally (as [`label_bit`]s).
    pub literals: AxisSet,
    /// The labels positions take, in order: the letters `literals` lacks.
    pub positional: &'a [u8],
    /// How many dims input 0's term writes out (labels and `1`s).
    pub written: u16,
    /// Literal labels (as [`label_bit`]s) the rule never shards: a bound
    /// plan reports their axes ([`PlanBuf::never`]).
    pub never: AxisSet,
    /// The distinct selections, each evaluated once per binding (at most
    /// [`MAX_PICKS`]).
    pub picks: &'a [Select],
    /// Items that write one dim (labels, `1`s) and runs of positions
    /// (`@`, `@{..}`, `@[..]`): a binding's size before `*` items.
    pub fixed: u16,
    pub runs: u16,
    /// How many tensors the repeating input term and output term stand for
    /// ([`Repeat::Once`]: none repeats)...
    pub repeats: [Repeat; 2],
    /// ...and which terms they are (indices into `terms`).
    pub repeat_terms: [u16; 2],
    /// The labels of compound dims ([`Item::Compound`]), as written.
    pub compounds: &'a [u8],
}

/// A template selects positions in at most this many distinct ways.
pub const MAX_PICKS: usize = 4;

impl<'a> Template<'a> {
    pub const fn n_inputs(&self) -> usize {
        self.n_inputs as usize
    }
    pub const fn n_outputs(&self) -> usize {
        self.terms.len() - self.n_inputs as usize
    }
    fn items_of(&self, t: usize) -> &'a [Item] {
        let (start, len) = self.terms[t];
        &self.items[start as usize..start as usize + len as usize]
    }
    /// Whether any output writes literal label `c` (or a fate labels it).
    pub fn has_label(&self, c: char) -> bool {
        let b = c as u8;
        self.items.iter().any(|i| {
            matches!(*i, Item::Label(l) if l == b)
                || matches!(*i, Item::Positions(Some((_, Fate::Label(l)))) if l == b)
                || matches!(*i, Item::Also(_, Fate::Label(l)) if l == b)
        }) || self.compounds.contains(&b)
    }
}

/// Whether a notation text is a template (it uses `@`, `*` or `^`).
pub fn is_template(source: &str) -> bool {
    source.contains('@') || source.contains('*') || source.contains('^') || source.contains('|')
}

/// A parsed template that owns its storage; [`OwnedTemplate::template`]
/// lends the [`Template`] that [`bind`] reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedTemplate {
    source: String,
    terms: Vec<(u16, u16)>,
    n_inputs: u16,
    items: Vec<Item>,
    selectors: Vec<String>,
    selector_refs: Vec<Range<usize>>,
    literals: AxisSet,
    positional: Vec<u8>,
    written: u16,
    picks: Vec<Select>,
    fixed: u16,
    runs: u16,
    repeats: [Repeat; 2],
    repeat_terms: [u16; 2],
    compounds: Vec<u8>,
}

impl OwnedTemplate {
    /// The borrowed form; `names` must hold [`OwnedTemplate::selectors`].
    pub fn template<'s>(&'s self, names: &'s [&'s str]) -> Template<'s> {
        Template {
            source: &self.source,
            terms: &self.terms,
            n_inputs: self.n_inputs,
            items: &self.items,
            selectors: names,
            literals: self.literals,
            positional: &self.positional,
            written: self.written,
            never: AxisSet::EMPTY,
            picks: &self.picks,
            fixed: self.fixed,
            runs: self.runs,
            repeats: self.repeats,
            repeat_terms: self.repeat_terms,
            compounds: &self.compounds,
        }
    }
    /// The labels of compound dims, as written.
    pub fn compounds(&self) -> &[u8] {
        &self.compounds
    }
    /// How many tensors the repeating input and output term stand for.
    pub fn repeats(&self) -> [Repeat; 2] {
        self.repeats
    }
    /// Which terms repeat (indices into [`OwnedTemplate::terms`]).
    pub fn repeat_terms(&self) -> [u16; 2] {
        self.repeat_terms
    }
    /// The distinct selections, in order of first use.
    pub fn picks(&self) -> &[Select] {
        &self.picks
    }
    /// Items that write one dim, and runs of positions.
    pub fn counts(&self) -> (u16, u16) {
        (self.fixed, self.runs)
    }
    /// The labels positions take, in order.
    pub fn positional(&self) -> &[u8] {
        &self.positional
    }
    /// How many dims input 0's term writes out.
    pub fn written(&self) -> u16 {
        self.written
    }
    /// The selectors' attribute names, in index order (`method()` with its parentheses).
    pub fn selectors(&self) -> &[String] {
        &self.selectors
    }
    /// Where each selector's first use is in the source (for messages).
    pub fn selector_ranges(&self) -> &[Range<usize>] {
        &self.selector_refs
    }
    pub fn terms(&self) -> &[(u16, u16)] {
        &self.terms
    }
    pub fn n_inputs(&self) -> usize {
        self.n_inputs as usize
    }
    pub fn items(&self) -> &[Item] {
        &self.items
    }
    pub fn literals(&self) -> AxisSet {
        self.literals
    }
    pub fn source(&self) -> &str {
        &self.source
    }
}

/// The bit of a label in [`Template::literals`] (`a-z` then `A-Z`).
pub fn label_bit(c: u8) -> Option<AxisId> {
    match c {
        b'a'..=b'z' => Some(c - b'a'),
        b'A'..=b'Z' => Some(26 + c - b'A'),
        _ => None,
    }
}

fn bit_label(b: AxisId) -> u8 {
    if b < 26 { b'a' + b } else { b'A' + (b - 26) }
}

/// Parses and checks a template, returning every problem found.
///
/// ```
/// use spmd_notation::{ErrorKind, parse_template};
///
/// let t = parse_template("@{axis:a}->@{axis:a}").unwrap();
/// assert_eq!(t.selectors(), ["axis"]);
/// let e = parse_template("@{axis:-}->@").unwrap_err();
/// assert_eq!(e.errors[0].kind, ErrorKind::DropInFirstInput);
/// ```
pub fn parse_template(source: &str) -> Result<OwnedTemplate, NotationErrors> {
    let mut p = TParser {
        src: source,
        errors: Vec::new(),
        t: OwnedTemplate {
            source: String::from(source),
            terms: Vec::new(),
            n_inputs: 0,
            items: Vec::new(),
            selectors: Vec::new(),
            selector_refs: Vec::new(),
            literals: AxisSet::EMPTY,
            positional: Vec::new(),
            written: 0,
            picks: Vec::new(),
            fixed: 0,
            runs: 0,
            repeats: [Repeat::Once; 2],
            repeat_terms: [0; 2],
            compounds: Vec::new(),
        },
        input_labels: AxisSet::EMPTY,
        repeat_at: [None; 2],
    };
    p.run();
    let t = &mut p.t;
    t.positional = (0..52u8)
        .filter(|&b| !t.literals.contains(b))
        .map(bit_label)
        .collect();
    if let Some(&(start, len)) = t.terms.first() {
        t.written = t.items[start as usize..(start + len) as usize]
            .iter()
            .filter(|i| matches!(i, Item::Label(_) | Item::One | Item::Compound { .. }))
            .count() as u16;
    }
    for item in &t.items {
        match *item {
            Item::Label(_) | Item::One | Item::Compound { .. } => t.fixed += 1,
            Item::Positions(_) | Item::Permuted(_) => t.runs += 1,
            Item::Ones | Item::Also(..) | Item::Or => {}
        }
        // An insertion counts in the output, so it is selected apart.
        if let Item::Positions(Some((sel, fate))) | Item::Also(sel, fate) = *item
            && fate != Fate::Insert
            && !t.picks.contains(&sel)
        {
            t.picks.push(sel);
        }
    }
    if t.picks.len() > MAX_PICKS {
        let end = source.len();
        p.errors
            .push(NotationError::new(ErrorKind::TooManyPicks, 0..end));
        return Err(NotationErrors {
            source: String::from(source),
            errors: p.errors,
        });
    }
    crate::error::finish(source, p.t, p.errors)
}

struct TParser<'s> {
    src: &'s str,
    errors: Vec<NotationError>,
    t: OwnedTemplate,
    input_labels: AxisSet,
    /// Where the current side's last `^` is, until a later term shows it
    /// was not the last.
    repeat_at: [Option<usize>; 2],
}

impl TParser<'_> {
    fn err(&mut self, kind: ErrorKind, range: Range<usize>) {
        self.errors.push(NotationError::new(kind, range));
    }

    fn run(&mut self) {
        let Some(arrow) = self.src.find("->") else {
            self.err(ErrorKind::MissingArrow, 0..self.src.len());
            return;
        };
        if let Some(extra) = self.src[arrow + 2..].find("->") {
            let at = arrow + 2 + extra;
            self.err(ErrorKind::ExtraArrow, at..at + 2);
            return;
        }
        if self.src[..arrow].trim().is_empty() {
            self.err(ErrorKind::EmptyOperands, arrow..arrow + 2);
            return;
        }
        self.side(0..arrow, false);
        self.t.n_inputs = self.t.terms.len() as u16;
        self.side(arrow + 2..self.src.len(), true);
        // An item already in error is missing from input 0: no cascade.
        if self.errors.is_empty() {
            self.check_first_input(arrow);
        }
    }

    fn side(&mut self, range: Range<usize>, output: bool) {
        for term in crate::parse::term_ranges(self.src, range) {
            self.term(term, output);
        }
    }

    /// Input 0 defines the positions: its `@` must be there once, and keep a
    /// dim for every position (no `-`, no permutation).
    fn check_first_input(&mut self, arrow: usize) {
        let uses_positions = self
            .t
            .items
            .iter()
            .any(|i| matches!(i, Item::Positions(_) | Item::Permuted(_)));
        if !uses_positions {
            return;
        }
        let (start, len) = self.t.terms[0];
        let first = &self.t.items[start as usize..(start + len) as usize];
        let runs = first
            .iter()
            .filter(|i| matches!(i, Item::Positions(_) | Item::Permuted(_)))
            .count();
        let drops = first.iter().any(|i| {
            matches!(
                i,
                Item::Positions(Some((_, Fate::Drop)))
                    | Item::Also(_, Fate::Drop)
                    | Item::Permuted(_)
            )
        });
        let end = self.src[..arrow].find(',').unwrap_or(arrow);
        if first.contains(&Item::Or) {
            self.err(ErrorKind::FirstInputForms, 0..end);
        }
        if runs != 1 {
            self.err(ErrorKind::FirstInputPositions, 0..end);
        }
        if drops {
            self.err(ErrorKind::DropInFirstInput, 0..end);
        }
    }

    fn selector(&mut self, name: &str, range: Range<usize>) -> u8 {
        if let Some(i) = self.t.selectors.iter().position(|s| s == name) {
            return i as u8;
        }
        self.t.selectors.push(String::from(name));
        self.t.selector_refs.push(range);
        (self.t.selectors.len() - 1) as u8
    }

    fn term(&mut self, range: Range<usize>, output: bool) {
        let text = &self.src[range.clone()];
        let base = range.start;
        let start = self.t.items.len();
        let bytes = text.as_bytes();
        let mut seen = AxisSet::EMPTY;
        let mut i = 0;
        let mut ones_at = None;
        let mut repeat: Option<(Repeat, usize)> = None;
        while i < bytes.len() {
            let at = base + i;
            let c = bytes[i];
            match c {
                b' ' | b'\t' | b'\n' | b'\r' => {}
                b'a'..=b'z' | b'A'..=b'Z' => {
                    self.label(c, output, &mut seen, at);
                    self.t.items.push(Item::Label(c));
                }
                b'1' => self.t.items.push(Item::One),
                b'^' => {
                    // `^` or `^name`: the term stands for several tensors.
                    let rest = &text[i + 1..];
                    let name_len = rest
                        .bytes()
                        .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
                        .count();
                    let name_len = if rest[name_len..].starts_with("()") {
                        name_len + 2
                    } else if rest[name_len..].starts_with("(call)") {
                        name_len + 6
                    } else {
                        name_len
                    };
                    let name = &rest[..name_len];
                    let trailing = rest[name_len..].trim();
                    if !trailing.is_empty() {
                        self.err(ErrorKind::RepeatNotAtEnd, at..base + text.len());
                        break;
                    }
                    repeat = Some(if name.is_empty() {
                        (Repeat::Given, at)
                    } else if self.name_ok(name, at + 1) {
                        (
                            Repeat::Count(self.selector(name, at + 1..at + 1 + name.len())),
                            at,
                        )
                    } else {
                        break;
                    });
                    break;
                }
                b'*' => {
                    ones_at = Some(at);
                    self.t.items.push(Item::Ones);
                }
                b'@' => {
                    let rest = &text[i + 1..];
                    if rest.starts_with('{') || rest.starts_with('[') {
                        let close = if rest.starts_with('{') { '}' } else { ']' };
                        let Some(end) = rest.find(close) else {
                            self.err(ErrorKind::UnclosedSelector, at..base + text.len());
                            break;
                        };
                        let inner = &rest[1..end];
                        let inner_at = at + 2;
                        if close == ']' {
                            if let Some(item) = self.permuted(inner, inner_at) {
                                self.t.items.push(item);
                            }
                        } else {
                            self.selected(inner, inner_at, output, &mut seen);
                        }
                        i += 1 + end + 1;
                        continue;
                    }
                    self.t.items.push(Item::Positions(None));
                }
                b'(' => {
                    let Some(close) = text[i..].find(')') else {
                        self.err(ErrorKind::UnclosedParen, at..at + 1);
                        break;
                    };
                    self.compound(&text[i + 1..i + close], at + 1, output, &mut seen);
                    i += close + 1;
                    continue;
                }
                b'|' => {
                    // The next form starts afresh: its labels are its own.
                    seen = AxisSet::EMPTY;
                    self.t.items.push(Item::Or);
                }
                b'.' | b')' | b'+' => {
                    // A run of dots (`...`) is one error.
                    let run = if c == b'.' {
                        bytes[i..].iter().take_while(|&&b| b == b'.').count()
                    } else {
                        1
                    };
                    self.err(ErrorKind::NotInTemplate(c as char), at..at + run);
                    i += run;
                    continue;
                }
                _ => {
                    let ch = text[i..].chars().next().unwrap_or('?');
                    self.err(ErrorKind::UnexpectedChar(ch), at..at + ch.len_utf8());
                    i += ch.len_utf8();
                    continue;
                }
            }
            i += 1;
        }
        let len = self.t.items.len() - start;
        // `*` fills what the labels leave; positions would fill it too, and
        // so would a second `*` (in one form).
        let clash = self.t.items[start..].split(|i| *i == Item::Or).any(|form| {
            let ones = form.iter().filter(|i| **i == Item::Ones).count();
            let positions = form
                .iter()
                .any(|i| matches!(i, Item::Positions(_) | Item::Permuted(_)));
            ones > 1 || (ones == 1 && positions)
        });
        if let Some(at) = ones_at
            && clash
        {
            self.err(ErrorKind::OnesNotAlone, at..at + 1);
        }
        if !output {
            self.input_labels = self.input_labels.union(seen);
        }
        // One term per side may repeat: which tensors are its would be
        // ambiguous with two.
        let side = usize::from(output);
        if let Some((r, at)) = repeat {
            if self.repeat_at[side].is_some() {
                self.err(ErrorKind::RepeatTwice, at..at + 1);
            } else {
                self.t.repeats[side] = r;
                self.t.repeat_terms[side] = self.t.terms.len() as u16;
                self.repeat_at[side] = Some(at);
            }
        }
        self.t.terms.push((start as u16, len as u16));
    }

    /// A literal label (or a fate's): interned; an output's must be an input's,
    /// and once per output.
    fn label(&mut self, c: u8, output: bool, seen: &mut AxisSet, at: usize) {
        let Some(b) = label_bit(c) else { return };
        self.t.literals = self.t.literals.with(b);
        if output {
            if !self.input_labels.contains(b) {
                self.err(ErrorKind::UnknownOutputLabel(c as char), at..at + 1);
            } else if seen.contains(b) {
                self.err(ErrorKind::RepeatedOutputLabel(c as char), at..at + 1);
            }
        }
        *seen = seen.with(b);
    }

    /// `(hg)`: literal labels, at least two, each once.
    fn compound(&mut self, inner: &str, at: usize, output: bool, seen: &mut AxisSet) {
        let start = self.t.compounds.len();
        let mut mine = AxisSet::EMPTY;
        for (k, c) in inner.bytes().enumerate() {
            let here = at + k..at + k + 1;
            match c {
                b' ' | b'\t' => continue,
                b'a'..=b'z' | b'A'..=b'Z' => {}
                b'(' => {
                    self.err(ErrorKind::NestedParen, here);
                    return;
                }
                b'1' => {
                    self.err(ErrorKind::OneInCompound, here);
                    return;
                }
                _ => {
                    self.err(ErrorKind::NotInTemplate(c as char), here);
                    return;
                }
            }
            let b = label_bit(c).unwrap_or(0);
            if mine.contains(b) {
                self.err(ErrorKind::RepeatedInCompound(c as char), here);
                return;
            }
            mine = mine.with(b);
            self.label(c, output, seen, at + k);
            self.t.compounds.push(c);
        }
        let len = self.t.compounds.len() - start;
        if len < 2 {
            self.err(ErrorKind::ShortCompound, at - 1..at + inner.len() + 1);
            return;
        }
        self.t.items.push(Item::Compound {
            start: start as u8,
            len: len as u8,
        });
    }

    fn name_ok(&mut self, name: &str, at: usize) -> bool {
        // `method()`, or `method(call)`: a method that reads the call's
        // shapes too.
        let bare = name
            .strip_suffix("()")
            .or_else(|| name.strip_suffix("(call)"))
            .unwrap_or(name);
        let ok = !bare.is_empty()
            && bare.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            && !bare.as_bytes()[0].is_ascii_digit();
        if !ok {
            self.err(ErrorKind::BadSelector, at..at + name.len().max(1));
        }
        ok
    }

    fn permuted(&mut self, inner: &str, at: usize) -> Option<Item> {
        let name = inner.trim();
        let off = inner.find(name).unwrap_or(0);
        if !self.name_ok(name, at + off) {
            return None;
        }
        Some(Item::Permuted(
            self.selector(name, at + off..at + off + name.len()),
        ))
    }

    /// `@{pick; pick; ..}`: the first pick as [`Item::Positions`], the
    /// others as [`Item::Also`] after it.
    fn selected(&mut self, inner: &str, at: usize, output: bool, seen: &mut AxisSet) {
        let mut offset = 0;
        let mut inserts = 0;
        let first = self.t.items.len();
        for (k, part) in inner.split(';').enumerate() {
            let part_at = at + offset;
            offset += part.len() + 1;
            let Some((select, fate)) = self.pick(part, part_at, output, seen) else {
                continue;
            };
            if fate == Fate::Insert {
                inserts += 1;
                if !output || inserts > 1 || !matches!(select, Select::At(_)) {
                    self.err(ErrorKind::MisplacedInsert, part_at..part_at + part.len());
                    continue;
                }
            }
            self.t.items.push(if k == 0 {
                Item::Positions(Some((select, fate)))
            } else {
                Item::Also(select, fate)
            });
        }
        // Insertions count in the output's dims, which a drop would shift.
        let fates = self.t.items[first..].iter().map(|i| match *i {
            Item::Positions(Some((_, f))) | Item::Also(_, f) => Some(f),
            _ => None,
        });
        let (mut insert, mut drop) = (false, false);
        for f in fates {
            insert |= f == Some(Fate::Insert);
            drop |= f == Some(Fate::Drop);
        }
        if insert && drop {
            self.err(ErrorKind::MisplacedInsert, at..at + inner.len());
        }
    }

    fn pick(
        &mut self,
        inner: &str,
        at: usize,
        output: bool,
        seen: &mut AxisSet,
    ) -> Option<(Select, Fate)> {
        let Some(colon) = inner.rfind(':') else {
            self.err(ErrorKind::MissingFate, at..at + inner.len());
            return None;
        };
        let (sel, fate) = (inner[..colon].trim(), inner[colon + 1..].trim());
        let sel_at = at + inner.find(sel).unwrap_or(0);
        let fate_at = at + colon + 1 + inner[colon + 1..].find(fate).unwrap_or(0);
        let select = if sel == ".." {
            Select::Every
        } else if let Some(name) = sel.strip_prefix("..") {
            let name = name.trim();
            if !self.name_ok(name, sel_at + 2) {
                return None;
            }
            Select::Before(self.selector(name, sel_at + 2..sel_at + sel.len()))
        } else if let Some(name) = sel.strip_suffix("..") {
            let name = name.trim();
            if !self.name_ok(name, sel_at) {
                return None;
            }
            Select::From(self.selector(name, sel_at..sel_at + name.len()))
        } else {
            if !self.name_ok(sel, sel_at) {
                return None;
            }
            Select::At(self.selector(sel, sel_at..sel_at + sel.len()))
        };
        let fate = match fate.as_bytes() {
            [b'1'] => Fate::One,
            [b'-'] => Fate::Drop,
            [b'+', b'1'] => Fate::Insert,
            [c @ (b'a'..=b'z' | b'A'..=b'Z')] => {
                self.label(*c, output, seen, fate_at);
                Fate::Label(*c)
            }
            _ => {
                self.err(ErrorKind::BadFate, fate_at..fate_at + fate.len().max(1));
                return None;
            }
        };
        Some((select, fate))
    }
}

/// The positions an attribute selects, before they are checked against a
/// rank: one index, a list, every position, or a set computed by a method
/// (bit `p` = position `p`, from the left). Negative indices count from the
/// end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pos<'a> {
    Int(i64),
    List(&'a [i64]),
    All,
    /// Positions as bits; a bit at or past the rank is out of range.
    Mask(u64),
}

/// Why a template could not be bound for one call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BindError {
    /// A selected position is outside the rank (`selector` indexes
    /// [`Template::selectors`]).
    OutOfRange {
        selector: u8,
        value: i64,
        rank: usize,
    },
    /// A fate that labels one dim, with this many positions selected.
    NotOne { selector: u8, count: usize },
    /// A repeat count (`term^count`) that is not a positive integer.
    BadCount { selector: u8, value: i64 },
    /// A side that repeats for every tensor given (`term^`) was given none.
    NoneGiven { side: Side },
    /// `@[perm]` whose attribute is not a permutation of the positions.
    NotPermutation { selector: u8, rank: usize },
    /// Input 0 has fewer dims than its term writes out.
    RankBelow { need: usize, rank: usize },
    /// More axes than the 52 labels, or more dims or terms than a bound plan holds.
    TooLarge { what: &'static str, limit: usize },
    /// An output axis no input has: a position an input writes `1` that an
    /// output keeps (output `o`).
    OutputOnly { output: usize },
    /// A hand-built plan ([`PlanBuilder`](crate::PlanBuilder)) used wrongly.
    Malformed(&'static str),
    /// A tensor (`index` on `side`) with fewer dims than its term writes
    /// out beside its `*`.
    TermRank {
        side: Side,
        index: usize,
        need: usize,
        rank: usize,
    },
}

/// Bound plans hold at most this many dims over all terms (a rank-52
/// softmax takes 104)...
pub const MAX_BOUND_DIMS: usize = 128;
/// ...and this many terms...
pub const MAX_BOUND_TERMS: usize = 32;
/// ...and this many axes inside compound dims.
pub const MAX_BOUND_COMPOUND_AXES: usize = 32;

/// A plan bound from a template, in fixed-capacity storage (no allocation);
/// [`PlanBuf::plan`] lends the [`Plan`] inference runs on. Its labels are
/// interned in order of first appearance, as the parser does, so a bound
/// plan is the plan of the notation one would have written out.
#[derive(Clone, Debug)]
pub struct PlanBuf<'t> {
    pub(crate) source: &'t str,
    pub(crate) labels: [u8; 52],
    pub(crate) n_labels: u8,
    /// Label byte (ASCII) -> its axis id + 1; 0: not interned yet.
    pub(crate) ids: [u8; 128],
    pub(crate) terms: [Term; MAX_BOUND_TERMS],
    pub(crate) n_terms: u8,
    pub(crate) n_inputs: u16,
    pub(crate) dims: [Dim; MAX_BOUND_DIMS],
    pub(crate) n_dims: u16,
    pub(crate) compound_axes: [AxisId; MAX_BOUND_COMPOUND_AXES],
    pub(crate) n_compound_axes: u8,
    pub(crate) compound_minor: AxisSet,
    pub(crate) compound_major: AxisSet,
    pub(crate) input_axes: AxisSet,
    pub(crate) output_axes: AxisSet,
    pub(crate) diagonal: AxisSet,
    pub(crate) never: AxisSet,
}

impl<'t> PlanBuf<'t> {
    /// An empty buffer (const: a thread-local slot holding one needs no
    /// lazy initialisation).
    pub const fn new(source: &'t str) -> Self {
        PlanBuf {
            source,
            labels: [0; 52],
            n_labels: 0,
            ids: [0; 128],
            terms: [Term {
                start: 0,
                len: 0,
                ellipsis: None,
            }; MAX_BOUND_TERMS],
            n_terms: 0,
            n_inputs: 0,
            dims: [Dim::Axis(0); MAX_BOUND_DIMS],
            n_dims: 0,
            compound_axes: [0; MAX_BOUND_COMPOUND_AXES],
            n_compound_axes: 0,
            compound_minor: AxisSet::EMPTY,
            compound_major: AxisSet::EMPTY,
            input_axes: AxisSet::EMPTY,
            output_axes: AxisSet::EMPTY,
            diagonal: AxisSet::EMPTY,
            never: AxisSet::EMPTY,
        }
    }

    /// Empties the buffer for another binding: only what the last one used
    /// is cleared (making a buffer writes every slot, which costs more
    /// than a binding).
    #[inline]
    pub fn reset(&mut self, source: &'t str) {
        for &l in &self.labels[..self.n_labels as usize] {
            self.ids[usize::from(l & 127)] = 0;
        }
        self.source = source;
        self.n_labels = 0;
        self.n_terms = 0;
        self.n_inputs = 0;
        self.n_dims = 0;
        self.n_compound_axes = 0;
        self.compound_minor = AxisSet::EMPTY;
        self.compound_major = AxisSet::EMPTY;
        self.input_axes = AxisSet::EMPTY;
        self.output_axes = AxisSet::EMPTY;
        self.diagonal = AxisSet::EMPTY;
        self.never = AxisSet::EMPTY;
    }

    /// The axes of the never-sharded literal labels ([`Template::never`]).
    pub fn never(&self) -> AxisSet {
        self.never
    }

    /// The plan; its `source` is the template's text.
    #[inline]
    pub fn plan(&self) -> Plan<'_> {
        Plan {
            source: self.source,
            labels: &self.labels[..self.n_labels as usize],
            terms: &self.terms[..self.n_terms as usize],
            n_inputs: self.n_inputs,
            dims: &self.dims[..self.n_dims as usize],
            compound_axes: &self.compound_axes[..self.n_compound_axes as usize],
            input_axes: self.input_axes,
            output_axes: self.output_axes,
            diagonal: self.diagonal,
            compound_minor: self.compound_minor,
            compound_major: self.compound_major,
            addends: 0,
        }
    }

    /// Appends a dim (`bind_into` checked the capacity first).
    #[inline]
    pub(crate) fn push(&mut self, d: Dim) {
        self.dims[self.n_dims as usize] = d;
        self.n_dims += 1;
    }

    /// Interns `label` (never sharded when `never`); `seen` is the current
    /// term's axes. `bind_into` checked that the labels fit.
    #[inline]
    pub(crate) fn axis(&mut self, label: u8, output: bool, seen: &mut AxisSet, never: bool) {
        let id = self.intern(label, output, seen, never);
        self.push(Dim::Axis(id));
    }

    /// A compound dim of these labels, major first (`bind_into` checked
    /// that its axes fit).
    pub(crate) fn compound(
        &mut self,
        labels: &[u8],
        output: bool,
        seen: &mut AxisSet,
        never: impl Fn(u8) -> bool,
    ) {
        let start = u16::from(self.n_compound_axes);
        for (k, &l) in labels.iter().enumerate() {
            let id = self.intern(l, output, seen, never(l));
            self.compound_axes[usize::from(self.n_compound_axes)] = id;
            self.n_compound_axes += 1;
            if k == 0 {
                self.compound_major = self.compound_major.with(id);
            } else {
                self.compound_minor = self.compound_minor.with(id);
            }
        }
        self.push(Dim::Compound {
            start,
            len: labels.len() as u8,
        });
    }

    /// The axis of `label`, interned on first use.
    #[inline]
    fn intern(&mut self, label: u8, output: bool, seen: &mut AxisSet, never: bool) -> AxisId {
        let slot = usize::from(label & 127);
        let id = match self.ids[slot] {
            0 => {
                let n = self.n_labels;
                self.labels[n as usize] = label;
                self.n_labels += 1;
                self.ids[slot] = n + 1;
                n
            }
            id => id - 1,
        };
        if !output && seen.contains(id) {
            self.diagonal = self.diagonal.with(id);
        }
        if never {
            self.never = self.never.with(id);
        }
        *seen = seen.with(id);
        id
    }
}

/// The selected positions of one selector, as a mask over `rank` positions.
fn select(select: Select, sels: &[Pos<'_>], rank: usize) -> Result<u64, BindError> {
    let all = if rank >= 64 {
        u64::MAX
    } else {
        (1u64 << rank) - 1
    };
    let (k, from, before) = match select {
        Select::Every => return Ok(all),
        Select::At(k) => (k, false, false),
        Select::From(k) => (k, true, false),
        Select::Before(k) => (k, false, true),
    };
    let norm = |v: i64, allow_end: bool| -> Result<Option<usize>, BindError> {
        let r = rank as i64;
        let a = if v < 0 { v + r } else { v };
        let top = if allow_end { r } else { r.max(1) - 1 };
        if (0..=top).contains(&a) {
            // A 0-d tensor accepts axis 0 (and -1) and has no dim to select.
            Ok((a < r || allow_end).then_some(a as usize))
        } else {
            Err(BindError::OutOfRange {
                selector: k,
                value: v,
                rank,
            })
        }
    };
    let pos = sels.get(k as usize).copied().unwrap_or(Pos::All);
    if from || before {
        let v = match pos {
            Pos::Int(v) => v,
            Pos::List(&[v]) => v,
            Pos::All => return Ok(if from { all } else { 0 }),
            Pos::Mask(m) if m.count_ones() == 1 => i64::from(m.trailing_zeros() as u8),
            Pos::List(_) | Pos::Mask(_) => {
                return Err(BindError::NotOne {
                    selector: k,
                    count: 0,
                });
            }
        };
        let at = norm(v, true)?.unwrap_or(rank);
        let below = if at >= 64 { u64::MAX } else { (1u64 << at) - 1 };
        return Ok(if from { all & !below } else { below & all });
    }
    let mut mask = 0u64;
    let mut add = |v: i64| -> Result<(), BindError> {
        if let Some(p) = norm(v, false)?
            && p < 64
        {
            mask |= 1 << p;
        }
        Ok(())
    };
    match pos {
        Pos::Int(v) => add(v)?,
        Pos::List(vs) => {
            for &v in vs {
                add(v)?;
            }
        }
        Pos::All => return Ok(all),
        Pos::Mask(m) => {
            if m & !all != 0 {
                return Err(BindError::OutOfRange {
                    selector: k,
                    value: i64::from(63 - (m & !all).leading_zeros() as u8),
                    rank,
                });
            }
            return Ok(m);
        }
    }
    Ok(mask)
}

/// The picks of the run at `items[j]`: its own, then its `Also`s.
fn run_picks(items: &[Item], j: usize) -> impl Iterator<Item = (Select, Fate)> + '_ {
    let first = match items[j] {
        Item::Positions(Some(pick)) => Some(pick),
        _ => None,
    };
    first
        .into_iter()
        .chain(items[j + 1..].iter().map_while(|i| match *i {
            Item::Also(sel, f) => Some((sel, f)),
            _ => None,
        }))
}

/// The `+1` pick of the run at `items[j]`, if it has one.
fn insert_pick(items: &[Item], j: usize) -> Option<Select> {
    run_picks(items, j).find_map(|(sel, f)| (f == Fate::Insert).then_some(sel))
}

/// The positions a `+1` pick inserts, in the output's coordinates: each
/// value the selector gives, normalized against the output's rank (the
/// positions and the insertions together).
fn insert_mask(select: Select, sels: &[Pos<'_>], n_pos: usize) -> Result<u64, BindError> {
    let Select::At(k) = select else {
        return Ok(0);
    };
    let pos = sels.get(k as usize).copied().unwrap_or(Pos::List(&[]));
    let count = match pos {
        Pos::Int(_) => 1,
        Pos::List(vs) => vs.len(),
        Pos::Mask(m) => m.count_ones() as usize,
        Pos::All => 0,
    };
    let out = n_pos + count;
    if let Pos::Mask(m) = pos {
        return match out {
            64.. => Ok(m),
            _ if m >> out == 0 => Ok(m),
            _ => Err(BindError::OutOfRange {
                selector: k,
                value: i64::from(63 - m.leading_zeros() as u8),
                rank: out,
            }),
        };
    }
    let mut mask = 0u64;
    let mut add = |v: i64| -> Result<(), BindError> {
        let a = if v < 0 { v + out as i64 } else { v };
        if !(0..out as i64).contains(&a) || a >= 64 {
            return Err(BindError::OutOfRange {
                selector: k,
                value: v,
                rank: out,
            });
        }
        mask |= 1 << a;
        Ok(())
    };
    match pos {
        Pos::Int(v) => add(v)?,
        Pos::List(vs) => vs.iter().try_for_each(|&v| add(v))?,
        Pos::All | Pos::Mask(_) => {}
    }
    Ok(mask)
}

/// How many `1`s a `*` writes in a term of a tensor of rank `rank`: the
/// dims the term's labels and `1`s leave over (an absent tensor's lone `*`
/// is one `1`, as Paddle answers it).
fn ones_count(
    items: &[Item],
    rank: Option<usize>,
    side: Side,
    index: usize,
) -> Result<usize, BindError> {
    let others = items
        .iter()
        .filter(|i| matches!(i, Item::Label(_) | Item::One | Item::Compound { .. }))
        .count();
    match rank {
        None => Ok(usize::from(others == 0)),
        Some(r) => r.checked_sub(others).ok_or(BindError::TermRank {
            side,
            index,
            need: others,
            rank: r,
        }),
    }
}

/// The number of positions, from output 0's rank, when its term writes
/// every position once (`@` or `@[..]`, no selection) besides literal dims.
fn positions_from_output(
    t: &Template<'_>,
    sels: &[Pos<'_>],
    rank: &impl Fn(Side, usize) -> Option<usize>,
) -> Option<usize> {
    if t.n_outputs() == 0 {
        return None;
    }
    let items = t.items_of(t.n_inputs());
    // A run that only inserts `1`s (`@{axis:+1}`, stack's) writes every
    // position once too, beside the inserted dims.
    let mut inserted = 0;
    let mut runs = 0;
    for i in items {
        match *i {
            Item::Label(_) | Item::One | Item::Compound { .. } => {}
            Item::Positions(None) | Item::Permuted(_) => runs += 1,
            Item::Positions(Some((Select::At(k), Fate::Insert))) => {
                runs += 1;
                inserted += match sels.get(k as usize)? {
                    Pos::Int(_) => 1,
                    Pos::List(vs) => vs.len(),
                    Pos::Mask(m) => m.count_ones() as usize,
                    Pos::All => return None,
                };
            }
            _ => return None,
        }
    }
    if runs != 1 {
        return None;
    }
    let written = items.len() - 1 + inserted;
    rank(Side::Output, 0)?.checked_sub(written)
}

/// Binds a template for one call: `sels` holds each selector's positions
/// (in [`Template::selectors`] order) and `rank(t)` the rank of term `t`
/// (inputs, then outputs; `None` when absent or not given). Input 0's rank
/// sets the positions; without it, output 0's, where that term writes every
/// position once.
///
/// ```
/// use spmd_notation::{Pos, bind, parse_template};
///
/// let t = parse_template("@->@{axis:-}").unwrap();
/// let names = ["axis"];
/// let b = bind(&t.template(&names), &[Pos::List(&[1])], [1, 1], |_, _| Some(3)).unwrap();
/// let plan = b.plan();
/// assert_eq!(plan.term_text(plan.input(0)), "abc");
/// assert_eq!(plan.term_text(plan.output(0)), "ac");
/// ```
pub fn bind<'t>(
    t: &Template<'t>,
    sels: &[Pos<'_>],
    given: [usize; 2],
    rank: impl Fn(Side, usize) -> Option<usize>,
) -> Result<PlanBuf<'t>, BindError> {
    let mut buf = PlanBuf::new(t.source);
    bind_into(&mut buf, t, sels, given, rank)?;
    Ok(buf)
}

/// [`bind`] into an empty buffer the caller owns (no copy of the buffer on
/// the hot path).
pub fn bind_into<'t>(
    buf: &mut PlanBuf<'t>,
    t: &Template<'t>,
    sels: &[Pos<'_>],
    given: [usize; 2],
    rank: impl Fn(Side, usize) -> Option<usize>,
) -> Result<(), BindError> {
    buf.reset(t.source);
    // The tensors the binding writes, in order: (template term, side, index
    // on that side). The last term of a side may stand for several.
    let mut instances = [(0u16, Side::Input, 0u16); MAX_BOUND_TERMS];
    let mut n = 0usize;
    let sides = [
        (Side::Input, 0..t.n_inputs(), 0usize),
        (Side::Output, t.n_inputs()..t.terms.len(), 1usize),
    ];
    for (side, terms, s) in sides {
        let repeating = (t.repeats[s] != Repeat::Once).then_some(usize::from(t.repeat_terms[s]));
        let mut index = 0usize;
        for term in terms.clone() {
            let count = match (Some(term) == repeating, t.repeats[s]) {
                (true, Repeat::Given) => match given[s].saturating_sub(terms.len() - 1) {
                    0 => return Err(BindError::NoneGiven { side }),
                    c => c,
                },
                (true, Repeat::Count(k)) => match sels.get(k as usize) {
                    Some(&Pos::Int(v)) if v >= 1 => usize::try_from(v).unwrap_or(usize::MAX),
                    Some(&Pos::Int(v)) => {
                        return Err(BindError::BadCount {
                            selector: k,
                            value: v,
                        });
                    }
                    _ => {
                        return Err(BindError::BadCount {
                            selector: k,
                            value: -1,
                        });
                    }
                },
                _ => 1,
            };
            if n.saturating_add(count) > MAX_BOUND_TERMS {
                return Err(BindError::TooLarge {
                    what: "terms",
                    limit: MAX_BOUND_TERMS,
                });
            }
            for _ in 0..count {
                instances[n] = (term as u16, side, index as u16);
                n += 1;
                index += 1;
            }
        }
    }
    let instances = &instances[..n];
    let n_inputs = instances.iter().filter(|i| i.1 == Side::Input).count();
    let rank_of = |i: &(u16, Side, u16)| rank(i.1, usize::from(i.2));
    // Positions: input 0's dims that its term does not write out.
    let written = t.written as usize;
    let n_pos = match rank(Side::Input, 0) {
        Some(r0) => r0.checked_sub(written).ok_or(BindError::RankBelow {
            need: written,
            rank: r0,
        })?,
        // A grad op that takes no x (transpose's takes only out_grad): the
        // positions from output 0, when it writes each of them once.
        None => positions_from_output(t, sels, &rank).unwrap_or(0),
    };
    // Positional labels: the letters the template does not use, in order;
    // with the literals, at most 52 labels, so interning cannot overflow.
    if n_pos > t.positional.len() {
        return Err(BindError::TooLarge {
            what: "labels",
            limit: 52,
        });
    }
    let pos_labels = &t.positional[..n_pos];
    // Each distinct selection's mask, once.
    let mut masks = [0u64; MAX_PICKS];
    for (m, &sel) in masks.iter_mut().zip(t.picks) {
        *m = select(sel, sels, n_pos)?;
    }
    let mask_of = |sel: Select| -> u64 {
        t.picks
            .iter()
            .position(|&p| p == sel)
            .map_or(0, |k| masks[k])
    };
    // Every dim the binding will write, counted exactly before any is
    // written: one per written item, a run of positions less what it drops,
    // `*`'s ones (an absent tensor's term is one `1`).
    // The fate of position `p` in the run at `items[j]`: its last pick that
    // selects `p` (`None`: kept).
    let fate_at = |items: &[Item], j: usize, p: usize| -> Option<Fate> {
        run_picks(items, j)
            .filter(|&(sel, f)| f != Fate::Insert && p < 64 && mask_of(sel) & (1 << p) != 0)
            .last()
            .map(|(_, f)| f)
    };
    // The dims one form (a term's items between `|`s) writes for a tensor.
    let form_dims = |items: &[Item], inst: &(u16, Side, u16)| -> Result<usize, BindError> {
        let mut dims = 0usize;
        for (j, it) in items.iter().enumerate() {
            dims = dims.saturating_add(match *it {
                Item::Label(_) | Item::One | Item::Compound { .. } => 1,
                Item::Positions(Some(_)) => {
                    let dropped = (0..n_pos)
                        .filter(|&p| fate_at(items, j, p) == Some(Fate::Drop))
                        .count();
                    let inserted = match insert_pick(items, j) {
                        Some(sel) => insert_mask(sel, sels, n_pos)?.count_ones() as usize,
                        None => 0,
                    };
                    n_pos - dropped + inserted
                }
                Item::Positions(None) | Item::Permuted(_) => n_pos,
                Item::Ones => ones_count(items, rank_of(inst), inst.1, usize::from(inst.2))?,
                Item::Also(..) | Item::Or => 0,
            });
        }
        Ok(dims)
    };
    // A tensor's form: the first whose dims are its rank (the first when
    // its rank is unknown, or none fits: the engine then names the
    // mismatch).
    let form_of = |inst: &(u16, Side, u16)| -> Result<&[Item], BindError> {
        let items = t.items_of(usize::from(inst.0));
        if !items.contains(&Item::Or) {
            return Ok(items);
        }
        let mut forms = items.split(|i| *i == Item::Or);
        let first = forms.next().unwrap_or(&[]);
        if let Some(r) = rank_of(inst) {
            for form in core::iter::once(first).chain(forms) {
                if form_dims(form, inst).ok() == Some(r) {
                    return Ok(form);
                }
            }
        }
        Ok(first)
    };
    let mut total = 0usize;
    let mut compound_axes = 0usize;
    for inst in instances {
        let form = form_of(inst)?;
        total = total.saturating_add(form_dims(form, inst)?);
        for it in form {
            if let Item::Compound { len, .. } = *it {
                compound_axes += usize::from(len);
            }
        }
    }
    if compound_axes > MAX_BOUND_COMPOUND_AXES {
        return Err(BindError::TooLarge {
            what: "compound axes",
            limit: MAX_BOUND_COMPOUND_AXES,
        });
    }
    if total > MAX_BOUND_DIMS {
        return Err(BindError::TooLarge {
            what: "dims",
            limit: MAX_BOUND_DIMS,
        });
    }
    let is_never = |c: u8| label_bit(c).is_some_and(|b| t.never.contains(b));
    buf.n_inputs = n_inputs as u16;
    for (k, inst) in instances.iter().enumerate() {
        let output = inst.1 == Side::Output;
        let start = buf.n_dims;
        let mut seen = AxisSet::EMPTY;
        let items = form_of(inst)?;
        for (j, item) in items.iter().enumerate() {
            match *item {
                Item::Label(c) => buf.axis(c, output, &mut seen, is_never(c)),
                Item::Compound { start, len } => {
                    let labels =
                        &t.compounds[usize::from(start)..usize::from(start) + usize::from(len)];
                    buf.compound(labels, output, &mut seen, is_never);
                }
                Item::Or => {}
                Item::One => buf.push(Dim::One),
                Item::Ones => {
                    // Counted in `total` above.
                    let n = ones_count(items, rank_of(inst), inst.1, usize::from(inst.2))?;
                    for _ in 0..n {
                        buf.push(Dim::One);
                    }
                }
                Item::Also(..) => {}
                Item::Positions(None) => {
                    for &l in pos_labels {
                        buf.axis(l, output, &mut seen, false);
                    }
                }
                Item::Positions(Some(_)) => {
                    for (sel, fate) in run_picks(items, j) {
                        let mask = mask_of(sel);
                        if let Fate::Label(_) = fate
                            && mask.count_ones() != 1
                        {
                            let k = match sel {
                                Select::At(k) | Select::From(k) | Select::Before(k) => k,
                                Select::Every => 0,
                            };
                            return Err(BindError::NotOne {
                                selector: k,
                                count: mask.count_ones() as usize,
                            });
                        }
                    }
                    let inserts = match insert_pick(items, j) {
                        Some(sel) => insert_mask(sel, sels, n_pos)?,
                        None => 0,
                    };
                    // The run's dims in order: an inserted `1` where the mask
                    // says, else the next position with its fate (a run
                    // that inserts drops nothing, so the two counts agree).
                    let (mut p, mut out) = (0usize, 0usize);
                    loop {
                        if out < 64 && inserts & (1 << out) != 0 {
                            buf.push(Dim::One);
                            out += 1;
                            continue;
                        }
                        if p == n_pos {
                            break;
                        }
                        match fate_at(items, j, p) {
                            None => buf.axis(pos_labels[p], output, &mut seen, false),
                            Some(Fate::Label(c)) => buf.axis(c, output, &mut seen, is_never(c)),
                            Some(Fate::One) => buf.push(Dim::One),
                            Some(Fate::Drop | Fate::Insert) => out = out.wrapping_sub(1),
                        }
                        p += 1;
                        out = out.wrapping_add(1);
                    }
                }
                Item::Permuted(k) => {
                    let perm = match sels.get(k as usize).copied() {
                        Some(Pos::List(p)) => p,
                        Some(Pos::Int(_)) if n_pos == 1 => &[0][..],
                        _ => &[][..],
                    };
                    let mut used = 0u64;
                    let ok = perm.len() == n_pos
                        && perm.iter().all(|&v| {
                            let a = if v < 0 { v + n_pos as i64 } else { v };
                            let fresh =
                                (0..n_pos as i64).contains(&a) && a < 64 && used & (1 << a) == 0;
                            if fresh {
                                used |= 1 << a;
                            }
                            fresh
                        });
                    if !ok {
                        return Err(BindError::NotPermutation {
                            selector: k,
                            rank: n_pos,
                        });
                    }
                    for &v in perm {
                        let a = if v < 0 { v + n_pos as i64 } else { v };
                        buf.axis(pos_labels[a as usize], output, &mut seen, false);
                    }
                }
            }
        }
        if output {
            buf.output_axes = buf.output_axes.union(seen);
        } else {
            buf.input_axes = buf.input_axes.union(seen);
        }
        buf.terms[k] = Term {
            start,
            len: buf.n_dims - start,
            ellipsis: None,
        };
        buf.n_terms += 1;
    }
    if !buf.output_axes.minus(buf.input_axes).is_empty() {
        let missing = buf.output_axes.minus(buf.input_axes);
        let output = (n_inputs..instances.len())
            .position(|o| {
                let p = buf.plan();
                !p.axes_of(p.terms[o]).intersect(missing).is_empty()
            })
            .unwrap_or(0);
        return Err(BindError::OutputOnly { output });
    }
    Ok(())
}
