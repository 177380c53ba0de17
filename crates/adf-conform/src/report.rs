//! Results and their three renderings (human, JSON, JUnit XML).

use std::fmt::Write as _;

use serde::Serialize;
use serde_json::{Value, json};

/// Version of the `--json` document; bumped only on an incompatible change.
pub const REPORT_SCHEMA: u32 = 1;

/// A judge's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The requirement holds.
    Pass,
    /// The requirement is broken; `detail` says what was found.
    Fail,
    /// The requirement could not be judged here; `detail` says why.
    Skip,
}

/// What a judge returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The verdict.
    pub status: Status,
    /// What was found (fail) or why not judged (skip); may be empty on pass.
    pub detail: String,
}

impl Outcome {
    /// The requirement holds.
    pub fn pass() -> Self {
        Self {
            status: Status::Pass,
            detail: String::new(),
        }
    }

    /// The requirement is broken: `found` says what was seen.
    pub fn fail(found: impl Into<String>) -> Self {
        Self {
            status: Status::Fail,
            detail: found.into(),
        }
    }

    /// Not judgeable here: `why`.
    pub fn skip(why: impl Into<String>) -> Self {
        Self {
            status: Status::Skip,
            detail: why.into(),
        }
    }

    /// Pass when `problems` is empty, else fail listing them (at most ten shown).
    pub fn from_problems(problems: Vec<String>) -> Self {
        if problems.is_empty() {
            return Self::pass();
        }
        let shown: Vec<&str> = problems.iter().take(10).map(String::as_str).collect();
        let more = problems.len().saturating_sub(shown.len());
        let mut detail = shown.join("; ");
        if more > 0 {
            let _ = write!(detail, "; and {more} more");
        }
        Self::fail(detail)
    }
}

/// One row's result.
#[derive(Debug, Clone, Serialize)]
pub struct CheckResult {
    /// Stable name of the check (`section.slug`), unique in its subject's table.
    pub name: &'static str,
    /// Checklist IDs it judges.
    pub ids: &'static [&'static str],
    /// Report section.
    pub section: &'static str,
    /// The requirement, in one line.
    pub description: &'static str,
    /// The verdict.
    pub status: Status,
    /// What was found or why skipped.
    pub detail: String,
}

/// All results for one subject.
#[derive(Debug, Clone)]
pub struct Report {
    /// `file`, `daemon` or `mesh`.
    pub subject: &'static str,
    /// The file path or URL judged.
    pub target: String,
    /// One result per row, in table order.
    pub results: Vec<CheckResult>,
}

impl Report {
    /// Whether any check failed (the exit code is non-zero exactly then).
    pub fn failed(&self) -> bool {
        self.results.iter().any(|r| r.status == Status::Fail)
    }

    /// The result of the check named `name`.
    pub fn result(&self, name: &str) -> Option<&CheckResult> {
        self.results.iter().find(|r| r.name == name)
    }

    /// Names of the failed checks, in table order.
    pub fn failures(&self) -> Vec<&'static str> {
        self.results
            .iter()
            .filter(|r| r.status == Status::Fail)
            .map(|r| r.name)
            .collect()
    }

    /// Section names in order of first appearance.
    fn sections(&self) -> Vec<&'static str> {
        let mut sections: Vec<&'static str> = Vec::new();
        for result in &self.results {
            if !sections.contains(&result.section) {
                sections.push(result.section);
            }
        }
        sections
    }

    fn count(&self, status: Status) -> usize {
        self.results.iter().filter(|r| r.status == status).count()
    }

    /// The `--json` document (schema [`REPORT_SCHEMA`], see `docs/conformance.md`).
    pub fn to_json(&self) -> Value {
        json!({
            "schema": REPORT_SCHEMA,
            "kit": "adf-conform",
            "kit_version": env!("CARGO_PKG_VERSION"),
            "subject": self.subject,
            "target": self.target,
            "summary": {
                "pass": self.count(Status::Pass),
                "fail": self.count(Status::Fail),
                "skip": self.count(Status::Skip),
            },
            "ok": !self.failed(),
            "results": self.results,
        })
    }

    /// A summary by section for a terminal.
    pub fn to_human(&self) -> String {
        let mut out = format!("adf conform {} {}\n", self.subject, self.target);
        for section in self.sections() {
            let _ = writeln!(out, "\n[{section}]");
            for result in self.results.iter().filter(|r| r.section == section) {
                let mark = match result.status {
                    Status::Pass => "pass",
                    Status::Fail => "FAIL",
                    Status::Skip => "skip",
                };
                let _ = write!(
                    out,
                    "  {mark}  {} ({}) {}",
                    result.name,
                    result.ids.join(", "),
                    result.description
                );
                if !result.detail.is_empty() {
                    let _ = write!(out, "\n        {}", result.detail);
                }
                out.push('\n');
            }
        }
        let _ = writeln!(
            out,
            "\n{} passed, {} failed, {} skipped",
            self.count(Status::Pass),
            self.count(Status::Fail),
            self.count(Status::Skip)
        );
        out
    }

    /// JUnit XML: one `testsuite` per section, one `testcase` per check.
    pub fn to_junit(&self) -> String {
        let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        let _ = writeln!(
            out,
            "<testsuites name=\"adf conform {}\" tests=\"{}\" failures=\"{}\" skipped=\"{}\">",
            self.subject,
            self.results.len(),
            self.count(Status::Fail),
            self.count(Status::Skip)
        );
        for section in self.sections() {
            let rows: Vec<&CheckResult> = self
                .results
                .iter()
                .filter(|r| r.section == section)
                .collect();
            let failures = rows.iter().filter(|r| r.status == Status::Fail).count();
            let skipped = rows.iter().filter(|r| r.status == Status::Skip).count();
            let _ = writeln!(
                out,
                "  <testsuite name=\"{}.{}\" tests=\"{}\" failures=\"{failures}\" skipped=\"{skipped}\">",
                self.subject,
                xml(section),
                rows.len()
            );
            for row in rows {
                let _ = write!(
                    out,
                    "    <testcase classname=\"{}.{}\" name=\"{} [{}]\"",
                    self.subject,
                    xml(section),
                    xml(row.name),
                    xml(&row.ids.join(","))
                );
                match row.status {
                    Status::Pass => out.push_str("/>\n"),
                    Status::Fail => {
                        let _ = writeln!(
                            out,
                            ">\n      <failure message=\"{}\">{}</failure>\n    </testcase>",
                            xml(&row.detail),
                            xml(row.description)
                        );
                    }
                    Status::Skip => {
                        let _ = writeln!(
                            out,
                            ">\n      <skipped message=\"{}\"/>\n    </testcase>",
                            xml(&row.detail)
                        );
                    }
                }
            }
            out.push_str("  </testsuite>\n");
        }
        out.push_str("</testsuites>\n");
        out
    }
}

fn xml(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}
