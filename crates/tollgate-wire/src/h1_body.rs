//! HTTP/1.1 message bodies (part of [`super`]): the chunked coding's
//! decoder (RFC 9112 section 7.1) and the cursor that tracks how much of a
//! body is left, by its framing.

use super::*;

/// Why a chunked body is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkError {
    /// Not chunked syntax (RFC 9112 section 7.1).
    Syntax,
    /// A chunk size over 2^56 or trailers over [`MAX_TRAILERS`].
    TooLarge,
    /// A request trailer naming a field the message was framed or routed by
    /// ([`Chunked::refuse_framing_trailers`]).
    FramingTrailer,
}

/// The longest name [`is_hop_by_hop`] or [`is_framing`] knows
/// (`transfer-encoding`): a longer trailer name is neither.
const FRAMING_NAME_MAX: usize = 17;

/// Most trailer-section bytes accepted.
pub const MAX_TRAILERS: usize = 16 * 1024;
/// Most chunk-extension bytes accepted on one chunk line.
const MAX_EXT: usize = 4 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    /// Reading hex digits (`digits` so far).
    Size,
    /// After the size or an extension: whitespace, then `;` or CR.
    ExtWs,
    /// After `;`: whitespace, then an extension's name.
    ExtNameWs,
    /// In an extension's name (a token).
    ExtName,
    /// After the name and whitespace: `=`, `;` or CR.
    ExtAfterName,
    /// After `=`: whitespace, then a token or a quoted string.
    ExtValWs,
    /// In a token value.
    ExtToken,
    /// In a quoted-string value, after its opening quote.
    ExtQuoted,
    /// After a backslash in a quoted string.
    ExtQuotedPair,
    /// CR seen after the size line, LF expected.
    SizeLf,
    Data,
    /// CR expected after chunk data.
    DataCr,
    DataLf,
    /// At the start of a trailer line (or the final empty line).
    TrailerStart,
    /// In a trailer field's name, before its colon.
    TrailerName,
    /// In a trailer field's value.
    TrailerLine,
    TrailerLf,
    /// CR of the final empty line seen.
    EndLf,
    Done,
}

/// Walks a chunked body (RFC 9112 section 7.1), strictly: CRLF line ends, hex
/// sizes without overflow, extensions and trailers bounded and free of CTLs.
/// It reports where the body ends and, for de-chunking, where the data is.
///
/// A chunked body is forwarded as it came, extensions and trailers included,
/// so each is held to its grammar here: a chunk extension is `;` name, then
/// optionally `=` and a token or a complete quoted string (with whitespace
/// around `;` and `=`), and a trailer line is a token, a colon and a value.
/// A server that reads a quoted string across the line's end (an unclosed
/// quote) or takes what follows the size for more digits (`1 2`) would
/// otherwise frame the body differently from us.
#[derive(Debug, Clone)]
pub struct Chunked {
    state: ChunkState,
    size: u64,
    digits: u32,
    remaining: u64,
    ext: usize,
    trailers: usize,
    /// The trailer section's bytes, when asked for ([`Chunked::keep_trailers`]).
    kept: Option<Vec<u8>>,
    refuse_framing: bool,
    /// The current trailer name's first bytes, and its length (more than
    /// [`FRAMING_NAME_MAX`]: too long to frame or route the message).
    name: [u8; FRAMING_NAME_MAX],
    name_len: usize,
}

impl Default for Chunked {
    fn default() -> Self {
        Self::new()
    }
}

impl Chunked {
    pub fn new() -> Self {
        Chunked {
            state: ChunkState::Size,
            size: 0,
            digits: 0,
            remaining: 0,
            ext: 0,
            trailers: 0,
            kept: None,
            refuse_framing: false,
            name: [0; FRAMING_NAME_MAX],
            name_len: 0,
        }
    }

    /// Refuses a trailer that frames or routes the message or belongs to the
    /// connection (RFC 9110 section 6.5.1: none may be a trailer), for a
    /// request's body: it goes to the server with its trailers as they came,
    /// and a server that folded one into the head would see a message other
    /// than the one we framed, routed and checked.
    pub fn refuse_framing_trailers(&mut self) {
        self.refuse_framing = true;
    }

    fn name_byte(&mut self, b: u8) {
        if let Some(slot) = self.name.get_mut(self.name_len) {
            *slot = b;
        }
        self.name_len = self.name_len.saturating_add(1);
    }

    fn names_framing(&self) -> bool {
        self.refuse_framing
            && self.name_len <= FRAMING_NAME_MAX
            && (is_hop_by_hop(&self.name[..self.name_len]) || is_framing(&self.name[..self.name_len]))
    }

    /// Keeps the trailer section as it goes by, for [`Chunked::trailers`].
    pub fn keep_trailers(&mut self) {
        self.kept = Some(Vec::new());
    }

    /// The trailer fields seen (with [`Chunked::keep_trailers`]), as name and
    /// value, the value trimmed.
    pub fn trailers(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.kept.as_deref().unwrap_or_default().split(|b| *b == b'\n').filter_map(|line| {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let colon = line.iter().position(|b| *b == b':')?;
            Some((&line[..colon], line[colon + 1..].trim_ascii()))
        })
    }

    pub fn is_done(&self) -> bool {
        self.state == ChunkState::Done
    }

    /// Consumes bytes of `input` up to the end of the body; `data` gets each range
    /// of chunk data. Returns how many bytes belong to the body (all of `input`
    /// unless the body ended inside it).
    pub fn feed(&mut self, input: &[u8], mut data: impl FnMut(std::ops::Range<usize>)) -> Result<usize, ChunkError> {
        use ChunkState::*;
        let mut i = 0;
        while i < input.len() {
            let b = input[i];
            if let Some(kept) = &mut self.kept
                && matches!(self.state, TrailerStart | TrailerName | TrailerLine | TrailerLf)
            {
                kept.push(b);
            }
            match self.state {
                Size => match hex(b) {
                    Some(d) => {
                        self.digits += 1;
                        if self.digits > 14 {
                            return Err(ChunkError::TooLarge);
                        }
                        self.size = self.size << 4 | d as u64;
                    }
                    None if self.digits == 0 => return Err(ChunkError::Syntax),
                    None if b == b'\r' => self.state = SizeLf,
                    None if b == b';' || b == b' ' || b == b'\t' => {
                        self.ext = 0;
                        self.state = if b == b';' { ExtNameWs } else { ExtWs };
                    }
                    None => return Err(ChunkError::Syntax),
                },
                ExtWs | ExtNameWs | ExtName | ExtAfterName | ExtValWs | ExtToken | ExtQuoted | ExtQuotedPair => {
                    self.ext += 1;
                    if self.ext > MAX_EXT {
                        return Err(ChunkError::TooLarge);
                    }
                    self.state = ext_step(self.state, b).ok_or(ChunkError::Syntax)?;
                }
                SizeLf => {
                    if b != b'\n' {
                        return Err(ChunkError::Syntax);
                    }
                    if self.size == 0 {
                        self.state = TrailerStart;
                    } else {
                        self.remaining = self.size;
                        self.state = Data;
                    }
                    self.size = 0;
                    self.digits = 0;
                }
                Data => {
                    let take = ((input.len() - i) as u64).min(self.remaining) as usize;
                    data(i..i + take);
                    self.remaining -= take as u64;
                    i += take;
                    if self.remaining == 0 {
                        self.state = DataCr;
                    }
                    continue;
                }
                DataCr => {
                    if b != b'\r' {
                        return Err(ChunkError::Syntax);
                    }
                    self.state = DataLf;
                }
                DataLf => {
                    if b != b'\n' {
                        return Err(ChunkError::Syntax);
                    }
                    self.state = Size;
                }
                TrailerStart => {
                    if b == b'\r' {
                        self.state = EndLf;
                    } else if is_tchar(b) {
                        self.name_len = 0;
                        self.name_byte(b);
                        self.state = TrailerName;
                    } else {
                        return Err(ChunkError::Syntax);
                    }
                }
                TrailerName => {
                    if b == b':' {
                        if self.names_framing() {
                            return Err(ChunkError::FramingTrailer);
                        }
                        self.state = TrailerLine;
                    } else if is_tchar(b) {
                        self.name_byte(b);
                    } else {
                        return Err(ChunkError::Syntax);
                    }
                }
                TrailerLine => {
                    if b == b'\r' {
                        self.state = TrailerLf;
                    } else if (b < 0x20 && b != b'\t') || b == 0x7f {
                        return Err(ChunkError::Syntax);
                    }
                }
                TrailerLf => {
                    if b != b'\n' {
                        return Err(ChunkError::Syntax);
                    }
                    self.state = TrailerStart;
                }
                EndLf => {
                    if b != b'\n' {
                        return Err(ChunkError::Syntax);
                    }
                    self.state = Done;
                    return Ok(i + 1);
                }
                Done => return Ok(i),
            }
            if matches!(self.state, TrailerStart | TrailerName | TrailerLine | TrailerLf | EndLf) {
                self.trailers += 1;
                if self.trailers > MAX_TRAILERS {
                    return Err(ChunkError::TooLarge);
                }
            }
            i += 1;
        }
        Ok(i)
    }
}

/// One byte of a chunk extension (RFC 9112 section 7.1.1: `*( BWS ";" BWS
/// token [ BWS "=" BWS ( token / quoted-string ) ] )`, then CR): the next
/// state, or `None` where the grammar has no place for the byte.
fn ext_step(state: ChunkState, b: u8) -> Option<ChunkState> {
    use ChunkState::*;
    let ws = b == b' ' || b == b'\t';
    Some(match (state, b) {
        (ExtQuoted, b'"') => ExtWs,
        (ExtQuoted, b'\\') => ExtQuotedPair,
        // qdtext (HTAB, SP, VCHAR but DQUOTE and backslash, taken above,
        // obs-text), and the byte of a quoted-pair (any of them).
        (ExtQuoted | ExtQuotedPair, _) if ws || (0x21..=0x7e).contains(&b) || b >= 0x80 => ExtQuoted,
        (ExtQuoted | ExtQuotedPair, _) => return None,
        (ExtNameWs | ExtValWs, _) if ws => state,
        (ExtNameWs, _) if is_tchar(b) => ExtName,
        (ExtValWs, b'"') => ExtQuoted,
        (ExtValWs, _) if is_tchar(b) => ExtToken,
        (ExtNameWs | ExtValWs, _) => return None,
        (ExtName, _) if is_tchar(b) => ExtName,
        (ExtToken, _) if is_tchar(b) => ExtToken,
        (ExtName | ExtAfterName, b'=') => ExtValWs,
        (ExtName | ExtAfterName, _) if ws => ExtAfterName,
        (ExtToken | ExtWs, _) if ws => ExtWs,
        (_, b';') => ExtNameWs,
        (_, b'\r') => SizeLf,
        _ => return None,
    })
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Where a body stands: how much is left, by its framing.
pub struct BodyCursor {
    pub framing: Framing,
    pub left: u64,
    pub chunked: Chunked,
    pub done: bool,
    /// Payload bytes seen (chunk data, for chunked bodies).
    pub data: u64,
}

impl BodyCursor {
    pub fn new(framing: Framing) -> Self {
        let left = if let Framing::Length(n) = framing { n } else { 0 };
        let done = framing.is_empty();
        BodyCursor { framing, left, chunked: Chunked::new(), done, data: 0 }
    }

    /// `n` bytes of a body with a length went on (or the `left` ones, if fewer);
    /// returns how many. For [`BodyCursor::take`], and for bytes moved without
    /// passing through a buffer (splice.rs).
    pub fn moved(&mut self, n: usize) -> usize {
        let n = (n as u64).min(self.left) as usize;
        self.left -= n as u64;
        self.data += n as u64;
        self.done = self.left == 0;
        n
    }

    /// How many of `avail` bytes belong to the body (the rest is the next message).
    /// With `dechunk`, the chunk data is also copied there.
    pub fn take(&mut self, avail: &[u8], mut dechunk: Option<&mut Vec<u8>>) -> Result<usize, ChunkError> {
        if self.done {
            return Ok(0);
        }
        match self.framing {
            Framing::Empty => Ok(0),
            Framing::Length(_) => Ok(self.moved(avail.len())),
            Framing::UntilClose => {
                self.data += avail.len() as u64;
                Ok(avail.len())
            }
            Framing::Chunked => {
                let mut data = 0u64;
                let n = self.chunked.feed(avail, |r| {
                    data += r.len() as u64;
                    if let Some(out) = dechunk.as_deref_mut() {
                        out.extend_from_slice(&avail[r]);
                    }
                })?;
                self.data += data;
                self.done = self.chunked.is_done();
                Ok(n)
            }
        }
    }
}
