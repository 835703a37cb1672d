//! Seeded corruptions of a recording (`.otrec`: an 8-byte header, then
//! blocks of u32 kind, u32 length, payload): what a damaged disk, a cut
//! copy or a hostile agent makes of a valid file. Each case is one of bit
//! flips, a cut, a block length that lies, a number in a JSON block
//! (META's CPUs, a thread id, END's time) replaced by a huge one, a block
//! dropped, doubled or forged, or garbage appended. The same seed gives
//! the same cases, so a failure names a case that can be replayed.

/// SplitMix64: small, seeded, and the same on every machine.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next_u64() % n as u64) as usize
        }
    }
}

/// One block of a recording: where its header starts, its kind, and its
/// payload's range in the file.
#[derive(Clone, Copy, Debug)]
pub struct Block {
    pub at: usize,
    pub kind: u32,
    pub payload: (usize, usize),
}

/// The whole blocks of a recording's bytes (after the 8-byte header).
pub fn blocks(bytes: &[u8]) -> Vec<Block> {
    let mut out = Vec::new();
    let mut at = 8;
    while at + 8 <= bytes.len() {
        let kind = u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
        let len = u32::from_le_bytes([bytes[at + 4], bytes[at + 5], bytes[at + 6], bytes[at + 7]]) as usize;
        let Some(end) = (at + 8).checked_add(len).filter(|&e| e <= bytes.len()) else {
            break;
        };
        out.push(Block {
            at,
            kind,
            payload: (at + 8, end),
        });
        at = end;
    }
    out
}

/// Numbers a corrupted JSON field takes: past every range a reader
/// accepts, at the edges of the integer types, and zero.
const HUGE: &[&str] = &[
    "0",
    "4096",
    "4097",
    "65537",
    "1000000000",
    "4294967295",
    "4294967296",
    "604800000000000000",
    "9223372036854775807",
    "18446744073709551615",
];

/// Block kinds as the format numbers them, and one no reader knows.
const KINDS: &[u32] = &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 99];

/// `cases` corruptions of `valid`, from `seed`: each with a line saying
/// what was done, for the failure message.
pub fn corruptions(valid: &[u8], seed: u64, cases: usize) -> Vec<(String, Vec<u8>)> {
    let mut rng = Rng::new(seed);
    (0..cases)
        .map(|i| {
            let (what, bytes) = corrupt_once(valid, &mut rng);
            (format!("case {i} of seed {seed}: {what}"), bytes)
        })
        .collect()
}

fn corrupt_once(valid: &[u8], rng: &mut Rng) -> (String, Vec<u8>) {
    let mut b = valid.to_vec();
    let blocks = blocks(valid);
    match rng.below(8) {
        0 => {
            let n = 1 + rng.below(8);
            let mut at = Vec::new();
            for _ in 0..n {
                let byte = rng.below(b.len());
                let bit = rng.below(8);
                b[byte] ^= 1 << bit;
                at.push(format!("{byte}.{bit}"));
            }
            (format!("bits flipped at {}", at.join(", ")), b)
        }
        1 => {
            let cut = rng.below(b.len());
            b.truncate(cut);
            (format!("cut at byte {cut}"), b)
        }
        2 if !blocks.is_empty() => {
            let blk = blocks[rng.below(blocks.len())];
            let len: u32 = match rng.below(4) {
                0 => u32::MAX,
                1 => 256 << 20,
                2 => (blk.payload.1 - blk.payload.0) as u32 + 1 + rng.below(1 << 16) as u32,
                _ => rng.next_u64() as u32,
            };
            b[blk.at + 4..blk.at + 8].copy_from_slice(&len.to_le_bytes());
            (
                format!("block of kind {} at byte {} claims {len} bytes", blk.kind, blk.at),
                b,
            )
        }
        3 | 4 => {
            // A number in a JSON block (META, THREADS, END, MAPS, I/O)
            // made huge; the block's length follows the payload.
            let json: Vec<Block> = blocks
                .iter()
                .copied()
                .filter(|k| matches!(valid.get(k.payload.0), Some(b'{') | Some(b'[')))
                .collect();
            if json.is_empty() {
                return (String::from("nothing to do (no JSON block)"), b);
            }
            let blk = json[rng.below(json.len())];
            let payload = &valid[blk.payload.0..blk.payload.1];
            let numbers = digit_runs(payload);
            if numbers.is_empty() {
                return (format!("nothing to do (no number in block {})", blk.kind), b);
            }
            let (s, e) = numbers[rng.below(numbers.len())];
            let huge = HUGE[rng.below(HUGE.len())];
            let mut new_payload = payload[..s].to_vec();
            new_payload.extend_from_slice(huge.as_bytes());
            new_payload.extend_from_slice(&payload[e..]);
            let what = format!(
                "block of kind {}: {} made {huge}",
                blk.kind,
                String::from_utf8_lossy(&payload[s..e])
            );
            (what, replace_block(valid, blk, blk.kind, &new_payload))
        }
        5 if !blocks.is_empty() => {
            let blk = blocks[rng.below(blocks.len())];
            let mut out = valid[..blk.at].to_vec();
            let twice = rng.below(2) == 0;
            out.extend_from_slice(&valid[blk.at..blk.payload.1]);
            if twice {
                out.extend_from_slice(&valid[blk.at..blk.payload.1]);
                out.extend_from_slice(&valid[blk.payload.1..]);
                (format!("block of kind {} at byte {} doubled", blk.kind, blk.at), out)
            } else {
                out.truncate(blk.at);
                out.extend_from_slice(&valid[blk.payload.1..]);
                (format!("block of kind {} at byte {} dropped", blk.kind, blk.at), out)
            }
        }
        6 => {
            // A block of any kind with random bytes, somewhere.
            let kind = KINDS[rng.below(KINDS.len())];
            let len = rng.below(200);
            let payload: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            let at = match blocks.len() {
                0 => valid.len().min(8),
                n => blocks[rng.below(n)].at,
            };
            let mut out = valid[..at].to_vec();
            out.extend_from_slice(&kind.to_le_bytes());
            out.extend_from_slice(&(len as u32).to_le_bytes());
            out.extend_from_slice(&payload);
            out.extend_from_slice(&valid[at..]);
            (
                format!("forged block of kind {kind}, {len} random bytes, at byte {at}"),
                out,
            )
        }
        _ => {
            let n = 1 + rng.below(64);
            b.extend((0..n).map(|_| rng.next_u64() as u8));
            (format!("{n} random bytes appended"), b)
        }
    }
}

/// Where runs of ASCII digits lie in `b`.
fn digit_runs(b: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_digit() {
            let s = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            out.push((s, i));
        } else {
            i += 1;
        }
    }
    out
}

/// `valid` with block `blk` replaced by one of `kind` holding `payload`.
fn replace_block(valid: &[u8], blk: Block, kind: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = valid[..blk.at].to_vec();
    out.extend_from_slice(&kind.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(payload);
    out.extend_from_slice(&valid[blk.payload.1..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file() -> Vec<u8> {
        let mut b = b"OTREC\0\x01\x00".to_vec();
        for (kind, payload) in [
            (1u32, &b"{\"cpus\":2}"[..]),
            (2, &[0u8; 24][..]),
            (4, &b"{\"end_ns\":5}"[..]),
        ] {
            b.extend_from_slice(&kind.to_le_bytes());
            b.extend_from_slice(&(payload.len() as u32).to_le_bytes());
            b.extend_from_slice(payload);
        }
        b
    }

    #[test]
    fn the_same_seed_gives_the_same_cases() {
        let f = file();
        assert_eq!(blocks(&f).len(), 3);
        let a = corruptions(&f, 7, 50);
        assert_eq!(a, corruptions(&f, 7, 50));
        assert_ne!(a, corruptions(&f, 8, 50));
    }

    #[test]
    fn a_huge_number_keeps_the_block_whole() {
        let f = file();
        let b = replace_block(&f, blocks(&f)[0], 1, b"{\"cpus\":1000000000}");
        let bl = blocks(&b);
        assert_eq!(bl.len(), 3);
        assert_eq!(&b[bl[0].payload.0..bl[0].payload.1], b"{\"cpus\":1000000000}");
    }
}
