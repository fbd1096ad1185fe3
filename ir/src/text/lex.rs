//! Tokenizer for the textual IR.
//!
//! Turns source text into [`Token`]s carrying 1-based line and column
//! (columns count Unicode scalar values). Whitespace, including newlines, only
//! separates tokens; `;` starts a comment that runs to the end of the line.
//!
//! Token classes:
//! - `%name` / `@name`: value and global names. A plain name is one or more
//!   of `[A-Za-z0-9_.$-]`; any other name is written as a quoted string after
//!   the sigil (`%"a/b:0"`).
//! - words `[A-Za-z_][A-Za-z0-9_.]*`: keywords, mnemonics, dtypes, dim
//!   symbols, attribute names.
//! - integers `[0-9]+` and floats (`1.5`, `1e-6`, `2.5E+3`); signs are
//!   separate `-` tokens.
//! - strings `"..."` with Rust escapes: `\n \r \t \\ \" \' \0 \xNN \u{N..}`.
//! - punctuation `( ) [ ] { } , : = + - * ?` and the arrow `->`.

use super::ParseError;

/// A token kind with its payload.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Tok {
    /// `%name`
    Value(String),
    /// `@name`
    Global(String),
    /// A bare word.
    Word(String),
    /// Digits only (sign not included).
    Int(String),
    /// A float literal's text (sign not included).
    Float(String),
    /// A string literal, unescaped.
    Str(String),
    Punct(char),
    Arrow,
    Eof,
}

impl Tok {
    /// How the token is named in error messages.
    pub(super) fn describe(&self) -> String {
        match self {
            Tok::Value(n) => super::print::name('%', n),
            Tok::Global(n) => super::print::name('@', n),
            Tok::Word(w) => format!("`{w}`"),
            Tok::Int(s) | Tok::Float(s) => format!("number `{s}`"),
            Tok::Str(_) => "a string".to_string(),
            Tok::Punct(c) => format!("`{c}`"),
            Tok::Arrow => "`->`".to_string(),
            Tok::Eof => "end of input".to_string(),
        }
    }
}

/// A token and where it starts.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Token {
    pub tok: Tok,
    pub line: usize,
    pub col: usize,
}

/// Splits `src` into tokens, ending with [`Tok::Eof`].
pub(super) fn lex(src: &str) -> Result<Vec<Token>, ParseError> {
    let mut lexer = Lexer {
        chars: src.chars().collect(),
        pos: 0,
        line: 1,
        col: 1,
    };
    let mut out = Vec::new();
    loop {
        lexer.skip_trivia();
        let (line, col) = (lexer.line, lexer.col);
        let tok = lexer.next_tok()?;
        let done = tok == Tok::Eof;
        out.push(Token { tok, line, col });
        if done {
            return Ok(out);
        }
    }
}

/// True for characters allowed in a plain (unquoted) `%`/`@` name.
pub(super) fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '$' | '-')
}

fn is_word_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.')
}

struct Lexer {
    chars: Vec<char>,
    pos: usize,
    line: usize,
    col: usize,
}

impl Lexer {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn peek_at(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.pos + ahead).copied()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += 1;
        if c == '\n' {
            self.line += 1;
            self.col = 1;
        } else {
            self.col += 1;
        }
        Some(c)
    }

    fn error(&self, line: usize, col: usize, message: String) -> ParseError {
        ParseError { line, col, message }
    }

    fn skip_trivia(&mut self) {
        while let Some(c) = self.peek() {
            if c == ';' {
                while self.peek().is_some_and(|c| c != '\n') {
                    self.bump();
                }
            } else if c.is_whitespace() {
                self.bump();
            } else {
                break;
            }
        }
    }

    fn take_while(&mut self, pred: impl Fn(char) -> bool) -> String {
        let mut s = String::new();
        while let Some(c) = self.peek().filter(|&c| pred(c)) {
            s.push(c);
            self.bump();
        }
        s
    }

    fn next_tok(&mut self) -> Result<Tok, ParseError> {
        let (line, col) = (self.line, self.col);
        let Some(c) = self.peek() else {
            return Ok(Tok::Eof);
        };
        match c {
            '%' | '@' => {
                self.bump();
                let name = self.name(c)?;
                Ok(if c == '%' {
                    Tok::Value(name)
                } else {
                    Tok::Global(name)
                })
            }
            '"' => self.string().map(Tok::Str),
            '0'..='9' => Ok(self.number()),
            c if is_word_start(c) => Ok(Tok::Word(self.take_while(is_word_char))),
            '-' if self.peek_at(1) == Some('>') => {
                self.bump();
                self.bump();
                Ok(Tok::Arrow)
            }
            '(' | ')' | '[' | ']' | '{' | '}' | ',' | ':' | '=' | '+' | '-' | '*' | '?' => {
                self.bump();
                Ok(Tok::Punct(c))
            }
            other => Err(self.error(
                line,
                col,
                format!("unexpected character {}", other.escape_debug()),
            )),
        }
    }

    /// The name after a `%` or `@` sigil: plain or quoted.
    fn name(&mut self, sigil: char) -> Result<String, ParseError> {
        if self.peek() == Some('"') {
            return self.string();
        }
        let name = self.take_while(is_name_char);
        if name.is_empty() {
            return Err(self.error(
                self.line,
                self.col,
                format!("expected a name after `{sigil}`"),
            ));
        }
        Ok(name)
    }

    fn digits(&mut self) -> String {
        self.take_while(|c| c.is_ascii_digit())
    }

    /// An integer or float literal (no sign).
    fn number(&mut self) -> Tok {
        let mut text = self.digits();
        let mut float = false;
        if self.peek() == Some('.') && self.peek_at(1).is_some_and(|c| c.is_ascii_digit()) {
            self.bump();
            text.push('.');
            text.push_str(&self.digits());
            float = true;
        }
        if matches!(self.peek(), Some('e' | 'E')) {
            let sign = matches!(self.peek_at(1), Some('+' | '-'));
            let digit_at = if sign { 2 } else { 1 };
            if self.peek_at(digit_at).is_some_and(|c| c.is_ascii_digit()) {
                for _ in 0..digit_at {
                    text.extend(self.bump());
                }
                text.push_str(&self.digits());
                float = true;
            }
        }
        if float {
            Tok::Float(text)
        } else {
            Tok::Int(text)
        }
    }

    /// A quoted string; the cursor is on the opening quote.
    fn string(&mut self) -> Result<String, ParseError> {
        let (line, col) = (self.line, self.col);
        self.bump();
        let mut s = String::new();
        loop {
            match self.bump() {
                None => return Err(self.error(line, col, "unterminated string".to_string())),
                Some('"') => return Ok(s),
                Some('\\') => s.push(self.escape()?),
                Some(c) => s.push(c),
            }
        }
    }

    /// One escape sequence; the cursor is just after the backslash.
    fn escape(&mut self) -> Result<char, ParseError> {
        let (line, col) = (self.line, self.col.saturating_sub(1));
        let bad = |me: &Self, what: &str| me.error(line, col, format!("invalid escape {what}"));
        match self.bump() {
            Some('n') => Ok('\n'),
            Some('r') => Ok('\r'),
            Some('t') => Ok('\t'),
            Some('0') => Ok('\0'),
            Some(c @ ('\\' | '"' | '\'')) => Ok(c),
            Some('x') => {
                let hex: String = (0..2).filter_map(|_| self.bump()).collect();
                u8::from_str_radix(&hex, 16)
                    .ok()
                    .filter(|b| b.is_ascii())
                    .map(char::from)
                    .ok_or_else(|| bad(self, &format!("`\\x{hex}`")))
            }
            Some('u') => self.unicode_escape().ok_or_else(|| bad(self, "`\\u`")),
            Some(c) => Err(bad(self, &format!("`\\{}`", c.escape_debug()))),
            None => Err(bad(self, "at end of input")),
        }
    }

    /// The `{N..}` part of a `\u{N..}` escape.
    fn unicode_escape(&mut self) -> Option<char> {
        if self.bump()? != '{' {
            return None;
        }
        let hex = self.take_while(|c| c.is_ascii_hexdigit());
        if self.bump()? != '}' || hex.is_empty() || hex.len() > 6 {
            return None;
        }
        char::from_u32(u32::from_str_radix(&hex, 16).ok()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(src: &str) -> Vec<Tok> {
        lex(src).unwrap().into_iter().map(|t| t.tok).collect()
    }

    #[test]
    fn names_numbers_and_punctuation() {
        assert_eq!(
            toks("%x0 = add %\"a/b\", @w.1 ; comment\n-> 1e-6 2.5 7 -3"),
            vec![
                Tok::Value("x0".into()),
                Tok::Punct('='),
                Tok::Word("add".into()),
                Tok::Value("a/b".into()),
                Tok::Punct(','),
                Tok::Global("w.1".into()),
                Tok::Arrow,
                Tok::Float("1e-6".into()),
                Tok::Float("2.5".into()),
                Tok::Int("7".into()),
                Tok::Punct('-'),
                Tok::Int("3".into()),
                Tok::Eof,
            ]
        );
    }

    #[test]
    fn dim_expressions_split_on_operators() {
        assert_eq!(
            toks("2*seq-1"),
            vec![
                Tok::Int("2".into()),
                Tok::Punct('*'),
                Tok::Word("seq".into()),
                Tok::Punct('-'),
                Tok::Int("1".into()),
                Tok::Eof,
            ]
        );
    }

    #[test]
    fn string_escapes() {
        assert_eq!(
            toks(r#""a\"b\\c\n\u{e9}\x41""#),
            vec![Tok::Str("a\"b\\c\né\u{41}".into()), Tok::Eof]
        );
        let e = lex("\n  \"abc").unwrap_err();
        assert_eq!((e.line, e.col), (2, 3));
        assert!(lex(r#""\q""#).is_err());
        assert!(lex(r#""\u{110000}""#).is_err());
        assert!(lex(r#""\x80""#).is_err());
    }

    #[test]
    fn positions_are_one_based() {
        let t = lex("a\n  b").unwrap();
        assert_eq!((t[0].line, t[0].col), (1, 1));
        assert_eq!((t[1].line, t[1].col), (2, 3));
        let e = lex("%\"é\" é").unwrap_err();
        assert_eq!(
            (e.line, e.col, e.message.as_str()),
            (1, 6, "unexpected character é")
        );
    }
}
