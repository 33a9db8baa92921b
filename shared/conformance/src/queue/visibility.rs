//! Visibility timeouts: redelivery, hand-back, extension, stale receipts.

use super::{DUE_WITHIN, collect, drain, enqueue_all, messages, next_is};
use crate::fixtures;
use agentlane_core::{LaneQueue, QueueError};
use std::sync::Arc;
use std::time::Duration;

/// An unacked message comes back once its visibility ended, with `receive_count` 2 and a new
/// receipt, still ahead of the lane's next message.
pub async fn case_redelivery_after_visibility_timeout(queue: Arc<dyn LaneQueue>) {
    let lane = fixtures::lane();
    let (m1, m2) = (fixtures::message(&lane), fixtures::message(&lane));
    enqueue_all(&queue, &[m1.clone(), m2.clone()]).await;

    let first = collect(&queue, 1, Duration::from_secs(1), DUE_WITHIN).await;
    assert_eq!(messages(&first), vec![m1.clone()]);
    assert_eq!(first[0].receive_count, 1);

    // WHEN nobody acks it THEN it reappears (within a few seconds of its 1 s visibility)
    let again = next_is(&queue, &m1).await;
    assert_eq!(again.receive_count, 2);
    assert_ne!(
        again.receipt, first[0].receipt,
        "each delivery has its own receipt"
    );

    queue.ack(&again.receipt).await.expect("ack");
    let next = next_is(&queue, &m2).await;
    assert_eq!(next.receive_count, 1);
    queue.ack(&next.receipt).await.expect("ack");
}

/// `set_visibility(0)` hands the message back at once, at the head of its lane: the same message
/// is delivered again, not the lane's next one.
pub async fn case_zero_visibility_hands_back_same_message(queue: Arc<dyn LaneQueue>) {
    let lane = fixtures::lane();
    let (m1, m2) = (fixtures::message(&lane), fixtures::message(&lane));
    enqueue_all(&queue, &[m1.clone(), m2.clone()]).await;
    let first = next_is(&queue, &m1).await;

    queue
        .set_visibility(&first.receipt, Duration::ZERO)
        .await
        .expect("set_visibility(0)");

    let again = next_is(&queue, &m1).await;
    assert_eq!(again.receive_count, 2);
    queue.ack(&again.receipt).await.expect("ack");
    let next = next_is(&queue, &m2).await;
    queue.ack(&next.receipt).await.expect("ack");
}

/// Extending the visibility of an in-flight message keeps it hidden past its original end.
pub async fn case_visibility_extension_keeps_hidden(queue: Arc<dyn LaneQueue>) {
    let lane = fixtures::lane();
    let message = fixtures::message(&lane);
    queue.enqueue(&message).await.expect("enqueue");
    let first = collect(&queue, 1, Duration::from_secs(2), DUE_WITHIN).await;
    assert_eq!(messages(&first), vec![message.clone()]);

    queue
        .set_visibility(&first[0].receipt, Duration::from_secs(10))
        .await
        .expect("extend");

    // hidden well past the original 2 s
    let during = drain(&queue, Duration::from_secs(4)).await;
    assert_eq!(
        messages(&during),
        vec![],
        "the extended message stays hidden"
    );

    // and still there: handing it back delivers it again
    queue
        .set_visibility(&first[0].receipt, Duration::ZERO)
        .await
        .expect("hand back");
    let again = next_is(&queue, &message).await;
    assert_eq!(again.receive_count, 2);
    queue.ack(&again.receipt).await.expect("ack");
}

/// Acking with the receipt of an earlier delivery is either refused (`StaleReceipt`) or accepted;
/// if refused, the current delivery is untouched and its own receipt acks it. Either way the
/// message is then gone and the lane moves on. (SQS FIFO refuses stale receipts; some emulators
/// accept them and delete the message.)
pub async fn case_stale_receipt_ack_is_harmless(queue: Arc<dyn LaneQueue>) {
    let lane = fixtures::lane();
    let (m1, m2) = (fixtures::message(&lane), fixtures::message(&lane));
    enqueue_all(&queue, &[m1.clone(), m2.clone()]).await;
    let first = collect(&queue, 1, Duration::from_secs(1), DUE_WITHIN).await;
    assert_eq!(messages(&first), vec![m1.clone()]);
    let current = next_is(&queue, &m1).await;
    assert_eq!(current.receive_count, 2);

    let stale = queue.ack(&first[0].receipt).await;
    let fresh = queue.ack(&current.receipt).await;
    match stale {
        Err(QueueError::StaleReceipt) => {
            assert_eq!(
                fresh,
                Ok(()),
                "a refused stale ack must not delete the message"
            );
        }
        Ok(()) => assert!(
            matches!(fresh, Ok(()) | Err(QueueError::StaleReceipt)),
            "{fresh:?}"
        ),
        other => panic!("a stale receipt answers Ok or StaleReceipt, not {other:?}"),
    }

    let next = next_is(&queue, &m2).await;
    queue.ack(&next.receipt).await.expect("ack");
    let rest = drain(&queue, Duration::from_secs(2)).await;
    assert_eq!(messages(&rest), vec![], "m1 does not come back once acked");
}

/// `ack_and_receive` acks, and the lane's next message is delivered exactly once: with the ack
/// (a queue that can take it in the same step) or by the next receive (one that cannot). The
/// acked message never comes back; nor does the last one, acked with a look that finds nothing.
pub async fn case_ack_and_receive_delivers_the_next_message_once(queue: Arc<dyn LaneQueue>) {
    let lane = fixtures::lane();
    let (m1, m2) = (fixtures::message(&lane), fixtures::message(&lane));
    enqueue_all(&queue, &[m1.clone(), m2.clone()]).await;
    let first = next_is(&queue, &m1).await;

    // A short visibility: a message taken but not acked would come back during the drains.
    let short = Duration::from_secs(1);
    let with_ack = queue
        .ack_and_receive(&first.receipt, 10, short)
        .await
        .expect("ack and receive");
    let second = if with_ack.is_empty() {
        collect(&queue, 1, short, DUE_WITHIN).await
    } else {
        with_ack
    };
    assert_eq!(
        messages(&second),
        vec![m2.clone()],
        "the lane's next message"
    );
    assert_eq!(second[0].receive_count, 1);

    let nothing = queue
        .ack_and_receive(&second[0].receipt, 10, short)
        .await
        .expect("ack and receive");
    assert_eq!(messages(&nothing), vec![], "the queue is empty");
    let rest = drain(&queue, Duration::from_secs(3)).await;
    assert_eq!(messages(&rest), vec![], "both acks held");
}
