use recipes_model::configs::random;
use recipes_model::random_walks;
use std::time::Duration;
#[test]
fn deep_cohort() {
    for c in random().into_iter().filter(|c| c.name.starts_with("cohort")) {
        for seed in [7u64, 8] {
            let r = random_walks(&c, seed, 150_000, Duration::from_secs(150));
            println!("{r} (seed {seed})");
            assert!(r.violation.is_none(), "{:?}", r.violation);
        }
    }
}
