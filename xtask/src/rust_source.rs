//! One lexer of Rust source for the scans that must not be fooled by comments and literals:
//! the import graph (`imports.rs`), the long functions (`long_functions.rs`) and adf-store's
//! closed-API fitness test, which compiles this same file into its test binary through
//! `#[path]` (`crates/adf-store/tests/it/closed_api.rs`). So it uses nothing but `std`, names
//! nothing of either crate, and must compile cleanly as a module of both.
//!
//! It is a lexer, not a parser. It knows line and (nested) block comments; plain, byte, C and
//! raw strings with any number of hashes, and escapes in the non-raw ones; char and byte
//! literals (`'\''`, `'\u{1F600}'`, `b'{'`) as opposed to lifetimes and labels (`'a`);
//! raw identifiers and numbers. A brace, quote or path inside a comment or literal is never
//! taken for code.

/// What a token of code is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Tok {
    /// An identifier or keyword; a raw identifier without its `r#` (`r#type` is `type`).
    Ident(String),
    /// `::`.
    PathSep,
    /// Any other punctuation character.
    Punct(char),
    /// A string, byte string, C string, char or byte literal (its text is in
    /// [`Lexed::strings`] for the string kinds).
    Literal,
    /// A lifetime or a label (`'a`, `'static`, `'outer:`).
    Lifetime,
    /// A number (`1`, `0x1f`, `2u8`; `1.5` is a number, `.`, a number).
    Number,
}

/// A token and its 1-based line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Token {
    pub(crate) tok: Tok,
    pub(crate) line: usize,
}

/// A comment: the line it starts on and its text, from `//` or `/*` to its end (a line
/// comment without its newline).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Comment {
    pub(crate) line: usize,
    pub(crate) text: String,
}

/// A string literal (plain, byte, C or raw): the line it starts on and its body between the
/// quotes, escapes as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StrLit {
    pub(crate) line: usize,
    pub(crate) text: String,
}

/// Rust source taken apart in one pass.
#[derive(Debug, Default)]
pub(crate) struct Lexed {
    /// The code's tokens, literals and lifetimes as bare kinds.
    pub(crate) tokens: Vec<Token>,
    pub(crate) comments: Vec<Comment>,
    pub(crate) strings: Vec<StrLit>,
    /// The source with its comments and its string, char and byte literals removed but their
    /// newlines kept, so a line number holds in both.
    pub(crate) code: String,
}

/// What one stretch of source turned out to be.
enum Piece {
    Space,
    Comment,
    /// A string literal whose body is `chars[.0...1]`.
    Str(usize, usize),
    Char,
    Code(Tok),
}

fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Lexes `source`.
pub(crate) fn lex(source: &str) -> Lexed {
    let chars: Vec<char> = source.chars().collect();
    let mut lexed = Lexed::default();
    let mut line = 1;
    let mut i = 0;
    while i < chars.len() {
        let start = i;
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        let piece = if c.is_whitespace() {
            i += 1;
            Piece::Space
        } else if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
            Piece::Comment
        } else if c == '/' && next == Some('*') {
            i = block_comment_end(&chars, i);
            Piece::Comment
        } else if c == '"' {
            let (body, end) = string_end(&chars, i, false, 0);
            i = end;
            Piece::Str(body.0, body.1)
        } else if c == '\'' {
            if let Some(end) = char_literal_end(&chars, i) {
                i = end;
                Piece::Char
            } else {
                i += 1;
                while chars.get(i).is_some_and(|c| is_ident_char(*c)) {
                    i += 1;
                }
                Piece::Code(Tok::Lifetime)
            }
        } else if c.is_alphabetic() || c == '_' {
            while chars.get(i).is_some_and(|c| is_ident_char(*c)) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            prefixed_literal(&chars, &word, &mut i).unwrap_or(Piece::Code(Tok::Ident(word)))
        } else if c.is_ascii_digit() {
            while chars.get(i).is_some_and(|c| is_ident_char(*c)) {
                i += 1;
            }
            Piece::Code(Tok::Number)
        } else if c == ':' && next == Some(':') {
            i += 2;
            Piece::Code(Tok::PathSep)
        } else {
            i += 1;
            Piece::Code(Tok::Punct(c))
        };
        let region = &chars[start..i];
        let newlines = region.iter().filter(|c| **c == '\n').count();
        let hidden = || "\n".repeat(newlines);
        match piece {
            Piece::Space => lexed.code.extend(region),
            Piece::Comment => {
                lexed.comments.push(Comment {
                    line,
                    text: region.iter().collect(),
                });
                lexed.code.push_str(&hidden());
            }
            Piece::Str(from, to) => {
                lexed.strings.push(StrLit {
                    line,
                    text: chars[from..to].iter().collect(),
                });
                lexed.tokens.push(Token {
                    tok: Tok::Literal,
                    line,
                });
                lexed.code.push_str(&hidden());
            }
            Piece::Char => {
                lexed.tokens.push(Token {
                    tok: Tok::Literal,
                    line,
                });
                lexed.code.push_str(&hidden());
            }
            Piece::Code(tok) => {
                lexed.tokens.push(Token { tok, line });
                lexed.code.extend(region);
            }
        }
        line += newlines;
    }
    lexed
}

/// After the word `word` that ends at `*i`: a literal it prefixes (`b"…"`, `br#"…"#`, `c"…"`,
/// `r"…"`, `b'x'`), or a raw identifier (`r#type`); `*i` moves past what is found.
fn prefixed_literal(chars: &[char], word: &str, i: &mut usize) -> Option<Piece> {
    match (word, chars.get(*i)) {
        ("b", Some('\'')) => {
            let end = char_literal_end(chars, *i)?;
            *i = end;
            Some(Piece::Char)
        }
        ("b" | "c" | "r" | "br" | "cr", Some('"' | '#')) => {
            let raw = word.ends_with('r');
            let mut hashes = 0;
            while chars.get(*i + hashes) == Some(&'#') {
                hashes += 1;
            }
            if chars.get(*i + hashes) == Some(&'"') && (raw || hashes == 0) {
                let (body, end) = string_end(chars, *i + hashes, raw, hashes);
                *i = end;
                return Some(Piece::Str(body.0, body.1));
            }
            let ident_follows = chars.get(*i + 1).is_some_and(|c| is_ident_char(*c));
            if word == "r" && hashes == 1 && ident_follows {
                let from = *i + 1;
                *i = from;
                while chars.get(*i).is_some_and(|c| is_ident_char(*c)) {
                    *i += 1;
                }
                return Some(Piece::Code(Tok::Ident(chars[from..*i].iter().collect())));
            }
            None
        }
        _ => None,
    }
}

/// The index after the block comment that opens at `open` (`/*`), nested ones included.
fn block_comment_end(chars: &[char], open: usize) -> usize {
    let mut depth = 0usize;
    let mut i = open;
    while i < chars.len() {
        if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
            depth += 1;
            i += 2;
        } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
            depth -= 1;
            i += 2;
            if depth == 0 {
                return i;
            }
        } else {
            i += 1;
        }
    }
    chars.len()
}

/// The body (`from`, `to`) of the string whose opening quote is at `quote`, and the index
/// after its closing quote and `hashes` hashes. Escapes count only when it is not `raw`.
fn string_end(chars: &[char], quote: usize, raw: bool, hashes: usize) -> ((usize, usize), usize) {
    let from = quote + 1;
    let mut i = from;
    while i < chars.len() {
        match chars[i] {
            '\\' if !raw => i += 2,
            '"' if (1..=hashes).all(|k| chars.get(i + k) == Some(&'#')) => {
                return ((from, i), i + 1 + hashes);
            }
            _ => i += 1,
        }
    }
    ((from, chars.len().min(i)), chars.len())
}

/// The index after the char literal whose opening quote is at `quote`, or `None` when the
/// quote starts a lifetime or a label.
fn char_literal_end(chars: &[char], quote: usize) -> Option<usize> {
    if chars.get(quote + 1) == Some(&'\\') {
        // `'\n'`, `'\''`, `'\\'`, `'\x41'`, `'\u{1F600}'`: past the escaped character, to the
        // closing quote.
        let mut i = quote + 3;
        while i < chars.len() && chars[i] != '\'' {
            i += 1;
        }
        return Some((i + 1).min(chars.len()));
    }
    (chars.get(quote + 2) == Some(&'\'') && chars.get(quote + 1) != Some(&'\n'))
        .then_some(quote + 3)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idents(lexed: &Lexed) -> Vec<&str> {
        lexed
            .tokens
            .iter()
            .filter_map(|t| match &t.tok {
                Tok::Ident(word) => Some(word.as_str()),
                _ => None,
            })
            .collect()
    }

    fn strings(lexed: &Lexed) -> Vec<(usize, &str)> {
        lexed
            .strings
            .iter()
            .map(|s| (s.line, s.text.as_str()))
            .collect()
    }

    fn kinds(lexed: &Lexed) -> Vec<Tok> {
        lexed.tokens.iter().map(|t| t.tok.clone()).collect()
    }

    #[test]
    fn nested_block_comments_end_at_their_own_close() {
        let lexed = lex("a /* one /* two */ still } comment */ b\n/* x\ny */ c");
        assert_eq!(idents(&lexed), ["a", "b", "c"]);
        assert_eq!(lexed.tokens[2].line, 3);
        assert_eq!(lexed.comments.len(), 2);
        assert_eq!(
            lexed.comments[0].text,
            "/* one /* two */ still } comment */"
        );
        assert_eq!(lexed.code, "a  b\n\n c");
    }

    #[test]
    fn raw_strings_end_only_at_their_own_hashes() {
        let source = "let a = r#\"say \"}\" \"#; let b = br##\"x\"#y\"##; let c = r\"\\\"; d";
        let lexed = lex(source);
        assert_eq!(
            strings(&lexed),
            [(1, "say \"}\" "), (1, "x\"#y"), (1, "\\")]
        );
        assert_eq!(idents(&lexed), ["let", "a", "let", "b", "let", "c", "d"]);
        assert!(!lexed.code.contains('"'), "{}", lexed.code);
    }

    #[test]
    fn byte_and_c_strings_and_escaped_quotes_stay_one_literal() {
        let lexed = lex("f(b\"a\\\"}\", c\"z\", \"q\\\\\", \"two\nlines\");\ng()");
        assert_eq!(
            strings(&lexed),
            [(1, "a\\\"}"), (1, "z"), (1, "q\\\\"), (1, "two\nlines")]
        );
        assert_eq!(idents(&lexed), ["f", "g"]);
        let g = lexed
            .tokens
            .iter()
            .find(|t| t.tok == Tok::Ident("g".into()));
        assert_eq!(g.map(|t| t.line), Some(3));
        assert_eq!(lexed.code, "f(, , , \n);\ng()");
    }

    #[test]
    fn char_literals_are_not_lifetimes() {
        let lexed = lex(
            "fn f<'a>(x: &'a str) -> char { 'outer: loop { '}' } b'{'; '\\''; '\\\\'; '\\u{1F600}'; 'é' }",
        );
        let lifetimes = kinds(&lexed)
            .iter()
            .filter(|t| **t == Tok::Lifetime)
            .count();
        let literals = kinds(&lexed).iter().filter(|t| **t == Tok::Literal).count();
        assert_eq!((lifetimes, literals), (3, 6));
        let braces = |open: char| {
            kinds(&lexed)
                .iter()
                .filter(|t| **t == Tok::Punct(open))
                .count()
        };
        assert_eq!((braces('{'), braces('}')), (2, 2));
        assert_eq!(idents(&lexed), ["fn", "f", "x", "str", "char", "loop"]);
        assert!(lexed.strings.is_empty());
    }

    #[test]
    fn raw_identifiers_paths_and_numbers() {
        let lexed = lex("crate::r#type::X + 0x1f + 2u8 // r#\"not a string\n");
        assert_eq!(
            kinds(&lexed),
            [
                Tok::Ident("crate".into()),
                Tok::PathSep,
                Tok::Ident("type".into()),
                Tok::PathSep,
                Tok::Ident("X".into()),
                Tok::Punct('+'),
                Tok::Number,
                Tok::Punct('+'),
                Tok::Number,
            ]
        );
        assert_eq!(
            lexed.comments,
            [Comment {
                line: 1,
                text: "// r#\"not a string".into()
            }]
        );
    }
}
