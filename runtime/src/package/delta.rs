//! Delta updates between two packages (`slmcc delta`, `slmcc patch`): what
//! a device that holds OLD needs to rebuild NEW byte for byte.
//!
//! NEW is described as a run of pieces, in file order, each producing the
//! next `len` bytes: a **copy** of OLD's bytes at an offset, a **literal**,
//! or an **xor** with OLD's bytes at an offset. The weights are cut as
//! the package cuts them, into sections of [`SECTION_BYTES`] from the
//! weights' start, whose digests both manifests hold: a NEW section whose
//! digest OLD has anywhere is a copy of it; any other is the xor with
//! OLD's section of the same index (a fine-tune or a requantization keeps
//! the layout, so the xor is mostly zero bytes), or a literal when OLD has
//! no such section. The header and manifest (everything before the
//! weights) are an xor with OLD's, the signature trailer a literal.
//!
//! The file (`.slmdelta`), little-endian:
//!
//! ```text
//! offset  bytes  field
//!      0      8  magic "SLMDELTA"
//!      8      4  version (u32) = DELTA_VERSION
//!     12     32  SHA-256 of OLD (the whole file)
//!     44     32  SHA-256 of NEW
//!     76      8  NEW's length (u64)
//!     84      8  the number of pieces (u64)
//!     92         one zstd stream: each piece a length-delimited protobuf
//!                [`Piece`], nothing after the last
//! ```
//!
//! No piece carries more than [`SECTION_BYTES`] of data (the bytes before
//! the weights are cut into such pieces too), so both ends stream: `delta`
//! computes each piece's bytes as it compresses them, and [`apply`] holds
//! one piece at a time, checking it against OLD's and NEW's lengths before
//! it writes it, and NEW's digest over everything it wrote. The caller
//! writes to a temporary file and opens the result as a package (its
//! digests and signature) before it replaces anything.

use std::io::{Read, Write};

use prost::Message;
use sha2::{Digest, Sha256};

use super::sections::SECTION_BYTES;
use super::{hex, sha256, Package};

/// The first bytes of a delta file.
pub const DELTA_MAGIC: [u8; 8] = *b"SLMDELTA";
/// The delta format this runtime writes and reads.
pub const DELTA_VERSION: u32 = 1;
/// The fixed header's length.
pub const DELTA_HEADER_BYTES: usize = 92;
/// The zstd level the pieces are compressed at.
pub const ZSTD_LEVEL: i32 = 9;
/// The largest encoded piece: [`SECTION_BYTES`] of data and its fields.
const MAX_PIECE_MESSAGE: u64 = SECTION_BYTES as u64 + 64;

/// The next `len` bytes of NEW.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Piece {
    /// [`COPY`], [`LITERAL`] or [`XOR`].
    #[prost(uint32, tag = "1")]
    pub kind: u32,
    /// Where in OLD (copy, xor).
    #[prost(uint64, tag = "2")]
    pub old_offset: u64,
    #[prost(uint64, tag = "3")]
    pub len: u64,
    /// The bytes (literal), or the bytes to xor with OLD's (xor).
    #[prost(bytes = "vec", tag = "4")]
    pub data: Vec<u8>,
}

/// OLD's bytes, as they are.
pub const COPY: u32 = 0;
/// `data`, as it is.
pub const LITERAL: u32 = 1;
/// `data` xor OLD's bytes.
pub const XOR: u32 = 2;

/// What a delta holds, for the message `slmcc delta` prints.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeltaStats {
    /// NEW's weight sections copied from OLD, xored with OLD's, and literal.
    pub copied: usize,
    pub xored: usize,
    pub literal: usize,
    /// The pieces' bytes before compression, and the whole delta file.
    pub body_bytes: u64,
    pub file_bytes: u64,
}

/// A piece before its bytes are computed: NEW's `new` range from OLD's
/// bytes at `old` (copy, xor) or as it is (literal).
struct Plan {
    kind: u32,
    old: usize,
    new: std::ops::Range<usize>,
}

/// Writes the delta that rebuilds `new` from `old` (both opened, so
/// verified) to `out`; returns what it holds.
pub fn make(old: &Package, new: &Package, out: &mut dyn Write) -> Result<DeltaStats, String> {
    let (o, n) = (old.file(), new.file());
    let (ow, nw) = (old.weights_range(), new.weights_range());
    let mut plan: Vec<Plan> = Vec::new();
    let mut stats = DeltaStats::default();
    // Header and manifest: against OLD's, section-sized.
    for start in (0..nw.start).step_by(SECTION_BYTES) {
        let end = (start + SECTION_BYTES).min(nw.start);
        against_same_place(&mut plan, o, n, start..end, ow.start);
    }
    // Weights, section by section.
    let digests = |p: &Package| {
        p.manifest
            .weight_sections
            .as_ref()
            .map(|w| w.sha256.clone())
            .unwrap_or_default()
    };
    let mut old_by_digest = std::collections::HashMap::new();
    for (i, d) in digests(old).into_iter().enumerate().rev() {
        old_by_digest.insert(d, i);
    }
    for (i, d) in digests(new).iter().enumerate() {
        let start = nw.start + i * SECTION_BYTES;
        let range = start..(start + SECTION_BYTES).min(nw.end);
        match old_by_digest.get(d) {
            Some(&j) if section_len(&ow, j) == range.len() => {
                stats.copied += 1;
                push(&mut plan, COPY, ow.start + j * SECTION_BYTES, range);
            }
            _ if section_len(&ow, i) == range.len() => {
                stats.xored += 1;
                let at = ow.start + i * SECTION_BYTES;
                let kind = if o[at..at + range.len()] == n[range.clone()] {
                    COPY
                } else {
                    XOR
                };
                push(&mut plan, kind, at, range);
            }
            _ => {
                stats.literal += 1;
                push(&mut plan, LITERAL, 0, range);
            }
        }
    }
    if nw.end < n.len() {
        push(&mut plan, LITERAL, 0, nw.end..n.len());
    }

    let mut head = Vec::with_capacity(DELTA_HEADER_BYTES);
    head.extend_from_slice(&DELTA_MAGIC);
    head.extend_from_slice(&DELTA_VERSION.to_le_bytes());
    head.extend_from_slice(&sha256(o));
    head.extend_from_slice(&sha256(n));
    head.extend_from_slice(&(n.len() as u64).to_le_bytes());
    head.extend_from_slice(&(plan.len() as u64).to_le_bytes());
    let io = |e: std::io::Error| format!("cannot write the delta: {e}");
    out.write_all(&head).map_err(io)?;
    let mut counted = CountingWriter {
        inner: out,
        bytes: 0,
    };
    let mut z = zstd::stream::write::Encoder::new(&mut counted, ZSTD_LEVEL).map_err(io)?;
    let mut buf = Vec::new();
    for p in &plan {
        let data = match p.kind {
            COPY => Vec::new(),
            LITERAL => n[p.new.clone()].to_vec(),
            _ => n[p.new.clone()]
                .iter()
                .zip(&o[p.old..])
                .map(|(a, b)| a ^ b)
                .collect(),
        };
        let piece = Piece {
            kind: p.kind,
            old_offset: p.old as u64,
            len: p.new.len() as u64,
            data,
        };
        buf.clear();
        piece
            .encode_length_delimited(&mut buf)
            .expect("a Vec grows");
        stats.body_bytes += buf.len() as u64;
        z.write_all(&buf).map_err(io)?;
    }
    z.finish().map_err(io)?;
    stats.file_bytes = (DELTA_HEADER_BYTES as u64) + counted.bytes;
    Ok(stats)
}

/// Counts what passes through.
struct CountingWriter<'a> {
    inner: &'a mut dyn Write,
    bytes: u64,
}

impl Write for CountingWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

fn section_len(weights: &std::ops::Range<usize>, i: usize) -> usize {
    let start = weights.start + i * SECTION_BYTES;
    weights.end.min(start + SECTION_BYTES).saturating_sub(start)
}

/// NEW's `range` (before the weights) against OLD's bytes at the same
/// place, as far as they reach before OLD's weights: a copy where equal,
/// else an xor, and a literal for the rest.
fn against_same_place(
    plan: &mut Vec<Plan>,
    old: &[u8],
    new: &[u8],
    range: std::ops::Range<usize>,
    old_weights: usize,
) {
    let overlap = range.start..range.end.min(old_weights.max(range.start));
    if !overlap.is_empty() {
        let kind = if old[overlap.clone()] == new[overlap.clone()] {
            COPY
        } else {
            XOR
        };
        push(plan, kind, overlap.start, overlap.clone());
    }
    if overlap.end < range.end {
        push(plan, LITERAL, 0, overlap.end..range.end);
    }
}

/// Appends a piece, merging a copy into a previous copy of the bytes just
/// before it.
fn push(plan: &mut Vec<Plan>, kind: u32, old: usize, new: std::ops::Range<usize>) {
    if let Some(p) = plan.last_mut() {
        if kind == COPY && p.kind == COPY && p.old + p.new.len() == old && p.new.end == new.start {
            p.new.end = new.end;
            return;
        }
    }
    plan.push(Plan { kind, old, new });
}

/// A delta's header, as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeltaHeader {
    pub old_sha256: [u8; 32],
    pub new_sha256: [u8; 32],
    pub new_bytes: u64,
    pub pieces: u64,
}

/// Reads a delta's header and checks its magic and version.
pub fn header(delta: &[u8]) -> Result<DeltaHeader, String> {
    if delta.len() < DELTA_HEADER_BYTES || delta[..8] != DELTA_MAGIC {
        return Err("not a slmcc delta (no SLMDELTA header)".to_string());
    }
    let version = u32::from_le_bytes(delta[8..12].try_into().expect("4 bytes"));
    if version != DELTA_VERSION {
        return Err(format!(
            "delta format version {version}, this slmcc reads version {DELTA_VERSION}"
        ));
    }
    let u64_at = |at: usize| u64::from_le_bytes(delta[at..at + 8].try_into().expect("8 bytes"));
    Ok(DeltaHeader {
        old_sha256: delta[12..44].try_into().expect("32 bytes"),
        new_sha256: delta[44..76].try_into().expect("32 bytes"),
        new_bytes: u64_at(76),
        pieces: u64_at(84),
    })
}

/// Rebuilds NEW from `old` (the whole OLD file) and `delta` into `out`;
/// returns NEW's length. Fails, having written at most part of NEW (the
/// caller discards it), when `delta` was made from another OLD, is
/// malformed, or does not give NEW's digest. Holds one piece at a time.
pub fn apply(old: &[u8], delta: &[u8], out: &mut dyn Write) -> Result<u64, String> {
    let h = header(delta)?;
    let old_digest = sha256(old);
    if old_digest != h.old_sha256 {
        return Err(format!(
            "the delta was made from another package: it needs sha256 {}, this one is {}",
            hex(&h.old_sha256),
            hex(&old_digest)
        ));
    }
    let corrupted = |e: std::io::Error| format!("the delta's body is corrupted: {e}");
    let mut z =
        zstd::stream::read::Decoder::new(&delta[DELTA_HEADER_BYTES..]).map_err(corrupted)?;
    let mut digest = Sha256::new();
    let mut total = 0u64;
    let mut buf = Vec::new();
    for i in 0..h.pieces {
        let bad = |why: &str| format!("piece {i}: {why}");
        let len = read_varint(&mut z).map_err(|e| bad(&e))?;
        if len > MAX_PIECE_MESSAGE {
            return Err(bad(&format!("{len} bytes, more than a piece holds")));
        }
        buf.resize(len as usize, 0);
        z.read_exact(&mut buf).map_err(corrupted)?;
        let p = Piece::decode(&buf[..]).map_err(|e| bad(&format!("corrupted: {e}")))?;
        let end = total
            .checked_add(p.len)
            .filter(|&e| e <= h.new_bytes)
            .ok_or_else(|| bad(&format!("writes past NEW's {} bytes", h.new_bytes)))?;
        let from_old = |n: u64| -> Result<&[u8], String> {
            let stop = p
                .old_offset
                .checked_add(n)
                .filter(|&e| e <= old.len() as u64);
            match stop {
                Some(stop) => Ok(&old[p.old_offset as usize..stop as usize]),
                None => Err(bad(&format!("reads OLD past its {} bytes", old.len()))),
            }
        };
        let has_data = |want: u64| match p.data.len() as u64 == want {
            true => Ok(()),
            false => Err(bad(&format!(
                "{} bytes of data for {want} bytes",
                p.data.len()
            ))),
        };
        let write = |bytes: &[u8], digest: &mut Sha256, out: &mut dyn Write| {
            digest.update(bytes);
            out.write_all(bytes)
                .map_err(|e| format!("cannot write: {e}"))
        };
        match p.kind {
            COPY => {
                has_data(0)?;
                // Copies may be long: written a section at a time.
                for chunk in from_old(p.len)?.chunks(SECTION_BYTES) {
                    write(chunk, &mut digest, out)?;
                }
            }
            LITERAL => {
                has_data(p.len)?;
                write(&p.data, &mut digest, out)?;
            }
            XOR => {
                has_data(p.len)?;
                let xored: Vec<u8> = p
                    .data
                    .iter()
                    .zip(from_old(p.len)?)
                    .map(|(a, b)| a ^ b)
                    .collect();
                write(&xored, &mut digest, out)?;
            }
            k => return Err(bad(&format!("unknown kind {k}"))),
        }
        total = end;
    }
    if total != h.new_bytes {
        return Err(format!(
            "the pieces make {total} bytes, the header says {}",
            h.new_bytes
        ));
    }
    if z.read(&mut [0u8; 1]).map_err(corrupted)? != 0 {
        return Err("the delta's body goes on after its last piece".to_string());
    }
    let got: [u8; 32] = digest.finalize().into();
    if got != h.new_sha256 {
        return Err(format!(
            "the rebuilt package's sha256 is {}, the delta promises {}: the delta is corrupted",
            hex(&got),
            hex(&h.new_sha256)
        ));
    }
    Ok(total)
}

/// A protobuf varint from `r` (at most 10 bytes).
fn read_varint(r: &mut dyn Read) -> Result<u64, String> {
    let mut v = 0u64;
    for shift in (0..70).step_by(7) {
        let mut b = [0u8; 1];
        r.read_exact(&mut b)
            .map_err(|e| format!("the delta's body is corrupted: {e}"))?;
        v |= u64::from(b[0] & 0x7f) << shift.min(63);
        if b[0] & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err("a length of more than 10 bytes".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A delta of `pieces` for `old`, promising `new`.
    fn delta_of(old: &[u8], new: &[u8], pieces: Vec<Piece>) -> Vec<u8> {
        let mut body = Vec::new();
        for p in &pieces {
            p.encode_length_delimited(&mut body).unwrap();
        }
        let mut out = DELTA_MAGIC.to_vec();
        out.extend_from_slice(&DELTA_VERSION.to_le_bytes());
        out.extend_from_slice(&sha256(old));
        out.extend_from_slice(&sha256(new));
        out.extend_from_slice(&(new.len() as u64).to_le_bytes());
        out.extend_from_slice(&(pieces.len() as u64).to_le_bytes());
        out.extend_from_slice(&zstd::bulk::compress(&body, 1).unwrap());
        out
    }

    fn piece(kind: u32, old_offset: u64, len: u64, data: &[u8]) -> Piece {
        Piece {
            kind,
            old_offset,
            len,
            data: data.to_vec(),
        }
    }

    #[test]
    fn applies_copies_literals_and_xors_and_checks_every_piece() {
        let old = b"abcdefgh".to_vec();
        let new = b"cdefXY\x03\x03".to_vec();
        let xor: Vec<u8> = b"\x03\x03".iter().zip(b"gh").map(|(a, b)| a ^ b).collect();
        let pieces = vec![
            piece(COPY, 2, 4, b""),
            piece(LITERAL, 0, 2, b"XY"),
            piece(XOR, 6, 2, &xor),
        ];
        let mut out = Vec::new();
        assert_eq!(
            apply(&old, &delta_of(&old, &new, pieces.clone()), &mut out),
            Ok(8)
        );
        assert_eq!(out, new);
        let fails = |pieces: Vec<Piece>, want: &str| {
            let e = apply(&old, &delta_of(&old, &new, pieces), &mut Vec::new()).unwrap_err();
            assert!(e.contains(want), "want `{want}`: {e}");
        };
        let mut p = pieces.clone();
        p[0].old_offset = 6;
        fails(p, "piece 0: reads OLD past its 8 bytes");
        let mut p = pieces.clone();
        p[2].old_offset = u64::MAX;
        fails(p, "piece 2: reads OLD past its 8 bytes");
        let mut p = pieces.clone();
        p[1].kind = 7;
        fails(p, "unknown kind 7");
        let mut p = pieces.clone();
        p[1].len = 3;
        fails(p, "2 bytes of data for 3 bytes");
        let mut p = pieces.clone();
        p.pop();
        fails(p, "the pieces make 6 bytes, the header says 8");
        let mut p = pieces.clone();
        p[1].len = 1 << 40;
        p[1].data = Vec::new();
        fails(p, "piece 1: writes past NEW's 8 bytes");
        let mut p = pieces;
        p[1].data = b"XZ".to_vec();
        fails(p, "the delta is corrupted");
        let e = apply(b"other", &delta_of(&old, &new, Vec::new()), &mut Vec::new()).unwrap_err();
        assert!(e.contains("made from another package"), "{e}");
        let mut d = delta_of(&old, &new, Vec::new());
        d[84..92].copy_from_slice(&u64::MAX.to_le_bytes());
        let e = apply(&old, &d, &mut Vec::new()).unwrap_err();
        assert!(e.contains("piece 0") && e.contains("corrupted"), "{e}");
    }
}
