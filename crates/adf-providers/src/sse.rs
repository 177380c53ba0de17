//! The event-stream format (`text/event-stream`) cut into events, for the wire parsers.
//!
//! It reads as `eventsource-stream` does (that crate parsed a model's reply before; a test
//! checks the two agree on every way of cutting a set of streams into chunks): lines end with
//! CRLF, LF or CR (a CR at the end of what has arrived waits for the next byte); a leading
//! BOM is dropped; `:` starts a comment; a field's value follows its colon and at most one
//! space; `data` lines join with `\n`; an empty line dispatches the event when it has data;
//! an unterminated last line is never an event. What differs is the cost: that crate parsed
//! each line character by character through `nom` and copied what was left of the buffer
//! after each line, about 2,000 instructions a line; lines here are found with `memchr`.

/// One dispatched event: its type (`message` unless an `event` field named one) and data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SseEvent {
    pub(crate) event: String,
    pub(crate) data: String,
}

/// Bytes in, events out.
#[derive(Debug, Default)]
pub(crate) struct SseDecoder {
    buf: Vec<u8>,
    /// How much of `buf` has been read into lines.
    start: usize,
    /// Whether the first line has been read (its BOM, if any, dropped).
    started: bool,
    event: String,
    data: String,
}

/// The stream is not UTF-8.
#[derive(Debug)]
pub(crate) struct NotUtf8(std::str::Utf8Error);

impl std::fmt::Display for NotUtf8 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "UTF8 error: {}", self.0)
    }
}

impl SseDecoder {
    /// Appends what arrived.
    pub(crate) fn push(&mut self, bytes: &[u8]) {
        if self.start > 0 && self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete event in what has arrived, if any.
    pub(crate) fn next_event(&mut self) -> Result<Option<SseEvent>, NotUtf8> {
        loop {
            let rest = &self.buf[self.start..];
            let Some(end) = memchr::memchr2(b'\n', b'\r', rest) else {
                self.compact();
                return Ok(None);
            };
            let terminator = match (rest[end], rest.get(end + 1)) {
                (b'\r', Some(b'\n')) => 2,
                // A CR last: an LF may follow in the next bytes, making one line end of both.
                (b'\r', None) => {
                    self.compact();
                    return Ok(None);
                }
                _ => 1,
            };
            let mut line = &rest[..end];
            if !self.started {
                self.started = true;
                line = line.strip_prefix("\u{feff}".as_bytes()).unwrap_or(line);
            }
            let line = std::str::from_utf8(line).map_err(NotUtf8)?;
            let dispatched = read_line(&mut self.event, &mut self.data, line);
            self.start += end + terminator;
            if dispatched.is_some() {
                return Ok(dispatched);
            }
        }
    }

    fn compact(&mut self) {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
    }
}

/// Reads one line into the event being built (its type and data); an empty one dispatches it.
fn read_line(event_type: &mut String, event_data: &mut String, line: &str) -> Option<SseEvent> {
    if line.is_empty() {
        let event = std::mem::take(event_type);
        let mut data = std::mem::take(event_data);
        if data.is_empty() {
            return None;
        }
        data.pop();
        return Some(SseEvent {
            event: if event.is_empty() {
                "message".to_owned()
            } else {
                event
            },
            data,
        });
    }
    if line.starts_with(':') {
        return None;
    }
    let (name, value) = match line.split_once(':') {
        Some((name, value)) => (name, value.strip_prefix(' ').unwrap_or(value)),
        None => (line, ""),
    };
    match name {
        "event" => value.clone_into(event_type),
        "data" => {
            event_data.push_str(value);
            event_data.push('\n');
        }
        _ => {}
    }
    None
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use eventsource_stream::Eventsource;
    use futures::StreamExt;

    use super::*;

    /// What `eventsource-stream` makes of `chunks`: its events, then `Err` if it failed.
    fn reference(chunks: &[Vec<u8>]) -> Vec<Result<(String, String), ()>> {
        let stream = futures::stream::iter(
            chunks
                .iter()
                .cloned()
                .map(Ok::<Vec<u8>, std::convert::Infallible>),
        );
        futures::executor::block_on(
            stream
                .eventsource()
                .map(|item| item.map(|e| (e.event, e.data)).map_err(|_| ()))
                .collect(),
        )
    }

    fn ours(chunks: &[Vec<u8>]) -> Vec<Result<(String, String), ()>> {
        let mut decoder = SseDecoder::default();
        let mut out = Vec::new();
        for chunk in chunks {
            decoder.push(chunk);
            loop {
                match decoder.next_event() {
                    Ok(Some(e)) => out.push(Ok((e.event, e.data))),
                    Ok(None) => break,
                    Err(_) => {
                        out.push(Err(()));
                        return out;
                    }
                }
            }
        }
        out
    }

    #[test]
    fn events_are_those_eventsource_stream_reads_however_the_bytes_are_cut() {
        let streams: [&[u8]; 11] = [
            b"data: {\"a\":1}\n\ndata: [DONE]\n\n",
            b"event: message_start\ndata: {\"x\": \"\xc3\xa9\"}\n\nevent: ping\ndata: {}\n\n",
            b"data: cr\r\n\r\ndata:nospace\rdata:  two spaces\r\r\n",
            b": comment\ndata\nid: 7\nretry: 10\nevent\nunknown: x\ndata: y\n\n\n\n",
            b"data: first\ndata: second\n\nevent: only-type\n\ndata: after\n\n",
            b"event: e\ndata: a:b: c\r\n\r\ndata: tail without blank line\n",
            b"data: x\n\ndata: lost at the end\r\r",
            b"data: \xff\xfe bad\n\ndata: later\n\n",
            b"data: ok\n\n:\n\n\xef\xbb\xbfdata: bom later is data\n\n",
            b"data:\n\ndata: \n\n",
            b"",
        ];
        for stream in streams {
            let whole = vec![stream.to_vec()];
            let bytes: Vec<Vec<u8>> = stream.iter().map(|b| vec![*b]).collect();
            let mut cuts = vec![whole, bytes];
            for at in 1..stream.len() {
                cuts.push(vec![stream[..at].to_vec(), stream[at..].to_vec()]);
            }
            for chunks in cuts {
                let expected = reference(&chunks);
                // The reference reports bad UTF-8 when the stream ends, having stopped at it;
                // ours at the line: the events before it and the failure are the same.
                assert_eq!(ours(&chunks), expected, "{chunks:?}");
            }
        }
        // The streams reach what they are meant to.
        let all = ours(&[streams[2].to_vec()]);
        assert_eq!(
            all,
            [
                Ok(("message".to_owned(), "cr".to_owned())),
                Ok(("message".to_owned(), "nospace\n two spaces".to_owned()))
            ]
        );
        assert_eq!(ours(&[streams[7].to_vec()]), [Err(())]);
    }

    /// A leading byte order mark is dropped, however it arrives (`eventsource-stream` sliced
    /// the string one byte in, inside the three-byte character, and panicked).
    #[test]
    fn a_leading_byte_order_mark_is_dropped() {
        let stream = b"\xef\xbb\xbfdata: bom\n\n\xef\xbb\xbfdata: later\n\n";
        for at in 0..stream.len() {
            let chunks = [stream[..at].to_vec(), stream[at..].to_vec()];
            assert_eq!(
                ours(&chunks),
                [Ok(("message".to_owned(), "bom".to_owned()))],
                "cut at {at}"
            );
        }
    }
}
