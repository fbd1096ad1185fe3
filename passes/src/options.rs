//! Declared pass options and their parsed values.
//!
//! Every option a pass accepts is declared once with a kind, a default and a
//! help line ([`OptionSpec`]); values given in a pipeline string are checked
//! against the declarations, so an unknown option or a malformed value is an
//! error naming the valid options.

use std::collections::BTreeMap;

use crate::pass::PassError;

/// The type of an option's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OptionKind {
    Int,
    Float,
    Bool,
    Str,
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
    Str(String),
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
            "option `{}` expects {:?}, got `{text}`",
            spec.name, spec.kind
        )
    };
    Ok(match spec.kind {
        OptionKind::Int => OptionValue::Int(text.parse().map_err(|_| bad())?),
        OptionKind::Float => OptionValue::Float(text.parse().map_err(|_| bad())?),
        OptionKind::Bool => OptionValue::Bool(match text {
            "true" | "1" => true,
            "false" | "0" => false,
            _ => return Err(bad()),
        }),
        OptionKind::Str => OptionValue::Str(text.to_string()),
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
            let v = parse_value(spec, spec.default).expect("declared defaults parse");
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

    pub fn str(&self, name: &str) -> &str {
        match self.get(name) {
            OptionValue::Str(v) => v,
            other => panic!("option `{name}` is {other:?}, not a string"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPECS: &[OptionSpec] = &[OptionSpec {
        name: "max-elements",
        kind: OptionKind::Int,
        default: "16",
        help: "",
    }];

    #[test]
    fn defaults_and_overrides() {
        let o = PassOptions::resolve("p", SPECS, &[]).unwrap();
        assert_eq!(o.int("max-elements"), 16);
        let o = PassOptions::resolve("p", SPECS, &[("max-elements".into(), "3".into())]).unwrap();
        assert_eq!(o.int("max-elements"), 3);
    }

    #[test]
    fn unknown_and_malformed_options_are_errors() {
        let e = PassOptions::resolve("p", SPECS, &[("bogus".into(), "1".into())]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown option `bogus` for pass `p` (valid options: max-elements)"
        );
        let e =
            PassOptions::resolve("p", SPECS, &[("max-elements".into(), "x".into())]).unwrap_err();
        assert!(e.to_string().contains("expects Int"), "{e}");
    }
}
