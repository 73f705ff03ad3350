//! Which requests are slow: the rule the services apply when they work and the load command
//! applies when it counts, so both agree on every request id without talking to each other.

/// Whether request `id` is one of the slow ones: a hash of the id and seed, so the same requests
/// are slow in every run and at every hop, and every attempt of a slow request is slow.
pub(crate) fn is_slow(id: &str, seed: u64, share: f64) -> bool {
    if share <= 0.0 {
        return false;
    }
    // FNV-1a, then a splitmix64 finaliser so nearby ids spread evenly.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for b in id.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^= h >> 31;
    ((h >> 11) as f64 / (1u64 << 53) as f64) < share
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slowness_is_a_property_of_the_request_id() {
        let slow: Vec<bool> = (0..10_000)
            .map(|i| is_slow(&format!("load-{i}"), 7, 0.05))
            .collect();
        let again: Vec<bool> = (0..10_000)
            .map(|i| is_slow(&format!("load-{i}"), 7, 0.05))
            .collect();
        assert_eq!(slow, again, "the same ids are slow every time");
        let share = slow.iter().filter(|s| **s).count() as f64 / 10_000.0;
        assert!(
            (0.04..0.06).contains(&share),
            "about 5 % are slow, got {share}"
        );
        let other_seed = (0..10_000)
            .filter(|i| is_slow(&format!("load-{i}"), 8, 0.05))
            .count();
        assert_ne!(other_seed, 0);
        assert!(!is_slow("x", 1, 0.0));
        assert!(is_slow("x", 1, 1.0));
    }
}
