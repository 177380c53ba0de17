//! The one glob dialect of the format, for paths and names (trigger `watch` filters, log
//! `rules` origins, `on_logs` filters): `*` matches within one path segment, `**` across
//! segments, `?` one character other than `/`. Everything else is literal.
//!
//! Patterns come from agents and configs, so matching must not backtrack: the pattern is run
//! as a small NFA (one state per pattern token, the set of live states advanced one text
//! character at a time), which costs at most `pattern tokens × text characters` steps whatever
//! the pattern, where a backtracking matcher is exponential on `**a**a**a…`.

/// One element of a pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    /// `*`: any run of characters other than `/`, possibly empty.
    Star,
    /// `**`: any run of characters, possibly empty.
    DoubleStar,
    /// `?`: one character other than `/`.
    AnyOne,
    Literal(char),
}

fn tokens(pattern: &str) -> Vec<Token> {
    let mut out = Vec::new();
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        out.push(match c {
            '*' if chars.peek() == Some(&'*') => {
                chars.next();
                Token::DoubleStar
            }
            '*' => Token::Star,
            '?' => Token::AnyOne,
            other => Token::Literal(other),
        });
    }
    out
}

/// Whether `text` matches `pattern`.
pub fn matches(pattern: &str, text: &str) -> bool {
    matches_counting(pattern, text).0
}

/// [`matches`], also returning how many state steps it took: the bound tests hold it to.
#[doc(hidden)]
pub fn matches_counting(pattern: &str, text: &str) -> (bool, u64) {
    let pattern = tokens(pattern);
    let states = pattern.len() + 1;
    let mut steps: u64 = 0;
    // `live[i]`: the first `i` tokens can have matched the text read so far.
    let mut live = vec![false; states];
    let mut next = vec![false; states];
    live[0] = true;
    close_over_stars(&pattern, &mut live);
    for c in text.chars() {
        next.iter_mut().for_each(|state| *state = false);
        let mut any = false;
        for (index, token) in pattern.iter().enumerate() {
            steps += 1;
            if !live[index] {
                continue;
            }
            let (stay, advance) = match *token {
                Token::Star => (c != '/', false),
                Token::DoubleStar => (true, false),
                Token::AnyOne => (false, c != '/'),
                Token::Literal(wanted) => (false, c == wanted),
            };
            if stay {
                next[index] = true;
                any = true;
            }
            if advance {
                next[index + 1] = true;
                any = true;
            }
        }
        if !any {
            return (false, steps);
        }
        close_over_stars(&pattern, &mut next);
        std::mem::swap(&mut live, &mut next);
    }
    (live[pattern.len()], steps)
}

/// A star matches the empty run, so a live state before one makes the state after it live.
fn close_over_stars(pattern: &[Token], live: &mut [bool]) {
    for (index, token) in pattern.iter().enumerate() {
        if live[index] && matches!(token, Token::Star | Token::DoubleStar) {
            live[index + 1] = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The backtracking matcher this module replaced, kept as the reference of the dialect.
    fn backtracking(pattern: &str, text: &str) -> bool {
        fn inner(p: &[char], t: &[char]) -> bool {
            match p.first() {
                None => t.is_empty(),
                Some('*') if p.get(1) == Some(&'*') => {
                    let rest = &p[2..];
                    (0..=t.len()).any(|i| inner(rest, &t[i..]))
                }
                Some('*') => {
                    let rest = &p[1..];
                    let mut i = 0;
                    loop {
                        if inner(rest, &t[i..]) {
                            return true;
                        }
                        if i == t.len() || t[i] == '/' {
                            return false;
                        }
                        i += 1;
                    }
                }
                Some('?') => !t.is_empty() && t[0] != '/' && inner(&p[1..], &t[1..]),
                Some(c) => t.first() == Some(c) && inner(&p[1..], &t[1..]),
            }
        }
        let p: Vec<char> = pattern.chars().collect();
        let t: Vec<char> = text.chars().collect();
        inner(&p, &t)
    }

    #[test]
    fn dialect_examples() {
        assert!(matches("*.md", "notes.md"));
        assert!(!matches("*.md", "dir/notes.md"));
        assert!(matches("**.md", "dir/notes.md"));
        assert!(matches("docs/**", "docs/a/b/c"));
        assert!(matches("a?c", "abc"));
        assert!(!matches("a?c", "a/c"));
        assert!(matches("***", "a/b"));
        assert!(matches("", ""));
        assert!(!matches("", "a"));
        assert!(matches("tool.*", "tool.fs_read"));
        assert!(!matches("tool.*", "tools.fs_read"));
    }

    #[test]
    fn pathological_pattern_takes_linear_steps() {
        // 40 `**a` groups against 60 `a`s then a `b`: a backtracking matcher explores
        // C(60, 40) splits before failing; the NFA reads each character once.
        let pattern = "**a".repeat(40) + "c";
        let text = "a".repeat(60) + "b";
        let (matched, steps) = matches_counting(&pattern, &text);
        assert!(!matched);
        let bound = (tokens(&pattern).len() * text.chars().count()) as u64;
        assert!(steps <= bound, "{steps} steps, bound {bound}");
        let star_pattern = "*a".repeat(50);
        let (matched, steps) = matches_counting(&star_pattern, &"a".repeat(49));
        assert!(!matched);
        assert!(steps <= 100 * 49);
    }

    proptest! {
        #[test]
        fn agrees_with_the_backtracking_matcher(
            pattern in "[ab/*?]{0,8}",
            text in "[ab/]{0,8}",
        ) {
            prop_assert_eq!(matches(&pattern, &text), backtracking(&pattern, &text));
        }
    }
}
