//! Per-tenant admission: a request-rate limit (GCRA, `governor`) and caps on concurrent SSE
//! streams and `agent.wait` calls (semaphores). Each tenant has its own buckets, so one
//! tenant's flood answers `429` to that tenant only.

use crate::error::ApiError;
use crate::limits::{Limits, TenantLimits};
use agentlane_core::TenantId;
use governor::clock::{Clock, DefaultClock};
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
}

/// The admission state of every tenant seen so far. Cheap to clone.
#[derive(Clone)]
pub struct Admission {
    limits: Arc<Limits>,
    gates: Arc<Mutex<HashMap<TenantId, Arc<TenantGate>>>>,
}

impl Admission {
    /// Fresh buckets under `limits`.
    pub fn new(limits: Limits) -> Self {
        Self {
            limits: Arc::new(limits),
            gates: Arc::default(),
        }
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
    pub fn stream_slot(&self, tenant: &TenantId) -> Result<Slot, ApiError> {
        let gate = self.gate(tenant);
        take(
            &gate.streams,
            gate.limits.max_event_streams,
            "open event streams",
        )
    }

    /// A slot for one `agent.wait` of `tenant`, or `429` when it has its cap of waits.
    pub fn wait_slot(&self, tenant: &TenantId) -> Result<Slot, ApiError> {
        let gate = self.gate(tenant);
        take(&gate.waits, gate.limits.max_waits, "concurrent waits")
    }

    /// The admission limits of `tenant`.
    pub fn limits_of(&self, tenant: &TenantId) -> TenantLimits {
        self.gate(tenant).limits.clone()
    }
}

fn take(semaphore: &Arc<Semaphore>, cap: u32, what: &str) -> Result<Slot, ApiError> {
    if cap == 0 {
        return Ok(Slot { _permit: None });
    }
    semaphore
        .clone()
        .try_acquire_owned()
        .map(|permit| Slot {
            _permit: Some(permit),
        })
        .map_err(|_| {
            ApiError::rate_limited(
                format!("too many {what}: at most {cap} for this tenant; close one and retry"),
                Duration::from_secs(1),
            )
        })
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

    #[test]
    fn slots_are_capped_per_tenant_and_freed_on_drop() {
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
        let first = admission.stream_slot(&a).unwrap();
        let _second = admission.stream_slot(&a).unwrap();
        assert_eq!(
            admission.stream_slot(&a).unwrap_err().code(),
            "rate_limited"
        );
        let held: Vec<Slot> = (0..3)
            .map(|_| admission.stream_slot(&big).unwrap())
            .collect();
        assert!(admission.stream_slot(&big).is_err());
        drop(first);
        admission.stream_slot(&a).unwrap();
        // A cap of 0 is off.
        let waits: Vec<Slot> = (0..100).map(|_| admission.wait_slot(&a).unwrap()).collect();
        assert_eq!((held.len(), waits.len()), (3, 100));
    }
}
