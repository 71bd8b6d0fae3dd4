//! `#[derive(Wire)]` for weft-proto's messages: each struct and enum is declared once and
//! its encoder and decoder are generated from the declaration, so the two cannot drift.
//! The generated code names `crate::codec` (and `crate::handshake::read_fixed`): the
//! derive is for weft-proto's own types only.
//!
//! # Layout
//!
//! - A struct is its fields in declaration order, each by its own `Wire` impl.
//! - An enum with `#[wire(tag_what = "...")]` is a `u8` tag, then the variant's fields.
//!   Each variant's tag is its `#[wire(tag = N)]`, or its discriminant (`Read = 0`). An
//!   unknown tag is `DecodeError::Invalid { what: <tag_what>, value }`. The derive also
//!   gives the enum `decode_tagged(tag, reader)`, for decoders that check a tag before
//!   they recurse.
//! - An enum with `#[wire(opcode = Opcode)]` (weft-proto's `Request`) writes no tag: the
//!   opcode travels in the frame header. Each variant `V` has the opcode `Opcode::V`. The
//!   derive gives `opcode()`, `encode_body_to(writer)` and
//!   `decode_body(opcode, reader)`; an unknown opcode is `DecodeError::UnknownOpcode`.
//!
//! # Field attributes (`#[wire(...)]`)
//!
//! - `max = EXPR, what = "..."`: a sequence of at most `EXPR` elements, else
//!   `DecodeError::TooLarge { what, .. }` (after the codec's own `SEQUENCE_LEN_MAX`).
//! - `bytes_max = EXPR`: a `Vec<u8>` as one length-prefixed byte string of at most `EXPR`
//!   bytes (not a sequence of `u8` values: same bytes, one copy).
//! - `fixed = "what"`: a `[u8; N]` as a byte string that must be exactly `N` long.
//! - `trailing`: may be absent at the end of the message (an older peer's shorter
//!   form): decoded as `Default::default()` when nothing is left.
//! - `encode = path`, `decode = path`, or `with = module` (both `module::encode` and
//!   `module::decode`): a hand-written encoding of this one field, with the signatures
//!   `fn(&T, &mut Writer)` and `fn(&mut Reader) -> Result<T, DecodeError>`.
//!
//! # Container and variant attributes
//!
//! - `check = path`: `fn(&Self) -> Result<(), DecodeError>` run on the decoded value
//!   (a struct's, or for a variant the whole enum's) before it is returned: limits and
//!   invariants that span fields.
//! - On a variant, `encode = path, decode = path`: the whole variant by hand
//!   (`fn(&Self, &mut Writer)`, `fn(&mut Reader) -> Result<Self, DecodeError>`), for the
//!   rare layout that checks fields before it reads the rest.

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as Tokens};
use quote::{format_ident, quote};
use syn::spanned::Spanned;
use syn::{parse_macro_input, Data, DeriveInput, Expr, Fields, Ident, LitStr, Path};

#[proc_macro_derive(Wire, attributes(wire))]
pub fn derive_wire(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    match expand(&input) {
        Ok(tokens) => tokens.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

/// What `#[wire(...)]` says of a field.
#[derive(Default)]
struct FieldAttrs {
    max: Option<Expr>,
    what: Option<LitStr>,
    bytes_max: Option<Expr>,
    fixed: Option<LitStr>,
    trailing: bool,
    encode: Option<Path>,
    decode: Option<Path>,
}

/// What `#[wire(...)]` says of a container or a variant.
#[derive(Default)]
struct ItemAttrs {
    tag: Option<Expr>,
    tag_what: Option<LitStr>,
    opcode: Option<Path>,
    check: Option<Path>,
    encode: Option<Path>,
    decode: Option<Path>,
}

fn field_attrs(attrs: &[syn::Attribute]) -> syn::Result<FieldAttrs> {
    let mut out = FieldAttrs::default();
    for attr in attrs.iter().filter(|a| a.path().is_ident("wire")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("max") {
                out.max = Some(meta.value()?.parse()?);
            } else if meta.path.is_ident("what") {
                out.what = Some(meta.value()?.parse()?);
            } else if meta.path.is_ident("bytes_max") {
                out.bytes_max = Some(meta.value()?.parse()?);
            } else if meta.path.is_ident("fixed") {
                out.fixed = Some(meta.value()?.parse()?);
            } else if meta.path.is_ident("trailing") {
                out.trailing = true;
            } else if meta.path.is_ident("encode") {
                out.encode = Some(meta.value()?.parse()?);
            } else if meta.path.is_ident("decode") {
                out.decode = Some(meta.value()?.parse()?);
            } else if meta.path.is_ident("with") {
                let module: Path = meta.value()?.parse()?;
                out.encode = Some(syn::parse_quote!(#module::encode));
                out.decode = Some(syn::parse_quote!(#module::decode));
            } else {
                return Err(meta.error("unknown field attribute of #[wire]"));
            }
            Ok(())
        })?;
    }
    if out.max.is_some() != out.what.is_some() {
        return Err(syn::Error::new(
            Span::call_site(),
            "#[wire(max = ..)] needs `what = \"..\"` to name the limit in its error",
        ));
    }
    Ok(out)
}

fn item_attrs(attrs: &[syn::Attribute]) -> syn::Result<ItemAttrs> {
    let mut out = ItemAttrs::default();
    for attr in attrs.iter().filter(|a| a.path().is_ident("wire")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("tag") {
                out.tag = Some(meta.value()?.parse()?);
            } else if meta.path.is_ident("tag_what") {
                out.tag_what = Some(meta.value()?.parse()?);
            } else if meta.path.is_ident("opcode") {
                out.opcode = Some(meta.value()?.parse()?);
            } else if meta.path.is_ident("check") {
                out.check = Some(meta.value()?.parse()?);
            } else if meta.path.is_ident("encode") {
                out.encode = Some(meta.value()?.parse()?);
            } else if meta.path.is_ident("decode") {
                out.decode = Some(meta.value()?.parse()?);
            } else {
                return Err(meta.error("unknown attribute of #[wire] on a type or variant"));
            }
            Ok(())
        })?;
    }
    Ok(out)
}

/// Encoding of one field reachable as `access` (an expression of type `&T`).
fn encode_field(attrs: &FieldAttrs, access: &Tokens) -> Tokens {
    if let Some(path) = &attrs.encode {
        quote! { #path(#access, w); }
    } else if attrs.bytes_max.is_some() || attrs.fixed.is_some() {
        quote! { w.bytes(&#access[..]); }
    } else {
        quote! { crate::codec::Wire::encode(#access, w); }
    }
}

/// An expression decoding one field from `r`.
fn decode_field(attrs: &FieldAttrs) -> Tokens {
    let plain = if let Some(path) = &attrs.decode {
        quote! { #path(r)? }
    } else if let Some(max) = &attrs.bytes_max {
        quote! { r.bytes_max(#max)?.to_vec() }
    } else if let Some(what) = &attrs.fixed {
        quote! { crate::handshake::read_fixed(r, #what)? }
    } else {
        quote! { crate::codec::Wire::decode(r)? }
    };
    let bounded = match (&attrs.max, &attrs.what) {
        (Some(max), Some(what)) => quote! { crate::codec::bounded(#plain, #max, #what)? },
        _ => plain,
    };
    if attrs.trailing {
        quote! { if r.remaining() == 0 { ::core::default::Default::default() } else { #bounded } }
    } else {
        bounded
    }
}

/// A pattern binding every field of `path` by name (`f0`, `f1` for tuple fields).
fn pattern(path: &Tokens, fields: &Fields) -> Tokens {
    let names = bindings(fields);
    match fields {
        Fields::Named(_) => quote! { #path { #(#names),* } },
        Fields::Unnamed(_) => quote! { #path ( #(#names),* ) },
        Fields::Unit => quote! { #path },
    }
}

/// The fields' names as bound in a pattern (`a`, `b`, or `f0`, `f1` for tuple fields).
fn bindings(fields: &Fields) -> Vec<Ident> {
    fields
        .iter()
        .enumerate()
        .map(|(i, f)| f.ident.clone().unwrap_or_else(|| format_ident!("f{}", i)))
        .collect()
}

/// A pattern or constructor of `path` with `values` for its fields.
fn construct(path: &Tokens, fields: &Fields, values: &[Tokens]) -> Tokens {
    match fields {
        Fields::Named(named) => {
            let names = named.named.iter().map(|f| f.ident.as_ref().unwrap());
            quote! { #path { #(#names: #values),* } }
        }
        Fields::Unnamed(_) => quote! { #path ( #(#values),* ) },
        Fields::Unit => quote! { #path },
    }
}

fn encode_fields(fields: &Fields, accesses: &[Tokens]) -> syn::Result<Tokens> {
    let mut out = Tokens::new();
    for (field, access) in fields.iter().zip(accesses) {
        out.extend(encode_field(&field_attrs(&field.attrs)?, access));
    }
    Ok(out)
}

fn decode_fields(fields: &Fields) -> syn::Result<Vec<Tokens>> {
    fields
        .iter()
        .map(|f| Ok(decode_field(&field_attrs(&f.attrs)?)))
        .collect()
}

fn expand(input: &DeriveInput) -> syn::Result<Tokens> {
    let name = &input.ident;
    let attrs = item_attrs(&input.attrs)?;
    match &input.data {
        Data::Struct(data) => {
            let accesses: Vec<Tokens> = data
                .fields
                .iter()
                .enumerate()
                .map(|(i, f)| match &f.ident {
                    Some(id) => quote! { &self.#id },
                    None => {
                        let index = syn::Index::from(i);
                        quote! { &self.#index }
                    }
                })
                .collect();
            let encode = encode_fields(&data.fields, &accesses)?;
            let value = construct(&quote! { #name }, &data.fields, &decode_fields(&data.fields)?);
            let check = attrs.check.as_ref().map(|c| quote! { #c(&value)?; });
            Ok(quote! {
                impl crate::codec::Wire for #name {
                    #[inline]
                    fn encode(&self, w: &mut crate::codec::Writer) {
                        #encode
                    }
                    #[inline]
                    fn decode(r: &mut crate::codec::Reader<'_>) -> ::core::result::Result<Self, crate::codec::DecodeError> {
                        let value = #value;
                        #check
                        Ok(value)
                    }
                }
            })
        }
        Data::Enum(data) => expand_enum(name, &attrs, data),
        Data::Union(_) => Err(syn::Error::new(
            input.span(),
            "#[derive(Wire)] does not do unions",
        )),
    }
}

/// One variant's encoding (a match arm's pattern and body, after any tag) and decoding.
struct VariantCode {
    pattern: Tokens,
    encode: Tokens,
    decode: Tokens,
}

fn variant_code(enum_name: &Ident, variant: &syn::Variant, attrs: &ItemAttrs) -> syn::Result<VariantCode> {
    let v = &variant.ident;
    let path = quote! { #enum_name::#v };
    if let (Some(encode), Some(decode)) = (&attrs.encode, &attrs.decode) {
        return Ok(VariantCode {
            pattern: quote! { #path { .. } },
            encode: quote! { #encode(self, w); },
            decode: quote! { #decode(r)? },
        });
    }
    if attrs.encode.is_some() || attrs.decode.is_some() {
        return Err(syn::Error::new(
            variant.span(),
            "a hand-written variant needs both encode and decode",
        ));
    }
    let bound: Vec<Tokens> = bindings(&variant.fields).iter().map(|n| quote! { #n }).collect();
    let value = construct(&path, &variant.fields, &decode_fields(&variant.fields)?);
    let decode = match &attrs.check {
        Some(check) => quote! {{
            let value = #value;
            #check(&value)?;
            value
        }},
        None => value,
    };
    Ok(VariantCode {
        pattern: pattern(&path, &variant.fields),
        encode: encode_fields(&variant.fields, &bound)?,
        decode,
    })
}

fn expand_enum(name: &Ident, attrs: &ItemAttrs, data: &syn::DataEnum) -> syn::Result<Tokens> {
    if let Some(opcode) = &attrs.opcode {
        return expand_opcode_enum(name, opcode, data);
    }
    let what = attrs.tag_what.as_ref().ok_or_else(|| {
        syn::Error::new(
            name.span(),
            "#[derive(Wire)] on an enum needs #[wire(tag_what = \"...\")] or #[wire(opcode = ...)]",
        )
    })?;
    let mut encode_arms = Tokens::new();
    let mut decode_arms = Tokens::new();
    for variant in &data.variants {
        let vattrs = item_attrs(&variant.attrs)?;
        let tag = match (&vattrs.tag, &variant.discriminant) {
            (Some(tag), _) => tag.clone(),
            (None, Some((_, discriminant))) => discriminant.clone(),
            (None, None) => {
                return Err(syn::Error::new(
                    variant.span(),
                    "variant without #[wire(tag = N)]",
                ))
            }
        };
        let VariantCode {
            pattern,
            encode,
            decode,
        } = variant_code(name, variant, &vattrs)?;
        encode_arms.extend(quote! { #pattern => { w.u8(#tag); #encode } });
        decode_arms.extend(quote! { #tag => #decode, });
    }
    Ok(quote! {
        impl crate::codec::Wire for #name {
            #[inline]
            fn encode(&self, w: &mut crate::codec::Writer) {
                match self {
                    #encode_arms
                }
            }
            #[inline]
            fn decode(r: &mut crate::codec::Reader<'_>) -> ::core::result::Result<Self, crate::codec::DecodeError> {
                let tag = r.u8()?;
                Self::decode_tagged(tag, r)
            }
        }
        impl #name {
            /// Decodes the variant of `tag` (read already) from `r`.
            #[allow(dead_code)]
            pub(crate) fn decode_tagged(tag: u8, r: &mut crate::codec::Reader<'_>) -> ::core::result::Result<Self, crate::codec::DecodeError> {
                Ok(match tag {
                    #decode_arms
                    other => return Err(crate::codec::DecodeError::Invalid { what: #what, value: other as u64 }),
                })
            }
        }
    })
}

/// `Request`: no tag in the body; variant `V`'s opcode is `Opcode::V`.
fn expand_opcode_enum(name: &Ident, opcode: &Path, data: &syn::DataEnum) -> syn::Result<Tokens> {
    let mut opcode_arms = Tokens::new();
    let mut encode_arms = Tokens::new();
    let mut consts = Tokens::new();
    let mut decode_arms = Tokens::new();
    for variant in &data.variants {
        let v = &variant.ident;
        let vattrs = item_attrs(&variant.attrs)?;
        if vattrs.tag.is_some() {
            return Err(syn::Error::new(
                variant.span(),
                "a request's opcode is `Opcode::<variant>`, not a tag",
            ));
        }
        let VariantCode {
            pattern,
            encode,
            decode,
        } = variant_code(name, variant, &vattrs)?;
        let constant = format_ident!("OPCODE_{}", v);
        opcode_arms.extend(quote! { #name::#v { .. } => #opcode::#v, });
        encode_arms.extend(quote! { #pattern => { #encode } });
        consts.extend(quote! { const #constant: u16 = #opcode::#v as u16; });
        decode_arms.extend(quote! { #constant => #decode, });
    }
    Ok(quote! {
        impl #name {
            /// The opcode the frame header carries for this request.
            pub fn opcode(&self) -> #opcode {
                match self {
                    #opcode_arms
                }
            }
            /// Appends the request's body (without its opcode) to `w`.
            pub fn encode_body_to(&self, w: &mut crate::codec::Writer) {
                match self {
                    #encode_arms
                }
            }
            /// Decodes the body of a request of `opcode` from `r` (what follows it is
            /// the caller's to check).
            #[allow(non_upper_case_globals)]
            pub fn decode_body(opcode: u16, r: &mut crate::codec::Reader<'_>) -> ::core::result::Result<Self, crate::codec::DecodeError> {
                #consts
                Ok(match opcode {
                    #decode_arms
                    other => return Err(crate::codec::DecodeError::UnknownOpcode(other)),
                })
            }
        }
    })
}
