//! Generic attribute values, the bridge between typed op structs and text.
//!
//! Every op stores its attributes as typed Rust fields. To print and parse
//! them uniformly, an op converts its fields to a list of named [`Attr`]s and
//! builds itself back from an [`Attrs`] map, whose getters check kinds and
//! reject attributes the op does not know.

use std::collections::BTreeMap;
use std::fmt;

use crate::dim::Dim;
use crate::dtype::DType;

/// One attribute value as it appears in the textual IR.
#[derive(Clone, Debug, PartialEq)]
pub enum Attr {
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(String),
    DType(DType),
    /// A dimension that mentions a symbol (static dims are `Int`).
    Dim(Dim),
    List(Vec<Attr>),
}

impl Attr {
    pub fn ints(v: &[i64]) -> Attr {
        Attr::List(v.iter().map(|&x| Attr::Int(x)).collect())
    }

    pub fn floats(v: &[f64]) -> Attr {
        Attr::List(v.iter().map(|&x| Attr::Float(x)).collect())
    }

    /// A dim as an attribute: `Int` when static, `Dim` otherwise.
    pub fn dim(d: &Dim) -> Attr {
        match d.as_fixed() {
            Some(v) => Attr::Int(v),
            None => Attr::Dim(d.clone()),
        }
    }

    pub fn dims(v: &[Dim]) -> Attr {
        Attr::List(v.iter().map(Attr::dim).collect())
    }

    fn kind(&self) -> &'static str {
        match self {
            Attr::Int(_) => "integer",
            Attr::Float(_) => "float",
            Attr::Bool(_) => "bool",
            Attr::Str(_) => "string",
            Attr::DType(_) => "dtype",
            Attr::Dim(_) => "symbolic dim",
            Attr::List(_) => "list",
        }
    }
}

/// Formats a float so that it reads back to the same `f64` and always looks
/// like a float (`1.0`, `1e-6`, `inf`, `-inf`, `nan`).
pub fn format_float(v: f64) -> String {
    if v.is_nan() {
        "nan".to_string()
    } else if v.is_infinite() {
        if v > 0.0 { "inf" } else { "-inf" }.to_string()
    } else {
        let s = format!("{v:?}");
        if s.contains(['.', 'e', 'E']) {
            s
        } else {
            format!("{s}.0")
        }
    }
}

impl fmt::Display for Attr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Attr::Int(v) => write!(f, "{v}"),
            Attr::Float(v) => f.write_str(&format_float(*v)),
            Attr::Bool(v) => write!(f, "{v}"),
            Attr::Str(s) => write!(f, "{s:?}"),
            Attr::DType(d) => write!(f, "{d}"),
            Attr::Dim(d) => write!(f, "{d}"),
            Attr::List(items) => {
                f.write_str("[")?;
                for (i, a) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{a}")?;
                }
                f.write_str("]")
            }
        }
    }
}

/// Error raised while building an op from its attributes.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AttrError {
    #[error("missing attribute `{0}`")]
    Missing(String),
    #[error("attribute `{name}` must be {expected}, found {found}")]
    Kind {
        name: String,
        expected: &'static str,
        found: &'static str,
    },
    #[error("unknown attribute `{name}` (valid: {valid})")]
    Unknown { name: String, valid: String },
    #[error("attribute `{name}`: {reason}")]
    Invalid { name: String, reason: String },
}

/// Named attributes handed to an op constructor. Getters remove what they
/// read; [`Attrs::finish`] rejects whatever is left.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Attrs {
    map: BTreeMap<String, Attr>,
    read: Vec<&'static str>,
}

impl Attrs {
    pub fn new() -> Attrs {
        Attrs::default()
    }

    pub fn from_pairs(pairs: impl IntoIterator<Item = (String, Attr)>) -> Attrs {
        Attrs {
            map: pairs.into_iter().collect(),
            read: Vec::new(),
        }
    }

    pub fn insert(&mut self, name: impl Into<String>, value: Attr) -> Option<Attr> {
        self.map.insert(name.into(), value)
    }

    /// The attributes as name-value pairs, in name order.
    pub fn into_pairs(self) -> impl Iterator<Item = (String, Attr)> {
        self.map.into_iter()
    }

    fn take(&mut self, name: &'static str) -> Option<Attr> {
        self.read.push(name);
        self.map.remove(name)
    }

    fn kind_err(name: &str, expected: &'static str, found: &Attr) -> AttrError {
        AttrError::Kind {
            name: name.to_string(),
            expected,
            found: found.kind(),
        }
    }

    /// Fails if attributes the op did not ask for remain.
    pub fn finish(self) -> Result<(), AttrError> {
        match self.map.into_keys().next() {
            None => Ok(()),
            Some(name) => Err(AttrError::Unknown {
                name,
                valid: if self.read.is_empty() {
                    "none".to_string()
                } else {
                    self.read.join(", ")
                },
            }),
        }
    }

    pub fn opt_int(&mut self, name: &'static str) -> Result<Option<i64>, AttrError> {
        match self.take(name) {
            None => Ok(None),
            Some(Attr::Int(v)) => Ok(Some(v)),
            Some(Attr::Bool(b)) => Ok(Some(b as i64)),
            Some(other) => Err(Self::kind_err(name, "an integer", &other)),
        }
    }

    pub fn int(&mut self, name: &'static str) -> Result<i64, AttrError> {
        self.opt_int(name)?
            .ok_or_else(|| AttrError::Missing(name.to_string()))
    }

    pub fn int_or(&mut self, name: &'static str, default: i64) -> Result<i64, AttrError> {
        Ok(self.opt_int(name)?.unwrap_or(default))
    }

    pub fn opt_float(&mut self, name: &'static str) -> Result<Option<f64>, AttrError> {
        match self.take(name) {
            None => Ok(None),
            Some(Attr::Float(v)) => Ok(Some(v)),
            Some(Attr::Int(v)) => Ok(Some(v as f64)),
            Some(other) => Err(Self::kind_err(name, "a float", &other)),
        }
    }

    pub fn float(&mut self, name: &'static str) -> Result<f64, AttrError> {
        self.opt_float(name)?
            .ok_or_else(|| AttrError::Missing(name.to_string()))
    }

    pub fn float_or(&mut self, name: &'static str, default: f64) -> Result<f64, AttrError> {
        Ok(self.opt_float(name)?.unwrap_or(default))
    }

    pub fn bool_or(&mut self, name: &'static str, default: bool) -> Result<bool, AttrError> {
        match self.take(name) {
            None => Ok(default),
            Some(Attr::Bool(b)) => Ok(b),
            Some(Attr::Int(v @ (0 | 1))) => Ok(v == 1),
            Some(other) => Err(Self::kind_err(name, "a bool", &other)),
        }
    }

    pub fn opt_str(&mut self, name: &'static str) -> Result<Option<String>, AttrError> {
        match self.take(name) {
            None => Ok(None),
            Some(Attr::Str(s)) => Ok(Some(s)),
            Some(other) => Err(Self::kind_err(name, "a string", &other)),
        }
    }

    pub fn dtype(&mut self, name: &'static str) -> Result<DType, AttrError> {
        match self.take(name) {
            None => Err(AttrError::Missing(name.to_string())),
            Some(Attr::DType(d)) => Ok(d),
            Some(other) => Err(Self::kind_err(name, "a dtype", &other)),
        }
    }

    pub fn opt_ints(&mut self, name: &'static str) -> Result<Option<Vec<i64>>, AttrError> {
        match self.take(name) {
            None => Ok(None),
            Some(Attr::List(items)) => items
                .into_iter()
                .map(|a| match a {
                    Attr::Int(v) => Ok(v),
                    other => Err(Self::kind_err(name, "a list of integers", &other)),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(other) => Err(Self::kind_err(name, "a list of integers", &other)),
        }
    }

    pub fn ints(&mut self, name: &'static str) -> Result<Vec<i64>, AttrError> {
        self.opt_ints(name)?
            .ok_or_else(|| AttrError::Missing(name.to_string()))
    }

    pub fn opt_dims(&mut self, name: &'static str) -> Result<Option<Vec<Dim>>, AttrError> {
        match self.take(name) {
            None => Ok(None),
            Some(Attr::List(items)) => items
                .into_iter()
                .map(|a| match a {
                    Attr::Int(v) => Ok(Dim::fixed(v)),
                    Attr::Dim(d) => Ok(d),
                    other => Err(Self::kind_err(name, "a list of dims", &other)),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(other) => Err(Self::kind_err(name, "a list of dims", &other)),
        }
    }

    /// Any attribute, unchecked (for ops such as `constant` that interpret it).
    pub fn raw(&mut self, name: &'static str) -> Result<Attr, AttrError> {
        self.take(name)
            .ok_or_else(|| AttrError::Missing(name.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_always_look_like_floats() {
        assert_eq!(format_float(1.0), "1.0");
        assert_eq!(format_float(1e-6), "1e-6");
        assert_eq!(format_float(f64::NEG_INFINITY), "-inf");
        assert_eq!(format_float(0.1), "0.1");
    }

    #[test]
    fn leftover_attributes_are_rejected() {
        let mut a = Attrs::from_pairs([
            ("axis".to_string(), Attr::Int(1)),
            ("bogus".to_string(), Attr::Int(2)),
        ]);
        assert_eq!(a.int("axis").unwrap(), 1);
        let err = a.finish().unwrap_err();
        assert_eq!(err.to_string(), "unknown attribute `bogus` (valid: axis)");
    }
}
