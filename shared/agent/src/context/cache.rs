//! The decoded transcripts of the sessions this runner serves, so a turn does not read and
//! decode its session's whole transcript again (issue 26.1).
//!
//! A pickup [takes](TranscriptCache::take) its session's entries out of the cache under the
//! lane lock, runs the turn on them, and [puts](TranscriptCache::put) them back extended with
//! what the turn wrote ([`TranscriptLog`]). Only the lock holder writes a session's transcript
//! (every write is a commit under the lock's fence), and every acquire of the lock bumps the
//! session's fence by one. So entries put back after the pickup under fence `F` are still the
//! whole transcript at the next pickup if and only if that pickup's fence is `F + 1` and the
//! session still has the same id and generation (a reset changes both): any other holder in
//! between (another worker, another process, a direct fenced write, a sweep) moved the fence
//! further, and the pickup reads the transcript from the store instead ([`is_current`]).
//!
//! A turn whose commits did not all succeed (or that took steer messages the store wrote, or
//! wrote a compaction summary) puts nothing back: the next pickup reloads. The cache is bounded
//! by an estimate of the entries' bytes and evicts the least recently used session.
//!
//! Each entry's message is a [`SharedMessage`]: the turn's history and its model requests share
//! it by `Arc`, and it keeps its provider encodings, so a turn on a cached transcript copies no
//! message and encodes only the entries it has not sent before (issue 26.1). The encodings go
//! with their entry: a stale transcript is dropped whole, fragments and all.

use agentlane_core::{Message, RunId, SessionId, SessionKey, TenantId, TranscriptEntry};
use agentlane_providers::SharedMessage;
use hashlink::LruCache;
use std::sync::{Arc, Mutex, PoisonError};

/// A transcript entry as the runner keeps it: its message shared (with its encodings).
#[derive(Debug, Clone, PartialEq)]
pub struct SharedEntry {
    /// The entry's position in the transcript.
    pub seq: u64,
    /// The run that wrote it.
    pub run_id: RunId,
    /// What it says.
    pub message: SharedMessage,
}

impl From<TranscriptEntry> for SharedEntry {
    fn from(entry: TranscriptEntry) -> Self {
        Self {
            seq: entry.seq,
            run_id: entry.run_id,
            message: SharedMessage::new(entry.message),
        }
    }
}

/// The session a transcript belongs to, as the lock found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionMark {
    /// The session's id (a reset gives it a new one).
    pub session_id: SessionId,
    /// Bumped by every reset.
    pub generation: u64,
    /// The fencing token of the pickup that read or wrote the entries last.
    pub fence: u64,
}

/// Whether entries `cached` as of one pickup are still the whole transcript for the pickup
/// that found `now`: the same session id and generation, and no other lock holder since.
pub fn is_current(cached: &SessionMark, now: &SessionMark) -> bool {
    cached.session_id == now.session_id
        && cached.generation == now.generation
        && cached.fence.checked_add(1) == Some(now.fence)
}

/// A session's transcript as the runner keeps it, with its size (estimated) kept as a running
/// sum, so putting it back does not visit every entry again.
#[derive(Debug, Default, PartialEq)]
pub struct Kept {
    entries: Vec<SharedEntry>,
    bytes: usize,
}

impl Kept {
    /// The transcript `entries`, sized once.
    pub fn new(entries: Vec<SharedEntry>) -> Self {
        let bytes = entries.iter().map(entry_bytes).sum();
        Self { entries, bytes }
    }

    /// The entries, in order.
    pub fn entries(&self) -> &[SharedEntry] {
        &self.entries
    }

    /// Appends what a turn wrote.
    pub fn extend(&mut self, landed: Vec<SharedEntry>) {
        self.bytes += landed.iter().map(entry_bytes).sum::<usize>();
        self.entries.extend(landed);
    }

    /// The size estimate of the entries ([`entry_bytes`] summed).
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

/// One cached transcript.
struct Cached {
    mark: SessionMark,
    kept: Kept,
}

struct Inner {
    map: LruCache<(TenantId, SessionKey), Cached>,
    bytes: usize,
}

/// The runner's transcript cache, shared by its lane workers; bounded by bytes (estimated).
pub struct TranscriptCache {
    capacity: usize,
    min_entries: usize,
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for TranscriptCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TranscriptCache")
            .field("capacity", &self.capacity)
            .field("min_entries", &self.min_entries)
            .finish_non_exhaustive()
    }
}

/// An estimate of the memory one entry holds (its texts, counted twice for its encodings, and
/// a fixed overhead).
pub fn entry_bytes(entry: &SharedEntry) -> usize {
    const OVERHEAD: usize = 256;
    OVERHEAD + entry.run_id.as_str().len() + 2 * super::tokens::message_chars(&entry.message)
}

impl TranscriptCache {
    /// A cache of at most about `capacity` bytes of entries; 0 turns it off.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            min_entries: 0,
            inner: Mutex::new(Inner {
                map: LruCache::new_unbounded(),
                bytes: 0,
            }),
        }
    }

    /// Keeps only transcripts of at least `min_entries` entries: a shorter one is cheaper to
    /// read again than to hold (one short indexed read on SQLite), so idle sessions with a
    /// few turns cost no memory. 0 or 1 keeps every transcript (on DynamoDB every reload is
    /// a billed request).
    pub fn with_min_entries(mut self, min_entries: usize) -> Self {
        self.min_entries = min_entries;
        self
    }

    /// Whether the cache keeps anything.
    pub fn enabled(&self) -> bool {
        self.capacity > 0
    }

    /// The bytes (estimated) the cache holds now.
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the session's entries out of the cache: `Some` when they are still the whole
    /// transcript for a pickup that found `now` (see [`is_current`]). Stale entries are dropped.
    pub fn take(&self, tenant: &TenantId, key: &SessionKey, now: &SessionMark) -> Option<Kept> {
        if !self.enabled() {
            return None;
        }
        let mut inner = self.lock();
        let cached = inner.map.remove(&(tenant.clone(), key.clone()))?;
        inner.bytes -= cached.kept.bytes;
        is_current(&cached.mark, now).then_some(cached.kept)
    }

    /// Keeps `entries`, the whole transcript of the session after the pickup `mark` names, for
    /// the next pickup; evicts the least recently used sessions beyond the capacity. A
    /// transcript larger than the whole capacity, or shorter than the minimum, is not kept.
    pub fn put(&self, tenant: &TenantId, key: &SessionKey, mark: SessionMark, kept: Kept) {
        let bytes = kept.bytes;
        if bytes > self.capacity || kept.entries().len() < self.min_entries {
            return;
        }
        let mut inner = self.lock();
        let cached = Cached { mark, kept };
        if let Some(old) = inner.map.insert((tenant.clone(), key.clone()), cached) {
            inner.bytes -= old.kept.bytes;
        }
        inner.bytes += bytes;
        while inner.bytes > self.capacity {
            match inner.map.remove_lru() {
                Some((_, evicted)) => inner.bytes -= evicted.kept.bytes,
                None => break,
            }
        }
    }
}

/// What one pickup's writer committed to the transcript, in order; spoiled (nothing to put
/// back) when a commit failed, the store wrote entries the writer did not build (steer or
/// collect messages), or a compaction summary was written.
#[derive(Debug, Clone, Default)]
pub struct TranscriptLog {
    inner: Arc<Mutex<Option<Vec<SharedEntry>>>>,
}

impl TranscriptLog {
    /// An empty log.
    pub fn new() -> Self {
        Self {
            inner: Arc::new(Mutex::new(Some(Vec::new()))),
        }
    }

    /// Entries that landed.
    pub fn landed(&self, entries: Vec<TranscriptEntry>) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if entries
            .iter()
            .any(|e| matches!(e.message, Message::Compaction { .. }))
        {
            *inner = None;
        } else if let Some(log) = inner.as_mut() {
            log.extend(entries.into_iter().map(SharedEntry::from));
        }
    }

    /// The log no longer knows what the transcript holds.
    pub fn spoil(&self) {
        *self.inner.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// What landed, unless spoiled.
    pub fn take(&self) -> Option<Vec<SharedEntry>> {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentlane_core::RunId;

    fn mark(id: &str, generation: u64, fence: u64) -> SessionMark {
        SessionMark {
            session_id: SessionId::new(id),
            generation,
            fence,
        }
    }

    fn raw(seq: u64, text: &str) -> TranscriptEntry {
        TranscriptEntry {
            seq,
            run_id: RunId::new("run-1"),
            ts: 0,
            message: Message::user(text.to_owned()),
        }
    }

    fn entry(seq: u64, text: &str) -> SharedEntry {
        raw(seq, text).into()
    }

    #[test]
    fn cached_entries_are_current_only_for_the_very_next_lock_holder() {
        let cached = mark("s1", 0, 7);
        let table = [
            (
                mark("s1", 0, 8),
                true,
                "the next acquire, nobody in between",
            ),
            (mark("s1", 0, 9), false, "another holder in between"),
            (mark("s1", 0, 7), false, "the same fence again"),
            (
                mark("s1", 0, 3),
                false,
                "a fence that went back (recreated session)",
            ),
            (mark("s2", 1, 8), false, "a reset: new id and generation"),
            (mark("s1", 1, 8), false, "a new generation"),
            (mark("s2", 0, 8), false, "a new session id"),
        ];
        for (now, current, why) in table {
            assert_eq!(is_current(&cached, &now), current, "{why}");
        }
        assert!(!is_current(&mark("s1", 0, u64::MAX), &mark("s1", 0, 0)));
    }

    #[test]
    fn a_take_empties_the_slot_and_a_stale_take_finds_nothing() {
        let cache = TranscriptCache::new(1 << 20);
        let (t, k) = (TenantId::new("t"), SessionKey::new("k"));
        cache.put(&t, &k, mark("s1", 0, 1), Kept::new(vec![entry(0, "hi")]));
        assert!(cache.bytes() > 0);
        let taken = cache.take(&t, &k, &mark("s1", 0, 2));
        assert_eq!(taken, Some(Kept::new(vec![entry(0, "hi")])));
        assert_eq!(cache.take(&t, &k, &mark("s1", 0, 2)), None, "taken once");
        cache.put(&t, &k, mark("s1", 0, 2), Kept::new(vec![entry(0, "hi")]));
        assert_eq!(cache.take(&t, &k, &mark("s1", 0, 4)), None, "stale");
        assert_eq!(cache.bytes(), 0, "a stale entry is dropped");
        let other = TenantId::new("u");
        cache.put(&t, &k, mark("s1", 0, 2), Kept::new(vec![entry(0, "hi")]));
        assert_eq!(
            cache.take(&other, &k, &mark("s1", 0, 3)),
            None,
            "per tenant"
        );
    }

    #[test]
    fn a_transcript_shorter_than_the_minimum_is_read_again_instead_of_kept() {
        let (t, k) = (TenantId::new("t"), SessionKey::new("k"));
        // (minimum, entries, kept)
        let table = [
            (0, 1, true),
            (1, 1, true),
            (4, 3, false),
            (4, 4, true),
            (4, 9, true),
        ];
        for (min, len, kept) in table {
            let cache = TranscriptCache::new(1 << 20).with_min_entries(min);
            let entries = (0..len).map(|seq| entry(seq, "hi")).collect();
            cache.put(&t, &k, mark("s1", 0, 1), Kept::new(entries));
            let taken = cache.take(&t, &k, &mark("s1", 0, 2));
            assert_eq!(taken.is_some(), kept, "minimum {min}, {len} entries");
            assert_eq!(cache.bytes(), 0);
        }
    }

    #[test]
    fn the_least_recently_used_session_goes_first_and_the_bytes_stay_bounded() {
        let one = entry_bytes(&entry(0, &"x".repeat(1000)));
        let cache = TranscriptCache::new(one * 2 + one / 2);
        let t = TenantId::new("t");
        for key in ["a", "b", "c"] {
            let entries = vec![entry(0, &"x".repeat(1000))];
            cache.put(
                &t,
                &SessionKey::new(key),
                mark(key, 0, 1),
                Kept::new(entries),
            );
            assert!(cache.bytes() <= one * 2 + one / 2);
        }
        assert_eq!(
            cache.take(&t, &SessionKey::new("a"), &mark("a", 0, 2)),
            None
        );
        assert!(
            cache
                .take(&t, &SessionKey::new("b"), &mark("b", 0, 2))
                .is_some()
        );
        assert!(
            cache
                .take(&t, &SessionKey::new("c"), &mark("c", 0, 2))
                .is_some()
        );
        // A transcript larger than the whole cache is not kept at all.
        let big = vec![entry(0, &"x".repeat(one * 3))];
        cache.put(
            &t,
            &SessionKey::new("big"),
            mark("big", 0, 1),
            Kept::new(big),
        );
        assert_eq!(cache.bytes(), 0);
    }

    #[test]
    fn an_off_cache_keeps_nothing() {
        let cache = TranscriptCache::new(0);
        let (t, k) = (TenantId::new("t"), SessionKey::new("k"));
        cache.put(&t, &k, mark("s1", 0, 1), Kept::new(vec![entry(0, "hi")]));
        assert_eq!(cache.take(&t, &k, &mark("s1", 0, 2)), None);
    }

    #[test]
    fn a_log_with_a_compaction_or_a_failure_has_nothing_to_put_back() {
        let log = TranscriptLog::new();
        log.landed(vec![raw(0, "a")]);
        log.landed(vec![raw(1, "b")]);
        assert_eq!(log.clone().take(), Some(vec![entry(0, "a"), entry(1, "b")]));

        let log = TranscriptLog::new();
        log.landed(vec![raw(0, "a")]);
        log.spoil();
        log.landed(vec![raw(1, "b")]);
        assert_eq!(log.take(), None);

        let log = TranscriptLog::new();
        let mut summary = raw(0, "a");
        summary.message = Message::Compaction {
            summary: "s".into(),
            through_seq: 0,
            tokens_before: 0,
            tokens_after: 0,
        };
        log.landed(vec![summary]);
        assert_eq!(log.take(), None);
    }

    #[test]
    fn a_kept_transcripts_running_size_is_the_size_of_all_its_entries() {
        let mut kept = Kept::new(vec![entry(0, "a"), entry(1, &"b".repeat(300))]);
        kept.extend(vec![entry(2, "c"), entry(3, &"d".repeat(70))]);
        let all = Kept::new(kept.entries().to_vec());
        assert_eq!(kept.bytes(), all.bytes());
        assert_eq!(kept.entries().len(), 4);
    }
}
