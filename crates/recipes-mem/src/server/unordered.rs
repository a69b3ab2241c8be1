//! The order of a list of children where children are ordered by sequence: none, as ZooKeeper's (decision 0089).

/// Puts a listing in an order of no meaning, as ZooKeeper's (its children are a hash set's): code that took the
/// listing's order for the creates' (names that start with a sequence) would pass here if the listing came sorted. A
/// shuffle drawn from the names' count and the first and last name (FNV-1a, then xorshift), the same for the same names
/// on every run, so that the model checker's schedules replay; linear, and no allocation.
pub(super) fn in_no_order(names: &mut [String]) {
    let n = names.len();
    if n < 2 {
        return;
    }
    let fnv = |h: u64, s: &str| {
        s.bytes()
            .fold(h, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
    };
    let mut x = fnv(fnv(0xcbf2_9ce4_8422_2325 ^ n as u64, &names[0]), &names[n - 1]) | 1;
    for i in (1..n).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        names.swap(i, (x % (i as u64 + 1)) as usize);
    }
}
