//! The textual form of the IR (printer and parser).
//!
//! ```text
//! ; comment to end of line
//! module @qwen2 weights "qwen2.safetensors" {
//!   weight @embed_tokens : f32[1000, 128]
//!   weight @"layers.0/odd name" : f32[128]
//!
//!   graph @prefill(%ids: i64[1, seq]) -> (f32[1, seq, 128]) {
//!     %x0 = gather @embed_tokens, %ids {axis = 0} : f32[1, seq, 128]
//!     %s = shape %x0 : i64[3]
//!     return %x0
//!   }
//! }
//! ```
//!
//! - `module @name` with an optional `weights "file"` (the
//!   [`WeightStore::file`](crate::WeightStore)), then weight declarations and
//!   graphs in any order; a weight must be declared before the first node
//!   that uses it (the printer puts every declaration first).
//! - Names after `%` and `@` are plain when they are one or more of
//!   `[A-Za-z0-9_.$-]` (so `%0` and `%x.1` are plain), otherwise quoted with
//!   Rust string escapes (`%"a/b:0"`, `%""`).
//! - Types are `dtype[dims]`; each dim is an expression over integers and
//!   symbols with `+`, `-`, `*`, unary `-` and parentheses, or `?` (unknown).
//!   Dim symbols are words `[A-Za-z_][A-Za-z0-9_.]*` other than the reserved
//!   words: dtype names, `true`, `false`, `inf`, `nan`.
//! - A node is `%a, %b = mnemonic %x, @w {attr = value, ...} : T1, T2`: at
//!   least one result, zero or more operands, an optional attribute dict (in
//!   [`OpDef::attrs`](crate::OpDef::attrs) order when printed), and one type
//!   per result.
//! - Attribute values: integers, floats (always with `.` or an exponent, or
//!   `inf`, `-inf`, `nan`), `true`/`false`, strings, dtype names, symbolic dim
//!   expressions (an expression that folds to a constant is an integer), and
//!   lists `[...]` of any of these, possibly nested or empty.
//! - A graph is `graph @name(%in: T, ...) -> (T, ...) { nodes return %v, ... }`;
//!   `return` comes last and its values' types must equal the signature's.
//! - A bucket record ([`BucketInfo`](crate::BucketInfo)) is
//!   `bucket @g_64 = @g {seq = 64} : (T, ...) -> (T, ...)`: graph `@g_64` is
//!   `@g` with `seq` bound to 64; the types are `@g`'s symbolic signature.
//! - A memory plan ([`MemoryPlan`](crate::MemoryPlan)) is
//!   `plan @g {arena = N, weights = N, constants = N, kv_cache = N, scratch = N,
//!   lower_bound = N} { entries }`, one entry per line:
//!   `%v : arena {offset = N, size = N, live = [first, last]} [in_place %u]`,
//!   `%c : constants {offset = N, size = N}`, `@w : weights {offset = N, size = N}`.
//!   Plans and bucket records print after the graphs, in graph-name order.
//!
//! [`print_module`] output is canonical: parsing it and printing again gives
//! the same text.

mod lex;
mod parse;
mod print;

use crate::graph::Module;

/// Error parsing the textual IR, located by 1-based line and column.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{line}:{col}: {message}")]
pub struct ParseError {
    pub line: usize,
    pub col: usize,
    pub message: String,
}

/// Prints a module in the textual form.
pub fn print_module(m: &Module) -> String {
    print::module(m)
}

/// Parses a module from the textual form.
pub fn parse_module(src: &str) -> Result<Module, ParseError> {
    parse::module(src)
}
