//! Dead-lettered turns (SPEC §10): a lane message that left its lane for a dead-letter store
//! (the embedded queue's `lane_dead` table with feature `embedded`, or the SQS dead-letter
//! queue with feature `aws`) still has its run `running`/`queued` and its session
//! `processing`. The sweep ends each such run `error` (`dead_lettered`) and only then forgets
//! the dead letter, so a sweep that dies in between leaves it for the next one (which finds
//! the run ended and just forgets it).

use agentlane_core::TurnMessage;
use async_trait::async_trait;

/// One dead letter: an id to forget it by, and the turn it carried (`None`: unreadable body).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadTurn {
    /// The source's handle to forget it by (the `lane_dead` row id, or the SQS receipt handle).
    pub id: String,
    /// The turn the message carried; `None` when its body could not be read.
    pub turn: Option<TurnMessage>,
}

/// Where dead-lettered lane messages wait for the sweep.
#[async_trait]
pub trait DeadLetterSource: Send + Sync {
    /// Up to `limit` dead letters, oldest first.
    async fn dead_turns(&self, limit: usize) -> Result<Vec<DeadTurn>, String>;
    /// Forgets a dead letter once its run is reconciled.
    async fn forget(&self, id: &str) -> Result<(), String>;
}

#[cfg(feature = "embedded")]
#[async_trait]
impl DeadLetterSource for agentlane_store_sqlite::SqliteBackend {
    async fn dead_turns(&self, limit: usize) -> Result<Vec<DeadTurn>, String> {
        let letters = self.dead_letters(limit).await.map_err(|e| e.to_string())?;
        Ok(letters
            .into_iter()
            .map(|d| DeadTurn {
                id: d.id.to_string(),
                turn: d.body,
            })
            .collect())
    }

    async fn forget(&self, id: &str) -> Result<(), String> {
        let id: i64 = id
            .parse()
            .map_err(|_| format!("not a dead-letter id: {id}"))?;
        self.forget_dead_letter(id).await.map_err(|e| e.to_string())
    }
}

#[cfg(feature = "aws")]
#[async_trait]
impl DeadLetterSource for agentlane_aws::SqsDeadLetters {
    async fn dead_turns(&self, limit: usize) -> Result<Vec<DeadTurn>, String> {
        let letters = self
            .receive_letters(limit)
            .await
            .map_err(|e| e.to_string())?;
        Ok(letters
            .into_iter()
            .map(|d| DeadTurn {
                id: d.receipt_handle,
                turn: d.turn,
            })
            .collect())
    }

    async fn forget(&self, id: &str) -> Result<(), String> {
        self.delete_letter(id).await.map_err(|e| e.to_string())
    }
}
