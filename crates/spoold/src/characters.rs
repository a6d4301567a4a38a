//! The characters a key or a parameter a client gives may hold. A control character (NUL, tab,
//! newline, escape …) or an invisible one — a Unicode format character (the zero-width space
//! U+200B, the byte order mark U+FEFF, the bidi controls such as U+202E that reorder what a
//! terminal shows) or a line or paragraph separator (U+2028, U+2029) — is a mistake or an
//! attack in a key or an argument far more often than a value: it makes one string look like
//! another in a log, a terminal, a review. Task submissions refuse them in keys, and in
//! parameters unless the type's pattern names them (`tasks::types`); a delivery's
//! `fingerprint` refuses them too, and its idempotency key a NUL (spoold v0.1.0 took any
//! other). A NUL cannot be passed as an argument nor stored in PostgreSQL's `text` at all.

use std::fmt;

use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};

/// A character a value must not hold, by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unwanted {
    /// U+0000.
    Nul,
    /// Any other control character (Unicode's `Cc`: C0, DEL, C1).
    Control(char),
    /// A format character (`Cf`: zero-width characters, bidi controls, the byte order mark) or
    /// a line or paragraph separator (`Zl`, `Zp`).
    Invisible(char),
}

impl Unwanted {
    /// What `c` is, if it is unwanted.
    pub fn of(c: char) -> Option<Unwanted> {
        if c == '\0' {
            Some(Unwanted::Nul)
        } else if c.is_control() {
            Some(Unwanted::Control(c))
        } else if matches!(
            c.general_category(),
            GeneralCategory::Format
                | GeneralCategory::LineSeparator
                | GeneralCategory::ParagraphSeparator
        ) {
            Some(Unwanted::Invisible(c))
        } else {
            None
        }
    }

    /// The first unwanted character of `value`, NUL first: it is refused whatever else is
    /// allowed.
    pub fn find(value: &str) -> Option<Unwanted> {
        if value.contains('\0') {
            return Some(Unwanted::Nul);
        }
        value.chars().find_map(Unwanted::of)
    }
}

/// As a message says it: "a NUL byte", "the control character '\n'", "the invisible
/// character U+202E".
impl fmt::Display for Unwanted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unwanted::Nul => f.write_str("a NUL byte"),
            Unwanted::Control(c) => write!(f, "the control character {c:?}"),
            Unwanted::Invisible(c) => write!(f, "the invisible character U+{:04X}", u32::from(*c)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_format_characters_and_separators_are_unwanted() {
        let cases: [(&str, Option<Unwanted>); 14] = [
            ("plain: é ü 日本 🙂 [a-z] {x}", None),
            ("nbsp\u{a0}and ideographic\u{3000}space", None),
            ("a\0b\tc", Some(Unwanted::Nul)),
            ("tab\there\0", Some(Unwanted::Nul)),
            ("line\nbreak", Some(Unwanted::Control('\n'))),
            ("esc\u{1b}[2J", Some(Unwanted::Control('\u{1b}'))),
            ("del\u{7f}", Some(Unwanted::Control('\u{7f}'))),
            ("c1 next line\u{85}", Some(Unwanted::Control('\u{85}'))),
            (
                "line\u{2028}separator",
                Some(Unwanted::Invisible('\u{2028}')),
            ),
            ("para\u{2029}", Some(Unwanted::Invisible('\u{2029}'))),
            ("evil\u{202E}txt.exe", Some(Unwanted::Invisible('\u{202E}'))),
            ("zero\u{200B}width", Some(Unwanted::Invisible('\u{200B}'))),
            ("\u{FEFF}bom", Some(Unwanted::Invisible('\u{FEFF}'))),
            ("isolate\u{2066}", Some(Unwanted::Invisible('\u{2066}'))),
        ];
        for (value, want) in cases {
            assert_eq!(Unwanted::find(value), want, "{value:?}");
        }
        assert_eq!(
            Unwanted::Invisible('\u{202E}').to_string(),
            "the invisible character U+202E"
        );
        assert_eq!(
            Unwanted::Control('\n').to_string(),
            "the control character '\\n'"
        );
    }
}
