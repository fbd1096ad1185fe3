//! Declared pass options and their parsed values.
//!
//! Every option a pass accepts is declared once ([`OptionSpec`]) with a kind
//! — an integer with a lower bound, a float, a bool, free text, one of a
//! list of names, a list of positive integers — a default and a help line,
//! as MLIR declares pass options. Values given in a pipeline string are
//! checked against the declarations when the pipeline is parsed, so an
//! unknown option, a malformed value or a name outside an option's choices
//! is an error naming the valid options or values before any pass runs.

use std::collections::BTreeMap;

use crate::pass::PassError;

/// The type of an option's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OptionKind {
    /// An integer in `min..=max`.
    Int {
        min: i64,
        max: i64,
    },
    Float,
    Bool,
    /// Free text (a path, a symbol name).
    Str,
    /// One of these names.
    Enum(&'static [&'static str]),
    /// A comma-separated list of positive integers (`128,256,512`).
    IntList,
}

impl OptionKind {
    /// Any integer.
    pub const INT: OptionKind = OptionKind::Int {
        min: i64::MIN,
        max: i64::MAX,
    };
    /// An integer `>= 0`.
    pub const COUNT: OptionKind = OptionKind::Int {
        min: 0,
        max: i64::MAX,
    };
    /// An integer `>= 1`.
    pub const POSITIVE: OptionKind = OptionKind::Int {
        min: 1,
        max: i64::MAX,
    };

    /// How the kind reads in help and docs: `<int>`, `<int >= 1>`,
    /// `int8|int4`, `<ints>`.
    pub fn describe(&self) -> String {
        match self {
            OptionKind::Int { min, max } => match (*min, *max) {
                (i64::MIN, i64::MAX) => "<int>".to_string(),
                (min, i64::MAX) => format!("<int >= {min}>"),
                (min, max) => format!("<int in {min}..={max}>"),
            },
            OptionKind::Float => "<float>".to_string(),
            OptionKind::Bool => "<bool>".to_string(),
            OptionKind::Str => "<string>".to_string(),
            OptionKind::Enum(names) => names.join("|"),
            OptionKind::IntList => "<int,int,...>".to_string(),
        }
    }
}

/// One option a pass declares.
#[derive(Clone, Copy, Debug)]
pub struct OptionSpec {
    pub name: &'static str,
    pub kind: OptionKind,
    pub default: &'static str,
    pub help: &'static str,
}

/// A parsed option value.
#[derive(Clone, Debug, PartialEq)]
pub enum OptionValue {
    Int(i64),
    Float(f64),
    Bool(bool),
    /// Free text, or an [`OptionKind::Enum`] name.
    Str(String),
    IntList(Vec<i64>),
}

/// The options of one pass instance: every declared option, with defaults
/// filled in.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PassOptions {
    values: BTreeMap<&'static str, OptionValue>,
}

fn parse_value(spec: &OptionSpec, text: &str) -> Result<OptionValue, String> {
    let bad = || {
        format!(
            "option `{}` expects {}, got `{text}`",
            spec.name,
            spec.kind.describe()
        )
    };
    Ok(match spec.kind {
        OptionKind::Int { min, max } => match text.parse::<i64>() {
            Ok(v) if (min..=max).contains(&v) => OptionValue::Int(v),
            _ => return Err(bad()),
        },
        OptionKind::Float => OptionValue::Float(text.parse().map_err(|_| bad())?),
        OptionKind::Bool => OptionValue::Bool(match text {
            "true" | "1" => true,
            "false" | "0" => false,
            _ => return Err(bad()),
        }),
        OptionKind::Str => OptionValue::Str(text.to_string()),
        OptionKind::Enum(names) => {
            if !names.contains(&text) {
                return Err(format!(
                    "option `{}` expects one of {}, got `{text}`",
                    spec.name,
                    names.join(", ")
                ));
            }
            OptionValue::Str(text.to_string())
        }
        OptionKind::IntList => {
            let items: Option<Vec<i64>> = text
                .split(',')
                .map(|t| t.trim().parse::<i64>().ok().filter(|&v| v > 0))
                .collect();
            OptionValue::IntList(items.ok_or_else(|| {
                format!(
                    "option `{}` expects positive integers separated by commas, got `{text}`",
                    spec.name
                )
            })?)
        }
    })
}

impl PassOptions {
    /// Checks `given` (name → text) against `specs` for pass `pass`.
    pub fn resolve(
        pass: &str,
        specs: &[OptionSpec],
        given: &[(String, String)],
    ) -> Result<PassOptions, PassError> {
        let mut values = BTreeMap::new();
        for spec in specs {
            let v = parse_value(spec, spec.default).unwrap_or_else(|e| {
                panic!("pass `{pass}`: the declared default does not parse: {e}")
            });
            values.insert(spec.name, v);
        }
        for (name, text) in given {
            let Some(spec) = specs.iter().find(|s| s.name == name) else {
                let valid = if specs.is_empty() {
                    "it takes no options".to_string()
                } else {
                    format!(
                        "valid options: {}",
                        specs.iter().map(|s| s.name).collect::<Vec<_>>().join(", ")
                    )
                };
                return Err(PassError::Pipeline(format!(
                    "unknown option `{name}` for pass `{pass}` ({valid})"
                )));
            };
            let v = parse_value(spec, text)
                .map_err(|e| PassError::Pipeline(format!("pass `{pass}`: {e}")))?;
            values.insert(spec.name, v);
        }
        Ok(PassOptions { values })
    }

    fn get(&self, name: &str) -> &OptionValue {
        self.values
            .get(name)
            .unwrap_or_else(|| panic!("option `{name}` is not declared by this pass"))
    }

    /// The value of a declared integer option.
    pub fn int(&self, name: &str) -> i64 {
        match self.get(name) {
            OptionValue::Int(v) => *v,
            other => panic!("option `{name}` is {other:?}, not an integer"),
        }
    }

    /// The value of a declared integer option with a lower bound of 0.
    pub fn count(&self, name: &str) -> usize {
        usize::try_from(self.int(name))
            .unwrap_or_else(|_| panic!("option `{name}` is declared >= 0"))
    }

    pub fn float(&self, name: &str) -> f64 {
        match self.get(name) {
            OptionValue::Float(v) => *v,
            other => panic!("option `{name}` is {other:?}, not a float"),
        }
    }

    pub fn bool(&self, name: &str) -> bool {
        match self.get(name) {
            OptionValue::Bool(v) => *v,
            other => panic!("option `{name}` is {other:?}, not a bool"),
        }
    }

    /// The text of a declared string or enum option.
    pub fn str(&self, name: &str) -> &str {
        match self.get(name) {
            OptionValue::Str(v) => v,
            other => panic!("option `{name}` is {other:?}, not a string"),
        }
    }

    /// The value of a declared enum option as its typed form (the
    /// declaration lists exactly the names `T` parses).
    pub fn choice<T: std::str::FromStr>(&self, name: &str) -> T {
        let text = self.str(name);
        text.parse()
            .unwrap_or_else(|_| panic!("option `{name}`: `{text}` is declared but does not parse"))
    }

    pub fn ints(&self, name: &str) -> &[i64] {
        match self.get(name) {
            OptionValue::IntList(v) => v,
            other => panic!("option `{name}` is {other:?}, not a list of integers"),
        }
    }
}

/// A pipeline entry for `pass` with the given option values, in the
/// declared order of `specs`, leaving out the ones at their default:
/// `quantize{weights=int4,group=64}`.
pub fn render_entry(pass: &str, specs: &[OptionSpec], values: &[(&str, String)]) -> String {
    let items: Vec<String> = specs
        .iter()
        .filter_map(|s| {
            let v = values.iter().find(|(n, _)| *n == s.name)?;
            (v.1 != s.default).then(|| format!("{}={}", s.name, v.1))
        })
        .collect();
    if items.is_empty() {
        pass.to_string()
    } else {
        format!("{pass}{{{}}}", items.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPECS: &[OptionSpec] = &[
        OptionSpec {
            name: "max-elements",
            kind: OptionKind::COUNT,
            default: "16",
            help: "",
        },
        OptionSpec {
            name: "weights",
            kind: OptionKind::Enum(&["int8", "int4"]),
            default: "int8",
            help: "",
        },
        OptionSpec {
            name: "buckets",
            kind: OptionKind::IntList,
            default: "128,256",
            help: "",
        },
    ];

    #[test]
    fn defaults_and_overrides() {
        let o = PassOptions::resolve("p", SPECS, &[]).unwrap();
        assert_eq!(o.int("max-elements"), 16);
        assert_eq!(o.str("weights"), "int8");
        assert_eq!(o.ints("buckets"), &[128, 256]);
        let given = [
            ("max-elements".into(), "3".into()),
            ("weights".into(), "int4".into()),
            ("buckets".into(), "1,64".into()),
        ];
        let o = PassOptions::resolve("p", SPECS, &given).unwrap();
        assert_eq!(o.count("max-elements"), 3);
        assert_eq!(o.str("weights"), "int4");
        assert_eq!(o.ints("buckets"), &[1, 64]);
    }

    #[test]
    fn unknown_and_malformed_options_are_errors_listing_what_is_valid() {
        let err = |name: &str, text: &str| {
            PassOptions::resolve("p", SPECS, &[(name.into(), text.into())])
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err("bogus", "1"),
            "unknown option `bogus` for pass `p` (valid options: max-elements, weights, buckets)"
        );
        assert_eq!(
            err("max-elements", "x"),
            "pass `p`: option `max-elements` expects <int >= 0>, got `x`"
        );
        assert!(err("max-elements", "-1").contains("<int >= 0>"));
        assert_eq!(
            err("weights", "int3"),
            "pass `p`: option `weights` expects one of int8, int4, got `int3`"
        );
        assert!(err("buckets", "64,0").contains("positive integers separated by commas"));
    }

    #[test]
    fn entries_render_only_what_differs_from_the_defaults() {
        let v = [
            ("weights", "int4".to_string()),
            ("max-elements", "16".into()),
        ];
        assert_eq!(render_entry("p", SPECS, &v), "p{weights=int4}");
        assert_eq!(render_entry("p", SPECS, &[]), "p");
    }
}
