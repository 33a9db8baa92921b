//! Per-tenant admission: a request-rate limit (GCRA, `governor`) and caps on concurrent SSE
//! streams and `agent.wait` calls (semaphores). Each tenant has its own buckets, so one
//! tenant's flood answers `429` to that tenant only.
//!
//! The semaphores bound one process. Where many processes serve the API at once (on Lambda
//! each instance serves one request at a time, so a cap in memory bounds nothing), the caps are
//! also kept in the store ([`SharedSlots`]): a stream or wait then holds a leased slot there too,
//! renewed while it lasts and released when it ends; a process that dies holds its slots until
//! their lease ends (30 s).

use crate::error::ApiError;
use crate::limits::{Limits, TenantLimits};
use agentlane_core::{Clock, SlotKind, SlotStore, TenantId};
use governor::clock::{Clock as _, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// One tenant's buckets.
struct TenantGate {
    limits: TenantLimits,
    rate: Option<DefaultDirectRateLimiter>,
    streams: Arc<Semaphore>,
    waits: Arc<Semaphore>,
}

impl TenantGate {
    fn new(limits: TenantLimits) -> Self {
        let rate = NonZeroU32::new(limits.requests_per_second).map(|per_second| {
            let burst = NonZeroU32::new(limits.burst).unwrap_or(per_second);
            RateLimiter::direct(Quota::per_second(per_second).allow_burst(burst))
        });
        let permits = |n: u32| Arc::new(Semaphore::new(n as usize));
        Self {
            rate,
            streams: permits(limits.max_event_streams),
            waits: permits(limits.max_waits),
            limits,
        }
    }
}

/// A held slot (an SSE stream or a wait); the slot frees when this drops.
#[derive(Debug)]
pub struct Slot {
    /// `None` when the cap is off.
    _permit: Option<OwnedSemaphorePermit>,
    /// The slot in the store, when the caps are shared.
    _lease: Option<Lease>,
}

/// How long a shared slot is leased; its holder renews it every third of that.
pub const SHARED_SLOT_LEASE: Duration = Duration::from_secs(30);

/// The per-tenant caps kept in a store every process of the deployment shares.
#[derive(Clone)]
pub struct SharedSlots {
    /// Where the slots are kept (the deployment's table or database).
    pub store: Arc<dyn SlotStore>,
    /// Lease times are read from it.
    pub clock: Arc<dyn Clock>,
    /// How long a slot is leased ([`SHARED_SLOT_LEASE`]).
    pub lease: Duration,
}

impl SharedSlots {
    /// Slots in `store`, leased for [`SHARED_SLOT_LEASE`].
    pub fn new(store: Arc<dyn SlotStore>, clock: Arc<dyn Clock>) -> Self {
        Self {
            store,
            clock,
            lease: SHARED_SLOT_LEASE,
        }
    }

    fn lease_ms(&self) -> u64 {
        u64::try_from(self.lease.as_millis()).unwrap_or(u64::MAX)
    }

    /// Takes one of `tenant`'s `cap` slots of `kind` for a fresh holder, or answers `429`.
    async fn take(
        &self,
        tenant: &TenantId,
        kind: SlotKind,
        cap: u32,
        what: &str,
    ) -> Result<Lease, ApiError> {
        let holder = uuid::Uuid::new_v4().simple().to_string();
        let now = self.clock.now_ms();
        let until = now.saturating_add(self.lease_ms());
        match self
            .store
            .acquire_slot(tenant, kind, &holder, cap, now, until)
            .await
        {
            Ok(true) => Ok(Lease::start(self.clone(), tenant.clone(), kind, holder)),
            Ok(false) => Err(over_cap(what, cap)),
            Err(error) => {
                tracing::warn!(%error, kind = kind.as_str(), "could not take a shared slot");
                Err(ApiError::rate_limited(
                    format!("this tenant's {what} could not be counted just now; retry shortly"),
                    Duration::from_secs(1),
                ))
            }
        }
    }
}

/// A slot held in the store: renewed every third of its lease until dropped, then released.
struct Lease {
    renew: tokio::task::JoinHandle<()>,
    release: Option<(SharedSlots, TenantId, SlotKind, String)>,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease").finish_non_exhaustive()
    }
}

impl Lease {
    fn start(shared: SharedSlots, tenant: TenantId, kind: SlotKind, holder: String) -> Self {
        let renew = {
            let (shared, tenant, holder) = (shared.clone(), tenant.clone(), holder.clone());
            tokio::spawn(async move {
                let period = (shared.lease / 3).max(Duration::from_millis(10));
                loop {
                    tokio::time::sleep(period).await;
                    let until = shared.clock.now_ms().saturating_add(shared.lease_ms());
                    match shared.store.renew_slot(&tenant, kind, &holder, until).await {
                        Ok(true) => {}
                        Ok(false) => {
                            // Its lease ended unrenewed (a paused process) and another take
                            // dropped it: the stream goes on, no longer counted.
                            tracing::warn!(kind = kind.as_str(), "a shared slot was lost");
                            return;
                        }
                        Err(error) => {
                            tracing::warn!(%error, kind = kind.as_str(), "could not renew a shared slot");
                        }
                    }
                }
            })
        };
        Self {
            renew,
            release: Some((shared, tenant, kind, holder)),
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.renew.abort();
        let Some((shared, tenant, kind, holder)) = self.release.take() else {
            return;
        };
        // Released off the request's path; if the process stops first, the lease ends it.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(error) = shared.store.release_slot(&tenant, kind, &holder).await {
                    tracing::warn!(%error, kind = kind.as_str(), "could not release a shared slot");
                }
            });
        }
    }
}

/// The admission state of every tenant seen so far. Cheap to clone.
#[derive(Clone)]
pub struct Admission {
    limits: Arc<Limits>,
    gates: Arc<Mutex<HashMap<TenantId, Arc<TenantGate>>>>,
    shared: Option<SharedSlots>,
}

impl Admission {
    /// Fresh buckets under `limits`.
    pub fn new(limits: Limits) -> Self {
        Self {
            limits: Arc::new(limits),
            gates: Arc::default(),
            shared: None,
        }
    }

    /// Also keeps the stream and wait caps in `shared`, across every process that uses it.
    pub fn with_shared_slots(mut self, shared: Option<SharedSlots>) -> Self {
        self.shared = shared;
        self
    }

    fn gate(&self, tenant: &TenantId) -> Arc<TenantGate> {
        let mut gates = self.gates.lock().unwrap_or_else(PoisonError::into_inner);
        gates
            .entry(tenant.clone())
            .or_insert_with(|| Arc::new(TenantGate::new(self.limits.for_tenant(tenant))))
            .clone()
    }

    /// Counts one request of `tenant`; `429 rate_limited` with the time until the next one
    /// would pass when over its rate.
    pub fn admit_request(&self, tenant: &TenantId) -> Result<(), ApiError> {
        let gate = self.gate(tenant);
        let Some(rate) = &gate.rate else {
            return Ok(());
        };
        rate.check().map_err(|not_until| {
            let wait = not_until.wait_time_from(DefaultClock::default().now());
            ApiError::rate_limited(
                format!(
                    "too many requests: at most {} per second for this tenant",
                    gate.limits.requests_per_second
                ),
                wait,
            )
        })
    }

    /// A slot for one SSE stream of `tenant`, or `429` when it has its cap of open streams.
    pub async fn stream_slot(&self, tenant: &TenantId) -> Result<Slot, ApiError> {
        let gate = self.gate(tenant);
        let cap = gate.limits.max_event_streams;
        self.slot(
            tenant,
            &gate.streams,
            cap,
            SlotKind::Stream,
            "open event streams",
        )
        .await
    }

    /// A slot for one `agent.wait` of `tenant`, or `429` when it has its cap of waits.
    pub async fn wait_slot(&self, tenant: &TenantId) -> Result<Slot, ApiError> {
        let gate = self.gate(tenant);
        let cap = gate.limits.max_waits;
        self.slot(tenant, &gate.waits, cap, SlotKind::Wait, "concurrent waits")
            .await
    }

    /// This process's permit, then (when shared) the store's slot.
    async fn slot(
        &self,
        tenant: &TenantId,
        semaphore: &Arc<Semaphore>,
        cap: u32,
        kind: SlotKind,
        what: &str,
    ) -> Result<Slot, ApiError> {
        let mut slot = take(semaphore, cap, what)?;
        if let (Some(shared), true) = (&self.shared, cap > 0) {
            slot._lease = Some(shared.take(tenant, kind, cap, what).await?);
        }
        Ok(slot)
    }

    /// The admission limits of `tenant`.
    pub fn limits_of(&self, tenant: &TenantId) -> TenantLimits {
        self.gate(tenant).limits.clone()
    }
}

fn take(semaphore: &Arc<Semaphore>, cap: u32, what: &str) -> Result<Slot, ApiError> {
    if cap == 0 {
        return Ok(Slot {
            _permit: None,
            _lease: None,
        });
    }
    semaphore
        .clone()
        .try_acquire_owned()
        .map(|permit| Slot {
            _permit: Some(permit),
            _lease: None,
        })
        .map_err(|_| over_cap(what, cap))
}

fn over_cap(what: &str, cap: u32) -> ApiError {
    ApiError::rate_limited(
        format!("too many {what}: at most {cap} for this tenant; close one and retry"),
        Duration::from_secs(1),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::limits::TenantOverride;

    fn limits(tenant: TenantLimits) -> Limits {
        Limits {
            tenant,
            ..Limits::default()
        }
    }

    #[test]
    fn a_tenant_over_its_rate_is_refused_with_a_delay_and_another_is_not() {
        let admission = Admission::new(limits(TenantLimits {
            requests_per_second: 2,
            burst: 3,
            ..TenantLimits::default()
        }));
        let (a, b) = (TenantId::new("a"), TenantId::new("b"));
        for _ in 0..3 {
            admission.admit_request(&a).unwrap();
        }
        let refused = admission.admit_request(&a).unwrap_err();
        assert_eq!(refused.code(), "rate_limited");
        let retry = refused.retry_after().unwrap();
        assert!(
            retry > Duration::ZERO && retry <= Duration::from_millis(500),
            "{retry:?}"
        );
        admission.admit_request(&b).unwrap();
    }

    #[tokio::test]
    async fn slots_are_capped_per_tenant_and_freed_on_drop() {
        let mut config = limits(TenantLimits {
            max_event_streams: 2,
            max_waits: 0,
            ..TenantLimits::default()
        });
        config.tenants.insert(
            "big".into(),
            TenantOverride {
                max_event_streams: Some(3),
                ..TenantOverride::default()
            },
        );
        let admission = Admission::new(config);
        let (a, big) = (TenantId::new("a"), TenantId::new("big"));
        let first = admission.stream_slot(&a).await.unwrap();
        let _second = admission.stream_slot(&a).await.unwrap();
        assert_eq!(
            admission.stream_slot(&a).await.unwrap_err().code(),
            "rate_limited"
        );
        let mut held = Vec::new();
        for _ in 0..3 {
            held.push(admission.stream_slot(&big).await.unwrap());
        }
        assert!(admission.stream_slot(&big).await.is_err());
        drop(first);
        admission.stream_slot(&a).await.unwrap();
        // A cap of 0 is off.
        let mut waits = Vec::new();
        for _ in 0..100 {
            waits.push(admission.wait_slot(&a).await.unwrap());
        }
        assert_eq!((held.len(), waits.len()), (3, 100));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_shared_slot_is_renewed_while_held_and_released_when_dropped() {
        let backend = Arc::new(agentlane_store_sqlite::SqliteBackend::open_temporary().unwrap());
        let instance = || {
            let shared = SharedSlots {
                store: backend.clone(),
                clock: Arc::new(agentlane_core::SystemClock),
                lease: Duration::from_millis(300),
            };
            Admission::new(limits(TenantLimits {
                max_event_streams: 1,
                ..TenantLimits::default()
            }))
            .with_shared_slots(Some(shared))
        };
        let (one, two) = (instance(), instance());
        let a = TenantId::new("a");
        let held = one.stream_slot(&a).await.unwrap();
        // Three leases later the slot still counts on the other instance: it was renewed.
        tokio::time::sleep(Duration::from_millis(900)).await;
        assert_eq!(
            two.stream_slot(&a).await.unwrap_err().code(),
            "rate_limited"
        );
        // Dropped, it is released at once (well before its lease would end).
        drop(held);
        let mut freed = None;
        for _ in 0..20 {
            tokio::time::sleep(Duration::from_millis(10)).await;
            if let Ok(slot) = two.stream_slot(&a).await {
                freed = Some(slot);
                break;
            }
        }
        assert!(freed.is_some(), "the dropped slot was not released");
    }
}
