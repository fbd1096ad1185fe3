//! Choosing the next token from logits: greedy, or seeded sampling with
//! temperature, top-k and top-p (nucleus), in the order the `transformers`
//! logits processors apply them (temperature, then top-k, then top-p).
//!
//! Greedy takes the first maximum (the lowest id among equal logits, as
//! `argmax` does). Sampling is reproducible: the same seed, logits and
//! settings give the same tokens on every machine (a PCG32 generator and
//! `f64` arithmetic in a fixed order). Allocation happens once, at
//! construction: [`Sampler::next`] reuses its buffers.

/// How to choose.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sampling {
    /// `0` = greedy; otherwise logits are divided by it before softmax.
    pub temperature: f32,
    /// Keep the `top_k` most likely tokens (`0` = all).
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probability
    /// reaches `top_p` (`1` = all).
    pub top_p: f32,
    pub seed: u64,
}

impl Sampling {
    pub const GREEDY: Sampling = Sampling {
        temperature: 0.0,
        top_k: 0,
        top_p: 1.0,
        seed: 0,
    };

    /// Checks the settings.
    pub fn check(&self) -> Result<(), String> {
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return Err(format!(
                "temperature must be >= 0, got {}",
                self.temperature
            ));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(format!("top-p must be in (0, 1], got {}", self.top_p));
        }
        Ok(())
    }
}

/// PCG32 (XSH RR): small, fast and the same everywhere.
#[derive(Clone, Debug)]
pub struct Pcg32 {
    state: u64,
}

impl Pcg32 {
    const MUL: u64 = 6364136223846793005;
    const INC: u64 = 1442695040888963407;

    pub fn new(seed: u64) -> Pcg32 {
        let mut r = Pcg32 { state: 0 };
        r.next_u32();
        r.state = r.state.wrapping_add(seed);
        r.next_u32();
        r
    }

    pub fn next_u32(&mut self) -> u32 {
        let old = self.state;
        self.state = old.wrapping_mul(Self::MUL).wrapping_add(Self::INC);
        let xorshifted = (((old >> 18) ^ old) >> 27) as u32;
        xorshifted.rotate_right((old >> 59) as u32)
    }

    /// Uniform in `[0, 1)`, 53 bits.
    pub fn next_f64(&mut self) -> f64 {
        let hi = (self.next_u32() >> 5) as u64; // 27 bits
        let lo = (self.next_u32() >> 6) as u64; // 26 bits
        ((hi << 26) | lo) as f64 / (1u64 << 53) as f64
    }
}

/// Picks tokens (see the module doc).
pub struct Sampler {
    sampling: Sampling,
    rng: Pcg32,
    order: Vec<u32>,
    probs: Vec<f64>,
}

/// The first index of the largest value (NaN never wins).
pub fn argmax(logits: &[f32]) -> usize {
    let mut best = 0;
    for (i, &x) in logits.iter().enumerate() {
        if x > logits[best] || logits[best].is_nan() {
            best = i;
        }
    }
    best
}

impl Sampler {
    pub fn new(sampling: Sampling, vocab: usize) -> Sampler {
        Sampler {
            sampling,
            rng: Pcg32::new(sampling.seed),
            order: Vec::with_capacity(vocab),
            probs: Vec::with_capacity(vocab),
        }
    }

    /// The next token for `logits`.
    pub fn next(&mut self, logits: &[f32]) -> usize {
        let s = self.sampling;
        if s.temperature == 0.0 || logits.len() <= 1 {
            return argmax(logits);
        }
        // Most likely first; equal logits by id.
        self.order.clear();
        self.order.extend(0..logits.len() as u32);
        self.order.sort_by(|&a, &b| {
            logits[b as usize]
                .total_cmp(&logits[a as usize])
                .then(a.cmp(&b))
        });
        let keep = match s.top_k {
            0 => logits.len(),
            k => k.min(logits.len()),
        };
        let max = logits[self.order[0] as usize] as f64;
        let t = s.temperature as f64;
        self.probs.clear();
        let mut sum = 0.0;
        for &i in &self.order[..keep] {
            let p = ((logits[i as usize] as f64 - max) / t).exp();
            sum += p;
            self.probs.push(p);
        }
        // Nucleus: the shortest prefix whose mass reaches top_p (at least one).
        let mut kept = self.probs.len();
        if s.top_p < 1.0 {
            let mut acc = 0.0;
            for (n, p) in self.probs.iter().enumerate() {
                acc += p / sum;
                if acc >= s.top_p as f64 {
                    kept = n + 1;
                    break;
                }
            }
        }
        let mass: f64 = self.probs[..kept].iter().sum();
        let mut u = self.rng.next_f64() * mass;
        for (n, p) in self.probs[..kept].iter().enumerate() {
            if u < *p {
                return self.order[n] as usize;
            }
            u -= p;
        }
        self.order[kept - 1] as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_takes_the_first_maximum() {
        let mut s = Sampler::new(Sampling::GREEDY, 4);
        assert_eq!(s.next(&[0.5, 2.0, 2.0, -1.0]), 1);
        assert_eq!(argmax(&[f32::NAN, 1.0]), 1);
    }

    #[test]
    fn sampling_is_seeded_and_respects_top_k_and_top_p() {
        let logits = [1.0, 3.0, 2.0, 0.5, 2.5];
        let draw = |sampling: Sampling| {
            let mut s = Sampler::new(sampling, logits.len());
            (0..200).map(|_| s.next(&logits)).collect::<Vec<_>>()
        };
        let base = Sampling {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            seed: 7,
        };
        assert_eq!(draw(base), draw(base));
        assert_ne!(draw(base), draw(Sampling { seed: 8, ..base }));
        let all = draw(base);
        assert!(
            (0..5).all(|t| all.contains(&t)),
            "every token drawn: {all:?}"
        );
        let top2 = draw(Sampling { top_k: 2, ..base });
        assert!(top2.iter().all(|&t| t == 1 || t == 4), "{top2:?}");
        // p(1) ≈ 0.43, p(4) ≈ 0.26: top_p 0.5 keeps exactly those two.
        let nucleus = draw(Sampling { top_p: 0.5, ..base });
        assert!(nucleus.iter().all(|&t| t == 1 || t == 4), "{nucleus:?}");
        assert!(nucleus.contains(&4));
    }
}
