//! Transactions other crates hold open across many store calls and across waits off the file:
//! a lambda run (its own writes under a savepoint, log rows kept when it throws) and a batch
//! of route requests committed together. The SQL of transaction control lives here, so no
//! other crate names `BEGIN`, `SAVEPOINT` or `COMMIT` (the `closed_api` test scans for them).
//!
//! A transaction that is one unit of work inside one call is [`AdfFile::atomically`] instead.
//!
//! Principal types: [`RunSavepoint`].

use crate::error::Result;
use crate::file::{AdfFile, run_cached};

/// The savepoint a lambda run's own writes go under, inside the run's transaction: opened by
/// [`AdfFile::open_run_savepoint`], ended by [`RunSavepoint::release`] (the run returned) or
/// [`RunSavepoint::roll_back_keeping_logs`] (it threw).
///
/// It borrows nothing, because the run keeps using the file between; ending it is the
/// caller's duty, and a transaction committed meanwhile (the run waited off the file) ends it
/// with the rest, which is why its ends are only called while a transaction is open.
#[derive(Debug)]
#[must_use = "a run savepoint must be released or rolled back"]
pub struct RunSavepoint {
    /// The id of the newest `adf_logs` row before the savepoint: rows above it are the run's.
    logs_before: i64,
}

const OPEN_RUN: &str = "SAVEPOINT adf_lambda_run";
const RELEASE_RUN: &str = "RELEASE adf_lambda_run";
const ROLL_BACK_RUN: &str = "ROLLBACK TO adf_lambda_run";

impl AdfFile {
    /// Opens a write transaction that the caller holds across store calls and awaits (a
    /// lambda run, a batch of route requests), taking the write lock now. Fails when the lock
    /// is busy or a transaction is already open; end it with
    /// [`commit_open_transaction`](Self::commit_open_transaction).
    pub fn begin_held_transaction(&self) -> Result<()> {
        Ok(run_cached(&self.conn, "BEGIN IMMEDIATE")?)
    }

    /// Commits the transaction open on this connection, savepoints still open inside it
    /// included. When the commit fails, what it held is rolled back (so the connection is
    /// left outside any transaction) and the commit's error is returned.
    pub fn commit_open_transaction(&self) -> Result<()> {
        let Err(error) = run_cached(&self.conn, "COMMIT") else {
            return Ok(());
        };
        if let Err(rollback) = self.rollback_open_transaction() {
            tracing::warn!(path = %self.path().display(), error = %rollback, "cannot roll back after a failed commit");
        }
        Err(error.into())
    }

    /// Rolls back a transaction left open (a turn cancelled while a tool call's transaction
    /// was open, a commit that failed); true when there was one.
    pub fn rollback_open_transaction(&self) -> Result<bool> {
        if self.conn.is_autocommit() {
            return Ok(false);
        }
        self.conn.execute_batch("ROLLBACK")?;
        Ok(true)
    }

    /// How many rows this connection has inserted, changed or deleted since it opened: two
    /// readings differ when the work between them wrote.
    pub fn changes_made(&self) -> u64 {
        self.conn.total_changes()
    }

    /// Opens the savepoint of a lambda run inside the open transaction (see [`RunSavepoint`]).
    pub fn open_run_savepoint(&self) -> Result<RunSavepoint> {
        let logs_before = self
            .conn
            .prepare_cached("SELECT COALESCE(max(id), 0) FROM adf_logs")?
            .query_row([], |row| row.get(0))?;
        run_cached(&self.conn, OPEN_RUN)?;
        Ok(RunSavepoint { logs_before })
    }
}

/// One `adf_logs` row as a rolled-back run writes it again.
type LogRow = (
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    String,
    Option<String>,
    i64,
    Option<String>,
);

impl RunSavepoint {
    /// Keeps the run's writes: they commit with the enclosing transaction.
    pub fn release(self, file: &AdfFile) -> Result<()> {
        Ok(run_cached(&file.conn, RELEASE_RUN)?)
    }

    /// Undoes the run's writes, except its log rows (what it did, why it failed): those are
    /// written again after the rollback, in their order.
    pub fn roll_back_keeping_logs(self, file: &AdfFile) -> Result<()> {
        let conn = &file.conn;
        let kept = {
            let mut rows = conn.prepare_cached(
                "SELECT level, origin, event, target, message, data, created_at, loop
                 FROM adf_logs WHERE id > ?1 ORDER BY id",
            )?;
            let read = rows.query_map([self.logs_before], |row| {
                Ok((
                    row.get(0)?,
                    row.get(1)?,
                    row.get(2)?,
                    row.get(3)?,
                    row.get(4)?,
                    row.get(5)?,
                    row.get(6)?,
                    row.get(7)?,
                ))
            })?;
            let mut kept: Vec<LogRow> = Vec::new();
            for row in read {
                kept.push(row?);
            }
            kept
        };
        run_cached(conn, ROLL_BACK_RUN)?;
        // The rollback can restore the clean-close marker the run's first write took away;
        // the run writes its `result` row next, so the marker goes either way.
        conn.execute("DELETE FROM adf_meta WHERE key = 'adf_clean_close'", [])?;
        let mut insert = conn.prepare_cached(
            "INSERT INTO adf_logs (level, origin, event, target, message, data, created_at, loop)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )?;
        for row in kept {
            insert.execute(row)?;
        }
        run_cached(conn, RELEASE_RUN)?;
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::{Caller, CreateOptions, NewLog};

    fn fresh(dir: &tempfile::TempDir) -> AdfFile {
        AdfFile::create(dir.path().join("a.adf"), &CreateOptions::default()).unwrap()
    }

    fn log(file: &mut AdfFile, message: &str) {
        file.log(&NewLog {
            level: "warn",
            origin: Some("lambda"),
            message,
            ..Default::default()
        })
        .unwrap();
    }

    fn messages(file: &AdfFile) -> Vec<String> {
        file.connection()
            .prepare("SELECT message FROM adf_logs WHERE origin = 'lambda' ORDER BY id")
            .unwrap()
            .query_map([], |row| row.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }

    #[test]
    fn a_run_that_throws_loses_its_writes_but_keeps_its_log_rows_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut file = fresh(&dir);
        file.begin_held_transaction().unwrap();
        log(&mut file, "before the run");
        let savepoint = file.open_run_savepoint().unwrap();
        file.meta_set(Caller::Agent, "written", "1", None).unwrap();
        log(&mut file, "first");
        log(&mut file, "second");
        savepoint.roll_back_keeping_logs(&file).unwrap();
        assert!(
            file.in_transaction(),
            "the enclosing transaction stays open"
        );
        file.commit_open_transaction().unwrap();
        assert!(!file.in_transaction());
        assert_eq!(file.meta_get("written").unwrap(), None);
        assert_eq!(messages(&file), ["before the run", "first", "second"]);
    }

    #[test]
    fn a_run_that_returns_keeps_its_writes() {
        let dir = tempfile::tempdir().unwrap();
        let mut file = fresh(&dir);
        file.begin_held_transaction().unwrap();
        let changes = file.changes_made();
        let savepoint = file.open_run_savepoint().unwrap();
        file.meta_set(Caller::Agent, "written", "1", None).unwrap();
        savepoint.release(&file).unwrap();
        assert!(file.changes_made() > changes);
        file.commit_open_transaction().unwrap();
        assert_eq!(file.meta_get("written").unwrap().unwrap().value, "1");
    }

    #[test]
    fn a_held_transaction_is_one_at_a_time_and_rolls_back_whole() {
        let dir = tempfile::tempdir().unwrap();
        let mut file = fresh(&dir);
        assert!(!file.rollback_open_transaction().unwrap(), "nothing open");
        file.begin_held_transaction().unwrap();
        assert!(file.begin_held_transaction().is_err(), "no nesting");
        file.meta_set(Caller::Agent, "written", "1", None).unwrap();
        assert!(file.rollback_open_transaction().unwrap());
        assert_eq!(file.meta_get("written").unwrap(), None);
        assert!(file.commit_open_transaction().is_err(), "nothing to commit");
    }
}
