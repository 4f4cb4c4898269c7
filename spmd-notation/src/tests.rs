//! Parser unit tests: one per error kind `parse` can produce (kind, exact byte
//! range and the column quoted by `message()`), error collection and ordering,
//! and the plans of valid notations.
//!
//! Every expected range below is counted by hand from the notation text and the
//! grammar of docs/semantics.md §3; columns are 1-based and count characters, not bytes.

use alloc::format;
use alloc::string::ToString;
use alloc::vec;
use alloc::vec::Vec;
use core::ops::Range;

use crate::{AxisSet, Dim, ErrorKind, NotationError, Plan, Term, parse, parse_terms};

/// Parses `src`, which must fail with exactly one error, and checks that error.
#[track_caller]
fn one_error(src: &str, kind: ErrorKind, range: Range<usize>, column: usize) {
    let errs = parse(src).expect_err(src);
    assert_eq!(errs.source, src);
    assert_eq!(
        errs.errors,
        vec![NotationError::new(kind.clone(), range.clone())],
        "errors of {src:?}"
    );
    let e = &errs.errors[0];
    assert_eq!(e.column(src), column, "column of {kind:?} in {src:?}");
    let msg = e.message(src);
    assert_eq!(
        msg,
        format!("{kind} at column {column} of einsum {src:?}")
            + &kind.hint().map(|h| format!(" ({h})")).unwrap_or_default(),
    );
    // The one-error `Display` of the collection is that message.
    assert_eq!(errs.to_string(), msg);
}

/// The set of axes with these labels in `plan`.
fn axes(plan: &Plan<'_>, labels: &str) -> AxisSet {
    labels.chars().fold(AxisSet::EMPTY, |s, c| {
        s.with(plan.axis(c).unwrap_or_else(|| panic!("no axis {c}")))
    })
}

fn terms(plan: &Plan<'_>) -> Vec<alloc::string::String> {
    plan.terms.iter().map(|&t| plan.term_text(t)).collect()
}

// ---------------------------------------------------------------- error kinds

#[test]
fn missing_arrow_spans_the_whole_text() {
    one_error("mk,kn", ErrorKind::MissingArrow, 0..5, 1);
}

#[test]
fn missing_arrow_in_empty_text() {
    one_error("", ErrorKind::MissingArrow, 0..0, 1);
}

#[test]
fn extra_arrow_points_at_the_second_arrow() {
    // i=0 -=1 >=2 i=3 -=4 >=5 i=6
    one_error("i->i->i", ErrorKind::ExtraArrow, 4..6, 5);
}

#[test]
fn every_extra_arrow_is_reported() {
    let errs = parse("i->i->i->i").unwrap_err();
    assert_eq!(
        errs.errors,
        vec![
            NotationError::new(ErrorKind::ExtraArrow, 4..6),
            NotationError::new(ErrorKind::ExtraArrow, 7..9),
        ]
    );
}

#[test]
fn empty_operands_points_at_the_arrow() {
    one_error("->", ErrorKind::EmptyOperands, 0..2, 1);
    // Whitespace only is still empty; the arrow starts at byte 2.
    one_error("  ->", ErrorKind::EmptyOperands, 2..4, 3);
}

#[test]
fn unexpected_char() {
    one_error("i#->i", ErrorKind::UnexpectedChar('#'), 1..2, 2);
    // Digits other than `1` are outside the grammar.
    one_error("i2->i", ErrorKind::UnexpectedChar('2'), 1..2, 2);
    // A lone `-` or `>` is not an arrow.
    one_error("i-j->i", ErrorKind::UnexpectedChar('-'), 1..2, 2);
}

#[test]
fn unexpected_multibyte_char_has_byte_range_and_char_column() {
    // `é` is two bytes (1..3) but one character: column 2.
    one_error("ié->i", ErrorKind::UnexpectedChar('é'), 1..3, 2);
}

#[test]
fn column_counts_characters_not_bytes() {
    // a=0 é=1..3 b=3 -=4 >=5 a=6 q=7: after `é`, bytes and columns diverge.
    let src = "aéb->aq";
    let errs = parse(src).unwrap_err();
    assert_eq!(errs.errors.len(), 2);
    let q = &errs.errors[1];
    assert_eq!(q.kind, ErrorKind::UnknownOutputLabel('q'));
    assert_eq!(q.range, 7..8);
    assert_eq!(q.column(src), 7);
    assert!(
        q.message(src).contains("at column 7 "),
        "{}",
        q.message(src)
    );
}

#[test]
fn malformed_ellipsis() {
    one_error("..i->i", ErrorKind::MalformedEllipsis, 0..2, 1);
    one_error("i.->i", ErrorKind::MalformedEllipsis, 1..2, 2);
    // Four dots are not an ellipsis either: the whole run is reported.
    one_error("....i->i", ErrorKind::MalformedEllipsis, 0..4, 1);
}

#[test]
fn repeated_ellipsis_points_at_the_second() {
    one_error("...i...->i", ErrorKind::RepeatedEllipsis, 4..7, 5);
}

#[test]
fn ellipsis_in_compound() {
    one_error("(h...d)->hd", ErrorKind::EllipsisInCompound, 2..5, 3);
}

#[test]
fn one_in_compound() {
    one_error("(h1d)->hd", ErrorKind::OneInCompound, 2..3, 3);
}

#[test]
fn unclosed_paren_points_at_the_open_paren() {
    one_error("b(hd->bhd", ErrorKind::UnclosedParen, 1..2, 2);
    // A comma ends the term, so the compound is unclosed there too.
    one_error("(hd,h->hd", ErrorKind::UnclosedParen, 0..1, 1);
}

#[test]
fn unopened_paren() {
    one_error("hd)->hd", ErrorKind::UnopenedParen, 2..3, 3);
}

#[test]
fn nested_paren_points_at_the_inner_paren() {
    one_error("(h(dk))->hdk", ErrorKind::NestedParen, 2..3, 3);
}

#[test]
fn a_nested_paren_left_open_is_also_unclosed() {
    // Two `(` and one `)`: the inner pair closes, the outer stays open.
    let errs = parse("(h(d)->hd").unwrap_err();
    assert_eq!(
        errs.errors,
        vec![
            NotationError::new(ErrorKind::UnclosedParen, 0..1),
            NotationError::new(ErrorKind::NestedParen, 2..3),
        ]
    );
}

#[test]
fn short_compound_spans_the_parentheses() {
    one_error("(h)->h", ErrorKind::ShortCompound, 0..3, 1);
    one_error("b()->b", ErrorKind::ShortCompound, 1..3, 2);
}

#[test]
fn repeated_in_compound() {
    one_error("(hhd)->hd", ErrorKind::RepeatedInCompound('h'), 2..3, 3);
}

#[test]
fn output_ellipsis_without_input() {
    one_error("ij->...i", ErrorKind::OutputEllipsisWithoutInput, 4..7, 5);
    one_error("ij->i...", ErrorKind::OutputEllipsisWithoutInput, 5..8, 6);
}

#[test]
fn unknown_output_label() {
    one_error("mk,kn->mq", ErrorKind::UnknownOutputLabel('q'), 8..9, 9);
    // Labels are case sensitive.
    one_error("ab->A", ErrorKind::UnknownOutputLabel('A'), 4..5, 5);
}

#[test]
fn repeated_output_label_points_at_the_repeat() {
    one_error("ij->iji", ErrorKind::RepeatedOutputLabel('i'), 6..7, 7);
    // Inside an output compound too (`i` already seen as a plain dim).
    one_error("ij->i(ji)", ErrorKind::RepeatedOutputLabel('i'), 7..8, 8);
}

// ------------------------------------------------- several errors, in order

#[test]
fn all_errors_of_one_notation_in_source_order() {
    // a=0 #=1 b=2 ,=3 .=4 .=5 c=6 -=7 >=8 a=9 q=10 ,=11 b=12 b=13
    let src = "a#b,..c->aq,bb";
    let errs = parse(src).unwrap_err();
    assert_eq!(
        errs.errors,
        vec![
            NotationError::new(ErrorKind::UnexpectedChar('#'), 1..2),
            NotationError::new(ErrorKind::MalformedEllipsis, 4..6),
            NotationError::new(ErrorKind::UnknownOutputLabel('q'), 10..11),
            NotationError::new(ErrorKind::RepeatedOutputLabel('b'), 13..14),
        ]
    );
    let cols: Vec<usize> = errs.errors.iter().map(|e| e.column(src)).collect();
    assert_eq!(cols, vec![2, 5, 11, 14]);
    // Display joins the messages with "; " in the same order.
    let shown = errs.to_string();
    let parts: Vec<&str> = shown.split("; ").collect();
    assert_eq!(parts.len(), 4, "{shown}");
    for (p, e) in parts.iter().zip(&errs.errors) {
        assert_eq!(*p, e.message(src));
    }
}

#[test]
fn errors_found_late_are_still_sorted_by_position() {
    // The extra arrow (bytes 5..7) is discovered before the operands are read;
    // the stray `#` (byte 1) must still come first.
    let src = "i#->i->i";
    let errs = parse(src).unwrap_err();
    assert_eq!(
        errs.errors,
        vec![
            NotationError::new(ErrorKind::UnexpectedChar('#'), 1..2),
            NotationError::new(ErrorKind::ExtraArrow, 5..7),
        ]
    );
}

#[test]
fn missing_arrow_still_reports_stray_characters() {
    let errs = parse("i$j").unwrap_err();
    assert_eq!(
        errs.errors,
        vec![
            NotationError::new(ErrorKind::MissingArrow, 0..3),
            NotationError::new(ErrorKind::UnexpectedChar('$'), 1..2),
        ]
    );
}

#[test]
fn errors_on_both_sides_and_in_every_term() {
    // (=0 h=1 ,=2 .=3 .=4 .=5 .=6 .=7 .=8 -=9 >=10 .=11 .=12 .=13 z=14
    let src = "(h,......->...z";
    let errs = parse(src).unwrap_err();
    let kinds: Vec<(ErrorKind, Range<usize>)> = errs
        .errors
        .iter()
        .map(|e| (e.kind.clone(), e.range.clone()))
        .collect();
    assert_eq!(
        kinds,
        vec![
            (ErrorKind::UnclosedParen, 0..1),
            // Six dots in a row are one malformed run, not two ellipses.
            (ErrorKind::MalformedEllipsis, 3..9),
            (ErrorKind::OutputEllipsisWithoutInput, 11..14),
            (ErrorKind::UnknownOutputLabel('z'), 14..15),
        ]
    );
}

#[test]
fn errors_after_an_extra_arrow_are_reported_too() {
    // i=0 -=1 >=2 i=3 -=4 >=5 i=6 $=7
    let errs = parse("i->i->i$").unwrap_err();
    assert_eq!(
        errs.errors,
        vec![
            NotationError::new(ErrorKind::ExtraArrow, 4..6),
            NotationError::new(ErrorKind::UnexpectedChar('$'), 7..8),
        ]
    );
}

// ------------------------------------------------------------ valid plans

#[test]
fn matmul_plan() {
    let n = parse("mk,kn->mn").unwrap();
    let p = n.plan();
    assert_eq!(n.source(), "mk,kn->mn");
    assert_eq!(p.source, "mk,kn->mn");
    assert_eq!(p.to_string(), "mk,kn->mn");
    assert_eq!(p.labels, b"mkn");
    assert_eq!(p.n_inputs(), 2);
    assert_eq!(p.n_outputs(), 1);
    assert_eq!(p.n_axes(), 3);
    assert_eq!(terms(&p), ["mk", "kn", "mn"]);
    assert_eq!(p.input(0).len, 2);
    assert_eq!(p.output(0), p.terms[2]);
    assert_eq!(p.dims_of(p.input(1)), &[Dim::Axis(1), Dim::Axis(2)]);
    assert_eq!(p.contracted(), axes(&p, "k"));
    assert_eq!(p.input_axes, axes(&p, "mkn"));
    assert_eq!(p.output_axes, axes(&p, "mn"));
    assert_eq!(p.axes_of(p.input(0)), axes(&p, "mk"));
    assert!(p.diagonal.is_empty());
    assert!(p.compound_major.is_empty() && p.compound_minor.is_empty());
    assert!(p.compound_axes.is_empty());
    assert!(!p.inputs_have_ellipsis());
    assert!(p.terms.iter().all(|t| t.ellipsis.is_none()));
}

#[test]
fn labels_are_numbered_in_order_of_first_appearance() {
    let n = parse("ba,ac->cb").unwrap();
    let p = n.plan();
    assert_eq!(p.labels, b"bac");
    assert_eq!(p.axis('b'), Some(0));
    assert_eq!(p.axis('a'), Some(1));
    assert_eq!(p.axis('c'), Some(2));
    assert_eq!(p.axis('z'), None);
    assert_eq!(p.label(2), 'c');
    assert_eq!(p.dims_of(p.output(0)), &[Dim::Axis(2), Dim::Axis(0)]);
    assert_eq!(p.contracted(), axes(&p, "a"));
}

#[test]
fn upper_and_lower_case_are_different_labels() {
    let n = parse("aA->Aa").unwrap();
    let p = n.plan();
    assert_eq!(p.labels, b"aA");
    assert!(p.diagonal.is_empty());
    assert!(p.contracted().is_empty());
}

#[test]
fn ellipsis_positions() {
    let n = parse("...ij,i...j,ij...->...j").unwrap();
    let p = n.plan();
    assert_eq!(p.input(0).ellipsis, Some(0));
    assert_eq!(p.input(1).ellipsis, Some(1));
    assert_eq!(p.input(2).ellipsis, Some(2)); // after the last dim
    assert_eq!(p.output(0).ellipsis, Some(0));
    assert_eq!(
        p.terms.iter().map(|t| t.len).collect::<Vec<_>>(),
        [2, 2, 2, 1]
    );
    assert!(p.inputs_have_ellipsis());
    assert_eq!(terms(&p), ["...ij", "i...j", "ij...", "...j"]);
    assert_eq!(p.contracted(), axes(&p, "i"));
}

#[test]
fn ellipsis_alone_and_in_one_input_only() {
    let n = parse("...->...").unwrap();
    let p = n.plan();
    assert_eq!(p.n_axes(), 0);
    assert_eq!(
        p.input(0),
        Term {
            start: 0,
            len: 0,
            ellipsis: Some(0)
        }
    );
    assert_eq!(
        p.output(0),
        Term {
            start: 0,
            len: 0,
            ellipsis: Some(0)
        }
    );

    // An output may use `...` when any one input has it.
    let n = parse("k,...k->...k").unwrap();
    let p = n.plan();
    assert_eq!(p.input(0).ellipsis, None);
    assert_eq!(p.input(1).ellipsis, Some(0));
    assert!(p.inputs_have_ellipsis());
}

#[test]
fn compound_dims_record_major_and_minor_factors() {
    let n = parse("bs(hd)->bshd").unwrap();
    let p = n.plan();
    assert_eq!(p.labels, b"bshd");
    let dims = p.dims_of(p.input(0));
    assert_eq!(dims.len(), 3);
    assert_eq!(&dims[..2], &[Dim::Axis(0), Dim::Axis(1)]);
    let Dim::Compound { start, len } = dims[2] else {
        panic!("expected a compound, got {:?}", dims[2]);
    };
    assert_eq!(len, 2);
    assert_eq!(p.compound(start, len), &[2, 3]);
    assert_eq!(p.compound_major, axes(&p, "h"));
    assert_eq!(p.compound_minor, axes(&p, "d"));
    assert_eq!(p.axes_of(p.input(0)), axes(&p, "bshd"));
    assert!(p.contracted().is_empty());
    assert_eq!(terms(&p), ["bs(hd)", "bshd"]);
}

#[test]
fn compound_in_an_output_and_longer_compounds() {
    let n = parse("bshd->bs(hd)").unwrap();
    let p = n.plan();
    assert_eq!(p.compound_major, axes(&p, "h"));
    assert_eq!(p.compound_minor, axes(&p, "d"));
    assert_eq!(p.dims_of(p.output(0)).len(), 3);
    assert!(p.contracted().is_empty());

    let n = parse("(abc)d->a(dc)b").unwrap();
    let p = n.plan();
    assert_eq!(terms(&p), ["(abc)d", "a(dc)b"]);
    assert_eq!(p.compound_major, axes(&p, "ad"));
    assert_eq!(p.compound_minor, axes(&p, "bc"));
    assert_eq!(p.compound_axes.len(), 5);
}

#[test]
fn a_label_repeated_in_an_input_is_a_diagonal() {
    let n = parse("ii->i").unwrap();
    let p = n.plan();
    assert_eq!(p.labels, b"i");
    assert_eq!(p.diagonal, axes(&p, "i"));
    assert_eq!(p.dims_of(p.input(0)), &[Dim::Axis(0), Dim::Axis(0)]);

    // Repeats across terms are shared axes, not diagonals.
    let n = parse("ij,jk->ik").unwrap();
    assert!(n.plan().diagonal.is_empty());

    // Only the repeated label is diagonal.
    let n = parse("iji->j").unwrap();
    let p = n.plan();
    assert_eq!(p.diagonal, axes(&p, "i"));
    assert_eq!(p.contracted(), axes(&p, "i"));
}

#[test]
fn one_dims() {
    let n = parse("1i,i1->1i").unwrap();
    let p = n.plan();
    assert_eq!(p.labels, b"i");
    assert_eq!(p.dims_of(p.input(0)), &[Dim::One, Dim::Axis(0)]);
    assert_eq!(p.dims_of(p.input(1)), &[Dim::Axis(0), Dim::One]);
    assert_eq!(p.dims_of(p.output(0)), &[Dim::One, Dim::Axis(0)]);
    assert!(p.contracted().is_empty());
}

#[test]
fn whitespace_between_tokens_is_ignored() {
    let tight = parse("...mk,kn->...mn").unwrap();
    let loose = parse("  ... m k ,\tk n  ->  ... m\nn ").unwrap();
    let (a, b) = (tight.plan(), loose.plan());
    assert_eq!(a.labels, b.labels);
    assert_eq!(a.terms, b.terms);
    assert_eq!(a.dims, b.dims);
    assert_eq!(a.n_inputs, b.n_inputs);
    assert_eq!(a.contracted(), b.contracted());
    // The source is kept as written.
    assert_eq!(b.source, "  ... m k ,\tk n  ->  ... m\nn ");

    let n = parse("bs ( h d ) -> b s h d").unwrap();
    assert_eq!(terms(&n.plan()), ["bs(hd)", "bshd"]);
}

#[test]
fn scalar_output() {
    let n = parse("ij->").unwrap();
    let p = n.plan();
    assert_eq!(p.n_outputs(), 1);
    assert_eq!(p.output(0).len, 0);
    assert_eq!(p.output(0).ellipsis, None);
    assert!(p.output_axes.is_empty());
    assert_eq!(p.contracted(), axes(&p, "ij"));
}

#[test]
fn scalar_operand() {
    let n = parse(",i->i").unwrap();
    let p = n.plan();
    assert_eq!(p.n_inputs(), 2);
    assert_eq!(p.input(0).len, 0);
    assert_eq!(p.input(1).len, 1);
    assert_eq!(terms(&p), ["", "i", "i"]);
    assert!(p.contracted().is_empty());

    let n = parse("->").unwrap_err();
    assert_eq!(n.errors[0].kind, ErrorKind::EmptyOperands);
    // `,->` has two (scalar) operands: not empty.
    let n = parse(",->").unwrap();
    assert_eq!(n.plan().n_inputs(), 2);
    assert_eq!(n.plan().n_outputs(), 1);
}

#[test]
fn several_outputs() {
    let n = parse("ijk->ij,jk,").unwrap();
    let p = n.plan();
    assert_eq!(p.n_inputs(), 1);
    assert_eq!(p.n_outputs(), 3);
    assert_eq!(terms(&p), ["ijk", "ij", "jk", ""]);
    assert_eq!(p.axes_of(p.output(0)), axes(&p, "ij"));
    assert_eq!(p.axes_of(p.output(1)), axes(&p, "jk"));
    // Every input axis is in some output: nothing is contracted.
    assert!(p.contracted().is_empty());
}

#[test]
fn a_label_may_repeat_across_outputs() {
    let n = parse("ij->ij,ji").unwrap();
    let p = n.plan();
    assert_eq!(terms(&p), ["ij", "ij", "ji"]);
}

#[test]
fn all_fifty_two_labels() {
    let letters: alloc::string::String = ('a'..='z').chain('A'..='Z').collect();
    let src = format!("{letters}->{letters}");
    let n = parse(&src).unwrap();
    let p = n.plan();
    assert_eq!(p.n_axes(), crate::MAX_LABELS);
    assert_eq!(p.axis('Z'), Some(51));
    assert_eq!(p.input_axes.len(), 52);
    assert!(p.contracted().is_empty());
}

// ------------------------------------------------------- no follow-on errors

#[test]
fn an_empty_operand_list_does_not_make_every_output_label_unknown() {
    let errs = parse("->m...n").unwrap_err();
    assert_eq!(
        errs.errors,
        vec![NotationError::new(ErrorKind::EmptyOperands, 0..2)]
    );
}

#[test]
fn a_nested_paren_is_one_error_not_two() {
    // b=0 (=1 h=2 (=3 d=4 k=5 )=6 )=7
    let errs = parse("b(h(dk))->b").unwrap_err();
    assert_eq!(
        errs.errors,
        vec![NotationError::new(ErrorKind::NestedParen, 3..4)]
    );
}

// ------------------------------------------------------------- parse_terms

#[test]
fn parse_terms_writes_a_lone_scalar_operand() {
    let n = parse_terms(&[""], &["11"]).unwrap();
    let p = n.plan();
    assert_eq!((p.n_inputs(), p.n_outputs()), (1, 1));
    assert_eq!(p.input(0).len, 0);
    assert_eq!(p.input(0).ellipsis, None);
    assert_eq!(p.dims_of(p.output(0)), &[Dim::One, Dim::One]);
    // The same text through `parse` is an empty operand list.
    one_error("->11", ErrorKind::EmptyOperands, 0..2, 1);
    // A scalar reduced from nothing to a 0-d output: one empty term each side.
    let n = parse_terms(&[""], &[""]).unwrap();
    assert_eq!((n.plan().n_inputs(), n.plan().n_outputs()), (1, 1));
}

#[test]
fn parse_terms_agrees_with_parse_where_the_text_can_say_it() {
    for (ins, outs, text) in [
        (&["mk", "kn"][..], &["mn"][..], "mk,kn->mn"),
        (&["...k", ""][..], &["...k"][..], "...k,->...k"),
        (&["bs(hd)"][..], &["bshd", "bs"][..], "bs(hd)->bshd,bs"),
    ] {
        let built = parse_terms(ins, outs).unwrap();
        assert_eq!(built, parse(text).unwrap(), "{text}");
        assert_eq!(built.source(), text);
    }
}

#[test]
fn parse_terms_errors_point_into_the_joined_source() {
    // No operand at all: the empty operand list of `->a`.
    let e = parse_terms(&[], &["a"]).unwrap_err();
    assert_eq!(
        e.errors,
        vec![NotationError::new(ErrorKind::EmptyOperands, 0..2)]
    );
    // `q` in the second output term: byte 6 of "ab,b->a,q".
    let e = parse_terms(&["ab", "b"], &["a", "q"]).unwrap_err();
    assert_eq!(e.source, "ab,b->a,q");
    assert_eq!(
        e.errors,
        vec![NotationError::new(ErrorKind::UnknownOutputLabel('q'), 8..9)]
    );
    // A separator inside a term would be read as two terms: an error at it.
    let e = parse_terms(&["a,b"], &["ab"]).unwrap_err();
    assert_eq!(
        e.errors,
        vec![NotationError::new(ErrorKind::UnexpectedChar(','), 1..2)]
    );
    let e = parse_terms(&["ab"], &["a->b"]).unwrap_err();
    assert_eq!(
        e.errors,
        vec![NotationError::new(ErrorKind::ExtraArrow, 5..7)]
    );
}

#[test]
fn addends_are_marked_and_contract_nothing() {
    let n = parse("bsk,kn,+n->bsn").unwrap();
    let p = n.plan();
    assert_eq!(p.addends, 0b100);
    assert!(p.is_addend(2) && !p.is_addend(0) && !p.is_addend(1));
    assert_eq!(p.contracted(), axes(&p, "k"));
    // The `+` is not part of the term: the addend's term is `n`.
    assert_eq!(terms(&p), ["bsk", "kn", "n", "bsn"]);
    // Anywhere among the operands, with white space and an ellipsis.
    let p2 = parse(" + ...mn , ...mk,kn->...mn").unwrap();
    assert_eq!(p2.plan().addends, 0b1);
    // A sum of addends alone (a residual add), and addends through parse_terms.
    assert_eq!(parse("+ab,+ab->ab").unwrap().plan().addends, 0b11);
    let t = parse_terms(&["bsk", "kn", "+n"], &["bsn"]).unwrap();
    assert_eq!(t.plan().addends, 0b100);
    assert!(!parse("mk,kn->mn").unwrap().plan().has_addends());
}

#[test]
fn addend_errors() {
    one_error("ab->+ab", ErrorKind::AddendInOutput, 4..5, 5);
    one_error("a+b->ab", ErrorKind::MisplacedPlus, 1..2, 2);
    one_error("++ab->ab", ErrorKind::MisplacedPlus, 1..2, 2);
    // The label the output lacks is pointed at inside the addend.
    one_error(
        "bk,kn,+kn->bn",
        ErrorKind::AddendLabelNotInOutput('k'),
        7..8,
        8,
    );
    one_error("ab,+b->ab,b", ErrorKind::AddendWithSeveralOutputs, 3..4, 4);
    // Every problem at once.
    let errs = parse("ab,+ac,+d->ab").unwrap_err();
    let kinds: Vec<ErrorKind> = errs.errors.iter().map(|e| e.kind.clone()).collect();
    assert_eq!(
        kinds,
        [
            ErrorKind::AddendLabelNotInOutput('c'),
            ErrorKind::AddendLabelNotInOutput('d')
        ]
    );
}

mod templates {
    use alloc::string::String;
    use alloc::vec::Vec;

    use crate::{BindError, ErrorKind, Plan, Pos, Side, bind, parse, parse_template};

    /// The bound plan equals the parsed plan of `text` in everything but
    /// its source.
    #[track_caller]
    fn same(bound: Plan<'_>, text: &str) {
        let n = parse(text).unwrap();
        let p = n.plan();
        assert_eq!(bound.labels, p.labels, "labels vs {text}");
        assert_eq!(bound.terms, p.terms, "terms vs {text}");
        assert_eq!(bound.dims, p.dims, "dims vs {text}");
        assert_eq!(bound.n_inputs, p.n_inputs);
        assert_eq!(bound.input_axes, p.input_axes);
        assert_eq!(bound.output_axes, p.output_axes);
        assert_eq!(bound.diagonal, p.diagonal);
    }

    fn bind_with(t: &str, sels: &[Pos<'_>], ranks: &[usize]) -> Result<String, BindError> {
        let owned = parse_template(t).unwrap();
        let names: Vec<&str> = owned.selectors().iter().map(String::as_str).collect();
        let n_in = owned.n_inputs();
        let n_out = owned.terms().len() - n_in;
        let rank = |side: Side, i: usize| match side {
            Side::Input => ranks.get(i).copied(),
            Side::Output => ranks.get(n_in + i).copied(),
        };
        let b = bind(&owned.template(&names), sels, [n_in, n_out], rank)?;
        let p = b.plan();
        let side = |r: core::ops::Range<usize>| {
            r.map(|i| p.term_text(p.terms[i]))
                .collect::<Vec<_>>()
                .join(",")
        };
        let text = alloc::format!(
            "{}->{}",
            side(0..p.n_inputs()),
            side(p.n_inputs()..p.terms.len())
        );
        if !text.starts_with("->") && !text.starts_with(',') {
            same(p, &text);
        }
        Ok(text)
    }

    #[test]
    fn a_dim_selected_by_an_attribute() {
        // softmax, axis 1 of rank 3: the positions are b, c, d (a is literal).
        assert_eq!(
            bind_with("@{axis:a}->@{axis:a}", &[Pos::Int(1)], &[3]).unwrap(),
            "bad->bad"
        );
        assert_eq!(
            bind_with("@{axis:a}->@{axis:a}", &[Pos::Int(-1)], &[3]).unwrap(),
            "bca->bca"
        );
        // topk: the outputs' axis is a dim of its own.
        assert_eq!(
            bind_with("@{axis:a}->@{axis:1},@{axis:1}", &[Pos::Int(0)], &[2]).unwrap(),
            "ac->1c,1c"
        );
    }

    #[test]
    fn reductions_drop_or_keep_the_selected_dims() {
        assert_eq!(
            bind_with("@->@{axis:-}", &[Pos::List(&[0, 2])], &[3]).unwrap(),
            "abc->b"
        );
        assert_eq!(
            bind_with("@->@{axis:1}", &[Pos::List(&[0, -1])], &[3]).unwrap(),
            "abc->1b1"
        );
        assert_eq!(
            bind_with("@->@{axis:-}", &[Pos::All], &[2]).unwrap(),
            "ab->"
        );
        // The reduced dims of the input written `1`: never sharded.
        assert_eq!(
            bind_with("@{axis:1}->@{axis:-}", &[Pos::List(&[1])], &[3]).unwrap(),
            "a1c->ac"
        );
    }

    #[test]
    fn permutations_ranges_and_ones() {
        assert_eq!(
            bind_with("@->@[perm]", &[Pos::List(&[2, 0, 1])], &[3]).unwrap(),
            "abc->cab"
        );
        assert_eq!(
            bind_with("@->@[perm]", &[Pos::List(&[-1, 0])], &[2]).unwrap(),
            "ab->ba"
        );
        let ln = "@{begin..:1},*,*->@{begin..:1},@{begin..:-},@{begin..:-}";
        assert_eq!(
            bind_with(ln, &[Pos::Int(1)], &[3, 1, 1]).unwrap(),
            "a11,1,1->a11,a,a"
        );
        assert_eq!(
            bind_with("@{..begin:1}->@{..begin:1}", &[Pos::Int(-1)], &[3]).unwrap(),
            "11c->11c"
        );
        // `*` is the tensor's own rank of `1`s; a scalar operand too.
        assert_eq!(bind_with("*->1", &[], &[3]).unwrap(), "111->1");
        assert_eq!(bind_with("*->1", &[], &[0]).unwrap(), "->1");
    }

    #[test]
    fn binding_errors_name_the_selector() {
        let t = "@{axis:a}->@{axis:a}";
        assert_eq!(
            bind_with(t, &[Pos::Int(3)], &[3]),
            Err(BindError::OutOfRange {
                selector: 0,
                value: 3,
                rank: 3
            })
        );
        assert_eq!(
            bind_with(t, &[Pos::List(&[0, 1])], &[3]),
            Err(BindError::NotOne {
                selector: 0,
                count: 2
            })
        );
        assert_eq!(
            bind_with("@->@[perm]", &[Pos::List(&[0, 0])], &[2]),
            Err(BindError::NotPermutation {
                selector: 0,
                rank: 2
            })
        );
        assert_eq!(
            bind_with("ab@->@", &[], &[1]),
            Err(BindError::RankBelow { need: 2, rank: 1 })
        );
        assert!(matches!(
            bind_with("@->@", &[], &[60]),
            Err(BindError::TooLarge { what: "labels", .. })
        ));
        // `*`'s ones and later terms' runs together past the buffer: an
        // error before anything is written (the fuzz harness found this one
        // overflowing the buffer).
        let ln = "@{b..:1},*,*->@{b..:1},@{c..:-}";
        let sels = [Pos::List(&[0]), Pos::Int(-1)];
        assert!(matches!(
            bind_with(ln, &sels, &[17, 82]),
            Err(BindError::TooLarge { what: "dims", .. })
        ));
        let small = bind_with(ln, &[Pos::Int(1), Pos::Int(1)], &[17, 4]);
        assert!(small.is_ok(), "{small:?}");
        // The count is exact: dims a term drops are not counted, so this
        // binding of 50 + 70 + 0 dims fits.
        let fits = bind_with("@{k..:1},*->@{k..:-}", &[Pos::Int(0)], &[50, 70]);
        assert!(fits.is_ok(), "{fits:?}");
        // A method's computed set of positions (pad's padded dims).
        assert_eq!(
            bind_with("@{m():1}->@{m():1}", &[Pos::Mask(0b101)], &[3]).unwrap(),
            "1b1->1b1"
        );
        assert_eq!(
            bind_with("@{m():1}->@{m():1}", &[Pos::Mask(0b1000)], &[3]),
            Err(BindError::OutOfRange {
                selector: 0,
                value: 3,
                rank: 3
            })
        );
        // A position an input writes `1` cannot come back in an output.
        assert_eq!(
            bind_with("@{axis:1}->@", &[Pos::Int(0)], &[2]),
            Err(BindError::OutputOnly { output: 0 })
        );
        // A 0-d tensor takes axis 0 and selects nothing.
        assert_eq!(
            bind_with("@->@{axis:-}", &[Pos::Int(0)], &[0]).unwrap(),
            "->"
        );
    }

    #[test]
    fn several_picks_in_one_run() {
        // slice: axes 0 and 2 are cut, and axis 2 is dropped from the output.
        assert_eq!(
            bind_with(
                "@{axes:1}->@{axes:1; decrease_axis:-}",
                &[Pos::List(&[0, 2]), Pos::List(&[2])],
                &[3]
            )
            .unwrap(),
            "1b1->1b"
        );
        // The later pick wins where both select.
        assert_eq!(
            bind_with("@->@{..:-; axis:1}", &[Pos::Int(1)], &[3]).unwrap(),
            "abc->1"
        );
    }

    #[test]
    fn inserted_dims() {
        // stack along axis 1 of rank-2 inputs; -1 counts in the output.
        assert_eq!(
            bind_with("@^->@{axis:+1}", &[Pos::Int(1)], &[2, 2]).unwrap(),
            "ab->a1b"
        );
        assert_eq!(
            bind_with("@->@{axis:+1}", &[Pos::Int(-1)], &[2]).unwrap(),
            "ab->ab1"
        );
        // unsqueeze at output positions 0 and 2, beside a cut dim.
        assert_eq!(
            bind_with(
                "@{cut:1}->@{cut:1; new:+1}",
                &[Pos::Int(1), Pos::List(&[0, 2])],
                &[2]
            )
            .unwrap(),
            "a1->1a11"
        );
        assert_eq!(
            bind_with("@->@{axis:+1}", &[Pos::Int(3)], &[2]),
            Err(BindError::OutOfRange {
                selector: 0,
                value: 3,
                rank: 3
            })
        );
    }

    #[test]
    fn ones_fill_what_labels_leave() {
        // group norm: the batch, then `1`s, in inputs and outputs alike.
        assert_eq!(
            bind_with("n*,*,*->n*,n1,n1", &[], &[4, 1, 1, 4, 2, 2]).unwrap(),
            "n111,1,1->n111,n1,n1"
        );
        // An output's `*` reads the output's rank.
        assert_eq!(bind_with("*,*->*", &[], &[2, 1, 3]).unwrap(), "11,1->111");
        assert_eq!(
            bind_with("*,nc*->*", &[], &[2, 1, 2]),
            Err(BindError::TermRank {
                side: Side::Input,
                index: 1,
                need: 2,
                rank: 1
            })
        );
    }

    #[test]
    fn compounds_and_forms_by_rank() {
        // Grouped-query attention's heads: q's are the compound of k's and
        // the group.
        assert_eq!(
            bind_with("bs(hg)d,bthd->bs(hg)d", &[], &[4, 4, 4]).unwrap(),
            "bs(hg)d,bthd->bs(hg)d"
        );
        // A placeholder takes the form its rank fits: 4-d, or 0-d (`*`).
        assert_eq!(
            bind_with("bshd,bhst|*->bshd", &[], &[4, 4, 4]).unwrap(),
            "bshd,bhst->bshd"
        );
        assert_eq!(
            bind_with("bshd,bhst|*->bshd", &[], &[4, 0, 4]).unwrap(),
            "bshd,->bshd"
        );
        assert_eq!(
            bind_with("bshd,1s1d|sd->bshd", &[], &[4, 2, 4]).unwrap(),
            "bshd,sd->bshd"
        );
        // No form fits: the first, whose rank the engine then reports.
        assert_eq!(
            bind_with("bshd,bhst|sd->bshd", &[], &[4, 3, 4]).unwrap(),
            "bshd,bhst->bshd"
        );
    }

    #[test]
    fn template_errors() {
        let kinds = |t: &str| -> Vec<ErrorKind> {
            parse_template(t)
                .unwrap_err()
                .errors
                .into_iter()
                .map(|e| e.kind)
                .collect()
        };
        assert_eq!(kinds("@{axis:-}->@"), [ErrorKind::DropInFirstInput]);
        assert_eq!(kinds("a->@"), [ErrorKind::FirstInputPositions]);
        assert_eq!(kinds("@*->@"), [ErrorKind::OnesNotAlone]);
        assert_eq!(kinds("@,**->@"), [ErrorKind::OnesNotAlone]);
        assert_eq!(kinds("@{axis:+1}->@"), [ErrorKind::MisplacedInsert]);
        assert_eq!(kinds("@->@{a:+1; b:+1}"), [ErrorKind::MisplacedInsert]);
        assert_eq!(kinds("@->@{a:+1; b:-}"), [ErrorKind::MisplacedInsert]);
        assert_eq!(kinds("@->@{a..:+1}"), [ErrorKind::MisplacedInsert]);
        assert_eq!(kinds("@|a->@"), [ErrorKind::FirstInputForms]);
        assert_eq!(kinds("@,(ab->@"), [ErrorKind::UnclosedParen]);
        assert_eq!(kinds("@,(a)->@"), [ErrorKind::ShortCompound]);
        assert_eq!(kinds("@,(aa)->@"), [ErrorKind::RepeatedInCompound('a')]);
        assert_eq!(kinds("@,(a1)->@"), [ErrorKind::OneInCompound]);
        assert_eq!(kinds("@,a|**->@"), [ErrorKind::OnesNotAlone]);
        assert_eq!(kinds("@{axis:a->@"), [ErrorKind::UnclosedSelector]);
        assert_eq!(kinds("...@->@"), [ErrorKind::NotInTemplate('.')]);
        assert_eq!(kinds("@{2x:a}->@"), [ErrorKind::BadSelector]);
        assert_eq!(kinds("@{axis}->@"), [ErrorKind::MissingFate]);
        assert_eq!(kinds("@{axis:ab}->@"), [ErrorKind::BadFate]);
        assert_eq!(kinds("@->@q"), [ErrorKind::UnknownOutputLabel('q')]);
        assert_eq!(
            kinds("@{axis:a}->@{axis:a}a"),
            [ErrorKind::RepeatedOutputLabel('a')]
        );
        // Selectors are shared by name; a method keeps its parentheses.
        let t = parse_template("@{axes():1}->@{axes():-},@{k..:-}").unwrap();
        assert_eq!(t.selectors(), ["axes()", "k"]);
    }
}
