//! [`AdfFile`]: creating, opening, inspecting and cleanly closing an `.adf` file.
//!
//! Opening never modifies a file it then refuses: the header is checked in Rust, the schema
//! version is read before any pragma that writes, and a migration runs only after a backup.

use std::cell::Cell;
use std::fs;
use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use serde::Serialize;

use crate::defaults::{self, NewAgent};
use crate::error::{Result, StoreError};
use crate::schema::{FORMAT_VERSION, OLDEST_MIGRATABLE_SCHEMA, SCHEMA_VERSION};
use crate::{config, meta, migrate, page_image, skills, time};

const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";
const SQLITE_HEADER_LEN: usize = 100;
/// Prepared statements kept per connection. A turn runs about thirty distinct statements;
/// rusqlite's default of 16 would evict and re-parse some of them on every turn.
const STATEMENT_CACHE_CAPACITY: usize = 64;
const DELETE_MARKER: &str = "DELETE FROM adf_meta WHERE key = 'adf_clean_close'";

/// How a file was opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OpenMode {
    /// The runtime's writer connection: migrated to schema 32, marker consumed on open.
    ReadWrite,
    /// Read-only look at the file as it is: no migration, no marker change, no writes.
    Inspect,
    /// A second writer beside the runtime's own connection (mesh ingress writing an inbox row
    /// while a turn holds the agent's worker): no migration or normalizing on open, the marker
    /// removed before its first write, and never put back on close — the file's owner does that.
    Guest,
}

/// What opening a file found and did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct OpenReport {
    /// Schema version before any migration.
    pub schema_found: u32,
    /// Numbered migration steps applied, in order.
    pub migrated_steps: Vec<u32>,
    /// Changes the normalize pass made (back-filled files, removed legacy fields, ...).
    pub notes: Vec<String>,
    /// Whether the previous session left the clean-close marker.
    pub clean_close: bool,
    /// Which integrity check ran because the marker was missing or sidecars were present.
    pub integrity_check: Option<&'static str>,
    /// Schema violations of the stored config. §5: a config that fails validation is still
    /// loaded (the file is not refused); each violation is logged as a warning.
    pub config_violations: Vec<crate::Violation>,
}

/// Options for [`AdfFile::create`].
#[derive(Debug, Clone, Default)]
pub struct CreateOptions {
    /// Display name; defaults to the file stem.
    pub name: Option<String>,
    /// Free-text description for the config and agent card; empty when not given.
    pub description: Option<String>,
    /// Handle; defaults to the slug of the name.
    pub handle: Option<String>,
    /// Fixed agent id (tests and templates); defaults to a fresh nanoid.
    pub id: Option<String>,
}

/// One open `.adf` file and its single connection.
#[derive(Debug)]
pub struct AdfFile {
    pub(crate) conn: Connection,
    path: PathBuf,
    mode: OpenMode,
    report: OpenReport,
    closed: bool,
    /// The clean-close marker is still in the file and nothing has been written since open.
    /// The marker stays truthful until the first write, which removes it first (§3.3): a
    /// session that only reads leaves the file exactly as it found it.
    pub(crate) marker_pending: Cell<bool>,
    /// The last parsed config, reused until `adf_config` may have changed.
    pub(crate) config_cache: crate::config::ConfigCache,
    /// The writer's WAL hook, which moves checkpoints off the commit path.
    wal_watch: Option<crate::checkpointer::WalWatch>,
    /// Log rows kept in memory instead of written, while a caller holds them
    /// ([`AdfFile::hold_logs`]).
    pub(crate) held_logs: Option<Vec<crate::tables::HeldLog>>,
}

impl AdfFile {
    /// Creates a new file at `path` with the schema, registry keys, reserved files and default
    /// config of a new agent (spec §3, §4.1, §14). Refuses to overwrite anything.
    pub fn create(path: impl AsRef<Path>, options: &CreateOptions) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        if path.exists() {
            return Err(StoreError::FileExists { path });
        }
        crate::prepare_sqlite();
        let result = Self::create_at(&path, options);
        if result.is_err() && !matches!(result, Err(StoreError::FileExists { .. })) {
            // A half-made file must not be mistaken for an agent later (a path that appeared
            // meanwhile is someone else's and stays).
            for leftover in [path.clone(), sidecar(&path, "-wal"), sidecar(&path, "-shm")] {
                let _ignored = fs::remove_file(leftover);
            }
        }
        result
    }

    fn create_at(path: &Path, options: &CreateOptions) -> Result<Self> {
        let image = new_file_image(path, options)?;
        // `create_new` keeps the refusal to overwrite even if another process made the path
        // after the check above; one write and one sync make the file whole or absent.
        let mut out = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::AlreadyExists => StoreError::FileExists {
                    path: path.to_path_buf(),
                },
                _ => StoreError::Io(e),
            })?;
        {
            use std::io::Write as _;
            match &image {
                NewImage::Pages(pages) => {
                    let mut slices = pages.slices();
                    let mut rest = &mut slices[..];
                    while !rest.is_empty() {
                        let written = out.write_vectored(rest)?;
                        if written == 0 {
                            return Err(std::io::Error::from(std::io::ErrorKind::WriteZero).into());
                        }
                        std::io::IoSlice::advance_slices(&mut rest, written);
                    }
                }
                NewImage::Bytes(bytes) => out.write_all(bytes)?,
            }
        }
        out.sync_data()?;
        drop(out);

        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let mut conn = Connection::open_with_flags(path, flags)?;
        // The image's header says WAL: nothing here needs the schema, so a file closed right
        // after creation never has SQLite parse it.
        apply_pragmas(&conn, true)?;
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE_CAPACITY);
        let config_cache = crate::config::ConfigCache::attach(&mut conn);
        let wal_watch = crate::checkpointer::WalWatch::attach(&mut conn, path);
        Ok(Self {
            conn,
            path: path.to_path_buf(),
            mode: OpenMode::ReadWrite,
            report: OpenReport {
                schema_found: SCHEMA_VERSION,
                clean_close: true,
                ..OpenReport::default()
            },
            closed: false,
            // The image carries the clean-close marker: a file closed right after creation is
            // exactly what was written, and the first write removes the marker as usual.
            marker_pending: Cell::new(true),
            config_cache,
            wal_watch,
            held_logs: None,
        })
    }

    /// Opens a file for the runtime: validates it, migrates it to schema 32 (with a backup that
    /// is removed only after success) and normalizes it. The clean-close marker is removed
    /// before the session's first write.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let header = check_header(&path)?;
        if let Some(detail) = not_writable(&path) {
            return Err(StoreError::NotWritable { path, detail });
        }
        crate::prepare_sqlite();
        let had_sidecar = sidecar(&path, "-wal").exists();
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let mut conn = Connection::open_with_flags(&path, flags).map_err(|e| classify(&path, e))?;
        conn.busy_timeout(std::time::Duration::from_millis(5000))?;

        // Nothing below writes until the version is known to be one we can handle.
        let found = probe_version(&conn, &path)?;
        let mut report = OpenReport {
            schema_found: found,
            ..OpenReport::default()
        };
        report.clean_close = has_clean_close_marker(&conn, &path)?;
        report.integrity_check = integrity_check(&conn, &path, report.clean_close, had_sidecar)?;
        apply_pragmas(&conn, header.is_wal())?;
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE_CAPACITY);

        if found < SCHEMA_VERSION {
            report.migrated_steps = migrate_with_backup(&mut conn, &path, found)?;
        }

        // Normalizing writes only when something needs it; a clean, current file is opened
        // without a single write, and its marker is removed lazily before the first write.
        let tx = conn.transaction()?;
        let mut notes = meta::enforce_registry_protections(&tx)?;
        if skills::reindex(&tx)? {
            notes.push("skills-registry.json regenerated".to_owned());
        }
        let loaded_config = config::load_on_open(&tx)?;
        notes.extend(loaded_config.notes);
        let wrote = !notes.is_empty() || !report.migrated_steps.is_empty();
        if wrote {
            tx.execute(DELETE_MARKER, [])?;
        }
        tx.commit()?;
        report.notes.extend(notes);
        report.config_violations = loaded_config.violations;
        for violation in &report.config_violations {
            tracing::warn!(path = %path.display(), %violation, "the config fails validation; loaded anyway");
        }
        let marker_pending = Cell::new(report.clean_close && !wrote);
        let config_cache = crate::config::ConfigCache::attach(&mut conn);
        if let Some(parsed) = loaded_config.parsed {
            config_cache.seed(&conn, parsed)?;
        }
        let wal_watch = crate::checkpointer::WalWatch::attach(&mut conn, &path);
        Ok(Self {
            conn,
            path,
            mode: OpenMode::ReadWrite,
            report,
            closed: false,
            marker_pending,
            config_cache,
            wal_watch,
            held_logs: None,
        })
    }

    /// Opens a file that another connection of this process owns, as a short-lived second
    /// writer ([`OpenMode::Guest`]). The file must already be at the current schema: the owner
    /// migrated it when it loaded it.
    pub fn open_guest(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let header = check_header(&path)?;
        crate::prepare_sqlite();
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let mut conn = Connection::open_with_flags(&path, flags).map_err(|e| classify(&path, e))?;
        conn.busy_timeout(std::time::Duration::from_millis(5000))?;
        let found = probe_version(&conn, &path)?;
        if found != SCHEMA_VERSION {
            return Err(StoreError::invalid(format!(
                "{} is at schema {found}, not {SCHEMA_VERSION}: open it with the runtime first, which migrates it",
                path.display()
            )));
        }
        apply_pragmas(&conn, header.is_wal())?;
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE_CAPACITY);
        let clean_close = has_clean_close_marker(&conn, &path)?;
        let config_cache = crate::config::ConfigCache::attach(&mut conn);
        // A guest that serves an agent's routes may be the file's only writer for minutes:
        // without the hook its WAL grows to SQLite's automatic checkpoint, which then copies
        // tens of megabytes inside one request's commit.
        let wal_watch = crate::checkpointer::WalWatch::attach(&mut conn, &path);
        Ok(Self {
            conn,
            path,
            mode: OpenMode::Guest,
            report: OpenReport {
                schema_found: found,
                clean_close,
                ..OpenReport::default()
            },
            closed: false,
            marker_pending: Cell::new(clean_close),
            config_cache,
            wal_watch,
            held_logs: None,
        })
    }

    /// Opens a file for a command that only reads it: like [`AdfFile::open`] when the file can
    /// be written, else read-only as [`AdfFile::inspect`] does (no sidecar left behind), which
    /// needs a file already at the current schema since nothing may migrate it.
    pub fn open_for_reading(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        check_header(path)?;
        let Some(detail) = not_writable(path) else {
            return Self::open(path);
        };
        let file = Self::inspect(path)?;
        let found = file.report.schema_found;
        if found < SCHEMA_VERSION {
            return Err(StoreError::NotWritable {
                path: path.to_path_buf(),
                detail: format!(
                    "{detail}, and at schema {found} it needs a migration to {SCHEMA_VERSION} before it can be read; make it writable and run `adf migrate`"
                ),
            });
        }
        Ok(file)
    }

    /// Opens a file read-only exactly as it is, for `info` and `check`: no migration, no marker
    /// change, no sidecar left behind. Newer schemas are refused like [`AdfFile::open`] does.
    pub fn inspect(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        check_header(&path)?;
        crate::prepare_sqlite();
        let has_wal = sidecar(&path, "-wal").exists();
        // `immutable` reads without creating -wal/-shm; with a WAL sidecar present its frames
        // hold committed data, so a normal read-only connection is needed to see them.
        let uri = format!(
            "file:{}{}",
            uri_escape(&path),
            if has_wal { "?mode=ro" } else { "?immutable=1" }
        );
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let mut conn = Connection::open_with_flags(&uri, flags).map_err(|e| classify(&path, e))?;
        let found = probe_version(&conn, &path)?;
        let clean_close = has_clean_close_marker(&conn, &path)?;
        let report = OpenReport {
            schema_found: found,
            clean_close,
            ..OpenReport::default()
        };
        let config_cache = crate::config::ConfigCache::attach(&mut conn);
        Ok(Self {
            conn,
            path,
            mode: OpenMode::Inspect,
            report,
            closed: false,
            marker_pending: Cell::new(false),
            config_cache,
            wal_watch: None,
            held_logs: None,
        })
    }

    /// Closes the file cleanly: writes the clean-close marker, checkpoints the WAL and closes
    /// the connection so no `-wal`/`-shm` sidecar remains (spec §3.3 `adf_clean_close`).
    pub fn close(mut self) -> Result<()> {
        self.close_inner()
    }

    fn close_inner(&mut self) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        self.closed = true;
        if let Some(watch) = self.wal_watch.take() {
            watch.detach(&mut self.conn);
        }
        // With the marker still in place nothing was written: the WAL is empty and the file
        // is already as a clean close leaves it.
        // A guest never writes the marker: the owner's connection is still using the file.
        if self.mode == OpenMode::ReadWrite && !self.marker_pending.get() {
            self.conn.execute(
                "INSERT INTO adf_meta (key, value, protection) VALUES ('adf_clean_close', ?1, 'readonly')
                 ON CONFLICT(key) DO UPDATE SET value = excluded.value, protection = 'readonly'",
                [time::now_iso()],
            )?;
            self.conn
                .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
        }
        // The connection itself closes when `self` is dropped, right after this. Closing it by
        // value here needed a throwaway connection in its place, and opening one (extensions
        // registered, collations made) cost a tenth of a create. `sqlite3_close` fails only on
        // unfinalized statements, which the borrow rules and rusqlite's cache flush rule out.
        Ok(())
    }

    /// Marks this connection's writes as mostly delayable (see
    /// [`wal_restart_pending`](Self::wal_restart_pending)): at the WAL's bound its commits
    /// leave the catch-up to a background pass instead of running it (with two `fsync`s) on
    /// the caller's thread, unless the WAL reaches twice its bound.
    pub fn defer_wal_restart(&self) {
        if let Some(watch) = &self.wal_watch {
            watch.defer_restart();
        }
    }

    /// Whether writes that can wait should: the WAL is at its bound and a background pass is
    /// copying it; a write before the pass ends keeps the WAL from starting over.
    pub fn wal_restart_pending(&self) -> bool {
        self.wal_watch
            .as_ref()
            .is_some_and(crate::checkpointer::WalWatch::restart_pending)
    }

    /// The path this file was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How the file was opened.
    pub fn mode(&self) -> OpenMode {
        self.mode
    }

    /// What opening found and did.
    pub fn open_report(&self) -> &OpenReport {
        &self.report
    }

    /// The schema version stored in the file now.
    pub fn schema_version(&self) -> Result<u32> {
        Ok(migrate::read_schema_version(&self.conn)?.unwrap_or(0))
    }

    /// Whether a transaction (or savepoint) is open on this connection: a unit of work left
    /// unfinished, which a caller that is about to hand the file to someone else must not
    /// share (or must roll back).
    pub fn in_transaction(&self) -> bool {
        !self.conn.is_autocommit()
    }

    /// The raw connection, for this crate's own tests (the `self-test-sql` feature, which only
    /// adf-store's dev-dependency on itself names). Every other crate goes through the typed
    /// API (its tests through `test_support`), so protection rules apply and no other crate
    /// holds SQL.
    #[cfg(any(test, feature = "self-test-sql"))]
    pub fn connection(&self) -> &Connection {
        &self.conn
    }

    /// Writes a consistent copy of the whole file to `target` (SQLite's online backup), as
    /// of the last commit, while this connection stays open.
    pub fn copy_to(&self, target: &Path) -> Result<()> {
        self.conn
            .backup(rusqlite::MAIN_DB, target, rusqlite::backup::NO_PROGRESS)?;
        Ok(())
    }

    /// Runs `work` as one transaction: every store write it makes lands, or none does (a tool
    /// call is one transaction). Store methods nest inside it as savepoints.
    pub fn atomically<T, E: From<StoreError>>(
        &mut self,
        work: impl FnOnce(&mut Self) -> Result<T, E>,
    ) -> Result<T, E> {
        self.check_writable()?;
        // At the top level the write lock is taken up front (see `write_tx`); nested inside a
        // caller's transaction a savepoint is enough.
        let top = self.conn.is_autocommit();
        let (begin, commit, rollback) = if top {
            ("BEGIN IMMEDIATE", "COMMIT", "ROLLBACK")
        } else {
            (
                "SAVEPOINT adf_atomic",
                "RELEASE adf_atomic",
                "ROLLBACK TO adf_atomic; RELEASE adf_atomic",
            )
        };
        run_cached(&self.conn, begin).map_err(StoreError::from)?;
        // The marker goes inside the transaction, and only when the work wrote something: a
        // call that only read (most tool calls) leaves the file exactly as it was, and a
        // refused or failed call rolls the removal back with everything else (a clean close
        // would otherwise re-stamp it). Store writes remove it themselves (`ensure_writable`);
        // the count also catches writes made through the raw connection.
        let marker_was_pending = self.marker_pending.get();
        let changes_before = self.conn.total_changes();
        let outcome = work(self).and_then(|value| {
            if self.conn.total_changes() != changes_before {
                consume_marker(&self.conn, &self.marker_pending)?;
            }
            run_cached(&self.conn, commit).map_err(StoreError::from)?;
            Ok(value)
        });
        if outcome.is_err() {
            // An interrupted statement can make SQLite roll the whole transaction back
            // itself; then there is nothing left to roll back.
            if !self.conn.is_autocommit() {
                self.conn
                    .execute_batch(rollback)
                    .map_err(StoreError::from)?;
            }
            // Either rollback undid the marker's removal along with the call's writes.
            self.marker_pending.set(marker_was_pending);
        }
        outcome
    }

    /// Rolls back a transaction left open by work that stopped half way (a panic caught by
    /// the store worker), so the next job starts from the last committed state.
    pub(crate) fn abandon_open_transaction(&mut self) {
        if !self.conn.is_autocommit()
            && let Err(error) = self.conn.execute_batch("ROLLBACK")
        {
            tracing::warn!(path = %self.path.display(), %error, "cannot roll back after a panic");
        }
        // The rollback may have restored a clean-close marker the abandoned work had removed;
        // the next write must remove it again, or a crash after it would pass for a clean close.
        if self.mode == OpenMode::ReadWrite {
            let marker_present = has_clean_close_marker(&self.conn, &self.path).unwrap_or(false);
            self.marker_pending.set(marker_present);
        }
    }

    /// Every write path calls this after validating its input and before its first write: it
    /// refuses writes in inspect mode and removes the clean-close marker before the session's
    /// first write. Input is validated first so that a refused write leaves the file
    /// byte-identical (no marker removed, so none re-stamped on close).
    pub(crate) fn ensure_writable(&self) -> Result<()> {
        self.check_writable()?;
        consume_marker(&self.conn, &self.marker_pending)
    }

    /// Runs one UPDATE that must find its row. When it changes nothing (an unknown id or
    /// key), its transaction is rolled back marker removal included, so the refusal leaves
    /// the file byte-identical. Returns the number of rows changed.
    pub(crate) fn update_existing(
        &mut self,
        sql: &str,
        params: impl rusqlite::Params,
    ) -> Result<usize> {
        self.check_writable()?;
        let tx = write_tx(&mut self.conn)?;
        let changed = tx.execute(sql, params)?;
        if changed > 0 {
            consume_marker(&tx, &self.marker_pending)?;
            tx.commit()?;
        }
        Ok(changed)
    }

    /// Refuses writes in inspect mode, without touching the marker.
    pub(crate) fn check_writable(&self) -> Result<()> {
        match self.mode {
            OpenMode::ReadWrite | OpenMode::Guest => Ok(()),
            OpenMode::Inspect => Err(StoreError::ReadOnly {
                path: self.path.clone(),
            }),
        }
    }
}

/// Removes the clean-close marker if it is still pending, on `conn` (which may be inside the
/// write's own transaction, so validation failing after a read inside it changes nothing).
pub(crate) fn consume_marker(conn: &Connection, marker_pending: &Cell<bool>) -> Result<()> {
    if marker_pending.get() {
        conn.execute(DELETE_MARKER, [])?;
        marker_pending.set(false);
    }
    Ok(())
}

impl Drop for AdfFile {
    fn drop(&mut self) {
        // Dropping without `close` is still an orderly shutdown, not a crash: leave the marker.
        if let Err(error) = self.close_inner() {
            tracing::warn!(path = %self.path.display(), %error, "closing the file on drop failed");
        }
    }
}

/// The bytes of a new agent's file: the schema image with this agent's registry keys, default
/// config, reserved files, skills registry and clean-close marker. Writing a ready page set
/// costs one write and one sync, where running the DDL against the file cost a rollback journal
/// for the switch to WAL, a WAL of ~60 pages and a checkpoint (8 syncs). The rows are encoded
/// into the pages directly ([`page_image`]); only rows too large for that layout go through
/// SQLite ([`sqlite_file_image`]).
fn new_file_image(path: &Path, options: &CreateOptions) -> Result<NewImage> {
    let name = options
        .name
        .clone()
        .unwrap_or_else(|| defaults::name_from_path(path));
    let handle = options
        .handle
        .clone()
        .unwrap_or_else(|| defaults::handle_from_name(&name));
    let id = options.id.clone().unwrap_or_else(defaults::new_agent_id);
    let description = options.description.clone().unwrap_or_default();
    let now = time::now_iso();
    let agent = NewAgent {
        id: &id,
        name: &name,
        handle: &handle,
        description: &description,
        now_iso: &now,
    };
    let template = page_image::template()?;
    let config = template.config_text(&agent);
    match page_image::build(template, &agent, &config)? {
        Some(pages) => Ok(NewImage::Pages(pages)),
        None => sqlite_file_image(&template.schema, &agent, &config).map(NewImage::Bytes),
    }
}

/// A new file's content, from [`page_image::build`] or [`sqlite_file_image`].
enum NewImage {
    Pages(page_image::NewFile),
    Bytes(Vec<u8>),
}

/// [`new_file_image`] through SQLite: the rows inserted into an in-memory copy of the schema
/// image. Slower (the copy parses the schema), but takes rows of any size.
pub(crate) fn sqlite_file_image(
    schema: &[u8],
    agent: &NewAgent<'_>,
    config: &str,
) -> Result<Vec<u8>> {
    let now = agent.now_iso;
    let mut conn = Connection::open_in_memory()?;
    conn.deserialize_read_exact(rusqlite::MAIN_DB, schema, schema.len(), false)?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    let tx = conn.transaction()?;
    let readonly_meta: [(&str, &str); 8] = [
        ("adf_version", FORMAT_VERSION),
        ("adf_schema_version", &SCHEMA_VERSION.to_string()),
        ("adf_name", agent.name),
        ("adf_handle", agent.handle),
        ("adf_parent_did", ""),
        ("adf_created_at", now),
        ("adf_updated_at", now),
        ("adf_clean_close", now),
    ];
    {
        let mut insert = tx
            .prepare("INSERT INTO adf_meta (key, value, protection) VALUES (?1, ?2, 'readonly')")?;
        for (key, value) in readonly_meta {
            insert.execute(params![key, value])?;
        }
    }
    tx.execute(
        "INSERT INTO adf_meta (key, value, protection) VALUES ('status', '', 'none')",
        [],
    )?;
    tx.execute(
        "INSERT INTO adf_config (id, config_json, updated_at) VALUES (1, ?1, ?2)",
        params![config, now],
    )?;
    let date = now.get(..10).unwrap_or(now);
    {
        let mut insert = tx.prepare(
            "INSERT INTO adf_files (path, content, mime_type, size, protection, authorized, created_at, updated_at)
             VALUES (?1, ?2, 'text/markdown', ?3, 'no_delete', 0, ?4, ?4)",
        )?;
        for core in defaults::CORE_FILES {
            let content = defaults::core_file_content(core, agent.name, date).unwrap_or_default();
            insert.execute(params![core, content.as_bytes(), content.len() as i64, now])?;
        }
    }
    skills::reindex(&tx)?;
    tx.commit()?;

    let mut bytes = conn.serialize(rusqlite::MAIN_DB)?.to_vec();
    // The copy is written back as a rollback-mode image; the file opens in WAL mode.
    mark_wal_mode(&mut bytes)?;
    Ok(bytes)
}

/// Header bytes 18 and 19 (file format write/read version) are 2 in a WAL database; setting
/// them in the image makes the file open in WAL mode without the journaled switch that
/// `PRAGMA journal_mode=WAL` performs on a rollback-mode file.
pub(crate) fn mark_wal_mode(image: &mut [u8]) -> Result<()> {
    let header = image
        .get_mut(..SQLITE_HEADER_LEN)
        .ok_or_else(|| StoreError::invalid("the serialized schema image has no header"))?;
    if &header[..16] != SQLITE_MAGIC {
        return Err(StoreError::invalid(
            "the serialized schema image is not a SQLite database",
        ));
    }
    header[18] = 2;
    header[19] = 2;
    Ok(())
}

/// The four pragmas of spec §3.1, in force on every writer connection before anything else,
/// plus one connection-tuning pragma (§3.1 allows those): checkpointing every 10,000 WAL pages
/// instead of 1,000 cuts the fsync pauses of a busy agent's turns tenfold; a clean close still
/// checkpoints everything.
///
/// `journal_mode` and `synchronous` make SQLite parse the whole schema (a fifth of a millisecond)
/// before they run, so each is skipped when the file already has its value: a file whose
/// header says WAL (`file_is_wal`) opens in WAL mode by itself, and a SQLite built with
/// `SQLITE_DEFAULT_WAL_SYNCHRONOUS=1` (`.cargo/config.toml`) runs a WAL file at `NORMAL`.
/// `busy_timeout` and `foreign_keys` go through the C API, which parses nothing.
fn apply_pragmas(conn: &Connection, file_is_wal: bool) -> Result<()> {
    if !file_is_wal {
        conn.pragma_update(None, "journal_mode", "WAL")?;
    }
    if !(file_is_wal && wal_is_normal_by_default()) {
        conn.pragma_update(None, "synchronous", "NORMAL")?;
    }
    conn.busy_timeout(std::time::Duration::from_millis(5000))?;
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_FKEY,
        true,
    )?;
    conn.pragma_update(None, "wal_autocheckpoint", 10_000)?;
    // Savepoints nest on every write inside a transaction (a log row in a tool call, a route
    // request in a batch). Their sub-journal lives in memory only until 64 KiB; past that
    // SQLite moves it to a temporary file for the rest of the transaction, and every page a
    // later savepoint touches costs two `pwrite`s (a batch of route requests measured 35 a
    // request). Kept in memory, it never spills; it holds one copy per touched page.
    conn.execute_batch("PRAGMA temp_store = MEMORY")?;
    Ok(())
}

/// Whether this SQLite was built to run WAL files at `synchronous = NORMAL` without the pragma,
/// asked once per process; without the build flag every writer sets the pragma as before.
fn wal_is_normal_by_default() -> bool {
    static ANSWER: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ANSWER.get_or_init(|| {
        Connection::open_in_memory()
            .and_then(|conn| {
                conn.query_row(
                    "SELECT sqlite_compileoption_used('DEFAULT_WAL_SYNCHRONOUS=1')",
                    [],
                    |row| row.get::<_, bool>(0),
                )
            })
            .unwrap_or(false)
    })
}

/// `<file><suffix>`: the `-wal`, `-shm` and `.bak` companions of a file.
pub fn sidecar(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

fn uri_escape(path: &Path) -> String {
    let text = path.to_string_lossy();
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '%' | '?' | '#' => out.push_str(&format!("%{:02X}", c as u32)),
            _ => out.push(c),
        }
    }
    out
}

/// Rejects what is plainly not an intact SQLite file before SQLite sees it, so the error says
/// what is wrong instead of "file is not a database", and so a zero-byte file is never turned
/// into an empty database.
fn check_header(path: &Path) -> Result<Header> {
    use std::io::Read as _;
    let meta = match fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(StoreError::FileNotFound {
                path: path.to_path_buf(),
            });
        }
        Err(e) => return Err(e.into()),
    };
    if meta.is_dir() {
        return Err(StoreError::NotSqlite {
            path: path.to_path_buf(),
            detail: "it is a directory".into(),
        });
    }
    let len = meta.len();
    if len == 0 {
        return Err(StoreError::EmptyFile {
            path: path.to_path_buf(),
        });
    }
    let mut header = [0u8; SQLITE_HEADER_LEN];
    let mut file = fs::File::open(path)?;
    let read = file.read(&mut header)?;
    let prefix = read.min(SQLITE_MAGIC.len());
    if header[..prefix] != SQLITE_MAGIC[..prefix] {
        return Err(StoreError::NotSqlite {
            path: path.to_path_buf(),
            detail: "the SQLite header is missing".into(),
        });
    }
    if (len as usize) < SQLITE_HEADER_LEN {
        return Err(StoreError::Truncated {
            path: path.to_path_buf(),
            expected: SQLITE_HEADER_LEN as u64,
            actual: len,
        });
    }
    let raw_page_size = u32::from(u16::from_be_bytes([header[16], header[17]]));
    let page_size = if raw_page_size == 1 {
        65536
    } else {
        raw_page_size
    };
    if !(512..=65536).contains(&page_size) || !page_size.is_power_of_two() {
        return Err(StoreError::Corrupt {
            path: path.to_path_buf(),
            detail: format!("invalid page size {raw_page_size} in the header"),
        });
    }
    let page_size = u64::from(page_size);
    let change_counter = &header[24..28];
    let valid_for = &header[92..96];
    let pages = u64::from(u32::from_be_bytes([
        header[28], header[29], header[30], header[31],
    ]));
    let expected = if change_counter == valid_for && pages > 0 {
        pages * page_size
    } else {
        0
    };
    if len < expected || len % page_size != 0 {
        return Err(StoreError::Truncated {
            path: path.to_path_buf(),
            expected: expected.max(len.div_ceil(page_size) * page_size),
            actual: len,
        });
    }
    Ok(Header {
        write_version: header[18],
        read_version: header[19],
    })
}

/// What [`check_header`] read that opening uses.
#[derive(Debug, Clone, Copy)]
struct Header {
    write_version: u8,
    read_version: u8,
}

impl Header {
    /// File format versions 2/2: SQLite opens the file in WAL mode without being told.
    fn is_wal(self) -> bool {
        self.write_version == 2 && self.read_version == 2
    }
}

/// Why a writer may not open `path`, judged from the permission bits: a file with no write
/// bit, or a directory with none (a writer's `-wal`/`-shm` live there). The bits are read
/// rather than tried, so a read-only file is respected even by root, whom the kernel would
/// let write anyway.
fn not_writable(path: &Path) -> Option<String> {
    // On Unix `readonly()` means no write bit for anyone (mode & 0o222 == 0).
    let no_write_bit = |target: &Path| {
        fs::metadata(target)
            .map(|meta| meta.permissions().readonly())
            .unwrap_or(false)
    };
    if no_write_bit(path) {
        return Some("it has no write permission".into());
    }
    let directory = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    if no_write_bit(directory) {
        return Some(format!(
            "its directory {} has no write permission, and a writer keeps its -wal/-shm there",
            directory.display()
        ));
    }
    None
}

fn classify(path: &Path, error: rusqlite::Error) -> StoreError {
    use rusqlite::ffi::ErrorCode;
    match error.sqlite_error_code() {
        Some(ErrorCode::NotADatabase) => StoreError::NotSqlite {
            path: path.to_path_buf(),
            detail: error.to_string(),
        },
        Some(ErrorCode::DatabaseCorrupt) => StoreError::Corrupt {
            path: path.to_path_buf(),
            detail: error.to_string(),
        },
        Some(ErrorCode::CannotOpen) if !path.exists() => StoreError::FileNotFound {
            path: path.to_path_buf(),
        },
        Some(ErrorCode::ReadOnly) => StoreError::NotWritable {
            path: path.to_path_buf(),
            detail: error.to_string(),
        },
        _ => StoreError::Sqlite(error),
    }
}

/// Reads the schema version without writing, and refuses versions this runtime cannot open.
fn probe_version(conn: &Connection, path: &Path) -> Result<u32> {
    let found = migrate::read_schema_version(conn)
        .map_err(|e| match e {
            StoreError::Sqlite(inner) => classify(path, inner),
            other => other,
        })?
        .ok_or_else(|| StoreError::NotAdf {
            path: path.to_path_buf(),
        })?;
    if found > SCHEMA_VERSION {
        return Err(StoreError::NewerSchema {
            path: path.to_path_buf(),
            found,
            supported: SCHEMA_VERSION,
        });
    }
    if found < OLDEST_MIGRATABLE_SCHEMA {
        return Err(StoreError::SchemaTooOld {
            path: path.to_path_buf(),
            found,
            oldest: OLDEST_MIGRATABLE_SCHEMA,
            supported: SCHEMA_VERSION,
        });
    }
    Ok(found)
}

fn has_clean_close_marker(conn: &Connection, path: &Path) -> Result<bool> {
    conn.query_row(
        "SELECT 1 FROM adf_meta WHERE key = 'adf_clean_close'",
        [],
        |_| Ok(()),
    )
    .optional()
    .map(|row| row.is_some())
    .map_err(|e| classify(path, e))
}

/// §3.3 `adf_clean_close`: marker and no sidecar ⇒ trust the file; marker with a sidecar ⇒
/// `quick_check`; no marker ⇒ full `integrity_check`.
fn integrity_check(
    conn: &Connection,
    path: &Path,
    clean: bool,
    sidecar: bool,
) -> Result<Option<&'static str>> {
    let pragma = match (clean, sidecar) {
        (true, false) => return Ok(None),
        (true, true) => "quick_check",
        (false, _) => "integrity_check",
    };
    let mut stmt = conn
        .prepare(&format!("PRAGMA {pragma}"))
        .map_err(|e| classify(path, e))?;
    let problems: Vec<String> = stmt
        .query_map([], |row| row.get::<_, String>(0))
        .map_err(|e| classify(path, e))?
        .collect::<rusqlite::Result<_>>()
        .map_err(|e| classify(path, e))?;
    if problems.len() == 1 && problems[0] == "ok" {
        Ok(Some(pragma))
    } else {
        Err(StoreError::Corrupt {
            path: path.to_path_buf(),
            detail: problems.join("; "),
        })
    }
}

/// Runs the ladder from `found` with `<file>.bak` beside the file. On failure the original is
/// put back byte for byte and the backup is kept; on success the backup is removed.
fn migrate_with_backup(conn: &mut Connection, path: &Path, found: u32) -> Result<Vec<u32>> {
    // Fold any WAL frames into the main file so the copy below is the whole database.
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
    let backup = sidecar(path, ".bak");
    fs::copy(path, &backup)?;
    // The file is about to change: it must not claim a clean close until it is closed again.
    conn.execute(DELETE_MARKER, [])?;
    let mut steps = Vec::new();
    match migrate::run_ladder(conn, found, &mut |step| steps.push(step)) {
        Ok(()) => {
            fs::remove_file(&backup)?;
            Ok(steps)
        }
        Err((step, error)) => {
            let detail = error.to_string();
            restore_backup(conn, path, &backup)?;
            Err(StoreError::Migration {
                path: path.to_path_buf(),
                from: found,
                to: SCHEMA_VERSION,
                step,
                detail,
            })
        }
    }
}

fn restore_backup(conn: &mut Connection, path: &Path, backup: &Path) -> Result<()> {
    // The connection must let go of the file before it is replaced underneath it.
    let old = std::mem::replace(conn, Connection::open_in_memory()?);
    old.close().map_err(|(_, e)| StoreError::Sqlite(e))?;
    for leftover in [sidecar(path, "-wal"), sidecar(path, "-shm")] {
        let _ignored = fs::remove_file(leftover);
    }
    fs::copy(backup, path)?;
    Ok(())
}

/// The transaction of one store write. At the top level it is `BEGIN IMMEDIATE`: the write lock
/// is taken before the method's first read, so another process that commits in between makes
/// this one wait (busy_timeout) instead of failing with a stale snapshot. Inside a caller's
/// transaction (`atomically`) it is a savepoint. Dropped without [`WriteTx::commit`], it rolls
/// back. The control statements come from the connection's statement cache: a turn runs a
/// dozen of these, and parsing `BEGIN`/`COMMIT` afresh each time was a tenth of its cost.
pub(crate) struct WriteTx<'c> {
    conn: &'c Connection,
    nested: bool,
    finished: bool,
}

impl WriteTx<'_> {
    pub(crate) fn commit(mut self) -> rusqlite::Result<()> {
        self.finished = true;
        run_cached(
            self.conn,
            if self.nested {
                "RELEASE adf_write"
            } else {
                "COMMIT"
            },
        )
    }
}

impl Drop for WriteTx<'_> {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let undone = if self.nested {
            run_cached(self.conn, "ROLLBACK TO adf_write")
                .and_then(|()| run_cached(self.conn, "RELEASE adf_write"))
        } else if !self.conn.is_autocommit() {
            run_cached(self.conn, "ROLLBACK")
        } else {
            // SQLite already rolled the transaction back (an interrupted statement).
            Ok(())
        };
        if let Err(error) = undone {
            tracing::warn!(%error, "rolling back a store write failed");
        }
    }
}

impl std::ops::Deref for WriteTx<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        self.conn
    }
}

/// Runs one parameterless statement through the connection's statement cache.
pub(crate) fn run_cached(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(drop)
}

/// Opens the transaction of one store write (see [`WriteTx`]).
pub(crate) fn write_tx(conn: &mut Connection) -> rusqlite::Result<WriteTx<'_>> {
    let conn: &Connection = conn;
    let nested = !conn.is_autocommit();
    run_cached(
        conn,
        if nested {
            "SAVEPOINT adf_write"
        } else {
            "BEGIN IMMEDIATE"
        },
    )?;
    Ok(WriteTx {
        conn,
        nested,
        finished: false,
    })
}
