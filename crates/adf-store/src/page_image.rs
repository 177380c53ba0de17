//! A new file's bytes written without SQLite: the empty schema image (built by SQLite once per
//! process) with this agent's rows encoded straight into the root pages of `adf_meta`,
//! `adf_config` and `adf_files` (and their primary-key indexes), overflow pages appended.
//!
//! Running the inserts through SQLite cost a schema parse per file (the in-memory copy has to
//! know its tables) and most of a create. The rows of a new file are few and small, so each of
//! the five b-trees is a single leaf page; when they are not (a very long name or description),
//! [`build`] answers `None` and the caller falls back to inserting through SQLite. The layout
//! follows the file-format document (sqlite.org/fileformat2.html): records, varints, leaf
//! pages, overflow chains. Tests compare every row and `PRAGMA integrity_check` against the
//! SQLite-built image.

use std::sync::OnceLock;

use rusqlite::Connection;

use crate::defaults::{self, NewAgent};
use crate::error::{Result, StoreError};
use crate::schema::{FORMAT_VERSION, SCHEMA_DDL, SCHEMA_VERSION};
use crate::skills;

const HEADER_LEN: usize = 100;
const TABLE_LEAF: u8 = 0x0d;
const INDEX_LEAF: u8 = 0x0a;

/// One column value of a record, in the storage classes the new file's rows use.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Column<'a> {
    /// SQL NULL (the `INTEGER PRIMARY KEY` alias is stored as NULL; the rowid holds it).
    Null,
    /// An integer.
    Int(i64),
    /// UTF-8 text.
    Text(&'a str),
    /// A blob.
    Blob(&'a [u8]),
}

/// The per-process part of every new file: the empty schema image, where the
/// five b-trees that get rows start, the registry text of a file without skills, and the
/// default config split around its per-agent values.
#[derive(Debug)]
pub(crate) struct Template {
    /// The empty schema as SQLite lays it out (rollback mode: an in-memory copy cannot be WAL).
    pub(crate) schema: Vec<u8>,
    page_size: usize,
    roots: Roots,
    registry: String,
    config: Vec<ConfigPart>,
}

#[derive(Debug, Clone, Copy, Default)]
struct Roots {
    meta: u32,
    meta_key: u32,
    config: u32,
    files: u32,
    files_path: u32,
}

/// A run of the default config's JSON text: literal, or the place of one per-agent value.
#[derive(Debug)]
enum ConfigPart {
    Literal(String),
    Slot(Slot),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Id,
    Name,
    Description,
    Icon,
    Handle,
    Now,
}

impl Slot {
    const ALL: [Slot; 6] = [
        Slot::Id,
        Slot::Name,
        Slot::Description,
        Slot::Icon,
        Slot::Handle,
        Slot::Now,
    ];

    /// A value no real agent has, whose JSON form has nothing to escape, so it can be found
    /// in the serialized config.
    fn sentinel(self) -> &'static str {
        match self {
            Slot::Id => "@@adf-slot-id@@",
            Slot::Name => "@@adf-slot-name@@",
            Slot::Description => "@@adf-slot-description@@",
            Slot::Icon => "@@adf-slot-icon@@",
            Slot::Handle => "@@adf-slot-handle@@",
            Slot::Now => "@@adf-slot-now@@",
        }
    }
}

/// The template, built on first use.
pub(crate) fn template() -> Result<&'static Template> {
    static TEMPLATE: OnceLock<Template> = OnceLock::new();
    if let Some(template) = TEMPLATE.get() {
        return Ok(template);
    }
    let built = build_template()?;
    Ok(TEMPLATE.get_or_init(|| built))
}

fn build_template() -> Result<Template> {
    crate::prepare_sqlite();
    let mut conn = Connection::open_in_memory()?;
    let tx = conn.transaction()?;
    tx.execute_batch(SCHEMA_DDL)?;
    tx.commit()?;
    let root = |name: &str| -> Result<u32> {
        Ok(conn.query_row(
            "SELECT rootpage FROM sqlite_schema WHERE name = ?1",
            [name],
            |row| row.get(0),
        )?)
    };
    let roots = Roots {
        meta: root("adf_meta")?,
        meta_key: root("sqlite_autoindex_adf_meta_1")?,
        config: root("adf_config")?,
        files: root("adf_files")?,
        files_path: root("sqlite_autoindex_adf_files_1")?,
    };
    // A new file has no skills, so its registry is the same text for every agent.
    let registry = serde_json::to_string_pretty(&skills::build_registry(&conn)?)
        .map_err(|e| StoreError::Malformed(e.to_string()))?;
    let schema = conn.serialize(rusqlite::MAIN_DB)?.to_vec();
    let page_size = match u16::from_be_bytes([schema[16], schema[17]]) {
        1 => 65_536,
        size => usize::from(size),
    };
    if page_size == 0 || schema.len() % page_size != 0 {
        return Err(StoreError::invalid(
            "the serialized schema image is not a whole number of pages",
        ));
    }
    Ok(Template {
        schema,
        page_size,
        roots,
        registry,
        config: config_parts(),
    })
}

/// The default config's text with every per-agent value cut out, so each new file costs a
/// concatenation instead of building and serializing the whole JSON value.
fn config_parts() -> Vec<ConfigPart> {
    let mut config = defaults::default_config(&NewAgent {
        id: Slot::Id.sentinel(),
        name: Slot::Name.sentinel(),
        handle: Slot::Handle.sentinel(),
        description: Slot::Description.sentinel(),
        now_iso: Slot::Now.sentinel(),
    });
    config["icon"] = serde_json::Value::String(Slot::Icon.sentinel().to_owned());
    let text = config.to_string();
    let mut parts = Vec::new();
    let mut rest = text.as_str();
    loop {
        let next = Slot::ALL
            .iter()
            .filter_map(|slot| {
                let quoted = format!("\"{}\"", slot.sentinel());
                rest.find(&quoted).map(|at| (at, quoted.len(), *slot))
            })
            .min_by_key(|(at, _, _)| *at);
        let Some((at, len, slot)) = next else {
            parts.push(ConfigPart::Literal(rest.to_owned()));
            return parts;
        };
        parts.push(ConfigPart::Literal(rest[..at].to_owned()));
        parts.push(ConfigPart::Slot(slot));
        rest = &rest[at + len..];
    }
}

impl Template {
    /// `defaults::default_config(agent).to_string()`, from the prebuilt parts.
    pub(crate) fn config_text(&self, agent: &NewAgent<'_>) -> String {
        let mut text = String::with_capacity(6 * 1024);
        for part in &self.config {
            match part {
                ConfigPart::Literal(literal) => text.push_str(literal),
                ConfigPart::Slot(slot) => {
                    let value = match slot {
                        Slot::Id => agent.id,
                        Slot::Name => agent.name,
                        Slot::Description => agent.description,
                        Slot::Icon => defaults::icon_for_id(agent.id),
                        Slot::Handle => agent.handle,
                        Slot::Now => agent.now_iso,
                    };
                    push_json_string(&mut text, value);
                }
            }
        }
        text
    }
}

/// Appends `value` as a JSON string literal, escaped exactly as `serde_json` escapes it.
fn push_json_string(out: &mut String, value: &str) {
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// The bytes of a new agent's file, or `None` when its rows do not fit the one-leaf layout
/// (the caller then builds the file through SQLite). `now` is the creation timestamp.
pub(crate) fn build(
    template: &'static Template,
    agent: &NewAgent<'_>,
    config_text: &str,
) -> Result<Option<NewFile>> {
    let mut image = Image {
        base: &template.schema,
        page_size: template.page_size,
        replaced: std::collections::BTreeMap::new(),
        appended: Vec::new(),
    };
    let now = agent.now_iso;
    let roots = template.roots;

    let schema_version = SCHEMA_VERSION.to_string();
    let meta: [(&str, &str, &str); 9] = [
        ("adf_version", FORMAT_VERSION, "readonly"),
        ("adf_schema_version", &schema_version, "readonly"),
        ("adf_name", agent.name, "readonly"),
        ("adf_handle", agent.handle, "readonly"),
        ("adf_parent_did", "", "readonly"),
        ("adf_created_at", now, "readonly"),
        ("adf_updated_at", now, "readonly"),
        ("adf_clean_close", now, "readonly"),
        ("status", "", "none"),
    ];
    let mut rows = Vec::with_capacity(meta.len());
    let mut keys = Vec::with_capacity(meta.len());
    for (rowid, (key, value, protection)) in (1..).zip(meta) {
        let record = encode_record(&[
            Column::Text(key),
            Column::Text(value),
            Column::Text(protection),
        ]);
        rows.push(image.table_cell(rowid, &record));
        keys.push((key, rowid));
    }
    if !image.fill_table(roots.meta, &rows)? || !image.fill_index(roots.meta_key, &mut keys)? {
        return Ok(None);
    }

    let config_row = encode_record(&[Column::Null, Column::Text(config_text), Column::Text(now)]);
    let config_cell = image.table_cell(1, &config_row);
    if !image.fill_table(roots.config, &[config_cell])? {
        return Ok(None);
    }

    let date = now.get(..10).unwrap_or(now);
    let core: Vec<(&str, String)> = defaults::CORE_FILES
        .iter()
        .map(|path| {
            let content = defaults::core_file_content(path, agent.name, date).unwrap_or_default();
            (*path, content)
        })
        .collect();
    let mut rows = Vec::with_capacity(core.len() + 1);
    let mut paths = Vec::with_capacity(core.len() + 1);
    let files = core
        .iter()
        .map(|(path, content)| (*path, content.as_str(), "text/markdown", "no_delete"))
        .chain(std::iter::once((
            skills::REGISTRY_PATH,
            template.registry.as_str(),
            "application/json",
            "read_only",
        )));
    for (rowid, (path, content, mime, protection)) in (1..).zip(files) {
        let record = encode_record(&[
            Column::Text(path),
            Column::Blob(content.as_bytes()),
            Column::Text(mime),
            Column::Int(content.len() as i64),
            Column::Text(protection),
            Column::Int(0),
            Column::Text(now),
            Column::Text(now),
        ]);
        rows.push(image.table_cell(rowid, &record));
        paths.push((path, rowid));
    }
    if !image.fill_table(roots.files, &rows)? || !image.fill_index(roots.files_path, &mut paths)? {
        return Ok(None);
    }

    image.set_page_count()?;
    crate::file::mark_wal_mode(image.page_mut(1)?)?;
    Ok(Some(NewFile {
        base: image.base,
        page_size: image.page_size,
        replaced: image.replaced,
        appended: image.appended,
    }))
}

/// A new file as [`build`] makes it: the shared schema image with a few pages replaced and
/// overflow pages appended, written without copying the unchanged pages.
#[derive(Debug)]
pub(crate) struct NewFile {
    base: &'static [u8],
    page_size: usize,
    replaced: std::collections::BTreeMap<u32, Vec<u8>>,
    appended: Vec<u8>,
}

impl NewFile {
    /// The file's bytes in order, as runs of the schema image and the pages that replace or
    /// follow it.
    pub(crate) fn slices(&self) -> Vec<std::io::IoSlice<'_>> {
        let mut slices = Vec::with_capacity(2 * self.replaced.len() + 2);
        let mut next = 0;
        for (page, bytes) in &self.replaced {
            let start = (*page as usize - 1) * self.page_size;
            if start > next {
                slices.push(std::io::IoSlice::new(&self.base[next..start]));
            }
            slices.push(std::io::IoSlice::new(bytes));
            next = start + self.page_size;
        }
        if next < self.base.len() {
            slices.push(std::io::IoSlice::new(&self.base[next..]));
        }
        if !self.appended.is_empty() {
            slices.push(std::io::IoSlice::new(&self.appended));
        }
        slices
    }

    /// The whole file in one buffer.
    #[cfg(test)]
    pub(crate) fn to_vec(&self) -> Vec<u8> {
        self.slices()
            .iter()
            .flat_map(|slice| slice.iter().copied())
            .collect()
    }
}

/// The file being assembled: the schema image, copies of the pages that change, and overflow
/// pages appended as cells need them.
struct Image {
    base: &'static [u8],
    page_size: usize,
    replaced: std::collections::BTreeMap<u32, Vec<u8>>,
    appended: Vec<u8>,
}

impl Image {
    /// Largest payload a table leaf keeps on its page (fileformat2 §1.6, "X").
    fn table_max_local(&self) -> usize {
        self.page_size - 35
    }

    /// Largest payload an index page keeps on its page.
    fn index_max_local(&self) -> usize {
        (self.page_size - 12) * 64 / 255 - 23
    }

    /// Least payload kept on the page once it spills ("M").
    fn min_local(&self) -> usize {
        (self.page_size - 12) * 32 / 255 - 23
    }

    fn table_cell(&mut self, rowid: i64, record: &[u8]) -> Vec<u8> {
        let mut cell = Vec::with_capacity(record.len().min(self.page_size) + 18);
        put_varint(&mut cell, record.len() as u64);
        put_varint(&mut cell, rowid as u64);
        let max_local = self.table_max_local();
        self.spill(cell, record, max_local)
    }

    fn index_cell(&mut self, record: &[u8]) -> Vec<u8> {
        let mut cell = Vec::with_capacity(record.len().min(self.page_size) + 9);
        put_varint(&mut cell, record.len() as u64);
        let max_local = self.index_max_local();
        self.spill(cell, record, max_local)
    }

    /// Completes `cell` with the payload: whole when it fits, else the local part the format
    /// prescribes and the number of the first page of an overflow chain written for the rest.
    fn spill(&mut self, mut cell: Vec<u8>, payload: &[u8], max_local: usize) -> Vec<u8> {
        if payload.len() <= max_local {
            cell.extend_from_slice(payload);
            return cell;
        }
        let min_local = self.min_local();
        let per_page = self.page_size - 4;
        let surplus = min_local + (payload.len() - min_local) % per_page;
        let local = if surplus <= max_local {
            surplus
        } else {
            min_local
        };
        let (here, rest) = payload.split_at(local);
        cell.extend_from_slice(here);
        let first = self.page_count() + 1;
        let chunks = rest.chunks(per_page);
        let last = chunks.len();
        for (i, chunk) in chunks.enumerate() {
            let next = if i + 1 == last {
                0
            } else {
                first + i as u32 + 1
            };
            let start = self.appended.len();
            self.appended.resize(start + self.page_size, 0);
            self.appended[start..start + 4].copy_from_slice(&next.to_be_bytes());
            self.appended[start + 4..start + 4 + chunk.len()].copy_from_slice(chunk);
        }
        cell.extend_from_slice(&first.to_be_bytes());
        cell
    }

    fn page_count(&self) -> u32 {
        ((self.base.len() + self.appended.len()) / self.page_size) as u32
    }

    /// Page `page` of the schema image (numbered from 1), copied on first change.
    fn page_mut(&mut self, page: u32) -> Result<&mut [u8]> {
        let size = self.page_size;
        let base = self.base;
        let start = (page as usize)
            .checked_sub(1)
            .map(|index| index * size)
            .filter(|start| start + size <= base.len())
            .ok_or_else(|| {
                StoreError::invalid(format!("page {page} is not in the schema image"))
            })?;
        Ok(self
            .replaced
            .entry(page)
            .or_insert_with(|| base[start..start + size].to_vec())
            .as_mut_slice())
    }

    fn fill_table(&mut self, page: u32, cells: &[Vec<u8>]) -> Result<bool> {
        self.fill_leaf(page, TABLE_LEAF, cells)
    }

    /// Fills an index of `(key text, rowid)` entries, sorted the way `BINARY` collation sorts
    /// them (byte order, then length).
    fn fill_index(&mut self, page: u32, entries: &mut [(&str, i64)]) -> Result<bool> {
        entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        let mut cells = Vec::with_capacity(entries.len());
        for (key, rowid) in entries.iter() {
            let record = encode_record(&[Column::Text(key), Column::Int(*rowid)]);
            cells.push(self.index_cell(&record));
        }
        self.fill_leaf(page, INDEX_LEAF, &cells)
    }

    /// Writes `cells` into the empty leaf `page` (cell 0 at the end of the page, as SQLite
    /// places the first insert). Answers `false` when they do not fit on one page.
    fn fill_leaf(&mut self, page: u32, flag: u8, cells: &[Vec<u8>]) -> Result<bool> {
        let size = self.page_size;
        let header = if page == 1 { HEADER_LEN } else { 0 };
        let pointers = header + 8;
        let content: usize = cells.iter().map(Vec::len).sum();
        if pointers + 2 * cells.len() + content > size {
            return Ok(false);
        }
        let bytes = self.page_mut(page)?;
        if bytes[header] != flag || bytes[header + 3..header + 5] != [0, 0] {
            return Err(StoreError::invalid(format!(
                "page {page} of the schema image is not an empty leaf"
            )));
        }
        let mut top = size;
        for (i, cell) in cells.iter().enumerate() {
            top -= cell.len();
            bytes[top..top + cell.len()].copy_from_slice(cell);
            let slot = pointers + 2 * i;
            bytes[slot..slot + 2].copy_from_slice(&(top as u16).to_be_bytes());
        }
        bytes[header] = flag;
        bytes[header + 1..header + 3].copy_from_slice(&[0, 0]);
        bytes[header + 3..header + 5].copy_from_slice(&(cells.len() as u16).to_be_bytes());
        // A content area starting at 65536 is stored as 0.
        bytes[header + 5..header + 7].copy_from_slice(&(top as u16).to_be_bytes());
        bytes[header + 7] = 0;
        Ok(true)
    }

    /// The header as a commit leaves it: the change counter (24..28) advanced, the database
    /// size in pages (28..32), which SQLite trusts because the version-valid-for number
    /// (92..96) equals the counter, and the SQLite version that wrote the file (96..100).
    fn set_page_count(&mut self) -> Result<()> {
        let count = self.page_count();
        let header = self
            .page_mut(1)?
            .get_mut(..HEADER_LEN)
            .ok_or_else(|| StoreError::invalid("the image has no header"))?;
        let counter = u32::from_be_bytes([header[24], header[25], header[26], header[27]])
            .wrapping_add(1)
            .to_be_bytes();
        header[24..28].copy_from_slice(&counter);
        header[28..32].copy_from_slice(&count.to_be_bytes());
        header[92..96].copy_from_slice(&counter);
        header[96..100].copy_from_slice(&rusqlite::version_number().to_be_bytes());
        Ok(())
    }
}

/// A record (fileformat2 §2.1): header of serial types, then the values, integers in the
/// fewest bytes that hold them and 0 and 1 as the body-less types 8 and 9 (schema format 4).
pub(crate) fn encode_record(columns: &[Column<'_>]) -> Vec<u8> {
    let mut types = Vec::with_capacity(columns.len() * 2);
    let mut body = Vec::new();
    for column in columns {
        match *column {
            Column::Null => put_varint(&mut types, 0),
            Column::Int(value) => {
                let (serial, len) = int_serial_type(value);
                put_varint(&mut types, serial);
                body.extend_from_slice(&value.to_be_bytes()[8 - len..]);
            }
            Column::Text(text) => {
                put_varint(&mut types, 13 + 2 * text.len() as u64);
                body.extend_from_slice(text.as_bytes());
            }
            Column::Blob(blob) => {
                put_varint(&mut types, 12 + 2 * blob.len() as u64);
                body.extend_from_slice(blob);
            }
        }
    }
    // The header's size counts its own varint.
    let mut header_len = types.len() + 1;
    while varint_len(header_len as u64) + types.len() != header_len {
        header_len = varint_len(header_len as u64) + types.len();
    }
    let mut record = Vec::with_capacity(header_len + body.len());
    put_varint(&mut record, header_len as u64);
    record.extend_from_slice(&types);
    record.extend_from_slice(&body);
    record
}

fn int_serial_type(value: i64) -> (u64, usize) {
    if value == 0 {
        return (8, 0);
    }
    if value == 1 {
        return (9, 0);
    }
    let magnitude = if value < 0 { !value } else { value };
    match magnitude {
        0..=0x7f => (1, 1),
        0x80..=0x7fff => (2, 2),
        0x8000..=0x7f_ffff => (3, 3),
        0x80_0000..=0x7fff_ffff => (4, 4),
        0x8000_0000..=0x7fff_ffff_ffff => (5, 6),
        _ => (6, 8),
    }
}

/// SQLite's big-endian varint: seven bits a byte with the high bit as "more", except that a
/// ninth byte carries a full eight.
pub(crate) fn put_varint(out: &mut Vec<u8>, value: u64) {
    if value >> 56 != 0 {
        let mut bytes = [0u8; 9];
        bytes[8] = value as u8;
        let mut rest = value >> 8;
        for byte in bytes[..8].iter_mut().rev() {
            *byte = (rest as u8 & 0x7f) | 0x80;
            rest >>= 7;
        }
        out.extend_from_slice(&bytes);
        return;
    }
    let mut groups = [0u8; 8];
    let mut count = 0;
    let mut rest = value;
    loop {
        groups[count] = (rest as u8 & 0x7f) | 0x80;
        count += 1;
        rest >>= 7;
        if rest == 0 {
            break;
        }
    }
    // The least significant group goes last and ends the varint.
    groups[0] &= 0x7f;
    out.extend(groups[..count].iter().rev());
}

fn varint_len(value: u64) -> usize {
    let mut out = Vec::with_capacity(9);
    put_varint(&mut out, value);
    out.len()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn varints_match_the_file_format() {
        let cases: [(u64, &[u8]); 6] = [
            (0, &[0x00]),
            (0x7f, &[0x7f]),
            (0x80, &[0x81, 0x00]),
            (0x3fff, &[0xff, 0x7f]),
            (0x4000, &[0x81, 0x80, 0x00]),
            (u64::MAX, &[0xff; 9]),
        ];
        for (value, expected) in cases {
            let mut out = Vec::new();
            put_varint(&mut out, value);
            assert_eq!(out, expected, "varint of {value:#x}");
        }
    }

    fn agent<'a>(name: &'a str, description: &'a str) -> NewAgent<'a> {
        NewAgent {
            id: "abcDEF123_-x",
            name,
            handle: "h-1",
            description,
            now_iso: "2026-12-01T23:00:00.000Z",
        }
    }

    /// Opens `bytes` read-only as a plain SQLite reader would.
    fn reader(dir: &std::path::Path, name: &str, bytes: &[u8]) -> Connection {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        Connection::open_with_flags(
            format!("file:{}?immutable=1", path.display()),
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_URI,
        )
        .unwrap()
    }

    /// Every row of the schema and of every table, as text, in rowid order.
    fn dump(conn: &Connection) -> Vec<String> {
        let mut tables: Vec<String> = conn
            .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")
            .unwrap()
            .query_map([], |row| row.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        tables.push("sqlite_schema".to_owned());
        let mut out = Vec::new();
        for table in tables {
            let mut stmt = conn
                .prepare(&format!("SELECT rowid, * FROM \"{table}\" ORDER BY rowid"))
                .unwrap();
            let columns = stmt.column_count();
            let rows = stmt
                .query_map([], |row| {
                    let mut line = format!("{table}:");
                    for i in 0..columns {
                        let value: rusqlite::types::Value = row.get(i)?;
                        line.push_str(&format!(" {value:?}"));
                    }
                    Ok(line)
                })
                .unwrap();
            for row in rows {
                out.push(row.unwrap());
            }
        }
        out
    }

    fn integrity(conn: &Connection) -> Vec<String> {
        conn.prepare("PRAGMA integrity_check")
            .unwrap()
            .query_map([], |row| row.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap()
    }

    #[test]
    fn sto_03_sto_14_page_built_file_equals_the_sqlite_built_file() {
        let dir = tempfile::tempdir().unwrap();
        let template = template().unwrap();
        let long = "a long description. ".repeat(2_000);
        for (i, (name, description)) in [
            ("plain", ""),
            ("quote \" and \\ backslash", "tab\tnew\nline"),
            ("émoji 🦊", long.as_str()),
        ]
        .into_iter()
        .enumerate()
        {
            let agent = agent(name, description);
            let config = template.config_text(&agent);
            let built = build(template, &agent, &config).unwrap().unwrap().to_vec();
            let reference =
                crate::file::sqlite_file_image(&template.schema, &agent, &config).unwrap();
            assert_eq!(built.len() % template.page_size, 0);
            // The header as SQLite writes it: only the page count may differ.
            let header = |bytes: &[u8]| {
                let mut header = bytes[..HEADER_LEN].to_vec();
                header[24..32].fill(0);
                header[92..96].fill(0);
                header
            };
            assert_eq!(header(&built), header(&reference), "case {i}");
            assert_eq!((built[18], built[19]), (2, 2), "WAL mode");
            let ours = reader(dir.path(), &format!("ours{i}.adf"), &built);
            let theirs = reader(dir.path(), &format!("theirs{i}.adf"), &reference);
            assert_eq!(integrity(&ours), vec!["ok".to_owned()], "case {i}");
            let ours_rows = dump(&ours);
            assert!(ours_rows.len() > 40, "schema and rows are read back");
            let theirs_rows = dump(&theirs);
            assert_eq!(ours_rows.len(), theirs_rows.len(), "case {i}");
            // The SQLite path stamps the registry with its own clock reading; ours uses the
            // creation time. Everything before the timestamps must match.
            let without_registry_times = |row: &str| match row.find("Text(\"read_only\")") {
                Some(at) if row.contains("skills-registry.json") => row[..at].to_owned(),
                _ => row.to_owned(),
            };
            for (ours, theirs) in ours_rows.iter().zip(&theirs_rows) {
                assert_eq!(
                    without_registry_times(ours),
                    without_registry_times(theirs),
                    "case {i}"
                );
            }
            assert!(
                ours_rows
                    .iter()
                    .any(|row| row.contains("skills-registry.json") && row.contains(agent.now_iso)),
                "the registry carries the creation time"
            );
            // The primary-key indexes answer lookups.
            let handle: String = ours
                .query_row(
                    "SELECT value FROM adf_meta INDEXED BY sqlite_autoindex_adf_meta_1 WHERE key = 'adf_handle'",
                    [],
                    |row| row.get(0),
                )
                .unwrap();
            assert_eq!(handle, "h-1");
            let size: i64 = ours
                .query_row(
                    "SELECT size FROM adf_files INDEXED BY sqlite_autoindex_adf_files_1 WHERE path = 'soul.md'",
                    [],
                    |row| row.get(0),
                )
                .unwrap();
            assert_eq!(size, defaults::SOUL.len() as i64);
        }
    }

    #[test]
    fn sto_03_rows_too_large_for_one_leaf_fall_back_to_sqlite() {
        let template = template().unwrap();
        // A name just under a page stays whole on its leaf, in `adf_meta` and in README.md,
        // so neither leaf has room for its other rows.
        let name = "n".repeat(3_900);
        let agent = agent(&name, "");
        let config = template.config_text(&agent);
        assert!(build(template, &agent, &config).unwrap().is_none());
    }

    #[test]
    fn config_text_is_the_serialized_default_config() {
        let template = template().unwrap();
        for (name, description) in [
            ("plain", ""),
            ("quote \" and \\ backslash", "tab\tnew\nline \u{1} ctl"),
            ("émoji 🦊", "ünïcödé"),
        ] {
            let agent = agent(name, description);
            assert_eq!(
                template.config_text(&agent),
                defaults::default_config(&agent).to_string()
            );
        }
    }
}
