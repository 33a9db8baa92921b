//! DynamoDB errors, sorted into what the store's callers must tell apart: a failed condition
//! (with the item as it was, when asked for), a cancelled transaction (with one reason per item),
//! a transaction conflict (retry soon), throttling, and everything else.

use super::item::Item;
use agentlane_core::StoreError;
use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::CancellationReason;

/// A request that could not be built (a required field missing): a bug, reported as unavailable.
pub(crate) fn build_error(err: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(format!("building a DynamoDB request: {err}"))
}

/// A DynamoDB failure, classified.
#[derive(Debug)]
pub(crate) enum DdbError {
    /// `ConditionalCheckFailedException`; the old item when `ALL_OLD` was asked for and it existed.
    ConditionFailed(Option<Item>),
    /// `TransactionCanceledException`: one reason per transaction item, in request order.
    Cancelled(Vec<CancellationReason>),
    /// Another transaction touched the same item at the same time; retrying is safe.
    TransactionConflict,
    /// Anything else, already in the store's terms.
    Other(StoreError),
}

/// Cancellation reason code of a failed condition.
pub(crate) const REASON_CONDITION: &str = "ConditionalCheckFailed";
/// Cancellation reason code of a concurrent transaction on the same item.
pub(crate) const REASON_CONFLICT: &str = "TransactionConflict";

const THROTTLING_CODES: [&str; 5] = [
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "RequestLimitExceeded",
    "ThrottlingError",
    "ProvisionedThroughputExceeded",
];

/// Whether a service error code (or cancellation reason code) means "slow down".
pub(crate) fn is_throttling(code: &str) -> bool {
    THROTTLING_CODES.contains(&code)
}

/// Classifies any SDK error by its service error code.
pub(crate) fn classify<E, R>(err: SdkError<E, R>) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    let code = err
        .as_service_error()
        .and_then(|e| e.code())
        .map(str::to_owned);
    error_for_code(code.as_deref(), DisplayErrorContext(&err).to_string())
}

/// Whether a conditional request took effect: `Ok(true)`, `Ok(false)` when its condition did
/// not hold (`ConditionalCheckFailedException`), any other failure classified.
pub(crate) fn applied<T, E, R>(result: Result<T, SdkError<E, R>>) -> Result<bool, StoreError>
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    match result {
        Ok(_) => Ok(true),
        Err(err)
            if err.as_service_error().and_then(ProvideErrorMetadata::code)
                == Some(CONDITION_FAILED) =>
        {
            Ok(false)
        }
        Err(err) => Err(classify(err)),
    }
}

/// Service error code of a failed condition on a single-item request.
const CONDITION_FAILED: &str = "ConditionalCheckFailedException";

/// The store error for a failure with service error `code` (`None`: no answer from the service,
/// e.g. a connection failure or timeout).
pub(crate) fn error_for_code(code: Option<&str>, text: String) -> StoreError {
    match code {
        Some(c) if is_throttling(c) => StoreError::Throttled(text),
        _ => StoreError::Unavailable(text),
    }
}

impl From<SdkError<UpdateItemError>> for DdbError {
    fn from(err: SdkError<UpdateItemError>) -> Self {
        match err.as_service_error() {
            Some(UpdateItemError::ConditionalCheckFailedException(e)) => {
                DdbError::ConditionFailed(e.item().cloned())
            }
            Some(UpdateItemError::TransactionConflictException(_)) => DdbError::TransactionConflict,
            _ => DdbError::Other(classify(err)),
        }
    }
}

impl From<SdkError<PutItemError>> for DdbError {
    fn from(err: SdkError<PutItemError>) -> Self {
        match err.as_service_error() {
            Some(PutItemError::ConditionalCheckFailedException(e)) => {
                DdbError::ConditionFailed(e.item().cloned())
            }
            Some(PutItemError::TransactionConflictException(_)) => DdbError::TransactionConflict,
            _ => DdbError::Other(classify(err)),
        }
    }
}

impl From<SdkError<TransactWriteItemsError>> for DdbError {
    fn from(err: SdkError<TransactWriteItemsError>) -> Self {
        match err.as_service_error() {
            Some(TransactWriteItemsError::TransactionCanceledException(e)) => {
                tracing::debug!(reasons = ?e.cancellation_reasons(), "transaction cancelled");
                DdbError::Cancelled(e.cancellation_reasons().to_vec())
            }
            Some(e) if e.code() == Some("TransactionConflictException") => {
                DdbError::TransactionConflict
            }
            _ => DdbError::Other(classify(err)),
        }
    }
}

/// The reason code of item `index` of a cancelled transaction (`None` when it did not fail).
pub(crate) fn reason_code(reasons: &[CancellationReason], index: usize) -> Option<&str> {
    reasons
        .get(index)
        .and_then(CancellationReason::code)
        .filter(|code| *code != "None")
}

/// What a cancelled transaction means when no item-specific rule applies: a conflict with a
/// concurrent transaction (retry), throttling, or an unexpected failure.
pub(crate) fn generic_cancellation(reasons: &[CancellationReason]) -> DdbError {
    let codes: Vec<&str> = (0..reasons.len())
        .filter_map(|i| reason_code(reasons, i))
        .collect();
    if codes.contains(&REASON_CONFLICT) {
        return DdbError::TransactionConflict;
    }
    let summary = codes.join(", ");
    if codes.iter().any(|c| is_throttling(c)) {
        DdbError::Other(StoreError::Throttled(format!(
            "transaction cancelled: {summary}"
        )))
    } else {
        DdbError::Other(StoreError::Unavailable(format!(
            "transaction cancelled: {summary}"
        )))
    }
}

impl DdbError {
    /// The store error for a caller that has no special meaning for this failure.
    pub(crate) fn into_store_error(self, what: &str) -> StoreError {
        match self {
            DdbError::Other(e) => e,
            DdbError::ConditionFailed(_) => {
                StoreError::Unavailable(format!("{what}: unexpected condition failure"))
            }
            DdbError::Cancelled(reasons) => match generic_cancellation(&reasons) {
                DdbError::Other(e) => e,
                _ => StoreError::Throttled(format!("{what}: transaction conflict")),
            },
            DdbError::TransactionConflict => {
                StoreError::Throttled(format!("{what}: transaction conflict"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reasons(codes: &[&str]) -> Vec<CancellationReason> {
        codes
            .iter()
            .map(|c| CancellationReason::builder().code(*c).build())
            .collect()
    }

    #[test]
    fn throttling_codes_are_throttled_and_the_rest_unavailable() {
        for code in [
            "ProvisionedThroughputExceededException",
            "ThrottlingException",
            "RequestLimitExceeded",
        ] {
            assert_eq!(
                error_for_code(Some(code), "x".into()),
                StoreError::Throttled("x".into()),
                "{code}"
            );
        }
        for code in [
            Some("ValidationException"),
            Some("InternalServerError"),
            None,
        ] {
            assert_eq!(
                error_for_code(code, "x".into()),
                StoreError::Unavailable("x".into()),
                "{code:?}"
            );
        }
    }

    #[test]
    fn reason_codes_skip_none() {
        let r = reasons(&["None", REASON_CONDITION]);
        assert_eq!(reason_code(&r, 0), None);
        assert_eq!(reason_code(&r, 1), Some(REASON_CONDITION));
        assert_eq!(reason_code(&r, 2), None);
    }

    #[test]
    fn generic_cancellations_keep_their_kind() {
        assert!(matches!(
            generic_cancellation(&reasons(&["None", REASON_CONFLICT])),
            DdbError::TransactionConflict
        ));
        assert!(matches!(
            generic_cancellation(&reasons(&["ThrottlingError"])),
            DdbError::Other(StoreError::Throttled(_))
        ));
        assert!(matches!(
            generic_cancellation(&reasons(&["ValidationError"])),
            DdbError::Other(StoreError::Unavailable(_))
        ));
    }
}
