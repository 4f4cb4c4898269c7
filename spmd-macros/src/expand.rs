//! Expand: a validated [`Rule`] becomes the struct plus `Op` and `SpmdRule`
//! impls over `const` plans. On error: the struct, the errors, and stub impls
//! so that code using the type reports nothing further.

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote, quote_spanned};
use spmd_notation::{Dim, Fate, Notation, OwnedTemplate, Select};
use syn::spanned::Spanned;
use syn::{Expr, Item, ItemStruct, LitByteStr, LitStr, Path};

use crate::args::{self, FieldSource, Form, Policies, Rule, Source};

/// Which form declared the rule: the attribute re-emits the struct (its
/// `#[spmd(..)]` field attributes taken off), the derive leaves it where it
/// is. Everything else is the same code.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Declared {
    Attribute,
    Derive,
}

/// `#[spmd_rule(args)] item`.
pub fn expand(args: TokenStream, item: TokenStream) -> TokenStream {
    let item = match syn::parse2::<Item>(item.clone()) {
        Ok(Item::Struct(s)) => s,
        Ok(other) => return not_a_struct(&other, item),
        Err(e) => {
            let e = e.into_compile_error();
            return quote!(#item #e);
        }
    };
    declare(args, &item, Declared::Attribute)
}

/// `#[derive(SpmdRule)] #[spmd(args)] item`: the options are the
/// struct's `#[spmd(...)]` attributes (several are one list), parsed as
/// `#[spmd_rule(...)]`'s arguments.
pub fn derive(item: TokenStream) -> TokenStream {
    let item = match syn::parse2::<syn::DeriveInput>(item) {
        Ok(input) => input,
        Err(e) => return e.into_compile_error(),
    };
    let item = match item.data {
        syn::Data::Struct(data) => ItemStruct {
            attrs: item.attrs,
            vis: item.vis,
            struct_token: data.struct_token,
            ident: item.ident,
            generics: item.generics,
            fields: data.fields,
            semi_token: data.semi_token,
        },
        syn::Data::Enum(e) => return derive_on(e.enum_token.span, "an enum"),
        syn::Data::Union(u) => return derive_on(u.union_token.span, "a union"),
    };
    let mut args = TokenStream::new();
    let mut errors = TokenStream::new();
    for attr in item.attrs.iter().filter(|a| a.path().is_ident("spmd")) {
        match &attr.meta {
            syn::Meta::List(list) => {
                if !args.is_empty() {
                    args.extend(quote!(,));
                }
                args.extend(list.tokens.clone());
            }
            other => {
                let msg = "the rule's options go in `#[spmd(...)]`, e.g. `#[spmd(einsum = \"mk,kn->mn\")]`";
                errors.extend(quote_spanned!(other.span()=> ::core::compile_error!(#msg);));
            }
        }
    }
    if !errors.is_empty() {
        // The options could not be read: what they lack would be a
        // follow-on error.
        return fallback(&args, &item, errors, Declared::Derive);
    }
    declare(args, &item, Declared::Derive)
}

fn derive_on(span: Span, what: &str) -> TokenStream {
    let msg = format!(
        "#[derive(SpmdRule)] goes on a struct whose fields are the op's attributes, not on {what}"
    );
    quote_spanned!(span=> ::core::compile_error!(#msg);)
}

/// Both forms: parse and validate, then the impls (or, on error, the
/// errors and stub impls).
fn declare(args: TokenStream, item: &ItemStruct, form: Declared) -> TokenStream {
    let mut stripped = item.clone();
    match args::parse(args.clone(), &mut stripped) {
        Ok(rule) => rule_impls(&rule, form),
        Err(errors) => fallback(&args, &stripped, errors.write_errors(), form),
    }
}

/// `#[spmd_rule]` on an enum, union, fn, ...: the item is emitted unchanged.
fn not_a_struct(item: &Item, tokens: TokenStream) -> TokenStream {
    let (what, span) = match item {
        Item::Enum(e) => ("an enum", e.enum_token.span),
        Item::Union(u) => ("a union", u.union_token.span),
        Item::Fn(f) => ("a function", f.sig.fn_token.span),
        Item::Impl(i) => ("an impl block", i.impl_token.span),
        Item::Trait(t) => ("a trait", t.trait_token.span),
        _ => ("this item", Span::call_site()),
    };
    let msg = format!(
        "#[spmd_rule] goes on a struct whose fields are the op's attributes, not on {what}"
    );
    quote_spanned!(span=> ::core::compile_error!(#msg);)
        .into_iter()
        .chain(tokens)
        .collect()
}

/// Wraps a method call on the selected rule (`forward(..)` / `backward(..)`)
/// in the code that selects or builds that rule.
type WithRule<'a> = Box<dyn Fn(TokenStream) -> TokenStream + 'a>;

fn rule_impls(rule: &Rule, form: Declared) -> TokenStream {
    let item = (form == Declared::Attribute).then_some(&rule.item);
    let ident = &rule.item.ident;
    let krate = &rule.krate;
    let name = &rule.name;

    // `case`: which notation the call chooses, as an expression (`None`
    // for a plan built at run time, which is not prepared).
    let (consts, notations, with_rule, case): (
        TokenStream,
        Vec<LitStr>,
        WithRule<'_>,
        Option<TokenStream>,
    ) = match &rule.source {
        Source::Literal { default, cases } => {
            let mut consts = TokenStream::new();
            let mut literals = vec![default];
            literals.extend(cases.iter().map(|(_, l)| l));
            let any_template = literals.iter().any(|l| matches!(l.form, Form::Template(_)));
            for (i, l) in literals.iter().enumerate() {
                match &l.form {
                    Form::Notation(n) => {
                        let c = syn::Ident::new(&format!("__RULE_{i}"), Span::call_site());
                        let k = syn::Ident::new(&format!("__KEY_{i}"), Span::call_site());
                        let expr = literal_rule(rule, n, l.lit.span());
                        // The key that names this notation's compiled calls.
                        consts.extend(quote! {
                            const #c: __spmd::EinsumRule<'static> = #expr;
                            static #k: __spmd::KeySite = __spmd::KeySite::new();
                        });
                    }
                    Form::Template(t) => {
                        let c = syn::Ident::new(&format!("__TEMPLATE_{i}"), Span::call_site());
                        let slot = syn::Ident::new(&format!("__BINDING_{i}"), Span::call_site());
                        let expr = template(t, &rule.never_sharded, l.lit.span());
                        consts.extend(quote! {
                            const #c: __spmd::Template<'static> = #expr;
                            __spmd::binding_slot!(#slot);
                        });
                    }
                }
            }
            if any_template {
                consts.extend(quote! {
                    const __RULE_BASE: __spmd::EinsumRule<'static> =
                        __spmd::EinsumRule::new(__NAME, __spmd::Plan::EMPTY).with_options(__OPTIONS);
                });
            }
            let notations = literals.iter().map(|l| l.lit.clone()).collect();
            let whens: Vec<Expr> = cases.iter().map(|(when, _)| when.clone()).collect();
            let case = {
                let arms = whens.iter().enumerate().map(|(k, when)| {
                    let k = k as u32 + 1;
                    quote!(if #when { #k } else)
                });
                quote!(#(#arms)* { 0u32 })
            };
            let reduce_fn = rule.reduce_fn.clone();
            let reduce_now = match &reduce_fn {
                Some(f) => quote!(__spmd::Option::Some(#f(self)?)),
                None => quote!(__spmd::Option::None),
            };
            let overrides = rule.reduce_axes.iter().map(|(c, r)| quote!((#c, #r)));
            let reduce_axes = quote!(&[#(#overrides),*]);
            let forms: Vec<(usize, Option<Vec<TokenStream>>)> = literals
                .iter()
                .enumerate()
                .map(|(i, l)| match &l.form {
                    Form::Notation(_) => (i, None),
                    Form::Template(t) => (i, Some(selections(t, l.lit.span()))),
                })
                .collect();
            let with: WithRule<'_> = if !any_template {
                let whens: Vec<TokenStream> = whens
                    .iter()
                    .enumerate()
                    .map(|(i, when)| {
                        let c = syn::Ident::new(&format!("__RULE_{}", i + 1), Span::call_site());
                        let k = syn::Ident::new(&format!("__KEY_{}", i + 1), Span::call_site());
                        quote!(if #when { (&#c, &#k) } else)
                    })
                    .collect();
                let select = quote!(#(#whens)* { (&__RULE_0, &__KEY_0) });
                let reduce = reduce_fn.map(|f| quote!(let rule = &rule.with_reduce(#f(self)?);));
                Box::new(move |call: TokenStream| {
                    quote! {{
                        let (rule, __key): (&__spmd::EinsumRule<'static>, &__spmd::KeySite) = #select;
                        let __key = __key.key();
                        #reduce
                        rule.#call
                    }}
                })
            } else {
                // Each literal is its own branch: a compiled rule, or a
                // template bound for this call.
                Box::new(move |call: TokenStream| {
                    let branch = |i: usize| match &forms[i].1 {
                        None => {
                            let c = syn::Ident::new(&format!("__RULE_{i}"), Span::call_site());
                            let k = syn::Ident::new(&format!("__KEY_{i}"), Span::call_site());
                            match &reduce_fn {
                                Some(f) => {
                                    quote!({ let __key = #k.key(); #c.with_reduce(#f(self)?).#call })
                                }
                                None => quote!({ let __key = #k.key(); #c.#call }),
                            }
                        }
                        Some(sels) => {
                            let c = syn::Ident::new(&format!("__TEMPLATE_{i}"), Span::call_site());
                            let slot =
                                syn::Ident::new(&format!("__BINDING_{i}"), Span::call_site());
                            quote! {{
                                let __selections = [#(#sels),*];
                                __spmd::bound_rule(&__RULE_BASE, #reduce_now, #reduce_axes, &#c, &#slot, &__selections, &call, |rule, __key| rule.#call)
                            }}
                        }
                    };
                    let mut chain = TokenStream::new();
                    for (k, when) in whens.iter().enumerate() {
                        let b = branch(k + 1);
                        chain.extend(quote!(if #when { #b } else));
                    }
                    let b0 = branch(0);
                    quote!({ #chain { #b0 } })
                })
            };
            (consts, notations, with, Some(case))
        }
        Source::Build { path, cache } => {
            let options = runtime_options(rule);
            let path = path.clone();
            let ident = &rule.item.ident;
            // With `cache`: one `NotationCache` per rule type and thread
            // (no lock on the hot path), behind one inherent method, so a
            // struct that cannot be a key gets one error, on `cache`.
            // A cached notation keeps its key, so its compiled calls are
            // kept too; one built per call names nothing.
            let keyed = cache.is_some();
            let (cache_items, einsum) = if let Some(span) = *cache {
                let lookup = quote_spanned!(span=> __spmd::cached_notation);
                (
                    quote! {
                        ::std::thread_local! {
                            static __SPMD_NOTATIONS: ::core::cell::RefCell<__spmd::NotationCache<#ident>> =
                                ::core::cell::RefCell::new(__spmd::NotationCache::new());
                        }
                        impl #ident {
                            fn __spmd_cached_notation(
                                &self,
                                call: &__spmd::Call<'_>,
                            ) -> __spmd::Result<__spmd::Rc<__spmd::Einsum>, __spmd::SpmdError> {
                                __SPMD_NOTATIONS.with(|cache| {
                                    #lookup(cache, self, call, || #path(self, call))
                                })
                            }
                        }
                    },
                    quote!(let einsum = self.__spmd_cached_notation(&call)?;),
                )
            } else {
                (
                    TokenStream::new(),
                    quote!(let einsum: __spmd::Einsum = #path(self, &call)?;),
                )
            };
            (
                cache_items,
                Vec::new(),
                Box::new(move |call: TokenStream| {
                    quote! {{
                        #einsum
                        __spmd::runtime_rule(&#options, &einsum, #keyed, |rule, __key| rule.#call)
                    }}
                }),
                None,
            )
        }
    };

    let validate = rule.validate.as_ref().map(|p| quote!(#p(self, &call)?;));
    let adjust = rule
        .adjust
        .as_ref()
        .map(|p| quote!(#p(self, &call, result)?;));
    let (attr_names, from_attrs) = from_attrs(rule);
    let grad_signature = grad_signature(rule);
    let options = rule_options(rule);
    let (input_names, output_names) = (&rule.input_names, &rule.output_names);
    let no_grad_mask = rule.no_grad;
    let (optional_in, optional_out) = (rule.optional_inputs, rule.optional_outputs);
    // What `spmd ops NAME` shows of each attribute the op reads.
    let read = || {
        rule.fields
            .iter()
            .filter(|f| !matches!(f.source, FieldSource::Skip))
    };
    // Read off the written type: no trait bound here, so a field whose type
    // is not an attribute gets one error, at the field.
    let attr_types: Vec<String> = read().map(|f| describe(&f.ty)).collect();
    let attr_defaults: Vec<TokenStream> = read()
        .map(|f| match (&f.source, &f.default_text) {
            (FieldSource::Required, _) => quote!(__spmd::Option::None),
            (_, Some(text)) => quote!(__spmd::Option::Some(#text)),
            // An `Option` attribute defaults to being absent.
            _ if is_option(&f.ty) => quote!(__spmd::Option::Some("none")),
            _ => quote!(__spmd::Option::Some("")),
        })
        .collect();

    let op_impl = quote! {
        #[automatically_derived]
        impl __spmd::Op for #ident {
            const NAME: &'static str = __NAME;
            const NOTATIONS: &'static [&'static str] = &[#(#notations),*];
            const ATTRS: &'static [&'static str] = &[#(#attr_names),*];
            const INPUTS: &'static [&'static str] = &[#(#input_names),*];
            const OUTPUTS: &'static [&'static str] = &[#(#output_names),*];
            const NO_GRAD: __spmd::TensorSet = __spmd::TensorSet::from_bits(#no_grad_mask);
            const OPTIONAL: __spmd::Absent = __spmd::Absent::new(#optional_in, #optional_out);
            const ATTR_TYPES: &'static [&'static str] = &[#(#attr_types),*];
            const ATTR_DEFAULTS: &'static [__spmd::Option<&'static str>] = &[#(#attr_defaults),*];
            const GRAD: __spmd::GradSignature<'static> = __GRAD_SIGNATURE;
            fn from_attrs(attrs: &__spmd::Attrs) -> __spmd::Result<Self, __spmd::SpmdError> {
                #from_attrs
            }
        }
    };
    // One entry point for every direction: the call says which, with its
    // absent tensors and output shapes; the answer goes into the caller's
    // result, which no layer moves. The untraced path runs the engine
    // with the static `NoTrace`, so tracing costs it nothing.
    let body = |trace: TokenStream| {
        let run = with_rule(quote!(run_keyed(__key, &call, #trace, result)));
        match &adjust {
            Some(adjust) => quote! {{
                #run?;
                #adjust
                __spmd::Ok(())
            }},
            None => run,
        }
    };
    let (untraced, traced) = (body(quote!(__trace)), body(quote!(__trace)));
    // A rule that reads the outputs' shapes cannot run forward without them.
    let needs_shapes = rule.needs_output_shapes.then(|| {
        quote! {
            if let __spmd::Call::Forward { output_shapes: [], .. } = call {
                return __spmd::Err(__spmd::SpmdError::OutputShapesNeeded { op: __NAME });
            }
        }
    });
    // Prepared forward calls (`SpmdRule::prepare`): the notation the call
    // chooses, compiled under its key. A prepared call runs the hooks and
    // chooses again as any call does; the engine answers by the
    // preparation only when the chosen notation's key is the one prepared.
    let prepare = match &case {
        Some(_) => {
            let compile = with_rule(quote!(compile_forward(&call, __key)));
            quote! {
                fn prepare(
                    &self,
                    call: &__spmd::Call<'_>,
                ) -> __spmd::Result<__spmd::Prepared, __spmd::SpmdError> {
                    if !call.is_forward() {
                        return __spmd::Ok(__spmd::Prepared::NONE);
                    }
                    let call: __spmd::Call<'_> = *call;
                    #compile
                }
            }
        }
        // A plan built at run time is not prepared.
        None => TokenStream::new(),
    };
    let rule_impl = quote! {
        #[automatically_derived]
        impl __spmd::SpmdRule for #ident {
            fn name(&self) -> &'static str {
                __NAME
            }
            #prepare
            #[inline]
            fn infer_into(
                &self,
                call: &__spmd::Call<'_>,
                trace: __spmd::Option<&mut dyn __spmd::Trace>,
                result: &mut __spmd::RuleResult,
            ) -> __spmd::Result<(), __spmd::SpmdError> {
                // A grad call's tensors are read in this rule's grad signature.
                // Borrowed unless it is a grad call: a call is a dozen
                // words, and every other direction reads it as given.
                let __grad_call: __spmd::Call<'_>;
                let call: &__spmd::Call<'_> = match call {
                    __spmd::Call::Grad { .. } => {
                        __grad_call = call.with_grad_signature(__GRAD_SIGNATURE);
                        &__grad_call
                    }
                    _ => call,
                };
                // Before a template binds: a placeholder's rank would
                // otherwise be blamed for a tensor that must be given.
                if let __spmd::Call::Forward { absent, .. } | __spmd::Call::Backward { absent, .. } = call {
                    absent.within(__NAME, <Self as __spmd::Op>::OPTIONAL)?;
                }
                #needs_shapes
                #validate
                match trace {
                    __spmd::Option::None => {
                        let __trace = &mut __spmd::NoTrace;
                        #untraced
                    }
                    __spmd::Option::Some(__trace) => #traced,
                }
            }
        }
    };
    quote! {
        #item
        #[allow(non_upper_case_globals, clippy::all, unused_mut, unused_variables)]
        const _: () = {
            use #krate::__private as __spmd;
            const __NAME: &'static str = #name;
            #grad_signature
            #options
            #consts
            #op_impl
            #rule_impl
            __spmd::submit_rule!(#ident);
        };
    }
}

/// The grad op's signature as a `const` (`GradSignature::DERIVED` unless
/// `grad_inputs(..)` or `grads_for(..)` is given).
fn grad_signature(rule: &Rule) -> TokenStream {
    let tensors = match &rule.grad_inputs {
        None => quote!(__spmd::Option::None),
        Some(list) => {
            let items = list.iter().map(|&(is_output, i)| {
                if is_output {
                    quote!(__spmd::GradTensor::Output(#i))
                } else {
                    quote!(__spmd::GradTensor::Input(#i))
                }
            });
            quote!(__spmd::Option::Some(&[#(#items),*]))
        }
    };
    let grads = match &rule.grads_for {
        None => quote!(__spmd::Option::None),
        Some(list) => quote!(__spmd::Option::Some(&[#(#list),*])),
    };
    quote! {
        const __GRAD_SIGNATURE: __spmd::GradSignature<'static> = __spmd::GradSignature {
            tensors: #tensors,
            grads: #grads,
        };
    }
}

/// What an attribute of this written type takes, for `spmd ops NAME`.
fn describe(ty: &syn::Type) -> String {
    let syn::Type::Path(p) = ty else {
        return "a value".into();
    };
    let Some(last) = p.path.segments.last() else {
        return "a value".into();
    };
    let inner = || match &last.arguments {
        syn::PathArguments::AngleBracketed(a) => a.args.iter().find_map(|g| match g {
            syn::GenericArgument::Type(t) => Some(t.clone()),
            _ => None,
        }),
        _ => None,
    };
    match last.ident.to_string().as_str() {
        "bool" => "a bool".into(),
        "i8" | "i16" | "i32" | "i64" | "isize" | "u8" | "u16" | "u32" | "u64" | "usize" => {
            "an integer".into()
        }
        "f32" | "f64" => "a number".into(),
        "String" => "a string".into(),
        "Option" => inner().map_or("a value".into(), |t| describe(&t)),
        "Vec" => match inner().map(|t| describe(&t)) {
            Some(d) if d == "a bool" => "a list of bools".into(),
            Some(d) if d == "an integer" => "a list of integers".into(),
            Some(d) if d == "a number" => "a list of numbers".into(),
            Some(d) if d == "a string" => "a list of strings".into(),
            _ => "a list".into(),
        },
        _ => "a value".into(),
    }
}

/// Whether a field's type is written `Option<..>`.
fn is_option(ty: &syn::Type) -> bool {
    matches!(ty, syn::Type::Path(p) if p.path.segments.last().is_some_and(|s| s.ident == "Option"))
}

/// The body of `Op::from_attrs` and the attribute names.
fn from_attrs(rule: &Rule) -> (Vec<String>, TokenStream) {
    let fields = &rule.fields;
    let mut names = Vec::new();
    let inits = fields.iter().map(|f| {
        let ident = &f.ident;
        let attr = &f.attr_name;
        let span = ident.span();
        // The function path and the call's parentheses carry the field's span,
        // so the whole call expression is the field's and "FromAttr is not
        // implemented" lands on the field (rustc points at the call, whose span
        // is the field's only if both ends are). The arguments keep their own
        // spans: `attrs` stays at call site (hygiene).
        let call = |f: TokenStream, args: TokenStream| quote_spanned!(span=> #f(#args));
        let value = match &f.source {
            FieldSource::Required => {
                let f = call(
                    quote_spanned!(span=> __spmd::Attrs::require),
                    quote!(attrs, __NAME, #attr),
                );
                quote!(#f?)
            }
            FieldSource::Default => {
                let f = call(
                    quote_spanned!(span=> __spmd::Attrs::get_or),
                    quote!(attrs, __NAME, #attr, __spmd::Default::default()),
                );
                quote!(#f?)
            }
            FieldSource::DefaultExpr(e) => {
                let f = call(
                    quote_spanned!(span=> __spmd::Attrs::get_or),
                    quote!(attrs, __NAME, #attr, #e),
                );
                quote!(#f?)
            }
            FieldSource::Skip => quote_spanned!(span=> __spmd::Default::default()),
        };
        if !matches!(f.source, FieldSource::Skip) {
            names.push(attr.clone());
        }
        quote!(#ident: #value)
    });
    let body = match &rule.item.fields {
        syn::Fields::Unit => quote!(__spmd::Ok(Self)),
        _ => quote!(__spmd::Ok(Self { #(#inits,)* })),
    };
    // Unknown attributes are errors (a typo must not mean the default).
    let body = quote! {
        __spmd::Attrs::check_known(attrs, __NAME, &[#(#names),*])?;
        #body
    };
    (names, body)
}

/// `EinsumRule::new(..)` with every option, over the literal's plan.
fn literal_rule(rule: &Rule, n: &Notation, span: Span) -> TokenStream {
    let plan_expr = plan(n, span);
    let plan = n.plan();
    // Labels were checked against every literal in `args`; a missing one here
    // cannot happen, and would only leave that label unconstrained.
    let never = rule
        .never_sharded
        .chars()
        .filter_map(|c| plan.axis(c))
        .fold(0u64, |m, a| m | 1 << a);
    let overrides = rule
        .reduce_axes
        .iter()
        .filter_map(|(c, r)| plan.axis(*c).map(|a| quote!((#a, #r))));
    quote! {
        __spmd::EinsumRule::new(__NAME, #plan_expr)
            .with_options(__OPTIONS)
            .with_reduce_overrides(&[#(#overrides),*])
            .with_never_sharded(__spmd::AxisSet(#never))
    }
}

/// The rule's `RuleOptions` as a `const`: every option that names no label,
/// the same whatever the rule's notation is (literal, a template bound per
/// call, or built at run time).
fn rule_options(rule: &Rule) -> TokenStream {
    let Policies {
        conflicts,
        divisibility,
        missing_axis,
        backward_partial,
        partial_inputs,
        unsharded_claims,
        compounds,
    } = &rule.policies;
    let set = |bits: u64| quote!(__spmd::TensorSet::from_bits(#bits));
    let (no_grad, grad_ignores) = (set(rule.no_grad), set(rule.grad_ignores));
    let (follows, follows_outputs) = (set(rule.follows), set(rule.follows_outputs));
    let (not_partial, merge_first) = (set(rule.not_partial), set(rule.merge_first));
    let (input_names, output_names) = (&rule.input_names, &rule.output_names);
    let (oi, oo) = (rule.optional_inputs, rule.optional_outputs);
    let reduce = &rule.reduce;
    quote! {
        const __OPTIONS: __spmd::RuleOptions<'static> = __spmd::RuleOptions {
            policy: __spmd::Policy::CLASSIC
                .with_conflicts(#conflicts)
                .with_divisibility(#divisibility)
                .with_missing_axis(#missing_axis)
                .with_backward_partial(#backward_partial)
                .with_partial_inputs(#partial_inputs)
                .with_unsharded_claims(#unsharded_claims)
                .with_compounds(#compounds),
            reduce: #reduce,
            no_grad: #no_grad,
            grad_ignores: #grad_ignores,
            follows: #follows,
            follows_outputs: #follows_outputs,
            optional: __spmd::Absent::new(#oi, #oo),
            not_partial: #not_partial,
            merge_first: #merge_first,
            grad_signature: __GRAD_SIGNATURE,
            input_names: &[#(#input_names),*],
            output_names: &[#(#output_names),*],
        };
    }
}

/// The options of a rule whose plan exists only at run time (built), with
/// labels resolved against each plan.
fn runtime_options(rule: &Rule) -> TokenStream {
    let never = &rule.never_sharded;
    let overrides = rule.reduce_axes.iter().map(|(c, r)| quote!((#c, #r)));
    let reduce = match &rule.reduce_fn {
        Some(f) => quote!(__spmd::Option::Some(#f(self)?)),
        None => quote!(__spmd::Option::None),
    };
    quote! {
        __spmd::RuntimeOptions {
            name: __NAME,
            options: &__OPTIONS,
            reduce: #reduce,
            never_sharded: #never,
            reduce_axes: &[#(#overrides),*],
        }
    }
}

/// A template as a `Template` literal: the compile-time parse, emitted as data.
fn template(t: &OwnedTemplate, never_sharded: &str, span: Span) -> TokenStream {
    let source = LitStr::new(t.source(), span);
    let terms = t.terms().iter().map(|&(s, l)| quote!((#s, #l)));
    let n_inputs = t.n_inputs() as u16;
    let select = |s: Select| match s {
        Select::At(k) => quote!(__spmd::Select::At(#k)),
        Select::From(k) => quote!(__spmd::Select::From(#k)),
        Select::Before(k) => quote!(__spmd::Select::Before(#k)),
        Select::Every => quote!(__spmd::Select::Every),
    };
    let fate = |f: Fate| match f {
        Fate::Label(c) => quote!(__spmd::Fate::Label(#c)),
        Fate::One => quote!(__spmd::Fate::One),
        Fate::Drop => quote!(__spmd::Fate::Drop),
        Fate::Insert => quote!(__spmd::Fate::Insert),
    };
    use spmd_notation::Item as T;
    let items = t.items().iter().map(|i| match *i {
        T::Label(c) => quote!(__spmd::Item::Label(#c)),
        T::One => quote!(__spmd::Item::One),
        T::Ones => quote!(__spmd::Item::Ones),
        T::Permuted(k) => quote!(__spmd::Item::Permuted(#k)),
        T::Positions(None) => quote!(__spmd::Item::Positions(__spmd::Option::None)),
        T::Positions(Some((s, f))) => {
            let (s, f) = (select(s), fate(f));
            quote!(__spmd::Item::Positions(__spmd::Option::Some((#s, #f))))
        }
        T::Compound { start, len } => quote!(__spmd::Item::Compound { start: #start, len: #len }),
        T::Or => quote!(__spmd::Item::Or),
        T::Also(s, f) => {
            let (s, f) = (select(s), fate(f));
            quote!(__spmd::Item::Also(#s, #f))
        }
    });
    let names = t.selectors().iter().map(|n| LitStr::new(n, span));
    let literals = t.literals().0;
    let positional = LitByteStr::new(t.positional(), span);
    let compounds = LitByteStr::new(t.compounds(), span);
    let repeat_terms = t.repeat_terms();
    let written = t.written();
    let never = never_sharded
        .bytes()
        .filter_map(spmd_notation::label_bit)
        .fold(0u64, |m, b| m | 1 << b);
    let picks = t.picks().iter().map(|&s| select(s));
    let (fixed, runs) = t.counts();
    let repeats = t.repeats().map(|r| match r {
        spmd_notation::Repeat::Once => quote!(__spmd::Repeat::Once),
        spmd_notation::Repeat::Given => quote!(__spmd::Repeat::Given),
        spmd_notation::Repeat::Count(k) => quote!(__spmd::Repeat::Count(#k)),
    });
    quote! {
        __spmd::Template {
            source: #source,
            terms: &[#(#terms),*],
            n_inputs: #n_inputs,
            items: &[#(#items),*],
            selectors: &[#(#names),*],
            literals: __spmd::AxisSet(#literals),
            positional: #positional,
            written: #written,
            never: __spmd::AxisSet(#never),
            picks: &[#(#picks),*],
            fixed: #fixed,
            runs: #runs,
            repeats: [#(#repeats),*],
            repeat_terms: [#(#repeat_terms),*],
            compounds: #compounds,
        }
    }
}

/// What each selector of a template reads from the op: a field by
/// reference, or a method's result.
fn selections(t: &OwnedTemplate, span: Span) -> Vec<TokenStream> {
    t.selectors()
        .iter()
        .map(|name| {
            if let Some(m) = name.strip_suffix("(call)") {
                let m = syn::Ident::new(m, span);
                quote_spanned!(span=> __spmd::IntoPos::into_pos(self.#m(&call)))
            } else if let Some(m) = name.strip_suffix("()") {
                let m = syn::Ident::new(m, span);
                quote_spanned!(span=> __spmd::IntoPos::into_pos(self.#m()))
            } else {
                let f = syn::Ident::new(name, span);
                quote_spanned!(span=> __spmd::Positions::positions(&self.#f))
            }
        })
        .collect()
}

/// A notation as a `Plan` literal: the compile-time parse, emitted as data.
fn plan(n: &Notation, span: Span) -> TokenStream {
    let p = n.plan();
    let source = LitStr::new(p.source, span);
    let labels = LitByteStr::new(p.labels, span);
    let terms = p.terms.iter().map(|t| {
        let (start, len) = (t.start, t.len);
        let ellipsis = match t.ellipsis {
            Some(e) => quote!(__spmd::Option::Some(#e)),
            None => quote!(__spmd::Option::None),
        };
        quote!(__spmd::Term { start: #start, len: #len, ellipsis: #ellipsis })
    });
    let dims = p.dims.iter().map(|d| match *d {
        Dim::Axis(a) => quote!(__spmd::Dim::Axis(#a)),
        Dim::One => quote!(__spmd::Dim::One),
        Dim::Compound { start, len } => quote!(__spmd::Dim::Compound { start: #start, len: #len }),
    });
    let compound = p.compound_axes;
    let n_inputs = p.n_inputs;
    let addends = p.addends;
    let set = |s: spmd_notation::AxisSet| {
        let bits = s.0;
        quote!(__spmd::AxisSet(#bits))
    };
    let (ia, oa, dg, mi, ma) = (
        set(p.input_axes),
        set(p.output_axes),
        set(p.diagonal),
        set(p.compound_minor),
        set(p.compound_major),
    );
    quote! {
        __spmd::Plan {
            source: #source,
            labels: #labels,
            terms: &[#(#terms),*],
            n_inputs: #n_inputs,
            dims: &[#(#dims),*],
            compound_axes: &[#(#compound),*],
            input_axes: #ia,
            output_axes: #oa,
            diagonal: #dg,
            compound_minor: #mi,
            compound_major: #ma,
            addends: #addends,
        }
    }
}

/// The struct, the errors, and stub impls (they return an error and are never
/// run: the crate does not compile) so uses of the type report nothing more.
fn fallback(
    args: &TokenStream,
    item: &ItemStruct,
    errors: TokenStream,
    form: Declared,
) -> TokenStream {
    let ident = &item.ident;
    let shown = (form == Declared::Attribute).then_some(item);
    if !item.generics.params.is_empty() {
        return quote!(#shown #errors);
    }
    let krate = crate_path(args).unwrap_or_else(|| syn::parse_quote!(::spmd_core));
    let name = args::snake_case(&ident.to_string());
    let stub = quote!(__spmd::Err(__spmd::SpmdError::Rejected {
        op: #name,
        message: ::std::string::String::new(),
    }));
    let mut out = shown.to_token_stream();
    out.extend(errors);
    out.extend(quote! {
        #[allow(unused_variables, clippy::all)]
        const _: () = {
            use #krate::__private as __spmd;
            impl __spmd::Op for #ident {
                const NAME: &'static str = #name;
                const NOTATIONS: &'static [&'static str] = &[];
                const ATTRS: &'static [&'static str] = &[];
                fn from_attrs(attrs: &__spmd::Attrs) -> __spmd::Result<Self, __spmd::SpmdError> { #stub }
            }
            impl __spmd::SpmdRule for #ident {
                fn name(&self) -> &'static str { #name }
                fn infer_into(&self, call: &__spmd::Call<'_>, trace: __spmd::Option<&mut dyn __spmd::Trace>, result: &mut __spmd::RuleResult)
                    -> __spmd::Result<(), __spmd::SpmdError> { #stub }
            }
        };
    });
    out
}

/// `crate = path` read straight from the arguments, so that even when the rest
/// is invalid the stub impls name the right crate.
fn crate_path(args: &TokenStream) -> Option<Path> {
    let metas = darling::ast::NestedMeta::parse_meta_list(args.clone()).ok()?;
    metas.iter().find_map(|m| match m {
        darling::ast::NestedMeta::Meta(syn::Meta::NameValue(nv)) if nv.path.is_ident("crate") => {
            match &nv.value {
                syn::Expr::Path(p) => Some(p.path.clone()),
                _ => None,
            }
        }
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pretty(tokens: TokenStream) -> String {
        match syn::parse2::<syn::File>(tokens.clone()) {
            Ok(file) => prettyplease::unparse(&file),
            Err(_) => tokens.to_string(),
        }
    }

    /// The derive form expands to the attribute form's code, without
    /// re-emitting the struct: one parser, one expansion.
    #[test]
    fn derive_and_attribute_expand_alike() {
        let cases = [
            (
                quote!(einsum = "...k,jk->...k", merge(conflicts = "strict")),
                quote!(
                    struct Embedding {
                        #[spmd(default = -1)]
                        padding_idx: i64,
                    }
                ),
            ),
            (
                quote!(
                    einsum = "@{axis:a}->@{axis:a}",
                    merge(never_sharded = "a"),
                    validate = Self::check
                ),
                quote!(
                    pub struct Softmax {
                        axis: i64,
                    }
                ),
            ),
            (
                quote!(build(Self::plan, cache), inputs(x), outputs(out)),
                quote!(
                    struct Reshape {
                        shape: Vec<i64>,
                    }
                ),
            ),
            // An invalid option: the same errors and stubs.
            (
                quote!(einsum = "mk,kn->mq"),
                quote!(
                    struct Matmul {}
                ),
            ),
        ];
        for (args, item) in cases {
            let attribute = syn::parse2::<syn::File>(expand(args.clone(), item.clone())).unwrap();
            let mut without_struct = attribute.clone();
            assert!(matches!(
                without_struct.items.remove(0),
                syn::Item::Struct(_)
            ));
            let mut annotated: ItemStruct = syn::parse2(item).unwrap();
            annotated.attrs.push(syn::parse_quote!(#[spmd(#args)]));
            let derived = derive(annotated.to_token_stream());
            let derived = match syn::parse2::<syn::File>(derived.clone()) {
                Ok(file) => prettyplease::unparse(&file),
                Err(_) => derived.to_string(),
            };
            assert_eq!(prettyplease::unparse(&without_struct), derived, "{args}");
        }
    }

    #[test]
    fn plain_einsum() {
        let out = expand(
            quote!(einsum = "...k,jk->...k"),
            quote!(
                struct Embedding {
                    padding_idx: i64,
                }
            ),
        );
        insta::assert_snapshot!(pretty(out));
    }

    #[test]
    fn options_and_hooks() {
        let out = expand(
            quote!(
                name = "reduce_max",
                einsum = "ij->i",
                partial(reduce = "max"),
                merge(
                    never_sharded = "",
                    conflicts = "strict",
                    divisibility = "drop_derived"
                ),
                validate = Self::check,
                crate = ::spmd
            ),
            quote!(
                pub struct ReduceMax {
                    #[spmd(default)]
                    keep_dim: bool,
                }
            ),
        );
        insta::assert_snapshot!(pretty(out));
    }

    #[test]
    fn attribute_dependent_notation() {
        let out = expand(
            quote!(
                name = "matmul",
                einsum = "mk,kn->mn",
                case(when = self.trans_x && !self.trans_y, einsum = "km,kn->mn"),
                case(when = !self.trans_x && self.trans_y, einsum = "mk,nk->mn"),
                case(when = self.trans_x && self.trans_y, einsum = "km,nk->mn")
            ),
            quote!(
                struct Matmul {
                    trans_x: bool,
                    trans_y: bool,
                }
            ),
        );
        insta::assert_snapshot!(pretty(out));
    }

    #[test]
    fn notation_built_at_run_time() {
        let out = expand(
            quote!(
                name = "sum",
                build = Self::notation,
                partial(axes(k = "max"))
            ),
            quote!(
                struct Sum {
                    axis: Vec<i64>,
                }
            ),
        );
        insta::assert_snapshot!(pretty(out));
    }

    #[test]
    fn optional_tensors() {
        let out = expand(
            quote!(
                einsum = "...,...->...",
                case(when = call.input_absent(1), einsum = "...1,...->...1"),
                inputs(x, y),
                outputs(out),
                optional(y)
            ),
            quote!(
                struct Swiglu {}
            ),
        );
        let text = pretty(out);
        // One entry point: the absent tensors arrive in the call, and the
        // `*_optional` methods are the trait's own.
        assert!(text.contains("fn infer"), "{text}");
        assert!(!text.contains("fn forward_optional"), "{text}");
        insta::assert_snapshot!(text);
    }

    #[test]
    fn forward_needs_output_shapes() {
        let out = expand(
            quote!(name = "replicated", build(Self::notation, output_shapes)),
            quote!(
                struct Replicated {}
            ),
        );
        let text = pretty(out);
        // A forward call without the outputs' shapes is refused.
        assert!(text.contains("output_shapes: []"), "{text}");
        assert!(text.contains("OutputShapesNeeded"), "{text}");
        insta::assert_snapshot!(text);
    }

    #[test]
    fn grad_signature() {
        let out = expand(
            quote!(
                name = "topk",
                einsum = "bac->b1c,b1c",
                inputs(x),
                outputs(out, indices),
                grad(inputs(x, indices), of(out))
            ),
            quote!(
                struct TopK {}
            ),
        );
        let text = pretty(out);
        assert!(text.contains("__spmd::GradTensor::Output(1u8)"), "{text}");
        insta::assert_snapshot!(text);
    }

    #[test]
    fn errors_keep_the_struct_and_add_stubs() {
        let out = expand(
            quote!(einsum = "mk,kn->mq"),
            quote!(
                struct Bad {
                    x: bool,
                }
            ),
        );
        let text = pretty(out);
        assert!(text.contains("struct Bad"), "{text}");
        assert!(text.contains("compile_error"), "{text}");
        assert!(
            text.contains("unknown output label `q` at column 9"),
            "{text}"
        );
        assert!(text.contains("impl __spmd::SpmdRule for Bad"), "{text}");
    }
}
