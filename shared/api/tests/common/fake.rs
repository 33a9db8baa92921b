//! TEMPORARY in-memory Store + LaneQueue used until agentlane-store-sqlite compiles.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::collapsible_if,
    dead_code
)]

use agentlane_core::*;
use async_trait::async_trait;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

#[derive(Default)]
struct Inner {
    sessions: HashMap<(TenantId, SessionKey), Session>,
    runs: HashMap<(TenantId, RunId), Run>,
    idem: HashMap<(TenantId, String), (RunId, u64)>,
    transcript: HashMap<(TenantId, SessionId), BTreeMap<u64, TranscriptEntry>>,
    events: HashMap<(TenantId, RunId), BTreeMap<u64, Event>>,
    queue: Vec<(LaneMessage, bool)>,
    dedup: std::collections::HashSet<String>,
}

#[derive(Default)]
pub struct Fake(Mutex<Inner>);

#[async_trait]
impl Store for Fake {
    async fn accept_turn(&self, t: NewTurn) -> StoreResult<AcceptOutcome> {
        let mut g = self.0.lock().unwrap();
        if let Some(k) = &t.idempotency_key {
            if let Some((id, exp)) = g.idem.get(&(t.tenant.clone(), k.clone())) {
                if *exp > t.now {
                    let run = g.runs[&(t.tenant.clone(), id.clone())].clone();
                    return Ok(AcceptOutcome {
                        run,
                        created: false,
                    });
                }
            }
        }
        let s = g
            .sessions
            .entry((t.tenant.clone(), t.session_key.clone()))
            .or_insert_with(|| Session {
                tenant: t.tenant.clone(),
                session_key: t.session_key.clone(),
                session_id: t.new_session_id.clone(),
                status: SessionStatus::Idle,
                active_run_id: None,
                created_at: t.now,
                updated_at: t.now,
                last_progress_at: None,
                runs_accepted: 0,
                runs_finished: 0,
                generation: 0,
                lock_owner: None,
                lock_until: 0,
                fence: 0,
            });
        s.runs_accepted += 1;
        let run = Run {
            run_id: t.run_id.clone(),
            tenant: t.tenant.clone(),
            session_key: t.session_key.clone(),
            session_id: s.session_id.clone(),
            status: RunStatus::Queued,
            liveness_state: LivenessState::Working,
            request: t.request,
            idempotency_key: t.idempotency_key.clone(),
            accepted_at: t.now,
            started_at: None,
            ended_at: None,
            model: None,
            attempts: vec![],
            usage: Usage::default(),
            payloads: vec![],
            error: None,
            abort_requested: false,
            pickups: 0,
            checkpoint: None,
        };
        g.runs
            .insert((t.tenant.clone(), t.run_id.clone()), run.clone());
        if let Some(k) = t.idempotency_key {
            g.idem
                .insert((t.tenant, k), (t.run_id, t.now + t.idempotency_ttl_ms));
        }
        Ok(AcceptOutcome { run, created: true })
    }
    async fn get_run(&self, tenant: &TenantId, id: &RunId) -> StoreResult<Option<Run>> {
        Ok(self
            .0
            .lock()
            .unwrap()
            .runs
            .get(&(tenant.clone(), id.clone()))
            .cloned())
    }
    async fn request_abort(&self, tenant: &TenantId, id: &RunId) -> StoreResult<Option<Run>> {
        let mut g = self.0.lock().unwrap();
        Ok(g.runs.get_mut(&(tenant.clone(), id.clone())).map(|r| {
            r.abort_requested = true;
            r.clone()
        }))
    }
    async fn get_session(
        &self,
        tenant: &TenantId,
        key: &SessionKey,
    ) -> StoreResult<Option<Session>> {
        Ok(self
            .0
            .lock()
            .unwrap()
            .sessions
            .get(&(tenant.clone(), key.clone()))
            .cloned())
    }
    async fn reset_session(
        &self,
        tenant: &TenantId,
        key: &SessionKey,
        id: SessionId,
        now: u64,
    ) -> StoreResult<Session> {
        let mut g = self.0.lock().unwrap();
        let s = g
            .sessions
            .get_mut(&(tenant.clone(), key.clone()))
            .ok_or(StoreError::NotFound("s".into()))?;
        if s.lock_owner.is_some() && s.lock_until > now {
            return Err(StoreError::Busy);
        }
        s.session_id = id;
        s.generation += 1;
        s.updated_at = now;
        Ok(s.clone())
    }
    async fn read_transcript(
        &self,
        tenant: &TenantId,
        id: &SessionId,
        after: Option<u64>,
        limit: usize,
    ) -> StoreResult<Vec<TranscriptEntry>> {
        let g = self.0.lock().unwrap();
        Ok(g.transcript
            .get(&(tenant.clone(), id.clone()))
            .map(|m| {
                m.values()
                    .filter(|e| after.is_none_or(|a| e.seq > a))
                    .take(limit)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default())
    }
    async fn read_events(
        &self,
        tenant: &TenantId,
        id: &RunId,
        after: Option<u64>,
        limit: usize,
    ) -> StoreResult<Vec<Event>> {
        let g = self.0.lock().unwrap();
        Ok(g.events
            .get(&(tenant.clone(), id.clone()))
            .map(|m| {
                m.values()
                    .filter(|e| after.is_none_or(|a| e.seq > a))
                    .take(limit)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default())
    }
    async fn acquire_lock(
        &self,
        tenant: &TenantId,
        key: &SessionKey,
        owner: &str,
        lease_ms: u64,
        now: u64,
    ) -> StoreResult<LockAttempt> {
        let mut g = self.0.lock().unwrap();
        let s = g
            .sessions
            .get_mut(&(tenant.clone(), key.clone()))
            .ok_or(StoreError::NotFound("s".into()))?;
        if let Some(o) = &s.lock_owner {
            if s.lock_until > now {
                return Ok(LockAttempt::Held {
                    owner: o.clone(),
                    until: s.lock_until,
                });
            }
        }
        s.fence += 1;
        s.lock_owner = Some(owner.into());
        s.lock_until = now + lease_ms;
        Ok(LockAttempt::Acquired(Fence {
            tenant: tenant.clone(),
            session_key: key.clone(),
            owner: owner.into(),
            token: FencingToken(s.fence),
        }))
    }
    async fn renew_lock(&self, _f: &Fence, _l: u64, _n: u64) -> StoreResult<()> {
        Ok(())
    }
    async fn release_lock(&self, f: &Fence) -> StoreResult<()> {
        let mut g = self.0.lock().unwrap();
        let s = g
            .sessions
            .get_mut(&(f.tenant.clone(), f.session_key.clone()))
            .unwrap();
        s.lock_owner = None;
        Ok(())
    }
    async fn commit(&self, f: &Fence, c: Commit) -> StoreResult<()> {
        let mut g = self.0.lock().unwrap();
        let sid = g.sessions[&(f.tenant.clone(), f.session_key.clone())]
            .session_id
            .clone();
        for e in c.transcript {
            g.transcript
                .entry((f.tenant.clone(), sid.clone()))
                .or_default()
                .insert(e.seq, e);
        }
        if let Some(mut run) = c.run {
            let key = (f.tenant.clone(), run.run_id.clone());
            run.abort_requested = g.runs.get(&key).is_some_and(|r| r.abort_requested);
            for e in c.events {
                g.events.entry(key.clone()).or_default().insert(e.seq, e);
            }
            g.runs.insert(key, run);
        }
        if c.release_lock {
            g.sessions
                .get_mut(&(f.tenant.clone(), f.session_key.clone()))
                .unwrap()
                .lock_owner = None;
        }
        Ok(())
    }
}

#[async_trait]
impl LaneQueue for Fake {
    async fn enqueue(&self, m: &LaneMessage) -> QueueResult<()> {
        let mut g = self.0.lock().unwrap();
        if g.dedup.insert(m.dedup_id.clone()) {
            g.queue.push((m.clone(), false));
        }
        Ok(())
    }
    async fn receive(&self, max: usize, _v: Duration, _w: Duration) -> QueueResult<Vec<Delivery>> {
        let mut g = self.0.lock().unwrap();
        let mut out = vec![];
        for (i, (m, taken)) in g.queue.iter_mut().enumerate() {
            if !*taken && out.len() < max {
                *taken = true;
                out.push(Delivery {
                    message: m.clone(),
                    receipt: Receipt(i.to_string()),
                    receive_count: 1,
                });
            }
        }
        Ok(out)
    }
    async fn ack(&self, _r: &Receipt) -> QueueResult<()> {
        Ok(())
    }
    async fn set_visibility(&self, _r: &Receipt, _v: Duration) -> QueueResult<()> {
        Ok(())
    }
}
