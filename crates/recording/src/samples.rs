//! Stack samples as a recording holds them (`ontime profile record`): the
//! thread, the CPU, a CLOCK_MONOTONIC time stamp and the kernel and user
//! call chains, in one flat, reused buffer ([`SampleBatch`]) and encoded
//! for the SAMPLES block. Sampling itself is ontime-trace's (`sampler`).

/// One stack sample; its frames are `frames[start..start + kernel + user]`
/// of the batch it came in: kernel frames first (leaf first), then user
/// frames (leaf first).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sample {
    pub ts: u64,
    pub pid: u32,
    pub tid: u32,
    pub cpu: u16,
    pub kernel: u16,
    pub user: u16,
    pub start: u32,
}

/// Samples and their frames, flat.
#[derive(Clone, Debug, Default)]
pub struct SampleBatch {
    pub samples: Vec<Sample>,
    pub frames: Vec<u64>,
}

impl SampleBatch {
    pub fn clear(&mut self) {
        self.samples.clear();
        self.frames.clear();
    }
    pub fn len(&self) -> usize {
        self.samples.len()
    }
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }
    pub fn kernel_frames(&self, s: &Sample) -> &[u64] {
        let a = s.start as usize;
        &self.frames[a..a + s.kernel as usize]
    }
    pub fn user_frames(&self, s: &Sample) -> &[u64] {
        let a = s.start as usize + s.kernel as usize;
        &self.frames[a..a + s.user as usize]
    }
    /// Puts the samples in time order (per-CPU rings interleave); frames
    /// stay where they are.
    pub fn sort_by_time(&mut self) {
        self.samples.sort_by_key(|s| (s.ts, s.cpu));
    }

    /// Appends a sample with its chains.
    pub fn push(&mut self, ts: u64, pid: u32, tid: u32, cpu: u16, kernel: &[u64], user: &[u64]) {
        let start = self.frames.len() as u32;
        self.frames.extend_from_slice(kernel);
        self.frames.extend_from_slice(user);
        self.samples.push(Sample {
            ts,
            pid,
            tid,
            cpu,
            kernel: kernel.len() as u16,
            user: user.len() as u16,
            start,
        });
    }

    /// Encodes for a recording's SAMPLES block (little endian):
    /// per sample u64 ts, u32 pid, u32 tid, u16 cpu, u16 kernel, u16 user,
    /// u16 0, then (kernel + user) u64 frames.
    pub fn encode(&self, out: &mut Vec<u8>) {
        for s in &self.samples {
            out.extend_from_slice(&s.ts.to_le_bytes());
            out.extend_from_slice(&s.pid.to_le_bytes());
            out.extend_from_slice(&s.tid.to_le_bytes());
            out.extend_from_slice(&s.cpu.to_le_bytes());
            out.extend_from_slice(&s.kernel.to_le_bytes());
            out.extend_from_slice(&s.user.to_le_bytes());
            out.extend_from_slice(&0u16.to_le_bytes());
            let a = s.start as usize;
            for f in &self.frames[a..a + s.kernel as usize + s.user as usize] {
                out.extend_from_slice(&f.to_le_bytes());
            }
        }
    }

    /// Decodes a SAMPLES block, appending; stops at a torn sample.
    pub fn decode(&mut self, mut b: &[u8]) {
        const HEAD: usize = 24;
        let u16_at = |b: &[u8], i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        let u32_at = |b: &[u8], i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |b: &[u8], i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        while b.len() >= HEAD {
            let (k, u) = (u16_at(b, 18) as usize, u16_at(b, 20) as usize);
            let need = HEAD + 8 * (k + u);
            if b.len() < need {
                break;
            }
            let start = self.frames.len() as u32;
            self.frames.extend((0..k + u).map(|i| u64_at(b, HEAD + 8 * i)));
            self.samples.push(Sample {
                ts: u64_at(b, 0),
                pid: u32_at(b, 8),
                tid: u32_at(b, 12),
                cpu: u16_at(b, 16),
                kernel: k as u16,
                user: u as u16,
                start,
            });
            b = &b[need..];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_round_trip_through_a_block_and_a_torn_tail_is_dropped() {
        let mut b = SampleBatch::default();
        b.push(10, 1, 2, 0, &[0xffff_0001], &[0x40, 0x41]);
        b.push(20, 1, 3, 1, &[], &[0x50]);
        let mut bytes = Vec::new();
        b.encode(&mut bytes);
        let mut back = SampleBatch::default();
        back.decode(&bytes[..bytes.len() - 3]);
        assert_eq!(back.len(), 1, "the torn second sample is dropped");
        back.clear();
        back.decode(&bytes);
        assert_eq!(back.samples, b.samples);
        assert_eq!(back.user_frames(&back.samples[0]), [0x40, 0x41]);
        assert_eq!(back.kernel_frames(&back.samples[1]), [] as [u64; 0]);
    }
}
