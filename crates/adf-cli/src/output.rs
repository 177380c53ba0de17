//! Human and JSON output: every command prints either a readable table or, with `--json`, one
//! JSON document on stdout.

use serde::Serialize;

/// Where a command's result goes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Output {
    pub json: bool,
}

impl Output {
    /// Prints `value` as JSON when `--json` is set; otherwise calls `human`.
    pub(crate) fn emit<T: Serialize>(&self, value: &T, human: impl FnOnce()) -> anyhow::Result<()> {
        if self.json {
            println!("{}", serde_json::to_string_pretty(value)?);
        } else {
            human();
        }
        Ok(())
    }
}

/// A plain-text table with aligned columns.
#[derive(Debug, Default)]
pub(crate) struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub(crate) fn new(header: &[&str]) -> Self {
        Self {
            header: header.iter().map(|h| (*h).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    pub(crate) fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub(crate) fn print(&self) {
        if self.rows.is_empty() {
            println!("(none)");
            return;
        }
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate() {
                if let Some(width) = widths.get_mut(i) {
                    *width = (*width).max(cell.chars().count());
                }
            }
        }
        let line = |cells: &[String]| {
            let mut text = String::new();
            for (i, cell) in cells.iter().enumerate() {
                let width = widths.get(i).copied().unwrap_or(0);
                if i + 1 == cells.len() {
                    text.push_str(cell);
                } else {
                    text.push_str(cell);
                    text.push_str(&" ".repeat(width.saturating_sub(cell.chars().count()) + 2));
                }
            }
            println!("{}", text.trim_end());
        };
        line(&self.header);
        for row in &self.rows {
            line(row);
        }
    }
}

/// Shortens text to at most `max` characters (an ellipsis marking the cut) on one line, for a
/// table cell or a one-line summary of a tool call. Control characters become spaces, so text
/// from a model or a file cannot break the line or move the cursor.
pub(crate) fn clip(text: &str, max: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if flat.chars().count() <= max {
        flat
    } else {
        let mut cut: String = flat.chars().take(max.saturating_sub(1)).collect();
        cut.push('…');
        cut
    }
}

/// Epoch milliseconds as a UTC timestamp for humans.
pub(crate) fn format_ms(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
        .unwrap_or_else(|| ms.to_string())
}

/// Byte counts for humans.
pub(crate) fn format_size(bytes: i64) -> String {
    match bytes {
        b if b < 1024 => format!("{b} B"),
        b if b < 1024 * 1024 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0)),
    }
}

#[cfg(test)]
mod tests {
    use super::clip;

    #[test]
    fn clip_stays_within_max_on_one_line() {
        assert_eq!(clip("short", 10), "short");
        let clipped = clip("abcdefghij-tail", 8);
        assert_eq!(clipped.chars().count(), 8);
        assert!(
            clipped.starts_with("abcdefg") && clipped.ends_with('…'),
            "{clipped}"
        );
        // A model's output with a carriage return or an escape must not redraw the terminal line.
        assert_eq!(clip("a\nb\r\tc\u{1b}[2K", 40), "a b  c [2K");
    }
}
