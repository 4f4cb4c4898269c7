//! Parse and validate: the attribute's arguments and the struct it sits on become
//! a typed [`Rule`], or every problem found, each spanned on the user's tokens.

use std::collections::HashMap;

use darling::ast::NestedMeta;
use darling::util::Override;
use darling::{Error, FromMeta};
use proc_macro2::{Span, TokenStream};
use spmd_notation::{ErrorKind, Notation, NotationError, Side};
use syn::spanned::Spanned;
use syn::{Expr, Ident, ItemStruct, LitStr, Path};

/// The attribute's arguments as written.
#[derive(FromMeta)]
struct RawArgs {
    einsum: Option<LitStr>,
    name: Option<LitStr>,
    #[darling(multiple, rename = "case")]
    cases: Vec<RawCase>,
    build: Option<Path>,
    reduce: Option<LitStr>,
    reduce_axes: Option<HashMap<Ident, LitStr>>,
    never_sharded: Option<LitStr>,
    conflicts: Option<LitStr>,
    divisibility: Option<LitStr>,
    missing_axis: Option<LitStr>,
    validate: Option<Path>,
    adjust: Option<Path>,
    inputs: Option<darling::util::PathList>,
    outputs: Option<darling::util::PathList>,
    #[darling(rename = "crate")]
    krate: Option<Path>,
}

/// `case(when = <expr>, einsum = "...")`.
#[derive(FromMeta)]
struct RawCase {
    when: Expr,
    einsum: LitStr,
}

/// `#[spmd(default, default = <expr>, rename = "...", skip)]` on a field.
#[derive(FromMeta, Default)]
struct RawField {
    default: Option<Override<Expr>>,
    rename: Option<LitStr>,
    #[darling(default)]
    skip: bool,
}

/// A notation checked at macro time, with the literal it came from.
pub struct Literal {
    pub lit: LitStr,
    pub notation: Notation,
}

/// Where the rule's notation comes from.
pub enum Source {
    /// Literal notations: `cases` in order (first `when` that holds), else `default`.
    Literal {
        default: Literal,
        cases: Vec<(Expr, Literal)>,
    },
    /// A method of the struct that builds an `Einsum` at run time.
    Build(Path),
}

/// How a field is filled from attributes.
pub enum FieldSource {
    Required,
    Default,
    DefaultExpr(Expr),
    Skip,
}

pub struct Field {
    pub ident: Ident,
    pub attr_name: String,
    pub source: FieldSource,
}

/// A validated rule, ready to expand.
pub struct Rule {
    pub krate: Path,
    pub name: String,
    pub item: ItemStruct,
    pub fields: Vec<Field>,
    pub source: Source,
    pub reduce: Ident,
    /// (label, reduce type variant), sorted by label.
    pub reduce_axes: Vec<(char, Ident)>,
    pub never_sharded: String,
    pub conflicts: Ident,
    pub divisibility: Ident,
    pub missing_axis: Ident,
    pub validate: Option<Path>,
    pub adjust: Option<Path>,
}

/// Parses and validates; on failure returns all errors together.
pub fn parse(args: TokenStream, item: &mut ItemStruct) -> Result<Rule, Error> {
    let mut errors = Error::accumulator();
    let metas = NestedMeta::parse_meta_list(args).map_err(Error::from)?;
    let raw = errors.handle(RawArgs::from_list(&metas));
    let fields = errors.handle(fields(item));
    if !item.generics.params.is_empty() {
        errors.push(
            Error::custom(
                "#[spmd_rule] op structs cannot be generic: a registry builds them by name",
            )
            .with_span(&item.generics),
        );
    }
    let Some(raw) = raw else {
        return Err(errors
            .finish()
            .err()
            .unwrap_or_else(|| Error::custom("invalid arguments")));
    };
    let name = match &raw.name {
        Some(n) if n.value().is_empty() => {
            errors.push(Error::custom("the rule name must not be empty").with_span(n));
            String::new()
        }
        Some(n) => n.value(),
        None => snake_case(&item.ident.to_string()),
    };

    let declared = (
        raw.inputs.as_ref().map(|l| l.len()),
        raw.outputs.as_ref().map(|l| l.len()),
    );
    let mut literals: Vec<&Literal> = Vec::new();
    let source = match (&raw.einsum, &raw.build) {
        (Some(_), Some(b)) => {
            errors.push(
                Error::custom("give either `einsum = \"...\"` or `build = path`, not both")
                    .with_span(b),
            );
            None
        }
        (None, None) => {
            errors.push(Error::custom(
                "missing notation: add `einsum = \"...\"` (or `build = path` for a notation built at run time)",
            ));
            None
        }
        (None, Some(b)) => {
            for c in &raw.cases {
                errors.push(
                    Error::custom(
                        "`case(...)` picks among literal notations; it cannot go with `build`",
                    )
                    .with_span(&c.einsum),
                );
            }
            Some(Source::Build(b.clone()))
        }
        (Some(lit), None) => {
            let default = literal(&mut errors, lit, declared);
            let cases: Vec<(Expr, Option<Literal>)> = raw
                .cases
                .iter()
                .map(|c| (c.when.clone(), literal(&mut errors, &c.einsum, declared)))
                .collect();
            match default {
                Some(default) => {
                    let cases: Vec<(Expr, Literal)> = cases
                        .into_iter()
                        .filter_map(|(w, l)| l.map(|l| (w, l)))
                        .collect();
                    Some(Source::Literal { default, cases })
                }
                None => None,
            }
        }
    };
    if let Some(Source::Literal { default, cases }) = &source {
        literals.push(default);
        literals.extend(cases.iter().map(|(_, l)| l));
        // Without declared arity, every case must agree with the default.
        if declared == (None, None) {
            let want = (
                default.notation.plan().n_inputs(),
                default.notation.plan().n_outputs(),
            );
            for (_, l) in cases {
                let plan = l.notation.plan();
                if (plan.n_inputs(), plan.n_outputs()) != want {
                    errors.push(
                        Error::custom(format!(
                            "this case has {} operand(s) and {} output(s) but the default notation {:?} has {} and {}",
                            plan.n_inputs(),
                            plan.n_outputs(),
                            default.lit.value(),
                            want.0,
                            want.1
                        ))
                        .with_span(&l.lit),
                    );
                }
            }
        }
    }

    let never_sharded = raw.never_sharded.as_ref().map_or(String::new(), |lit| {
        labels_in(&mut errors, lit, &literals);
        lit.value()
            .chars()
            .filter(char::is_ascii_alphabetic)
            .collect()
    });
    let reduce = choice(&mut errors, raw.reduce.as_ref(), REDUCE, "Sum");
    let mut reduce_axes = Vec::new();
    for (label, lit) in raw.reduce_axes.iter().flatten() {
        let text = label.to_string();
        let mut chars = text.chars();
        match (chars.next(), chars.next()) {
            (Some(c), None) if c.is_ascii_alphabetic() => {
                for l in &literals {
                    if l.notation.plan().axis(c).is_none() {
                        errors.push(
                            Error::custom(format!(
                                "label `{c}` is not in the notation {:?}",
                                l.lit.value()
                            ))
                            .with_span(label),
                        );
                    }
                }
                reduce_axes.push((c, choice(&mut errors, Some(lit), REDUCE, "Sum")));
            }
            _ => errors.push(
                Error::custom(
                    "`reduce_axes` keys are single axis labels, e.g. `reduce_axes(k = \"max\")`",
                )
                .with_span(label),
            ),
        }
    }
    reduce_axes.sort_by_key(|(c, _)| *c);
    let conflicts = choice(&mut errors, raw.conflicts.as_ref(), CONFLICTS, "FirstWins");
    let divisibility = choice(
        &mut errors,
        raw.divisibility.as_ref(),
        DIVISIBILITY,
        "Uneven",
    );
    let missing_axis = choice(
        &mut errors,
        raw.missing_axis.as_ref(),
        MISSING_AXIS,
        "Replicate",
    );

    errors.finish()?;
    let source = source.ok_or_else(|| Error::custom("invalid notation"))?;
    Ok(Rule {
        krate: raw.krate.unwrap_or_else(|| syn::parse_quote!(::spmd_core)),
        name,
        item: item.clone(),
        fields: fields.unwrap_or_default(),
        source,
        reduce,
        reduce_axes,
        never_sharded,
        conflicts,
        divisibility,
        missing_axis,
        validate: raw.validate,
        adjust: raw.adjust,
    })
}

const REDUCE: &[(&str, &str)] = &[
    ("sum", "Sum"),
    ("avg", "Avg"),
    ("max", "Max"),
    ("min", "Min"),
    ("prod", "Prod"),
    ("any", "Any"),
    ("all", "All"),
];
const CONFLICTS: &[(&str, &str)] = &[("first_wins", "FirstWins"), ("strict", "Strict")];
const DIVISIBILITY: &[(&str, &str)] = &[
    ("uneven", "Uneven"),
    ("drop", "Drop"),
    ("drop_derived", "DropDerived"),
];
const MISSING_AXIS: &[(&str, &str)] = &[("replicate", "Replicate"), ("error", "Error")];

/// A string option with a fixed set of values, as the variant's identifier.
fn choice(
    errors: &mut darling::error::Accumulator,
    lit: Option<&LitStr>,
    table: &[(&str, &str)],
    default: &str,
) -> Ident {
    let Some(lit) = lit else {
        return Ident::new(default, Span::call_site());
    };
    let value = lit.value();
    match table.iter().find(|(k, _)| *k == value) {
        Some((_, variant)) => Ident::new(variant, lit.span()),
        None => {
            let allowed: Vec<String> = table.iter().map(|(k, _)| format!("\"{k}\"")).collect();
            errors.push(
                Error::custom(format!(
                    "unknown value {value:?}; expected one of {}",
                    allowed.join(", ")
                ))
                .with_span(lit),
            );
            Ident::new(default, Span::call_site())
        }
    }
}

/// Checks and parses one notation literal, pushing every problem.
fn literal(
    errors: &mut darling::error::Accumulator,
    lit: &LitStr,
    declared: (Option<usize>, Option<usize>),
) -> Option<Literal> {
    let token = lit.token().to_string();
    if !token.starts_with('"') || !token.ends_with('"') || token[1..token.len() - 1].contains('\\')
    {
        errors.push(
            Error::custom(
                "the notation must be a plain string literal: no raw string, escape or suffix",
            )
            .with_span(lit),
        );
        return None;
    }
    let value = lit.value();
    let mut problems: Vec<NotationError> = match spmd_notation::parse(&value) {
        Ok(n) => {
            let plan = n.plan();
            let mut p = Vec::new();
            if let Some(want) = declared.0.filter(|&w| w != plan.n_inputs()) {
                p.push(arity(Side::Input, want, plan.n_inputs(), &value));
            }
            if let Some(want) = declared.1.filter(|&w| w != plan.n_outputs()) {
                p.push(arity(Side::Output, want, plan.n_outputs(), &value));
            }
            if p.is_empty() {
                return Some(Literal {
                    lit: lit.clone(),
                    notation: n,
                });
            }
            p
        }
        Err(e) => e.errors,
    };
    for p in problems.drain(..) {
        errors.push(Error::custom(p.message(&value)).with_span(&inside(lit, &p)));
    }
    None
}

/// An arity error points at the side it is about: the operands before `->`,
/// the outputs after it.
fn arity(side: Side, expected: usize, found: usize, value: &str) -> NotationError {
    let arrow = value.find("->").unwrap_or(0);
    let range = match side {
        Side::Input => 0..arrow,
        Side::Output => arrow + 2..value.len(),
    };
    NotationError::new(
        ErrorKind::Arity {
            side,
            expected,
            found,
        },
        range,
    )
}

/// The span of a fragment inside a literal: exact where the compiler can make
/// one (nightly), the whole literal on stable. The message carries the column.
fn inside(lit: &LitStr, e: &NotationError) -> Span {
    lit.token()
        .subspan(e.range.start + 1..e.range.end.max(e.range.start + 1) + 1)
        .unwrap_or_else(|| lit.span())
}

/// Every label of a label list must be in every literal notation.
fn labels_in(errors: &mut darling::error::Accumulator, lit: &LitStr, literals: &[&Literal]) {
    let value = lit.value();
    for (i, c) in value.char_indices() {
        if c.is_whitespace() || c == ',' {
            continue;
        }
        if !c.is_ascii_alphabetic() {
            errors.push(
                Error::custom(format!(
                    "{c:?} at column {} of {value:?} is not an axis label",
                    i + 1
                ))
                .with_span(lit),
            );
            continue;
        }
        for l in literals {
            if l.notation.plan().axis(c).is_none() {
                let e = NotationError::new(ErrorKind::UnknownLabel(c), i..i + 1);
                errors.push(
                    Error::custom(format!(
                        "{} (the notation is {:?})",
                        e.message(&value).replacen("of einsum", "of", 1),
                        l.lit.value()
                    ))
                    .with_span(lit),
                );
            }
        }
    }
}

/// The struct's fields and how each is filled; `#[spmd(...)]` attributes are
/// taken off the fields so the re-emitted struct compiles.
fn fields(item: &mut ItemStruct) -> Result<Vec<Field>, Error> {
    let mut errors = Error::accumulator();
    let named = match &mut item.fields {
        syn::Fields::Named(named) => named,
        syn::Fields::Unit => return Ok(Vec::new()),
        syn::Fields::Unnamed(u) => {
            return Err(Error::custom(
                "#[spmd_rule] needs named fields (they are the op's attributes, read by name)",
            )
            .with_span(&u.span()));
        }
    };
    let mut out = Vec::new();
    for f in named.named.iter_mut() {
        let Some(ident) = f.ident.clone() else {
            continue;
        };
        let mut raw = RawField::default();
        let mut keep = Vec::new();
        for attr in f.attrs.drain(..) {
            if attr.path().is_ident("spmd") {
                if let Some(r) = errors.handle(RawField::from_meta(&attr.meta)) {
                    raw = r;
                }
            } else {
                keep.push(attr);
            }
        }
        f.attrs = keep;
        let source = match (raw.skip, raw.default) {
            (true, _) => FieldSource::Skip,
            (false, Some(Override::Inherit)) => FieldSource::Default,
            (false, Some(Override::Explicit(e))) => FieldSource::DefaultExpr(e),
            (false, None) => FieldSource::Required,
        };
        let attr_name = raw
            .rename
            .map(|l| l.value())
            .unwrap_or_else(|| ident.to_string().trim_start_matches("r#").to_string());
        out.push(Field {
            ident,
            attr_name,
            source,
        });
    }
    errors.finish_with(out)
}

/// `MatMul` -> `mat_mul`, `LayerNorm2D` -> `layer_norm2_d`... digits stay with
/// the word before them: `Conv2d` -> `conv2d`.
pub fn snake_case(s: &str) -> String {
    let mut out = String::new();
    let chars: Vec<char> = s.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if c.is_uppercase() {
            let prev_lower =
                i > 0 && (chars[i - 1].is_lowercase() || chars[i - 1].is_ascii_digit());
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_lowercase());
            let prev_upper = i > 0 && chars[i - 1].is_uppercase();
            if i > 0 && (prev_lower || (prev_upper && next_lower)) {
                out.push('_');
            }
            out.extend(c.to_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::snake_case;

    #[test]
    fn snake_case_splits_words_and_acronyms() {
        assert_eq!(snake_case("Matmul"), "matmul");
        assert_eq!(snake_case("LayerNorm"), "layer_norm");
        assert_eq!(snake_case("Conv2d"), "conv2d");
        assert_eq!(snake_case("RMSNorm"), "rms_norm");
        assert_eq!(snake_case("LookupTableV2"), "lookup_table_v2");
    }
}
