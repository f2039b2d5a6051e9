//! Every frame of a zstd stream, in order. A zstd file may hold several frames one after
//! another (`zstd -c a b > ab.zst`, or any tool that compresses in pieces), and ruzstd's
//! `StreamingDecoder` reads only the first: the rest of the trace would be lost without a
//! word. Skippable frames (metadata) are passed over; bytes after the last frame that are
//! not a frame are an error, as gzip's decoder makes them.

use std::io::{BufRead, Read};

use ruzstd::decoding::errors::{FrameDecoderError, ReadFrameHeaderError};
use ruzstd::decoding::{BlockDecodingStrategy, FrameDecoder};

/// A reader of every frame of the zstd stream `source`.
pub(crate) struct Frames<R> {
    source: R,
    frame: FrameDecoder,
}

impl<R: BufRead> Frames<R> {
    /// Reads the first frame's header; an error when `source` does not start with one.
    pub(crate) fn new(mut source: R) -> Result<Frames<R>, FrameDecoderError> {
        let mut frame = FrameDecoder::new();
        if !start_frame(&mut frame, &mut source)? {
            return Err(FrameDecoderError::NotYetInitialized);
        }
        Ok(Frames { source, frame })
    }
}

/// Starts the next frame of `source`, past any skippable frames; `false` at its end.
fn start_frame<R: BufRead>(
    frame: &mut FrameDecoder,
    source: &mut R,
) -> Result<bool, FrameDecoderError> {
    loop {
        match source.fill_buf() {
            Ok([]) => return Ok(false),
            Ok(_) => {}
            Err(e) => return Err(FrameDecoderError::FailedToDrainDecodebuffer(e)),
        }
        match frame.init(&mut *source) {
            Ok(()) => return Ok(true),
            Err(FrameDecoderError::ReadFrameHeaderError(ReadFrameHeaderError::SkipFrame {
                length,
                ..
            })) => {
                let skipped = std::io::copy(
                    &mut source.by_ref().take(u64::from(length)),
                    &mut std::io::sink(),
                )
                .map_err(FrameDecoderError::FailedToDrainDecodebuffer)?;
                if skipped < u64::from(length) {
                    return Err(FrameDecoderError::FailedToSkipFrame);
                }
            }
            Err(e) => return Err(e),
        }
    }
}

impl<R: BufRead> Read for Frames<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            while self.frame.can_collect() < buf.len() && !self.frame.is_finished() {
                let wanted = buf.len() - self.frame.can_collect();
                self.frame
                    .decode_blocks(&mut self.source, BlockDecodingStrategy::UptoBytes(wanted))
                    .map_err(std::io::Error::other)?;
            }
            let n = self.frame.read(buf)?;
            if n > 0 {
                return Ok(n);
            }
            if !self.frame.is_finished() {
                continue;
            }
            // This frame is done and drained: another may follow.
            match start_frame(&mut self.frame, &mut self.source) {
                Ok(true) => continue,
                Ok(false) => return Ok(0),
                Err(e) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("the data after a zstd frame is not a zstd frame: {e}"),
                    ));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use ruzstd::encoding::{CompressionLevel, compress_to_vec};

    use super::*;

    fn frame(text: &[u8]) -> Vec<u8> {
        compress_to_vec(text, CompressionLevel::Fastest)
    }

    /// A skippable frame (magic 0x184D2A50..5F) of `n` bytes of payload.
    fn skippable(n: u32) -> Vec<u8> {
        let mut bytes = 0x184D_2A50u32.to_le_bytes().to_vec();
        bytes.extend_from_slice(&n.to_le_bytes());
        bytes.extend(std::iter::repeat_n(0xAB, n as usize));
        bytes
    }

    fn decode(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
        let mut out = Vec::new();
        Frames::new(bytes)
            .map_err(std::io::Error::other)?
            .read_to_end(&mut out)?;
        Ok(out)
    }

    #[test]
    fn every_frame_is_read_and_skippable_frames_are_passed_over() {
        let mut stream = frame(b"first\n");
        stream.extend(skippable(7));
        stream.extend(frame(b"second\n"));
        stream.extend(frame(b""));
        stream.extend(frame(b"third\n"));
        assert_eq!(decode(&stream).unwrap(), b"first\nsecond\nthird\n");
    }

    #[test]
    fn garbage_after_a_frame_is_an_error_not_the_end() {
        let mut stream = frame(b"first\n");
        stream.extend_from_slice(b"not zstd at all");
        let err = decode(&stream).unwrap_err();
        assert!(err.to_string().contains("not a zstd frame"), "{err}");
        // A skippable frame cut short is an error too.
        let mut stream = frame(b"first\n");
        stream.extend(&skippable(100)[..20]);
        assert!(decode(&stream).is_err());
    }

    #[test]
    fn a_trace_in_two_frames_is_read_whole() {
        let trace = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../traces/mooncake-small.jsonl");
        let text = std::fs::read(&trace).unwrap();
        let half = text[..text.len() / 2]
            .iter()
            .rposition(|b| *b == b'\n')
            .unwrap()
            + 1;
        let mut stream = frame(&text[..half]);
        stream.extend(frame(&text[half..]));
        let path = std::env::temp_dir().join(format!(
            "routerlab-two-frames-{}.jsonl.zst",
            std::process::id()
        ));
        std::fs::write(&path, &stream).unwrap();
        let mut reader = crate::TraceReader::open(&path, crate::TraceOptions::default()).unwrap();
        let mut request = crate::TraceRequest::default();
        let mut n = 0;
        while reader.next_into(&mut request).unwrap() {
            n += 1;
        }
        assert_eq!(n, 300, "both frames' requests");
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn an_endless_compressed_line_stops_at_the_cap_naming_the_line() {
        // 16 MiB of one line compress to a few hundred bytes.
        let mut text =
            b"{\"timestamp\": 1, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": [1]}\n"
                .to_vec();
        text.extend(std::iter::repeat_n(b'x', 16 << 20));
        let path =
            std::env::temp_dir().join(format!("routerlab-bomb-{}.jsonl.zst", std::process::id()));
        std::fs::write(&path, frame(&text)).unwrap();
        let options = crate::TraceOptions {
            max_line_bytes: 1 << 20,
            ..crate::TraceOptions::default()
        };
        let mut reader = crate::TraceReader::open(&path, options).unwrap();
        let mut request = crate::TraceRequest::default();
        assert!(
            reader.next_into(&mut request).unwrap(),
            "the first line is a request"
        );
        let err = reader.next_into(&mut request).unwrap_err().to_string();
        assert!(
            err.contains(".zst:2: the line is longer than 1048576 bytes"),
            "{err}"
        );
        std::fs::remove_file(&path).unwrap();
    }
}
