//! The deterministic payload generator of WORKLOAD.md §2: SplitMix64 and the `text`, `uuid4`
//! and `suffix` draws built on it.

/// The 64 characters `text` draws from, indexed by the low 6 bits of a byte.
pub const ALPHABET: &[u8; 64] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .";

/// Standard SplitMix64 (all arithmetic mod 2^64), one instance per workload thread.
///
/// ```
/// use checkpoint_bench::rng::SplitMix64;
/// let mut g = SplitMix64::from_state(0);
/// assert_eq!(g.next_u64(), 0xE220_A839_7B1D_CDAF);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator with this raw 64-bit state.
    pub const fn from_state(state: u64) -> Self {
        Self { state }
    }

    /// The generator of thread number `tn` under `seed`:
    /// `state = ((seed & 0xFFFFFFFF) << 32) | (tn & 0xFFFFFFFF)`.
    pub const fn for_thread(seed: u64, tn: u64) -> Self {
        Self::from_state(((seed & 0xFFFF_FFFF) << 32) | (tn & 0xFFFF_FFFF))
    }

    /// The current raw state.
    pub const fn state(&self) -> u64 {
        self.state
    }

    /// The next output (`next()` in the spec).
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// `text(n)`: `ceil(n/8)` draws, each giving 8 characters `ALPHABET[byte & 63]`, least
    /// significant byte first; the first `n` characters are kept.
    pub fn text(&mut self, n: usize) -> String {
        let mut out = String::with_capacity(n.div_ceil(8) * 8);
        for _ in 0..n.div_ceil(8) {
            let mut z = self.next_u64();
            for _ in 0..8 {
                out.push(char::from(ALPHABET[(z & 63) as usize]));
                z >>= 8;
            }
        }
        out.truncate(n);
        out
    }

    /// `uuid4()`: `hi = next()`, `lo = next()`, `v = hi << 64 | lo`, bits 76..79 set to `0100`
    /// and bits 62..63 to `10`, formatted as lowercase 8-4-4-4-12 hex.
    pub fn uuid4(&mut self) -> String {
        let hi = self.next_u64();
        let lo = self.next_u64();
        let mut v = (u128::from(hi) << 64) | u128::from(lo);
        v = (v & !(0xF << 76)) | (0x4 << 76);
        v = (v & !(0x3 << 62)) | (0x2 << 62);
        let h = format!("{v:032x}");
        format!(
            "{}-{}-{}-{}-{}",
            &h[0..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..32]
        )
    }

    /// `suffix()`: `next() % 10^16`.
    pub fn suffix(&mut self) -> u64 {
        self.next_u64() % 10_000_000_000_000_000
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_matches_the_standard_sequence() {
        let mut g = SplitMix64::from_state(0);
        let got: Vec<u64> = (0..4).map(|_| g.next_u64()).collect();
        assert_eq!(
            got,
            [
                0xE220_A839_7B1D_CDAF,
                0x6E78_9E6A_A1B9_65F4,
                0x06C4_5D18_8009_454F,
                0xF88B_B8A8_724C_81EC
            ]
        );
        let mut g = SplitMix64::from_state(1_234_567);
        let got: Vec<u64> = (0..5).map(|_| g.next_u64()).collect();
        assert_eq!(
            got,
            [
                6_457_827_717_110_365_317,
                3_203_168_211_198_807_973,
                9_817_491_932_198_370_423,
                4_593_380_528_125_082_431,
                16_408_922_859_458_223_821
            ]
        );
    }

    #[test]
    fn thread_state_packs_seed_and_thread_number() {
        assert_eq!(SplitMix64::for_thread(42, 0).state(), 42 << 32);
        assert_eq!(
            SplitMix64::for_thread(0x1_0000_0007, 1_000_003).state(),
            (7 << 32) | 1_000_003
        );
        assert_eq!(
            SplitMix64::for_thread(1, 0x5_0000_0002).state(),
            (1 << 32) | 2
        );
    }

    #[test]
    fn alphabet_has_64_ascii_chars() {
        assert_eq!(ALPHABET.len(), 64);
        assert!(ALPHABET.iter().all(u8::is_ascii));
        let mut sorted = ALPHABET.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 64);
    }

    #[test]
    fn text_uses_low_six_bits_of_each_byte_lsb_first() {
        let mut a = SplitMix64::for_thread(42, 0);
        let mut b = a.clone();
        let t = a.text(20);
        assert_eq!(t.len(), 20);
        assert!(t.bytes().all(|c| ALPHABET.contains(&c)));
        // Reference values computed independently (seed 42, thread 0).
        assert_eq!(t, "7FR XINQCZ7f6OyfPgXY");
        // ceil(20/8) = 3 draws were made, the chars follow the byte rule.
        let z = b.next_u64();
        let first: String = (0..8)
            .map(|i| char::from(ALPHABET[((z >> (8 * i)) & 63) as usize]))
            .collect();
        assert_eq!(&t[..8], first);
        b.next_u64();
        b.next_u64();
        assert_eq!(a, b);
        assert_eq!(SplitMix64::from_state(9).text(0), "");
        assert_eq!(SplitMix64::from_state(9).text(65536).len(), 65536);
        let mut c = SplitMix64::from_state(9);
        let seven = c.text(7);
        let mut d = SplitMix64::from_state(9);
        assert_eq!(seven, d.text(8)[..7]);
        assert_eq!(c, d, "text(7) draws one value, like text(8)");
    }

    #[test]
    fn uuid4_has_version_and_variant_bits() {
        let mut g = SplitMix64::for_thread(42, 0);
        let u = g.uuid4();
        assert_eq!(u, "ea67e2f1-beab-4fbb-8518-28ba45fb33dc");
        for _ in 0..1000 {
            let u = g.uuid4();
            assert_eq!(u.len(), 36);
            let parts: Vec<&str> = u.split('-').collect();
            assert_eq!(
                parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
                [8, 4, 4, 4, 12]
            );
            assert!(
                u.chars()
                    .all(|c| c == '-' || c.is_ascii_digit() || ('a'..='f').contains(&c))
            );
            assert!(parts[2].starts_with('4'), "{u}");
            assert!(matches!(&parts[3][..1], "8" | "9" | "a" | "b"), "{u}");
        }
    }

    #[test]
    fn suffix_is_below_ten_to_the_sixteen() {
        let mut g = SplitMix64::for_thread(42, 0);
        assert_eq!(g.suffix(), 718_455_390_265_275);
        for _ in 0..1000 {
            assert!(g.suffix() < 10_000_000_000_000_000);
        }
    }
}
