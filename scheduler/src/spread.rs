//! A stable hash of a job's name and numbers: the same on every replica and every build, so
//! that delays derived from it are agreed on without a word exchanged.

/// FNV-1a over `name` and each of `numbers` (little-endian), in `[0, 1)`.
pub(crate) fn unit(name: &str, numbers: &[i64]) -> f64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut hash = OFFSET;
    let bytes = name.bytes().chain(numbers.iter().flat_map(|n| n.to_le_bytes()));
    for byte in bytes {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(PRIME);
    }
    // The top 53 bits: exactly representable as an f64 below 1.
    (hash >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_and_in_range() {
        let a = unit("report", &[1_700_000_000_000, 2]);
        assert_eq!(a, unit("report", &[1_700_000_000_000, 2]));
        assert_ne!(a, unit("report", &[1_700_000_000_000, 3]));
        for i in 0..1000 {
            let u = unit("x", &[i]);
            assert!((0.0..1.0).contains(&u), "{u}");
        }
    }
}
