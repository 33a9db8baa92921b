//! Runs started from their accepted record, without a read (issue 26.2).
//!
//! On the embedded backend the accept writes the run and its lane message in one transaction
//! ([`SqliteBackend::queue_accepted_turns`]). The process that accepted a run also remembers
//! the run's record as accepted, in memory, until the run's first delivery: it remembers it in
//! the accept's own write, before that write commits, so no receive (every one is a write on
//! the same writer thread) can deliver the message before the record is there. `receive` hands it
//! to the runner on that delivery's message ([`TurnMessage::accepted`]) if, in the receive's
//! own write, the stored run is still exactly that record with no abort requested (a run
//! steered, collected or aborted while queued is read at its pickup), and the runner takes
//! the run from it instead of reading it ([`FencedWriter::expect_accepted`]). The run's first
//! commit under that lock then checks, in its own transaction on the writer connection, that
//! the stored record is still exactly the accepted one with no abort requested; otherwise it
//! writes nothing and answers `Conflict`, and the runner reads the run and starts over.
//!
//! Why: a read on a reader connection after any write starts from an empty page cache (SQLite
//! drops a connection's cache, and its file mapping, when another connection has written), so
//! the pickup's read of the run cost more than the rest of the pickup's reads together. The
//! check runs on the writer connection, whose cache stays warm.
//!
//! Nothing here is needed for correctness: a record not remembered (another process accepted
//! the run, this one restarted, the memory bound was reached) only means the run is read.
//!
//! [`FencedWriter::expect_accepted`]: agentlane_core::FencedWriter::expect_accepted
//! [`TurnMessage::accepted`]: agentlane_core::TurnMessage::accepted
//! [`SqliteBackend::queue_accepted_turns`]: crate::SqliteBackend::queue_accepted_turns

use crate::error::Result;
use agentlane_core::{AcceptedRecord, Delivery, Fence, RunId, StoreError, TenantId};
use hashlink::LinkedHashMap;
use rusqlite::{Connection, OptionalExtension, params};
use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

/// Runs remembered as accepted and not yet delivered, at most; past it, the oldest is forgotten
/// (its run is read at pickup). A record whose message is never delivered here (its accept's
/// transaction failed after the record was remembered, another process received it) is
/// forgotten the same way, so such records never hold the room for good.
const MAX_REMEMBERED_RUNS: usize = 1024;

/// Pickups that took a run from its record and have not committed it yet, at most; past it a
/// pickup is told to read the run ([`Accepted::expect`] answers `false`). Entries are never
/// dropped to make room: a pickup whose entry vanished would commit its run unchecked.
const MAX_REMEMBERED_FENCES: usize = 1024;

/// A fence, as a map key: the lock's session and token.
type FenceKey = (TenantId, String, u64);

fn fence_key(fence: &Fence) -> FenceKey {
    (
        fence.tenant.clone(),
        fence.session_key.as_str().to_owned(),
        fence.token.0,
    )
}

/// Runs accepted here and not delivered yet, oldest forgotten first past a bound.
struct Remembered {
    /// Each run's record, oldest first.
    records: LinkedHashMap<(TenantId, RunId), AcceptedRecord>,
    /// How many runs it keeps at most.
    bound: usize,
}

impl Remembered {
    fn new(bound: usize) -> Self {
        Self {
            records: LinkedHashMap::new(),
            bound: bound.max(1),
        }
    }

    /// Remembers `record` for `run` (as the newest), forgetting the oldest runs past the bound.
    fn insert(&mut self, run: (TenantId, RunId), record: AcceptedRecord) {
        self.records.remove(&run);
        while self.records.len() >= self.bound {
            self.records.pop_front();
        }
        self.records.insert(run, record);
    }

    /// The record of `run`, forgotten.
    fn remove(&mut self, run: &(TenantId, RunId)) -> Option<AcceptedRecord> {
        self.records.remove(run)
    }

    fn is_empty(&self) -> bool {
        self.records.is_empty()
    }
}

/// The records this process accepted (until delivered) and the ones pickups took (until their
/// first commit checks them).
pub(crate) struct Accepted {
    /// Accepted here, not delivered yet.
    runs: Mutex<Remembered>,
    /// Taken by the holder of a lock, to be checked by its first commit of the run.
    expected: Mutex<HashMap<FenceKey, (RunId, AcceptedRecord)>>,
}

impl Default for Accepted {
    fn default() -> Self {
        Self {
            runs: Mutex::new(Remembered::new(MAX_REMEMBERED_RUNS)),
            expected: Mutex::default(),
        }
    }
}

impl Accepted {
    /// Remembers `record` as run `run_id`'s accepted record. Called in the accept's own write,
    /// before its transaction commits, so it is there before any receive can deliver the
    /// run's message (a record remembered after the commit missed the deliveries that came
    /// first, and stayed, unused, until it filled the room).
    pub(crate) fn remember(&self, tenant: &TenantId, run_id: &RunId, record: AcceptedRecord) {
        self.runs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert((tenant.clone(), run_id.clone()), record);
    }

    /// Puts the accepted record on each first delivery of a run accepted here (the message the
    /// accept queued: its dedup id is the run id), and forgets it: a later delivery of the
    /// same message reads the run. Runs in the receive's own write (`tx`): a record is put on
    /// the message only while the stored run is still exactly it with no abort requested
    /// ([`check`]), so a run steered, collected or aborted while it was queued is read at its
    /// pickup, before any model call; a change after the receive is still found by the run's
    /// first commit.
    pub(crate) fn attach(&self, tx: &Connection, deliveries: &mut [Delivery]) {
        let mut runs = self.runs.lock().unwrap_or_else(PoisonError::into_inner);
        if runs.is_empty() {
            return;
        }
        for delivery in deliveries {
            let body = &mut delivery.message.body;
            if delivery.message.dedup_id != body.run_id.as_str() || body.accepted.is_some() {
                continue;
            }
            body.accepted = runs
                .remove(&(body.tenant.clone(), body.run_id.clone()))
                .filter(|record| check(tx, &body.tenant, &body.run_id, record).is_ok());
        }
    }

    /// The holder of `fence` takes run `run_id` from `record`: its next commit of the run
    /// checks it. `false` (read the run instead) when too many pickups are remembered already.
    pub(crate) fn expect(&self, fence: &Fence, run_id: &RunId, record: &AcceptedRecord) -> bool {
        let mut expected = self.expected.lock().unwrap_or_else(PoisonError::into_inner);
        let key = fence_key(fence);
        if expected.len() >= MAX_REMEMBERED_FENCES && !expected.contains_key(&key) {
            return false;
        }
        expected.insert(key, (run_id.clone(), record.clone()));
        true
    }

    /// The record the commit of `run_id` under `fence` must still find, taken (checked once).
    pub(crate) fn take_expected(&self, fence: &Fence, run_id: &RunId) -> Option<AcceptedRecord> {
        let mut expected = self.expected.lock().unwrap_or_else(PoisonError::into_inner);
        let key = fence_key(fence);
        match expected.get(&key) {
            Some((expected_run, _)) if expected_run == run_id => {
                expected.remove(&key).map(|(_, record)| record)
            }
            _ => None,
        }
    }

    /// Forgets what the holder of `fence` took (its lock is released).
    pub(crate) fn forget_fence(&self, fence: &Fence) {
        self.expected
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&fence_key(fence));
    }
}

/// Inside a commit's transaction: the stored run is still exactly `record` with no abort
/// requested, or `Conflict`.
pub(crate) fn check(
    tx: &Connection,
    tenant: &TenantId,
    run_id: &RunId,
    record: &AcceptedRecord,
) -> Result<()> {
    let stored: Option<(String, i64)> = tx
        .prepare_cached("SELECT body, abort_requested FROM runs WHERE tenant = ?1 AND run_id = ?2")?
        .query_row(params![tenant.as_str(), run_id.as_str()], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })
        .optional()?;
    match stored {
        Some((body, 0)) if body == record.0 => Ok(()),
        Some(_) | None => Err(StoreError::Conflict(format!(
            "run {run_id} changed since its accept (its record, or an abort request)"
        ))
        .into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(n: usize) -> (TenantId, RunId) {
        (TenantId::new("t"), RunId::new(format!("run-{n}")))
    }

    fn record(n: usize) -> AcceptedRecord {
        AcceptedRecord(format!("{{\"n\":{n}}}"))
    }

    #[test]
    fn past_its_bound_the_oldest_record_is_forgotten_not_the_newest() {
        let mut remembered = Remembered::new(3);
        for n in 0..5 {
            remembered.insert(run(n), record(n));
        }
        // the two oldest made room; the newest three are kept
        assert_eq!(remembered.remove(&run(0)), None);
        assert_eq!(remembered.remove(&run(1)), None);
        for n in 2..5 {
            assert_eq!(remembered.remove(&run(n)), Some(record(n)));
        }
        assert!(remembered.is_empty());
    }

    #[test]
    fn a_record_taken_frees_its_room_and_one_remembered_again_is_kept_once() {
        let mut remembered = Remembered::new(2);
        remembered.insert(run(0), record(0));
        remembered.insert(run(1), record(1));
        assert_eq!(remembered.remove(&run(0)), Some(record(0)));
        remembered.insert(run(2), record(2));
        remembered.insert(run(2), record(22));
        // run 1 still there: taking run 0 made the room, and run 2 counts once
        assert_eq!(remembered.records.len(), 2);
        assert_eq!(remembered.remove(&run(1)), Some(record(1)));
        assert_eq!(remembered.remove(&run(2)), Some(record(22)));
    }
}
