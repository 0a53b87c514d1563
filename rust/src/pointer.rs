//! JSON Pointer (RFC 6901): parsing, escaping and array-index tokens.
//!
//! Pure: no I/O, no clock, no Python. A [`Pointer`] is only syntax; what a token means (an object
//! key, an array index, the `-` past-the-end marker) is decided by the container it meets, which
//! is the patch engine's job (`crate::patch`).

use std::borrow::Cow;
use std::fmt;

/// A parsed JSON Pointer: the unescaped reference tokens, root first. `""` has no tokens.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Pointer {
    tokens: Vec<String>,
}

/// Why a string is not a JSON Pointer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PointerError {
    /// Non-empty and not starting with `/`.
    MissingSlash,
    /// `~` followed by something other than `0` or `1` (or by nothing), at this byte offset.
    BadEscape(usize),
}

impl PointerError {
    /// Stable snake_case code.
    pub fn code(&self) -> &'static str {
        match self {
            PointerError::MissingSlash => "pointer_missing_slash",
            PointerError::BadEscape(_) => "pointer_bad_escape",
        }
    }
}

impl fmt::Display for PointerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PointerError::MissingSlash => {
                f.write_str("a non-empty JSON Pointer must start with '/'")
            }
            PointerError::BadEscape(at) => {
                write!(f, "'~' at byte {at} must be followed by '0' or '1'")
            }
        }
    }
}

/// An array reference token, as RFC 6901 section 4 and RFC 6902 section 4.1 read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Index {
    /// `0` or `[1-9][0-9]*` that fits in `usize`.
    At(usize),
    /// `-`: the (nonexistent) element after the last one.
    End,
    /// Digits with a valid shape but too large for any array: always out of range.
    TooLarge,
    /// Anything else (`01`, `+1`, `-0`, ` 1`, ``, `1.0`, `x`).
    Invalid,
}

/// Classify an array reference token without allocating. Never overflows.
pub fn parse_index(token: &str) -> Index {
    let bytes = token.as_bytes();
    match bytes {
        [] => Index::Invalid,
        [b'-'] => Index::End,
        [b'0'] => Index::At(0),
        [b'0', ..] => Index::Invalid,
        _ if bytes.iter().all(u8::is_ascii_digit) => {
            let mut n: usize = 0;
            for &b in bytes {
                let digit = usize::from(b - b'0');
                match n.checked_mul(10).and_then(|m| m.checked_add(digit)) {
                    Some(m) => n = m,
                    None => return Index::TooLarge,
                }
            }
            Index::At(n)
        }
        _ => Index::Invalid,
    }
}

impl Pointer {
    /// The pointer to the whole document (`""`).
    pub fn root() -> Self {
        Pointer { tokens: Vec::new() }
    }

    /// Parse RFC 6901 text: `""`, or `/`-separated tokens with `~0` (`~`) and `~1` (`/`) escapes.
    pub fn parse(text: &str) -> Result<Self, PointerError> {
        if text.is_empty() {
            return Ok(Pointer::root());
        }
        let Some(rest) = text.strip_prefix('/') else {
            return Err(PointerError::MissingSlash);
        };
        let mut tokens = Vec::new();
        let mut offset = 1;
        for raw in rest.split('/') {
            tokens.push(unescape(raw, offset)?);
            offset += raw.len() + 1;
        }
        Ok(Pointer { tokens })
    }

    /// Build a pointer from unescaped tokens.
    pub fn from_tokens(tokens: Vec<String>) -> Self {
        Pointer { tokens }
    }

    /// The unescaped reference tokens, root first.
    pub fn tokens(&self) -> &[String] {
        &self.tokens
    }

    /// True for `""`, the whole document.
    pub fn is_root(&self) -> bool {
        self.tokens.is_empty()
    }

    /// All tokens but the last (the parent's pointer); empty for the root.
    pub fn parent_tokens(&self) -> &[String] {
        match self.tokens.split_last() {
            Some((_, parent)) => parent,
            None => &[],
        }
    }

    /// The last token, `None` for the root.
    pub fn last(&self) -> Option<&str> {
        self.tokens.last().map(String::as_str)
    }

    /// True when `self` is a strict token-prefix of `other` (`/a` of `/a/b`, not of `/ab`).
    pub fn is_proper_prefix_of(&self, other: &Pointer) -> bool {
        self.tokens.len() < other.tokens.len() && other.tokens.starts_with(&self.tokens)
    }

    /// Append one unescaped token.
    pub fn push(&mut self, token: impl Into<String>) {
        self.tokens.push(token.into());
    }

    /// Remove the last token.
    pub fn pop(&mut self) -> Option<String> {
        self.tokens.pop()
    }
}

impl fmt::Display for Pointer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for token in &self.tokens {
            f.write_str("/")?;
            f.write_str(&escape(token))?;
        }
        Ok(())
    }
}

/// Escape one token for use in pointer text (`~` first, then `/`).
pub fn escape(token: &str) -> Cow<'_, str> {
    if token.contains(['~', '/']) {
        Cow::Owned(token.replace('~', "~0").replace('/', "~1"))
    } else {
        Cow::Borrowed(token)
    }
}

fn unescape(raw: &str, offset: usize) -> Result<String, PointerError> {
    if !raw.contains('~') {
        return Ok(raw.to_owned());
    }
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.char_indices();
    while let Some((i, c)) = chars.next() {
        if c != '~' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some((_, '0')) => out.push('~'),
            Some((_, '1')) => out.push('/'),
            _ => return Err(PointerError::BadEscape(offset + i)),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(p: &str) -> Vec<String> {
        Pointer::parse(p).unwrap().tokens().to_vec()
    }

    #[test]
    fn parses_rfc6901_examples() {
        assert!(toks("").is_empty());
        assert_eq!(toks("/"), vec![""]);
        assert_eq!(toks("/foo/0"), vec!["foo", "0"]);
        assert_eq!(toks("/a~1b"), vec!["a/b"]);
        assert_eq!(toks("/m~0n"), vec!["m~n"]);
        // `~01` is `~` then `1`, never `/`.
        assert_eq!(toks("/~01"), vec!["~1"]);
        assert_eq!(toks("//"), vec!["", ""]);
    }

    #[test]
    fn rejects_bad_syntax() {
        assert_eq!(Pointer::parse("a"), Err(PointerError::MissingSlash));
        assert_eq!(Pointer::parse("/a~2"), Err(PointerError::BadEscape(2)));
        assert_eq!(Pointer::parse("/a~"), Err(PointerError::BadEscape(2)));
        assert_eq!(Pointer::parse("/x/~"), Err(PointerError::BadEscape(3)));
    }

    #[test]
    fn display_round_trips() {
        for text in ["", "/", "/a~1b/m~0n/0", "/~01", "//x"] {
            assert_eq!(Pointer::parse(text).unwrap().to_string(), text);
        }
    }

    #[test]
    fn array_index_grammar() {
        assert_eq!(parse_index("0"), Index::At(0));
        assert_eq!(parse_index("10"), Index::At(10));
        assert_eq!(parse_index("-"), Index::End);
        for bad in [
            "01", "+1", "-0", "-1", " 1", "1 ", "", "1.0", "1e2", "x", "0x1",
        ] {
            assert_eq!(parse_index(bad), Index::Invalid, "{bad:?}");
        }
        assert_eq!(
            parse_index("99999999999999999999999999999999"),
            Index::TooLarge
        );
    }

    #[test]
    fn proper_prefix_is_token_wise() {
        let a = Pointer::parse("/a").unwrap();
        assert!(a.is_proper_prefix_of(&Pointer::parse("/a/b").unwrap()));
        assert!(!a.is_proper_prefix_of(&Pointer::parse("/ab").unwrap()));
        assert!(!a.is_proper_prefix_of(&a));
        assert!(Pointer::root().is_proper_prefix_of(&a));
    }
}
