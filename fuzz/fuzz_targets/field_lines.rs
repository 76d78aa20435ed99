//! The input form of the targets that load a head from fields (h2_fields,
//! h2_response_fields): after their own first lines, each line with a `:` is
//! a field (name before it, value after).

/// The fields of `lines`; `None` when one is a field HTTP/1.1 text cannot
/// carry (a name that is empty or holds whitespace or CR, a CR in a value), so
/// that the text and the fields paths see the same head.
pub fn fields<'a>(lines: impl Iterator<Item = &'a [u8]>) -> Option<Vec<(&'a [u8], &'a [u8])>> {
    let mut fields = Vec::new();
    for line in lines {
        let Some(colon) = line.iter().position(|b| *b == b':') else { continue };
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        if name.is_empty() || name.iter().any(|b| b.is_ascii_whitespace()) || value.contains(&b'\r') {
            return None;
        }
        fields.push((name, value));
    }
    Some(fields)
}
