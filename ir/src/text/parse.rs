//! The parser: text to [`Module`], by recursive descent over [`lex`] tokens.
//!
//! Names are resolved while parsing, so the text must be in definition order:
//! a `%value` must be defined (graph input or earlier node result) before it is
//! used, and a `@weight` must be declared before the first node that uses it.
//! Ops are built with [`Op::build`] from their mnemonic, attributes and
//! declared result types; no inference runs here (that is the verifier's
//! job), so text with unknown (`?`) dims parses. The only semantic checks are
//! the ones the text itself needs: unique names, known ops, and a `return`
//! whose types match the graph signature. Every error carries the line and
//! column of the token at fault; no input makes the parser panic.

use super::lex::{lex, Tok, Token};
use super::print::name;
use super::ParseError;
use crate::attr::{Attr, Attrs};
use crate::bucket::BucketInfo;
use crate::dim::Dim;
use crate::dtype::DType;
use crate::graph::{Graph, Module, ValueId};
use crate::ops::Op;
use crate::plan::{MemoryPlan, Region, TensorPlan};
use crate::shape::{Shape, TensorType};

type PResult<T> = Result<T, ParseError>;

/// Deepest nesting of lists, parentheses and unary minus.
const MAX_DEPTH: usize = 64;

/// Largest element count of a `constant` result type (a constant's value is
/// materialised while it is built; bulk data belongs in the weight store).
const MAX_CONSTANT_ELEMENTS: usize = 1 << 20;

/// Largest absolute coefficient any dim expression may reach.
const MAX_COEF: u128 = i64::MAX as u128;

/// Words that are never dim symbols.
const RESERVED: [&str; 4] = ["true", "false", "inf", "nan"];

/// Parses a whole module.
pub(super) fn module(src: &str) -> PResult<Module> {
    let toks = lex(src)?;
    Parser {
        toks,
        pos: 0,
        depth: 0,
    }
    .module()
}

struct Parser {
    toks: Vec<Token>,
    pos: usize,
    depth: usize,
}

/// A dim with a bound on the sum of its coefficients' magnitudes, so that
/// arithmetic that could overflow is refused before it is done.
struct Bounded {
    dim: Dim,
    l1: u128,
}

fn err_at(at: &Token, message: String) -> ParseError {
    ParseError {
        line: at.line,
        col: at.col,
        message,
    }
}

fn dtype_name(w: &str) -> Option<DType> {
    w.parse().ok()
}

/// The attribute a bare word stands for, when it is not a dim symbol.
fn word_attr(w: &str) -> Option<Attr> {
    match w {
        "true" => Some(Attr::Bool(true)),
        "false" => Some(Attr::Bool(false)),
        "inf" => Some(Attr::Float(f64::INFINITY)),
        "nan" => Some(Attr::Float(f64::NAN)),
        _ => dtype_name(w).map(Attr::DType),
    }
}

// Token-level helpers.
impl Parser {
    fn here(&self) -> &Token {
        let last = self.toks.len().saturating_sub(1);
        &self.toks[self.pos.min(last)]
    }

    fn peek(&self) -> &Tok {
        &self.here().tok
    }

    fn peek_at(&self, ahead: usize) -> &Tok {
        self.toks
            .get(self.pos + ahead)
            .map_or(&Tok::Eof, |t| &t.tok)
    }

    fn advance(&mut self) -> Token {
        let t = self.here().clone();
        if self.pos + 1 < self.toks.len() {
            self.pos += 1;
        }
        t
    }

    fn expected(&self, what: &str) -> ParseError {
        let found = self.peek().describe();
        err_at(self.here(), format!("expected {what}, found {found}"))
    }

    fn eat_punct(&mut self, c: char) -> bool {
        let hit = *self.peek() == Tok::Punct(c);
        if hit {
            self.advance();
        }
        hit
    }

    fn expect_punct(&mut self, c: char) -> PResult<Token> {
        if *self.peek() == Tok::Punct(c) {
            Ok(self.advance())
        } else {
            Err(self.expected(&format!("`{c}`")))
        }
    }

    fn is_word(&self, w: &str) -> bool {
        matches!(self.peek(), Tok::Word(x) if x == w)
    }

    fn expect_keyword(&mut self, w: &str) -> PResult<Token> {
        if self.is_word(w) {
            Ok(self.advance())
        } else {
            Err(self.expected(&format!("`{w}`")))
        }
    }

    fn word(&mut self, what: &str) -> PResult<(String, Token)> {
        match self.peek().clone() {
            Tok::Word(w) => Ok((w, self.advance())),
            _ => Err(self.expected(what)),
        }
    }

    fn global(&mut self, what: &str) -> PResult<(String, Token)> {
        match self.peek().clone() {
            Tok::Global(n) => Ok((n, self.advance())),
            _ => Err(self.expected(what)),
        }
    }

    fn value_name(&mut self, what: &str) -> PResult<(String, Token)> {
        match self.peek().clone() {
            Tok::Value(n) => Ok((n, self.advance())),
            _ => Err(self.expected(what)),
        }
    }

    /// Runs `f` one nesting level deeper, refusing absurd nesting.
    fn nested<T>(&mut self, f: impl FnOnce(&mut Self) -> PResult<T>) -> PResult<T> {
        if self.depth >= MAX_DEPTH {
            return Err(err_at(self.here(), "nesting is too deep".to_string()));
        }
        self.depth += 1;
        let r = f(self);
        self.depth -= 1;
        r
    }
}

// Module structure.
impl Parser {
    fn module(&mut self) -> PResult<Module> {
        self.expect_keyword("module")?;
        let (name, _) = self.global("a module name `@name`")?;
        let mut m = Module::new(name);
        if self.is_word("weights") {
            self.advance();
            match self.peek().clone() {
                Tok::Str(file) => {
                    self.advance();
                    m.weights.file = Some(file);
                }
                _ => return Err(self.expected("a weights file name string")),
            }
        }
        self.expect_punct('{')?;
        while !self.eat_punct('}') {
            self.item(&mut m)?;
        }
        if *self.peek() != Tok::Eof {
            return Err(self.expected("end of input after the module"));
        }
        Ok(m)
    }

    fn item(&mut self, m: &mut Module) -> PResult<()> {
        if self.is_word("weight") {
            self.advance();
            self.weight_decl(m)
        } else if self.is_word("graph") {
            self.advance();
            let g = self.graph(m)?;
            m.graphs.push(g);
            Ok(())
        } else if self.is_word("bucket") {
            self.advance();
            self.bucket(m)
        } else if self.is_word("plan") {
            self.advance();
            self.plan(m)
        } else {
            Err(self.expected("`weight`, `graph`, `bucket`, `plan` or `}`"))
        }
    }

    /// `@g = @base {seq = 64} : (T, ...) -> (T, ...)` after `bucket`.
    fn bucket(&mut self, m: &mut Module) -> PResult<()> {
        let (g, at) = self.global("a graph name `@name`")?;
        if m.buckets.contains_key(&g) {
            let msg = format!("bucket record of {} is given twice", name('@', &g));
            return Err(err_at(&at, msg));
        }
        self.expect_punct('=')?;
        let (base, _) = self.global("the base graph `@name`")?;
        let brace = self.here().clone();
        let attrs = self.attr_dict()?;
        let mut entries = attrs.into_pairs();
        let (symbol, size) = match (entries.next(), entries.next()) {
            (Some((s, Attr::Int(v))), None) if v > 0 => (s, v),
            _ => {
                let msg = "expected `{symbol = size}` with one positive integer size".to_string();
                return Err(err_at(&brace, msg));
            }
        };
        self.expect_punct(':')?;
        self.expect_punct('(')?;
        let inputs = self.types_until(')')?;
        if *self.peek() != Tok::Arrow {
            return Err(self.expected("`->`"));
        }
        self.advance();
        self.expect_punct('(')?;
        let outputs = self.types_until(')')?;
        let info = BucketInfo {
            base,
            symbol,
            size,
            inputs,
            outputs,
        };
        m.buckets.insert(g, info);
        Ok(())
    }

    /// `@g {arena = N, ..., lower_bound = N} { entries }` after `plan`.
    fn plan(&mut self, m: &mut Module) -> PResult<()> {
        let (g, at) = self.global("a graph name `@name`")?;
        if m.plans.contains_key(&g) {
            let msg = format!("memory plan of {} is given twice", name('@', &g));
            return Err(err_at(&at, msg));
        }
        let brace = self.here().clone();
        let mut attrs = self.attr_dict()?;
        let mut plan = MemoryPlan::default();
        let located = |e: crate::attr::AttrError| err_at(&brace, e.to_string());
        for r in Region::ALL {
            plan.regions.set(
                r,
                non_negative(&brace, attrs.int(r.name()).map_err(located)?)?,
            );
        }
        plan.lower_bound = non_negative(&brace, attrs.int("lower_bound").map_err(located)?)?;
        attrs.finish().map_err(located)?;
        self.expect_punct('{')?;
        while !self.eat_punct('}') {
            plan.tensors.push(self.plan_entry()?);
        }
        m.plans.insert(g, plan);
        Ok(())
    }

    /// `%v : region {offset = N, size = N[, live = [a, b]]} [in_place %w]`
    /// (`@w` for the weights region).
    fn plan_entry(&mut self) -> PResult<TensorPlan> {
        let at = self.here().clone();
        let (vname, weight) = match &at.tok {
            Tok::Value(n) => (n.clone(), false),
            Tok::Global(n) => (n.clone(), true),
            _ => return Err(self.expected("a planned `%value`, `@weight` or `}`")),
        };
        self.advance();
        self.expect_punct(':')?;
        let (rname, rat) = self.word("a region name")?;
        let region = Region::from_name(&rname).ok_or_else(|| {
            let valid: Vec<&str> = Region::ALL.iter().map(|r| r.name()).collect();
            err_at(
                &rat,
                format!("unknown region `{rname}` (valid: {})", valid.join(", ")),
            )
        })?;
        if weight != (region == Region::Weights) {
            let msg = "weights (`@name`) and only weights are planned in the weights region";
            return Err(err_at(&at, msg.to_string()));
        }
        let brace = self.here().clone();
        let mut attrs = self.attr_dict()?;
        let located = |e: crate::attr::AttrError| err_at(&brace, e.to_string());
        let offset = non_negative(&brace, attrs.int("offset").map_err(located)?)?;
        let size = non_negative(&brace, attrs.int("size").map_err(located)?)?;
        let live = match attrs.opt_ints("live").map_err(located)? {
            None => None,
            Some(l) => match l[..] {
                [a, b] if 0 <= a && a <= b => Some((a as usize, b as usize)),
                _ => {
                    let msg = "`live` must be `[first, last]` with 0 <= first <= last";
                    return Err(err_at(&brace, msg.to_string()));
                }
            },
        };
        attrs.finish().map_err(located)?;
        let in_place = if self.is_word("in_place") {
            self.advance();
            Some(self.value_name("the operand `%name` reused in place")?.0)
        } else {
            None
        };
        Ok(TensorPlan {
            name: vname,
            region,
            offset,
            size,
            live,
            in_place,
        })
    }

    /// `@name : type` after `weight`.
    fn weight_decl(&mut self, m: &mut Module) -> PResult<()> {
        let (w, at) = self.global("a weight name `@name`")?;
        if m.weights.get(&w).is_some() {
            return Err(err_at(
                &at,
                format!("weight {} is declared twice", name('@', &w)),
            ));
        }
        self.expect_punct(':')?;
        let ty = self.ty()?;
        m.weights.declare(w, ty);
        Ok(())
    }

    /// `@name(params) -> (types) { nodes return }` after `graph`.
    fn graph(&mut self, m: &Module) -> PResult<Graph> {
        let (gname, at) = self.global("a graph name `@name`")?;
        if m.graph(&gname).is_some() {
            return Err(err_at(
                &at,
                format!("graph {} is defined twice", name('@', &gname)),
            ));
        }
        let mut g = Graph::new(gname);
        self.params(&mut g)?;
        if *self.peek() != Tok::Arrow {
            return Err(self.expected("`->`"));
        }
        self.advance();
        self.expect_punct('(')?;
        let sig = self.types_until(')')?;
        self.expect_punct('{')?;
        self.body(&mut g, m, &sig)?;
        Ok(g)
    }

    /// `(%a: T, ...)`, possibly empty.
    fn params(&mut self, g: &mut Graph) -> PResult<()> {
        self.expect_punct('(')?;
        if self.eat_punct(')') {
            return Ok(());
        }
        loop {
            let (v, at) = self.value_name("a graph input `%name`")?;
            self.expect_punct(':')?;
            let ty = self.ty()?;
            g.add_input(v.clone(), ty)
                .map_err(|_| err_at(&at, format!("value {} is defined twice", name('%', &v))))?;
            if !self.eat_punct(',') {
                self.expect_punct(')')?;
                return Ok(());
            }
        }
    }

    /// Nodes up to and including `return ... }`.
    fn body(&mut self, g: &mut Graph, m: &Module, sig: &[TensorType]) -> PResult<()> {
        loop {
            match self.peek() {
                Tok::Value(_) => self.node(g, m)?,
                Tok::Word(w) if w == "return" => {
                    self.ret(g, m, sig)?;
                    self.expect_punct('}')?;
                    return Ok(());
                }
                Tok::Punct('}') => {
                    let msg = format!("graph {} has no `return`", name('@', &g.name));
                    return Err(err_at(self.here(), msg));
                }
                _ => return Err(self.expected("a node `%x = ...` or `return`")),
            }
        }
    }

    /// `return %a, ...`: sets the graph outputs, checked against `sig`.
    fn ret(&mut self, g: &mut Graph, m: &Module, sig: &[TensorType]) -> PResult<()> {
        let at = self.advance();
        let outputs = self.operands(g, m)?;
        if outputs.len() != sig.len() {
            let msg = format!(
                "`return` gives {} value(s) but the signature of {} declares {}",
                outputs.len(),
                name('@', &g.name),
                sig.len()
            );
            return Err(err_at(&at, msg));
        }
        for ((v, at), want) in outputs.iter().zip(sig) {
            if g.ty(*v) != want {
                let msg = format!(
                    "returned value {} has type {} but the signature declares {want}",
                    at.tok.describe(),
                    g.ty(*v)
                );
                return Err(err_at(at, msg));
            }
        }
        g.outputs = outputs.into_iter().map(|(v, _)| v).collect();
        Ok(())
    }
}

// Nodes and operands.
impl Parser {
    /// `%a, %b = mnemonic operands {attrs} : T1, T2`.
    fn node(&mut self, g: &mut Graph, m: &Module) -> PResult<()> {
        let results = self.results(g)?;
        self.expect_punct('=')?;
        let (mnemonic, at) = self.word("an op mnemonic")?;
        let operands = self.operands(g, m)?;
        let attrs = if *self.peek() == Tok::Punct('{') {
            self.attr_dict()?
        } else {
            Attrs::new()
        };
        let colon = self.expect_punct(':')?;
        let types = self.types()?;
        if types.len() != results.len() {
            let msg = format!(
                "node has {} result(s) but {} type(s)",
                results.len(),
                types.len()
            );
            return Err(err_at(&colon, msg));
        }
        let op = build_op(&mnemonic, &at, attrs, &types)?;
        let inputs = operands.into_iter().map(|(v, _)| v).collect();
        let named = results.into_iter().map(|(n, _)| n).zip(types).collect();
        g.add_node(op, inputs, named)
            .map_err(|e| err_at(&at, e.to_string()))?;
        Ok(())
    }

    /// The result names of a node, checked to be new.
    fn results(&mut self, g: &Graph) -> PResult<Vec<(String, Token)>> {
        let mut out: Vec<(String, Token)> = Vec::new();
        loop {
            let (v, at) = self.value_name("a result name `%name`")?;
            if g.find(&v).is_some() || out.iter().any(|(o, _)| *o == v) {
                return Err(err_at(
                    &at,
                    format!("value {} is defined twice", name('%', &v)),
                ));
            }
            out.push((v, at));
            if !self.eat_punct(',') {
                return Ok(out);
            }
        }
    }

    /// Comma-separated `%value`/`@weight` references, possibly none.
    fn operands(&mut self, g: &mut Graph, m: &Module) -> PResult<Vec<(ValueId, Token)>> {
        let mut out = Vec::new();
        if !matches!(self.peek(), Tok::Value(_) | Tok::Global(_)) {
            return Ok(out);
        }
        loop {
            out.push(self.operand(g, m)?);
            if !self.eat_punct(',') {
                return Ok(out);
            }
        }
    }

    fn operand(&mut self, g: &mut Graph, m: &Module) -> PResult<(ValueId, Token)> {
        let at = self.here().clone();
        match &at.tok {
            Tok::Value(v) => match g.find(v) {
                Some(id) => Ok((id, self.advance())),
                None => Err(err_at(
                    &at,
                    format!("use of undefined value {}", name('%', v)),
                )),
            },
            Tok::Global(w) => match m.weights.get(w) {
                Some(decl) => {
                    let id = g.weight(w, decl.ty.clone());
                    Ok((id, self.advance()))
                }
                None => Err(err_at(
                    &at,
                    format!("use of undeclared weight {}", name('@', w)),
                )),
            },
            _ => Err(self.expected("an operand `%value` or `@weight`")),
        }
    }
}

/// Builds the op, turning construction errors into located parse errors.
fn build_op(mnemonic: &str, at: &Token, attrs: Attrs, types: &[TensorType]) -> PResult<Op> {
    if Op::mnemonics().binary_search(&mnemonic).is_err() {
        return Err(err_at(at, format!("unknown op `{mnemonic}`")));
    }
    if mnemonic == "constant" {
        check_constant_size(at, types)?;
    }
    Op::build(mnemonic, attrs, types).map_err(|e| err_at(at, format!("op `{mnemonic}`: {e}")))
}

/// Refuses constants whose value would be unreasonably large to build.
fn check_constant_size(at: &Token, types: &[TensorType]) -> PResult<()> {
    for ty in types {
        let Some(dims) = ty.shape.as_fixed() else {
            continue;
        };
        let n = dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
        if n.is_none_or(|n| n > MAX_CONSTANT_ELEMENTS) {
            let msg = format!(
                "op `constant`: {ty} has too many elements for a constant \
                 (at most {MAX_CONSTANT_ELEMENTS})"
            );
            return Err(err_at(at, msg));
        }
    }
    Ok(())
}

fn word_attr_of(tok: &Tok) -> Option<Attr> {
    match tok {
        Tok::Word(w) => word_attr(w),
        _ => None,
    }
}

// Types and dims.
impl Parser {
    /// `dtype[dim, ...]`.
    fn ty(&mut self) -> PResult<TensorType> {
        let (w, at) = self.word("a type `dtype[dims]`")?;
        let dtype = dtype_name(&w).ok_or_else(|| err_at(&at, format!("unknown dtype `{w}`")))?;
        self.expect_punct('[')?;
        let mut dims = Vec::new();
        if !self.eat_punct(']') {
            loop {
                dims.push(self.dim_expr()?.dim);
                if !self.eat_punct(',') {
                    self.expect_punct(']')?;
                    break;
                }
            }
        }
        Ok(TensorType::new(dtype, Shape(dims)))
    }

    /// One or more comma-separated types.
    fn types(&mut self) -> PResult<Vec<TensorType>> {
        let mut out = vec![self.ty()?];
        while self.eat_punct(',') {
            out.push(self.ty()?);
        }
        Ok(out)
    }

    /// Comma-separated types up to the closing `close`, possibly none.
    fn types_until(&mut self, close: char) -> PResult<Vec<TensorType>> {
        if self.eat_punct(close) {
            return Ok(Vec::new());
        }
        let out = self.types()?;
        self.expect_punct(close)?;
        Ok(out)
    }

    /// expr := term (('+' | '-') term)*
    fn dim_expr(&mut self) -> PResult<Bounded> {
        let mut acc = self.dim_term()?;
        loop {
            let at = self.here().clone();
            let minus = match at.tok {
                Tok::Punct('+') => false,
                Tok::Punct('-') => true,
                _ => return Ok(acc),
            };
            self.advance();
            let rhs = self.dim_term()?;
            let l1 = acc.l1 + rhs.l1;
            acc = bounded(&at, l1, || {
                if minus {
                    &acc.dim - &rhs.dim
                } else {
                    &acc.dim + &rhs.dim
                }
            })?;
        }
    }

    /// term := factor ('*' factor)*
    fn dim_term(&mut self) -> PResult<Bounded> {
        let mut acc = self.dim_factor()?;
        while *self.peek() == Tok::Punct('*') {
            let at = self.advance();
            let rhs = self.dim_factor()?;
            let l1 = acc.l1 * rhs.l1;
            acc = bounded(&at, l1, || &acc.dim * &rhs.dim)?;
        }
        Ok(acc)
    }

    /// factor := integer | symbol | '?' | '(' expr ')' | '-' factor
    fn dim_factor(&mut self) -> PResult<Bounded> {
        let at = self.here().clone();
        match &at.tok {
            Tok::Int(text) => {
                self.advance();
                int_literal(&at, text, false)
            }
            Tok::Word(w) => {
                self.advance();
                symbol(&at, w)
            }
            Tok::Punct('?') => {
                self.advance();
                Ok(Bounded {
                    dim: Dim::unknown(),
                    l1: 1,
                })
            }
            Tok::Punct('(') => self.nested(|p| {
                p.advance();
                let d = p.dim_expr()?;
                p.expect_punct(')')?;
                Ok(d)
            }),
            Tok::Punct('-') => self.nested(|p| p.negated(&at)),
            _ => Err(self.expected("a dim (integer, symbol, `?` or `(`)")),
        }
    }

    /// `-` factor; a negative literal is read whole so that `i64::MIN` fits.
    fn negated(&mut self, at: &Token) -> PResult<Bounded> {
        self.advance();
        if let Tok::Int(text) = self.peek().clone() {
            let lit = self.advance();
            return int_literal(&lit, &text, true);
        }
        let inner = self.dim_factor()?;
        bounded(at, inner.l1, || -&inner.dim)
    }
}

/// Wraps the result of `op` after checking the coefficient bound `l1`.
fn bounded(at: &Token, l1: u128, op: impl FnOnce() -> Dim) -> PResult<Bounded> {
    if l1 > MAX_COEF {
        return Err(err_at(at, "dim expression overflows i64".to_string()));
    }
    Ok(Bounded { dim: op(), l1 })
}

fn int_literal(at: &Token, digits: &str, negative: bool) -> PResult<Bounded> {
    let text = if negative {
        format!("-{digits}")
    } else {
        digits.to_string()
    };
    let v: i64 = text
        .parse()
        .map_err(|_| err_at(at, format!("integer `{text}` is out of range")))?;
    Ok(Bounded {
        dim: Dim::fixed(v),
        l1: u128::from(v.unsigned_abs()),
    })
}

fn symbol(at: &Token, w: &str) -> PResult<Bounded> {
    if RESERVED.contains(&w) || dtype_name(w).is_some() {
        return Err(err_at(
            at,
            format!("`{w}` is a reserved word and cannot be a dim symbol"),
        ));
    }
    Ok(Bounded {
        dim: Dim::sym(w),
        l1: 1,
    })
}

// Attributes.
impl Parser {
    /// `{name = value, ...}`, possibly empty.
    fn attr_dict(&mut self) -> PResult<Attrs> {
        self.expect_punct('{')?;
        let mut attrs = Attrs::new();
        if self.eat_punct('}') {
            return Ok(attrs);
        }
        loop {
            let (key, at) = self.word("an attribute name")?;
            self.expect_punct('=')?;
            let value = self.attr_value()?;
            if attrs.insert(key.clone(), value).is_some() {
                return Err(err_at(&at, format!("attribute `{key}` is given twice")));
            }
            if !self.eat_punct(',') {
                self.expect_punct('}')?;
                return Ok(attrs);
            }
        }
    }

    fn attr_value(&mut self) -> PResult<Attr> {
        let at = self.here().clone();
        if let Some(a) = word_attr_of(&at.tok) {
            self.advance();
            return Ok(a);
        }
        match (&at.tok, self.peek_at(1)) {
            (Tok::Punct('['), _) => self.nested(|p| p.attr_list()),
            (Tok::Str(s), _) => {
                self.advance();
                Ok(Attr::Str(s.clone()))
            }
            (Tok::Float(text), _) => {
                self.advance();
                float(&at, text)
            }
            (Tok::Punct('-'), Tok::Float(text)) => {
                let text = format!("-{text}");
                self.advance();
                self.advance();
                float(&at, &text)
            }
            (Tok::Punct('-'), Tok::Word(w)) if w == "inf" => {
                self.advance();
                self.advance();
                Ok(Attr::Float(f64::NEG_INFINITY))
            }
            _ => Ok(Attr::dim(&self.dim_expr()?.dim)),
        }
    }

    /// `[value, ...]`, possibly empty.
    fn attr_list(&mut self) -> PResult<Attr> {
        self.expect_punct('[')?;
        let mut items = Vec::new();
        if self.eat_punct(']') {
            return Ok(Attr::List(items));
        }
        loop {
            items.push(self.attr_value()?);
            if !self.eat_punct(',') {
                self.expect_punct(']')?;
                return Ok(Attr::List(items));
            }
        }
    }
}

fn non_negative(at: &Token, v: i64) -> PResult<u64> {
    u64::try_from(v).map_err(|_| err_at(at, format!("expected a byte count, found {v}")))
}

fn float(at: &Token, text: &str) -> PResult<Attr> {
    text.parse()
        .map(Attr::Float)
        .map_err(|_| err_at(at, format!("invalid float `{text}`")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parses one attribute value.
    fn attr(src: &str) -> PResult<Attr> {
        let mut p = Parser {
            toks: lex(src)?,
            pos: 0,
            depth: 0,
        };
        let a = p.attr_value()?;
        match p.peek() {
            Tok::Eof => Ok(a),
            _ => Err(p.expected("end of input")),
        }
    }

    #[test]
    fn attribute_values_of_every_kind() {
        assert_eq!(attr("-3").unwrap(), Attr::Int(-3));
        assert_eq!(attr("2*3-1").unwrap(), Attr::Int(5));
        assert_eq!(attr("1e-6").unwrap(), Attr::Float(1e-6));
        assert_eq!(attr("-0.5").unwrap(), Attr::Float(-0.5));
        assert_eq!(attr("-inf").unwrap(), Attr::Float(f64::NEG_INFINITY));
        assert!(matches!(attr("nan").unwrap(), Attr::Float(f) if f.is_nan()));
        assert_eq!(attr("true").unwrap(), Attr::Bool(true));
        assert_eq!(attr(r#""a\"b""#).unwrap(), Attr::Str("a\"b".into()));
        assert_eq!(attr("bf16").unwrap(), Attr::DType(DType::BF16));
        let d = &Dim::sym("past") + &Dim::sym("seq");
        assert_eq!(attr("seq+past").unwrap(), Attr::Dim(d));
        assert_eq!(
            attr("[[], [1, seq], \"s\"]").unwrap().to_string(),
            "[[], [1, seq], \"s\"]"
        );
    }

    #[test]
    fn dim_expressions() {
        let show = |s: &str| attr(s).map(|a| a.to_string());
        assert_eq!(show("2*seq-1").unwrap(), "2*seq-1");
        assert_eq!(show("-(seq - 2) * 3").unwrap(), "-3*seq+6");
        assert_eq!(show("heads*seq").unwrap(), "heads*seq");
        assert_eq!(show("?").unwrap(), "?");
        assert_eq!(
            show("-9223372036854775808").unwrap(),
            "-9223372036854775808"
        );
        assert!(show("9223372036854775808").is_err());
        assert!(show("9223372036854775807+1").is_err());
        assert!(show("4294967296*4294967296").is_err());
        assert!(show("--9223372036854775808").is_err());
        assert!(show("seq+f32").is_err());
        assert!(show("2*").is_err());
    }

    #[test]
    fn nesting_is_bounded() {
        let deep = format!("{}1{}", "[".repeat(10_000), "]".repeat(10_000));
        assert_eq!(attr(&deep).unwrap_err().message, "nesting is too deep");
        assert!(attr(&format!("{}seq", "-".repeat(10_000))).is_err());
        assert!(attr(&format!("{}seq", "(".repeat(10_000))).is_err());
    }
}
