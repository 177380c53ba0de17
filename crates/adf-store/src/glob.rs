//! The one glob dialect of the format, for paths and names (trigger `watch` filters, log
//! `rules` origins, `on_logs` filters): `*` matches within one path segment, `**` across
//! segments, `?` one character other than `/`. Everything else is literal.

/// Whether `text` matches `pattern`.
pub fn matches(pattern: &str, text: &str) -> bool {
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
