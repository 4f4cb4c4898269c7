//! Parse and validate: the attribute's arguments and the struct it sits on become
//! a typed [`Rule`], or every problem found, each spanned on the user's tokens.
//!
//! The options are darling structs, one per group of the rule language
//! (docs/semantics.md §5): [`MergeArgs`], [`PartialArgs`], [`GradArgs`],
//! [`BuildArgs`]; the policies are darling enums named as spmd-core names
//! them. `#[spmd_rule(...)]` and `#[derive(SpmdRule)]`'s `#[spmd(...)]` are
//! parsed by this one module.

use std::collections::HashMap;

use darling::ast::NestedMeta;
use darling::util::{Flag, Override, PathList, SpannedValue};
use darling::{Error, FromMeta};
use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote};
use spmd_notation::{ErrorKind, Notation, NotationError, OwnedTemplate, Side};
use syn::spanned::Spanned;
use syn::{Expr, Ident, ItemStruct, LitStr, Path};

/// The attribute's arguments as written.
#[derive(FromMeta, Default)]
struct RawArgs {
    einsum: Option<Quoted>,
    name: Option<Quoted>,
    #[darling(multiple, rename = "case")]
    cases: Vec<RawCase>,
    build: Option<BuildArgs>,
    #[darling(default)]
    merge: MergeArgs,
    #[darling(default)]
    partial: PartialArgs,
    #[darling(default)]
    grad: GradArgs,
    validate: Option<Path>,
    adjust: Option<Path>,
    inputs: Option<PathList>,
    outputs: Option<PathList>,
    optional: Option<PathList>,
    #[darling(rename = "crate")]
    krate: Option<Path>,
}

/// `merge(...)`: how tensors take part in the merge.
#[derive(FromMeta, Default)]
struct MergeArgs {
    follows: Option<PathList>,
    first: Option<PathList>,
    never_sharded: Option<Quoted>,
    #[darling(default)]
    unsharded_claims: UnshardedClaims,
    #[darling(default)]
    conflicts: Conflicts,
    #[darling(default)]
    compounds: Compounds,
    #[darling(default)]
    divisibility: Divisibility,
    #[darling(default)]
    missing_axis: MissingAxis,
}

/// `partial(...)`: what partial results are.
#[derive(FromMeta, Default)]
struct PartialArgs {
    reduce: Option<SpannedValue<ReduceArg>>,
    axes: Option<HashMap<Ident, SpannedValue<ReduceType>>>,
    none: Option<PathList>,
    #[darling(default)]
    inputs: PartialInputs,
    #[darling(default)]
    backward: BackwardPartial,
}

/// `grad(...)`: which tensors the grad op takes and returns.
#[derive(FromMeta, Default)]
struct GradArgs {
    none: Option<PathList>,
    ignores: Option<PathList>,
    inputs: Option<PathList>,
    of: Option<PathList>,
}

/// `build(Self::notation, cache, output_shapes)`: the method that builds the
/// notation at run time, written first, then flags.
struct BuildArgs {
    method: Option<Path>,
    cache: Option<Span>,
    output_shapes: bool,
}

/// `build(...)`'s flags.
#[derive(FromMeta)]
struct BuildFlags {
    cache: Flag,
    output_shapes: Flag,
}

impl FromMeta for BuildArgs {
    fn from_list(items: &[NestedMeta]) -> darling::Result<Self> {
        // The first item is the method unless it is one of the flags.
        let (method, flags) = match items.split_first() {
            Some((NestedMeta::Meta(syn::Meta::Path(p)), rest))
                if BuildFlags::from_list(&items[..1]).is_err() =>
            {
                (Some(p.clone()), rest)
            }
            _ => (None, items),
        };
        let flags = BuildFlags::from_list(flags).map_err(|e| {
            let span = e.span();
            Error::custom(format!(
                "{e}: `build(...)` takes the method that builds the notation, then the flags \
                 `cache` and `output_shapes`, e.g. `build(Self::notation, cache)`"
            ))
            .with_span(&span)
        })?;
        Ok(BuildArgs {
            method,
            cache: flags.cache.is_present().then(|| flags.cache.span()),
            output_shapes: flags.output_shapes.is_present(),
        })
    }

    /// `build = Self::notation`, the method alone.
    fn from_expr(expr: &Expr) -> darling::Result<Self> {
        match ungroup(expr) {
            Expr::Path(p) => Ok(BuildArgs {
                method: Some(p.path.clone()),
                cache: None,
                output_shapes: false,
            }),
            e => Err(Error::custom(
                "`build` names the method that builds the notation, e.g. `build = Self::notation` or `build(Self::notation, cache)`",
            )
            .with_span(e)),
        }
    }
}

/// A string literal (darling's own `LitStr` would say only "Unexpected
/// literal type" of anything else).
#[derive(Clone)]
struct Quoted(LitStr);

impl FromMeta for Quoted {
    fn from_expr(expr: &Expr) -> darling::Result<Self> {
        match ungroup(expr) {
            Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) => Ok(Quoted(s.clone())),
            e => Err(Error::custom(
                "expected a string literal in double quotes, e.g. `einsum = \"mk,kn->mn\"`",
            )
            .with_span(e)),
        }
    }
}

/// `partial(reduce = "max")`, or `partial(reduce = Self::method)` for a
/// reduce type read from the attributes per call.
enum ReduceArg {
    Type(ReduceType),
    Method(Path),
}

impl FromMeta for ReduceArg {
    fn from_expr(expr: &Expr) -> darling::Result<Self> {
        match ungroup(expr) {
            Expr::Path(p) => Ok(ReduceArg::Method(p.path.clone())),
            e if is_str(e) => ReduceType::from_expr(e).map(ReduceArg::Type),
            e => Err(Error::custom(
                "`partial(reduce = ...)` takes a reduce type in double quotes, e.g. `partial(reduce = \"max\")`, \
                 or a method that reads it from the attributes, e.g. `partial(reduce = Self::reduce_type)`",
            )
            .with_span(e)),
        }
    }
}

/// An expression kept as written: `#[spmd(default = "none")]` (darling's
/// own `Expr` would read a string's contents as an expression: `none`, an
/// unknown value).
#[derive(Clone)]
struct AsWritten(Expr);

impl FromMeta for AsWritten {
    fn from_expr(expr: &Expr) -> darling::Result<Self> {
        Ok(AsWritten(expr.clone()))
    }
}

/// `case(when = <expr>, einsum = "...")`.
#[derive(FromMeta)]
struct RawCase {
    when: Expr,
    einsum: Quoted,
}

/// `#[spmd(default, default = <expr>, rename = "...", skip)]` on a field.
#[derive(FromMeta, Default)]
struct RawField {
    default: Option<Override<AsWritten>>,
    rename: Option<LitStr>,
    #[darling(default)]
    skip: bool,
}

/// One of spmd-core's policy enums as the attribute writes it: darling reads
/// the snake_case value (`"first_wins"`), and the expansion names the
/// variant of spmd-core's enum of the same name (`Conflicts::FirstWins`).
/// The variants mirror spmd-core's (a proc macro cannot depend on the crate
/// that re-exports it); a variant spmd-core lacks fails to compile in every
/// expansion that names it, so the ui and expansion tests catch a drift.
macro_rules! policy {
    ($name:ident { $default:ident $(, $other:ident)* }) => {
        #[derive(FromMeta, Default, Clone, Copy, PartialEq)]
        pub enum $name {
            #[default]
            $default,
            $($other),*
        }

        impl $name {
            /// The variant's name (`FirstWins`).
            fn variant(self) -> &'static str {
                match self {
                    $name::$default => stringify!($default),
                    $($name::$other => stringify!($other),)*
                }
            }
        }

        impl ToTokens for $name {
            fn to_tokens(&self, tokens: &mut TokenStream) {
                let ty = Ident::new(stringify!($name), Span::call_site());
                let variant = Ident::new(self.variant(), Span::call_site());
                tokens.extend(quote!(__spmd::#ty::#variant));
            }
        }
    };
}

policy!(Conflicts {
    FirstWins,
    Strict,
    RolePriority,
    Align
});
policy!(Divisibility {
    Uneven,
    Drop,
    DropDerived
});
policy!(MissingAxis { Replicate, Error });
policy!(BackwardPartial { Explain, Reset });
policy!(PartialInputs { Drop, Linear });
policy!(UnshardedClaims { Count, Ignore });
policy!(Compounds { MajorOnly, Absorb });
policy!(ReduceType {
    Sum,
    Avg,
    Max,
    Min,
    Prod,
    Any,
    All
});

/// The rule's merge and partial policies.
#[derive(Default)]
pub struct Policies {
    pub conflicts: Conflicts,
    pub divisibility: Divisibility,
    pub missing_axis: MissingAxis,
    pub backward_partial: BackwardPartial,
    pub partial_inputs: PartialInputs,
    pub unsharded_claims: UnshardedClaims,
    pub compounds: Compounds,
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
    pub reduce: ReduceType,
    /// `reduce = Self::method`: `fn(&Self) -> Result<ReduceType, SpmdError>`,
    /// the reduce type read from the attributes per call.
    pub reduce_fn: Option<Path>,
    /// (label, reduce type), sorted by label.
    pub reduce_axes: Vec<(char, ReduceType)>,
    pub never_sharded: String,
    pub policies: Policies,
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
    pub merge_first: u64,
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
    let name = match raw.name.as_ref().map(|n| &n.0) {
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
    let method = raw.build.as_ref().and_then(|b| b.method.as_ref());
    let cache = raw.build.as_ref().and_then(|b| b.cache);
    let mut literals: Vec<&Literal> = Vec::new();
    let source = match (&raw.einsum, method) {
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
        (None, None) if given.has("einsum") || given.has("build") || given.invalid => {
            if raw.build.is_some() {
                errors.push(
                    Error::custom(
                        "`build(...)` names the method that builds the notation first, e.g. `build(Self::notation, cache)`",
                    )
                    .with_span(&given.span("build")),
                );
            }
            None
        }
        (None, None) => {
            errors.push(Error::custom(
                "missing notation: add `einsum = \"...\"` (or `build = path` for a notation built at run time)",
            ));
            None
        }
        (None, Some(method)) => {
            for c in &raw.cases {
                errors.push(
                    Error::custom(
                        "`case(...)` picks among literal notations; it cannot go with `build`",
                    )
                    .with_span(&c.einsum.0),
                );
            }
            Some(Source::Build {
                path: method.clone(),
                cache,
            })
        }
        (Some(Quoted(lit)), None) => {
            let default = literal(&mut errors, lit, declared);
            let cases: Vec<(Expr, Option<Literal>)> = raw
                .cases
                .iter()
                .map(|c| (c.when.clone(), literal(&mut errors, &c.einsum.0, declared)))
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
    if let (Some(span), None, Some(_)) = (cache, method, &raw.einsum) {
        errors.push(
            Error::custom(
                "`build(..., cache)` memoizes a notation built at run time; literal notations are already compiled once, at macro time",
            )
            .with_span(&span),
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

    let (merge, partial, grad) = (&raw.merge, &raw.partial, &raw.grad);
    let never_sharded = merge.never_sharded.as_ref().map_or(String::new(), |q| {
        labels_in(&mut errors, &q.0, &literals);
        q.0.value()
            .chars()
            .filter(char::is_ascii_alphabetic)
            .collect()
    });
    let (reduce, reduce_fn) = match partial.reduce.as_deref() {
        Some(ReduceArg::Type(r)) => (*r, None),
        Some(ReduceArg::Method(p)) => (ReduceType::Sum, Some(p.clone())),
        None => (ReduceType::Sum, None),
    };
    let mut reduce_axes = Vec::new();
    for (label, r) in partial.axes.iter().flatten() {
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
                reduce_axes.push((c, **r));
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
        let reduce = partial.reduce.iter().filter_map(|r| match &**r {
            ReduceArg::Type(t) => Some((*t, r.span())),
            ReduceArg::Method(_) => None,
        });
        let axes = partial
            .axes
            .iter()
            .flat_map(|m| m.values())
            .map(|r| (**r, r.span()));
        for (r, span) in reduce.chain(axes) {
            if matches!(r, ReduceType::Prod | ReduceType::Any | ReduceType::All) {
                errors.push(
                    Error::custom(format!(
                        "reduce type {:?} with an addend (`+`): an added operand commutes only \
                         with \"sum\", \"avg\", \"max\" and \"min\" reductions",
                        snake_case(r.variant())
                    ))
                    .with_span(&span),
                );
            }
        }
    }
    let policies = Policies {
        conflicts: merge.conflicts,
        divisibility: merge.divisibility,
        missing_axis: merge.missing_axis,
        backward_partial: partial.backward,
        partial_inputs: partial.inputs,
        unsharded_claims: merge.unsharded_claims,
        compounds: merge.compounds,
    };

    let inputs = raw.inputs.as_ref();
    let outputs = raw.outputs.as_ref();
    let no_grad = input_mask(&mut errors, "grad(none(...))", grad.none.as_ref(), inputs);
    let grad_ignores = input_mask(
        &mut errors,
        "grad(ignores(...))",
        grad.ignores.as_ref(),
        inputs,
    );
    let (follows, follows_outputs) = merge.follows.as_ref().map_or((0, 0), |names| {
        masks(tensor_positions(
            &mut errors,
            "merge(follows(...))",
            names,
            inputs,
            outputs,
        ))
    });
    let output_mask =
        |errors: &mut darling::error::Accumulator, option, names: &Option<PathList>| {
            names.as_ref().map_or(0, |names| {
                tensor_positions(errors, option, names, None, outputs)
                    .into_iter()
                    .fold(0u64, |m, (_, o)| m | 1 << o)
            })
        };
    let not_partial = output_mask(&mut errors, "partial(none(...))", &partial.none);
    let merge_first = output_mask(&mut errors, "merge(first(...))", &merge.first);
    let (optional_inputs, optional_outputs) =
        optional_masks(&mut errors, raw.optional.as_ref(), inputs, outputs);
    let grad_inputs = grad
        .inputs
        .as_ref()
        .map(|names| tensor_positions(&mut errors, "grad(inputs(...))", names, inputs, outputs));
    let grads_for = grad.of.as_ref().map(|names| {
        tensor_positions(&mut errors, "grad(of(...))", names, None, outputs)
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
        policies,
        validate: raw.validate,
        adjust: raw.adjust,
        input_names: names_of(raw.inputs.as_ref()),
        output_names: names_of(raw.outputs.as_ref()),
        no_grad,
        grad_ignores,
        follows,
        follows_outputs,
        not_partial,
        merge_first,
        optional_inputs,
        optional_outputs,
        needs_output_shapes: raw.build.as_ref().is_some_and(|b| b.output_shapes) || ones_in_output,
        grad_inputs,
        grads_for,
    })
}

/// `grad(inputs(x, out))` / `grad(of(out))`: tensor names to (is an output,
/// position), in the order written. An option that names outputs only
/// passes no input list.
fn tensor_positions(
    errors: &mut darling::error::Accumulator,
    option: &str,
    names: &darling::util::PathList,
    inputs: Option<&darling::util::PathList>,
    outputs: Option<&darling::util::PathList>,
) -> Vec<(bool, u8)> {
    let outputs_only = !matches!(
        option,
        "grad(inputs(...))" | "merge(follows(...))" | "optional(...)"
    );
    let declare = if outputs_only {
        "`outputs(...)`"
    } else {
        "`inputs(...)` and `outputs(...)`"
    };
    if names.is_empty() {
        // `grad(inputs())`: the grad op takes no forward tensor.
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
    names: Option<&PathList>,
    inputs: Option<&PathList>,
    outputs: Option<&PathList>,
) -> (u64, u64) {
    let Some(names) = names else { return (0, 0) };
    masks(tensor_positions(
        errors,
        "optional(...)",
        names,
        inputs,
        outputs,
    ))
}

/// (is an output, position) pairs to bit masks over inputs and outputs.
fn masks(positions: Vec<(bool, u8)>) -> (u64, u64) {
    positions
        .into_iter()
        .fold((0, 0), |(i, o), (is_output, k)| match is_output {
            false => (i | 1 << k, o),
            true => (i, o | 1 << k),
        })
}

fn names_of(list: Option<&darling::util::PathList>) -> Vec<String> {
    list.map_or_else(Vec::new, |l| {
        l.iter().map(|p| p.to_token_stream().to_string()).collect()
    })
}

/// `grad(none(ids))` / `grad(ignores(weight))`: input names, as declared in
/// `inputs(...)`, to a bit mask over input positions.
fn input_mask(
    errors: &mut darling::error::Accumulator,
    option: &str,
    names: Option<&darling::util::PathList>,
    inputs: Option<&darling::util::PathList>,
) -> u64 {
    let Some(names) = names else { return 0 };
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
#[derive(Default)]
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

/// A group of options (docs/semantics.md §5): its key, an example for
/// messages, and its parser.
struct Group {
    key: &'static str,
    example: &'static str,
    /// Parses the group's items, each an option of its own; `None` for
    /// `build`, whose first item is its method.
    parse: Option<ParseItems>,
}

/// A group's parser, asked whether items are options of it.
type ParseItems = fn(&[NestedMeta]) -> darling::Result<()>;

fn parses<T: FromMeta>(items: &[NestedMeta]) -> darling::Result<()> {
    T::from_list(items).map(drop)
}

const GROUPS: [Group; 4] = [
    Group {
        key: "merge",
        example: "merge(follows(positions), never_sharded = \"k\")",
        parse: Some(parses::<MergeArgs>),
    },
    Group {
        key: "partial",
        example: "partial(reduce = \"max\", none(loss))",
        parse: Some(parses::<PartialArgs>),
    },
    Group {
        key: "grad",
        example: "grad(none(ids), ignores(table))",
        parse: Some(parses::<GradArgs>),
    },
    Group {
        key: "build",
        example: "build(Self::notation, cache)",
        parse: None,
    },
];

/// The group other than `except` that takes `item` as it is written, for a
/// hint: `follows(pos)` at the top level is `merge(follows(pos))`.
fn home_of(item: &NestedMeta, except: &str) -> Option<&'static Group> {
    GROUPS.iter().filter(|g| g.key != except).find(|g| {
        g.parse
            .is_some_and(|parse| parse(std::slice::from_ref(item)).is_ok())
    })
}

/// Parses the arguments leniently. darling rejects a whole list on its first
/// unknown, duplicated or mistyped option, which would hide every notation
/// error behind a typo in another option; here each option, and each option
/// inside a group, is parsed alone first: the bad ones are reported and left
/// out, and the rest are parsed together.
fn raw_args(errors: &mut darling::error::Accumulator, metas: &[NestedMeta]) -> (RawArgs, Given) {
    let mut given = Given::default();
    let mut good = Vec::new();
    for m in metas {
        let mut m = m.clone();
        if let NestedMeta::Meta(meta) = &m {
            let path = meta.path();
            let key = darling::util::path_to_string(path);
            // `case` is the one option that may repeat.
            if key != "case" && given.has(&key) {
                errors.push(Error::duplicate_field_path(path).with_span(path));
                continue;
            }
            given.keys.push((key.clone(), path.span()));
            let group = GROUPS.iter().find(|g| g.key == key);
            match (group, meta) {
                (
                    Some(
                        group @ Group {
                            parse: Some(parse), ..
                        },
                    ),
                    syn::Meta::List(list),
                ) => {
                    let Some(items) = errors.handle(
                        NestedMeta::parse_meta_list(list.tokens.clone()).map_err(Error::from),
                    ) else {
                        given.invalid = true;
                        continue;
                    };
                    let (kept, invalid) = group_items(errors, group.key, *parse, &items);
                    given.invalid |= invalid;
                    let mut list = list.clone();
                    list.tokens = quote!(#(#kept),*);
                    m = NestedMeta::Meta(syn::Meta::List(list));
                }
                // `build = Self::notation`: the method alone.
                (Some(Group { parse: None, .. }), syn::Meta::NameValue(_)) => {}
                (Some(group), syn::Meta::Path(_) | syn::Meta::NameValue(_)) => {
                    errors.push(
                        Error::custom(format!(
                            "`{key}` groups options in parentheses, e.g. `{}`",
                            group.example
                        ))
                        .with_span(meta),
                    );
                    given.invalid = true;
                    continue;
                }
                _ => {}
            }
        }
        match RawArgs::from_list(std::slice::from_ref(&m)) {
            Ok(_) => good.push(m),
            Err(e) => {
                given.invalid = true;
                let hint = home_of(&m, "").zip(match &m {
                    NestedMeta::Meta(meta) => Some(meta),
                    _ => None,
                });
                errors.push(match hint {
                    Some((group, meta)) => Error::custom(format!(
                        "`{}` is part of `{}(...)`: write `{}({})`",
                        darling::util::path_to_string(meta.path()),
                        group.key,
                        group.key,
                        meta.to_token_stream()
                    ))
                    .with_span(meta.path()),
                    None => e,
                });
            }
        }
    }
    // Each option parsed on its own and none repeats, so this cannot fail.
    let raw = errors.handle(RawArgs::from_list(&good)).unwrap_or_default();
    (raw, given)
}

/// The items of a group that parse, each alone; the others are reported.
/// Returns the kept items and whether any was left out.
fn group_items(
    errors: &mut darling::error::Accumulator,
    group: &str,
    parse: ParseItems,
    items: &[NestedMeta],
) -> (Vec<NestedMeta>, bool) {
    let (mut kept, mut seen, mut invalid) = (Vec::new(), Vec::new(), false);
    for item in items {
        if let NestedMeta::Meta(meta) = item {
            let key = darling::util::path_to_string(meta.path());
            if seen.contains(&key) {
                errors.push(Error::duplicate_field_path(meta.path()).with_span(meta.path()));
                invalid = true;
                continue;
            }
            seen.push(key);
        }
        match parse(std::slice::from_ref(item)) {
            Ok(()) => kept.push(item.clone()),
            Err(e) => {
                invalid = true;
                errors.push(match (home_of(item, group), item) {
                    (Some(home), NestedMeta::Meta(meta)) => Error::custom(format!(
                        "`{}` is a key of `{}(...)`, not of `{}(...)`: write `{}({})`",
                        darling::util::path_to_string(meta.path()),
                        home.key,
                        group,
                        home.key,
                        meta.to_token_stream()
                    ))
                    .with_span(meta.path()),
                    _ => e.at(group),
                });
            }
        }
    }
    (kept, invalid)
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
fn is_str(value: &Expr) -> bool {
    matches!(
        ungroup(value),
        Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Str(_),
            ..
        })
    )
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
            Some(Override::Explicit(AsWritten(e))) => Some(e.to_token_stream().to_string()),
            _ => None,
        };
        let ty = f.ty.clone();
        let source = match (raw.skip, raw.default) {
            (true, _) => FieldSource::Skip,
            (false, Some(Override::Inherit)) => FieldSource::Default,
            // A string literal default is the attribute's text: `"none"`
            // for a `String` field (converted as the field's type asks).
            (false, Some(Override::Explicit(AsWritten(e)))) => match ungroup(&e) {
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
