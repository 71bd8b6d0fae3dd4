//! Names as GNU ls shows them on a terminal (its `shell-escape` quoting): a name holding
//! a control character, a bidirectional-text control or bytes that are not UTF-8 is
//! printed quoted, those characters as `$'\n'` or octal byte escapes, so that a name
//! can neither move the cursor, reorder the line, nor pass for two entries. Other
//! names are printed as they are.

/// Unicode's bidirectional controls (embeddings, overrides, isolates, marks), which
/// reorder what follows them on a terminal.
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

fn needs_escape(c: char) -> bool {
    c.is_control() || is_bidi_control(c)
}

/// `name` fit to print on one line of a listing.
pub fn name(name: &[u8]) -> String {
    match std::str::from_utf8(name) {
        Ok(text) if !text.chars().any(needs_escape) => text.to_owned(),
        _ => quoted(name),
    }
}

/// The shell-escape form: printable runs in single quotes, the rest in `$'...'`.
fn quoted(name: &[u8]) -> String {
    let mut out = String::new();
    let mut plain = String::new();
    let mut escaped = String::new();
    let flush_plain = |out: &mut String, plain: &mut String| {
        if !plain.is_empty() {
            out.push('\'');
            out.push_str(&plain.replace('\'', "'\\''"));
            out.push('\'');
            plain.clear();
        }
    };
    let flush_escaped = |out: &mut String, escaped: &mut String| {
        if !escaped.is_empty() {
            out.push_str("$'");
            out.push_str(escaped);
            out.push('\'');
            escaped.clear();
        }
    };
    for chunk in name.utf8_chunks() {
        for c in chunk.valid().chars() {
            if needs_escape(c) {
                flush_plain(&mut out, &mut plain);
                match c {
                    '\x07' => escaped.push_str("\\a"),
                    '\x08' => escaped.push_str("\\b"),
                    '\t' => escaped.push_str("\\t"),
                    '\n' => escaped.push_str("\\n"),
                    '\x0b' => escaped.push_str("\\v"),
                    '\x0c' => escaped.push_str("\\f"),
                    '\r' => escaped.push_str("\\r"),
                    _ => {
                        let mut bytes = [0u8; 4];
                        for b in c.encode_utf8(&mut bytes).bytes() {
                            escaped.push_str(&format!("\\{b:03o}"));
                        }
                    }
                }
            } else {
                flush_escaped(&mut out, &mut escaped);
                plain.push(c);
            }
        }
        if !chunk.invalid().is_empty() {
            flush_plain(&mut out, &mut plain);
            for b in chunk.invalid() {
                escaped.push_str(&format!("\\{b:03o}"));
            }
        }
    }
    flush_plain(&mut out, &mut plain);
    flush_escaped(&mut out, &mut escaped);
    out
}

#[cfg(test)]
mod tests {
    use super::name;

    #[test]
    fn plain_names_are_left_alone_and_others_are_shell_escaped_as_gnu_ls_does() {
        assert_eq!(name(b"plain name.txt"), "plain name.txt");
        assert_eq!(name("caf\u{e9}".as_bytes()), "caf\u{e9}");
        // GNU ls on a terminal: 'a'$'\n''b'
        assert_eq!(name(b"a\nb"), "'a'$'\\n''b'");
        assert_eq!(name(b"\tx"), "$'\\t''x'");
        assert_eq!(name(b"it's\x01"), "'it'\\''s'$'\\001'");
        // U+202E RIGHT-TO-LEFT OVERRIDE as its UTF-8 bytes.
        assert_eq!(
            name("a\u{202E}txt.exe".as_bytes()),
            "'a'$'\\342\\200\\256''txt.exe'"
        );
        assert_eq!(name(b"x\xff"), "'x'$'\\377'");
        assert_eq!(name(b"\x1b[31m"), "$'\\033''[31m'");
    }
}
