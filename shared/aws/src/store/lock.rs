//! The session write lock (owner + lease + fencing token) and session reset: conditional
//! `UpdateItem`s on the session item.

use super::error::DdbError;
use super::item::{
    ACTIVE_RUN_ID, FENCE, GENERATION, LOCK_OWNER, LOCK_UNTIL, PROC_AT, PROC_PK, QUEUE_MODE,
    RESET_BARRIER, RESET_UNTIL, RUNS_ACCEPTED, SESSION_ID, STATUS, UPDATED_AT, n, s,
    session_from_item, status_str,
};
use super::keys::{self, PK, SESSION_SK, SK};
use super::{CONFLICT_RETRIES, DynamoStore, conflict_backoff};
use agentlane_core::{
    Fence, FencingToken, LockAttempt, QueueMode, RESET_HOLD_MS, Session, SessionId, SessionKey,
    SessionStatus, StoreError, StoreResult, TenantId,
};
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::{ReturnValue, ReturnValuesOnConditionCheckFailure};

/// Core's liveness rule ([`Session::lock_is_live`]) negated, as a DynamoDB condition: no owner,
/// or a lease that ended before `:now`.
const LOCK_IS_FREE: &str = "attribute_not_exists(lockOwner) OR lockUntil < :now";
/// Core's fence rule ([`Session::is_fenced_by`]) as a DynamoDB condition.
pub(super) const FENCE_IS_CURRENT: &str = "lockOwner = :me AND fence = :f";

impl DynamoStore {
    fn session_update(&self, tenant: &TenantId, key: &SessionKey) -> UpdateItemFluentBuilder {
        self.client
            .update_item()
            .table_name(&self.table)
            .key(PK, s(keys::session_pk(tenant, key)))
            .key(SK, s(SESSION_SK))
    }

    pub(super) async fn acquire(
        &self,
        tenant: &TenantId,
        key: &SessionKey,
        owner: &str,
        lease_ms: u64,
        now: u64,
    ) -> StoreResult<LockAttempt> {
        for attempt in 0..CONFLICT_RETRIES {
            let result = self
                .session_update(tenant, key)
                .update_expression(format!(
                    "SET {LOCK_OWNER} = :me, {LOCK_UNTIL} = :until, \
                     {FENCE} = if_not_exists({FENCE}, :zero) + :one"
                ))
                .condition_expression(format!("attribute_exists({PK}) AND ({LOCK_IS_FREE})"))
                .expression_attribute_values(":me", s(owner))
                .expression_attribute_values(":until", n(now.saturating_add(lease_ms)))
                .expression_attribute_values(":now", n(now))
                .expression_attribute_values(":zero", n(0))
                .expression_attribute_values(":one", n(1))
                .return_values(ReturnValue::AllNew)
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                )
                .send()
                .await;
            let old = match result {
                Ok(out) => {
                    let item = out.attributes.unwrap_or_default();
                    let session = session_from_item(&item)?;
                    let fence = Fence {
                        tenant: tenant.clone(),
                        session_key: key.clone(),
                        owner: owner.to_owned(),
                        token: FencingToken(session.fence),
                    };
                    self.remember_fence(&fence, session.session_id.clone());
                    return Ok(LockAttempt::Acquired(fence, Box::new(session)));
                }
                Err(err) => match DdbError::from(err) {
                    DdbError::ConditionFailed(Some(old)) => old,
                    DdbError::ConditionFailed(None) => {
                        match self
                            .get_item(keys::session_pk(tenant, key), SESSION_SK)
                            .await?
                        {
                            Some(old) => old,
                            None => {
                                return Err(StoreError::NotFound(format!(
                                    "session {} of tenant {tenant}",
                                    key.fingerprint()
                                )));
                            }
                        }
                    }
                    DdbError::TransactionConflict => {
                        conflict_backoff(attempt).await;
                        continue;
                    }
                    other => return Err(other.into_store_error("acquire_lock")),
                },
            };
            match session_from_item(&old)?.lock_holder(now) {
                Some(held) => return Ok(held),
                // The lock looked free: it changed between our write and our read; try again.
                None => conflict_backoff(attempt).await,
            }
        }
        Err(StoreError::Busy)
    }

    /// A conditional update on the fenced session item; `FenceLost` when the condition fails.
    async fn fenced_update(
        &self,
        fence: &Fence,
        update: impl Fn(UpdateItemFluentBuilder) -> UpdateItemFluentBuilder,
        what: &str,
    ) -> StoreResult<()> {
        for attempt in 0..CONFLICT_RETRIES {
            let request = self
                .session_update(&fence.tenant, &fence.session_key)
                .condition_expression(FENCE_IS_CURRENT)
                .expression_attribute_values(":me", s(fence.owner.as_str()))
                .expression_attribute_values(":f", n(fence.token.0));
            match update(request).send().await {
                Ok(_) => return Ok(()),
                Err(err) => match DdbError::from(err) {
                    DdbError::ConditionFailed(_) => {
                        self.forget_fence(fence);
                        return Err(StoreError::FenceLost);
                    }
                    DdbError::TransactionConflict => conflict_backoff(attempt).await,
                    other => return Err(other.into_store_error(what)),
                },
            }
        }
        Err(StoreError::Throttled(format!(
            "{what}: the session item stayed in conflicting transactions"
        )))
    }

    pub(super) async fn renew(&self, fence: &Fence, lease_ms: u64, now: u64) -> StoreResult<()> {
        let until = now.saturating_add(lease_ms);
        self.fenced_update(
            fence,
            |req| {
                req.update_expression(format!("SET {LOCK_UNTIL} = :until"))
                    .expression_attribute_values(":until", n(until))
            },
            "renew_lock",
        )
        .await
    }

    pub(super) async fn release(&self, fence: &Fence) -> StoreResult<()> {
        self.fenced_update(
            fence,
            |req| {
                req.update_expression(format!("SET {LOCK_UNTIL} = :zero REMOVE {LOCK_OWNER}"))
                    .expression_attribute_values(":zero", n(0))
            },
            "release_lock",
        )
        .await?;
        self.forget_fence(fence);
        Ok(())
    }

    pub(super) async fn reset(
        &self,
        tenant: &TenantId,
        key: &SessionKey,
        new_session_id: SessionId,
        now: u64,
    ) -> StoreResult<Session> {
        // Clearing an expired owner makes its fence stale, so a session id never changes under
        // a current fence.
        let result = self
            .session_update(tenant, key)
            .update_expression(format!(
                "SET {SESSION_ID} = :sid, {GENERATION} = {GENERATION} + :one, \
                 {UPDATED_AT} = :now, #st = :idle, {LOCK_UNTIL} = :zero \
                 REMOVE {LOCK_OWNER}, {ACTIVE_RUN_ID}, {PROC_PK}, {PROC_AT}"
            ))
            .condition_expression(format!("attribute_exists({PK}) AND ({LOCK_IS_FREE})"))
            .expression_attribute_names("#st", STATUS)
            .expression_attribute_values(":sid", s(new_session_id.as_str()))
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":zero", n(0))
            .expression_attribute_values(":now", n(now))
            .expression_attribute_values(":idle", s(status_str(SessionStatus::Idle)))
            .return_values(ReturnValue::AllNew)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(out) => session_from_item(&out.attributes.unwrap_or_default()),
            Err(err) => match DdbError::from(err) {
                DdbError::ConditionFailed(old) => {
                    let exists = match old {
                        Some(_) => true,
                        None => self
                            .get_item(keys::session_pk(tenant, key), SESSION_SK)
                            .await?
                            .is_some(),
                    };
                    if exists {
                        self.raise_reset_barrier(tenant, key, now).await?;
                        Err(StoreError::Busy)
                    } else {
                        Err(StoreError::NotFound(format!(
                            "session {} of tenant {tenant}",
                            key.fingerprint()
                        )))
                    }
                }
                other => Err(other.into_store_error("reset_session")),
            },
        }
    }

    /// The key's default queue mode, set (`SET queueMode`) or cleared (`REMOVE`).
    pub(super) async fn set_session_queue_mode(
        &self,
        tenant: &TenantId,
        key: &SessionKey,
        mode: Option<QueueMode>,
        now: u64,
    ) -> StoreResult<Session> {
        let update = self.session_update(tenant, key);
        let update = match mode {
            Some(mode) => update
                .update_expression(format!("SET {QUEUE_MODE} = :mode, {UPDATED_AT} = :now"))
                .expression_attribute_values(":mode", s(mode.as_str())),
            None => {
                update.update_expression(format!("SET {UPDATED_AT} = :now REMOVE {QUEUE_MODE}"))
            }
        };
        let result = update
            .condition_expression(format!("attribute_exists({PK})"))
            .expression_attribute_values(":now", n(now))
            .return_values(ReturnValue::AllNew)
            .send()
            .await;
        match result {
            Ok(out) => session_from_item(&out.attributes.unwrap_or_default()),
            Err(err) => match DdbError::from(err) {
                DdbError::ConditionFailed(_) => Err(StoreError::NotFound(format!(
                    "session {key} of tenant {tenant}"
                ))),
                other => Err(other.into_store_error("set_queue_mode")),
            },
        }
    }

    /// A reset waits for the lock: the runs accepted so far are held
    /// (`resetBarrier` = `runsAccepted`, never lowered) until `now +` [`RESET_HOLD_MS`].
    async fn raise_reset_barrier(
        &self,
        tenant: &TenantId,
        key: &SessionKey,
        now: u64,
    ) -> StoreResult<()> {
        let result = self
            .session_update(tenant, key)
            .update_expression(format!(
                "SET {RESET_BARRIER} = {RUNS_ACCEPTED}, {RESET_UNTIL} = :until"
            ))
            .condition_expression(format!("attribute_exists({PK})"))
            .expression_attribute_values(":until", n(now + RESET_HOLD_MS))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(err) => match DdbError::from(err) {
                // The session is gone: nothing to hold.
                DdbError::ConditionFailed(_) => Ok(()),
                other => Err(other.into_store_error("reset_session")),
            },
        }
    }

    /// The session id a commit's transcript entries belong to: remembered from the acquire, or
    /// read (and the fence checked) when this process did not take the lock.
    pub(super) async fn fenced_session_id(&self, fence: &Fence) -> StoreResult<SessionId> {
        if let Some(id) = self.remembered_session(fence) {
            return Ok(id);
        }
        let item = self
            .get_item(
                keys::session_pk(&fence.tenant, &fence.session_key),
                SESSION_SK,
            )
            .await?
            .ok_or(StoreError::FenceLost)?;
        let session = session_from_item(&item)?;
        if !session.is_fenced_by(fence) {
            return Err(StoreError::FenceLost);
        }
        self.remember_fence(fence, session.session_id.clone());
        Ok(session.session_id)
    }
}
