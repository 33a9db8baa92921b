//! Jittered retry delays, so a fleet of runners that failed together does not retry together.

use rand::Rng;
use std::time::Duration;

/// `delay` spread uniformly over ±20 %: never less than 80 % nor more than 120 % of it. Every
/// retry delay in agentlane (model retries, store conflicts, enqueue retries, lock polls) goes
/// through this.
pub fn jittered(delay: Duration) -> Duration {
    let millis = delay.as_millis().min(u128::from(u64::MAX)) as u64;
    let spread = millis / 5;
    if spread == 0 {
        return delay;
    }
    let low = millis - spread;
    Duration::from_millis(rand::rng().random_range(low..=millis + spread))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_within_twenty_percent_and_varies() {
        let base = Duration::from_millis(10_000);
        let samples: Vec<Duration> = (0..200).map(|_| jittered(base)).collect();
        assert!(
            samples
                .iter()
                .all(|d| (8_000..=12_000).contains(&d.as_millis()))
        );
        let distinct: std::collections::HashSet<_> = samples.iter().collect();
        assert!(
            distinct.len() > 20,
            "jitter should vary: {}",
            distinct.len()
        );
    }

    #[test]
    fn tiny_delays_are_kept() {
        assert_eq!(jittered(Duration::from_millis(3)), Duration::from_millis(3));
        assert_eq!(jittered(Duration::ZERO), Duration::ZERO);
    }
}
