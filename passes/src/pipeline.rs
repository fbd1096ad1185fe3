//! Pipeline strings: `shape-infer,const-fold{max-elements=64},dce`.
//!
//! A pipeline is a comma-separated list of pass names, each optionally
//! followed by `{name=value,...}`. A value may be a list, `buckets=128,256,512`:
//! an item after a comma that is not followed by `=` continues the value. Parsing checks the syntax only; the
//! registry resolves names and options ([`crate::registry::create_pass`]).

use crate::pass::PassError;

/// One pass of a pipeline as written: its name and raw option values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PipelineEntry {
    pub name: String,
    pub options: Vec<(String, String)>,
}

impl std::fmt::Display for PipelineEntry {
    /// The entry as a pipeline writes it (`const-fold{max-elements=64}`),
    /// which parses back to the same entry.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)?;
        if !self.options.is_empty() {
            let options: Vec<String> = self
                .options
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            write!(f, "{{{}}}", options.join(","))?;
        }
        Ok(())
    }
}

/// Characters an option value may hold besides name characters (numbers,
/// paths).
const VALUE_CHARS: &[char] = &['.', '+', '/'];

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_'
}

fn err(text: &str, pos: usize, msg: &str) -> PassError {
    PassError::Pipeline(format!(
        "bad pipeline `{text}` at column {}: {msg}",
        pos + 1
    ))
}

/// Parses a pipeline string into entries (an empty string is an empty pipeline).
pub fn parse_pipeline(text: &str) -> Result<Vec<PipelineEntry>, PassError> {
    let chars: Vec<char> = text.chars().collect();
    let mut pos = 0;
    let mut out = Vec::new();
    let skip_ws = |pos: &mut usize| {
        while *pos < chars.len() && chars[*pos].is_whitespace() {
            *pos += 1;
        }
    };
    let word = |pos: &mut usize, extra: &[char]| -> String {
        let start = *pos;
        while *pos < chars.len() && (is_name_char(chars[*pos]) || extra.contains(&chars[*pos])) {
            *pos += 1;
        }
        chars[start..*pos].iter().collect()
    };
    skip_ws(&mut pos);
    if pos == chars.len() {
        return Ok(out);
    }
    loop {
        skip_ws(&mut pos);
        let name = word(&mut pos, &[]);
        if name.is_empty() {
            return Err(err(text, pos, "expected a pass name"));
        }
        skip_ws(&mut pos);
        let mut options = Vec::new();
        if chars.get(pos) == Some(&'{') {
            pos += 1;
            loop {
                skip_ws(&mut pos);
                let key = word(&mut pos, &[]);
                if key.is_empty() {
                    return Err(err(text, pos, "expected an option name"));
                }
                skip_ws(&mut pos);
                if chars.get(pos) != Some(&'=') {
                    return Err(err(text, pos, "expected `=` after the option name"));
                }
                pos += 1;
                skip_ws(&mut pos);
                let mut value = word(&mut pos, VALUE_CHARS);
                if value.is_empty() {
                    return Err(err(text, pos, "expected an option value"));
                }
                // A list value (`buckets=128,256`): an item after a comma
                // that is not itself `name=` continues the value.
                loop {
                    let mut ahead = pos;
                    skip_ws(&mut ahead);
                    if chars.get(ahead) != Some(&',') {
                        break;
                    }
                    ahead += 1;
                    skip_ws(&mut ahead);
                    let item = word(&mut ahead, VALUE_CHARS);
                    let mut after = ahead;
                    skip_ws(&mut after);
                    if item.is_empty() || chars.get(after) == Some(&'=') {
                        break;
                    }
                    value.push(',');
                    value.push_str(&item);
                    pos = ahead;
                }
                options.push((key, value));
                skip_ws(&mut pos);
                match chars.get(pos) {
                    Some(',') => pos += 1,
                    Some('}') => {
                        pos += 1;
                        break;
                    }
                    _ => return Err(err(text, pos, "expected `,` or `}`")),
                }
            }
            skip_ws(&mut pos);
        }
        out.push(PipelineEntry { name, options });
        match chars.get(pos) {
            None => return Ok(out),
            Some(',') => pos += 1,
            Some(_) => return Err(err(text, pos, "expected `,` between passes")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_and_options() {
        let p = parse_pipeline("shape-infer, const-fold{max-elements=64, fold-weights=true},dce")
            .unwrap();
        assert_eq!(p.len(), 3);
        assert_eq!(p[1].name, "const-fold");
        assert_eq!(
            p[1].options,
            vec![
                ("max-elements".to_string(), "64".to_string()),
                ("fold-weights".to_string(), "true".to_string())
            ]
        );
        assert!(parse_pipeline("").unwrap().is_empty());
    }

    #[test]
    fn list_and_path_values() {
        let p = parse_pipeline("b{buckets=128, 256,512,profile=data/p.txt},dce").unwrap();
        assert_eq!(
            p[0].options,
            vec![
                ("buckets".to_string(), "128,256,512".to_string()),
                ("profile".to_string(), "data/p.txt".to_string())
            ]
        );
        assert_eq!(p[1].name, "dce");
        assert!(parse_pipeline("b{buckets=1,}").is_err());
        let text = p
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",");
        assert_eq!(text, "b{buckets=128,256,512,profile=data/p.txt},dce");
        assert_eq!(parse_pipeline(&text).unwrap(), p);
    }

    #[test]
    fn rejects_malformed_strings() {
        for bad in ["a,,b", "a{x}", "a{x=1", "a b", "a{=1}", ","] {
            assert!(parse_pipeline(bad).is_err(), "{bad}");
        }
        let e = parse_pipeline("dce cse").unwrap_err().to_string();
        assert_eq!(
            e,
            "bad pipeline `dce cse` at column 5: expected `,` between passes"
        );
    }
}
