//! Symbolic dimensions.
//!
//! A [`Dim`] is a polynomial with integer coefficients over named symbols
//! (`seq`, `past`, ...). Static dims are the constant polynomials. The
//! arithmetic is what shape bookkeeping needs: `+`, `-`, `*`, exact division,
//! and evaluation once the symbols are bound. Polynomials are kept in a
//! canonical form, so two equal expressions compare equal and print the same.
//!
//! The reserved symbol `?` marks a dim that is not known yet; it may appear in
//! parsed text and in a frontend's first guess, and `shape-infer` replaces it.
//! The verifier rejects any dim that still mentions it.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

/// The reserved name of the "not known yet" symbol.
pub const UNKNOWN_SYMBOL: &str = "?";

/// A product of symbols, sorted by name (`[]` is the constant monomial).
type Monomial = Vec<String>;

/// A dimension: a canonical integer polynomial over symbols.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Dim {
    /// Monomial -> non-zero coefficient.
    terms: BTreeMap<Monomial, i64>,
}

impl Dim {
    /// A static dimension.
    pub fn fixed(value: i64) -> Dim {
        let mut terms = BTreeMap::new();
        if value != 0 {
            terms.insert(Vec::new(), value);
        }
        Dim { terms }
    }

    /// A dimension equal to one symbol.
    pub fn sym(name: &str) -> Dim {
        let mut terms = BTreeMap::new();
        terms.insert(vec![name.to_string()], 1);
        Dim { terms }
    }

    /// The "not known yet" dim.
    pub fn unknown() -> Dim {
        Dim::sym(UNKNOWN_SYMBOL)
    }

    /// `Some(n)` when the dim does not depend on any symbol.
    pub fn as_fixed(&self) -> Option<i64> {
        match self.terms.len() {
            0 => Some(0),
            1 => self.terms.get(&Vec::new()).copied(),
            _ => None,
        }
    }

    pub fn is_fixed(&self) -> bool {
        self.as_fixed().is_some()
    }

    /// The constant term of the polynomial.
    pub fn constant_term(&self) -> i64 {
        self.terms.get(&Vec::new()).copied().unwrap_or(0)
    }

    /// True when every coefficient is non-negative, so the dim is `>= 0`
    /// whatever (non-negative) sizes its symbols stand for.
    pub fn is_nonnegative(&self) -> bool {
        self.terms.values().all(|&c| c >= 0)
    }

    /// True when the dim is provably `> 0`: non-negative coefficients and a
    /// positive constant term.
    pub fn is_positive(&self) -> bool {
        self.is_nonnegative() && self.constant_term() > 0
    }

    /// True when the dim mentions the reserved unknown symbol.
    pub fn is_unknown(&self) -> bool {
        self.terms
            .keys()
            .any(|m| m.iter().any(|s| s == UNKNOWN_SYMBOL))
    }

    /// The symbols this dim mentions, sorted and deduplicated.
    pub fn symbols(&self) -> Vec<&str> {
        let mut out: Vec<&str> = self
            .terms
            .keys()
            .flat_map(|m| m.iter().map(String::as_str))
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Evaluates the polynomial with the given symbol values. `None` when a
    /// symbol is unbound or the arithmetic overflows.
    pub fn eval(&self, bindings: &HashMap<String, i64>) -> Option<i64> {
        let mut total: i64 = 0;
        for (mono, coef) in &self.terms {
            let mut term = *coef;
            for s in mono {
                term = term.checked_mul(*bindings.get(s)?)?;
            }
            total = total.checked_add(term)?;
        }
        Some(total)
    }

    /// Replaces symbols by other dims (symbols without a substitute stay).
    pub fn substitute(&self, subst: &HashMap<String, Dim>) -> Dim {
        let mut out = Dim::fixed(0);
        for (mono, coef) in &self.terms {
            let mut term = Dim::fixed(*coef);
            for s in mono {
                let factor = subst.get(s).cloned().unwrap_or_else(|| Dim::sym(s));
                term = &term * &factor;
            }
            out = &out + &term;
        }
        out
    }

    /// Exact division: `Some(q)` with `q * rhs == self`, when the divisor is a
    /// single monomial (a constant, a symbol, or `c*a*b`) dividing every term.
    pub fn div_exact(&self, rhs: &Dim) -> Option<Dim> {
        if rhs.terms.len() != 1 {
            return if rhs == self && !self.terms.is_empty() {
                Some(Dim::fixed(1))
            } else {
                None
            };
        }
        let (dmono, dcoef) = rhs.terms.iter().next()?;
        let mut terms = BTreeMap::new();
        for (mono, coef) in &self.terms {
            if coef % dcoef != 0 {
                return None;
            }
            let mut rest = mono.clone();
            for s in dmono {
                let pos = rest.iter().position(|x| x == s)?;
                rest.remove(pos);
            }
            terms.insert(rest, coef / dcoef);
        }
        Some(Dim { terms })
    }

    fn from_terms(terms: impl IntoIterator<Item = (Monomial, i64)>) -> Dim {
        let mut out: BTreeMap<Monomial, i64> = BTreeMap::new();
        for (mut mono, coef) in terms {
            mono.sort();
            // Wrapping: shape arithmetic on absurd constants must not panic.
            let e = out.entry(mono).or_insert(0);
            *e = e.wrapping_add(coef);
        }
        out.retain(|_, c| *c != 0);
        Dim { terms: out }
    }

    /// Terms in print order: higher degree first, then by name, constant last.
    fn print_order(&self) -> Vec<(&Monomial, i64)> {
        let mut terms: Vec<(&Monomial, i64)> = self.terms.iter().map(|(m, c)| (m, *c)).collect();
        terms.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(b.0)));
        terms
    }
}

impl From<i64> for Dim {
    fn from(v: i64) -> Dim {
        Dim::fixed(v)
    }
}

impl std::ops::Add for &Dim {
    type Output = Dim;
    fn add(self, rhs: &Dim) -> Dim {
        Dim::from_terms(
            self.terms
                .iter()
                .chain(rhs.terms.iter())
                .map(|(m, c)| (m.clone(), *c)),
        )
    }
}

impl std::ops::Neg for &Dim {
    type Output = Dim;
    fn neg(self) -> Dim {
        Dim::from_terms(
            self.terms
                .iter()
                .map(|(m, c)| (m.clone(), c.wrapping_neg())),
        )
    }
}

impl std::ops::Sub for &Dim {
    type Output = Dim;
    fn sub(self, rhs: &Dim) -> Dim {
        self + &(-rhs)
    }
}

impl std::ops::Mul for &Dim {
    type Output = Dim;
    fn mul(self, rhs: &Dim) -> Dim {
        let mut terms = Vec::new();
        for (ma, ca) in &self.terms {
            for (mb, cb) in &rhs.terms {
                let mut m = ma.clone();
                m.extend(mb.iter().cloned());
                terms.push((m, ca.wrapping_mul(*cb)));
            }
        }
        Dim::from_terms(terms)
    }
}

macro_rules! forward_owned_binop {
    ($($tr:ident $f:ident),*) => {$(
        impl std::ops::$tr for Dim {
            type Output = Dim;
            fn $f(self, rhs: Dim) -> Dim { std::ops::$tr::$f(&self, &rhs) }
        }
    )*};
}
forward_owned_binop!(Add add, Sub sub, Mul mul);

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let terms = self.print_order();
        if terms.is_empty() {
            return f.write_str("0");
        }
        for (i, (mono, coef)) in terms.iter().enumerate() {
            let (sign, mag) = if *coef < 0 {
                ("-", coef.unsigned_abs())
            } else {
                (if i == 0 { "" } else { "+" }, coef.unsigned_abs())
            };
            f.write_str(sign)?;
            if mono.is_empty() {
                write!(f, "{mag}")?;
            } else {
                if mag != 1 {
                    write!(f, "{mag}*")?;
                }
                f.write_str(&mono.join("*"))?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: &str) -> Dim {
        Dim::sym(n)
    }

    #[test]
    fn canonical_arithmetic() {
        let a = &s("seq") + &s("past");
        let b = &s("past") + &s("seq");
        assert_eq!(a, b);
        assert_eq!(a.to_string(), "past+seq");
        let c = &(&a - &Dim::fixed(1)) * &Dim::fixed(2);
        assert_eq!(c.to_string(), "2*past+2*seq-2");
        assert_eq!((&s("seq") - &s("seq")).as_fixed(), Some(0));
        assert_eq!((&s("seq") * &s("heads")).to_string(), "heads*seq");
        assert_eq!((-&s("seq")).to_string(), "-seq");
    }

    #[test]
    fn exact_division() {
        let x = &Dim::fixed(128) * &s("seq");
        assert_eq!(x.div_exact(&Dim::fixed(4)).unwrap().to_string(), "32*seq");
        assert_eq!(x.div_exact(&s("seq")).unwrap(), Dim::fixed(128));
        assert!(x.div_exact(&Dim::fixed(3)).is_none());
        assert!(x.div_exact(&s("past")).is_none());
        assert_eq!(x.div_exact(&x).unwrap(), Dim::fixed(1));
    }

    #[test]
    fn signs() {
        let d = &s("seq") + &Dim::fixed(1);
        assert_eq!(d.constant_term(), 1);
        assert!(d.is_nonnegative() && d.is_positive());
        assert!(s("seq").is_nonnegative() && !s("seq").is_positive());
        assert!(!(&s("seq") - &Dim::fixed(1)).is_nonnegative());
        assert!(Dim::fixed(0).is_nonnegative() && !Dim::fixed(0).is_positive());
    }

    #[test]
    fn eval_and_substitute() {
        let d = &(&s("seq") + &s("past")) * &Dim::fixed(3);
        let mut b = HashMap::new();
        b.insert("seq".to_string(), 5);
        assert_eq!(d.eval(&b), None);
        b.insert("past".to_string(), 2);
        assert_eq!(d.eval(&b), Some(21));
        let mut sub = HashMap::new();
        sub.insert("past".to_string(), Dim::fixed(0));
        assert_eq!(d.substitute(&sub).to_string(), "3*seq");
    }
}
