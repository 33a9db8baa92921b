//! Per-tenant admission: a request-rate limit (GCRA, `governor`) and caps on concurrent SSE
//! streams and `agent.wait` calls (semaphores). Each tenant has its own buckets, so one
//! tenant's flood answers `429` to that tenant only. Before a store key lookup, the source
//! address's rate of lookups that found no key is checked (`key_probes_per_minute`).
//!
//! The buckets and semaphores bound one process. Where many processes serve the API at once
//! (on Lambda each instance serves one request at a time, so a limit in memory bounds
//! nothing), the limits are also kept in the store ([`SharedSlots`]):
//!
//! - a stream or wait holds a leased slot there too, renewed while it lasts and released when
//!   it ends; a process that dies holds its slots until their lease ends (30 s);
//! - a tenant's requests are counted in fixed one-second windows: each process claims a small
//!   allowance of requests from the window's count at a time ([`Allowance`]), at least 2 and
//!   about a quarter of what it admitted in the window before, so a simple turn (an accept and
//!   a wait) costs at most one store request, and a busy process one per many requests. Every
//!   process's claims together never pass `requests_per_second` in a window; an allowance left
//!   over may still be spent in the next window;
//! - the source address's unknown-key lookups are counted in one-minute windows.

use crate::error::ApiError;
use crate::limits::{Limits, TenantLimits};
use agentlane_core::{Clock, RateScope, SlotKind, SlotStore, TenantId, granted_of};
use governor::clock::{Clock as _, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use std::collections::HashMap;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The address a request came from: the peer of its connection (the local server), or the
/// source IP that API Gateway or the function URL saw (the ingress Lambda). A request without
/// one (a test driving the router directly) is not held to the per-address limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClientAddr(pub IpAddr);

/// A tenant's request window (ms).
const RATE_WINDOW_MS: u64 = 1_000;
/// A source address's key-probe window (ms).
const PROBE_WINDOW_MS: u64 = 60_000;
/// Largest allowance one claim asks for.
const MAX_CLAIM: u32 = 256;
/// Source addresses whose probe counts are kept in memory at most.
const MAX_PROBE_SOURCES: usize = 10_000;

/// What a process does with one request of a tenant under the shared rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Admitted from the allowance it holds.
    Admit,
    /// Refused: the store said the window is full.
    Refuse,
    /// Claim this many requests from the window's count in the store first.
    Claim(u32),
}

/// One process's allowance of one tenant's requests: claimed from the store's window count, not
/// yet admitted. A pure state machine; the store call is the caller's.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Allowance {
    /// Requests claimed and not yet admitted.
    units: u32,
    /// The window they were claimed in (usable in it and the next).
    claimed_in: u64,
    /// A window the store answered full: refused here without asking it again.
    full: Option<u64>,
    /// The window `used` counts.
    counting: u64,
    /// Requests admitted in `counting`.
    used: u32,
    /// Requests admitted in the window before `counting`.
    used_before: u32,
}

/// How many requests a claim asks for: a quarter of what this process admitted in the
/// previous window, at least 2 (an accept and its wait), at most [`MAX_CLAIM`] and `limit`.
fn claim_size(used_before: u32, limit: u32) -> u32 {
    (used_before / 4).clamp(2, MAX_CLAIM).min(limit.max(1))
}

impl Allowance {
    fn roll(&mut self, window: u64) {
        if window == self.counting {
            return;
        }
        self.used_before = if window == self.counting.saturating_add(RATE_WINDOW_MS) {
            self.used
        } else {
            0
        };
        self.used = 0;
        self.counting = window;
    }

    /// The step for one request in `window` under `limit` per window.
    fn step(&mut self, window: u64, limit: u32) -> Step {
        self.roll(window);
        if self.units > 0 && window <= self.claimed_in.saturating_add(RATE_WINDOW_MS) {
            self.units -= 1;
            self.used += 1;
            return Step::Admit;
        }
        self.units = 0;
        if self.full == Some(window) {
            return Step::Refuse;
        }
        Step::Claim(claim_size(self.used_before, limit))
    }

    /// Takes the store's answer to a claim of `asked` in `window` (the count after it): whether
    /// the request that made the claim is admitted.
    fn claimed(&mut self, window: u64, asked: u32, count_after: u64, limit: u32) -> bool {
        let granted = granted_of(count_after, asked, limit);
        if granted < asked {
            // The window is full for every process: ask no more until it ends.
            self.full = Some(window);
        }
        if granted == 0 {
            return false;
        }
        self.units = granted - 1;
        self.claimed_in = window;
        self.used += 1;
        true
    }
}

/// One tenant's buckets.
struct TenantGate {
    limits: TenantLimits,
    rate: Option<DefaultDirectRateLimiter>,
    streams: Arc<Semaphore>,
    waits: Arc<Semaphore>,
    /// This process's allowance of the tenant's shared rate window (one claim at a time).
    allowance: tokio::sync::Mutex<Allowance>,
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
            allowance: tokio::sync::Mutex::default(),
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
    /// The slot in the store, not taken yet (a wait's, until it outlives
    /// [`SHARED_WAIT_GRACE`]): see [`Slot::hold_shared`].
    deferred: Option<DeferredTake>,
}

/// A shared slot a wait takes only if it outlives [`SHARED_WAIT_GRACE`]: a wait that ends
/// within it (a short turn) costs no store write for its slot.
pub const SHARED_WAIT_GRACE: Duration = Duration::from_secs(1);

/// The store slot a [`Slot`] takes later.
struct DeferredTake {
    shared: SharedSlots,
    tenant: TenantId,
    kind: SlotKind,
    cap: u32,
    what: &'static str,
}

impl std::fmt::Debug for DeferredTake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeferredTake")
            .field("kind", &self.kind.as_str())
            .finish_non_exhaustive()
    }
}

impl Slot {
    /// Whether the slot's place in the store is still to be taken.
    pub fn is_deferred(&self) -> bool {
        self.deferred.is_some()
    }

    /// Takes the slot's place in the store now, if it was deferred: `429` when the tenant has
    /// its cap there.
    pub async fn hold_shared(&mut self) -> Result<(), ApiError> {
        if let Some(d) = self.deferred.take() {
            self._lease = Some(d.shared.take(&d.tenant, d.kind, d.cap, d.what).await?);
        }
        Ok(())
    }
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
    probes: Arc<Mutex<HashMap<IpAddr, ProbeCount>>>,
}

/// What this process knows of a source address's unknown-key lookups in one window.
#[derive(Debug, Clone, Copy, Default)]
struct ProbeCount {
    window: u64,
    /// Counted here (the whole count when the limits are not shared).
    count: u32,
    /// The limit is reached in `window` (here, or in the store).
    full: bool,
}

impl Admission {
    /// Fresh buckets under `limits`.
    pub fn new(limits: Limits) -> Self {
        Self {
            limits: Arc::new(limits),
            gates: Arc::default(),
            shared: None,
            probes: Arc::default(),
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
    /// would pass when over its rate: this process's bucket first, then (when shared) the
    /// deployment's window count in the store.
    pub async fn admit_request(&self, tenant: &TenantId) -> Result<(), ApiError> {
        let gate = self.gate(tenant);
        let Some(rate) = &gate.rate else {
            return Ok(());
        };
        let per_second = gate.limits.requests_per_second;
        rate.check().map_err(|not_until| {
            let wait = not_until.wait_time_from(DefaultClock::default().now());
            over_rate(per_second, wait)
        })?;
        let Some(shared) = &self.shared else {
            return Ok(());
        };
        let now = shared.clock.now_ms();
        let window = now - now % RATE_WINDOW_MS;
        let until_next = Duration::from_millis(window + RATE_WINDOW_MS - now);
        let mut allowance = gate.allowance.lock().await;
        let asked = match allowance.step(window, per_second) {
            Step::Admit => return Ok(()),
            Step::Refuse => return Err(over_rate(per_second, until_next)),
            Step::Claim(asked) => asked,
        };
        let scope = RateScope::Tenant(tenant.clone());
        match shared.store.add_to_window(&scope, window, asked).await {
            Ok(count) if allowance.claimed(window, asked, count, per_second) => Ok(()),
            Ok(_) => Err(over_rate(per_second, until_next)),
            Err(error) => {
                // This process's bucket still holds; the request itself meets the store next.
                tracing::warn!(%error, "could not count a request in the store; admitted");
                Ok(())
            }
        }
    }

    /// Before a store key lookup from `source`: `429 rate_limited` when the address has had its
    /// `key_probes_per_minute` lookups that found no key in this minute. No address, or a limit
    /// of 0: no check.
    pub async fn check_key_probes(&self, source: Option<ClientAddr>) -> Result<(), ApiError> {
        let limit = self.limits.key_probes_per_minute;
        let Some(ClientAddr(address)) = source.filter(|_| limit > 0) else {
            return Ok(());
        };
        let (window, until_next) = self.probe_window();
        let known = self.probe_count(address, window);
        let refused = || over_probes(limit, until_next);
        if known.full || known.count >= limit {
            return Err(refused());
        }
        let Some(shared) = &self.shared else {
            return Ok(());
        };
        let scope = RateScope::KeyProbes(address.to_string());
        match shared.store.add_to_window(&scope, window, 0).await {
            Ok(count) if count >= u64::from(limit) => {
                self.update_probes(address, window, |p| p.full = true);
                Err(refused())
            }
            Ok(_) => Ok(()),
            Err(error) => {
                tracing::warn!(%error, "could not read a key-probe count; lookup allowed");
                Ok(())
            }
        }
    }

    /// After a store key lookup from `source` found no key: counts it.
    pub async fn count_key_probe(&self, source: Option<ClientAddr>) {
        let limit = self.limits.key_probes_per_minute;
        let Some(ClientAddr(address)) = source.filter(|_| limit > 0) else {
            return;
        };
        let (window, _) = self.probe_window();
        self.update_probes(address, window, |p| {
            p.count = p.count.saturating_add(1);
            p.full |= p.count >= limit;
        });
        let Some(shared) = &self.shared else {
            return;
        };
        let scope = RateScope::KeyProbes(address.to_string());
        match shared.store.add_to_window(&scope, window, 1).await {
            Ok(count) if count >= u64::from(limit) => {
                self.update_probes(address, window, |p| p.full = true);
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "could not count a key probe"),
        }
    }

    /// The current probe window and the time until the next.
    fn probe_window(&self) -> (u64, Duration) {
        let now = self.shared.as_ref().map_or_else(
            || agentlane_core::SystemClock.now_ms(),
            |s| s.clock.now_ms(),
        );
        let window = now - now % PROBE_WINDOW_MS;
        (
            window,
            Duration::from_millis(window + PROBE_WINDOW_MS - now),
        )
    }

    fn probe_count(&self, address: IpAddr, window: u64) -> ProbeCount {
        let probes = self.probes.lock().unwrap_or_else(PoisonError::into_inner);
        probes
            .get(&address)
            .filter(|p| p.window == window)
            .copied()
            .unwrap_or(ProbeCount {
                window,
                ..ProbeCount::default()
            })
    }

    fn update_probes(&self, address: IpAddr, window: u64, change: impl FnOnce(&mut ProbeCount)) {
        let mut probes = self.probes.lock().unwrap_or_else(PoisonError::into_inner);
        if probes.len() >= MAX_PROBE_SOURCES && !probes.contains_key(&address) {
            probes.retain(|_, p| p.window == window);
            if probes.len() >= MAX_PROBE_SOURCES {
                probes.clear();
            }
        }
        let entry = probes.entry(address).or_default();
        if entry.window != window {
            *entry = ProbeCount {
                window,
                ..ProbeCount::default()
            };
        }
        change(entry);
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

    /// A slot for one `agent.wait` of `tenant`, or `429` when this process has the tenant's
    /// cap of waits. When the caps are shared, the store's slot is only taken when the wait
    /// outlives [`SHARED_WAIT_GRACE`] ([`Slot::hold_shared`]): most short waits never write
    /// it, and the waits younger than that are bounded by the tenant's request rate.
    pub fn wait_slot(&self, tenant: &TenantId) -> Result<Slot, ApiError> {
        let gate = self.gate(tenant);
        let (cap, what) = (gate.limits.max_waits, "concurrent waits");
        let mut slot = take(&gate.waits, cap, what)?;
        if let (Some(shared), true) = (&self.shared, cap > 0) {
            slot.deferred = Some(DeferredTake {
                shared: shared.clone(),
                tenant: tenant.clone(),
                kind: SlotKind::Wait,
                cap,
                what,
            });
        }
        Ok(slot)
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
            deferred: None,
        });
    }
    semaphore
        .clone()
        .try_acquire_owned()
        .map(|permit| Slot {
            _permit: Some(permit),
            _lease: None,
            deferred: None,
        })
        .map_err(|_| over_cap(what, cap))
}

fn over_rate(per_second: u32, wait: Duration) -> ApiError {
    ApiError::rate_limited(
        format!("too many requests: at most {per_second} per second for this tenant"),
        wait,
    )
}

fn over_probes(per_minute: u32, wait: Duration) -> ApiError {
    ApiError::rate_limited(
        format!(
            "too many unknown API keys from this address: at most {per_minute} a minute; \
             retry later"
        ),
        wait,
    )
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

    #[tokio::test]
    async fn a_tenant_over_its_rate_is_refused_with_a_delay_and_another_is_not() {
        let admission = Admission::new(limits(TenantLimits {
            requests_per_second: 2,
            burst: 3,
            ..TenantLimits::default()
        }));
        let (a, b) = (TenantId::new("a"), TenantId::new("b"));
        for _ in 0..3 {
            admission.admit_request(&a).await.unwrap();
        }
        let refused = admission.admit_request(&a).await.unwrap_err();
        assert_eq!(refused.code(), "rate_limited");
        let retry = refused.retry_after().unwrap();
        assert!(
            retry > Duration::ZERO && retry <= Duration::from_millis(500),
            "{retry:?}"
        );
        admission.admit_request(&b).await.unwrap();
    }

    #[test]
    fn a_claim_is_a_quarter_of_the_last_windows_use_within_bounds() {
        // (admitted in the window before, limit) → asked
        let cases = [
            (0, 100, 2),
            (7, 100, 2),
            (40, 100, 10),
            (10_000, 5_000, 256),
            (0, 1, 1),
            (100, 3, 3),
        ];
        for (used_before, limit, asked) in cases {
            assert_eq!(
                claim_size(used_before, limit),
                asked,
                "{used_before} {limit}"
            );
        }
    }

    #[test]
    fn an_allowance_admits_from_its_claims_and_asks_again_only_when_spent_or_the_window_is_new() {
        let mut allowance = Allowance::default();
        // First request of window 1000: claim 2 (the request and one more).
        assert_eq!(allowance.step(1_000, 10), Step::Claim(2));
        assert!(allowance.claimed(1_000, 2, 2, 10));
        assert_eq!(allowance.step(1_000, 10), Step::Admit);
        assert_eq!(allowance.step(1_000, 10), Step::Claim(2));
        // Another process took most of the window: 1 of 2 fits, then the window is full here.
        assert!(allowance.claimed(1_000, 2, 11, 10));
        assert_eq!(allowance.step(1_000, 10), Step::Refuse);
        assert_eq!(allowance.step(1_000, 10), Step::Refuse);
        // The next window asks again; a claim granted nothing refuses the request.
        assert_eq!(allowance.step(2_000, 10), Step::Claim(2));
        assert!(!allowance.claimed(2_000, 2, 14, 10));
        assert_eq!(allowance.step(2_000, 10), Step::Refuse);
        // A busy window makes the next claims bigger (a quarter of 40 admitted).
        let mut busy = Allowance::default();
        for _ in 0..20 {
            assert_eq!(busy.step(5_000, 1_000), Step::Claim(2));
            assert!(busy.claimed(5_000, 2, 2, 1_000));
            assert_eq!(busy.step(5_000, 1_000), Step::Admit);
        }
        assert_eq!(busy.step(6_000, 1_000), Step::Claim(10));
        assert!(busy.claimed(6_000, 10, 10, 1_000));
        // What is left over is spent in the next window, not the one after.
        assert_eq!(busy.step(7_000, 1_000), Step::Admit);
        assert_eq!(busy.units, 8);
        assert_eq!(busy.step(9_000, 1_000), Step::Claim(2));
    }

    /// A clock standing still at a given time.
    struct Fixed(u64);

    impl Clock for Fixed {
        fn now_ms(&self) -> u64 {
            self.0
        }
    }

    /// Two processes' admissions over one store, its clock fixed at `now`.
    fn two_sharing(limits_of: Limits, now: u64) -> (Admission, Admission) {
        let backend = Arc::new(agentlane_store_sqlite::SqliteBackend::open_temporary().unwrap());
        let instance = || {
            let shared = SharedSlots::new(backend.clone(), Arc::new(Fixed(now)));
            Admission::new(limits_of.clone()).with_shared_slots(Some(shared))
        };
        (instance(), instance())
    }

    #[tokio::test]
    async fn two_processes_sharing_a_store_admit_the_rate_once_between_them() {
        // Each process alone would admit 10 (its own bucket); together they admit 10.
        let (one, two) = two_sharing(
            limits(TenantLimits {
                requests_per_second: 10,
                burst: 10,
                ..TenantLimits::default()
            }),
            1_700_000_000_250,
        );
        let (a, b) = (TenantId::new("a"), TenantId::new("b"));
        let mut admitted = 0;
        for i in 0..20 {
            let process = if i % 2 == 0 { &one } else { &two };
            match process.admit_request(&a).await {
                Ok(()) => admitted += 1,
                Err(refused) => {
                    assert_eq!(refused.code(), "rate_limited");
                    // Until the window ends (750 ms): Retry-After rounds up to 1 s.
                    assert_eq!(refused.retry_after(), Some(Duration::from_millis(750)));
                }
            }
        }
        assert_eq!(admitted, 10);
        // The other tenant has its own window.
        for _ in 0..5 {
            one.admit_request(&b).await.unwrap();
        }
    }

    #[tokio::test]
    async fn an_address_with_its_unknown_keys_spent_is_refused_before_the_lookup_everywhere() {
        let (one, two) = two_sharing(
            Limits {
                key_probes_per_minute: 3,
                ..Limits::default()
            },
            1_700_000_010_000,
        );
        let probing = Some(ClientAddr("203.0.113.7".parse().unwrap()));
        let other = Some(ClientAddr("198.51.100.1".parse().unwrap()));
        // Three lookups that found nothing, spread over both processes.
        for process in [&one, &two, &one] {
            process.check_key_probes(probing).await.unwrap();
            process.count_key_probe(probing).await;
        }
        // THEN both refuse the fourth lookup before making it, until the minute ends (30 s)
        for process in [&two, &one] {
            let refused = process.check_key_probes(probing).await.unwrap_err();
            assert_eq!(refused.code(), "rate_limited");
            assert_eq!(refused.retry_after(), Some(Duration::from_secs(30)));
        }
        // AND another address, or a request with no address, looks up as before
        two.check_key_probes(other).await.unwrap();
        two.check_key_probes(None).await.unwrap();
    }

    #[tokio::test]
    async fn without_a_shared_store_the_probe_limit_holds_in_the_process() {
        let admission = Admission::new(Limits {
            key_probes_per_minute: 2,
            ..Limits::default()
        });
        let probing = Some(ClientAddr("203.0.113.7".parse().unwrap()));
        for _ in 0..2 {
            admission.check_key_probes(probing).await.unwrap();
            admission.count_key_probe(probing).await;
        }
        assert!(admission.check_key_probes(probing).await.is_err());
        // 0 turns it off.
        let off = Admission::new(Limits {
            key_probes_per_minute: 0,
            ..Limits::default()
        });
        for _ in 0..5 {
            off.check_key_probes(probing).await.unwrap();
            off.count_key_probe(probing).await;
        }
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
            waits.push(admission.wait_slot(&a).unwrap());
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
