//! Guards against a run that loops: the post-compaction loop guard (the same tool call with the
//! same result again and again right after a compaction). The tool-round cap is decided in
//! [`super::decide`] from the run's attempt ledger.

use serde::{Deserialize, Serialize};

/// Tool observations watched after a compaction.
pub const POST_COMPACTION_GUARD_WINDOW: u32 = 3;

/// Post-compaction loop guard: right after a compaction, the same tool call with the same
/// arguments and the same result three times within three observations aborts the run instead
/// of letting it loop until the timeout.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PostCompactionGuard {
    /// Observations left in the watch window; 0 when the guard is not armed.
    pub remaining: u32,
    /// Hashes of the (tool, arguments, result) outcomes seen since it was armed.
    pub seen: Vec<u64>,
}

impl PostCompactionGuard {
    /// Starts watching (right after a compaction).
    pub fn arm(&mut self) {
        self.remaining = POST_COMPACTION_GUARD_WINDOW;
        self.seen.clear();
    }

    /// Records one tool outcome; true when the guard trips.
    pub fn observe(&mut self, name: &str, arguments: &str, result: &str) -> bool {
        use std::hash::{Hash, Hasher};
        if self.remaining == 0 {
            return false;
        }
        self.remaining -= 1;
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (name, arguments, result).hash(&mut h);
        let key = h.finish();
        self.seen.push(key);
        let tripped =
            self.seen.iter().filter(|k| **k == key).count() as u32 >= POST_COMPACTION_GUARD_WINDOW;
        if self.remaining == 0 {
            self.seen.clear();
        }
        tripped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_post_compaction_guard_trips_on_three_identical_observations_only_when_armed() {
        let mut g = PostCompactionGuard::default();
        assert!(!g.observe("t", "{}", "r"), "disarmed");
        g.arm();
        assert!(!g.observe("t", "{}", "r"));
        assert!(!g.observe("t", "{}", "r"));
        assert!(g.observe("t", "{}", "r"));
        g.arm();
        assert!(!g.observe("t", "{}", "r"));
        assert!(!g.observe("t", "{}", "other result"));
        assert!(!g.observe("t", "{}", "r"));
        assert!(!g.observe("t", "{}", "r"), "the window is over");
    }
}
