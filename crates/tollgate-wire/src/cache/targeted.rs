//! Targeted cache-control fields (RFC 9213): `CDN-Cache-Control`, or the
//! name a zone gives ([`Options::targeted`]), read as this cache's own
//! `Cache-Control`.
//!
//! - Section 2.1 (syntax): the field is a Dictionary Structured Field (RFC
//!   8941 section 3.2, parsed by section 4.2; RFC 9651's Date and Display
//!   String items are accepted too). Every field line is joined with ", " and
//!   parsed as one value. A value that does not parse (an upper-case key, a
//!   trailing comma, `max-age=1.5.2`, a bad string) or an empty one makes the
//!   field absent: the cache goes by `Cache-Control` and `Expires`.
//! - Values are mapped to directive arguments as the section says and the
//!   `Cache-Control` parser (control.rs) then applies them, so directives
//!   mean the same in both: a directive without value is Boolean true; `?0`
//!   is false, as if not there; a non-negative Integer is delta-seconds; a
//!   String is a quoted argument (`no-cache="set-cookie"`, `private="x"`).
//!   Anything else (a negative number, a Decimal, a Token, a String for a
//!   delta-seconds directive, an inner list, ...) violates the directive's
//!   inferred type, which the section says not to consume: it is an invalid
//!   argument, read as control.rs reads one (most restrictively: `max-age`
//!   and `s-maxage` 0, the stale windows absent, `no-cache` / `private`
//!   unqualified). Parameters are ignored. Of a key given twice the last
//!   counts (RFC 8941 section 4.2.2, unlike `Cache-Control`'s first).
//! - Section 2.2 (cache behaviour): when the field is there and valid, its
//!   directives are the response's for this cache, and `Cache-Control` and
//!   `Expires` are ignored altogether; every directive the cache implements
//!   works in it (max-age, s-maxage, no-store, no-cache, private, public,
//!   must-revalidate, proxy-revalidate, must-understand, immutable,
//!   stale-while-revalidate, stale-if-error). Unknown directives are ignored,
//!   but make the field non-empty: `CDN-Cache-Control: none` means "no
//!   directive for this cache", not "use Cache-Control" (section 3's example).
//!
//! Pure: bytes in, directives out.
//!
//! [`Options::targeted`]: super::policy::Options::targeted

use super::control::{Arg, CacheControl};
use tollgate_config::HeaderLookup;
use tollgate_config::is_tchar;

/// The directives of the targeted field `name` in `resp` when it is present
/// with a valid, non-empty value (RFC 9213 sections 2.1 and 2.2); `None`
/// otherwise.
pub fn directives(resp: &dyn HeaderLookup, name: &str) -> Option<CacheControl> {
    let mut joined = Vec::new();
    let mut lines = 0;
    resp.any_value(name, &mut |v| {
        if lines > 0 {
            joined.extend_from_slice(b", ");
        }
        lines += 1;
        joined.extend_from_slice(v);
        false
    });
    if lines == 0 {
        return None;
    }
    let members = parse_dictionary(&joined)?;
    if members.is_empty() {
        return None;
    }
    let mut cc = CacheControl::default();
    cc.targeted = true;
    for (key, value) in members {
        let arg = match value {
            Value::Bool(false) => continue,
            Value::Bool(true) => Arg::None,
            Value::Integer(digits) if !digits.starts_with(b"-") => Arg::Token(digits),
            Value::String(raw) if !takes_delta_seconds(key) => Arg::Quoted(raw),
            _ => Arg::Invalid,
        };
        cc.apply(key, arg);
    }
    Some(cc)
}

/// Directives whose argument is delta-seconds (RFC 9111 section 1.2.2): an
/// Integer in a structured field, never a String.
fn takes_delta_seconds(key: &[u8]) -> bool {
    matches!(
        key,
        b"max-age" | b"s-maxage" | b"stale-while-revalidate" | b"stale-if-error" | b"max-stale" | b"min-fresh"
    )
}

/// A dictionary member's value, as far as the directives need it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Value<'a> {
    Bool(bool),
    /// `-?[0-9]{1,15}`, as received.
    Integer(&'a [u8]),
    /// The characters between the quotes, escapes left as they are.
    String(&'a [u8]),
    /// A Decimal, Token, Byte Sequence, Date, Display String or inner list.
    Other,
}

/// RFC 8941 section 4.2 with 4.2.2: a Dictionary, its members in order
/// (a key given again replaces the earlier member's value); `None` when
/// the input does not parse.
fn parse_dictionary(input: &[u8]) -> Option<Vec<(&[u8], Value<'_>)>> {
    let mut p = Parser { s: input, i: 0 };
    p.skip_sp();
    let mut out: Vec<(&[u8], Value<'_>)> = Vec::new();
    if p.done() {
        return Some(out);
    }
    loop {
        let key = p.key()?;
        let value = if p.eat(b'=') {
            p.item_or_inner_list()?
        } else {
            p.parameters()?;
            Value::Bool(true)
        };
        match out.iter_mut().find(|(k, _)| *k == key) {
            Some(m) => m.1 = value,
            None => out.push((key, value)),
        }
        p.skip_ows();
        if p.done() {
            return Some(out);
        }
        if !p.eat(b',') {
            return None;
        }
        p.skip_ows();
        if p.done() {
            // A trailing comma.
            return None;
        }
    }
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl<'a> Parser<'a> {
    fn done(&self) -> bool {
        self.i >= self.s.len()
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn eat(&mut self, b: u8) -> bool {
        let hit = self.peek() == Some(b);
        self.i += usize::from(hit);
        hit
    }

    fn skip_sp(&mut self) {
        while self.peek() == Some(b' ') {
            self.i += 1;
        }
    }

    fn skip_ows(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.i += 1;
        }
    }

    /// Section 4.2.3.3: `( lcalpha / "*" ) *( lcalpha / DIGIT / "_" / "-" / "." / "*" )`.
    fn key(&mut self) -> Option<&'a [u8]> {
        let start = self.i;
        if !matches!(self.peek(), Some(b'a'..=b'z' | b'*')) {
            return None;
        }
        while matches!(self.peek(), Some(b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'.' | b'*')) {
            self.i += 1;
        }
        Some(&self.s[start..self.i])
    }

    /// Section 4.2.1.1.
    fn item_or_inner_list(&mut self) -> Option<Value<'a>> {
        if self.peek() == Some(b'(') {
            self.inner_list()?;
            return Some(Value::Other);
        }
        let v = self.bare_item()?;
        self.parameters()?;
        Some(v)
    }

    /// Section 4.2.1.2.
    fn inner_list(&mut self) -> Option<()> {
        self.i += 1;
        loop {
            self.skip_sp();
            if self.eat(b')') {
                return self.parameters();
            }
            self.bare_item()?;
            self.parameters()?;
            if !matches!(self.peek(), Some(b' ' | b')')) {
                return None;
            }
        }
    }

    /// Section 4.2.3.2: `*( ";" *SP key [ "=" bare-item ] )`; the values are not kept.
    fn parameters(&mut self) -> Option<()> {
        while self.eat(b';') {
            self.skip_sp();
            self.key()?;
            if self.eat(b'=') {
                self.bare_item()?;
            }
        }
        Some(())
    }

    /// Section 4.2.3.1 (and RFC 9651's `@` Date and `%` Display String).
    fn bare_item(&mut self) -> Option<Value<'a>> {
        match self.peek()? {
            b'-' | b'0'..=b'9' => self.number(),
            b'"' => self.string().map(Value::String),
            b'A'..=b'Z' | b'a'..=b'z' | b'*' => {
                self.i += 1;
                while self.peek().is_some_and(|b| is_tchar(b) || b == b':' || b == b'/') {
                    self.i += 1;
                }
                Some(Value::Other)
            }
            b':' => {
                self.i += 1;
                while self.peek().is_some_and(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=')) {
                    self.i += 1;
                }
                self.eat(b':').then_some(Value::Other)
            }
            b'?' => {
                self.i += 1;
                let v = match self.peek()? {
                    b'0' => false,
                    b'1' => true,
                    _ => return None,
                };
                self.i += 1;
                Some(Value::Bool(v))
            }
            b'@' => {
                self.i += 1;
                matches!(self.number()?, Value::Integer(_)).then_some(Value::Other)
            }
            b'%' => {
                self.i += 1;
                self.display_string().then_some(Value::Other)
            }
            _ => None,
        }
    }

    /// Section 4.2.4: an Integer (at most 15 digits) or a Decimal (at most 12
    /// digits, ".", 1 to 3 digits).
    fn number(&mut self) -> Option<Value<'a>> {
        let start = self.i;
        self.eat(b'-');
        let digits_at = self.i;
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.i += 1;
        }
        let int_len = self.i - digits_at;
        if int_len == 0 {
            return None;
        }
        if !self.eat(b'.') {
            return (int_len <= 15).then(|| Value::Integer(&self.s[start..self.i]));
        }
        let frac_at = self.i;
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.i += 1;
        }
        let frac_len = self.i - frac_at;
        (int_len <= 12 && (1..=3).contains(&frac_len)).then_some(Value::Other)
    }

    /// Section 4.2.5: the characters between the quotes (printable ASCII,
    /// `\"` and `\\` escaped).
    fn string(&mut self) -> Option<&'a [u8]> {
        self.i += 1;
        let start = self.i;
        loop {
            match self.peek()? {
                b'\\' => {
                    self.i += 1;
                    if !matches!(self.peek()?, b'"' | b'\\') {
                        return None;
                    }
                    self.i += 1;
                }
                b'"' => {
                    let s = &self.s[start..self.i];
                    self.i += 1;
                    return Some(s);
                }
                0x20..=0x7e => self.i += 1,
                _ => return None,
            }
        }
    }

    /// RFC 9651 section 4.2.10: `%"` then printable ASCII with `%xx` (lower
    /// case hex) escapes, to the closing quote.
    fn display_string(&mut self) -> bool {
        if !self.eat(b'"') {
            return false;
        }
        loop {
            match self.peek() {
                Some(b'"') => {
                    self.i += 1;
                    return true;
                }
                Some(b'%') => {
                    let hex = |b: Option<&u8>| matches!(b, Some(b'0'..=b'9' | b'a'..=b'f'));
                    if !(hex(self.s.get(self.i + 1)) && hex(self.s.get(self.i + 2))) {
                        return false;
                    }
                    self.i += 3;
                }
                Some(0x20..=0x7e) => self.i += 1,
                _ => return false,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::testing::H;

    const CDN: &str = "cdn-cache-control";

    fn cdn(v: &str) -> Option<CacheControl> {
        directives(&H::new(&[("CDN-Cache-Control", v)]), CDN)
    }

    #[test]
    fn rfc9213_2_1_a_dictionary_of_directives() {
        let c = cdn("max-age=600, stale-while-revalidate=30, stale-if-error=60, must-revalidate").unwrap();
        assert_eq!((c.max_age, c.stale_while_revalidate, c.stale_if_error), (Some(600), Some(30), Some(60)));
        assert!(c.must_revalidate() && c.targeted);
        let c = cdn("s-maxage=5, public, immutable, proxy-revalidate").unwrap();
        assert_eq!(c.s_maxage, Some(5));
        assert!(c.public() && c.immutable() && c.proxy_revalidate());
        assert!(cdn("no-store").unwrap().no_store());
        assert!(cdn("private").unwrap().private_unqualified());
        // Strings carry field lists; Booleans the bare forms.
        let c = cdn(r#"no-cache="set-cookie, x-a", private="x-b""#).unwrap();
        assert!(c.no_cache() && !c.no_cache_unqualified() && !c.private_unqualified());
        assert_eq!(c.no_cache_fields, [Box::from("set-cookie"), Box::from("x-a")]);
        assert_eq!(c.private_fields, [Box::from("x-b")]);
        assert!(cdn("no-cache=?1").unwrap().no_cache_unqualified());
        // ?0 is false: as if not there.
        let c = cdn("no-store=?0, max-age=60").unwrap();
        assert!(!c.no_store() && c.max_age == Some(60));
        // Every field line, joined; parameters ignored; unknown members ignored.
        let c = directives(&H::new(&[("CDN-Cache-Control", "max-age=60"), ("cdn-cache-control", "no-cache")]), CDN);
        assert!(c.is_some_and(|c| c.max_age == Some(60) && c.no_cache()));
        assert_eq!(cdn("max-age=60;foo=bar, x-ext=(1 2);a").unwrap().max_age, Some(60));
        // Whitespace the grammar allows.
        assert_eq!(cdn("  max-age=7 ,\tpublic").unwrap().max_age, Some(7));
    }

    #[test]
    fn rfc9213_2_1_values_of_another_type_are_not_consumed() {
        // Not delta-seconds: read as an invalid argument (max-age 0: stale).
        for bad in ["max-age=1.5", "max-age=-1", "max-age=\"60\"", "max-age=sixty", "max-age", "max-age=?1"] {
            assert_eq!(cdn(bad).unwrap().max_age, Some(0), "{bad}");
        }
        // Widening directives with a bad argument are absent.
        let c = cdn("stale-if-error=1.0, stale-while-revalidate=\"5\"").unwrap();
        assert_eq!((c.stale_if_error, c.stale_while_revalidate), (None, None));
        // A Token where a String is expected: the restrictive, unqualified form.
        assert!(cdn("no-cache=set-cookie").unwrap().no_cache_unqualified());
        // Large integers saturate like delta-seconds.
        assert_eq!(cdn("max-age=999999999999999").unwrap().max_age, Some(super::super::control::DELTA_MAX));
    }

    #[test]
    fn rfc9213_2_1_the_last_of_a_repeated_key_counts() {
        assert_eq!(cdn("max-age=1, max-age=60").unwrap().max_age, Some(60));
        let c = cdn("no-store, no-store=?0").unwrap();
        assert!(!c.no_store());
    }

    #[test]
    fn rfc9213_2_1_empty_or_invalid_fields_are_ignored() {
        assert_eq!(directives(&H::new(&[("Cache-Control", "max-age=1")]), CDN), None, "absent");
        for bad in [
            "",
            "   ",
            "Max-Age=60",
            "max-age=60,",
            "max-age=60,,public",
            ", max-age=60",
            "max-age=60 public",
            "max-age=60; Foo",
            "max-age=1.2345",
            "max-age=1234567890123.5",
            "max-age=1234567890123456",
            "max-age=1.",
            "x=\"unterminated",
            "x=\"bad\\escape\"",
            "x=\"tab\there\"",
            "x=?2",
            "x=(1 2",
            "x=(1,2)",
            "x=:abc",
            "x=@1.5",
            "x=%\"%zz\"",
            "x=é",
            "max-age=60\u{7f}",
        ] {
            assert_eq!(cdn(bad), None, "{bad:?}");
        }
        // One bad line spoils the whole field.
        let two = H::new(&[("CDN-Cache-Control", "max-age=60"), ("CDN-Cache-Control", "Bad")]);
        assert_eq!(directives(&two, CDN), None);
    }

    #[test]
    fn rfc9213_3_none_is_a_valid_field_with_no_known_directive() {
        let c = cdn("none").unwrap();
        assert!(c.targeted && c.is_empty() && c.max_age.is_none());
        // RFC 9651 items parse (and mean nothing to a directive).
        for ok in ["x=@1659578233", "x=%\"caf%c3%a9\"", "x=:cHJldGVuZA==:", "x=tok/en:1", "x=*", "x=()"] {
            assert!(cdn(ok).is_some(), "{ok}");
        }
    }

    #[test]
    fn rfc9213_2_2_another_name_on_the_target_list() {
        let resp = H::new(&[("Tollgate-Cache-Control", "max-age=5"), ("CDN-Cache-Control", "max-age=9")]);
        assert_eq!(directives(&resp, "tollgate-cache-control").and_then(|c| c.max_age), Some(5));
        assert_eq!(directives(&resp, CDN).and_then(|c| c.max_age), Some(9));
    }
}
