//! Parse and validate: the attribute's arguments and the struct it sits on become
//! a typed [`Rule`], or every problem found, each spanned on the user's tokens.

use std::collections::HashMap;

use darling::ast::NestedMeta;
use darling::util::Override;
use darling::{Error, FromMeta};
use proc_macro2::{Span, TokenStream};
use quote::ToTokens;
use spmd_notation::{ErrorKind, Notation, NotationError, OwnedTemplate, Side};
use syn::spanned::Spanned;
use syn::{Expr, Ident, ItemStruct, LitStr, Path};

/// The attribute's arguments as written.
#[derive(FromMeta, Default)]
struct RawArgs {
    einsum: Option<LitStr>,
    name: Option<LitStr>,
    #[darling(multiple, rename = "case")]
    cases: Vec<RawCase>,
    build: Option<Path>,
    #[darling(default)]
    cache: bool,
    reduce: Option<ReduceArg>,
    reduce_axes: Option<HashMap<Ident, LitStr>>,
    never_sharded: Option<LitStr>,
    conflicts: Option<LitStr>,
    divisibility: Option<LitStr>,
    missing_axis: Option<LitStr>,
    backward_partial: Option<LitStr>,
    partial_inputs: Option<LitStr>,
    unsharded_claims: Option<LitStr>,
    compounds: Option<LitStr>,
    validate: Option<Path>,
    adjust: Option<Path>,
    inputs: Option<darling::util::PathList>,
    outputs: Option<darling::util::PathList>,
    no_grad: Option<darling::util::PathList>,
    grad_ignores: Option<darling::util::PathList>,
    follows: Option<darling::util::PathList>,
    optional: Option<darling::util::PathList>,
    not_partial: Option<darling::util::PathList>,
    merge_first: Option<darling::util::PathList>,
    grad_inputs: Option<darling::util::PathList>,
    grads_for: Option<darling::util::PathList>,
    #[darling(default)]
    needs_output_shapes: bool,
    #[darling(rename = "crate")]
    krate: Option<Path>,
}

/// An expression kept as written: `reduce = "max"` or `reduce =
/// Self::method`, `#[spmd(default = "none")]` (darling's own `Expr` would
/// read a string's contents as an expression: `none`, an unknown value).
#[derive(Clone)]
struct ReduceArg(Expr);

impl FromMeta for ReduceArg {
    fn from_expr(expr: &Expr) -> darling::Result<Self> {
        Ok(ReduceArg(expr.clone()))
    }
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
    default: Option<Override<ReduceArg>>,
    rename: Option<LitStr>,
    #[darling(default)]
    skip: bool,
}

/// A notation checked at macro time, with the literal it came from.
pub struct Literal {
    pub lit: LitStr,
    pub form: Form,
}

/// A literal is a notation, or a template bound per call (it uses `@` or `*`).
pub enum Form {
    Notation(Notation),
    Template(OwnedTemplate),
}

impl Literal {
    pub fn arity(&self) -> (usize, usize) {
        match &self.form {
            Form::Notation(n) => (n.plan().n_inputs(), n.plan().n_outputs()),
            Form::Template(t) => (t.n_inputs(), t.terms().len() - t.n_inputs()),
        }
    }
    /// Whether the literal has label `c` (a template: written literally).
    pub fn has_label(&self, c: char) -> bool {
        match &self.form {
            Form::Notation(n) => n.plan().axis(c).is_some(),
            Form::Template(t) => {
                let names: Vec<&str> = t.selectors().iter().map(String::as_str).collect();
                t.template(&names).has_label(c)
            }
        }
    }
    pub fn has_addends(&self) -> bool {
        matches!(&self.form, Form::Notation(n) if n.plan().has_addends())
    }
}

/// Where the rule's notation comes from.
pub enum Source {
    /// Literal notations: `cases` in order (first `when` that holds), else `default`.
    Literal {
        default: Literal,
        cases: Vec<(Expr, Literal)>,
    },
    /// A method of the struct that builds an `Einsum` at run time; with
    /// `cache`, each distinct (struct value, call shapes) builds once.
    Build { path: Path, cache: Option<Span> },
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
    /// The field's type, whose `FromAttr::EXPECTED` describes the attribute.
    pub ty: syn::Type,
    /// `#[spmd(default = <expr>)]` as written.
    pub default_text: Option<String>,
}

/// A validated rule, ready to expand.
pub struct Rule {
    pub krate: Path,
    pub name: String,
    pub item: ItemStruct,
    pub fields: Vec<Field>,
    pub source: Source,
    pub reduce: Ident,
    /// `reduce = Self::method`: `fn(&Self) -> Result<ReduceType, SpmdError>`,
    /// the reduce type read from the attributes per call.
    pub reduce_fn: Option<Path>,
    /// (label, reduce type variant), sorted by label.
    pub reduce_axes: Vec<(char, Ident)>,
    pub never_sharded: String,
    pub conflicts: Ident,
    pub divisibility: Ident,
    pub missing_axis: Ident,
    pub backward_partial: Ident,
    pub partial_inputs: Ident,
    pub unsharded_claims: Ident,
    pub compounds: Ident,
    pub validate: Option<Path>,
    pub adjust: Option<Path>,
    /// Tensor names from `inputs(..)` / `outputs(..)` (empty when not given).
    pub input_names: Vec<String>,
    pub output_names: Vec<String>,
    /// Bit masks over inputs: no gradient / not read by the gradient.
    pub no_grad: u64,
    pub grad_ignores: u64,
    /// Inputs left out of the forward and grad merges, outputs left out of
    /// the backward merge (`merge(follows(..))`).
    pub follows: u64,
    pub follows_outputs: u64,
    /// Outputs forward never marks partial (`partial(none(..))`).
    pub not_partial: u64,
    /// Outputs backward merges first (`merge(first(..))`).
    pub merged_first: u64,
    /// Bit masks over inputs and outputs: tensors that may be absent.
    pub optional_inputs: u64,
    pub optional_outputs: u64,
    /// Forward reads the outputs' shapes (`forward_with_output_shapes`).
    pub needs_output_shapes: bool,
    /// The grad op's forward tensors (`grad_inputs(..)`): `(is_output,
    /// index)` each; `None` for the default (every input).
    pub grad_inputs: Option<Vec<(bool, u8)>>,
    /// The outputs whose grads the grad op takes (`grads_for(..)`).
    pub grads_for: Option<Vec<u8>>,
}

/// Parses and validates; on failure returns all errors together.
pub fn parse(args: TokenStream, item: &mut ItemStruct) -> Result<Rule, Error> {
    // First, so that `#[spmd(...)]` field attributes are taken off even when
    // the arguments do not parse: left on, each would be one more error
    // ("cannot find attribute `spmd`"). Its errors are reported after the
    // attribute's, which come first in the source.
    let fields = fields(item);
    let mut errors = Error::accumulator();
    let Some(metas) = errors.handle(NestedMeta::parse_meta_list(args).map_err(Error::from)) else {
        errors.handle(fields);
        errors.finish()?;
        return Err(Error::custom("invalid arguments"));
    };
    let (raw, given) = raw_args(&mut errors, &metas);
    if let Some(param) = item.generics.params.first() {
        // On the first parameter: `Spanned` of the whole `<...>` is only its
        // `<` on stable (spans cannot be joined there).
        errors.push(
            Error::custom(
                "#[spmd_rule] op structs cannot be generic: a registry builds them by name",
            )
            .with_span(param),
        );
    }
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
        (Some(_), Some(_)) => {
            errors.push(
                Error::custom("give either `einsum = \"...\"` or `build = path`, not both")
                    .with_span(&given.span("build")),
            );
            None
        }
        // Given but invalid, or possibly given under a misspelled key
        // (`einsun = "..."`, reported as unknown): "missing" would be a
        // follow-on error.
        (None, None) if given.has("einsum") || given.has("build") || given.invalid => None,
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
            Some(Source::Build {
                path: b.clone(),
                cache: raw.cache.then(|| given.span("cache")),
            })
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
    if raw.cache && raw.build.is_none() && raw.einsum.is_some() {
        errors.push(
            Error::custom(
                "`build(..., cache)` memoizes a notation built at run time; literal notations are already compiled once, at macro time",
            )
            .with_span(&given.span("cache")),
        );
    }
    if let Some(Source::Literal { default, cases }) = &source {
        literals.push(default);
        literals.extend(cases.iter().map(|(_, l)| l));
        // Without declared arity, every case must agree with the default.
        if declared == (None, None) {
            let want = default.arity();
            for (_, l) in cases {
                let (n_in, n_out) = l.arity();
                if (n_in, n_out) != want {
                    errors.push(
                        Error::custom(format!(
                            "this case has {} operand(s) and {} output(s) but the default notation {:?} has {} and {}",
                            n_in,
                            n_out,
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
    let (reduce_lit, reduce_fn) = match raw.reduce.as_ref().map(|r| ungroup(&r.0)) {
        Some(Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Str(s),
            ..
        })) => (Some(s.clone()), None),
        Some(Expr::Path(p)) => (None, Some(p.path.clone())),
        _ => (None, None),
    };
    let reduce = choice(
        &mut errors,
        reduce_lit.as_ref(),
        "reduce type",
        REDUCE,
        "Sum",
    );
    let mut reduce_axes = Vec::new();
    for (label, lit) in raw.reduce_axes.iter().flatten() {
        let text = label.to_string();
        let mut chars = text.chars();
        match (chars.next(), chars.next()) {
            (Some(c), None) if c.is_ascii_alphabetic() => {
                if let Some(notations) = missing_from(c, &literals) {
                    errors.push(
                        Error::custom(format!(
                            "`partial(axes(...))` names label `{c}`, which is not in {notations}"
                        ))
                        .with_span(label),
                    );
                } else if let Some(l) = literals.iter().find(|l| match &l.form {
                    Form::Notation(n) => {
                        let p = n.plan();
                        p.axis(c).is_some_and(|a| !p.contracted().contains(a))
                    }
                    Form::Template(_) => false,
                }) {
                    // A reduce type applies to a contraction: an axis an
                    // output keeps makes no partial result.
                    errors.push(
                        Error::custom(format!(
                            "`partial(axes(...))` names label `{c}`, which an output of {:?} keeps: only a contracted axis (in no output) has a reduce type",
                            l.lit.value()
                        ))
                        .with_span(label),
                    );
                }
                reduce_axes.push((
                    c,
                    choice(&mut errors, Some(lit), "reduce type", REDUCE, "Sum"),
                ));
            }
            _ => errors.push(
                Error::custom(
                    "`partial(axes(...))` keys are single axis labels, e.g. `partial(axes(k = \"max\"))`",
                )
                .with_span(label),
            ),
        }
    }
    reduce_axes.sort_by_key(|(c, _)| *c);
    // An addend commutes with a Sum, Avg, Max or Min of partial results, but
    // not with a product or a logical reduction: `prod(p_i + b) != prod(p_i) + b`.
    if literals.iter().any(|l| l.has_addends()) {
        let lits = reduce_lit
            .iter()
            .chain(raw.reduce_axes.iter().flat_map(|m| m.values()));
        for lit in lits {
            if matches!(lit.value().as_str(), "prod" | "any" | "all") {
                errors.push(
                    Error::custom(format!(
                        "reduce type {:?} with an addend (`+`): an added operand commutes only \
                         with \"sum\", \"avg\", \"max\" and \"min\" reductions",
                        lit.value()
                    ))
                    .with_span(lit),
                );
            }
        }
    }
    let conflicts = choice(
        &mut errors,
        raw.conflicts.as_ref(),
        "`merge(conflicts = ...)` policy",
        CONFLICTS,
        "FirstWins",
    );
    let divisibility = choice(
        &mut errors,
        raw.divisibility.as_ref(),
        "`merge(divisibility = ...)` policy",
        DIVISIBILITY,
        "Uneven",
    );
    let missing_axis = choice(
        &mut errors,
        raw.missing_axis.as_ref(),
        "`merge(missing_axis = ...)` policy",
        MISSING_AXIS,
        "Replicate",
    );
    let backward_partial = choice(
        &mut errors,
        raw.backward_partial.as_ref(),
        "`partial(backward = ...)` policy",
        BACKWARD_PARTIAL,
        "Explain",
    );
    let partial_inputs = choice(
        &mut errors,
        raw.partial_inputs.as_ref(),
        "`partial(inputs = ...)` policy",
        PARTIAL_INPUTS,
        "Drop",
    );

    let unsharded_claims = choice(
        &mut errors,
        raw.unsharded_claims.as_ref(),
        "`merge(unsharded_claims = ...)` policy",
        UNSHARDED_CLAIMS,
        "Count",
    );

    let compounds = choice(
        &mut errors,
        raw.compounds.as_ref(),
        "`merge(compounds = ...)` policy",
        COMPOUNDS,
        "MajorOnly",
    );

    let no_grad = input_mask(
        &mut errors,
        "no_grad",
        raw.no_grad.as_ref(),
        raw.inputs.as_ref(),
    );
    let grad_ignores = input_mask(
        &mut errors,
        "grad_ignores",
        raw.grad_ignores.as_ref(),
        raw.inputs.as_ref(),
    );
    let (follows, follows_outputs) = raw.follows.as_ref().map_or((0, 0), |names| {
        tensor_positions(
            &mut errors,
            "follows",
            names,
            raw.inputs.as_ref(),
            raw.outputs.as_ref(),
        )
        .into_iter()
        .fold((0u64, 0u64), |(i, o), (is_output, k)| match is_output {
            false => (i | 1 << k, o),
            true => (i, o | 1 << k),
        })
    });

    let not_partial = raw.not_partial.as_ref().map_or(0, |names| {
        tensor_positions(
            &mut errors,
            "not_partial",
            names,
            None,
            raw.outputs.as_ref(),
        )
        .into_iter()
        .fold(0u64, |m, (_, o)| m | 1 << o)
    });

    let merged_first = raw.merge_first.as_ref().map_or(0, |names| {
        tensor_positions(
            &mut errors,
            "merge_first",
            names,
            None,
            raw.outputs.as_ref(),
        )
        .into_iter()
        .fold(0u64, |m, (_, o)| m | 1 << o)
    });

    let (optional_inputs, optional_outputs) = optional_masks(
        &mut errors,
        raw.optional.as_ref(),
        raw.inputs.as_ref(),
        raw.outputs.as_ref(),
    );

    let grad_inputs = raw.grad_inputs.as_ref().map(|names| {
        tensor_positions(
            &mut errors,
            "grad_inputs",
            names,
            raw.inputs.as_ref(),
            raw.outputs.as_ref(),
        )
    });
    let grads_for = raw.grads_for.as_ref().map(|names| {
        tensor_positions(&mut errors, "grads_for", names, None, raw.outputs.as_ref())
            .into_iter()
            .map(|(_, o)| o)
            .collect()
    });

    let fields = errors.handle(fields);
    if let (Some(fields), Some(Source::Literal { default, cases })) = (&fields, &source) {
        for l in std::iter::once(default).chain(cases.iter().map(|(_, l)| l)) {
            selectors_are_fields(&mut errors, l, fields, &item.ident);
        }
    }
    errors.finish()?;
    let source = source.ok_or_else(|| Error::custom("invalid notation"))?;
    // A template whose outputs repeat once per output given (`*^`) learns
    // their number from the call: forward needs the outputs' shapes. (A
    // lone `*` in an output whose rank is not given writes one `1`.)
    let ones_in_output = match &source {
        Source::Literal { default, .. } => match &default.form {
            Form::Template(t) => t.repeats()[1] == spmd_notation::Repeat::Given,
            Form::Notation(_) => false,
        },
        _ => false,
    };
    Ok(Rule {
        krate: raw.krate.unwrap_or_else(|| syn::parse_quote!(::spmd_core)),
        name,
        item: item.clone(),
        fields: fields.unwrap_or_default(),
        source,
        reduce,
        reduce_fn,
        reduce_axes,
        never_sharded,
        conflicts,
        divisibility,
        missing_axis,
        backward_partial,
        partial_inputs,
        unsharded_claims,
        compounds,
        validate: raw.validate,
        adjust: raw.adjust,
        input_names: names_of(raw.inputs.as_ref()),
        output_names: names_of(raw.outputs.as_ref()),
        no_grad,
        grad_ignores,
        follows,
        follows_outputs,
        not_partial,
        merged_first,
        optional_inputs,
        optional_outputs,
        needs_output_shapes: raw.needs_output_shapes || ones_in_output,
        grad_inputs,
        grads_for,
    })
}

/// `grad_inputs(x, out)` / `grads_for(out)`: tensor names to (is an output,
/// position), in the order written. `grads_for` passes no input list: it
/// names outputs only.
fn tensor_positions(
    errors: &mut darling::error::Accumulator,
    option: &str,
    names: &darling::util::PathList,
    inputs: Option<&darling::util::PathList>,
    outputs: Option<&darling::util::PathList>,
) -> Vec<(bool, u8)> {
    let outputs_only = matches!(option, "grads_for" | "not_partial" | "merge_first");
    let option = shown(option);
    let declare = if outputs_only {
        "`outputs(...)`"
    } else {
        "`inputs(...)` and `outputs(...)`"
    };
    if names.is_empty() {
        // `grad_inputs()`: the grad op takes no forward tensor.
        return Vec::new();
    }
    if inputs.is_none() && outputs.is_none() {
        errors.push(
            Error::custom(format!(
                "`{option}` names tensors: declare them with {declare}"
            ))
            .with_span(&names.first().map_or_else(Span::call_site, |p| p.span())),
        );
        return Vec::new();
    }
    let position = |list: Option<&darling::util::PathList>, name: &Path| {
        list.and_then(|l| l.iter().position(|p| p == name))
    };
    let mut out = Vec::new();
    for name in names.iter() {
        match (position(inputs, name), position(outputs, name)) {
            (Some(i), _) => out.push((false, i as u8)),
            (None, Some(o)) => out.push((true, o as u8)),
            (None, None) => {
                let declared: Vec<String> = inputs
                    .into_iter()
                    .chain(outputs)
                    .flat_map(|l| l.iter())
                    .map(|p| p.to_token_stream().to_string())
                    .collect();
                let among = if outputs_only {
                    "the outputs"
                } else {
                    "the inputs or outputs"
                };
                errors.push(
                    Error::custom(format!(
                        "`{option}` names `{}`, which is not among {among} ({})",
                        name.to_token_stream(),
                        declared.join(", ")
                    ))
                    .with_span(name),
                );
            }
        }
    }
    out
}

/// `optional(bias, out_v)`: tensor names, each among `inputs(...)` or
/// `outputs(...)`, to bit masks over input and output positions.
fn optional_masks(
    errors: &mut darling::error::Accumulator,
    names: Option<&darling::util::PathList>,
    inputs: Option<&darling::util::PathList>,
    outputs: Option<&darling::util::PathList>,
) -> (u64, u64) {
    let Some(names) = names else { return (0, 0) };
    if inputs.is_none() && outputs.is_none() {
        errors.push(
            Error::custom(
                "`optional(...)` names tensors: declare them with `inputs(...)` and `outputs(...)`",
            )
            .with_span(&names.first().map_or_else(Span::call_site, |p| p.span())),
        );
        return (0, 0);
    }
    let position = |list: Option<&darling::util::PathList>, name: &Path| {
        list.and_then(|l| l.iter().position(|p| p == name))
    };
    let (mut ins, mut outs) = (0u64, 0u64);
    for name in names.iter() {
        match (position(inputs, name), position(outputs, name)) {
            (Some(i), _) => ins |= 1 << i,
            (None, Some(o)) => outs |= 1 << o,
            (None, None) => {
                let declared: Vec<String> = inputs
                    .into_iter()
                    .chain(outputs)
                    .flat_map(|l| l.iter())
                    .map(|p| p.to_token_stream().to_string())
                    .collect();
                errors.push(
                    Error::custom(format!(
                        "`optional` names `{}`, which is not among the inputs or outputs ({})",
                        name.to_token_stream(),
                        declared.join(", ")
                    ))
                    .with_span(name),
                );
            }
        }
    }
    (ins, outs)
}

fn names_of(list: Option<&darling::util::PathList>) -> Vec<String> {
    list.map_or_else(Vec::new, |l| {
        l.iter().map(|p| p.to_token_stream().to_string()).collect()
    })
}

/// `no_grad(ids)` / `grad_ignores(weight)`: input names, as declared in
/// `inputs(...)`, to a bit mask over input positions.
fn input_mask(
    errors: &mut darling::error::Accumulator,
    option: &str,
    names: Option<&darling::util::PathList>,
    inputs: Option<&darling::util::PathList>,
) -> u64 {
    let Some(names) = names else { return 0 };
    let option = shown(option);
    let Some(inputs) = inputs else {
        errors.push(
            Error::custom(format!(
                "`{option}` names inputs: declare them with `inputs(...)`"
            ))
            .with_span(&names.first().map_or_else(Span::call_site, |p| p.span())),
        );
        return 0;
    };
    let mut mask = 0u64;
    for name in names.iter() {
        match inputs.iter().position(|i| i == name) {
            Some(pos) => mask |= 1 << pos,
            None => {
                let declared: Vec<String> = inputs
                    .iter()
                    .map(|p| p.to_token_stream().to_string())
                    .collect();
                errors.push(
                    Error::custom(format!(
                        "`{option}` names `{}`, which is not among the inputs ({})",
                        name.to_token_stream(),
                        declared.join(", ")
                    ))
                    .with_span(name),
                );
            }
        }
    }
    mask
}

/// The options written in the attribute, valid or not.
struct Given {
    /// Each key with its span.
    keys: Vec<(String, Span)>,
    /// Some option (or a bare literal) was reported as invalid.
    invalid: bool,
}

impl Given {
    fn has(&self, key: &str) -> bool {
        self.keys.iter().any(|(k, _)| k == key)
    }

    fn span(&self, key: &str) -> Span {
        self.keys
            .iter()
            .find(|(k, _)| k == key)
            .map_or_else(Span::call_site, |(_, s)| *s)
    }
}

/// The options a user writes at the top level of `#[spmd_rule(...)]`.
const TOP_LEVEL: &[&str] = &[
    "einsum", "case", "build", "name", "inputs", "outputs", "optional", "merge", "partial", "grad",
    "validate", "adjust", "crate",
];

/// The grouped options: `(group, key inside it, the field it fills)`. A group
/// is one concept of the rule language (docs/semantics.md §5): how operands
/// take part in the merge, what partial results are, what the grad op takes,
/// how a run-time plan is built.
const GROUPED: &[(&str, &str, &str)] = &[
    ("merge", "follows", "follows"),
    ("merge", "first", "merge_first"),
    ("merge", "never_sharded", "never_sharded"),
    ("merge", "unsharded_claims", "unsharded_claims"),
    ("merge", "conflicts", "conflicts"),
    ("merge", "compounds", "compounds"),
    ("merge", "divisibility", "divisibility"),
    ("merge", "missing_axis", "missing_axis"),
    ("partial", "reduce", "reduce"),
    ("partial", "axes", "reduce_axes"),
    ("partial", "none", "not_partial"),
    ("partial", "inputs", "partial_inputs"),
    ("partial", "backward", "backward_partial"),
    ("grad", "none", "no_grad"),
    ("grad", "ignores", "grad_ignores"),
    ("grad", "inputs", "grad_inputs"),
    ("grad", "of", "grads_for"),
    ("build", "cache", "cache"),
    ("build", "output_shapes", "needs_output_shapes"),
];

/// How a field is written, for messages: `grad(none(...))`, `partial(axes(...))`.
fn shown(field: &str) -> String {
    // A key written `key = value` (a string, or `reduce`'s path).
    let valued = STRING_OPTIONS.iter().any(|(k, _)| *k == field) || field == "reduce";
    match GROUPED.iter().find(|(_, _, f)| *f == field) {
        Some((group, key, _)) if valued => format!("{group}({key} = ...)"),
        Some(("build", key, _)) => format!("build(..., {key})"),
        Some((group, key, _)) => format!("{group}({key}(...))"),
        None if valued => field.to_string(),
        None => format!("{field}(...)"),
    }
}

/// `merge(follows(x), never_sharded = "k")` and the other groups, spread
/// into the flat fields [`RawArgs`] parses (each inner option keeps its own
/// span, so every message still points at what the user wrote); a flat
/// field written at the top level is an error that names its group.
fn ungroup_options(
    errors: &mut darling::error::Accumulator,
    metas: &[NestedMeta],
) -> (Vec<NestedMeta>, bool) {
    let mut failed = false;
    let mut out = Vec::new();
    for m in metas {
        let NestedMeta::Meta(meta) = m else {
            out.push(m.clone());
            continue;
        };
        let key = darling::util::path_to_string(meta.path());
        if let Some((group, inner, _)) = GROUPED.iter().find(|(_, _, f)| *f == key) {
            let example = match meta {
                syn::Meta::Path(_) => format!("{group}(..., {inner})"),
                syn::Meta::List(l) => format!("{group}({inner}({}))", l.tokens),
                // The value as written when it is one the key takes; a
                // hint that copied a bad value would mislead twice.
                syn::Meta::NameValue(nv)
                    if is_str(&nv.value)
                        || (key == "reduce" && matches!(ungroup(&nv.value), Expr::Path(_))) =>
                {
                    format!("{group}({inner} = {})", nv.value.to_token_stream())
                }
                syn::Meta::NameValue(_) => match STRING_OPTIONS.iter().find(|(k, _)| *k == key) {
                    Some((_, example)) => (*example).to_string(),
                    None if key == "reduce" => "partial(reduce = \"max\")".to_string(),
                    None => format!("{group}({inner} = ...)"),
                },
            };
            failed = true;
            errors.push(
                Error::custom(format!(
                    "`{key}` is part of `{group}(...)`: write `{example}`"
                ))
                .with_span(meta.path()),
            );
            continue;
        }
        let is_group = GROUPED.iter().any(|(g, _, _)| *g == key);
        let syn::Meta::List(list) = meta else {
            if !TOP_LEVEL.contains(&key.as_str()) {
                failed = true;
                errors.push(unknown_option(&key, TOP_LEVEL, None).with_span(meta.path()));
            } else if is_group && key != "build" {
                failed = true;
                errors.push(
                    Error::custom(format!(
                        "`{key}` groups options in parentheses, e.g. `{}`",
                        group_example(&key)
                    ))
                    .with_span(meta),
                );
            } else {
                out.push(m.clone());
            }
            continue;
        };
        if !is_group {
            if TOP_LEVEL.contains(&key.as_str()) {
                out.push(m.clone());
            } else {
                failed = true;
                errors.push(unknown_option(&key, TOP_LEVEL, None).with_span(meta.path()));
            }
            continue;
        }
        let Some(inner) =
            errors.handle(NestedMeta::parse_meta_list(list.tokens.clone()).map_err(Error::from))
        else {
            failed = true;
            continue;
        };
        for (k, im) in inner.iter().enumerate() {
            // `build(Self::plan, cache)`: the builder is the first item.
            if key == "build"
                && k == 0
                && let NestedMeta::Meta(syn::Meta::Path(path)) = im
                && !GROUPED
                    .iter()
                    .any(|(g, i, _)| *g == "build" && path.is_ident(i))
            {
                out.push(NestedMeta::Meta(syn::Meta::NameValue(syn::MetaNameValue {
                    path: syn::parse_quote_spanned!(path.span()=> build),
                    eq_token: Default::default(),
                    value: syn::Expr::Path(syn::ExprPath {
                        attrs: Vec::new(),
                        qself: None,
                        path: path.clone(),
                    }),
                })));
                continue;
            }
            let NestedMeta::Meta(im) = im else {
                failed = true;
                errors.push(
                    Error::custom(format!("`{key}(...)` takes options, not a literal"))
                        .with_span(im),
                );
                continue;
            };
            let ik = darling::util::path_to_string(im.path());
            let Some((_, _, field)) = GROUPED.iter().find(|(g, i, _)| *g == key && *i == ik) else {
                let keys: Vec<&str> = GROUPED
                    .iter()
                    .filter(|(g, _, _)| *g == key)
                    .map(|(_, i, _)| *i)
                    .collect();
                failed = true;
                errors.push(unknown_option(&ik, &keys, Some(&key)).with_span(im.path()));
                continue;
            };
            let path: Path = {
                let ident = Ident::new(field, im.path().span());
                ident.into()
            };
            let renamed = match im.clone() {
                syn::Meta::Path(_) => syn::Meta::Path(path),
                syn::Meta::List(mut l) => {
                    l.path = path;
                    syn::Meta::List(l)
                }
                syn::Meta::NameValue(mut nv) => {
                    nv.path = path;
                    syn::Meta::NameValue(nv)
                }
            };
            out.push(NestedMeta::Meta(renamed));
        }
    }
    (out, failed)
}

/// An example of a group, for messages.
fn group_example(group: &str) -> &'static str {
    match group {
        "merge" => "merge(follows(positions), never_sharded = \"k\")",
        "partial" => "partial(reduce = \"max\", none(loss))",
        "grad" => "grad(none(ids), ignores(table))",
        _ => "build(Self::plan, cache)",
    }
}

/// An unknown option, with the nearest known one when a typo is likely.
fn unknown_option(key: &str, known: &[&str], group: Option<&str>) -> Error {
    let near = known
        .iter()
        .map(|k| (spmd_notation::edit_distance(key, k), *k))
        .filter(|&(d, k)| d <= 2 && d < k.len())
        .min_by_key(|&(d, _)| d)
        .map(|(_, k)| format!(" (did you mean `{k}`?)"));
    // A key of another group, as written or nearly (`conflict` for
    // `merge(conflicts = ...)`).
    let home = GROUPED
        .iter()
        .filter(|(g, _, _)| group != Some(*g))
        .map(|&(g, i, f)| (spmd_notation::edit_distance(key, i), g, i, f))
        .filter(|&(d, _, i, _)| d <= 2 && d < i.len())
        .min_by_key(|&(d, ..)| d)
        .map(|(d, g, i, f)| {
            let valued = STRING_OPTIONS.iter().any(|(k, _)| *k == f) || f == "reduce";
            let shown = if valued {
                format!("{g}({i} = ...)")
            } else {
                format!("{g}({i}(...))")
            };
            if d == 0 {
                format!(" (`{i}` is a key of `{g}(...)`: write `{shown}`)")
            } else {
                format!(" (did you mean `{shown}`?)")
            }
        });
    let list = known
        .iter()
        .map(|k| format!("`{k}`"))
        .collect::<Vec<_>>()
        .join(", ");
    let what = match group {
        None => format!("option `{key}`"),
        Some(g) => format!("key `{key}` in `{g}(...)`"),
    };
    Error::custom(format!(
        "unknown {what}{}; expected one of {list}",
        near.or(home).unwrap_or_default()
    ))
}

/// Parses the arguments one option at a time. darling rejects the whole list
/// on its first unknown, duplicated or mistyped option, which would hide every
/// notation error behind a typo in another option; here each bad option is
/// reported and left out, and the rest are still parsed and checked.
fn raw_args(errors: &mut darling::error::Accumulator, metas: &[NestedMeta]) -> (RawArgs, Given) {
    let mut given = Given {
        keys: Vec::new(),
        invalid: false,
    };
    let mut good = Vec::new();
    let (metas, ungroup_failed) = ungroup_options(errors, metas);
    given.invalid |= ungroup_failed;
    for m in &metas {
        if let NestedMeta::Meta(meta) = m {
            let path = meta.path();
            let key = darling::util::path_to_string(path);
            // `case` is the one option that may repeat.
            if key != "case" && given.has(&key) {
                errors.push(Error::duplicate_field_path(path).with_span(path));
                continue;
            }
            given.keys.push((key, path.span()));
        }
        if let Some(e) = string_expected(m) {
            errors.push(e);
            given.invalid = true;
        } else if errors
            .handle(RawArgs::from_list(std::slice::from_ref(m)))
            .is_some()
        {
            good.push(m.clone());
        } else {
            given.invalid = true;
        }
    }
    // Each option parsed on its own and none repeats, so this cannot fail.
    let raw = errors.handle(RawArgs::from_list(&good)).unwrap_or_default();
    (raw, given)
}

/// Options that take a string literal, with an example for the error message.
const STRING_OPTIONS: &[(&str, &str)] = &[
    ("einsum", "einsum = \"mk,kn->mn\""),
    ("name", "name = \"matmul\""),
    ("never_sharded", "merge(never_sharded = \"k\")"),
    ("conflicts", "merge(conflicts = \"strict\")"),
    ("divisibility", "merge(divisibility = \"drop\")"),
    ("missing_axis", "merge(missing_axis = \"error\")"),
    ("backward_partial", "partial(backward = \"reset\")"),
    ("partial_inputs", "partial(inputs = \"linear\")"),
    ("unsharded_claims", "merge(unsharded_claims = \"ignore\")"),
    ("compounds", "merge(compounds = \"absorb\")"),
];

/// `einsum = 3` and the like: darling would say only "Unexpected type `int`".
/// Also looks inside `case(...)`.
fn string_expected(m: &NestedMeta) -> Option<Error> {
    match m {
        // A flag given a value: darling would say only "Unknown value".
        NestedMeta::Meta(meta @ (syn::Meta::NameValue(_) | syn::Meta::List(_)))
            if meta.path().is_ident("needs_output_shapes") =>
        {
            Some(
                Error::custom(
                    "`output_shapes` is a flag of `build(...)`: write `build(Self::plan, output_shapes)`",
                )
                .with_span(meta),
            )
        }
        // `reduce = "max"`, or `reduce = Self::method` for a type read from
        // the attributes.
        NestedMeta::Meta(syn::Meta::NameValue(nv)) if nv.path.is_ident("reduce") => {
            (!is_str(&nv.value) && !matches!(ungroup(&nv.value), Expr::Path(_))).then(|| {
                Error::custom(
                    "`partial(reduce = ...)` takes a reduce type in double quotes, e.g. `partial(reduce = \"max\")`, \
                     or a method that reads it from the attributes, e.g. `partial(reduce = Self::reduce_type)`",
                )
                .with_span(&nv.value)
            })
        }
        NestedMeta::Meta(syn::Meta::NameValue(nv)) => {
            let key = nv.path.get_ident()?.to_string();
            let (_, example) = STRING_OPTIONS.iter().find(|(k, _)| *k == key)?;
            (!is_str(&nv.value)).then(|| {
                Error::custom(format!(
                    "`{}` takes a string literal in double quotes, e.g. `{example}`",
                    shown(&key)
                ))
                .with_span(&nv.value)
            })
        }
        // `reduce_axes(k = 4)`: darling would say "Unexpected type `int`".
        NestedMeta::Meta(syn::Meta::List(list)) if list.path.is_ident("reduce_axes") => {
            let inner = NestedMeta::parse_meta_list(list.tokens.clone()).ok()?;
            inner.iter().find_map(|m| match m {
                NestedMeta::Meta(syn::Meta::NameValue(nv)) if !is_str(&nv.value) => Some(
                    Error::custom(
                        "`partial(axes(...))` gives each label a reduce type in double quotes, e.g. `partial(axes(k = \"max\"))`",
                    )
                    .with_span(&nv.value),
                ),
                _ => None,
            })
        }
        NestedMeta::Meta(syn::Meta::List(list)) if list.path.is_ident("case") => {
            let inner = NestedMeta::parse_meta_list(list.tokens.clone()).ok()?;
            inner
                .iter()
                .filter(|m| matches!(m, NestedMeta::Meta(m) if m.path().is_ident("einsum")))
                .find_map(string_expected)
        }
        _ => None,
    }
}

/// `value` without the invisible groups `macro_rules!` wraps fragments in.
fn ungroup(mut value: &Expr) -> &Expr {
    while let Expr::Group(g) = value {
        value = &g.expr;
    }
    value
}

/// A string literal, possibly in the invisible group a `$x:literal` of a
/// `macro_rules!` arrives in.
fn is_str(mut value: &Expr) -> bool {
    while let Expr::Group(g) = value {
        value = &g.expr;
    }
    matches!(
        value,
        Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Str(_),
            ..
        })
    )
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
const CONFLICTS: &[(&str, &str)] = &[
    ("first_wins", "FirstWins"),
    ("strict", "Strict"),
    ("role_priority", "RolePriority"),
    ("align", "Align"),
];
const DIVISIBILITY: &[(&str, &str)] = &[
    ("uneven", "Uneven"),
    ("drop", "Drop"),
    ("drop_derived", "DropDerived"),
];
const MISSING_AXIS: &[(&str, &str)] = &[("replicate", "Replicate"), ("error", "Error")];
const BACKWARD_PARTIAL: &[(&str, &str)] = &[("explain", "Explain"), ("reset", "Reset")];
const PARTIAL_INPUTS: &[(&str, &str)] = &[("drop", "Drop"), ("linear", "Linear")];
const UNSHARDED_CLAIMS: &[(&str, &str)] = &[("count", "Count"), ("ignore", "Ignore")];
const COMPOUNDS: &[(&str, &str)] = &[("major_only", "MajorOnly"), ("absorb", "Absorb")];

/// A string option with a fixed set of values, as the variant's identifier.
fn choice(
    errors: &mut darling::error::Accumulator,
    lit: Option<&LitStr>,
    what: &str,
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
                    "unknown {what} {value:?}; expected one of {}",
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
    // Offsets in the value map to offsets in the token only for a plain literal.
    let found = if token.starts_with('r') {
        Some("a raw string")
    } else if !token.ends_with('"') {
        Some("a suffix")
    } else if token.contains('\\') {
        Some("an escape")
    } else {
        None
    };
    if let Some(found) = found {
        errors.push(
            Error::custom(format!(
                "the notation must be a plain \"...\" string literal, without raw string, escape or suffix (found {found} in {token})"
            ))
            .with_span(lit),
        );
        return None;
    }
    let value = lit.value();
    if spmd_notation::is_template(&value) {
        let problems = match spmd_notation::parse_template(&value) {
            Ok(t) => {
                let (n_in, n_out) = (t.n_inputs(), t.terms().len() - t.n_inputs());
                let mut p = Vec::new();
                // A side whose last term repeats takes any number of tensors.
                let [rin, rout] = t.repeats().map(|r| r != spmd_notation::Repeat::Once);
                if let Some(want) = declared.0.filter(|&w| !rin && w != n_in) {
                    p.push(arity(Side::Input, want, n_in, &value));
                }
                if let Some(want) = declared.1.filter(|&w| !rout && w != n_out) {
                    p.push(arity(Side::Output, want, n_out, &value));
                }
                if p.is_empty() {
                    return Some(Literal {
                        lit: lit.clone(),
                        form: Form::Template(t),
                    });
                }
                p
            }
            Err(e) => e.errors,
        };
        for p in problems {
            errors.push(Error::custom(p.message(&value)).with_span(&inside(lit, &p)));
        }
        return None;
    }
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
                    form: Form::Notation(n),
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

/// A template's selectors read the op's attributes: a plain name must be a
/// field (`method()` selectors are checked by the compiler where they expand).
fn selectors_are_fields(
    errors: &mut darling::error::Accumulator,
    l: &Literal,
    fields: &[Field],
    ident: &Ident,
) {
    let Form::Template(t) = &l.form else { return };
    let value = l.lit.value();
    for (name, range) in t.selectors().iter().zip(t.selector_ranges()) {
        if name.ends_with("()")
            || name.ends_with("(call)")
            || fields.iter().any(|f| f.ident == name)
        {
            continue;
        }
        let known: Vec<String> = fields.iter().map(|f| format!("`{}`", f.ident)).collect();
        let column = value[..range.start].chars().count() + 1;
        errors.push(
            Error::custom(format!(
                "template selector `{name}` at column {column} of {value:?} is not an attribute of `{ident}` ({}); a method selector is written `{name}()`",
                if known.is_empty() {
                    "it has none".to_string()
                } else {
                    format!("its attributes: {}", known.join(", "))
                }
            ))
            .with_span(&lit_span(&l.lit, range.clone())),
        );
    }
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

/// Every label of `never_sharded` must be in every literal notation; one
/// error per label, naming the notations that lack it.
fn labels_in(errors: &mut darling::error::Accumulator, lit: &LitStr, literals: &[&Literal]) {
    let value = lit.value();
    for (column, (at, c)) in (1..).zip(value.char_indices()) {
        if c.is_whitespace() || c == ',' {
            continue;
        }
        if !c.is_ascii_alphabetic() {
            errors.push(
                Error::custom(format!(
                    "{c:?} at column {column} of never_sharded {value:?} is not an axis label (a letter)"
                ))
                .with_span(&lit_span(lit, at..at + c.len_utf8())),
            );
        } else if let Some(notations) = missing_from(c, literals) {
            errors.push(
                Error::custom(format!(
                    "label `{c}` at column {column} of never_sharded {value:?} is not in {notations}"
                ))
                .with_span(&lit_span(lit, at..at + c.len_utf8())),
            );
        }
    }
}

/// The notations among `literals` that lack label `c`, for a message: `the
/// notation "mk->m"` or `the notations "mk->m", "km->m"`; `None` if all have it.
fn missing_from(c: char, literals: &[&Literal]) -> Option<String> {
    // A template may leave a label out where it has no such dim (`*->1`, the
    // selected dim of a 0-d tensor): only plain notations must all have it,
    // and some literal must.
    let anywhere = literals.iter().any(|l| l.has_label(c));
    let missing: Vec<String> = literals
        .iter()
        .filter(|l| !l.has_label(c) && (!anywhere || matches!(l.form, Form::Notation(_))))
        .map(|l| format!("{:?}", l.lit.value()))
        .collect();
    match missing.len() {
        0 => None,
        1 => Some(format!("the notation {}", missing[0])),
        _ => Some(format!("the notations {}", missing.join(", "))),
    }
}

/// The span of a byte range of a plain literal's value (exact on nightly, the
/// whole literal on stable; the message carries the column).
fn lit_span(lit: &LitStr, range: std::ops::Range<usize>) -> Span {
    let token = lit.token().to_string();
    let plain = token.starts_with('"') && !token.contains('\\');
    plain
        .then(|| lit.token().subspan(range.start + 1..range.end + 1))
        .flatten()
        .unwrap_or_else(|| lit.span())
}

/// The struct's fields and how each is filled; `#[spmd(...)]` attributes are
/// taken off the fields so the re-emitted struct compiles.
fn fields(item: &mut ItemStruct) -> Result<Vec<Field>, Error> {
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
    // Created only now: an `Accumulator` dropped unfinished panics, so the
    // early returns above (a unit struct, a tuple struct) must not own one.
    let mut errors = Error::accumulator();
    let mut out = Vec::new();
    for f in named.named.iter_mut() {
        let Some(ident) = f.ident.clone() else {
            continue;
        };
        let mut raw = RawField::default();
        let mut keep = Vec::new();
        let mut seen = false;
        for attr in f.attrs.drain(..) {
            if attr.path().is_ident("spmd") {
                // darling would say "Unexpected meta-item format `word`" for a
                // bare `#[spmd]`, and a second `#[spmd(..)]` would silently
                // replace the first.
                if let syn::Meta::Path(p) = &attr.meta {
                    errors.push(
                        Error::custom(
                            "`#[spmd]` needs options: `#[spmd(default)]`, `#[spmd(default = expr)]`, `#[spmd(rename = \"...\")]` or `#[spmd(skip)]`",
                        )
                        .with_span(p),
                    );
                } else if seen {
                    errors.push(
                        Error::custom(
                            "a second `#[spmd(...)]` on this field: put its options in one attribute",
                        )
                        .with_span(attr.path()),
                    );
                } else if let Some(value) = bad_rename(&attr.meta) {
                    errors.push(
                        Error::custom(
                            "`rename` takes the attribute's name in double quotes, e.g. `#[spmd(rename = \"transpose_x\")]`",
                        )
                        .with_span(&value),
                    );
                } else if let Some(r) = errors.handle(RawField::from_meta(&attr.meta)) {
                    raw = r;
                }
                seen = true;
            } else {
                keep.push(attr);
            }
        }
        f.attrs = keep;
        // The default as the user wrote it, for `spmd ops NAME`.
        let default_text = match &raw.default {
            Some(Override::Explicit(ReduceArg(e))) => Some(e.to_token_stream().to_string()),
            _ => None,
        };
        let ty = f.ty.clone();
        let source = match (raw.skip, raw.default) {
            (true, _) => FieldSource::Skip,
            (false, Some(Override::Inherit)) => FieldSource::Default,
            // A string literal default is the attribute's text: `"none"`
            // for a `String` field (converted as the field's type asks).
            (false, Some(Override::Explicit(ReduceArg(e)))) => match ungroup(&e) {
                Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(lit),
                    ..
                }) => {
                    FieldSource::DefaultExpr(syn::parse_quote!(::core::convert::Into::into(#lit)))
                }
                _ => FieldSource::DefaultExpr(e),
            },
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
            ty,
            default_text,
        });
    }
    errors.finish_with(out)
}

/// The value of `#[spmd(rename = <not a string>)]`, which darling would report
/// only as "Unexpected type".
fn bad_rename(meta: &syn::Meta) -> Option<Expr> {
    let syn::Meta::List(list) = meta else {
        return None;
    };
    let inner = NestedMeta::parse_meta_list(list.tokens.clone()).ok()?;
    inner.into_iter().find_map(|m| match m {
        NestedMeta::Meta(syn::Meta::NameValue(nv))
            if nv.path.is_ident("rename") && !is_str(&nv.value) =>
        {
            Some(nv.value)
        }
        _ => None,
    })
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
